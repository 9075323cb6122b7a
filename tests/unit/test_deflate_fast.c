/* deflate_fast and the gzip member of http_gzip: zlib's inflate reads back
 * exactly the input (CRC and length checked), across empty, tiny, repetitive,
 * random and window-edge inputs; gzip_crc32 equals zlib's crc32. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "agent/deflate_fast.h"
#include "agent/gzip_crc32.h"
#include "agent/http_gzip.h"

/* windowBits: -15 raw deflate, 31 gzip. Returns the inflated length. */
static size_t inflate_all(const uint8_t *z, size_t zlen, uint8_t *out, size_t cap, int window) {
  z_stream s = {0};
  cr_assert_eq(inflateInit2(&s, window), Z_OK);
  s.next_in = (Bytef *)z;
  s.avail_in = (uInt)zlen;
  s.next_out = out;
  s.avail_out = (uInt)cap;
  int rc = inflate(&s, Z_FINISH);
  cr_assert_eq(rc, Z_STREAM_END, "inflate: %d (%s)", rc, s.msg ? s.msg : "");
  cr_assert_eq(s.avail_in, 0u, "trailing bytes after the stream");
  size_t n = s.total_out;
  inflateEnd(&s);
  return n;
}

static void round_trip(const uint8_t *in, size_t len) {
  size_t bound = deflate_fast_bound(len);
  uint8_t *z = malloc(bound + 1);
  uint32_t *table = malloc(DEFLATE_FAST_TABLE * sizeof *table);
  z[bound] = 0xA5; /* a guard: nothing is written past the bound */
  size_t zlen = deflate_fast(in, len, z, table);
  cr_assert_leq(zlen, bound);
  cr_assert_eq(z[bound], 0xA5);
  uint8_t *back = malloc(len + 1);
  cr_assert_eq(inflate_all(z, zlen, back, len + 1, -15), len);
  cr_assert(len == 0 || memcmp(back, in, len) == 0, "content differs (%zu bytes)", len);

  char *gz;
  size_t gzlen;
  cr_assert_eq(http_gzip((const char *)in, len, &gz, &gzlen), 0);
  cr_assert_eq((uint8_t)gz[0], 0x1f);
  cr_assert_eq((uint8_t)gz[1], 0x8b);
  cr_assert_eq(inflate_all((uint8_t *)gz, gzlen, back, len + 1, 31), len); /* checks CRC, ISIZE */
  cr_assert(len == 0 || memcmp(back, in, len) == 0);
  free(gz);
  free(back);
  free(table);
  free(z);
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

Test(deflate_fast, empty_and_tiny) {
  const uint8_t s[] = "abcdefghijklmnopqrstuvwxyz";
  for (size_t n = 0; n <= 20; n++)
    round_trip(s, n);
  round_trip((const uint8_t *)"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 37);
}

Test(deflate_fast, every_byte_value) {
  uint8_t b[1024];
  for (size_t i = 0; i < sizeof b; i++)
    b[i] = (uint8_t)(i * 7);
  round_trip(b, sizeof b);
}

Test(deflate_fast, random_data_expands_at_most_one_eighth) {
  size_t n = 300000;
  uint8_t *b = malloc(n);
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)next();
  round_trip(b, n);
  cr_assert_leq(deflate_fast_bound(n), n + n / 8 + 16);
  free(b);
}

/* Runs far longer than the longest match (258), and a pattern repeating at
 * exactly the window's edge (32768) and just past it. */
Test(deflate_fast, long_runs_and_window_edges) {
  size_t n = 200000;
  uint8_t *b = malloc(n);
  memset(b, 'x', n);
  round_trip(b, n);
  for (size_t period = 32766; period <= 32770; period++) {
    for (size_t i = 0; i < period && i < n; i++)
      b[i] = (uint8_t)next();
    for (size_t i = period; i < n; i++)
      b[i] = b[i - period];
    round_trip(b, n);
  }
  free(b);
}

/* Text shaped like an exposition compresses well and reads back. */
Test(deflate_fast, exposition_text) {
  size_t cap = 1 << 20, n = 0;
  char *b = malloc(cap);
  for (int d = 0; d < 8; d++)
    for (int p = 0; p < 4; p++)
      for (int f = 0; f < 40; f++)
        n += (size_t)snprintf(
            b + n, cap - n,
            "gpupool_family_%d_bytes{device=\"%d\",UUID=\"GPU-%08x\",pool=\"pool%d\","
            "hostname=\"node-17\"} %llu\n",
            f, d, (unsigned)(d * 2654435761u), p, (unsigned long long)(next() % 100000000));
  round_trip((const uint8_t *)b, n);
  size_t bound = deflate_fast_bound(n);
  uint8_t *z = malloc(bound);
  uint32_t *table = malloc(DEFLATE_FAST_TABLE * sizeof *table);
  size_t zlen = deflate_fast((const uint8_t *)b, n, z, table);
  cr_assert_lt(zlen * 4, n, "%zu bytes of text compressed to only %zu", n, zlen);
  free(table);
  free(z);
  free(b);
}

/* Every length to 1100 at three alignments (the folding path starts at 64
 * bytes and leaves a tail of up to 15), and one value carried on. */
Test(gzip_crc32, equals_zlib) {
  static uint8_t b[4096];
  for (size_t i = 0; i < sizeof b; i++)
    b[i] = (uint8_t)next();
  for (size_t off = 0; off < 3; off++)
    for (size_t n = 0; n <= 1100; n++)
      cr_assert_eq(gzip_crc32(0, b + off, n), (uint32_t)crc32(0, b + off, (uInt)n),
                   "n %zu, off %zu", n, off);
  cr_assert_eq(gzip_crc32(gzip_crc32(0, b, 1000), b + 1000, 3000), (uint32_t)crc32(0, b, 4000));
}
