/* One interface over every allocator the benchmarks compare (gpupool's
 * strategies, cudaMalloc, cudaMallocAsync, PyTorch's caching allocator), so
 * that each is timed and replayed by the very same loop: the indirect call
 * costs every column the same. */
#ifndef BENCH_ALLOC_H
#define BENCH_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool/gpupool.h"

/* What the replay reports per allocator. have_device_calls is 0 where the
 * allocator does not expose its device calls (cudaMallocAsync). */
typedef struct bench_alloc_stats {
  uint64_t peak_reserved;
  uint64_t peak_allocated;
  uint64_t device_allocs;
  uint64_t device_frees;
  int have_device_calls;
  /* gpupool with expandable_segments: pages moved, device synchronizations */
  uint64_t pages_moved, device_syncs, alloc_unmaps;
  int have_pages;
} bench_alloc_stats;

typedef struct bench_alloc {
  char name[48]; /* the column heading */
  void *ctx;
  int (*alloc)(void *ctx, void **ptr, size_t size, void *stream); /* 0 on success */
  void (*free)(void *ctx, void *ptr, size_t size, void *stream);
  void (*sync)(void *ctx, void *stream); /* wait for queued work; NULL when there is none */
  void (*trim)(void *ctx);               /* give cached memory back to the device */
  int (*stats)(void *ctx, bench_alloc_stats *out); /* 0 on success */
  void (*destroy)(void *ctx);
} bench_alloc;

/* Each constructor returns 0, or -1 with a short reason in why ("no GPU"). */

/* A gpupool pool on the given backend (GPUPOOL_CONF is ignored, so the
 * numbers do not depend on the caller's environment; tunables may be NULL). */
int bench_alloc_gpupool(bench_alloc *a, const char *name, gpupool_backend backend,
                        gpupool_strategy strategy, const char *tunables, size_t host_capacity,
                        char *why, size_t whylen);
/* cudaMalloc/cudaFree. With track_memory, every allocation also reads
 * cudaMemGetInfo so that stats() can report the peak reserved (replay only). */
int bench_alloc_cuda(bench_alloc *a, int device, int track_memory, char *why, size_t whylen);
/* cudaMallocAsync/cudaFreeAsync on the device's default memory pool, with its
 * release threshold at the maximum as users tune it. */
int bench_alloc_cuda_async(bench_alloc *a, int device, char *why, size_t whylen);
/* PyTorch's caching allocator, through the shim built from bench_torch.cpp. */
int bench_alloc_torch(bench_alloc *a, int device, char *why, size_t whylen);
/* The loaded PyTorch's version and allocator backend; "" before
 * bench_alloc_torch has succeeded. */
const char *bench_torch_version(void);

void bench_alloc_destroy(bench_alloc *a);

#endif
