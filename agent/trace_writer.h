/* The Chrome trace of everything recorded, as a pull-based stream: open it
 * with a query, read it in chunks of any size until read returns 0, close it.
 * The document is produced as it is read (the rings are merged a batch at a
 * time), never built whole; it is valid JSON even when the rings overwrite
 * events while it is read (those are skipped and counted in otherData). */
#ifndef GPUPOOL_TRACE_WRITER_H
#define GPUPOOL_TRACE_WRITER_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "endpoint.h"
#include "trace_query.h"
#include "gpupool/gpupool.h"

typedef struct trace_stream trace_stream;

/* NULL only when memory runs out. q == NULL: everything, no filter. */
trace_stream *trace_stream_open(const trace_query *q);
/* Writes the next bytes of the document into buf (at most max); returns how
 * many, 0 at the end, -1 if memory ran out (the document is then cut). */
ssize_t trace_stream_read(trace_stream *s, char *buf, size_t max);
void trace_stream_close(trace_stream *s);
/* A stream opened with q as out's streamed body (endpoint.h): /trace's, and
 * the files'. -1 (out unchanged) when memory runs out. */
int trace_stream_body(const trace_query *q, endpoint_body *out);
/* The whole trace into f, flushed; gzip'd (deflated as /trace is on the
 * wire) where gzip is nonzero. Errors as gpupool_trace_write's. */
gpupool_status trace_write_whole(FILE *f, int gzip);

/* Writes the whole trace to path atomically (a temporary file in the same
 * directory, then rename). 0 on success; -1 with a one-line reason on stderr
 * and in gpupool_last_error(). For the agent's trace_file option. */
int trace_write_file(const char *path);
/* For gpupool_agent_start: whether trace_write_file(path) can succeed at
 * stop, as far as can be told now without creating anything: the path is
 * not too long, does not name a directory, and its directory is a writable
 * directory (writable_dir.h). 0, or -1 with a one-line reason naming the path. */
int trace_file_check(const char *path, char *err, size_t errlen);

#endif
