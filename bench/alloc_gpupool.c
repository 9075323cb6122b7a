/* gpupool behind the benchmarks' allocator interface. */
#include <stdio.h>
#include <string.h>

#include "bench_alloc.h"

static int gp_alloc(void *ctx, void **ptr, size_t size, void *stream) {
  return gpupool_malloc(ctx, ptr, size, stream) == GPUPOOL_OK ? 0 : -1;
}

static void gp_free(void *ctx, void *ptr, size_t size, void *stream) {
  gpupool_free(ctx, ptr);
}

static void gp_trim(void *ctx) {
  gpupool_empty_cache(ctx);
}

static int gp_stats(void *ctx, bench_alloc_stats *out) {
  gpupool_stats s;
  if (gpupool_get_stats(ctx, &s) != GPUPOOL_OK)
    return -1;
  out->peak_reserved = (uint64_t)s.reserved_bytes[GPUPOOL_STAT_ALL].peak;
  out->peak_allocated = (uint64_t)s.allocated_bytes[GPUPOOL_STAT_ALL].peak;
  out->device_allocs = s.num_device_alloc;
  out->device_frees = s.num_device_free;
  out->have_device_calls = 1;
  out->pages_moved = s.num_pages_moved;
  out->device_syncs = s.num_device_syncs;
  out->alloc_unmaps = s.num_alloc_unmaps;
  out->have_pages = 1;
  return 0;
}

static void gp_destroy(void *ctx) {
  gpupool_destroy(ctx);
}

int bench_alloc_gpupool(bench_alloc *a, const char *name, gpupool_backend backend,
                        gpupool_strategy strategy, const char *tunables, size_t host_capacity,
                        char *why, size_t whylen) {
  memset(a, 0, sizeof *a);
  gpupool_options opt = {0};
  opt.name = name;
  opt.backend = backend;
  opt.strategy = strategy;
  opt.tunables = tunables;
  opt.host_capacity = host_capacity;
  opt.ignore_env = 1;
  gpupool *p = NULL;
  gpupool_status st = gpupool_create(&opt, &p);
  if (st != GPUPOOL_OK) {
    snprintf(why, whylen, "%s: %s", gpupool_status_string(st), gpupool_last_error());
    return -1;
  }
  snprintf(a->name, sizeof a->name, "%s", name);
  a->ctx = p;
  a->alloc = gp_alloc;
  a->free = gp_free;
  a->trim = gp_trim;
  a->stats = gp_stats;
  a->destroy = gp_destroy;
  return 0;
}

void bench_alloc_destroy(bench_alloc *a) {
  if (a->destroy)
    a->destroy(a->ctx);
  memset(a, 0, sizeof *a);
}
