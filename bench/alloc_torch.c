/* PyTorch's caching allocator behind the benchmarks' allocator interface:
 * opens the shim (torch_shim.h) with dlopen. The shim's path is
 * $GPUPOOL_BENCH_TORCH_SHIM when set, else the one the build made
 * (BENCH_TORCH_SHIM_PATH, absent when no PyTorch was found at configure time). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_alloc.h"
#include "torch_shim.h"

typedef struct torch_api {
  int (*abi)(void);
  const char *(*version)(void);
  int (*init)(int, char *, size_t);
  void *(*alloc)(size_t, void *);
  void (*free)(void *);
  void (*empty_cache)(void);
  void (*reset_stats)(void);
  int (*stats)(uint64_t[4]);
} torch_api;

/* The shim stays loaded for the life of the process: libtorch does not
 * unload cleanly, and every allocator made from it shares it. */
static torch_api api;
static char loaded_version[160];

static const char *shim_path(void) {
  const char *env = getenv("GPUPOOL_BENCH_TORCH_SHIM");
  if (env && *env)
    return env;
#ifdef BENCH_TORCH_SHIM_PATH
  return BENCH_TORCH_SHIM_PATH;
#else
  return NULL;
#endif
}

static int load_api(char *why, size_t whylen) {
  if (api.abi)
    return 0;
  const char *path = shim_path();
  if (!path) {
    snprintf(why, whylen, "no libtorch");
    return -1;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, whylen, "no libtorch: %s", dlerror());
    return -1;
  }
  torch_api t;
  /* POSIX allows converting dlsym's void * to a function pointer this way. */
  *(void **)&t.abi = dlsym(h, "gpupool_bench_torch_abi");
  *(void **)&t.version = dlsym(h, "gpupool_bench_torch_version");
  *(void **)&t.init = dlsym(h, "gpupool_bench_torch_init");
  *(void **)&t.alloc = dlsym(h, "gpupool_bench_torch_alloc");
  *(void **)&t.free = dlsym(h, "gpupool_bench_torch_free");
  *(void **)&t.empty_cache = dlsym(h, "gpupool_bench_torch_empty_cache");
  *(void **)&t.reset_stats = dlsym(h, "gpupool_bench_torch_reset_stats");
  *(void **)&t.stats = dlsym(h, "gpupool_bench_torch_stats");
  if (!t.abi || !t.version || !t.init || !t.alloc || !t.free || !t.empty_cache || !t.reset_stats ||
      !t.stats) {
    snprintf(why, whylen, "%s lacks the shim's functions", path);
    dlclose(h);
    return -1;
  }
  if (t.abi() != GPUPOOL_BENCH_TORCH_ABI) {
    snprintf(why, whylen, "%s is shim version %d, expected %d", path, t.abi(),
             GPUPOOL_BENCH_TORCH_ABI);
    dlclose(h);
    return -1;
  }
  api = t;
  return 0;
}

static int t_alloc(void *ctx, void **ptr, size_t size, void *stream) {
  *ptr = api.alloc(size, stream);
  return *ptr ? 0 : -1;
}

static void t_free(void *ctx, void *ptr, size_t size, void *stream) {
  api.free(ptr);
}

static void t_trim(void *ctx) {
  api.empty_cache();
}

static int t_stats(void *ctx, bench_alloc_stats *out) {
  uint64_t v[4];
  if (api.stats(v))
    return -1;
  out->peak_reserved = v[0];
  out->peak_allocated = v[1];
  out->device_allocs = v[2];
  out->device_frees = v[3];
  out->have_device_calls = 1;
  return 0;
}

static void t_destroy(void *ctx) {
  api.empty_cache();
}

int bench_alloc_torch(bench_alloc *a, int device, char *why, size_t whylen) {
  memset(a, 0, sizeof *a);
  if (load_api(why, whylen))
    return -1;
  char err[256] = "";
  if (api.init(device, err, sizeof err)) {
    snprintf(why, whylen, "libtorch: %s", err);
    return -1;
  }
  snprintf(loaded_version, sizeof loaded_version, "%s", api.version());
  /* Start from an empty cache with fresh statistics. */
  api.empty_cache();
  api.reset_stats();
  snprintf(a->name, sizeof a->name, "torch");
  a->alloc = t_alloc;
  a->free = t_free;
  a->trim = t_trim;
  a->stats = t_stats;
  a->destroy = t_destroy;
  return 0;
}

const char *bench_torch_version(void) {
  return loaded_version;
}
