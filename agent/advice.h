/* GET /advice: the advisor (include/gpupool/advisor.h) over the live
 * process's history, the event rings of every pool. Computed in the HTTP
 * thread that serves the request (an agent thread, never an allocating
 * one), single-threaded, within a deadline, and cached: a request within
 * max_age seconds of the last computation is served from the cache. The
 * summary feeds the gpupool_advice_* gauges of /metrics. */
#ifndef GPUPOOL_AGENT_ADVICE_H
#define GPUPOOL_AGENT_ADVICE_H

#include <stdint.h>

#include "endpoint.h"

#define ADVICE_MAX_POOLS 16

typedef struct advice_pool_summary {
  char pool[128];
  int device;
  uint64_t events;
  uint64_t current_peak_reserved, recommended_peak_reserved;
  uint64_t min_capacity_current, min_capacity_recommended; /* 0: unknown */
} advice_pool_summary;

typedef struct advice_summary {
  int valid;            /* computed at least once */
  double computed_at_s; /* CLOCK_REALTIME seconds */
  double compute_s;
  uint64_t runs;
  size_t npools;
  advice_pool_summary pool[ADVICE_MAX_POOLS];
} advice_summary;

void advice_summary_get(advice_summary *out);
/* GET /advice?format=json|table&max_age=S&capacity_gib=G&pool=NAME */
void advice_endpoint(const endpoint_args *args, endpoint_body *out);
/* Drops the cache (agent stop). */
void advice_reset(void);

#endif
