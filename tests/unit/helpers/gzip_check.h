/* What the gzip tests share: bodies to compress and a strict reader of one
 * gzip member (zlib's inflate in gzip mode). */
#ifndef GPUPOOL_TEST_GZIP_CHECK_H
#define GPUPOOL_TEST_GZIP_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* b[0..n) filled with, by kind: 0 exposition-like text (the last line cut
 * at n), 1 random bytes, 2 one byte repeated. Deterministic per process. */
void gz_fill(uint8_t *b, size_t n, int kind);
/* Inflates the one gzip member that must fill z[0..zlen) exactly (asserts
 * so); returns the bytes read back into out (cap bytes). */
size_t gz_read_member(const uint8_t *z, size_t zlen, uint8_t *out, size_t cap);

#endif
