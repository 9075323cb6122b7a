/* A small growing buffer for writing JSON by hand, piece by piece, for
 * documents that are streamed rather than built as a tree (the trace). It
 * escapes strings (replacing invalid UTF-8 so the output is always valid
 * JSON) and prints numbers with integer arithmetic only, so the output never
 * depends on the program's locale. An allocation failure sets `failed` and
 * later writes are ignored: the caller checks it once per chunk. */
#ifndef GPUPOOL_JSON_STREAM_H
#define GPUPOOL_JSON_STREAM_H

#include <stddef.h>
#include <stdint.h>

typedef struct json_buf {
  char *data;
  size_t len; /* bytes written */
  size_t off; /* bytes already handed out by json_buf_drain */
  size_t cap;
  int failed;
} json_buf;

void json_buf_init(json_buf *b);
void json_buf_free(json_buf *b);

/* Bytes written but not yet drained. */
size_t json_buf_pending(const json_buf *b);
/* Copies up to max pending bytes to dst; returns how many. */
size_t json_buf_drain(json_buf *b, char *dst, size_t max);

void json_put(json_buf *b, const char *s, size_t n);
void json_puts(json_buf *b, const char *s); /* raw, no escaping */
void json_putc(json_buf *b, char c);
void json_u64(json_buf *b, uint64_t v);
void json_i64(json_buf *b, int64_t v);
/* "0x" followed by lowercase hex digits, quoted: "0x7f12a0000000". */
void json_hex_string(json_buf *b, uint64_t v);
/* A signed nanosecond count as microseconds with exactly 3 decimals:
 * 1234567 -> 1234.567, -1500 -> -1.500. */
void json_ns_as_us(json_buf *b, int64_t ns);
/* A quoted, escaped JSON string of at most max_bytes of s. Bytes that are
 * not valid UTF-8 (a character cut by the limit included) become U+FFFD. */
void json_string_n(json_buf *b, const char *s, size_t max_bytes);
void json_string(json_buf *b, const char *s);

#endif
