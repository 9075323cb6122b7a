/* gzip of whole bodies: zlib's inflate reads back exactly the input (CRC
 * and length checked), one-shot and through a compressor reused for many
 * bodies of all sizes (each reset, none depending on the one before). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "agent/http_gzip.h"

static size_t gunzip(const uint8_t *z, size_t zlen, uint8_t *out, size_t cap) {
  z_stream s = {0};
  cr_assert_eq(inflateInit2(&s, 31), Z_OK);
  s.next_in = (Bytef *)z;
  s.avail_in = (uInt)zlen;
  s.next_out = out;
  s.avail_out = (uInt)cap;
  int rc = inflate(&s, Z_FINISH);
  cr_assert_eq(rc, Z_STREAM_END, "inflate: %d (%s)", rc, s.msg ? s.msg : "");
  cr_assert_eq(s.avail_in, 0u, "trailing bytes after the member");
  size_t n = s.total_out;
  inflateEnd(&s);
  return n;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Exposition-like text, random bytes or one repeated byte. */
static size_t fill(uint8_t *b, size_t cap, int kind) {
  if (kind == 1) {
    for (size_t i = 0; i < cap; i++)
      b[i] = (uint8_t)next();
    return cap;
  }
  if (kind == 2) {
    memset(b, 'x', cap);
    return cap;
  }
  size_t n = 0;
  while (n + 200 < cap)
    n += (size_t)snprintf(
        (char *)b + n, cap - n, "gpupool_reserved_bytes{device=\"%d\",pool=\"p%d\"} %llu\n",
        (int)(next() % 8), (int)(next() % 4), (unsigned long long)(next() % 100000000));
  return n;
}

Test(http_gzip, one_shot_reads_back) {
  static uint8_t in[200000], back[200001];
  for (int kind = 0; kind < 3; kind++) {
    size_t n = fill(in, sizeof in, kind);
    char *z;
    size_t zlen;
    cr_assert_eq(http_gzip((const char *)in, n, &z, &zlen), 0);
    cr_assert_eq(gunzip((uint8_t *)z, zlen, back, sizeof back), n);
    cr_assert_eq(memcmp(back, in, n), 0);
    if (kind != 1)
      cr_assert_lt(zlen * 4, n, "%zu bytes compressed only to %zu", n, zlen);
    free(z);
  }
}

Test(http_gzip, a_reused_compressor_resets_between_bodies) {
  static uint8_t in[150000], back[150001];
  http_gzipper *g = http_gzipper_new();
  cr_assert_not_null(g);
  size_t cap = http_gzipper_bound(g, sizeof in);
  uint8_t *z = malloc(cap);
  static const size_t sizes[] = {0, 1, 7, 100, 4096, 65536, 150000, 3, 150000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = fill(in, sizes[i], (int)(i % 3));
    cr_assert_leq(http_gzipper_bound(g, n), cap);
    size_t zlen = http_gzipper_run(g, (const char *)in, n, z, cap);
    cr_assert_gt(zlen, 0u);
    cr_assert_eq(gunzip(z, zlen, back, sizeof back), n, "body %zu", i);
    cr_assert(n == 0 || memcmp(back, in, n) == 0, "body %zu", i);
  }
  cr_assert_eq(http_gzipper_run(g, (const char *)in, 100000, z, 10), 0u,
               "no room: 0, not a cut stream");
  free(z);
  http_gzipper_free(g);
}
