/* The per-pool families of /metrics: sizes, counts, the allocation-size
 * histogram, device-call time, trace-event counts and cudaMemPool numbers. */
#ifndef GPUPOOL_METRICS_POOLS_H
#define GPUPOOL_METRICS_POOLS_H

#include "metrics_snapshot.h"
#include "prom_writer.h"

void metrics_write_pools(prom_writer *w, const metrics_snapshot *s);

/* gpupool_allocation_size_bytes: 0 (the default) renders the coarse buckets
 * (le = 512 B, 2 KiB, ... 32 GiB: 14 and +Inf), 1 the classic ones (le = 1,
 * 2, 4, ... 2^39 B: 40 and +Inf). The agent sets it from size_buckets. */
void metrics_pools_size_buckets(int classic);

#endif
