/* gzip for response bodies as the server sends them: a streamed one (/trace)
 * is deflated as the server pulls it, so a large document is compressed
 * without being held whole in memory, and a whole one (/snapshot's pickle
 * runs to tens of MB) is deflated chunk by chunk, so its first bytes go out
 * before the rest is compressed. */
#ifndef GPUPOOL_HTTP_GZIP_STREAM_H
#define GPUPOOL_HTTP_GZIP_STREAM_H

#include "endpoint.h"

/* Replaces out's stream by its gzip'd form and sets content_encoding. 0 on
 * success; -1 (out unchanged) when zlib is missing or memory is short. */
int http_gzip_wrap_stream(endpoint_body *out);
/* The same for out's stream or, where it has none, its whole body (data,
 * len), which becomes the stream's input and is freed with it. */
int http_gzip_wrap_body(endpoint_body *out);

#endif
