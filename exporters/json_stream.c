#include "json_stream.h"

#include <stdlib.h>
#include <string.h>

#include "core/array_grow.h"
#include "core/utf8.h"

void json_buf_init(json_buf *b) {
  memset(b, 0, sizeof *b);
}

void json_buf_free(json_buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

size_t json_buf_pending(const json_buf *b) {
  return b->len - b->off;
}

size_t json_buf_drain(json_buf *b, char *dst, size_t max) {
  size_t n = json_buf_pending(b);
  if (n > max)
    n = max;
  if (n == 0)
    return 0;
  memcpy(dst, b->data + b->off, n);
  b->off += n;
  if (b->off == b->len)
    b->off = b->len = 0;
  return n;
}

/* Room for n more bytes; drained bytes are reclaimed before growing. */
static int reserve(json_buf *b, size_t n) {
  if (b->failed)
    return -1;
  if (b->len + n <= b->cap)
    return 0;
  if (b->off > 0) {
    memmove(b->data, b->data + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
    if (b->len + n <= b->cap)
      return 0;
  }
  if (array_grow((void **)&b->data, &b->cap, b->len + n, 1, 4096) == 0)
    return 0;
  b->failed = 1;
  return -1;
}

void json_put(json_buf *b, const char *s, size_t n) {
  if (reserve(b, n) == 0) {
    memcpy(b->data + b->len, s, n);
    b->len += n;
  }
}

void json_puts(json_buf *b, const char *s) {
  json_put(b, s, strlen(s));
}

void json_putc(json_buf *b, char c) {
  if (reserve(b, 1) == 0)
    b->data[b->len++] = c;
}

void json_u64(json_buf *b, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  if (reserve(b, n) != 0)
    return;
  while (n)
    b->data[b->len++] = tmp[--n];
}

void json_i64(json_buf *b, int64_t v) {
  if (v < 0) {
    json_putc(b, '-');
    json_u64(b, (uint64_t)0 - (uint64_t)v);
  } else {
    json_u64(b, (uint64_t)v);
  }
}

void json_hex_string(json_buf *b, uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  char tmp[16];
  size_t n = 0;
  do {
    tmp[n++] = digits[v & 15];
    v >>= 4;
  } while (v);
  if (reserve(b, n + 4) != 0)
    return;
  b->data[b->len++] = '"';
  b->data[b->len++] = '0';
  b->data[b->len++] = 'x';
  while (n)
    b->data[b->len++] = tmp[--n];
  b->data[b->len++] = '"';
}

void json_ns_as_us(json_buf *b, int64_t ns) {
  uint64_t mag = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
  if (ns < 0)
    json_putc(b, '-');
  json_u64(b, mag / 1000);
  unsigned frac = (unsigned)(mag % 1000);
  char tail[4] = {'.', (char)('0' + frac / 100), (char)('0' + frac / 10 % 10),
                  (char)('0' + frac % 10)};
  json_put(b, tail, 4);
}

void json_string_n(json_buf *b, const char *str, size_t max_bytes) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *s = (const unsigned char *)str;
  size_t n = strnlen(str, max_bytes);
  json_putc(b, '"');
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t len = utf8_char_len(s + i, n - i);
    if (len == 0) {
      json_puts(b, "\\ufffd");
      i++;
      continue;
    }
    if (len > 1) {
      json_put(b, (const char *)s + i, len);
    } else if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      json_put(b, esc, 2);
    } else if (c == '\n') {
      json_puts(b, "\\n");
    } else if (c == '\t') {
      json_puts(b, "\\t");
    } else if (c == '\r') {
      json_puts(b, "\\r");
    } else if (c < 0x20 || c == 0x7f) {
      char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      json_put(b, esc, 6);
    } else {
      json_putc(b, (char)c);
    }
    i += len;
  }
  json_putc(b, '"');
}

void json_string(json_buf *b, const char *s) {
  s = s ? s : "";
  json_string_n(b, s, strlen(s));
}
