/* gzip for whole response bodies (zlib, when the build found it). */
#ifndef GPUPOOL_HTTP_GZIP_H
#define GPUPOOL_HTTP_GZIP_H

#include <stddef.h>
#include <stdint.h>

/* 1 when this build can compress. */
int http_gzip_available(void);
/* Compresses in[0..len) into a malloc'd gzip stream; 0 or -1 (nothing
 * allocated) when zlib is missing or fails. */
int http_gzip(const char *in, size_t len, char **out, size_t *outlen);

/* A compressor kept between bodies (/metrics keeps one): deflateReset
 * instead of a deflateInit2 and deflateEnd per body, which allocate and
 * clear zlib's ~270 KB of window and hash each time. Same settings as
 * http_gzip. NULL without zlib or memory. */
typedef struct http_gzipper http_gzipper;
http_gzipper *http_gzipper_new(void);
void http_gzipper_free(http_gzipper *g);
/* The most bytes http_gzipper_run writes for len input bytes. */
size_t http_gzipper_bound(http_gzipper *g, size_t len);
/* One gzip member of in[0..len) into out (cap bytes, at least the bound),
 * in one deflate call; returns the bytes written, 0 when zlib fails. */
size_t http_gzipper_run(http_gzipper *g, const char *in, size_t len, uint8_t *out, size_t cap);

#endif
