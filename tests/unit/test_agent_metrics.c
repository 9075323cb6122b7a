/* /metrics against the pools themselves: every family's value equals what
 * gpupool_get_stats (and the pool's histogram) says, for pools created
 * before and after the agent starts; destroyed pools disappear. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/http_client.h"
#include "helpers/metrics_text.h"
#include "pool/pool_view.h"

static void clean_env(void) {
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_CONF");
  unsetenv("LOCAL_RANK");
}

static void stop_agent(void) {
  gpupool_agent_stop();
}

TestSuite(agent_metrics, .init = clean_env, .fini = stop_agent);

static gpupool *make_pool(const char *name, int device, size_t capacity) {
  gpupool_options o = {.name = name,
                       .device = device,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = capacity,
                       .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

static void start_agent(size_t trace_events) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .labels = "team=ml",
                             .hostname = "h",
                             .trace_events = trace_events,
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
}

/* One scrape's body (text format); free it. */
static char *scrape(void) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics", NULL, &r), 0);
  cr_assert_eq(r.status, 200);
  char *body = r.body;
  r.body = NULL;
  http_response_free(&r);
  return body;
}

static double value(const char *text, const char *name, const char *pool, const char *extra) {
  char pool_label[160];
  snprintf(pool_label, sizeof pool_label, "pool=\"%s\"", pool);
  const char *labels[] = {pool_label, extra, NULL};
  double v = -1;
  cr_assert_eq(metrics_value(text, name, labels, &v), 0, "no %s{%s,%s}", name, pool_label,
               extra ? extra : "");
  return v;
}

static void check_pool(const char *text, gpupool *p, const char *label) {
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
  const int A = GPUPOOL_STAT_ALL;
  const struct {
    const char *name, *extra;
    double want;
  } expect[] = {
      {"gpupool_reserved_bytes", NULL, (double)s.reserved_bytes[A].current},
      {"gpupool_allocated_bytes", NULL, (double)s.allocated_bytes[A].current},
      {"gpupool_requested_bytes", NULL, (double)s.requested_bytes[A].current},
      {"gpupool_active_bytes", NULL, (double)s.active_bytes[A].current},
      {"gpupool_inactive_split_bytes", NULL, (double)s.inactive_split_bytes[A].current},
      {"gpupool_largest_free_block_bytes", NULL, (double)s.largest_free_block},
      {"gpupool_peak_reserved_bytes", NULL, (double)s.reserved_bytes[A].peak},
      {"gpupool_peak_allocated_bytes", NULL, (double)s.allocated_bytes[A].peak},
      {"gpupool_segments", NULL, (double)s.segment[A].current},
      {"gpupool_blocks", "state=\"allocated\"", (double)s.allocation[A].current},
      {"gpupool_blocks", "state=\"free\"", (double)s.free_blocks},
      {"gpupool_blocks", "state=\"pending_free\"", (double)s.pending_free_blocks},
      {"gpupool_allocations_total", "source=\"cache\"", (double)s.num_cache_hits},
      {"gpupool_allocations_total", "source=\"device\"", (double)s.num_device_sourced},
      {"gpupool_frees_total", NULL, (double)s.num_frees},
      {"gpupool_device_allocs_total", NULL, (double)s.num_device_alloc},
      {"gpupool_device_frees_total", NULL, (double)s.num_device_free},
      {"gpupool_alloc_retries_total", NULL, (double)s.num_alloc_retries},
      {"gpupool_ooms_total", NULL, (double)s.num_ooms},
      {"gpupool_gc_runs_total", NULL, (double)s.num_gc_runs},
      {"gpupool_sync_events_total", NULL, (double)s.num_sync_events},
  };
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    double got = value(text, expect[i].name, label, expect[i].extra);
    cr_assert_eq(got, expect[i].want, "%s{pool=%s,%s}: /metrics says %.0f, the pool %.0f",
                 expect[i].name, label, expect[i].extra ? expect[i].extra : "", got,
                 expect[i].want);
  }

  pool_histogram h;
  pool_get_histogram(p, &h);
  cr_assert_eq(value(text, "gpupool_allocation_size_bytes_count", label, NULL), (double)h.count);
  cr_assert_eq(value(text, "gpupool_allocation_size_bytes_sum", label, NULL), (double)h.sum);
  /* The default (coarse) buckets: le = 2^9, 2^11, ... 2^35. */
  uint64_t cumulative = 0;
  for (int i = 0; i < POOL_HIST_BUCKETS - 1; i++) {
    cumulative += h.bucket[i];
    char le[48];
    snprintf(le, sizeof le, "le=\"%llu\"", 1ULL << i);
    if (i >= 9 && i <= 35 && i % 2 == 1)
      cr_assert_eq(value(text, "gpupool_allocation_size_bytes_bucket", label, le),
                   (double)cumulative, "bucket %s", le);
    else {
      char pool_label[160];
      snprintf(pool_label, sizeof pool_label, "pool=\"%s\"", label);
      const char *labels[] = {pool_label, le, NULL};
      cr_assert_eq(metrics_count(text, "gpupool_allocation_size_bytes_bucket", labels), 0,
                   "bucket %s is not a coarse one", le);
    }
  }
  cr_assert_eq(value(text, "gpupool_allocation_size_bytes_bucket", label, "le=\"+Inf\""),
               (double)h.count);
}

Test(agent_metrics, values_equal_the_pools_stats) {
  gpupool *a = make_pool("a", 0, 256 << 20);
  gpupool *b = make_pool("b", 1, 256 << 20);
  void *pa[40], *pb[10];
  for (int i = 0; i < 40; i++)
    cr_assert_eq(gpupool_malloc(a, &pa[i], (size_t)(i + 1) * 1000, NULL), GPUPOOL_OK);
  for (int i = 0; i < 40; i += 3)
    gpupool_free(a, pa[i]);
  for (int i = 0; i < 10; i++)
    cr_assert_eq(gpupool_malloc(b, &pb[i], (size_t)(i + 1) << 20, NULL), GPUPOOL_OK);
  for (int i = 0; i < 5; i++)
    gpupool_free(b, pb[i]);
  start_agent(0);

  char *text = scrape();
  check_pool(text, a, "a");
  check_pool(text, b, "b");
  free(text);

  /* Values move with the pools. */
  void *more;
  cr_assert_eq(gpupool_malloc(a, &more, 3 << 20, NULL), GPUPOOL_OK);
  gpupool_empty_cache(b);
  text = scrape();
  check_pool(text, a, "a");
  check_pool(text, b, "b");
  free(text);
  gpupool_destroy(a);
  gpupool_destroy(b);
}

Test(agent_metrics, every_series_has_the_host_and_constant_labels) {
  gpupool *p = make_pool("labelled", 0, 64 << 20);
  start_agent(0);
  char *text = scrape();
  int samples = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#')
      continue;
    samples++;
    cr_assert(strstr(line, "hostname=\"h\""), "no hostname: %s", line);
    cr_assert(strstr(line, "team=\"ml\""), "no constant label: %s", line);
    cr_assert_null(strstr(line, "job="), "%s", line);
    cr_assert_null(strstr(line, "instance="), "%s", line);
  }
  cr_assert_gt(samples, 50);
  free(text);
  gpupool_destroy(p);
}

Test(agent_metrics, pools_come_and_go) {
  gpupool *before = make_pool("before", 0, 64 << 20);
  start_agent(0);
  char *text = scrape();
  cr_assert_eq(metrics_count(text, "gpupool_reserved_bytes", NULL), 1);
  double n;
  cr_assert_eq(metrics_value(text, "gpupool_agent_pools", NULL, &n), 0);
  cr_assert_eq(n, 1);
  free(text);

  gpupool *after = make_pool("after", 2, 64 << 20);
  void *p;
  cr_assert_eq(gpupool_malloc(after, &p, 12345, NULL), GPUPOOL_OK);
  text = scrape();
  cr_assert_eq(metrics_count(text, "gpupool_reserved_bytes", NULL), 2);
  check_pool(text, after, "after");
  const char *dev2[] = {"device=\"2\"", "pool=\"after\"", NULL};
  cr_assert_eq(metrics_count(text, "gpupool_allocated_bytes", dev2), 1);
  free(text);

  gpupool_destroy(before);
  text = scrape();
  const char *gone[] = {"pool=\"before\"", NULL};
  cr_assert_eq(metrics_count(text, "gpupool_reserved_bytes", gone), 0);
  cr_assert_null(strstr(text, "pool=\"before\""), "a destroyed pool still shows");
  cr_assert_eq(metrics_value(text, "gpupool_agent_pools", NULL, &n), 0);
  cr_assert_eq(n, 1);
  free(text);
  gpupool_destroy(after);
}

Test(agent_metrics, same_names_stay_distinct_series) {
  gpupool *x = make_pool("same", 0, 64 << 20);
  gpupool *y = make_pool("same", 0, 64 << 20);
  gpupool *z = make_pool("same", 1, 64 << 20);
  void *p;
  cr_assert_eq(gpupool_malloc(y, &p, 4096, NULL), GPUPOOL_OK);
  start_agent(0);
  char *text = scrape();
  check_pool(text, x, "same");
  check_pool(text, y, "same#2");
  const char *on1[] = {"device=\"1\"", "pool=\"same\"", NULL};
  cr_assert_eq(metrics_count(text, "gpupool_reserved_bytes", on1), 1, "another device: no suffix");
  free(text);
  gpupool_destroy(x);
  gpupool_destroy(y);
  gpupool_destroy(z);
}

/* The ordinal counts the pools of the name before, whatever their labels:
 * a third pool is "#3", not a second "#2" (two series with one label set). */
Test(agent_metrics, third_pool_of_a_name_is_numbered_3) {
  gpupool *pools[3];
  void *p[3];
  for (int i = 0; i < 3; i++) {
    pools[i] = make_pool("same", 0, 64 << 20);
    cr_assert_eq(gpupool_malloc(pools[i], &p[i], (size_t)(i + 1) << 20, NULL), GPUPOOL_OK);
  }
  start_agent(0);
  char *text = scrape();
  check_pool(text, pools[0], "same");
  check_pool(text, pools[1], "same#2");
  check_pool(text, pools[2], "same#3");
  const char *second[] = {"pool=\"same#2\"", NULL};
  cr_assert_eq(metrics_count(text, "gpupool_reserved_bytes", second), 1);
  free(text);
  for (int i = 0; i < 3; i++) {
    gpupool_free(pools[i], p[i]);
    gpupool_destroy(pools[i]);
  }
}

Test(agent_metrics, simulated_devices) {
  gpupool *a = make_pool("a", 0, 64 << 20);
  gpupool *b = make_pool("b", 0, 32 << 20);
  void *p;
  cr_assert_eq(gpupool_malloc(a, &p, 5 << 20, NULL), GPUPOOL_OK);
  start_agent(0);
  char *text = scrape();
  const char *dev0[] = {"device=\"0\"", "UUID=\"GPU-host-h-0\"", NULL};
  double total, free_bytes;
  cr_assert_eq(metrics_value(text, "gpupool_device_memory_total_bytes", dev0, &total), 0);
  cr_assert_eq(total, (double)(96 << 20), "the host pools of an ordinal add up");
  cr_assert_eq(metrics_value(text, "gpupool_device_memory_free_bytes", dev0, &free_bytes), 0);
  gpupool_stats sa, sb;
  gpupool_get_stats(a, &sa);
  gpupool_get_stats(b, &sb);
  cr_assert_eq(free_bytes,
               total - (double)sa.reserved_bytes[0].current - (double)sb.reserved_bytes[0].current);
  const char *info[] = {"device=\"0\"", "name=\"host-simulated\"", NULL};
  cr_assert_eq(metrics_count(text, "gpupool_device_info", info), 1);
  const char *pool_uuid[] = {"pool=\"a\"", "UUID=\"GPU-host-h-0\"", NULL};
  cr_assert_eq(metrics_count(text, "gpupool_reserved_bytes", pool_uuid), 1);
  free(text);
  gpupool_destroy(a);
  gpupool_destroy(b);
}

Test(agent_metrics, ooms_and_retries) {
  gpupool *p = make_pool("faulty", 0, 64 << 20);
  cr_assert_eq(gpupool_host_inject_faults(p, 1, 0, 0), GPUPOOL_OK); /* every device alloc fails */
  void *x;
  cr_assert_eq(gpupool_malloc(p, &x, 1 << 20, NULL), GPUPOOL_ERR_OOM);
  start_agent(0);
  char *text = scrape();
  cr_assert_eq(value(text, "gpupool_ooms_total", "faulty", NULL), 1);
  check_pool(text, p, "faulty");
  free(text);
  gpupool_destroy(p);
}

/* gpupool_reserved_limit_bytes: a series for a pool with a cap only, with
 * the cap in bytes, following gpupool_set_memory_fraction. */
Test(agent_metrics, reserved_limit_of_capped_pools_only) {
  gpupool *capped = make_pool("capped", 0, 64 << 20),
          *free_pool = make_pool("uncapped", 0, 64 << 20);
  cr_assert_eq(gpupool_set_memory_fraction(capped, 0.25), GPUPOOL_OK);
  void *x, *y;
  cr_assert_eq(gpupool_malloc(capped, &x, 1 << 20, NULL), GPUPOOL_OK); /* asks the device size */
  cr_assert_eq(gpupool_malloc(free_pool, &y, 1 << 20, NULL), GPUPOOL_OK);
  start_agent(0);
  char *text = scrape();
  cr_assert(strstr(text, "\n# TYPE gpupool_reserved_limit_bytes gauge\n"), "%s", text);
  cr_assert_eq(value(text, "gpupool_reserved_limit_bytes", "capped", NULL), 16 << 20);
  cr_assert_eq(metrics_count(text, "gpupool_reserved_limit_bytes", NULL), 1, "one pool has a cap");
  free(text);
  cr_assert_eq(gpupool_set_memory_fraction(capped, 0.5), GPUPOOL_OK);
  text = scrape();
  cr_assert_eq(value(text, "gpupool_reserved_limit_bytes", "capped", NULL), 32 << 20);
  free(text);
  gpupool_free(capped, x);
  gpupool_free(free_pool, y);
  gpupool_destroy(capped);
  gpupool_destroy(free_pool);
}

Test(agent_metrics, trace_event_counts) {
  gpupool *p = make_pool("traced", 0, 64 << 20);
  start_agent(16); /* a ring of 16 slots per stream: it keeps 15 events (event_ring.h) */
  for (int i = 0; i < 100; i++) {
    void *x;
    cr_assert_eq(gpupool_malloc(p, &x, 4096, NULL), GPUPOOL_OK);
    gpupool_free(p, x);
  }
  char *text = scrape();
  double total = value(text, "gpupool_trace_events_total", "traced", NULL);
  double dropped = value(text, "gpupool_trace_events_dropped_total", "traced", NULL);
  cr_assert_geq(total, 200, "an alloc and a free event each time");
  cr_assert_eq(dropped, total - 15, "all but the ring's 15 newest are overwritten");
  free(text);
  gpupool_destroy(p);
}

Test(agent_metrics, agent_health_and_cupti_state) {
  start_agent(0);
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/missing", NULL, &r), 0);
  http_response_free(&r);
  free(scrape());
  char *text = scrape();
  double v;
  cr_assert_eq(metrics_value(text, "gpupool_agent_scrapes_total", NULL, &v), 0);
  cr_assert_eq(v, 1, "one scrape before this one");
  const char *c404[] = {"code=\"404\"", NULL};
  cr_assert_eq(metrics_value(text, "gpupool_agent_http_errors_total", c404, &v), 0);
  cr_assert_eq(v, 1);
  cr_assert_eq(metrics_value(text, "gpupool_agent_scrape_duration_seconds_count", NULL, &v), 0);
  cr_assert_eq(v, 1);
  cr_assert_eq(metrics_value(text, "gpupool_agent_last_scrape_duration_seconds", NULL, &v), 0);
  cr_assert_gt(v, 0);
  const char *off[] = {"reason=\"off\"", NULL};
  cr_assert_eq(metrics_value(text, "gpupool_cupti_up", off, &v), 0, "cupti:off shows as such");
  cr_assert_eq(v, 0);
  const char *build[] = {"version=\"" GPUPOOL_VERSION "\"", NULL};
  cr_assert_eq(metrics_count(text, "gpupool_build_info", build), 1);
  free(text);
}

/* What a probe scraping a fresh agent with one idle host pool and no CUPTI
 * expects: every family of the contract declared, with samples (counters at
 * 0) wherever a value is known. */
Test(agent_metrics, a_fresh_agent_declares_every_family) {
  gpupool *p = make_pool("fresh", 0, 64 << 20);
  start_agent(0);
  char *text = scrape();
  static const char *const families[] = {
      "gpupool_build_info gauge",
      "gpupool_device_info gauge",
      "gpupool_device_memory_total_bytes gauge",
      "gpupool_device_memory_free_bytes gauge",
      "gpupool_reserved_bytes gauge",
      "gpupool_allocated_bytes gauge",
      "gpupool_requested_bytes gauge",
      "gpupool_inactive_split_bytes gauge",
      "gpupool_largest_free_block_bytes gauge",
      "gpupool_peak_reserved_bytes gauge",
      "gpupool_peak_allocated_bytes gauge",
      "gpupool_segments gauge",
      "gpupool_blocks gauge",
      "gpupool_allocations_total counter",
      "gpupool_frees_total counter",
      "gpupool_device_frees_total counter",
      "gpupool_alloc_retries_total counter",
      "gpupool_ooms_total counter",
      "gpupool_allocation_size_bytes histogram",
      "gpupool_cuda_memory_bytes gauge",
      "gpupool_cupti_up gauge",
      "gpupool_cupti_records_dropped_total counter",
      "gpupool_trace_events_total counter",
      "gpupool_trace_events_dropped_total counter",
      "gpupool_agent_http_errors_total counter",
  };
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
    char line[128];
    snprintf(line, sizeof line, "\n# TYPE %s\n", families[i]);
    cr_assert(strstr(text, line), "no '%s' in a fresh agent's /metrics", families[i]);
  }
  const char *cache[] = {"source=\"cache\"", NULL};
  const char *device[] = {"source=\"device\"", NULL};
  double v;
  cr_assert_eq(metrics_value(text, "gpupool_allocations_total", cache, &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(metrics_value(text, "gpupool_allocations_total", device, &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(metrics_value(text, "gpupool_cupti_up", NULL, &v), 0);
  cr_assert_eq(v, 0);
  cr_assert_eq(metrics_value(text, "gpupool_cupti_records_dropped_total", NULL, &v), 0);
  static const char *const codes[] = {"code=\"400\"", "code=\"404\"", "code=\"405\""};
  for (size_t i = 0; i < 3; i++) {
    const char *l[] = {codes[i], NULL};
    cr_assert_eq(metrics_value(text, "gpupool_agent_http_errors_total", l, &v), 0,
                 "no %s error series before the first error", codes[i]);
    cr_assert_eq(v, 0);
  }
  cr_assert_eq(metrics_count(text, "gpupool_cuda_memory_bytes", NULL), 0,
               "no CUDA memory value without CUPTI");
  free(text);
  gpupool_destroy(p);
}

Test(agent_metrics, openmetrics_carries_the_same_values) {
  gpupool *p = make_pool("om", 0, 64 << 20);
  void *x;
  cr_assert_eq(gpupool_malloc(p, &x, 777, NULL), GPUPOOL_OK);
  start_agent(0);
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics",
                            "Accept: application/openmetrics-text; version=1.0.0\r\n", &r),
               0);
  check_pool(r.body, p, "om");
  cr_assert_null(strstr(r.body, "\n\n"), "no empty lines in OpenMetrics");
  http_response_free(&r);
  gpupool_destroy(p);
}
