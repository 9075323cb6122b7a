/* The per-device families of /metrics: identity and memory of the GPUs
 * (from the driver) and of the host backend's simulated devices. */
#ifndef GPUPOOL_METRICS_DEVICES_H
#define GPUPOOL_METRICS_DEVICES_H

#include "metrics_snapshot.h"
#include "prom_writer.h"

void metrics_write_devices(prom_writer *w, const metrics_snapshot *s);

#endif
