#include "http_gzip_stream.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef GPUPOOL_HAVE_ZLIB
#include <zlib.h>

#define IN_CHUNK (64 * 1024)

typedef struct gzip_stream {
  z_stream z;
  void *inner;
  ssize_t (*read)(void *stream, char *buf, size_t max);
  void (*close)(void *stream);
  int inner_done; /* the inner stream returned its end */
  int done;       /* the gzip trailer is written */
  char in[IN_CHUNK];
} gzip_stream;

static ssize_t gz_read(void *stream, char *buf, size_t max) {
  gzip_stream *g = stream;
  if (g->done || max == 0)
    return 0;
  g->z.next_out = (Bytef *)buf;
  if (max > UINT32_MAX)
    max = UINT32_MAX;
  g->z.avail_out = (uInt)max;
  /* deflate may take input without giving output: keep feeding it until it
   * gives some, or the stream ends (0 means the end to the server). */
  for (;;) {
    if (g->z.avail_in == 0 && !g->inner_done) {
      if (g->z.avail_out < max)
        break; /* some output already: send it before reading on */
      ssize_t n = g->read(g->inner, g->in, sizeof g->in);
      if (n < 0)
        return -1;
      g->inner_done = n == 0;
      g->z.next_in = (Bytef *)g->in;
      g->z.avail_in = (uInt)n;
    }
    int rc = deflate(&g->z, g->inner_done ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      g->done = 1;
      break;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      return -1;
    if (g->z.avail_out == 0)
      break;
  }
  return (ssize_t)(max - g->z.avail_out);
}

static void gz_close(void *stream) {
  gzip_stream *g = stream;
  if (g->close)
    g->close(g->inner);
  deflateEnd(&g->z);
  free(g);
}

int http_gzip_wrap_stream(endpoint_body *out) {
  gzip_stream *g = calloc(1, sizeof *g);
  if (!g)
    return -1;
  /* As for /metrics (http_gzip.c): gzip framing, the fastest level. */
  if (deflateInit2(&g->z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    free(g);
    return -1;
  }
  g->inner = out->stream;
  g->read = out->read;
  g->close = out->close;
  out->stream = g;
  out->read = gz_read;
  out->close = gz_close;
  out->content_encoding = "gzip";
  return 0;
}

/* A whole body read as a stream: the input of its deflate. */
typedef struct whole_body {
  char *data;
  size_t len, off;
} whole_body;

static ssize_t whole_read(void *stream, char *buf, size_t max) {
  whole_body *w = stream;
  size_t n = w->len - w->off < max ? w->len - w->off : max;
  memcpy(buf, w->data + w->off, n);
  w->off += n;
  return (ssize_t)n;
}

static void whole_close(void *stream) {
  whole_body *w = stream;
  free(w->data);
  free(w);
}

int http_gzip_wrap_body(endpoint_body *out) {
  if (out->read)
    return http_gzip_wrap_stream(out);
  whole_body *w = malloc(sizeof *w);
  if (!w)
    return -1;
  *w = (whole_body){.data = out->data, .len = out->len};
  endpoint_body streamed = *out;
  streamed.data = NULL;
  streamed.len = 0;
  streamed.stream = w;
  streamed.read = whole_read;
  streamed.close = whole_close;
  if (http_gzip_wrap_stream(&streamed) != 0) {
    free(w); /* out, its data included, unchanged */
    return -1;
  }
  *out = streamed;
  return 0;
}
#else
int http_gzip_wrap_stream(endpoint_body *out) {
  (void)out;
  return -1;
}

int http_gzip_wrap_body(endpoint_body *out) {
  (void)out;
  return -1;
}
#endif
