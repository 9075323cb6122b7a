#include "http_gzip.h"

#include <stdlib.h>

#ifdef GPUPOOL_HAVE_ZLIB
#include <zlib.h>

int http_gzip_available(void) {
  return 1;
}

int http_gzip(const char *in, size_t len, char **out, size_t *outlen) {
  z_stream z = {0};
  /* windowBits 15 + 16: a gzip header and trailer; level 1: a scrape is
   * repetitive text that compresses well even at the fastest level. */
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return -1;
  size_t cap = deflateBound(&z, (uLong)len);
  char *buf = malloc(cap);
  if (!buf) {
    deflateEnd(&z);
    return -1;
  }
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)len;
  z.next_out = (Bytef *)buf;
  z.avail_out = (uInt)cap;
  int rc = deflate(&z, Z_FINISH);
  size_t produced = z.total_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    free(buf);
    return -1;
  }
  *out = buf;
  *outlen = produced;
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
#endif
