/* /ui's data through a real socket, beside tests/unit/test_agent_ui.c: the
 * cumulative counters before a series' first point (state.json), the label of
 * blocks.json's pool among pools that share a name, and the page's refusal
 * of an unknown parameter, named. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
