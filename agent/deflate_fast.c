#include "deflate_fast.h"

#include <pthread.h>
#include <string.h>

/* The fixed codes of RFC 1951 3.2.6, bit-reversed for the LSB-first stream:
 * literal/length symbols 0-143 take 8 bits, 144-255 9, 256-279 7, 280-287 8;
 * distance symbols 5 bits. Per match length 3..258, the length symbol's code
 * and its extra bits in one word. */
static uint16_t lit_code[288];
static uint8_t lit_bits[288];
static uint32_t len_code[259];
static uint8_t len_bits[259];
static uint8_t dist_sym[512]; /* [d - 1] for d <= 256, [256 + ((d - 1) >> 7)] above */
static uint8_t dist_code[30];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static const uint16_t len_base[29] = {3,  4,  5,  6,   7,   8,   9,   10,  11, 13,
                                      15, 17, 19, 23,  27,  31,  35,  43,  51, 59,
                                      67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {
    1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
    193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static uint32_t reverse(uint32_t code, unsigned bits) {
  uint32_t r = 0;
  for (unsigned i = 0; i < bits; i++, code >>= 1)
    r = (r << 1) | (code & 1);
  return r;
}

static void make_tables(void) {
  for (unsigned s = 0; s < 288; s++) {
    uint32_t code;
    unsigned bits;
    if (s < 144)
      code = 0x30 + s, bits = 8;
    else if (s < 256)
      code = 0x190 + s - 144, bits = 9;
    else if (s < 280)
      code = s - 256, bits = 7;
    else
      code = 0xc0 + s - 280, bits = 8;
    lit_code[s] = (uint16_t)reverse(code, bits);
    lit_bits[s] = (uint8_t)bits;
  }
  for (unsigned len = 3; len <= 258; len++) {
    unsigned k = 28;
    while (len_base[k] > len)
      k--;
    unsigned s = 257 + k;
    len_code[len] = lit_code[s] | (uint32_t)(len - len_base[k]) << lit_bits[s];
    len_bits[len] = (uint8_t)(lit_bits[s] + len_extra[k]);
  }
  for (unsigned k = 0; k < 30; k++)
    dist_code[k] = (uint8_t)reverse(k, 5);
  for (unsigned d = 1; d <= 32768; d++) {
    uint8_t k = 29;
    while (dist_base[k] > d)
      k--;
    dist_sym[d <= 256 ? d - 1 : 256 + ((d - 1) >> 7)] = k;
  }
}

typedef struct bits_out {
  uint8_t *out;
  uint64_t bits;
  unsigned n; /* pending bits, below 32 between calls */
} bits_out;

/* Adds up to 32 bits; whole 32-bit words go out at once. */
static inline void put_bits(bits_out *w, uint32_t code, unsigned bits) {
  w->bits |= (uint64_t)code << w->n;
  w->n += bits;
  if (w->n >= 32) {
    w->out[0] = (uint8_t)w->bits;
    w->out[1] = (uint8_t)(w->bits >> 8);
    w->out[2] = (uint8_t)(w->bits >> 16);
    w->out[3] = (uint8_t)(w->bits >> 24);
    w->out += 4;
    w->bits >>= 32;
    w->n -= 32;
  }
}

static inline uint32_t load32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline uint32_t hash4(uint32_t v) {
  return (v * 2654435761u) >> (32 - 14);
}

/* Bytes in common at a and b, from 4 (already equal) up to max. */
static inline size_t match_length(const uint8_t *a, const uint8_t *b, size_t max) {
  size_t n = 4;
  while (n + 8 <= max) {
    uint64_t x = load64(a + n) ^ load64(b + n);
    if (x) {
      /* the lowest differing byte is the first in memory on little-endian
       * machines; elsewhere compare bytewise */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      return n + ((unsigned)__builtin_ctzll(x) >> 3);
#else
      break;
#endif
    }
    n += 8;
  }
  while (n < max && a[n] == b[n])
    n++;
  return n;
}

size_t deflate_fast_bound(size_t len) {
  /* 3 header bits, at most 9 bits per input byte (a match of n >= 4 bytes
   * takes at most 31), 7 for the end of the block, then byte padding */
  return len + len / 8 + 16;
}

size_t deflate_fast(const uint8_t *in, size_t len, uint8_t *out, uint32_t *table) {
  pthread_once(&tables_once, make_tables);
  memset(table, 0, DEFLATE_FAST_TABLE * sizeof *table); /* 0: empty, else position + 1 */
  bits_out w = {out, 0, 0};
  put_bits(&w, 1 | 1 << 1, 3); /* BFINAL, BTYPE 01: fixed codes */
  size_t i = 0;
  while (i + 8 <= len) {
    uint32_t v = load32(in + i);
    uint32_t *slot = &table[hash4(v)];
    size_t cand = *slot;
    *slot = (uint32_t)i + 1;
    if (cand && i - (cand - 1) <= 32768 && load32(in + cand - 1) == v) {
      const uint8_t *from = in + cand - 1;
      size_t dist = (size_t)(in + i - from);
      size_t max = len - i < 258 ? len - i : 258;
      size_t n = match_length(from, in + i, max);
      unsigned k = dist_sym[dist <= 256 ? dist - 1 : 256 + ((dist - 1) >> 7)];
      put_bits(&w, len_code[n], len_bits[n]);
      put_bits(&w, dist_code[k] | (uint32_t)(dist - dist_base[k]) << 5, 5u + dist_extra[k]);
      i += n;
      if (i + 8 <= len) /* the end of a match often starts the next one */
        table[hash4(load32(in + i - 2))] = (uint32_t)(i - 2) + 1;
      continue;
    }
    put_bits(&w, lit_code[in[i]], lit_bits[in[i]]);
    i++;
  }
  for (; i < len; i++)
    put_bits(&w, lit_code[in[i]], lit_bits[in[i]]);
  put_bits(&w, 0, 7); /* end of block: symbol 256 */
  for (; w.n > 0; w.n = w.n > 8 ? w.n - 8 : 0, w.bits >>= 8)
    *w.out++ = (uint8_t)w.bits;
  return (size_t)(w.out - out);
}
