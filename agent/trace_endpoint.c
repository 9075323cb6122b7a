/* /trace over HTTP (agent/endpoint.h) and the same document written to a
 * FILE (gpupool_trace_write of include/gpupool/agent.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint.h"
#include "gpupool/agent.h"
#include "core/errors.h"
#include "pool/pool_view.h"
#include "trace_writer.h"

#define FILE_CHUNK 65536

static ssize_t stream_read(void *stream, char *buf, size_t max) {
  return trace_stream_read(stream, buf, max);
}

static void stream_close(void *stream) {
  trace_stream_close(stream);
}

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
  trace_stream *s = trace_stream_open(&q);
  if (!s) {
    endpoint_out_of_memory(out, "opening the trace");
    return;
  }
  out->status = 200;
  out->content_type = "application/json";
  out->stream = s;
  out->read = stream_read;
  out->close = stream_close;
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
  trace_stream *s = trace_stream_open(NULL);
  char *buf = malloc(FILE_CHUNK);
  if (!s || !buf) {
    trace_stream_close(s);
    free(buf);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_trace_write: out of host memory");
  }
  gpupool_status st = GPUPOOL_OK;
  ssize_t n;
  while ((n = trace_stream_read(s, buf, FILE_CHUNK)) > 0) {
    if (fwrite(buf, 1, (size_t)n, f) != (size_t)n)
      break;
  }
  /* n > 0: the loop stopped at a failed write. Otherwise the end of the
   * document (all of a small one) may still sit in f's buffer, and a full
   * disk shows only when it is flushed: written means flushed. */
  if (n > 0 || fflush(f) != 0)
    st = pool_fail(GPUPOOL_ERR_BACKEND, "gpupool_trace_write: write failed: %s", strerror(errno));
  else if (n < 0)
    st = pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_trace_write: out of host memory (trace cut)");
  trace_stream_close(s);
  free(buf);
  return st;
}
