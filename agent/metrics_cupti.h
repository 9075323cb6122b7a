/* The CUPTI families of /metrics: whether the subscriber is up (and why not),
 * its record counts, and every CUDA allocation of the process by device,
 * memory kind and owner (inside a gpupool segment or not). */
#ifndef GPUPOOL_METRICS_CUPTI_H
#define GPUPOOL_METRICS_CUPTI_H

#include "exporters/metrics_snapshot.h"
#include "exporters/prom_writer.h"

void metrics_write_cupti(prom_writer *w, const metrics_snapshot *s, double created_s);

#endif
