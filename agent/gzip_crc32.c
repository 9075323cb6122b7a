#include "gzip_crc32.h"

#ifdef GPUPOOL_HAVE_ZLIB
#include <zlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_PATH 1

/* Folding (Intel, "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ", 2009) for the bit-reflected polynomial 0xEDB88320: four
 * 128-bit lanes folded by 512 bits per step, then into one lane, then a
 * Barrett reduction to 32 bits. The constants are x^k mod P for the fold
 * distances (k = 4*128+32 +- 32, 128+32 +- 32, 64) and floor(x^64 / P),
 * bit-reflected. c: the CRC register, without zlib's final inversion; n: a
 * multiple of 16, at least 64. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(uint32_t c, const uint8_t *p,
                                                                     size_t n) {
  const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
  const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
  const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124);
  const __m128i poly = _mm_set_epi64x(0x1f7011641, 0x1db710641); /* u', P' */
  const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);

  __m128i x1 = _mm_loadu_si128((const __m128i *)p);
  __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
  __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
  __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 48));
  x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
  p += 64;
  n -= 64;
#define FOLD(x, k, data)                                                                           \
  _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), \
                data)
  for (; n >= 64; p += 64, n -= 64) {
    x1 = FOLD(x1, k1k2, _mm_loadu_si128((const __m128i *)p));
    x2 = FOLD(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
    x3 = FOLD(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
    x4 = FOLD(x4, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
  }
  x1 = FOLD(x1, k3k4, x2);
  x1 = FOLD(x1, k3k4, x3);
  x1 = FOLD(x1, k3k4, x4);
  for (; n >= 16; p += 16, n -= 16)
    x1 = FOLD(x1, k3k4, _mm_loadu_si128((const __m128i *)p));
#undef FOLD
  /* 128 -> 64 bits */
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x10), _mm_srli_si128(x1, 8));
  /* 64 -> 32 bits */
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00),
                     _mm_srli_si128(x1, 4));
  /* Barrett reduction */
  __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), poly, 0x00);
  return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, t), 1);
}
#endif

uint32_t gzip_crc32(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef HAVE_CLMUL_PATH
  if (n >= 64 && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) {
    size_t bulk = n & ~(size_t)15;
    crc = ~crc32_clmul(~crc, p, bulk);
    p += bulk;
    n -= bulk;
  }
#endif
  /* zlib takes uInt lengths */
  for (; n > 0x40000000; p += 0x40000000, n -= 0x40000000)
    crc = (uint32_t)crc32(crc, p, 0x40000000);
  return (uint32_t)crc32(crc, p, (uInt)n);
}
#endif
