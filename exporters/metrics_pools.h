/* The per-pool families of /metrics: sizes, counts, the allocation-size
 * histogram, device-call time, trace-event counts and cudaMemPool numbers. */
#ifndef GPUPOOL_METRICS_POOLS_H
#define GPUPOOL_METRICS_POOLS_H

#include "metrics_snapshot.h"
#include "prom_writer.h"

void metrics_write_pools(prom_writer *w, const metrics_snapshot *s);

#endif
