/* A fast deflate encoder for /metrics bodies: greedy LZ77 with one hash
 * probe per position (4-byte strings, a 16 K-entry table, positions inside
 * a match not indexed) and one block of the fixed Huffman codes of RFC 1951,
 * so there is no symbol counting and no tree to build. On an exposition
 * (long lines that repeat a metric name and a label set) it runs about 6x
 * faster than zlib at level 1 for a body about 15 % larger; on data that does
 * not repeat it expands by up to 1/8 (9-bit literals). Any inflater reads it. */
#ifndef GPUPOOL_DEFLATE_FAST_H
#define GPUPOOL_DEFLATE_FAST_H

#include <stddef.h>
#include <stdint.h>

/* The most bytes deflate_fast writes for len input bytes. */
size_t deflate_fast_bound(size_t len);

/* Compresses in[0..len) into one final raw deflate block at out, which holds
 * deflate_fast_bound(len) bytes; table is scratch of DEFLATE_FAST_TABLE
 * entries. Returns the bytes written. */
#define DEFLATE_FAST_TABLE (1u << 14)
size_t deflate_fast(const uint8_t *in, size_t len, uint8_t *out, uint32_t *table);

#endif
