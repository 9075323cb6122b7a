/* A writer of metric families in the Prometheus text format 0.0.4 or in
 * OpenMetrics 1.0, from one call sequence:
 *
 *   prom_family(w, "gpupool_frees", PROM_COUNTER, "Successful frees.");
 *   prom_counter(w, pool_labels, NULL, 0, 42, 0);    // gpupool_frees_total{...} 42
 *
 * The writer spells the per-format details: HELP/TYPE once per family (and
 * UNIT in OpenMetrics, taken from a _bytes/_seconds name suffix), the _total
 * suffix of counters, _created in OpenMetrics, info families, histogram
 * buckets, escaping, and the closing "# EOF" of OpenMetrics. The caller keeps
 * the samples of a family together.
 *
 * Labels come in two parts: a pre-rendered, already escaped run of
 * name="value" pairs shared by many samples (see prom_render_labels), and a
 * few extra pairs per sample (at most PROM_EXTRA_MAX), escaped as they are
 * written. */
#ifndef GPUPOOL_PROM_WRITER_H
#define GPUPOOL_PROM_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "prom_buf.h"

typedef enum { PROM_FORMAT_TEXT, PROM_FORMAT_OPENMETRICS } prom_format;

#define PROM_CONTENT_TYPE_TEXT        "text/plain; version=0.0.4; charset=utf-8"
#define PROM_CONTENT_TYPE_OPENMETRICS "application/openmetrics-text; version=1.0.0; charset=utf-8"
#define PROM_CONTENT_TYPE_OPENMETRICS_0_0_1                                                        \
  "application/openmetrics-text; version=0.0.1; charset=utf-8"

typedef enum {
  PROM_GAUGE,
  PROM_COUNTER,   /* family name without _total */
  PROM_HISTOGRAM, /* family name without _bucket/_sum/_count */
  PROM_SUMMARY,   /* _sum and _count, no quantiles */
  PROM_INFO,      /* family name without _info; a gauge of 1 in the text format */
} prom_type;

#define PROM_EXTRA_MAX 8 /* extra label pairs of one sample */

typedef struct prom_label {
  const char *name;
  const char *value;
} prom_label;

typedef struct prom_writer {
  prom_buf *buf;
  prom_format format;
  prom_type type;
  char family[160];
  size_t family_len;
  const char *help;
  int header_pending;
} prom_writer;

void prom_writer_init(prom_writer *w, prom_buf *buf, prom_format format);
/* Starts a family. name must be a valid metric name (at most 140 bytes);
 * help must stay valid until the next prom_family. The HELP/TYPE lines are
 * written with the first sample: a family without samples is left out. */
void prom_family(prom_writer *w, const char *name, prom_type type, const char *help);
/* Writes the HELP/TYPE lines of the family started last now: for a family a
 * scraper expects to find even while it has no samples. */
void prom_family_declare(prom_writer *w);

/* Gauge (and info) samples. */
void prom_gauge_u64(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                    uint64_t v);
void prom_gauge_i64(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                    int64_t v);
void prom_gauge_double(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                       double v);
/* created_s: when the counter started from zero, in seconds since the epoch
 * (OpenMetrics _created); 0 = unknown, not written. */
void prom_counter(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                  uint64_t v, double created_s);
void prom_summary(prom_writer *w, const char *labels, const prom_label *extra, size_t nextra,
                  double sum, uint64_t count, double created_s);
/* Histogram with upper bounds le[0..n-1] (ascending numbers, as text) and
 * non-cumulative counts per bucket; counts[n] holds what lies above le[n-1].
 * Writes the cumulative buckets, le="+Inf", _count (equal to +Inf) and _sum. */
void prom_histogram(prom_writer *w, const char *labels, const char *const *le,
                    const uint64_t *counts, size_t n, double sum, double created_s);

/* Ends the exposition ("# EOF" in OpenMetrics). */
void prom_finish(prom_writer *w);

/* Appends name="value" pairs, comma-separated and escaped, to out: the
 * shared part of the labels of many samples. Nothing is written for pairs
 * whose value is NULL. */
void prom_render_labels(prom_buf *out, const prom_label *labels, size_t n);

#endif
