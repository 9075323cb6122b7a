#include "pool_name.h"

#include <stdio.h>
#include <string.h>

/* Length of the UTF-8 sequence at s (NUL-terminated) if it is a valid
 * encoding of a character that is not a control character, else 0. */
static size_t text_char_len(const unsigned char *s) {
  unsigned c = s[0];
  if (c < 0x80)
    return c >= 0x20 && c != 0x7F ? 1 : 0;
  size_t n;
  unsigned cp, min;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2, cp = c & 0x1F, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3, cp = c & 0x0F, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4, cp = c & 0x07, min = 0x10000;
  else
    return 0; /* a continuation byte, an overlong lead (C0, C1) or F5..FF */
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) /* also the NUL of a name cut short */
      return 0;
    cp = cp << 6 | (s[i] & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x80 && cp <= 0x9F))
    return 0;
  return n;
}

int pool_name_check(const char *name, char *err, size_t errlen) {
  size_t len = strlen(name);
  if (len == 0 || len > POOL_NAME_MAX) {
    snprintf(err, errlen, "name: must be 1 to %d bytes, not %zu", POOL_NAME_MAX, len);
    return -1;
  }
  const unsigned char *s = (const unsigned char *)name;
  for (size_t i = 0; i < len;) {
    size_t n = text_char_len(s + i);
    if (n == 0) {
      snprintf(err, errlen,
               "name: must be UTF-8 text without control characters (byte 0x%02x at offset %zu "
               "is not)",
               s[i], i);
      return -1;
    }
    i += n;
  }
  return 0;
}
