/* gzip for whole response bodies (/metrics): deflate_fast.c's encoder and
 * zlib's crc32, when the build found zlib. */
#ifndef GPUPOOL_HTTP_GZIP_H
#define GPUPOOL_HTTP_GZIP_H

#include <stddef.h>

/* 1 when this build can compress. */
int http_gzip_available(void);
/* Compresses in[0..len) into a malloc'd gzip stream; 0 or -1 (nothing
 * allocated) when zlib is missing, memory runs out or len is 2 GiB or more. */
int http_gzip(const char *in, size_t len, char **out, size_t *outlen);

#endif
