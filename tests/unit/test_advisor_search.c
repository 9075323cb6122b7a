/* The advisor's search: the default grid, the recommendation rule, the
 * smallest-capacity answers (verified by replaying at the found capacity,
 * which fits, and one step below, which runs out of memory), the renderers
 * and bad options. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/utf8.h"
#include "gpupool/advisor.h"

#define MiB ((uint64_t)1 << 20)

static char path[] = "/tmp/gpupool_advisor_searchXXXXXX";
static gpupool_history *hist;

/* A training-like history: weights, per-step activations of a varying
 * sequence length, temporaries. */
static void setup(void) {
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  uint64_t s = 12345, id = 1;
  for (int i = 0; i < 6; i++)
    fprintf(f, "a %llu %llu 0\n", (unsigned long long)((1ull << 40) + (uint64_t)i),
            (unsigned long long)((3 + i) * MiB + 100));
  for (int step = 0; step < 40; step++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t seq = 8 + (s >> 33) % 100;
    uint64_t first = id;
    for (int l = 0; l < 20; l++) {
      fprintf(f, "a %llu %llu 0\n", (unsigned long long)id++,
              (unsigned long long)(seq * (40000 + 1000 * (uint64_t)l)));
      fprintf(f, "a %llu %llu 0\nf %llu\n", (unsigned long long)id, (unsigned long long)(seq * 999),
              (unsigned long long)id);
      id++;
    }
    for (uint64_t k = first; k < id; k += 2)
      fprintf(f, "f %llu\n", (unsigned long long)k);
  }
  fclose(f);
  cr_assert_eq(gpupool_history_load(path, NULL, NULL, &hist), GPUPOOL_OK, "%s",
               gpupool_last_error());
}

static void teardown(void) {
  gpupool_history_free(hist);
  unlink(path);
}

TestSuite(advisor_search, .init = setup, .fini = teardown);

static uint64_t ooms_at(const char *conf, uint64_t capacity) {
  gpupool_replay_result r;
  cr_assert_eq(gpupool_replay(hist, conf, capacity, &r), GPUPOOL_OK, "%s", gpupool_last_error());
  return r.ooms;
}

Test(advisor_search, default_grid_and_capacity) {
  gpupool_advice_options o = {
      .capacity = 4ull << 30, .capacity_step = MiB, .threads = 2, .max_added_ms = NAN};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(hist, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_geq(a->n, 50);
  cr_expect_eq(a->max_added_ms, 100.0, "the default bound without times: 100 ms");
  cr_expect_str_eq(a->c[a->current].conf, "");
  for (size_t i = 0; i < a->n; i++) {
    cr_expect(a->c[i].done, "%s not replayed", a->c[i].conf);
    cr_expect_eq(a->c[i].r.ooms, 0);
  }
  const gpupool_advice_candidate *cur = &a->c[a->current], *rec = &a->c[a->recommended];
  cr_expect_leq(rec->r.peak_reserved, cur->r.peak_reserved);
  cr_expect_leq(rec->added_ms, a->max_added_ms);
  /* the rule: nothing within the bound has a lower peak */
  for (size_t i = 0; i < a->n; i++)
    if (a->c[i].added_ms <= a->max_added_ms)
      cr_expect_geq(a->c[i].r.peak_reserved, rec->r.peak_reserved, "%s beats the recommendation",
                    a->c[i].conf);
  uint64_t caps[2] = {a->min_capacity_current, a->min_capacity_recommended};
  const char *confs[2] = {cur->conf, rec->conf};
  for (int k = 0; k < 2; k++) {
    cr_assert(caps[k] > 0 && caps[k] != UINT64_MAX);
    cr_expect_eq(caps[k] % MiB, 0);
    cr_expect_eq(ooms_at(confs[k], caps[k]), 0, "%s does not fit %llu", confs[k],
                 (unsigned long long)caps[k]);
    cr_expect_gt(ooms_at(confs[k], caps[k] - MiB), 0, "%s fits one step below %llu", confs[k],
                 (unsigned long long)caps[k]);
    cr_expect_leq(caps[k], a->c[k ? a->recommended : a->current].r.peak_reserved + MiB);
  }
  gpupool_advice_free(a);
}

Test(advisor_search, bound_and_user_configs) {
  const char *extra[] = {"strategy:naive", "max_split_size_mb:64,roundup_power2_divisions:4"};
  gpupool_advice_options o = {.current = "strategy:round",
                              .extra = extra,
                              .n_extra = 2,
                              .no_defaults = 1,
                              .max_added_ms = 0,
                              .no_capacity = 1,
                              .threads = 1};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(hist, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(a->n, 3);
  cr_expect_eq(a->min_capacity_current, 0, "not searched");
  cr_expect_leq(a->c[a->recommended].added_ms, 0.0);
  cr_expect_str_eq(a->c[0].conf, "strategy:round");
  cr_expect_eq(a->c[0].has_torch, 0, "round has no PyTorch equivalent");
  cr_expect_eq(a->c[2].has_torch, 1);
  cr_expect_str_eq(a->c[2].torch_conf, "max_split_size_mb:64,roundup_power2_divisions:4");
  gpupool_advice_free(a);
  /* a capacity too small for anything: every candidate OOMs, none fits */
  o.capacity = 4 * MiB;
  o.capacity_step = MiB;
  o.no_capacity = 0;
  cr_assert_eq(gpupool_advise(hist, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_gt(a->c[a->current].r.ooms, 0);
  cr_expect_eq(a->min_capacity_current, UINT64_MAX);
  gpupool_advice_free(a);
}

Test(advisor_search, renderers) {
  gpupool_advice_options o = {.threads = 2, .max_added_ms = NAN, .capacity_step = 8 * MiB};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(hist, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  char *t = gpupool_advice_render(a, "table");
  cr_assert(t);
  cr_expect(strstr(t, "GPUPOOL_CONF="), "%s", t);
  cr_expect(strstr(t, "Smallest device without an OOM"), "%s", t);
  free(t);
  char *c = gpupool_advice_render(a, "csv");
  cr_assert(c);
  size_t lines = 0;
  for (const char *q = c; *q; q++)
    lines += *q == '\n';
  cr_expect_eq(lines, a->n + 1);
  free(c);
  char *j = gpupool_advice_render(a, "json");
  cr_assert(j);
  cJSON *doc = cJSON_Parse(j);
  cr_assert(doc, "not JSON: %s", j);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "candidates")), (int)a->n);
  cJSON *rec = cJSON_GetObjectItem(doc, "recommended");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(doc, "has_recommendation")));
  cr_expect(cJSON_IsString(cJSON_GetObjectItem(rec, "gpupool_conf")));
  cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(rec, "min_capacity_bytes")));
  cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "input"), "events")));
  cJSON_Delete(doc);
  free(j);
  cr_expect_null(gpupool_advice_render(a, "xml"));
  gpupool_advice_free(a);
}

/* Parses csv strictly by RFC 4180, records ending in '\n' as the renderer
 * ends them: a quoted field's quotes are doubled and only ',' or the end of
 * the record follows its closing quote; an unquoted field holds no quote
 * and no CR; every record has the header's number of fields. The number of
 * records, or -1 at the first violation; field (row, col) goes to out. */
static int csv_parse(const char *csv, int row, int col, char *out, size_t outlen) {
  int r = 0, c = 0, ncols = -1;
  for (const char *p = csv; *p;) {
    char field[1024];
    size_t n = 0;
    if (*p == '"') {
      for (p++;; p++) {
        if (!*p)
          return -1;
        if (*p == '"' && p[1] != '"') {
          p++;
          break;
        }
        p += *p == '"'; /* a doubled quote is one */
        if (n + 1 < sizeof field)
          field[n++] = *p;
      }
    } else {
      for (; *p && *p != ',' && *p != '\n'; p++) {
        if (*p == '"' || *p == '\r')
          return -1;
        if (n + 1 < sizeof field)
          field[n++] = *p;
      }
    }
    field[n] = '\0';
    if (r == row && c == col)
      snprintf(out, outlen, "%s", field);
    c++;
    if (*p == ',') {
      p++;
    } else if (*p == '\n') {
      if (ncols < 0)
        ncols = c;
      if (c != ncols)
        return -1;
      c = 0;
      r++;
      p++;
    } else {
      return -1; /* text after a closing quote, or no '\n' at the end */
    }
  }
  return c == 0 ? r : -1;
}

/* The advice on hist for two configurations (the current one and
 * strategy:round, no search), whose text a test then rewrites. */
/* Field (row, col) of csv is want. */
static void expect_csv_field(const char *csv, int row, int col, const char *want) {
  char field[1024] = "";
  csv_parse(csv, row, col, field, sizeof field);
  cr_expect_str_eq(field, want, "field (%d, %d) of %s", row, col, csv);
}

static gpupool_advice *advise_two(void) {
  const char *extra[] = {"strategy:round"};
  gpupool_advice_options o = {.no_defaults = 1,
                              .no_capacity = 1,
                              .threads = 1,
                              .max_added_ms = -1,
                              .extra = extra,
                              .n_extra = 1};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(hist, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(a->n, 2);
  return a;
}

/* The CSV is RFC 4180 whatever text the configurations hold: a quote is
 * doubled, a comma or a line break stays inside its quoted field, and a
 * byte that begins no UTF-8 character is U+FFFD, as in the JSON. The old
 * renderer wrote the text between quotes as it was: a quote inside ended
 * the field. gpupool_advice is public: a host program fills it as it
 * likes. */
Test(advisor_search, csv_is_rfc4180_whatever_the_configuration_text) {
  gpupool_advice *a = advise_two();
  snprintf(a->c[0].conf, sizeof a->c[0].conf, "say \"hi\", twice\nthen\xff\"");
  snprintf(a->c[1].conf, sizeof a->c[1].conf, "\"");
  snprintf(a->c[1].torch_conf, sizeof a->c[1].torch_conf, "x\xc3\x28,\r\n\xe2\x82\xac");
  a->c[1].has_torch = 1;
  char *csv = gpupool_advice_render(a, "csv");
  gpupool_advice_free(a);
  cr_assert_not_null(csv);
  char field[1024] = "";
  cr_expect_eq(csv_parse(csv, 1, 1, field, sizeof field), 3, "not RFC 4180: %s", csv);
  cr_expect_str_eq(field, "say \"hi\", twice\nthen\xef\xbf\xbd\"");
  expect_csv_field(csv, 2, 1, "\"");
  /* a bad byte, then ASCII, then a euro sign */
  expect_csv_field(csv, 2, 2, "x\xef\xbf\xbd(,\r\n\xe2\x82\xac");
  free(csv);
}

/* The CSV tells a configuration PyTorch has no equivalent for (an empty
 * pytorch_cuda_alloc_conf, has_pytorch_equivalent 0) from one whose
 * equivalent is PyTorch's defaults (empty too, but 1): the JSON's null and
 * "". */
Test(advisor_search, csv_tells_no_pytorch_equivalent_from_the_defaults) {
  gpupool_advice *a = advise_two();
  a->c[0].has_torch = 1;
  a->c[0].torch_conf[0] = 0;
  a->c[1].has_torch = 0;
  char *csv = gpupool_advice_render(a, "csv");
  gpupool_advice_free(a);
  cr_assert_not_null(csv);
  char field[1024] = "";
  cr_assert_eq(csv_parse(csv, 0, 19, field, sizeof field), 3, "not RFC 4180: %s", csv);
  cr_expect_str_eq(field, "has_pytorch_equivalent");
  expect_csv_field(csv, 1, 2, "");
  expect_csv_field(csv, 1, 19, "1"); /* the defaults are PyTorch's too */
  expect_csv_field(csv, 2, 2, "");
  expect_csv_field(csv, 2, 19, "0"); /* strategy:round has no PyTorch equivalent */
  free(csv);
}

/* The table writes a configuration's (and a history path's) text by the
 * JSON's and the CSV's rule, a byte that begins no UTF-8 character as
 * U+FFFD, and each control character as U+FFFD too: a line break in a
 * configuration does not break the table's lines. The old renderer wrote
 * the bytes as they were. */
Test(advisor_search, table_is_utf8_and_one_line_per_row_whatever_the_text) {
  gpupool_advice *a = advise_two();
  char *plain = gpupool_advice_render(a, "table");
  cr_assert_not_null(plain);
  for (size_t i = 0; i < a->n; i++) {
    snprintf(a->c[i].conf, sizeof a->c[i].conf, "say\nthen\xff\r\t\x1b[2J\x7f\xc2\x85\xe2\x82\xac");
    snprintf(a->c[i].torch_conf, sizeof a->c[i].torch_conf, "x\xc3\x28\n");
    a->c[i].has_torch = 1;
  }
  snprintf(a->input.source, sizeof a->input.source, "run\n\xff.record");
  char *t = gpupool_advice_render(a, "table");
  gpupool_advice_free(a);
  cr_assert_not_null(t);
  size_t lines = 0, plain_lines = 0, n = strlen(t);
  for (const char *p = plain; *p; p++)
    plain_lines += *p == '\n';
  for (size_t i = 0; i < n;) {
    size_t len = utf8_char_len((const unsigned char *)t + i, n - i);
    cr_assert_neq(len, 0, "not UTF-8 at byte %zu: %s", i, t);
    cr_assert(len > 1 || t[i] == '\n' || (t[i] >= 0x20 && t[i] != 0x7f),
              "control character 0x%02x at byte %zu: %s", (unsigned char)t[i], i, t);
    cr_assert(len != 2 || (unsigned char)t[i] != 0xc2 || (unsigned char)t[i + 1] >= 0xa0,
              "C1 control character at byte %zu: %s", i, t);
    lines += t[i] == '\n';
    i += len;
  }
  cr_expect_eq(lines, plain_lines, "the text broke the table's lines:\n%s\n(was:\n%s)", t, plain);
  const char *f = "\xef\xbf\xbd";
  char want[128];
  snprintf(want, sizeof want, "say%sthen%s%s%s%s[2J%s%s\xe2\x82\xac", f, f, f, f, f, f, f);
  cr_expect(strstr(t, want), "each bad byte and control character is U+FFFD: %s", t);
  snprintf(want, sizeof want, "history: run%s%s.record (", f, f);
  cr_expect(strstr(t, want), "%s", t);
  free(t);
  free(plain);
}

Test(advisor_search, bad_options) {
  gpupool_advice *a;
  const char *bad_extra[] = {"backend:cuda"};
  gpupool_advice_options o = {.extra = bad_extra, .n_extra = 1, .max_added_ms = NAN};
  cr_expect_eq(gpupool_advise(hist, &o, &a), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "key backend"), "%s", gpupool_last_error());
  gpupool_advice_options o2 = {.current = "host_capacity_mb:5", .max_added_ms = NAN};
  cr_expect_eq(gpupool_advise(hist, &o2, &a), GPUPOOL_ERR_INVALID);
  const char *unknown[] = {"no_such_key:1"};
  gpupool_advice_options o3 = {
      .extra = unknown, .n_extra = 1, .no_defaults = 1, .max_added_ms = NAN};
  cr_expect_eq(gpupool_advise(hist, &o3, &a), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "no_such_key"), "%s", gpupool_last_error());
  gpupool_advice_options o4 = {.capacity = MiB, .capacity_step = 2 * MiB, .max_added_ms = NAN};
  cr_expect_eq(gpupool_advise(hist, &o4, &a), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_advise(NULL, NULL, &a), GPUPOOL_ERR_INVALID);
  gpupool_advice_options o5 = {.n_extra = 1, .max_added_ms = NAN}; /* extra left NULL */
  a = (gpupool_advice *)&o5;
  cr_expect_eq(gpupool_advise(hist, &o5, &a), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "extra is NULL"), "%s", gpupool_last_error());
  cr_expect_null(a);
  char longer[400] = "max_split_size_mb:128"; /* valid, but longer than a candidate holds */
  while (strlen(longer) < 300)
    strcat(longer, ",max_split_size_mb:128");
  gpupool_advice_options o6 = {.current = longer, .max_added_ms = NAN};
  a = (gpupool_advice *)&o6;
  cr_expect_eq(gpupool_advise(hist, &o6, &a), GPUPOOL_ERR_INVALID); /* read out of bounds */
  cr_expect(strstr(gpupool_last_error(), "too long"), "%s", gpupool_last_error());
  cr_expect_null(a);
  gpupool_replay_result r;
  cr_expect_eq(gpupool_replay(hist, "", 0, &r), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_replay(hist, "strategy:nope", MiB, &r), GPUPOOL_ERR_INVALID);
}

/* Options out of the ranges include/gpupool/advisor.h gives are refused with
 * a reason that names them, never answered with a capacity that reads as
 * "does not fit" (UINT64_MAX), NaN times or a granularity of 0 MiB. */
Test(advisor_search, options_out_of_range) {
  static const struct {
    gpupool_advice_options o;
    const char *says;
  } bad[] = {
      {{.capacity = UINT64_MAX, .capacity_step = (uint64_t)1 << 63}, "above 1 PiB"},
      {{.capacity = ((uint64_t)1 << 50) + 2 * MiB}, "above 1 PiB"},
      {{.capacity_step = 1}, "capacity_step 1 bytes is not a whole number of MiB"},
      {{.capacity_step = UINT64_MAX}, "not a whole number of MiB"},
      {{.capacity_step = MiB + 512}, "not a whole number of MiB"},
      {{.capacity = 64 * MiB, .capacity_step = 128 * MiB}, "below the step"},
      {{.max_added_ms = INFINITY}, "max_added_ms inf"},
      {{.deadline_s = NAN}, "deadline_s"},
      {{.deadline_s = -1}, "deadline_s -1"},
      {{.prices.malloc_us = INFINITY}, "prices.malloc_us inf"},
      {{.prices.free_us = NAN}, "prices.free_us"},
      {{.prices.page_map_us = 1e308}, "prices.page_map_us"},
      {{.prices.page_unmap_us = -1}, "prices.page_unmap_us -1"},
      {{.prices.page_move_us = -INFINITY}, "prices.page_move_us"},
      {{.prices.sync_us = 1e9 + 1}, "prices.sync_us"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    gpupool_advice_options o = bad[i].o;
    o.current = "";
    o.no_defaults = 1;
    o.threads = 1;
    gpupool_advice *a = (gpupool_advice *)&o;
    cr_expect_eq(gpupool_advise(hist, &o, &a), GPUPOOL_ERR_INVALID, "case %zu accepted", i);
    cr_expect_null(a);
    cr_expect(strstr(gpupool_last_error(), bad[i].says), "case %zu: %s", i, gpupool_last_error());
  }
  /* the ends of the ranges */
  gpupool_advice_options ok = {.capacity = (uint64_t)1 << 50,
                               .capacity_step = (uint64_t)1 << 40,
                               .max_added_ms = -INFINITY,
                               .deadline_s = INFINITY,
                               .prices = {.malloc_us = 1e9, .sync_us = 1e-9},
                               .current = "",
                               .no_defaults = 1,
                               .threads = 1};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(hist, &ok, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(a->min_capacity_current, (uint64_t)1 << 40, "one step fits");
  cr_expect(isfinite(a->c[0].device_ms));
  cr_expect_eq(a->prices.malloc_us, 1e9);
  cr_expect_eq(a->prices.free_us, 33.6, "0 is the default");
  gpupool_advice_free(a);
}

Test(advisor_search, null_options_are_the_defaults) {
  gpupool_advice *a, *d;
  gpupool_advice_options o = {.max_added_ms = NAN, .no_capacity = 1};
  cr_assert_eq(gpupool_advise(hist, NULL, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_advise(hist, &o, &d), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(a->max_added_ms, d->max_added_ms); /* the default bound, not 0 ms */
  cr_expect_gt(a->max_added_ms, 0);
  cr_expect_eq(a->capacity_step, 2 * MiB);
  cr_expect_eq(a->n, d->n);
  gpupool_advice_free(a);
  gpupool_advice_free(d);
}

/* The roles of the CSV rows (role, line) and the marks of the table's rows
 * (mark: the first word of a line that begins with one). */
static int csv_rows(const char *csv, const char *role) {
  int n = 0;
  size_t l = strlen(role);
  for (const char *q = csv; q; q = strchr(q, '\n'), q = q ? q + 1 : NULL)
    n += !strncmp(q, role, l) && q[l] == ',';
  return n;
}

static int table_rows(const char *table, const char *mark) {
  int n = 0;
  size_t l = strlen(mark);
  for (const char *q = table; q; q = strchr(q, '\n'), q = q ? q + 1 : NULL)
    n += !strncmp(q, mark, l) && q[l] == ' ';
  return n;
}

/* Where nothing is recommended, no row is marked recommended: the table,
 * the CSV, the JSON and the summary agree. */
static void expect_no_recommendation_marked(const gpupool_advice *a) {
  char *t = gpupool_advice_render(a, "table");
  char *c = gpupool_advice_render(a, "csv");
  char *j = gpupool_advice_render(a, "json");
  cr_assert(t && c && j);
  cr_expect(strstr(t, "Recommended: none: "), "%s", t);
  cr_expect_eq(table_rows(t, "REC") + table_rows(t, "CUR+REC"), 0, "%s", t);
  cr_expect_eq(table_rows(t, "CUR"), 1, "%s", t);
  cr_expect_null(strstr(c, "recommended"), "%s", c);
  cr_expect_eq(csv_rows(c, "current"), 1, "%s", c);
  cJSON *doc = cJSON_Parse(j);
  cr_assert(doc, "not JSON: %s", j);
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(doc, "has_recommendation")), "%s", j);
  cJSON_Delete(doc);
  free(t);
  free(c);
  free(j);
}

/* A request larger than the simulated device: every replay runs out of
 * memory, nothing is recommended, and no capacity up to the device's fits
 * (the search never answers a capacity above it). */
Test(advisor_search, request_above_the_capacity) {
  char p[] = "/tmp/gpupool_advisor_bigXXXXXX";
  int fd = mkstemp(p);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fprintf(f, "a 1 %llu 0\nf 1\n", (unsigned long long)(1024 * MiB));
  fclose(f);
  gpupool_history *h;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  unlink(p);
  gpupool_advice_options o = {.max_added_ms = NAN, .threads = 2, .capacity = 512 * MiB};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(h, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  for (size_t i = 0; i < a->n; i++)
    cr_expect_gt(a->c[i].r.ooms, 0, "%s", a->c[i].conf);
  cr_expect_eq(a->min_capacity_current, UINT64_MAX, "%llu",
               (unsigned long long)a->min_capacity_current);
  expect_no_recommendation_marked(a);
  char *t = gpupool_advice_render(a, "table");
  cr_assert(t);
  cr_expect(strstr(t, "Smallest device without an OOM (granularity 2 MiB): current does not fit "
                      "the simulated device\n"),
            "%s", t);
  free(t);
  gpupool_advice_free(a);
  gpupool_history_free(h);
}

/* The current configuration can be the recommendation: the row is both. */
Test(advisor_search, current_is_the_recommendation) {
  gpupool_advice_options o = {
      .current = "strategy:round", .no_defaults = 1, .no_capacity = 1, .max_added_ms = NAN};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(hist, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(a->recommended, a->current);
  cr_assert_eq(a->c[a->current].r.ooms, 0);
  char *t = gpupool_advice_render(a, "table"), *c = gpupool_advice_render(a, "csv");
  cr_assert(t && c);
  cr_expect_eq(table_rows(t, "CUR+REC"), 1, "%s", t);
  cr_expect(strstr(t, "  GPUPOOL_CONF=strategy:round\n"), "%s", t);
  cr_expect_eq(csv_rows(c, "current+recommended"), 1, "%s", c);
  cr_expect_eq(csv_rows(c, "current") + csv_rows(c, "recommended"), 0, "%s", c);
  free(t);
  free(c);
  gpupool_advice_free(a);
}

/* With nothing replayed (or every replay out of memory) there is no
 * recommendation, and the table says so instead of naming one. */
Test(advisor_search, no_recommendation) {
  gpupool_advice *a;
  gpupool_advice_options late = {.max_added_ms = NAN, .threads = 1, .deadline_s = 1e-9};
  cr_assert_eq(gpupool_advise(hist, &late, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect(a->truncated);
  cr_expect_not(a->c[a->recommended].done);
  char *t = gpupool_advice_render(a, "table");
  cr_assert(t);
  cr_expect(strstr(t, "Recommended: none: the deadline came"), "%s", t);
  cr_expect_null(strstr(t, "GPUPOOL_CONF="), "%s", t);
  free(t);
  expect_no_recommendation_marked(a);
  gpupool_advice_free(a);
  gpupool_advice_options tiny = {.max_added_ms = NAN, .no_capacity = 1, .capacity = 8 * MiB};
  cr_assert_eq(gpupool_advise(hist, &tiny, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_gt(a->c[a->recommended].r.ooms, 0);
  t = gpupool_advice_render(a, "table");
  cr_assert(t);
  cr_expect(strstr(t, "Recommended: none: every configuration replayed ran out of memory"), "%s",
            t);
  free(t);
  expect_no_recommendation_marked(a);
  gpupool_advice_free(a);
}

/* Every capacity the advisor takes replays as a device of that size would:
 * up to 1 PiB, also with expandable segments, whose ranges (one per
 * stream, each as large as the device) ran out of the simulated address
 * space above 126 TiB in all and read as OOMs. Above 1 PiB a replay is
 * refused, as gpupool_advise refuses it. */
Test(advisor_search, the_largest_capacities_replay_without_false_ooms) {
  char p[] = "/tmp/gpupool_advisor_streamsXXXXXX";
  int fd = mkstemp(p);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  for (int s = 1; s <= 4; s++) /* 4 streams, 1 GiB each at once */
    fprintf(f, "a %d %llu 0x%d0\n", s, (unsigned long long)(1024 * MiB), s);
  for (int s = 1; s <= 4; s++)
    fprintf(f, "f %d\n", s);
  fclose(f);
  gpupool_history *h;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  unlink(p);
  static const char *const confs[] = {"", "expandable_segments:True"};
  const uint64_t TiB = (uint64_t)1 << 40;
  const uint64_t caps[] = {80 * 1024 * MiB, 32 * TiB, 127 * TiB, 1024 * TiB};
  for (size_t c = 0; c < 2; c++) {
    gpupool_replay_result at80;
    cr_assert_eq(gpupool_replay(h, confs[c], caps[0], &at80), GPUPOOL_OK);
    cr_assert_eq(at80.ooms, 0);
    for (size_t k = 1; k < sizeof caps / sizeof *caps; k++) {
      gpupool_replay_result r;
      cr_assert_eq(gpupool_replay(h, confs[c], caps[k], &r), GPUPOOL_OK, "%s",
                   gpupool_last_error());
      cr_expect_eq(r.ooms, 0, "'%s' at %llu TiB: %llu OOMs", confs[c],
                   (unsigned long long)(caps[k] / TiB), (unsigned long long)r.ooms);
      cr_expect_eq(r.peak_reserved, at80.peak_reserved, "'%s' at %llu TiB", confs[c],
                   (unsigned long long)(caps[k] / TiB));
      cr_expect_eq(r.device_allocs, at80.device_allocs, "'%s' at %llu TiB", confs[c],
                   (unsigned long long)(caps[k] / TiB));
    }
  }
  gpupool_advice_options o = {.current = "",
                              .extra = &confs[1],
                              .n_extra = 1,
                              .no_defaults = 1,
                              .capacity = 1024 * TiB,
                              .capacity_step = TiB,
                              .threads = 1,
                              .max_added_ms = NAN};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(h, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(a->n, 2);
  for (size_t i = 0; i < a->n; i++)
    cr_expect_eq(a->c[i].r.ooms, 0, "'%s' at 1 PiB", a->c[i].conf);
  cr_expect_eq(a->min_capacity_current, TiB, "one step fits");
  gpupool_advice_free(a);
  gpupool_replay_result r;
  cr_expect_eq(gpupool_replay(h, "", ((uint64_t)1 << 50) + 1, &r), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "capacity 1125899906842625 bytes is above 1 PiB"), "%s",
            gpupool_last_error());
  gpupool_history_free(h);
}

/* An advice made by hand (gpupool_advice_render takes any), two replayed
 * candidates, nothing over the bound: c[0] current, c[1] recommended. */
static gpupool_advice *made_advice(uint64_t capacity, uint64_t step, uint64_t peak_requested,
                                   uint64_t cur_peak, uint64_t rec_peak, uint64_t min_cur,
                                   uint64_t min_rec) {
  gpupool_advice *a = calloc(1, sizeof *a);
  cr_assert(a);
  a->c = calloc(2, sizeof *a->c);
  cr_assert(a->c);
  a->n = 2;
  a->current = 0;
  a->recommended = 1;
  snprintf(a->c[1].conf, sizeof a->c[1].conf, "expandable_segments:True");
  snprintf(a->input.source, sizeof a->input.source, "made");
  snprintf(a->input.format, sizeof a->input.format, "record");
  a->input.peak_requested = peak_requested;
  const uint64_t peaks[2] = {cur_peak, rec_peak};
  for (int i = 0; i < 2; i++) {
    a->c[i].done = 1;
    a->c[i].r.peak_reserved = peaks[i];
    a->c[i].r.peak_allocated = peak_requested;
  }
  a->capacity = capacity;
  a->capacity_step = step;
  a->max_added_ms = 100;
  a->threads = 1;
  a->min_capacity_current = min_cur;
  a->min_capacity_recommended = min_rec;
  return a;
}

static void expect_in(const char *text, const char *want) {
  cr_expect(strstr(text, want), "'%s' is not in:\n%s", want, text);
}

/* No byte figure of the table is rounded to look like a whole number of its
 * unit when it is not one: gpupool-advise --capacity 1 --step 3 replays on
 * 1023 MiB (rounded down to a multiple of the step), which the old table
 * called "1.0 GiB", and the search's 3 MiB "0.00 GiB". Each figure is
 * either exact or shows a decimal that is not 0. */
Test(advisor_search, table_sizes_are_not_rounded_to_look_whole) {
  gpupool_advice_options o = {.capacity = (uint64_t)1 << 30,
                              .capacity_step = 3 * MiB,
                              .threads = 1,
                              .max_added_ms = NAN,
                              .no_defaults = 1,
                              .current = ""};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(hist, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(a->capacity, 1023 * MiB);
  char *t = gpupool_advice_render(a, "table");
  cr_assert(t);
  expect_in(t, "\nsimulated device: 1023 MiB (0.999 GiB); ");
  cr_expect_null(strstr(t, "1.0 GiB"), "%s", t);
  expect_in(t, "(granularity 3 MiB)");
  free(t);
  char *j = gpupool_advice_render(a, "json");
  cr_assert(j);
  expect_in(j, "\"capacity_bytes\":1072693248,\"capacity_step_bytes\":3145728,");
  free(j);
  gpupool_advice_free(a);

  /* every byte figure of the table, by hand: none a whole number */
  a = made_advice(1023 * MiB, 3 * MiB, MiB - 1, 2 * MiB, 2 * MiB - 512, 1023 * MiB, 3 * MiB);
  t = gpupool_advice_render(a, "table");
  cr_assert(t);
  expect_in(t, "peak requested 0.999999 MiB\n");                           /* was 1.0 */
  expect_in(t, "\nsimulated device: 1023 MiB (0.999 GiB); ");              /* was 1.0 GiB */
  expect_in(t, "\nREC           1.9995 ");                                 /* was 2.0 */
  expect_in(t, "\nCUR              2.0 ");                                 /* exact */
  expect_in(t, ": peak reserved 2.0 MiB, device calls");                   /* exact */
  expect_in(t, "Recommended: peak reserved 1.9995 MiB (0.0005 MiB less)"); /* was 2.0 (0.0 less) */
  expect_in(t, "(granularity 3 MiB): current 1023 MiB (0.999 GiB), recommended 3 MiB (0.003 "
               "GiB)\n"); /* were (1.00 GiB) and (0.00 GiB) */
  free(t);
  gpupool_advice_free(a);

  /* a granularity that is no whole MiB (a hand-made advice), a saving that
   * is negative, counts above 2^53 (which a double rounds) */
  a = made_advice((uint64_t)1 << 50, MiB + MiB / 2, ((uint64_t)1 << 53) + 1, 4 * MiB - 1,
                  4 * MiB + 1, 0, UINT64_MAX);
  t = gpupool_advice_render(a, "table");
  cr_assert(t);
  expect_in(t, "peak requested 8589934592.000001 MiB\n");
  expect_in(t, "simulated device: 1048576.0 GiB; ");
  expect_in(t, "Recommended: peak reserved 4.000001 MiB (-0.000002 MiB less)");
  expect_in(t, "(granularity 1.5 MiB): current not searched, recommended does not fit");
  free(t);
  j = gpupool_advice_render(a, "json");
  cr_assert(j);
  expect_in(j, "\"peak_requested_bytes\":9007199254740993,");
  expect_in(j, "\"capacity_bytes\":1125899906842624,\"capacity_step_bytes\":1572864,");
  expect_in(j, "\"min_capacity_bytes\":null,\"saved_bytes\":-2}");
  expect_in(j, "\"peak_reserved_bytes\":4194303,\"peak_allocated_bytes\":9007199254740993,");
  cJSON *doc = cJSON_Parse(j);
  cr_expect(doc, "not JSON: %s", j);
  cJSON_Delete(doc);
  free(j);
  gpupool_advice_free(a);
  a = made_advice(5ull << 28, 2 * MiB, 100, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB);
  t = gpupool_advice_render(a, "table");
  cr_assert(t);
  expect_in(t, "peak requested 0.0001 MiB\n");                    /* 100 bytes: was 0.0 */
  expect_in(t, "\nsimulated device: 1280 MiB (1.25 GiB); ");      /* was 1.2 GiB */
  expect_in(t, "(granularity 2 MiB): current 2 MiB (0.002 GiB)"); /* was 0.00 GiB */
  free(t);
  gpupool_advice_free(a);
}

/* Figures that are exact print as they always have: whole GiB and halves
 * with one decimal, the search's capacities as MiB and GiB to 2 decimals
 * where those are not whole (README.md's example line). */
Test(advisor_search, table_sizes_that_are_exact_print_as_before) {
  gpupool_advice *a = made_advice(80ull << 30, 2 * MiB, 2424 * MiB + MiB / 2, 2834 * MiB,
                                  2522 * MiB, 2732 * MiB, 2432 * MiB);
  char *t = gpupool_advice_render(a, "table");
  cr_assert(t);
  expect_in(t, "peak requested 2424.5 MiB\n");
  expect_in(t, "\nsimulated device: 80.0 GiB; ");
  expect_in(t, "\nCUR           2834.0 ");
  expect_in(t, "Recommended: peak reserved 2522.0 MiB (312.0 MiB less)");
  expect_in(t, "Smallest device without an OOM (granularity 2 MiB): current 2732 MiB (2.67 GiB), "
               "recommended 2432 MiB (2.38 GiB)\n");
  free(t);
  gpupool_advice_free(a);
  a = made_advice(5ull << 29, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 1024 * MiB, 1024 * MiB);
  t = gpupool_advice_render(a, "table");
  cr_assert(t);
  expect_in(t, "\nsimulated device: 2.5 GiB; ");
  expect_in(t, "current 1024 MiB (1.00 GiB), recommended 1024 MiB (1.00 GiB)\n");
  free(t);
  gpupool_advice_free(a);
}
