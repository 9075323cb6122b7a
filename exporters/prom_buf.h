/* A growing output buffer with the number and string formatting the
 * Prometheus exposition formats need: decimal integers written by hand,
 * doubles printed the same whatever the program's locale, NaN and +Inf/-Inf
 * spelled as Prometheus reads them. One buffer takes a whole scrape: it grows
 * by doubling, so a scrape makes a handful of allocations, none per sample. */
#ifndef GPUPOOL_PROM_BUF_H
#define GPUPOOL_PROM_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct prom_buf {
  char *data;
  size_t len;
  size_t cap;
  int failed; /* an allocation failed: the content is incomplete */
} prom_buf;

void prom_buf_init(prom_buf *b, size_t initial_cap);
void prom_buf_free(prom_buf *b);
/* Hands the content (NUL-terminated) to the caller, who frees it; the buffer
 * is left empty. NULL when an allocation failed along the way. */
char *prom_buf_take(prom_buf *b, size_t *len);

/* Makes room for n more bytes; 0 on success. */
int prom_buf_reserve(prom_buf *b, size_t n);

/* Inline: a scrape makes thousands of these calls, almost all of which only
 * copy (the buffer is sized from the previous scrape). */
static inline void prom_buf_put(prom_buf *b, const char *s, size_t n) {
  if (b->cap - b->len > n || prom_buf_reserve(b, n) == 0) {
    memcpy(b->data + b->len, s, n);
    b->len += n;
  }
}

static inline void prom_buf_puts(prom_buf *b, const char *s) {
  prom_buf_put(b, s, strlen(s));
}

static inline void prom_buf_putc(prom_buf *b, char c) {
  if (b->cap - b->len > 1 || prom_buf_reserve(b, 1) == 0)
    b->data[b->len++] = c;
}

/* Writes v in decimal at p, which has room for 20 bytes; returns the end. */
char *prom_u64_text(char *p, uint64_t v);

void prom_buf_u64(prom_buf *b, uint64_t v);
void prom_buf_i64(prom_buf *b, int64_t v);
/* Shortest of %.15g/%.17g that reads back exactly, always with '.', or an
 * integer when v is one; "NaN", "+Inf", "-Inf". */
void prom_buf_double(prom_buf *b, double v);

/* Escaping of the exposition formats: label values escape backslash, double
 * quote and newline; HELP text escapes backslash and newline (and, in
 * OpenMetrics, the double quote too: pass escape_quote). */
void prom_buf_escaped(prom_buf *b, const char *s, int escape_quote);

#endif
