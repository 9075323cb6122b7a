/* libcuda.so.1 through dlopen: see cuda_driver.h. */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

static cuda_driver g_driver;
static const cuda_driver *g_loaded;
static char g_load_error[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_int g_injected;

/* Symbol names: versioned where cuda.h maps the plain name to a _v2 entry. */
static const struct {
  const char *name;
  size_t offset;
} k_symbols[] = {
    {"cuInit", offsetof(cuda_driver, init)},
    {"cuDeviceGetCount", offsetof(cuda_driver, device_get_count)},
    {"cuDeviceGet", offsetof(cuda_driver, device_get)},
    {"cuDeviceGetName", offsetof(cuda_driver, device_get_name)},
    {"cuDeviceGetUuid_v2", offsetof(cuda_driver, device_get_uuid)},
    {"cuDeviceTotalMem_v2", offsetof(cuda_driver, device_total_mem)},
    {"cuGetErrorName", offsetof(cuda_driver, get_error_name)},
};

static void load_once(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(g_load_error, sizeof g_load_error, "no CUDA driver: %s",
             e ? e : "libcuda.so.1 cannot be loaded");
    return;
  }
  for (size_t i = 0; i < sizeof k_symbols / sizeof k_symbols[0]; i++) {
    void *fn = dlsym(h, k_symbols[i].name);
    if (!fn) {
      snprintf(g_load_error, sizeof g_load_error, "libcuda.so.1 has no %s", k_symbols[i].name);
      return; /* the handle stays open: other users of the driver share it */
    }
    *(void **)((char *)&g_driver + k_symbols[i].offset) = fn;
  }
  g_loaded = &g_driver;
}

const cuda_driver *cuda_driver_load(const char **why) {
  pthread_once(&g_once, load_once);
  if (!g_loaded && why)
    *why = g_load_error;
  return g_loaded;
}

static const char *result_name(const cuda_driver *d, cuda_driver_result r) {
  const char *name = NULL;
  if (d->get_error_name(r, &name) != CUDA_DRIVER_SUCCESS || !name)
    return "unknown CUDA error";
  return name;
}

cuda_devices_state cuda_driver_devices(int init, int *count, const char **why) {
  static _Thread_local char reason[160];
  *count = 0;
  const cuda_driver *d = cuda_driver_load(why);
  if (!d)
    return CUDA_DEVICES_NO_DRIVER;
  cuda_driver_result r = init ? d->init(0) : CUDA_DRIVER_SUCCESS;
  if (r == CUDA_DRIVER_SUCCESS)
    r = d->device_get_count(count);
  if (r == CUDA_DRIVER_SUCCESS && *count > 0)
    return CUDA_DEVICES_PRESENT;
  if (r == CUDA_DRIVER_SUCCESS || r == CUDA_DRIVER_NO_DEVICE) {
    *count = 0;
    if (why)
      *why = "the CUDA driver sees no device";
    return CUDA_DEVICES_NONE;
  }
  *count = 0;
  snprintf(reason, sizeof reason, "the CUDA driver failed to initialise: %s (%d)",
           result_name(d, r), r);
  if (why)
    *why = reason;
  return r == CUDA_DRIVER_NOT_INITIALIZED ? CUDA_DEVICES_NOT_READY : CUDA_DEVICES_NO_DRIVER;
}

void cuda_driver_mark_injected(void) {
  atomic_store(&g_injected, 1);
}

int cuda_driver_injected(void) {
  return atomic_load(&g_injected);
}
