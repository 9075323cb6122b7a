#include "gzip_check.h"

#ifdef GPUPOOL_HAVE_ZLIB
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { /* xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

void gz_fill(uint8_t *b, size_t n, int kind) {
  if (kind == 1) {
    for (size_t i = 0; i < n; i++)
      b[i] = (uint8_t)next();
    return;
  }
  if (kind == 2) {
    memset(b, 'x', n);
    return;
  }
  size_t at = 0;
  char line[128];
  while (at < n) {
    int len =
        snprintf(line, sizeof line, "gpupool_reserved_bytes{device=\"%d\",pool=\"p%d\"} %llu\n",
                 (int)(next() % 8), (int)(next() % 4), (unsigned long long)(next() % 100000000));
    size_t take = (size_t)len < n - at ? (size_t)len : n - at;
    memcpy(b + at, line, take);
    at += take;
  }
}

size_t gz_read_member(const uint8_t *z, size_t zlen, uint8_t *out, size_t cap) {
  z_stream s = {0};
  cr_assert_eq(inflateInit2(&s, 31), Z_OK);
  s.next_in = (Bytef *)z;
  s.avail_in = (uInt)zlen;
  s.next_out = out;
  s.avail_out = (uInt)cap;
  int rc = inflate(&s, Z_FINISH);
  cr_assert_eq(rc, Z_STREAM_END, "inflate: %d (%s)", rc, s.msg ? s.msg : "");
  cr_assert_eq(s.avail_in, 0u, "%u bytes after the end of the member", s.avail_in);
  size_t n = s.total_out;
  inflateEnd(&s);
  return n;
}
#endif
