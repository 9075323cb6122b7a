/* gzip for streamed response bodies (/trace): deflates a body's stream as
 * the server pulls it, so a large document is compressed without being held
 * whole in memory. */
#ifndef GPUPOOL_HTTP_GZIP_STREAM_H
#define GPUPOOL_HTTP_GZIP_STREAM_H

#include "endpoint.h"

/* Replaces out's stream by its gzip'd form and sets content_encoding. 0 on
 * success; -1 (out unchanged) when zlib is missing or memory is short. */
int http_gzip_wrap_stream(endpoint_body *out);

#endif
