/* The value types a pool both keeps in its counters (types.h) and copies out
 * to readers (pool_view.h): apart, so that the read-side API does not see the
 * pool's internals and the internals do not include the read-side API. */
#ifndef GPUPOOL_VIEW_TYPES_H
#define GPUPOOL_VIEW_TYPES_H

#include <stdint.h>

/* Allocation sizes (requested bytes): bucket i counts requests with
 * size <= 2^i bytes and > 2^(i-1) (bucket 0: size <= 1). Non-cumulative. */
#define POOL_HIST_BUCKETS 41 /* up to 1 TiB; larger requests land in the last */
typedef struct pool_histogram {
  uint64_t bucket[POOL_HIST_BUCKETS];
  uint64_t count;
  uint64_t sum; /* bytes */
} pool_histogram;

/* Device-call latency: total and count of segment allocations and frees. */
typedef struct pool_device_timing {
  uint64_t alloc_count, alloc_ns_total, free_count, free_ns_total;
} pool_device_timing;

#endif
