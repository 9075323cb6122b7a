#include "prom_buf.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/array_grow.h"
#include "core/c_numeric.h"

void prom_buf_init(prom_buf *b, size_t initial_cap) {
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  b->failed = 0;
  if (initial_cap)
    prom_buf_reserve(b, initial_cap);
}

void prom_buf_free(prom_buf *b) {
  free(b->data);
  prom_buf_init(b, 0);
}

char *prom_buf_take(prom_buf *b, size_t *len) {
  if (prom_buf_reserve(b, 1) != 0 || b->failed) {
    prom_buf_free(b);
    *len = 0;
    return NULL;
  }
  b->data[b->len] = '\0';
  char *out = b->data;
  *len = b->len;
  prom_buf_init(b, 0);
  return out;
}

int prom_buf_reserve(prom_buf *b, size_t n) {
  if (b->failed)
    return -1;
  if (b->cap - b->len > n)
    return 0; /* keeps one byte for the terminating NUL */
  if (n < SIZE_MAX - b->len && array_grow((void **)&b->data, &b->cap, b->len + n + 1, 1, 256) == 0)
    return 0; /* + 1: the terminating NUL */
  b->failed = 1;
  return -1;
}

/* "00" to "99": two digits per division. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

char *prom_u64_text(char *p, uint64_t v) {
  static const uint64_t pow10[20] = {1,
                                     10,
                                     100,
                                     1000,
                                     10000,
                                     100000,
                                     1000000,
                                     10000000,
                                     100000000,
                                     1000000000,
                                     10000000000ull,
                                     100000000000ull,
                                     1000000000000ull,
                                     10000000000000ull,
                                     100000000000000ull,
                                     1000000000000000ull,
                                     10000000000000000ull,
                                     100000000000000000ull,
                                     1000000000000000000ull,
                                     10000000000000000000ull};
  unsigned n = 1; /* digits */
  while (n < 20 && v >= pow10[n])
    n++;
  char *end = p + n;
  while (v >= 100) {
    unsigned r = (unsigned)(v % 100);
    v /= 100;
    end -= 2;
    memcpy(end, digit_pairs + 2 * r, 2);
  }
  if (v >= 10) {
    end -= 2;
    memcpy(end, digit_pairs + 2 * v, 2);
  } else {
    *--end = (char)('0' + v);
  }
  return p + n;
}

void prom_buf_u64(prom_buf *b, uint64_t v) {
  if (prom_buf_reserve(b, 20) == 0)
    b->len = (size_t)(prom_u64_text(b->data + b->len, v) - b->data);
}

void prom_buf_i64(prom_buf *b, int64_t v) {
  if (v < 0) {
    prom_buf_putc(b, '-');
    prom_buf_u64(b, (uint64_t)0 - (uint64_t)v);
  } else {
    prom_buf_u64(b, (uint64_t)v);
  }
}

/* printf of a double with the '.' decimal point, whatever the locale. */
static int format_double(char *out, size_t outlen, int precision, double v) {
  locale_t old = c_numeric_enter();
  int n = snprintf(out, outlen, "%.*g", precision, v);
  c_numeric_leave(old);
  if (!old) { /* no C locale object: repair the decimal point by hand */
    for (char *p = out; *p; p++)
      if (*p == ',')
        *p = '.';
  }
  return n;
}

/* The text of recent non-integral doubles by their bits: one value always
 * gives one text, and most such values of a scrape (device-call seconds
 * totals, _created stamps) are the previous scrape's, while the printf and
 * strtod below cost about 0.3 us a value. Per thread: no lock. */
#define DOUBLE_MEMO 64
static _Thread_local struct {
  uint64_t bits; /* 0: empty (0.0 is integral and never comes here) */
  char text[31];
  unsigned char len;
} double_memo[DOUBLE_MEMO];

void prom_buf_double(prom_buf *b, double v) {
  if (isnan(v)) {
    prom_buf_put(b, "NaN", 3);
  } else if (isinf(v)) {
    prom_buf_puts(b, v > 0 ? "+Inf" : "-Inf");
  } else if (v == trunc(v) && fabs(v) < 9007199254740992.0) { /* integral, below 2^53 */
    prom_buf_i64(b, (int64_t)v);
  } else {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    size_t slot = (size_t)((bits * 0x9E3779B97F4A7C15ull) >> 58);
    if (double_memo[slot].bits == bits) {
      prom_buf_put(b, double_memo[slot].text, double_memo[slot].len);
      return;
    }
    char tmp[40];
    int n = format_double(tmp, sizeof tmp, 15, v);
    if (c_strtod(tmp, NULL) != v)
      n = format_double(tmp, sizeof tmp, 17, v);
    if (n <= 0)
      return;
    size_t len = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
    prom_buf_put(b, tmp, len);
    if (len <= sizeof double_memo[slot].text) {
      double_memo[slot].bits = bits;
      memcpy(double_memo[slot].text, tmp, len);
      double_memo[slot].len = (unsigned char)len;
    }
  }
}

void prom_buf_escaped(prom_buf *b, const char *s, int escape_quote) {
  const char *run = s; /* copy runs that need no escaping in one go */
  for (; *s; s++) {
    const char *esc = NULL;
    if (*s == '\\')
      esc = "\\\\";
    else if (*s == '\n')
      esc = "\\n";
    else if (*s == '"' && escape_quote)
      esc = "\\\"";
    if (esc) {
      prom_buf_put(b, run, (size_t)(s - run));
      prom_buf_put(b, esc, 2);
      run = s + 1;
    }
  }
  prom_buf_put(b, run, (size_t)(s - run));
}
