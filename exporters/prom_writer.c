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

/* name{labels,extra...} and the space before the value. */
static void put_series(prom_writer *w, const char *suffix, const char *labels,
                       const prom_label *extra, size_t nextra) {
  prom_buf *b = w->buf;
  if (w->header_pending)
    put_header(w);
  prom_buf_put(b, w->family, w->family_len);
  if (suffix)
    prom_buf_puts(b, suffix);
  int have_labels = labels && *labels;
  if (have_labels || nextra) {
    prom_buf_putc(b, '{');
    if (have_labels)
      prom_buf_puts(b, labels);
    for (size_t i = 0; i < nextra; i++) {
      if (have_labels || i)
        prom_buf_putc(b, ',');
      prom_buf_puts(b, extra[i].name);
      prom_buf_put(b, "=\"", 2);
      prom_buf_escaped(b, extra[i].value ? extra[i].value : "", 1);
      prom_buf_putc(b, '"');
    }
    prom_buf_putc(b, '}');
  }
  prom_buf_putc(b, ' ');
}

static const char *gauge_suffix(const prom_writer *w) {
  return w->type == PROM_INFO ? "_info" : NULL;
}

void prom_gauge_u64(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                    uint64_t v) {
  put_series(w, gauge_suffix(w), labels, extra, nextra);
  prom_buf_u64(w->buf, v);
  prom_buf_putc(w->buf, '\n');
}

void prom_gauge_i64(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                    int64_t v) {
  put_series(w, gauge_suffix(w), labels, extra, nextra);
  prom_buf_i64(w->buf, v);
  prom_buf_putc(w->buf, '\n');
}

void prom_gauge_double(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                       double v) {
  put_series(w, gauge_suffix(w), labels, extra, nextra);
  prom_buf_double(w->buf, v);
  prom_buf_putc(w->buf, '\n');
}

static void put_created(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                        double created_s) {
  if (w->format != PROM_FORMAT_OPENMETRICS || created_s <= 0)
    return;
  put_series(w, "_created", labels, extra, nextra);
  prom_buf_double(w->buf, created_s);
  prom_buf_putc(w->buf, '\n');
}

void prom_counter(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                  uint64_t v, double created_s) {
  put_series(w, "_total", labels, extra, nextra);
  prom_buf_u64(w->buf, v);
  prom_buf_putc(w->buf, '\n');
  put_created(w, labels, extra, nextra, created_s);
}

void prom_summary(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                  double sum, uint64_t count, double created_s) {
  put_series(w, "_sum", labels, extra, nextra);
  prom_buf_double(w->buf, sum);
  prom_buf_putc(w->buf, '\n');
  put_series(w, "_count", labels, extra, nextra);
  prom_buf_u64(w->buf, count);
  prom_buf_putc(w->buf, '\n');
  put_created(w, labels, extra, nextra, created_s);
}

void prom_histogram(prom_writer *w, const char *labels, const char *const *le,
                    const uint64_t *counts, size_t n, double sum, double created_s) {
  prom_buf *b = w->buf;
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= n; i++) {
    cumulative += counts[i];
    prom_label l = {"le", i < n ? le[i] : "+Inf"};
    put_series(w, "_bucket", labels, &l, 1);
    prom_buf_u64(b, cumulative);
    prom_buf_putc(b, '\n');
  }
  put_series(w, "_count", labels, NULL, 0);
  prom_buf_u64(b, cumulative);
  prom_buf_putc(b, '\n');
  put_series(w, "_sum", labels, NULL, 0);
  prom_buf_double(b, sum);
  prom_buf_putc(b, '\n');
  put_created(w, labels, NULL, 0, created_s);
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
