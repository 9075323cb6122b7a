/* Collection for /metrics: fills an exporters/metrics_snapshot.h snapshot
 * from the registry (each pool copied under its own locks), the sampler's
 * device readings and the configured labels. */
#ifndef GPUPOOL_METRICS_COLLECT_H
#define GPUPOOL_METRICS_COLLECT_H

#include "exporters/metrics_snapshot.h"

/* Fills s (zero-initialised or reused); hostname and const_labels (already
 * rendered name="value" pairs, "" for none) label every series. 0 or -1 when
 * memory ran out. */
int metrics_snapshot_take(metrics_snapshot *s, const char *hostname, const char *const_labels);

#endif
