/* /trace over HTTP (agent/endpoint.h) and the same document written to a
 * FILE (gpupool_trace_write of include/gpupool/agent.h). */
#include <stdio.h>

#include "endpoint.h"
#include "gpupool/agent.h"
#include "core/errors.h"
#include "pool/pool_view.h"
#include "trace_writer.h"

void trace_endpoint(const endpoint_args *args, endpoint_body *out) {
  trace_query q;
  char err[256];
  int rc = trace_query_parse(&q, args, err, sizeof err);
  if (rc == -2) {
    endpoint_out_of_memory(out, "checking the pool parameter");
    return;
  }
  if (rc != 0) {
    endpoint_bad_request(out, "%s", err);
    return;
  }
  if (trace_stream_body(&q, out) != 0) {
    endpoint_out_of_memory(out, "opening the trace");
    return;
  }
  out->status = 200;
  out->content_type = "application/json";
}

gpupool_status gpupool_trace_event_counts(gpupool *pool, uint64_t *recorded, uint64_t *dropped) {
  if (!pool || !recorded || !dropped)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_trace_event_counts: NULL argument");
  gpupool_status st = pool_check_not_inherited(pool, "gpupool_trace_event_counts");
  if (st != GPUPOOL_OK)
    return st;
  pool_event_counts(pool, recorded, dropped);
  return GPUPOOL_OK;
}

gpupool_status gpupool_trace_write(FILE *f) {
  if (!f)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_trace_write: NULL file");
  return trace_write_whole(f, 0);
}
