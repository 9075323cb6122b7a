/* The JSON pieces of the streamed trace: escaping, numbers, draining. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "exporters/json_stream.h"
#include "exporters/trace_live_set.h"

static char *text(json_buf *b) {
  json_putc(b, '\0');
  cr_assert(!b->failed);
  return b->data + b->off;
}

Test(trace_json_stream, strings_are_escaped_and_always_valid) {
  json_buf b;
  json_buf_init(&b);
  json_string(&b, "a\"b\\c\n\t\r\x01\x7f é 漢 😀");
  cr_expect_str_eq(text(&b), "\"a\\\"b\\\\c\\n\\t\\r\\u0001\\u007f é 漢 😀\"");
  json_buf_free(&b);

  /* Invalid UTF-8: stray continuation, overlong, surrogate, truncated. */
  json_buf_init(&b);
  json_string(&b, "x\x80y\xc0\xafz\xed\xa0\x80w\xe6\xbc");
  char *s = text(&b);
  cr_expect_str_eq(s, "\"x\\ufffdy\\ufffd\\ufffdz\\ufffd\\ufffd\\ufffdw\\ufffd\\ufffd\"");
  cJSON *v = cJSON_Parse(s);
  cr_expect(cJSON_IsString(v));
  cJSON_Delete(v);
  json_buf_free(&b);

  json_buf_init(&b);
  json_string_n(&b, "abcdef", 3);
  json_string(&b, NULL);
  cr_expect_str_eq(text(&b), "\"abc\"\"\"");
  json_buf_free(&b);
}

Test(trace_json_stream, numbers_are_exact) {
  json_buf b;
  json_buf_init(&b);
  json_u64(&b, 0);
  json_putc(&b, ' ');
  json_u64(&b, UINT64_MAX);
  json_putc(&b, ' ');
  json_i64(&b, INT64_MIN);
  json_putc(&b, ' ');
  json_hex_string(&b, 0);
  json_hex_string(&b, 0x7f12a0000000ull);
  json_putc(&b, ' ');
  json_ns_as_us(&b, 0);
  json_putc(&b, ' ');
  json_ns_as_us(&b, 999);
  json_putc(&b, ' ');
  json_ns_as_us(&b, 1000);
  json_putc(&b, ' ');
  json_ns_as_us(&b, 1234567);
  json_putc(&b, ' ');
  json_ns_as_us(&b, -1500);
  cr_expect_str_eq(text(&b),
                   "0 18446744073709551615 -9223372036854775808 \"0x0\"\"0x7f12a0000000\" "
                   "0.000 0.999 1.000 1234.567 -1.500");
  json_buf_free(&b);
}

Test(trace_json_stream, drains_in_pieces_and_reuses_its_memory) {
  json_buf b;
  json_buf_init(&b);
  char out[8192];
  size_t got = 0;
  for (int round = 0; round < 100; round++) {
    for (int i = 0; i < 10; i++)
      json_puts(&b, "0123456789");
    while (json_buf_pending(&b) > 0) {
      size_t n = json_buf_drain(&b, out, 7);
      for (size_t i = 0; i < n; i++)
        cr_assert_eq(out[i], '0' + (char)((got + i) % 10));
      got += n;
    }
  }
  cr_expect_eq(got, 100 * 100);
  cr_expect_leq(b.cap, 4096, "drained bytes are reclaimed, the buffer does not grow");
  json_buf_free(&b);
}

Test(trace_json_stream, live_set_adds_finds_and_removes) {
  trace_live_set s;
  trace_live_set_init(&s);
  uint64_t v;
  for (uint64_t i = 0; i < 5000; i++)
    cr_assert_eq(trace_live_set_put(&s, (uint8_t)(i & 1), 0x1000 * (i / 2), i), 0);
  cr_expect_eq(s.count, 5000);
  for (uint64_t i = 0; i < 5000; i += 3) {
    cr_assert(trace_live_set_take(&s, (uint8_t)(i & 1), 0x1000 * (i / 2), &v));
    cr_expect_eq(v, i);
  }
  for (uint64_t i = 0; i < 5000; i++) {
    int there = trace_live_set_get(&s, (uint8_t)(i & 1), 0x1000 * (i / 2), &v);
    cr_expect_eq(there, i % 3 != 0, "entry %llu", (unsigned long long)i);
    if (there)
      cr_expect_eq(v, i);
  }
  cr_expect_eq(trace_live_set_take(&s, 0, 0xdead, &v), 0);
  trace_live_set_free(&s);
}
