#include "prom_writer.h"

#include <string.h>

static const char *type_name(prom_type t, prom_format f) {
  switch (t) {
  case PROM_COUNTER:
    return "counter";
  case PROM_HISTOGRAM:
    return "histogram";
  case PROM_SUMMARY:
    return "summary";
  case PROM_INFO:
    return f == PROM_FORMAT_OPENMETRICS ? "info" : "gauge";
  case PROM_GAUGE:
  default:
    return "gauge";
  }
}

static int ends_with(const char *s, size_t n, const char *suffix) {
  size_t k = strlen(suffix);
  return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

void prom_writer_init(prom_writer *w, prom_buf *buf, prom_format format) {
  memset(w, 0, sizeof *w);
  w->buf = buf;
  w->format = format;
}

/* The name on HELP/TYPE lines: OpenMetrics names the family, the text format
 * names the sample (counters with _total, info gauges with _info). */
static void put_meta_name(prom_writer *w) {
  prom_buf_put(w->buf, w->family, w->family_len);
  if (w->format == PROM_FORMAT_TEXT) {
    if (w->type == PROM_COUNTER)
      prom_buf_put(w->buf, "_total", 6);
    if (w->type == PROM_INFO)
      prom_buf_put(w->buf, "_info", 5);
  }
}

void prom_family(prom_writer *w, const char *name, prom_type type, const char *help) {
  size_t n = strlen(name);
  if (n >= sizeof w->family - 16)
    n = sizeof w->family - 16;
  memcpy(w->family, name, n);
  w->family[n] = '\0';
  w->family_len = n;
  w->type = type;
  w->help = help;
  w->header_pending = 1;
}

/* HELP, TYPE and UNIT lines, written with the family's first sample so that
 * a family without samples leaves no trace. */
static void put_header(prom_writer *w) {
  int om = w->format == PROM_FORMAT_OPENMETRICS;
  w->header_pending = 0;
  prom_buf_put(w->buf, "# HELP ", 7);
  put_meta_name(w);
  prom_buf_putc(w->buf, ' ');
  prom_buf_escaped(w->buf, w->help, om);
  prom_buf_put(w->buf, "\n# TYPE ", 8);
  put_meta_name(w);
  prom_buf_putc(w->buf, ' ');
  prom_buf_puts(w->buf, type_name(w->type, w->format));
  prom_buf_putc(w->buf, '\n');
  if (om && w->type != PROM_INFO) {
    const char *unit = ends_with(w->family, w->family_len, "_bytes")     ? "bytes"
                       : ends_with(w->family, w->family_len, "_seconds") ? "seconds"
                                                                         : NULL;
    if (unit) {
      prom_buf_put(w->buf, "# UNIT ", 7);
      put_meta_name(w);
      prom_buf_putc(w->buf, ' ');
      prom_buf_puts(w->buf, unit);
      prom_buf_putc(w->buf, '\n');
    }
  }
}

void prom_family_declare(prom_writer *w) {
  if (w->header_pending)
    put_header(w);
}

/* Room reserved after a series' name and labels: the longest value text
 * (20 digits and a sign) and the newline. */
#define VALUE_ROOM 24

/* s (n bytes) escaped as a label value at p, which has room for 2n. */
static char *copy_escaped(char *p, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '\\' || c == '"' || c == '\n') {
      *p++ = '\\';
      c = c == '\n' ? 'n' : c;
    }
    *p++ = c;
  }
  return p;
}

/* name{labels,extra...} and the space before the value, with one
 * reservation for the whole line; returns where the value goes (with
 * VALUE_ROOM bytes free), or NULL when memory ran out. labels_len is
 * strlen(labels): the callers writing several lines count it once. */
static char *put_series(prom_writer *w, const char *suffix, size_t suffix_len, const char *labels,
                        size_t labels_len, const prom_label *extra, size_t nextra) {
  prom_buf *b = w->buf;
  if (w->header_pending)
    put_header(w);
  size_t need = w->family_len + suffix_len + labels_len + 3 + VALUE_ROOM;
  size_t name_len[PROM_EXTRA_MAX], value_len[PROM_EXTRA_MAX];
  if (nextra > PROM_EXTRA_MAX)
    nextra = PROM_EXTRA_MAX;
  for (size_t i = 0; i < nextra; i++) {
    name_len[i] = strlen(extra[i].name);
    value_len[i] = extra[i].value ? strlen(extra[i].value) : 0;
    need += name_len[i] + 2 * value_len[i] + 4;
  }
  if (prom_buf_reserve(b, need) != 0)
    return NULL;
  char *p = b->data + b->len;
  memcpy(p, w->family, w->family_len);
  p += w->family_len;
  memcpy(p, suffix, suffix_len);
  p += suffix_len;
  if (labels_len || nextra) {
    *p++ = '{';
    if (labels_len) /* labels may be NULL */
      memcpy(p, labels, labels_len);
    p += labels_len;
    for (size_t i = 0; i < nextra; i++) {
      if (labels_len || i)
        *p++ = ',';
      memcpy(p, extra[i].name, name_len[i]);
      p += name_len[i];
      *p++ = '=';
      *p++ = '"';
      p = copy_escaped(p, extra[i].value ? extra[i].value : "", value_len[i]);
      *p++ = '"';
    }
    *p++ = '}';
  }
  *p++ = ' ';
  return p;
}

static size_t labels_length(const char *labels) {
  return labels ? strlen(labels) : 0;
}

/* The value and the newline at p (from put_series). */
static void end_u64(prom_writer *w, char *p, uint64_t v) {
  if (!p)
    return;
  p = prom_u64_text(p, v);
  *p++ = '\n';
  w->buf->len = (size_t)(p - w->buf->data);
}

static void end_double(prom_writer *w, char *p, double v) {
  if (!p)
    return;
  w->buf->len = (size_t)(p - w->buf->data);
  prom_buf_double(w->buf, v);
  prom_buf_putc(w->buf, '\n');
}

#define SUFFIX(s) s, sizeof s - 1

static char *put_gauge_series(prom_writer *w, const char *labels, const prom_label *extra,
                              size_t nextra) {
  if (w->type == PROM_INFO)
    return put_series(w, SUFFIX("_info"), labels, labels_length(labels), extra, nextra);
  return put_series(w, SUFFIX(""), labels, labels_length(labels), extra, nextra);
}

void prom_gauge_u64(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                    uint64_t v) {
  end_u64(w, put_gauge_series(w, labels, extra, nextra), v);
}

void prom_gauge_i64(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                    int64_t v) {
  char *p = put_gauge_series(w, labels, extra, nextra);
  if (p && v < 0)
    *p++ = '-';
  end_u64(w, p, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
}

void prom_gauge_double(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                       double v) {
  end_double(w, put_gauge_series(w, labels, extra, nextra), v);
}

static void put_created(prom_writer *w, const char *labels, size_t labels_len,
                        const prom_label *extra, size_t nextra, double created_s) {
  if (w->format != PROM_FORMAT_OPENMETRICS || created_s <= 0)
    return;
  end_double(w, put_series(w, SUFFIX("_created"), labels, labels_len, extra, nextra), created_s);
}

void prom_counter(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                  uint64_t v, double created_s) {
  size_t n = labels_length(labels);
  end_u64(w, put_series(w, SUFFIX("_total"), labels, n, extra, nextra), v);
  put_created(w, labels, n, extra, nextra, created_s);
}

void prom_summary(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                  double sum, uint64_t count, double created_s) {
  size_t n = labels_length(labels);
  end_double(w, put_series(w, SUFFIX("_sum"), labels, n, extra, nextra), sum);
  end_u64(w, put_series(w, SUFFIX("_count"), labels, n, extra, nextra), count);
  put_created(w, labels, n, extra, nextra, created_s);
}

/* The bucket lines share "name_bucket{labels,le=\"": it is written once
 * and copied for each bound, with one reservation for all of them. */
void prom_histogram(prom_writer *w, const char *labels, const char *const *le,
                    const uint64_t *counts, size_t n, double sum, double created_s) {
  size_t labels_len = labels_length(labels);
  char *p = put_series(w, SUFFIX("_bucket"), labels, labels_len, NULL, 0);
  if (!p)
    return;
  prom_buf *b = w->buf;
  size_t start = b->len;
  size_t prefix = (size_t)(p - b->data) - start - 2; /* less "} " or the " " of no labels */
  if (!labels_len)
    prefix++;
  size_t le_room = 0;
  for (size_t i = 0; i < n; i++)
    le_room += 2 * strlen(le[i]);
  /* per line: the prefix, ,le=" (5), +Inf or the bound, "} (3), the value */
  if (prom_buf_reserve(b, (n + 1) * (prefix + 12 + VALUE_ROOM) + le_room) != 0)
    return;
  char *line = b->data + start; /* the prefix, written by put_series */
  p = line;
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= n; i++) {
    cumulative += counts[i];
    if (i)
      memcpy(p, line, prefix);
    p += prefix;
    memcpy(p, labels_len ? ",le=\"" : "{le=\"", 5);
    p += 5;
    if (i < n) {
      p = copy_escaped(p, le[i], strlen(le[i]));
    } else {
      memcpy(p, "+Inf", 4);
      p += 4;
    }
    memcpy(p, "\"} ", 3);
    p = prom_u64_text(p + 3, cumulative);
    *p++ = '\n';
  }
  b->len = (size_t)(p - b->data);
  end_u64(w, put_series(w, SUFFIX("_count"), labels, labels_len, NULL, 0), cumulative);
  end_double(w, put_series(w, SUFFIX("_sum"), labels, labels_len, NULL, 0), sum);
  put_created(w, labels, labels_len, NULL, 0, created_s);
}

void prom_finish(prom_writer *w) {
  if (w->format == PROM_FORMAT_OPENMETRICS)
    prom_buf_put(w->buf, "# EOF\n", 6);
}

void prom_render_labels(prom_buf *out, const prom_label *labels, size_t n) {
  int first = 1;
  for (size_t i = 0; i < n; i++) {
    if (!labels[i].value)
      continue;
    if (!first)
      prom_buf_putc(out, ',');
    first = 0;
    prom_buf_puts(out, labels[i].name);
    prom_buf_put(out, "=\"", 2);
    prom_buf_escaped(out, labels[i].value, 1);
    prom_buf_putc(out, '"');
  }
}
