/* The exposition's fast number paths against printf: integers written two
 * digits at a time, doubles remembered by their bits (the second writing of
 * a value comes from the memo and must equal the first), and lines written
 * with one reservation that grow the buffer from nothing. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporters/prom_buf.h"
#include "exporters/prom_writer.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static const char *text(prom_buf *b) {
  prom_buf_putc(b, '\0');
  b->len--;
  return b->data;
}

Test(prom_numbers, integers_equal_printf) {
  prom_buf b;
  prom_buf_init(&b, 0);
  char want[32];
  for (int i = 0; i < 200000; i++) {
    uint64_t v = next() >> (next() % 64);
    if (i < 60) { /* 10^k - 1, 10^k, 10^k + 1 */
      v = 1;
      for (int k = 0; k < i / 3; k++)
        v *= 10;
      v = v - 1 + (uint64_t)(i % 3);
    } else if (i < 124) {
      v = 1ull << (i - 60);
    }
    b.len = 0;
    prom_buf_u64(&b, v);
    snprintf(want, sizeof want, "%" PRIu64, v);
    cr_assert_str_eq(text(&b), want);
    b.len = 0;
    prom_buf_i64(&b, -(int64_t)(v >> 1));
    snprintf(want, sizeof want, "%" PRId64, -(int64_t)(v >> 1));
    cr_assert_str_eq(text(&b), want);
  }
  b.len = 0;
  prom_buf_u64(&b, UINT64_MAX);
  cr_assert_str_eq(text(&b), "18446744073709551615");
  b.len = 0;
  prom_buf_i64(&b, INT64_MIN);
  cr_assert_str_eq(text(&b), "-9223372036854775808");
  prom_buf_free(&b);
}

/* printf's shortest of %.15g / %.17g that reads back, as prom_buf.h says. */
static void reference(double v, char *out, size_t n) {
  snprintf(out, n, "%.15g", v);
  if (strtod(out, NULL) != v)
    snprintf(out, n, "%.17g", v);
}

Test(prom_numbers, doubles_from_the_memo_equal_the_first_text) {
  prom_buf b;
  prom_buf_init(&b, 0);
  double vals[5000];
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    uint64_t bits = next();
    double v;
    memcpy(&v, &bits, sizeof v);
    if (!isfinite(v) || v == trunc(v))
      v = (double)(next() % 1000000007) / 1e9 + 1e-12; /* e.g. a seconds total */
    vals[i] = v;
  }
  char want[40];
  for (int round = 0; round < 3; round++) /* 5000 values through 64 slots: many evictions */
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
      size_t k = round == 1 ? i : (i * 7) % 5000;
      reference(vals[k], want, sizeof want);
      for (int twice = 0; twice < 2; twice++) {
        b.len = 0;
        prom_buf_double(&b, vals[k]);
        cr_assert_str_eq(text(&b), want, "round %d, value %zu", round, k);
      }
    }
  prom_buf_free(&b);
}

/* Every line reserved whole, from an empty buffer; extra label values
 * escaped, and the extras beyond PROM_EXTRA_MAX left out. */
Test(prom_numbers, lines_grow_an_empty_buffer) {
  prom_buf b;
  prom_buf_init(&b, 0);
  prom_writer w;
  prom_writer_init(&w, &b, PROM_FORMAT_TEXT);
  prom_family(&w, "x_bytes", PROM_GAUGE, "X.");
  prom_label l[PROM_EXTRA_MAX + 1];
  for (size_t i = 0; i <= PROM_EXTRA_MAX; i++) {
    l[i].name = i == PROM_EXTRA_MAX ? "dropped" : "k";
    l[i].value = "\"\\\n";
  }
  prom_gauge_i64(&w, NULL, l, PROM_EXTRA_MAX + 1, -12);
  const char *s = text(&b);
  cr_assert(strstr(s, "x_bytes{k=\"\\\"\\\\\\n\",k="), "%s", s);
  cr_assert_null(strstr(s, "dropped"));
  cr_assert(strstr(s, "\"} -12\n"), "%s", s);
  for (int i = 0; i < 10000; i++)
    prom_gauge_u64(&w, "device=\"0\"", NULL, 0, (uint64_t)i);
  cr_assert(strstr(text(&b), "x_bytes{device=\"0\"} 9999\n"));
  cr_assert_eq(b.failed, 0);
  prom_buf_free(&b);
}

/* The bucket lines copy their shared prefix: the same text as written out
 * in full, with and without labels. */
Test(prom_numbers, histogram_lines_with_and_without_labels) {
  static const char *const le[] = {"1", "4", "a\"b"};
  const uint64_t counts[] = {1, 2, 3, 4};
  for (int with = 0; with < 2; with++) {
    prom_buf b;
    prom_buf_init(&b, 0);
    prom_writer w;
    prom_writer_init(&w, &b, PROM_FORMAT_TEXT);
    prom_family(&w, "h_bytes", PROM_HISTOGRAM, "H.");
    prom_histogram(&w, with ? "pool=\"p\"" : NULL, le, counts, 3, 2.5, 0);
    const char *want =
        with ? "# HELP h_bytes H.\n# TYPE h_bytes histogram\n"
               "h_bytes_bucket{pool=\"p\",le=\"1\"} 1\nh_bytes_bucket{pool=\"p\",le=\"4\"} 3\n"
               "h_bytes_bucket{pool=\"p\",le=\"a\\\"b\"} 6\nh_bytes_bucket{pool=\"p\",le=\"+Inf\"} "
               "10\n"
               "h_bytes_count{pool=\"p\"} 10\nh_bytes_sum{pool=\"p\"} 2.5\n"
             : "# HELP h_bytes H.\n# TYPE h_bytes histogram\n"
               "h_bytes_bucket{le=\"1\"} 1\nh_bytes_bucket{le=\"4\"} 3\n"
               "h_bytes_bucket{le=\"a\\\"b\"} 6\nh_bytes_bucket{le=\"+Inf\"} 10\n"
               "h_bytes_count 10\nh_bytes_sum 2.5\n";
    cr_assert_str_eq(text(&b), want);
    prom_buf_free(&b);
  }
}
