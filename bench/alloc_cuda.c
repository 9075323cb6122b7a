/* cudaMalloc and cudaMallocAsync behind the benchmarks' allocator interface.
 * Both use the calling thread's current device (device 0 unless the caller
 * set another); the constructors make `device` current on the calling thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_alloc.h"

#ifdef GPUPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>

static int device_ready(int device, char *why, size_t whylen) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    snprintf(why, whylen, "no GPU");
    return -1;
  }
  if (device < 0 || device >= n || cudaSetDevice(device) != cudaSuccess) {
    snprintf(why, whylen, "no device %d", device);
    return -1;
  }
  return 0;
}

/* ---- cudaMalloc / cudaFree ---- */

typedef struct cuda_ctx {
  int track;        /* replay only: single-threaded, so plain counters suffice */
  size_t base_used; /* device bytes in use when the allocator was made */
  uint64_t live, peak_live, peak_used, allocs, frees;
} cuda_ctx;

static int cm_alloc(void *ctx, void **ptr, size_t size, void *stream) {
  if (cudaMalloc(ptr, size) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  cuda_ctx *c = ctx;
  if (c->track) {
    c->allocs++;
    c->live += size;
    if (c->live > c->peak_live)
      c->peak_live = c->live;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && total_b - free_b > c->base_used) {
      uint64_t used = total_b - free_b - c->base_used;
      if (used > c->peak_used)
        c->peak_used = used;
    }
  }
  return 0;
}

static void cm_free(void *ctx, void *ptr, size_t size, void *stream) {
  cuda_ctx *c = ctx;
  cudaFree(ptr);
  if (c->track) {
    c->frees++;
    c->live -= size;
  }
}

static void cm_trim(void *ctx) {}

static int cm_stats(void *ctx, bench_alloc_stats *out) {
  cuda_ctx *c = ctx;
  if (!c->track)
    return -1;
  out->peak_reserved = c->peak_used;
  out->peak_allocated = c->peak_live;
  out->device_allocs = c->allocs;
  out->device_frees = c->frees;
  out->have_device_calls = 1;
  return 0;
}

static void cm_destroy(void *ctx) {
  free(ctx);
}

int bench_alloc_cuda(bench_alloc *a, int device, int track_memory, char *why, size_t whylen) {
  memset(a, 0, sizeof *a);
  if (device_ready(device, why, whylen))
    return -1;
  cuda_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(why, whylen, "out of host memory");
    return -1;
  }
  c->track = track_memory;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    c->base_used = total_b - free_b;
  snprintf(a->name, sizeof a->name, "cudaMalloc");
  a->ctx = c;
  a->alloc = cm_alloc;
  a->free = cm_free;
  a->trim = cm_trim;
  a->stats = cm_stats;
  a->destroy = cm_destroy;
  return 0;
}

/* ---- cudaMallocAsync / cudaFreeAsync ---- */

typedef struct async_ctx {
  cudaMemPool_t pool;
} async_ctx;

static int ca_alloc(void *ctx, void **ptr, size_t size, void *stream) {
  if (cudaMallocAsync(ptr, size, (cudaStream_t)stream) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return 0;
}

static void ca_free(void *ctx, void *ptr, size_t size, void *stream) {
  cudaFreeAsync(ptr, (cudaStream_t)stream);
}

static void ca_sync(void *ctx, void *stream) {
  cudaStreamSynchronize((cudaStream_t)stream);
}

static void ca_trim(void *ctx) {
  async_ctx *c = ctx;
  cudaDeviceSynchronize();
  cudaMemPoolTrimTo(c->pool, 0);
}

static int ca_stats(void *ctx, bench_alloc_stats *out) {
  async_ctx *c = ctx;
  uint64_t reserved = 0, used = 0;
  if (cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrReservedMemHigh, &reserved) != cudaSuccess ||
      cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrUsedMemHigh, &used) != cudaSuccess)
    return -1;
  memset(out, 0, sizeof *out);
  out->peak_reserved = reserved;
  out->peak_allocated = used;
  out->have_device_calls = 0; /* the driver's pool does not say when it maps memory */
  return 0;
}

static void ca_destroy(void *ctx) {
  ca_trim(ctx);
  free(ctx);
}

int bench_alloc_cuda_async(bench_alloc *a, int device, char *why, size_t whylen) {
  memset(a, 0, sizeof *a);
  if (device_ready(device, why, whylen))
    return -1;
  async_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(why, whylen, "out of host memory");
    return -1;
  }
  uint64_t threshold = UINT64_MAX, zero = 0;
  if (cudaDeviceGetDefaultMemPool(&c->pool, device) != cudaSuccess ||
      cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &threshold) !=
          cudaSuccess) {
    snprintf(why, whylen, "cudaMallocAsync unsupported: %s",
             cudaGetErrorString(cudaGetLastError()));
    free(c);
    return -1;
  }
  /* Start from an empty pool with fresh high-water marks. */
  ca_trim(c);
  cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReservedMemHigh, &zero);
  cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrUsedMemHigh, &zero);
  snprintf(a->name, sizeof a->name, "cudaMallocAsync");
  a->ctx = c;
  a->alloc = ca_alloc;
  a->free = ca_free;
  a->sync = ca_sync;
  a->trim = ca_trim;
  a->stats = ca_stats;
  a->destroy = ca_destroy;
  return 0;
}

#else /* built without CUDA */

int bench_alloc_cuda(bench_alloc *a, int device, int track_memory, char *why, size_t whylen) {
  memset(a, 0, sizeof *a);
  snprintf(why, whylen, "built without CUDA");
  return -1;
}

int bench_alloc_cuda_async(bench_alloc *a, int device, char *why, size_t whylen) {
  memset(a, 0, sizeof *a);
  snprintf(why, whylen, "built without CUDA");
  return -1;
}

#endif
