/* The Grafana dashboards in dashboards/ parse and follow the conventions that
 * make them work both provisioned from files and imported: a `datasource`
 * template variable used by every panel and query (no __inputs), the
 * job/instance/hostname/UUID/pool variables (multi-select, All = .+),
 * $__rate_interval in every range ($__range only in last_over_time), a unit
 * and a description on every panel,
 * a fixed uid, schemaVersion >= 41, __requires naming every panel plugin;
 * and every metric name a query uses is one the agent exports (rendered here
 * from a live host pool), one documented as conditional, or a recording
 * rule of deploy/prometheus/rules. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/metrics.h"
#include "gpupool/gpupool.h"
#include "helpers/promql_names.h"

#define MAX_NAMES 512

static const char *const dashboards[][2] = {
    {"dashboards/gpupool-fleet.json", "gpupool-fleet"},
    {"dashboards/gpupool-detail.json", "gpupool-detail"},
};
#define NDASH (sizeof dashboards / sizeof dashboards[0])

static const char *const variables[] = {"job", "instance", "hostname", "UUID", "pool"};

static char *read_file(const char *rel) {
  const char *root = getenv("GPUPOOL_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", root ? root : ".", rel);
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  cr_assert_not_null(text);
  cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
  text[n] = '\0';
  fclose(f);
  return text;
}

static cJSON *load(size_t i) {
  char *text = read_file(dashboards[i][0]);
  cJSON *d = cJSON_Parse(text);
  cr_assert_not_null(d, "%s: not valid JSON near: %.40s", dashboards[i][0],
                     cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
  free(text);
  return d;
}

static const char *str(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int is_datasource_ref(const cJSON *ds) {
  const char *uid = str(ds, "uid"), *type = str(ds, "type");
  return uid && type && strcmp(uid, "${datasource}") == 0 && strcmp(type, "prometheus") == 0;
}

/* Calls fn for every panel (rows' nested panels included), rows too. */
static void each_panel(const cJSON *dash, void (*fn)(const cJSON *panel, void *arg), void *arg) {
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(dash, "panels")) {
    fn(p, arg);
    const cJSON *q;
    cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(p, "panels")) fn(q, arg);
  }
}

static int is_row(const cJSON *p) {
  const char *type = str(p, "type");
  return type && strcmp(type, "row") == 0;
}

typedef struct expr_walk {
  void (*fn)(const char *expr, const char *where, void *arg);
  void *arg;
} expr_walk;

static void panel_exprs(const cJSON *p, void *arg) {
  expr_walk *w = arg;
  const cJSON *t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(p, "targets")) {
    const char *expr = str(t, "expr");
    if (expr)
      w->fn(expr, str(p, "title"), w->arg);
  }
}

/* Every PromQL expression of a dashboard: panel targets and query variables. */
static void each_expr(const cJSON *dash, void (*fn)(const char *expr, const char *where, void *arg),
                      void *arg) {
  expr_walk w = {fn, arg};
  each_panel(dash, panel_exprs, &w);
  const cJSON *v;
  cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(
                            cJSON_GetObjectItemCaseSensitive(dash, "templating"), "list")) {
    const char *def = str(v, "definition");
    if (!def)
      continue;
    /* label_values(selector, label): the selector is the expression. */
    static const char prefix[] = "label_values(";
    const char *comma = strrchr(def, ',');
    if (strncmp(def, prefix, sizeof prefix - 1) == 0 && comma) {
      char sel[1024];
      size_t n = (size_t)(comma - def) - (sizeof prefix - 1);
      cr_assert_lt(n, sizeof sel);
      memcpy(sel, def + sizeof prefix - 1, n);
      sel[n] = '\0';
      fn(sel, str(v, "name"), arg);
    } else {
      fn(def, str(v, "name"), arg);
    }
  }
}

static const cJSON *variable(const cJSON *dash, const char *name) {
  const cJSON *v;
  cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(
                            cJSON_GetObjectItemCaseSensitive(dash, "templating"), "list")) {
    const char *n = str(v, "name");
    if (n && strcmp(n, name) == 0)
      return v;
  }
  return NULL;
}

Test(dashboards, parse_with_fixed_uid_and_current_schema) {
  for (size_t i = 0; i < NDASH; i++) {
    cJSON *d = load(i);
    const char *uid = str(d, "uid");
    cr_expect(uid && strcmp(uid, dashboards[i][1]) == 0, "%s: uid %s, want %s", dashboards[i][0],
              uid ? uid : "(none)", dashboards[i][1]);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(d, "schemaVersion");
    cr_expect(cJSON_IsNumber(schema) && schema->valuedouble >= 41, "%s: schemaVersion < 41",
              dashboards[i][0]);
    cr_expect(str(d, "title") && *str(d, "title"), "%s: no title", dashboards[i][0]);
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(d, "__inputs"),
                   "%s: __inputs cannot be resolved when provisioned", dashboards[i][0]);
    cJSON_Delete(d);
  }
}

static int requires_has(const cJSON *d, const char *type, const char *id) {
  const cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(d, "__requires")) {
    if (str(r, "type") && str(r, "id") && strcmp(str(r, "type"), type) == 0 &&
        strcmp(str(r, "id"), id) == 0)
      return 1;
  }
  return 0;
}

typedef struct panel_check {
  const char *file;
  const cJSON *dash;
  int panels;
} panel_check;

static void check_panel(const cJSON *p, void *arg) {
  panel_check *c = arg;
  if (is_row(p))
    return;
  c->panels++;
  const char *title = str(p, "title");
  cr_expect(title && *title, "%s: a panel without title", c->file);
  title = title ? title : "?";
  const char *desc = str(p, "description");
  cr_expect(desc && *desc, "%s: panel '%s' has no description", c->file, title);
  const cJSON *defaults = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(p, "fieldConfig"), "defaults");
  const char *unit = str(defaults, "unit");
  cr_expect(unit && *unit, "%s: panel '%s' has no unit", c->file, title);
  cr_expect(is_datasource_ref(cJSON_GetObjectItemCaseSensitive(p, "datasource")),
            "%s: panel '%s' does not use ${datasource}", c->file, title);
  cr_expect(requires_has(c->dash, "panel", str(p, "type") ? str(p, "type") : ""),
            "%s: __requires lacks panel plugin %s", c->file, str(p, "type"));
  const cJSON *targets = cJSON_GetObjectItemCaseSensitive(p, "targets");
  cr_expect(cJSON_GetArraySize(targets) > 0, "%s: panel '%s' has no query", c->file, title);
  const cJSON *t;
  cJSON_ArrayForEach(t, targets) {
    cr_expect(is_datasource_ref(cJSON_GetObjectItemCaseSensitive(t, "datasource")),
              "%s: a query of panel '%s' does not use ${datasource}", c->file, title);
    cr_expect(str(t, "expr") && *str(t, "expr"), "%s: panel '%s': a query without expr", c->file,
              title);
    cr_expect(str(t, "refId") && *str(t, "refId"), "%s: panel '%s': a query without refId", c->file,
              title);
  }
}

Test(dashboards, every_panel_has_datasource_unit_and_description) {
  for (size_t i = 0; i < NDASH; i++) {
    cJSON *d = load(i);
    panel_check c = {dashboards[i][0], d, 0};
    each_panel(d, check_panel, &c);
    cr_expect_gt(c.panels, 10, "%s: only %d panels", c.file, c.panels);
    cr_expect(requires_has(d, "grafana", "grafana"), "%s: __requires lacks grafana", c.file);
    cr_expect(requires_has(d, "datasource", "prometheus"), "%s: __requires lacks prometheus",
              c.file);
    cJSON_Delete(d);
  }
}

Test(dashboards, template_variables) {
  for (size_t i = 0; i < NDASH; i++) {
    cJSON *d = load(i);
    const char *file = dashboards[i][0];
    const cJSON *ds = variable(d, "datasource");
    cr_assert_not_null(ds, "%s: no datasource variable", file);
    cr_expect(str(ds, "type") && strcmp(str(ds, "type"), "datasource") == 0,
              "%s: datasource variable is not of type datasource", file);
    cr_expect(str(ds, "query") && strcmp(str(ds, "query"), "prometheus") == 0,
              "%s: datasource variable does not list prometheus", file);
    for (size_t k = 0; k < sizeof variables / sizeof variables[0]; k++) {
      const cJSON *v = variable(d, variables[k]);
      cr_expect_not_null(v, "%s: no variable %s", file, variables[k]);
      if (!v)
        continue;
      cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "multi")),
                "%s: %s is not multi-select", file, variables[k]);
      cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "includeAll")),
                "%s: %s has no All", file, variables[k]);
      cr_expect(str(v, "allValue") && strcmp(str(v, "allValue"), ".+") == 0,
                "%s: %s: allValue is not .+", file, variables[k]);
      const cJSON *refresh = cJSON_GetObjectItemCaseSensitive(v, "refresh");
      cr_expect(cJSON_IsNumber(refresh) && refresh->valueint == 2,
                "%s: %s does not refresh on time range change", file, variables[k]);
      cr_expect(is_datasource_ref(cJSON_GetObjectItemCaseSensitive(v, "datasource")),
                "%s: %s does not query ${datasource}", file, variables[k]);
      /* Grafana's Prometheus variable editor rebuilds a "label values" query
       * (qryType 1) from its metric and label fields, not from its text. */
      const cJSON *query = cJSON_GetObjectItemCaseSensitive(v, "query");
      const cJSON *qtype = cJSON_GetObjectItemCaseSensitive(query, "qryType");
      const char *metric = str(query, "metric"), *label = str(query, "label");
      char want[1024];
      snprintf(want, sizeof want, "label_values(%s, %s)", metric ? metric : "?",
               label ? label : "?");
      cr_expect(cJSON_IsNumber(qtype) && qtype->valueint == 1 && metric && label &&
                    strcmp(label, variables[k]) == 0 && str(v, "definition") &&
                    strcmp(str(v, "definition"), want) == 0,
                "%s: %s: query is not label values of %s with definition %s", file, variables[k],
                variables[k], want);
    }
    cJSON_Delete(d);
  }
}

typedef struct range_check {
  const char *file, *where, *expr;
  int bad;
} range_check;

static int has_call(const char *expr, const char *fn) {
  size_t n = strlen(fn);
  for (const char *p = strstr(expr, fn); p; p = strstr(p + 1, fn)) {
    int word_start = p == expr || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
    const char *q = p + n;
    while (*q == ' ')
      q++;
    if (word_start && *q == '(')
      return 1;
  }
  return 0;
}

/* Whether expr may use range: $__rate_interval, which Grafana sizes to the
 * scrape interval and the step; or $__range in an expression that calls
 * last_over_time, for the labels a series carried last within the
 * dashboard's time range (the host of a target that went down). */
static int range_allowed(const char *expr, const char *range) {
  return strcmp(range, "$__rate_interval") == 0 ||
         (strcmp(range, "$__range") == 0 && has_call(expr, "last_over_time"));
}

static void check_range(void *arg, const char *range) {
  range_check *c = arg;
  if (range_allowed(c->expr, range))
    return;
  c->bad++;
  cr_expect_fail("%s: '%s': range [%s] instead of [$__rate_interval] (or [$__range] in "
                 "last_over_time) in %s",
                 c->file, c->where, range, c->expr);
}

static void check_expr_ranges(const char *expr, const char *where, void *arg) {
  range_check *c = arg;
  c->where = where ? where : "?";
  c->expr = expr;
  int ranges = promql_ranges(expr, check_range, c);
  int calls = has_call(expr, "rate") + has_call(expr, "irate") + has_call(expr, "increase");
  cr_expect(calls == 0 || ranges > 0, "%s: '%s': rate/increase without a range: %s", c->file,
            c->where, expr);
}

Test(dashboards, every_range_is_rate_interval) {
  cr_assert_eq(has_call("sum(rate(x[1m]))", "rate"), 1);
  cr_assert_eq(has_call("sum(irate(x[1m]))", "rate"), 0);
  cr_assert(range_allowed("rate(x[$__rate_interval])", "$__rate_interval"));
  cr_assert(range_allowed("up and on (job) last_over_time(x[$__range])", "$__range"));
  cr_assert(!range_allowed("rate(x[$__range])", "$__range"));
  cr_assert(!range_allowed("last_over_time(x[5m])", "5m"));
  for (size_t i = 0; i < NDASH; i++) {
    cJSON *d = load(i);
    range_check c = {dashboards[i][0], NULL, NULL, 0};
    each_expr(d, check_expr_ranges, &c);
    cJSON_Delete(d);
  }
}

/* --- metric names ------------------------------------------------------ */

typedef struct name_set {
  char names[MAX_NAMES][PROMQL_NAME_MAX];
  size_t n;
} name_set;

static int set_has(const name_set *s, const char *name) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->names[i], name) == 0)
      return 1;
  return 0;
}

static void set_add(name_set *s, const char *name) {
  if (set_has(s, name))
    return;
  cr_assert_lt(s->n, MAX_NAMES);
  snprintf(s->names[s->n++], PROMQL_NAME_MAX, "%s", name);
}

/* Sample names of the exposition the agent writes for a live host pool
 * with allocations and frees behind it. */
static void add_exported_names(name_set *known) {
  gpupool_options o = {.name = "names",
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = 64u << 20,
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  void *a = NULL, *b = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 4096, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &b, 3u << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  prom_buf buf;
  prom_buf_init(&buf, 1 << 16);
  cr_assert_eq(metrics_render(&buf, PROM_FORMAT_TEXT), 0);
  prom_buf_putc(&buf, '\0');
  cr_assert(!buf.failed);
  for (char *line = buf.data; line && *line;) {
    char *next = strchr(line, '\n');
    if (next)
      *next++ = '\0';
    if (*line != '#') {
      char name[PROMQL_NAME_MAX];
      size_t n = strcspn(line, "{ ");
      cr_assert_lt(n, sizeof name);
      memcpy(name, line, n);
      name[n] = '\0';
      set_add(known, name);
    }
    line = next;
  }
  prom_buf_free(&buf);
  gpupool_free(p, b);
  gpupool_destroy(p);
}

/* Names the dashboards may use that a host pool does not show: series that
 * exist only with CUPTI recording on a GPU, only after an HTTP error, and
 * those Prometheus and dcgm-exporter add. */
static const char *const conditional_names[] = {
    "gpupool_cuda_memory_bytes",       /* CUPTI: allocations seen on a GPU */
    "gpupool_agent_http_errors_total", /* after the first error answer */
    "gpupool_reserved_limit_bytes",    /* pools with a memory_fraction cap */
};
static const char *const foreign_names[] = {
    "up",                      /* Prometheus: scrape health */
    "scrape_duration_seconds", /* Prometheus: scrape time */
    "DCGM_FI_DEV_FB_USED",     /* dcgm-exporter: framebuffer used, MiB */
};

/* Recording rule names of one rule file of deploy/prometheus/rules. */
static void add_recording_rules(name_set *known, const char *path) {
  char *text = read_file(path);
  int rules = 0;
  for (char *p = strstr(text, "record:"); p; p = strstr(p + 1, "record:")) {
    p += strlen("record:");
    while (*p == ' ')
      p++;
    char name[PROMQL_NAME_MAX];
    size_t n = strcspn(p, " \n#");
    cr_assert_lt(n, sizeof name);
    memcpy(name, p, n);
    name[n] = '\0';
    set_add(known, name);
    rules++;
  }
  cr_assert_gt(rules, 5, "%s: recording rules not found", path);
  free(text);
}

typedef struct name_check {
  const name_set *known;
  const char *file, *where, *expr;
  int used;
} name_check;

static void check_name(void *arg, const char *name) {
  name_check *c = arg;
  c->used++;
  cr_expect(set_has(c->known, name), "%s: '%s' uses unknown metric %s in %s", c->file, c->where,
            name, c->expr);
}

static void check_expr_names(const char *expr, const char *where, void *arg) {
  name_check *c = arg;
  c->where = where ? where : "?";
  c->expr = expr;
  int n = promql_metric_names(expr, check_name, c);
  cr_expect_gt(n, 0, "%s: '%s': no metric in (or malformed) %s", c->file, c->where, expr);
}

Test(dashboards, every_metric_is_exported_or_a_recording_rule) {
  static name_set known;
  add_exported_names(&known);
  cr_assert(set_has(&known, "gpupool_reserved_bytes"), "the exposition has no pool families");
  char *docs = read_file("docs/metrics.md");
  for (size_t i = 0; i < sizeof conditional_names / sizeof *conditional_names; i++) {
    cr_expect(strstr(docs, conditional_names[i]), "docs/metrics.md does not document %s",
              conditional_names[i]);
    set_add(&known, conditional_names[i]);
  }
  free(docs);
  for (size_t i = 0; i < sizeof foreign_names / sizeof *foreign_names; i++)
    set_add(&known, foreign_names[i]);
  add_recording_rules(&known, "deploy/prometheus/rules/gpupool-recording.yml");
  add_recording_rules(&known, "deploy/prometheus/rules/gpupool-fleet.yml");
  for (size_t i = 0; i < NDASH; i++) {
    cJSON *d = load(i);
    name_check c = {&known, dashboards[i][0], NULL, NULL, 0};
    each_expr(d, check_expr_names, &c);
    cr_expect_gt(c.used, 20, "%s: few metric references", c.file);
    cJSON_Delete(d);
  }
}

/* The tokenizer itself, on the shapes the dashboards use. */
static void collect(void *arg, const char *name) {
  name_set *s = arg;
  set_add(s, name);
}

Test(dashboards, promql_tokenizer_finds_metrics_only) {
  static name_set s;
  const char *expr =
      "topk(10, sum by (hostname, UUID) (rate(gpupool_allocations_total{job=~\"$job\","
      "source=\"cache\"}[$__rate_interval])) / on (UUID) group_left (name) "
      "(max by (UUID) (DCGM_FI_DEV_FB_USED{UUID=~\"$UUID\"}) * 1048576 > 0)) "
      "or gpupool:free_in_pool:bytes * 0 + 1e9 - histogram_quantile(0.5, x_bucket)";
  cr_assert_eq(promql_metric_names(expr, collect, &s), 4);
  cr_expect_str_eq(s.names[0], "gpupool_allocations_total");
  cr_expect_str_eq(s.names[1], "DCGM_FI_DEV_FB_USED");
  cr_expect_str_eq(s.names[2], "gpupool:free_in_pool:bytes");
  cr_expect_str_eq(s.names[3], "x_bucket");
  cr_expect_eq(promql_metric_names("sum(x{a=\"}\"", collect, &s), -1);
}
