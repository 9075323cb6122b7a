/* The slow path's policy: a malloc the cache could not serve, with its OOM
 * retry (synchronize, flush, retry), garbage collection, reserve, and
 * returning cached segments to the device (segment.h makes and returns
 * them). Callers hold p->slow_lock and no shard lock. */
#ifndef GPUPOOL_RECLAIM_H
#define GPUPOOL_RECLAIM_H

#include "pool_internal.h"

/* A malloc the hot path could not serve from sh's cache: looks again, then
 * maps pages (vmm segments) or allocates a new segment, with the OOM retry;
 * GPUPOOL_ERR_OOM when that fails. *to_device says whether the device was
 * asked for anything. */
gpupool_status reclaim_malloc(gpupool *p, shard *sh, size_t rounded, size_t requested, block **out,
                              int *to_device);
/* Completes every pending block whose events are done, in every shard. */
void reclaim_poll_all(gpupool *p);
/* Returns every fully free segment (large ones only when large_only) to the
 * device; returns the bytes released. */
size_t reclaim_release_cached(gpupool *p, int large_only);

#endif
