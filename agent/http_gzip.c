#include "http_gzip.h"

#include <limits.h>
#include <stdlib.h>

#ifdef GPUPOOL_HAVE_ZLIB
#include <zlib.h>

/* windowBits 15 + 16: a gzip header and trailer; level 1: a scrape is
 * repetitive text that compresses well even at the fastest level (on the
 * dev VM, 161 KB of /metrics: level 1 10.6 KB, level 2 and 3 within 5 % of
 * its time for 4-7 % less; level 6 4x the time for 17 % less; Z_FIXED the
 * same time for 19 % more; Z_RLE and Z_HUFFMAN_ONLY 4x the time for 10x the
 * size; memLevel 1-9 and smaller windows no faster). */
#define GZIP_LEVEL       1
#define GZIP_WINDOW_BITS (15 + 16)
#define GZIP_MEM_LEVEL   8

int http_gzip_available(void) {
  return 1;
}

struct http_gzipper {
  z_stream z;
};

http_gzipper *http_gzipper_new(void) {
  http_gzipper *g = calloc(1, sizeof *g);
  if (g && deflateInit2(&g->z, GZIP_LEVEL, Z_DEFLATED, GZIP_WINDOW_BITS, GZIP_MEM_LEVEL,
                        Z_DEFAULT_STRATEGY) != Z_OK) {
    free(g);
    g = NULL;
  }
  return g;
}

void http_gzipper_free(http_gzipper *g) {
  if (!g)
    return;
  deflateEnd(&g->z);
  free(g);
}

size_t http_gzipper_bound(http_gzipper *g, size_t len) {
  return len > UINT_MAX ? len : deflateBound(&g->z, (uLong)len);
}

size_t http_gzipper_run(http_gzipper *g, const char *in, size_t len, uint8_t *out, size_t cap) {
  if (len > UINT_MAX || cap > UINT_MAX || deflateReset(&g->z) != Z_OK)
    return 0;
  g->z.next_in = (Bytef *)in;
  g->z.avail_in = (uInt)len;
  g->z.next_out = out;
  g->z.avail_out = (uInt)cap;
  return deflate(&g->z, Z_FINISH) == Z_STREAM_END ? (size_t)g->z.total_out : 0;
}

int http_gzip(const char *in, size_t len, char **out, size_t *outlen) {
  http_gzipper *g = http_gzipper_new();
  if (!g)
    return -1;
  size_t cap = http_gzipper_bound(g, len);
  char *buf = malloc(cap);
  size_t n = buf ? http_gzipper_run(g, in, len, (uint8_t *)buf, cap) : 0;
  http_gzipper_free(g);
  if (!n) {
    free(buf);
    return -1;
  }
  *out = buf;
  *outlen = n;
  return 0;
}
#else
int http_gzip_available(void) {
  return 0;
}

int http_gzip(const char *in, size_t len, char **out, size_t *outlen) {
  (void)in, (void)len, (void)out, (void)outlen;
  return -1;
}

http_gzipper *http_gzipper_new(void) {
  return NULL;
}

void http_gzipper_free(http_gzipper *g) {
  (void)g;
}

size_t http_gzipper_bound(http_gzipper *g, size_t len) {
  (void)g;
  return len;
}

size_t http_gzipper_run(http_gzipper *g, const char *in, size_t len, uint8_t *out, size_t cap) {
  (void)g, (void)in, (void)len, (void)out, (void)cap;
  return 0;
}
#endif
