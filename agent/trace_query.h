/* The query parameters of /trace and their parsing:
 *   since, until  a time window. A value >= 0 is microseconds since the epoch
 *                 (integer or decimal, up to 9 decimals); a negative value is
 *                 seconds before now: since=-30 is "the last 30 seconds".
 *   pool          only the pools with this label (agent/pool_label.h: the
 *                 name, or name#2, ... as /metrics labels pools that share
 *                 a name on a device)
 *   device        only this CUDA device ordinal
 *   limit         at most this many recorded events: the newest ones
 * Unknown or repeated parameters and bad values are refused with a reason. */
#ifndef GPUPOOL_TRACE_QUERY_H
#define GPUPOOL_TRACE_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "endpoint.h"

#define TRACE_POOL_NAME_MAX 128

typedef struct trace_query {
  uint64_t since_ns;              /* wall-clock ns since the epoch; 0: from the oldest */
  uint64_t until_ns;              /* UINT64_MAX: up to the newest */
  char pool[TRACE_POOL_NAME_MAX]; /* a pool label; "": every pool */
  int device;                     /* -1: every device */
  uint64_t limit;                 /* 0: no limit */
} trace_query;

/* Everything, no filter. */
void trace_query_init(trace_query *q);

/* Fills q from args (q is initialised first). 0 on success; -1 with a
 * one-line reason in err; -2 when out of host memory (err says so).
 * Relative times count back from `now_ns` (trace_query_parse uses the wall
 * clock). A pool label is accepted if a live pool has it or one the trace
 * still has samples of had it at its last sample. */
int trace_query_parse_at(trace_query *q, const endpoint_args *args, uint64_t now_ns, char *err,
                         size_t errlen);
int trace_query_parse(trace_query *q, const endpoint_args *args, char *err, size_t errlen);

/* The time syntax above, to nanoseconds since the epoch (clamped at 0).
 * 0 on success, -1 on a malformed value or one past 2^63 - 1 ns. */
int trace_time_parse(const char *s, uint64_t now_ns, uint64_t *out_ns);

#endif
