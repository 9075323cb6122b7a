/* The gpupool_advice_* families of /metrics: the last /advice computation
 * (advice_summary.h), nothing until one ran. */
#ifndef GPUPOOL_METRICS_ADVICE_H
#define GPUPOOL_METRICS_ADVICE_H

#include "advice_summary.h"
#include "metrics_snapshot.h"
#include "prom_writer.h"

void metrics_write_advice(prom_writer *w, const metrics_snapshot *s, const advice_summary *a,
                          double now_s);

#endif
