/* gzip for whole response bodies (zlib, when the build found it). */
#ifndef GPUPOOL_HTTP_GZIP_H
#define GPUPOOL_HTTP_GZIP_H

#include <stddef.h>

/* 1 when this build can compress. */
int http_gzip_available(void);
/* Compresses in[0..len) into a malloc'd gzip stream; 0 or -1 (nothing
 * allocated) when zlib is missing or fails. */
int http_gzip(const char *in, size_t len, char **out, size_t *outlen);
/* http_gzip at zlib level `level` (1 fastest, 9 smallest): for a body
 * compressed once and sent many times (/ui's files), where time is not the
 * question. */
int http_gzip_level(const char *in, size_t len, int level, char **out, size_t *outlen);

#endif
