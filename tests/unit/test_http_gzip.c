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
#include "agent/http_gzip_parallel.h"
#include "helpers/gzip_check.h"

Test(http_gzip, one_shot_reads_back) {
  static uint8_t in[200000], back[200001];
  for (int kind = 0; kind < 3; kind++) {
    size_t n = sizeof in;
    gz_fill(in, n, kind);
    char *z;
    size_t zlen;
    cr_assert_eq(http_gzip((const char *)in, n, &z, &zlen), 0);
    cr_assert_eq(gz_read_member((uint8_t *)z, zlen, back, sizeof back), n);
    cr_assert_eq(memcmp(back, in, n), 0);
    if (kind != 1)
      cr_assert_lt(zlen * 4, n, "%zu bytes compressed only to %zu", n, zlen);
    free(z);
  }
}

/* At the smallest level (/ui's files, deflated once): the same bytes read
 * back, in no more than the fastest level takes; a level zlib does not
 * have is refused with nothing allocated. */
Test(http_gzip, levels_read_back) {
  static uint8_t in[200000], back[200001];
  for (int kind = 0; kind < 3; kind++) {
    size_t n = sizeof in;
    gz_fill(in, n, kind);
    char *fast, *small;
    size_t fast_len, small_len;
    cr_assert_eq(http_gzip_level((const char *)in, n, 1, &fast, &fast_len), 0);
    cr_assert_eq(http_gzip_level((const char *)in, n, 9, &small, &small_len), 0);
    cr_assert_eq(gz_read_member((uint8_t *)small, small_len, back, sizeof back), n);
    cr_assert_eq(memcmp(back, in, n), 0);
    cr_assert_leq(small_len, fast_len, "kind %d: level 9 %zu bytes, level 1 %zu", kind, small_len,
                  fast_len);
    free(fast);
    free(small);
  }
  char *z = (char *)0x1;
  size_t zlen = 7;
  cr_assert_eq(http_gzip_level("abc", 3, 42, &z, &zlen), -1);
  cr_assert_eq(z, (char *)0x1, "nothing allocated");
}

/* A compressor reused for many bodies (the /metrics one, on one thread:
 * one zlib stream reset per body) gives each body on its own. */
Test(http_gzip, a_reused_compressor_resets_between_bodies) {
  static uint8_t in[150000], back[150001];
  http_gzip_par *g = http_gzip_par_new(1);
  cr_assert_not_null(g);
  size_t cap = http_gzip_par_bound(g, sizeof in);
  uint8_t *z = malloc(cap);
  static const size_t sizes[] = {0, 1, 7, 100, 4096, 65536, 150000, 3, 150000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    gz_fill(in, n, (int)(i % 3));
    cr_assert_leq(http_gzip_par_bound(g, n), cap);
    size_t zlen = http_gzip_par_run(g, (const char *)in, n, z, cap);
    cr_assert_gt(zlen, 0u);
    cr_assert_eq(gz_read_member(z, zlen, back, sizeof back), n, "body %zu", i);
    cr_assert(n == 0 || memcmp(back, in, n) == 0, "body %zu", i);
  }
  cr_assert_eq(http_gzip_par_run(g, (const char *)in, 100000, z, 10), 0u,
               "no room: 0, not a cut stream");
  free(z);
  http_gzip_par_free(g);
}
