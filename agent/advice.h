/* GET /advice: the advisor (include/gpupool/advisor.h) over the live
 * process's history, the event rings of every pool. Computed in the HTTP
 * thread that serves the request (an agent thread, never an allocating
 * one), single-threaded, within a deadline, and cached: a request within
 * max_age seconds of the last computation is served from the cache. The
 * summary feeds the gpupool_advice_* gauges of /metrics. */
#ifndef GPUPOOL_AGENT_ADVICE_H
#define GPUPOOL_AGENT_ADVICE_H

#include "endpoint.h"
#include "exporters/advice_summary.h"

/* The last computation's summary, every pool's (out->pool is malloc'd:
 * advice_summary_free). */
void advice_summary_get(advice_summary *out);
void advice_summary_free(advice_summary *s);
/* GET /advice?format=json|table&max_age=S&capacity_gib=G&pool=NAME */
void advice_endpoint(const endpoint_args *args, endpoint_body *out);
/* Drops the cache (agent stop). */
void advice_reset(void);

#endif
