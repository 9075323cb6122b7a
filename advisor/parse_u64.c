#include "parse_u64.h"

static unsigned digit_value(char c) {
  if (c >= '0' && c <= '9')
    return (unsigned)(c - '0');
  if (c >= 'a' && c <= 'f')
    return (unsigned)(c - 'a' + 10);
  if (c >= 'A' && c <= 'F')
    return (unsigned)(c - 'A' + 10);
  return 16; /* no digit of any base read here */
}

int parse_u64(const char *s, unsigned spellings, uint64_t *out) {
  unsigned base = 10;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s += 2;
  }
  if (!(spellings & (base == 16 ? U64_HEX : U64_DECIMAL)) || !*s)
    return -1;
  uint64_t v = 0;
  for (; *s; s++) {
    unsigned d = digit_value(*s);
    if (d >= base || v > (UINT64_MAX - d) / base)
      return -1;
    v = v * base + d;
  }
  *out = v;
  return 0;
}
