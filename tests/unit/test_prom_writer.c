/* The exposition writer: number formatting (whatever the locale), escaping,
 * the per-format spelling of families, and the histogram invariants. */
#include <criterion/criterion.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exporters/prom_buf.h"
#include "exporters/prom_writer.h"

/* The buffer's content as a string (the buffer stays usable). */
static const char *text(prom_buf *b) {
  prom_buf_putc(b, '\0');
  b->len--;
  return b->data;
}

static const char *fmt_double(prom_buf *b, double v) {
  b->len = 0;
  prom_buf_double(b, v);
  return text(b);
}

Test(prom_buf, integers) {
  prom_buf b;
  prom_buf_init(&b, 0);
  prom_buf_u64(&b, 0);
  prom_buf_putc(&b, ' ');
  prom_buf_u64(&b, UINT64_MAX);
  prom_buf_putc(&b, ' ');
  prom_buf_i64(&b, INT64_MIN);
  prom_buf_putc(&b, ' ');
  prom_buf_i64(&b, -42);
  cr_assert_str_eq(text(&b), "0 18446744073709551615 -9223372036854775808 -42");
  prom_buf_free(&b);
}

Test(prom_buf, doubles_read_back_exactly) {
  prom_buf b;
  prom_buf_init(&b, 0);
  cr_assert_str_eq(fmt_double(&b, 0.5), "0.5");
  cr_assert_str_eq(fmt_double(&b, 0.1), "0.1");
  cr_assert_str_eq(fmt_double(&b, 3.0), "3");
  cr_assert_str_eq(fmt_double(&b, -0.0), "0");
  cr_assert_str_eq(fmt_double(&b, 1e-9), "1e-09");
  cr_assert_str_eq(fmt_double(&b, 103024.0 / 1e9), "0.000103024");
  cr_assert_str_eq(fmt_double(&b, 9007199254740992.0), "9007199254740992");
  const double samples[] = {1.0 / 3.0, 2.0 / 3.0,  1e300,
                            -1.5e-300, 123456.789, 0.30000000000000004};
  for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
    const char *s = fmt_double(&b, samples[i]);
    cr_assert_eq(strtod(s, NULL), samples[i], "%s does not read back as %.17g", s, samples[i]);
  }
  prom_buf_free(&b);
}

Test(prom_buf, special_values) {
  prom_buf b;
  prom_buf_init(&b, 0);
  cr_assert_str_eq(fmt_double(&b, NAN), "NaN");
  cr_assert_str_eq(fmt_double(&b, INFINITY), "+Inf");
  cr_assert_str_eq(fmt_double(&b, -INFINITY), "-Inf");
  prom_buf_free(&b);
}

/* A locale whose decimal point is a comma: an installed one, or one built
 * with localedef into a temporary directory. */
static int set_comma_locale(char *dir, size_t dirlen) {
  const char *names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (setlocale(LC_NUMERIC, names[i]))
      return 0;
  snprintf(dir, dirlen, "/tmp/gpupool-locale-%ld", (long)getpid());
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "mkdir -p %s && localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir, dir);
  if (system(cmd) != 0)
    return -1;
  setenv("LOCPATH", dir, 1);
  return setlocale(LC_NUMERIC, "de_DE.UTF-8") ? 0 : -1;
}

Test(prom_buf, numbers_ignore_the_locale) {
  char dir[256] = "";
  int ok = set_comma_locale(dir, sizeof dir) == 0;
  if (dir[0]) { /* the locale is loaded: its files are no longer needed */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
  }
  if (!ok)
    cr_skip("no locale with a decimal comma is installed and localedef cannot build one");
  char probe[32];
  snprintf(probe, sizeof probe, "%.1f", 0.5);
  cr_assert_str_eq(probe, "0,5", "the test locale should print a comma");
  prom_buf b;
  prom_buf_init(&b, 0);
  cr_assert_str_eq(fmt_double(&b, 0.5), "0.5");
  cr_assert_str_eq(fmt_double(&b, 1.0 / 3.0), "0.33333333333333331");
  cr_assert_str_eq(fmt_double(&b, 2.5e-7), "2.5e-07");
  prom_buf_free(&b);
  setlocale(LC_NUMERIC, "C");
}

Test(prom_buf, escaping) {
  prom_buf b;
  prom_buf_init(&b, 0);
  prom_buf_escaped(&b, "a\\b\"c\nd", 1);
  cr_assert_str_eq(text(&b), "a\\\\b\\\"c\\nd");
  b.len = 0;
  prom_buf_escaped(&b, "a\\b\"c\nd", 0); /* HELP in the text format keeps the quote */
  cr_assert_str_eq(text(&b), "a\\\\b\"c\\nd");
  prom_buf_free(&b);
}

Test(prom_buf, take_hands_over_the_content) {
  prom_buf b;
  prom_buf_init(&b, 4);
  for (int i = 0; i < 1000; i++)
    prom_buf_puts(&b, "0123456789");
  size_t len;
  char *s = prom_buf_take(&b, &len);
  cr_assert_eq(len, 10000);
  cr_assert_eq(strlen(s), 10000);
  cr_assert_null(b.data);
  free(s);
}

static const char *render(prom_format f, void (*fill)(prom_writer *w), prom_buf *b) {
  prom_buf_init(b, 0);
  prom_writer w;
  prom_writer_init(&w, b, f);
  fill(&w);
  prom_finish(&w);
  return text(b);
}

static void counter_family(prom_writer *w) {
  prom_family(w, "app_frees", PROM_COUNTER, "Frees \"done\" \\ here\nnext line.");
  prom_label l = {"pool", "a\"b\\c\nd"};
  prom_counter(w, "device=\"0\"", &l, 1, 7, 1700000000.5);
}

Test(prom_writer, counter_in_text_format) {
  prom_buf b;
  const char *s = render(PROM_FORMAT_TEXT, counter_family, &b);
  cr_assert_str_eq(s, "# HELP app_frees_total Frees \"done\" \\\\ here\\nnext line.\n"
                      "# TYPE app_frees_total counter\n"
                      "app_frees_total{device=\"0\",pool=\"a\\\"b\\\\c\\nd\"} 7\n");
  prom_buf_free(&b);
}

Test(prom_writer, counter_in_openmetrics) {
  prom_buf b;
  const char *s = render(PROM_FORMAT_OPENMETRICS, counter_family, &b);
  cr_assert_str_eq(s, "# HELP app_frees Frees \\\"done\\\" \\\\ here\\nnext line.\n"
                      "# TYPE app_frees counter\n"
                      "app_frees_total{device=\"0\",pool=\"a\\\"b\\\\c\\nd\"} 7\n"
                      "app_frees_created{device=\"0\",pool=\"a\\\"b\\\\c\\nd\"} 1700000000.5\n"
                      "# EOF\n");
  prom_buf_free(&b);
}

static void gauges(prom_writer *w) {
  prom_family(w, "app_empty_bytes", PROM_GAUGE, "Never sampled.");
  prom_family(w, "app_used_bytes", PROM_GAUGE, "Used.");
  prom_gauge_u64(w, NULL, NULL, 0, 5);
  prom_gauge_double(w, "", NULL, 0, NAN);
  prom_family(w, "app_build", PROM_INFO, "Build.");
  prom_label v = {"version", "1.0"};
  prom_gauge_u64(w, "", &v, 1, 1);
  prom_family(w, "app_wait_seconds", PROM_SUMMARY, "Waits.");
  prom_summary(w, "op=\"x\"", NULL, 0, 0.25, 3, 0);
}

Test(prom_writer, families_units_info_and_empty_ones) {
  prom_buf b;
  const char *s = render(PROM_FORMAT_TEXT, gauges, &b);
  cr_assert_str_eq(s, "# HELP app_used_bytes Used.\n# TYPE app_used_bytes gauge\n"
                      "app_used_bytes 5\napp_used_bytes NaN\n"
                      "# HELP app_build_info Build.\n# TYPE app_build_info gauge\n"
                      "app_build_info{version=\"1.0\"} 1\n"
                      "# HELP app_wait_seconds Waits.\n# TYPE app_wait_seconds summary\n"
                      "app_wait_seconds_sum{op=\"x\"} 0.25\napp_wait_seconds_count{op=\"x\"} 3\n");
  prom_buf_free(&b);
  s = render(PROM_FORMAT_OPENMETRICS, gauges, &b);
  cr_assert_str_eq(s, "# HELP app_used_bytes Used.\n# TYPE app_used_bytes gauge\n"
                      "# UNIT app_used_bytes bytes\n"
                      "app_used_bytes 5\napp_used_bytes NaN\n"
                      "# HELP app_build Build.\n# TYPE app_build info\n"
                      "app_build_info{version=\"1.0\"} 1\n"
                      "# HELP app_wait_seconds Waits.\n# TYPE app_wait_seconds summary\n"
                      "# UNIT app_wait_seconds seconds\n"
                      "app_wait_seconds_sum{op=\"x\"} 0.25\napp_wait_seconds_count{op=\"x\"} 3\n"
                      "# EOF\n");
  prom_buf_free(&b);
}

static void declared(prom_writer *w) {
  prom_family(w, "app_seen_bytes", PROM_GAUGE, "Declared.");
  prom_family_declare(w);
  prom_family(w, "app_seen", PROM_COUNTER, "Declared, then sampled.");
  prom_family_declare(w);
  prom_counter(w, NULL, NULL, 0, 2, 0);
}

Test(prom_writer, declared_families_without_samples) {
  prom_buf b;
  const char *s = render(PROM_FORMAT_TEXT, declared, &b);
  cr_assert_str_eq(s, "# HELP app_seen_bytes Declared.\n# TYPE app_seen_bytes gauge\n"
                      "# HELP app_seen_total Declared, then sampled.\n"
                      "# TYPE app_seen_total counter\napp_seen_total 2\n");
  prom_buf_free(&b);
  s = render(PROM_FORMAT_OPENMETRICS, declared, &b);
  cr_assert_str_eq(s, "# HELP app_seen_bytes Declared.\n# TYPE app_seen_bytes gauge\n"
                      "# UNIT app_seen_bytes bytes\n"
                      "# HELP app_seen Declared, then sampled.\n# TYPE app_seen counter\n"
                      "app_seen_total 2\n# EOF\n");
  prom_buf_free(&b);
}

static void histogram(prom_writer *w) {
  static const char *const le[] = {"1", "2", "4", "8"};
  static const uint64_t counts[] = {3, 0, 5, 1, 2}; /* the last: above 8 */
  prom_family(w, "app_size_bytes", PROM_HISTOGRAM, "Sizes.");
  prom_histogram(w, "pool=\"p\"", le, counts, 4, 123.0, 0);
}

/* Every _bucket line: ascending le, cumulative counts, +Inf last and equal
 * to _count. */
Test(prom_writer, histogram_buckets_are_cumulative) {
  prom_buf b;
  const char *s = render(PROM_FORMAT_TEXT, histogram, &b);
  double last_le = -1, last_count = -1, inf = -1, count = -1, sum = -1;
  int buckets = 0;
  for (const char *line = s; line && *line;
       line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    if (strncmp(line, "app_size_bytes_bucket{", 22) == 0) {
      const char *le = strstr(line, "le=\"") + 4;
      double v = strtod(strstr(line, "} ") + 2, NULL);
      if (strncmp(le, "+Inf", 4) == 0) {
        inf = v;
      } else {
        double bound = strtod(le, NULL);
        cr_assert_gt(bound, last_le, "le must ascend");
        last_le = bound;
      }
      cr_assert_geq(v, last_count, "buckets must be cumulative");
      last_count = v;
      buckets++;
    } else if (strncmp(line, "app_size_bytes_count", 20) == 0) {
      count = strtod(strstr(line, "} ") + 2, NULL);
    } else if (strncmp(line, "app_size_bytes_sum", 18) == 0) {
      sum = strtod(strstr(line, "} ") + 2, NULL);
    }
  }
  cr_assert_eq(buckets, 5);
  cr_assert_eq(inf, 11);
  cr_assert_eq(count, inf);
  cr_assert_eq(sum, 123);
  cr_assert(strstr(s, "app_size_bytes_bucket{pool=\"p\",le=\"4\"} 8\n"));
  prom_buf_free(&b);
}

Test(prom_writer, render_labels_skips_absent_values) {
  prom_buf b;
  prom_buf_init(&b, 0);
  prom_label l[3] = {{"a", "1"}, {"b", NULL}, {"c", "x\"y"}};
  prom_render_labels(&b, l, 3);
  cr_assert_str_eq(text(&b), "a=\"1\",c=\"x\\\"y\"");
  prom_buf_free(&b);
}
