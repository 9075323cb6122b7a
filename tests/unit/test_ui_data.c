/* /ui's data through a real socket, beside tests/unit/test_agent_ui.c: the
 * cumulative counters before a series' first point (state.json), also after
 * the counter ring has wrapped, the process's pid and instance, the label of
 * blocks.json's pool among pools that share a name, the block blocks.json
 * names as the pool's largest free block (plain and expandable pools), and
 * the page's refusal of an unknown parameter, named. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/trace_counters.h"
#include "gpupool/agent.h"
#include "helpers/http_client.h"
#include "helpers/http_json.h"
#include "pool/pool_view.h"

static void setup(void) {
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_CONF");
  unsetenv("LOCAL_RANK");
}

static void teardown(void) {
  gpupool_agent_stop();
}

TestSuite(ui_data, .init = setup, .fini = teardown);

static int start_local(void) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  return gpupool_agent_port();
}

static gpupool *make(const char *name) {
  gpupool_options o = {
      .name = name, .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 256 << 20, .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

static double last(const cJSON *series, const char *k) {
  const cJSON *a = cJSON_GetObjectItem(series, k);
  int n = cJSON_GetArraySize(a);
  cr_assert_gt(n, 0, "series %s is empty", k);
  return cJSON_GetArrayItem(a, n - 1)->valuedouble;
}

/* A pool created within the window, whose samples all fall in one slice (one
 * point): its device allocations and cache hits count from 0, not from that
 * point nor from the sample before it in the slice. */
Test(ui_data, series_count_from_before_the_first_point) {
  int port = start_local();
  gpupool *p = make("young");
  void *a[3];
  trace_counters_sample();
  for (int i = 0; i < 3; i++) { /* each a segment of its own: from the device */
    cr_assert_eq(gpupool_malloc(p, &a[i], (size_t)(20 + i) << 20, NULL), GPUPOOL_OK);
    trace_counters_sample();
  }
  cr_assert_eq(gpupool_free(p, a[0]), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &a[0], 20 << 20, NULL), GPUPOOL_OK); /* from the pool */
  trace_counters_sample();
  gpupool_stats st;
  cr_assert_eq(gpupool_get_stats(p, &st), GPUPOOL_OK);
  cr_assert_eq(st.num_device_sourced, 3);
  cr_assert_geq(st.num_cache_hits, 1);

  cJSON *state = http_get_json(port, "/ui/state.json?window=3600");
  const cJSON *pool = cJSON_GetArrayItem(cJSON_GetObjectItem(state, "pools"), 0);
  cr_assert_str_eq(cJSON_GetObjectItem(pool, "name")->valuestring, "young");
  const cJSON *series = cJSON_GetObjectItem(pool, "series");
  const cJSON *before = cJSON_GetObjectItem(series, "before");
  cr_assert(cJSON_IsObject(before), "series.before is missing");
  cr_assert_eq(json_number(before, "from_device"), 0, "created in the window: counted from 0");
  cr_assert_eq(json_number(before, "from_cache"), 0);
  cr_assert_eq(last(series, "from_device") - json_number(before, "from_device"),
               (double)st.num_device_sourced);
  cr_assert_eq(last(series, "from_cache") - json_number(before, "from_cache"),
               (double)st.num_cache_hits);
  cJSON_Delete(state);
  for (int i = 0; i < 3; i++)
    gpupool_free(p, a[i]);
  gpupool_destroy(p);
}

/* Pools same, same, same, same#2 on one device: /metrics labels them same,
 * same#2, same#3, same#2#2 (agent/pool_label.h), and so does blocks.json. */
Test(ui_data, blocks_label_as_metrics) {
  int port = start_local();
  const char *names[] = {"same", "same", "same", "same#2"};
  const char *labels[] = {"same", "same#2", "same#3", "same#2#2"};
  gpupool *p[4];
  for (int i = 0; i < 4; i++)
    p[i] = make(names[i]);
  for (int i = 0; i < 4; i++) {
    char target[64];
    snprintf(target, sizeof target, "/ui/blocks.json?pool=%u", pool_id(p[i]));
    cJSON *doc = http_get_json(port, target);
    const cJSON *pool = cJSON_GetObjectItem(doc, "pool");
    cr_assert_str_eq(cJSON_GetObjectItem(pool, "name")->valuestring, names[i]);
    const cJSON *label = cJSON_GetObjectItem(pool, "label");
    cr_assert(cJSON_IsString(label), "pool %d: no label", i);
    cr_assert_str_eq(label->valuestring, labels[i]);
    cJSON_Delete(doc);
  }
  for (int i = 0; i < 4; i++)
    gpupool_destroy(p[i]);
}

/* The page and its assets name the parameter they do not take, as the
 * JSON endpoints do, and the page's device must be an ordinal, as /trace's. */
Test(ui_data, unknown_parameter_named) {
  int port = start_local();
  const struct {
    const char *target, *want;
  } cases[] = {{"/ui?foo=1", "unknown parameter 'foo' (expected pool or device)"},
               {"/ui?pool=x&bar=", "unknown parameter 'bar' (expected pool or device)"},
               {"/ui?device=2x", "bad device '2x': expected a device ordinal 0..4095"},
               {"/ui?pool=x&device=1&device=1", "parameter 'device' given more than once"},
               {"/ui/ui.css?x=1", "unknown parameter 'x' (expected v)"},
               {"/ui/ui.css?device=1", "unknown parameter 'device' (expected v)"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    http_response r;
    cr_assert_eq(http_request("127.0.0.1", port, "GET", cases[i].target, NULL, &r), 0);
    cr_assert_eq(r.status, 400, "%s: %d", cases[i].target, r.status);
    cr_assert(r.body && strstr(r.body, cases[i].want), "%s: %s", cases[i].target, r.body);
    http_response_free(&r);
  }
}

static int start_quiet(void) {
  /* The sampler's own rounds once a day: the test makes the samples. */
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .sample_interval_ms = 86400000,
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  return gpupool_agent_port();
}

static const cJSON *pool_named(const cJSON *state, const char *name) {
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(state, "pools")) {
    const cJSON *n = cJSON_GetObjectItem(p, "name");
    if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
      return p;
  }
  return NULL;
}

/* After the counter ring has wrapped (some samples of pool "old" are
 * overwritten), a pool created later still has every sample it ever had:
 * it counts from 0, not from its first point (whose own increments would be
 * lost), while "old" counts from its first sample in the window. */
Test(ui_data, ring_wrapped_later_pool_counts_from_0) {
  int port = start_quiet();
  gpupool *old = make("old");
  void *o;
  cr_assert_eq(gpupool_malloc(old, &o, 20 << 20, NULL), GPUPOOL_OK);
  for (int i = 0; i < TRACE_COUNTERS_CAPACITY + 100; i++)
    trace_counters_sample();
  cr_assert_gt(trace_counters_dropped(), 0, "the ring has wrapped");
  gpupool *young = make("young");
  void *a[3];
  for (int i = 0; i < 3; i++) { /* each a segment of its own: from the device */
    cr_assert_eq(gpupool_malloc(young, &a[i], (size_t)(20 + i) << 20, NULL), GPUPOOL_OK);
    trace_counters_sample(); /* the first sample of young already counts one */
  }
  gpupool_stats st;
  cr_assert_eq(gpupool_get_stats(young, &st), GPUPOOL_OK);
  cr_assert_eq(st.num_device_sourced, 3);

  cJSON *state = http_get_json(port, "/ui/state.json?window=3600");
  cr_assert_gt(json_number(state, "samples_dropped") + (double)trace_counters_dropped(), 0);
  const cJSON *y = pool_named(state, "young");
  cr_assert_not_null(y);
  const cJSON *series = cJSON_GetObjectItem(y, "series");
  const cJSON *before = cJSON_GetObjectItem(series, "before");
  cr_assert_eq(json_number(before, "from_device"), 0, "young's samples are all kept: from 0");
  cr_assert_eq(last(series, "from_device") - json_number(before, "from_device"), 3.0,
               "every device allocation of young counts");
  const cJSON *ol = pool_named(state, "old");
  cr_assert_not_null(ol);
  const cJSON *oser = cJSON_GetObjectItem(ol, "series");
  cr_assert_eq(json_number(cJSON_GetObjectItem(oser, "before"), "from_device"), 1,
               "old's first samples are gone: it counts from its first kept one");
  cJSON_Delete(state);
  for (int i = 0; i < 3; i++)
    gpupool_free(young, a[i]);
  gpupool_free(old, o);
  gpupool_destroy(young);
  gpupool_destroy(old);
}

/* state.json names the process: its pid and an instance drawn once per
 * process (16 hex digits), the same in every answer. */
Test(ui_data, state_names_the_process) {
  int port = start_local();
  char first[32] = "";
  for (int i = 0; i < 2; i++) {
    cJSON *state = http_get_json(port, "/ui/state.json");
    cr_assert_eq(json_number(state, "pid"), (double)getpid());
    const cJSON *inst = cJSON_GetObjectItem(state, "instance");
    cr_assert(cJSON_IsString(inst), "no instance");
    cr_assert_eq(strlen(inst->valuestring), 16);
    cr_assert_eq(strspn(inst->valuestring, "0123456789abcdef"), 16, "%s", inst->valuestring);
    if (i == 0)
      snprintf(first, sizeof first, "%s", inst->valuestring);
    else
      cr_assert_str_eq(inst->valuestring, first, "the instance changed within the process");
    cJSON_Delete(state);
  }
}

/* The free block that blocks.json names as the pool's largest: its index in
 * its segment, -1 when there is none; *seg_out, *off, *size, *unmapped its
 * segment index, offset, size and unmapped bytes. */
static int largest_named(const cJSON *pool, int *seg_out, double *off, double *size,
                         double *unmapped) {
  const cJSON *at = cJSON_GetObjectItem(pool, "largest_free_block");
  if (!cJSON_IsObject(at))
    return -1;
  int k = (int)json_number(at, "segment"), j = (int)json_number(at, "block");
  const cJSON *seg = cJSON_GetArrayItem(cJSON_GetObjectItem(pool, "segments"), k);
  cr_assert_not_null(seg, "largest_free_block: no segment %d", k);
  const cJSON *bl = cJSON_GetObjectItem(seg, "blocks");
  cr_assert_lt(6 * j + 5, cJSON_GetArraySize(bl), "largest_free_block: no block %d", j);
  cr_assert_eq(cJSON_GetArrayItem(bl, 6 * j + 3)->valueint, 0, "the largest free block is free");
  *seg_out = k;
  *off = cJSON_GetArrayItem(bl, 6 * j)->valuedouble;
  *size = cJSON_GetArrayItem(bl, 6 * j + 1)->valuedouble;
  *unmapped = cJSON_GetArrayItem(bl, 6 * j + 5)->valuedouble;
  return j;
}

static cJSON *blocks_of_pool(int port, gpupool *p) {
  char target[64];
  snprintf(target, sizeof target, "/ui/blocks.json?pool=%u", pool_id(p));
  return http_get_json(port, target);
}

/* blocks.json names the block that is the pool's largest free block, the
 * figure of gpupool_get_stats (and /metrics): in a plain pool the largest
 * free block; in an expandable one the free block with the longest stretch
 * over mapped pages, not the largest by size (mostly unmapped there). */
Test(ui_data, largest_free_block_named) {
  int port = start_local();
  gpupool *plain = make("plain");
  void *a, *b, *c;
  cr_assert_eq(gpupool_malloc(plain, &a, 20 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(plain, &b, 30 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(plain, &c, 1 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(plain, b), GPUPOOL_OK); /* a 30 MiB segment, free */
  gpupool_stats st;
  cr_assert_eq(gpupool_get_stats(plain, &st), GPUPOOL_OK);
  cJSON *doc = blocks_of_pool(port, plain);
  const cJSON *pool = cJSON_GetObjectItem(doc, "pool");
  cr_assert_eq(json_number(pool, "largest_free"), (double)st.largest_free_block);
  int k;
  double off, size, unmapped;
  cr_assert_geq(largest_named(pool, &k, &off, &size, &unmapped), 0, "no largest free block named");
  cr_assert_eq(size, (double)st.largest_free_block);
  cr_assert_eq(size, 30 << 20);
  cJSON_Delete(doc);

  /* expandable: [A 10 MiB | B 10 MiB | C 30 MiB | D 2 MiB | the rest], C freed
   * and its pages returned (unmapped), then A freed (its pages stay):
   * the largest free block over mapped pages is A's, 10 MiB. */
  gpupool_options o = {.name = "grow",
                       .tunables = "expandable_segments:True,expandable_slack_percent:0",
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = 256 << 20,
                       .ignore_env = 1};
  gpupool *grow;
  cr_assert_eq(gpupool_create(&o, &grow), GPUPOOL_OK, "%s", gpupool_last_error());
  void *A, *B, *C, *D;
  cr_assert_eq(gpupool_malloc(grow, &A, 10 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(grow, &B, 10 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(grow, &C, 30 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(grow, &D, 2 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(grow, C), GPUPOOL_OK);
  gpupool_empty_cache(grow);
  cr_assert_eq(gpupool_free(grow, A), GPUPOOL_OK);
  cr_assert_eq(gpupool_get_stats(grow, &st), GPUPOOL_OK);
  cr_assert_eq(st.largest_free_block, 10 << 20, "A's 10 MiB, mapped (%" PRIu64 ")",
               st.largest_free_block);
  doc = blocks_of_pool(port, grow);
  pool = cJSON_GetObjectItem(doc, "pool");
  cr_assert_eq(json_number(pool, "largest_free"), (double)st.largest_free_block);
  cr_assert_geq(largest_named(pool, &k, &off, &size, &unmapped), 0, "no largest free block named");
  cr_assert_eq(off, 0, "A's block, at the start of the range (offset %g, size %g)", off, size);
  cr_assert_eq(size - unmapped, 10 << 20, "its mapped bytes (size %g, unmapped %g)", size,
               unmapped);
  /* Not the block that is the largest by size: the rest of the range. */
  double biggest = 0;
  const cJSON *seg;
  cJSON_ArrayForEach(seg, cJSON_GetObjectItem(pool, "segments")) {
    const cJSON *bl = cJSON_GetObjectItem(seg, "blocks");
    for (int i = 0; i < cJSON_GetArraySize(bl); i += 6)
      if (cJSON_GetArrayItem(bl, i + 3)->valueint == 0 &&
          cJSON_GetArrayItem(bl, i + 1)->valuedouble > biggest)
        biggest = cJSON_GetArrayItem(bl, i + 1)->valuedouble;
  }
  cr_assert_gt(biggest, size, "a larger free block (mostly unmapped) exists: the test means it");
  cJSON_Delete(doc);

  /* Nothing free over mapped pages: none named. */
  gpupool *none = make("none");
  doc = blocks_of_pool(port, none);
  pool = cJSON_GetObjectItem(doc, "pool");
  cr_assert(cJSON_IsNull(cJSON_GetObjectItem(pool, "largest_free_block")));
  cr_assert_eq(json_number(pool, "largest_free"), 0);
  cJSON_Delete(doc);

  gpupool_free(grow, B);
  gpupool_free(grow, D);
  gpupool_free(plain, a);
  gpupool_free(plain, c);
  gpupool_destroy(none);
  gpupool_destroy(grow);
  gpupool_destroy(plain);
}
