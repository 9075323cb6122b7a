/* The slow path: device allocation with its OOM retry, garbage collection,
 * reserve, and returning cached segments to the device. Callers hold
 * p->slow_lock and no shard lock. */
#ifndef GPUPOOL_RECLAIM_H
#define GPUPOOL_RECLAIM_H

#include "pool_internal.h"

/* Allocates a new segment for a request on shard sh, taking block *out from
 * it; GPUPOOL_ERR_OOM after the retry fails. */
gpupool_status reclaim_alloc_segment(gpupool *p, shard *sh, size_t rounded, size_t requested,
                                     block **out);
/* Completes every pending block whose events are done, in every shard. */
void reclaim_poll_all(gpupool *p);
/* Returns every fully free segment (large ones only when large_only) to the
 * device; returns the bytes released. */
size_t reclaim_release_cached(gpupool *p, int large_only);

#endif
