/* gpupool's texts under a host program's locale whose decimal point is a
 * comma (de_DE, made with localedef into a temporary LOCPATH: CI installs
 * Debian's `locales`, which has the sources). The OOM message, the advisor's
 * table and CSV, error messages and configuration values read and write
 * '.', as PyTorch's messages do and as the docs promise. */
#include <criterion/criterion.h>
#include <locale.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpupool/advisor.h"
#include "gpupool/host.h"
#include "core/c_numeric.h"
#include "core/kvconf.h"
#include "helpers/pool_check.h"
#include "pool/pool_internal.h"

static char locpath[64];

/* Switches the whole program to de_DE.UTF-8, built for the occasion. */
static void comma_locale(void) {
  snprintf(locpath, sizeof locpath, "/tmp/gpupool-locale-XXXXXX");
  cr_assert_not_null(mkdtemp(locpath));
  char cmd[256];
  snprintf(cmd, sizeof cmd, "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 2>/dev/null", locpath);
  cr_assert_eq(system(cmd), 0,
               "localedef could not build de_DE.UTF-8 (Debian's `locales` package has its "
               "sources; tools/setup installs it)");
  setenv("LOCPATH", locpath, 1);
  cr_assert_not_null(setlocale(LC_ALL, "de_DE.UTF-8"), "de_DE.UTF-8 did not load");
  char probe[16];
  snprintf(probe, sizeof probe, "%.2f", 1.5);
  cr_assert_str_eq(probe, "1,50", "the locale does not write a comma: the test proves nothing");
}

static void back_to_c(void) {
  setlocale(LC_ALL, "C");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", locpath);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(c_numeric, .init = comma_locale, .fini = back_to_c);

/* Whether text has a digit, a comma and a digit in a row ("20,00"). */
static int comma_decimal(const char *text) {
  regex_t re;
  cr_assert_eq(regcomp(&re, "[0-9],[0-9]", REG_NOSUB), 0);
  int found = regexec(&re, text, 0, NULL, 0) == 0;
  regfree(&re);
  return found;
}

Test(c_numeric, oom_message) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * MiB, "");
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 40 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  void *y = NULL;
  cr_assert_eq(gpupool_malloc(p, &y, 30 * MiB, NULL), GPUPOOL_ERR_OOM);
  const char *m = gpupool_last_error();
  cr_assert(strstr(m, "Tried to allocate 30.00 MiB"), "%s", m);
  cr_assert_not(comma_decimal(m), "a comma decimal point in: %s", m);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(c_numeric, error_messages_and_configuration) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * MiB, "garbage_collection_threshold:0.7");
  cr_assert_eq(gpupool_host_inject_faults(p, 0, 1.5, 1), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "1.5"), "%s", gpupool_last_error());
  gpupool_destroy(p);
  char *end = NULL;
  cr_assert_eq(c_strtod("1.5", &end), 1.5); /* /advice's capacity_gib */
  cr_assert_str_eq(end, "");
  /* Configuration decimals, an exponent included, as PyTorch's stod reads them. */
  static const struct {
    const char *text;
    double want;
  } values[] = {{"0.7", 0.7}, {"1e-3", 0.001}, {"2.5E+1", 25}, {".5", 0.5}, {"-0", 0}};
  for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
    double v = -1;
    cr_expect_eq(kvconf_double(values[i].text, -1e9, 1e9, &v), 0, "%s", values[i].text);
    cr_expect_eq(v, values[i].want, "%s read as %g", values[i].text, v);
  }
}

Test(c_numeric, advisor_table_and_csv) {
  const char *src = getenv("GPUPOOL_SOURCE_DIR");
  char path[512];
  snprintf(path, sizeof path, "%s/tests/data/cnn_train_60steps.trace", src ? src : ".");
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load(path, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_advice_options o = {.threads = 1, .max_added_ms = -1};
  gpupool_advice *a = NULL;
  cr_assert_eq(gpupool_advise(h, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  char *table = gpupool_advice_render(a, "table");
  cr_assert_not_null(table);
  cr_assert(strstr(table, " MiB"), "%s", table);
  cr_assert_not(comma_decimal(table), "a comma decimal point in the table:\n%s", table);
  char *csv = gpupool_advice_render(a, "csv");
  cr_assert_not_null(csv);
  /* every line has the header's number of fields: a comma decimal point
   * would add one to each line with a fraction */
  size_t fields = 0;
  for (const char *c = csv; *c && *c != '\n'; c++)
    fields += *c == ',';
  int lines = 0;
  for (const char *line = strchr(csv, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
    size_t n = 0;
    int quoted = 0;
    for (const char *c = line + 1; *c && *c != '\n'; c++) {
      quoted ^= *c == '"';
      n += *c == ',' && !quoted;
    }
    cr_assert_eq(n, fields, "a line's fields differ from the header's:\n%s", csv);
    lines++;
  }
  cr_assert_gt(lines, 1, "%s", csv);
  free(table);
  free(csv);
  gpupool_advice_free(a);
  gpupool_history_free(h);
}
