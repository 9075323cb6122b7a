/* The process-level families of /metrics: build information and the agent's
 * own health (scrapes, their duration, HTTP errors, pools seen). */
#ifndef GPUPOOL_METRICS_AGENT_H
#define GPUPOOL_METRICS_AGENT_H

#include "exporters/metrics_snapshot.h"
#include "exporters/prom_writer.h"

void metrics_write_agent(prom_writer *w, const metrics_snapshot *s);

#endif
