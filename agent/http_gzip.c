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

int http_gzip(const char *in, size_t len, char **out, size_t *outlen) {
  return http_gzip_level(in, len, GZIP_LEVEL, out, outlen);
}

int http_gzip_level(const char *in, size_t len, int level, char **out, size_t *outlen) {
  z_stream z = {0};
  if (len > UINT_MAX || deflateInit2(&z, level, Z_DEFLATED, GZIP_WINDOW_BITS, GZIP_MEM_LEVEL,
                                     Z_DEFAULT_STRATEGY) != Z_OK)
    return -1;
  size_t cap = deflateBound(&z, (uLong)len);
  char *buf = cap <= UINT_MAX ? malloc(cap) : NULL;
  int rc = Z_MEM_ERROR;
  if (buf) {
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)len;
    z.next_out = (Bytef *)buf;
    z.avail_out = (uInt)cap;
    rc = deflate(&z, Z_FINISH);
  }
  size_t n = (size_t)z.total_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
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

int http_gzip_level(const char *in, size_t len, int level, char **out, size_t *outlen) {
  (void)in, (void)len, (void)level, (void)out, (void)outlen;
  return -1;
}
#endif
