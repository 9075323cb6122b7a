/* gzip for whole response bodies (/metrics): deflate_fast.c's encoder and
 * gzip_crc32.c's CRC, when the build found zlib. */
#ifndef GPUPOOL_HTTP_GZIP_H
#define GPUPOOL_HTTP_GZIP_H

#include <stddef.h>
#include <stdint.h>

#include "deflate_fast.h"

/* 1 when this build can compress. */
int http_gzip_available(void);
/* Compresses in[0..len) into a malloc'd gzip stream; 0 or -1 (nothing
 * allocated) when zlib is missing, memory runs out or len is 2 GiB or more. */
int http_gzip(const char *in, size_t len, char **out, size_t *outlen);

/* The same into the caller's buffers, for a caller that keeps them between
 * calls: out holds http_gzip_bound(len) bytes, table DEFLATE_FAST_TABLE
 * entries. Returns the bytes written, 0 under the conditions of -1 above. */
size_t http_gzip_bound(size_t len);
size_t http_gzip_to(const char *in, size_t len, uint8_t *out, uint32_t *table);

#endif
