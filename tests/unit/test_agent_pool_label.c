/* The pool= parameter of every endpoint takes the `pool` label /metrics
 * writes, through a real socket: with two pools named alike on one device
 * (labelled "bfc" and "bfc#2") and a third on another device ("bfc" again),
 * each label selects exactly its own pools' events, blocks and advice, and
 * a label no pool has is a 400 (destroyed pools: test_trace_writer.c). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/trace_counters.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/http_client.h"
#include "helpers/http_json.h"
#include "helpers/metrics_text.h"
#include "helpers/pool_check.h"
#include "helpers/trace_check.h"
#include "pool/pool_view.h"

#define MiB ((size_t)1 << 20)

/* first, second: "bfc" on device 0 (1 and 2 allocations); other: "bfc" on
 * device 1 (3 allocations). */
static gpupool *first, *second, *other;

static gpupool *host_pool(const char *name, int device, int allocations) {
  gpupool_options o = {.name = name,
                       .device = device,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = 64 * MiB,
                       .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  for (int i = 0; i < allocations; i++)
    pc_must_malloc(p, 4096, NULL);
  return p;
}

static void setup(void) {
  gpupool_agent_options o = {
      .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .trace_events = 1024, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  first = host_pool("bfc", 0, 1);
  second = host_pool("bfc", 0, 2);
  other = host_pool("bfc", 1, 3);
  trace_counters_sample(); /* every pool in the trace's table, with its label */
}

static void teardown(void) {
  gpupool_agent_stop();
  gpupool_destroy(first);
  gpupool_destroy(second);
  gpupool_destroy(other);
}

TestSuite(agent_pool_label, .init = setup, .fini = teardown);

static http_response get(const char *target) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", target, NULL, &r), 0,
               "GET %s: no complete answer", target);
  return r;
}

static int status_of(const char *target) {
  http_response r = get(target);
  int status = r.status;
  http_response_free(&r);
  return status;
}

/* The ids of /snapshot's pools, as a bit set (ids are small here). */
static unsigned snapshot_ids(const char *target) {
  cJSON *root = http_get_json(gpupool_agent_port(), target);
  unsigned ids = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "pools")) {
    unsigned id = (unsigned)cJSON_GetObjectItem(p, "id")->valuedouble;
    cr_assert_lt(id, 32u);
    ids |= 1u << id;
  }
  cJSON_Delete(root);
  return ids;
}

static unsigned bit(gpupool *p) {
  cr_assert_lt(pool_id(p), 32u);
  return 1u << pool_id(p);
}

Test(agent_pool_label, metrics_shows_the_labels_the_parameter_takes) {
  http_response r = get("/metrics");
  cr_assert_eq(r.status, 200);
  const char *second_on_0[] = {"device=\"0\"", "pool=\"bfc#2\"", "state=\"allocated\"", NULL};
  const char *first_on_0[] = {"device=\"0\"", "pool=\"bfc\"", "state=\"allocated\"", NULL};
  const char *on_1[] = {"device=\"1\"", "pool=\"bfc\"", "state=\"allocated\"", NULL};
  double v;
  cr_assert_eq(metrics_value(r.body, "gpupool_blocks", second_on_0, &v), 0);
  cr_expect_eq(v, 2);
  cr_assert_eq(metrics_value(r.body, "gpupool_blocks", first_on_0, &v), 0);
  cr_expect_eq(v, 1);
  cr_assert_eq(metrics_value(r.body, "gpupool_blocks", on_1, &v), 0);
  cr_expect_eq(v, 3);
  http_response_free(&r);
}

Test(agent_pool_label, snapshot_selects_the_pools_of_the_label) {
  cr_expect_eq(snapshot_ids("/snapshot?pool=bfc%232"), bit(second));
  cr_expect_eq(snapshot_ids("/snapshot?pool=bfc"), bit(first) | bit(other), "one per device");
  cr_expect_eq(snapshot_ids("/snapshot"), bit(first) | bit(second) | bit(other));
  /* a label is per device: device= picks one of them, alone or with pool= */
  cr_expect_eq(snapshot_ids("/snapshot?pool=bfc&device=1"), bit(other));
  cr_expect_eq(snapshot_ids("/snapshot?device=0"), bit(first) | bit(second));
  cr_expect_eq(status_of("/snapshot?device=9"), 400);
  cr_expect_eq(status_of("/snapshot?pool=bfc%232&device=1"), 400);
  cr_expect_eq(status_of("/snapshot?device=x"), 400);
  cr_expect_eq(status_of("/snapshot?device=0&device=0"), 400);
  cr_expect_eq(status_of("/snapshot?format=torch&pool=bfc&device=1"), 200);
  cr_expect_eq(status_of("/snapshot?format=torch&device=9"), 400);
  cr_expect_eq(status_of("/snapshot?pool=bfc%233"), 400);
  /* each pool says its label, the value that selects it */
  cJSON *root = http_get_json(gpupool_agent_port(), "/snapshot?pool=bfc%232");
  const cJSON *only = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "pools"), 0);
  cr_assert_not_null(only);
  cr_expect_str_eq(cJSON_GetObjectItem(only, "name")->valuestring, "bfc");
  cr_expect_str_eq(cJSON_GetObjectItem(only, "label")->valuestring, "bfc#2");
  cJSON_Delete(root);
  cr_expect_eq(status_of("/snapshot?format=torch&pool=bfc%232"), 200);
  cr_expect_eq(status_of("/snapshot?format=torch&pool=bfc%233"), 400);
}

/* Allocation events ("b") of the trace of target. */
static int trace_allocations(const char *target) {
  cJSON *root = http_get_json(gpupool_agent_port(), target);
  char why[512];
  cr_assert_eq(trace_check_format(root, why, sizeof why), 0, "%s: %s", target, why);
  int n = trace_count(root, "b", NULL);
  cJSON_Delete(root);
  return n;
}

Test(agent_pool_label, trace_selects_the_pools_of_the_label) {
  cr_expect_eq(trace_allocations("/trace?pool=bfc%232"), 2);
  cr_expect_eq(trace_allocations("/trace?pool=bfc"), 1 + 3, "one per device");
  cr_expect_eq(trace_allocations("/trace?pool=bfc&device=0"), 1);
  cr_expect_eq(status_of("/trace?pool=bfc%233"), 400);
}

/* The advice of each pool= value: its pools' devices (a bit set) and the
 * events of the entry on device 0 (-1: none). */
static void advice_of(const char *target, unsigned *devices, double *events_on_0) {
  cJSON *root = http_get_json(gpupool_agent_port(), target);
  *devices = 0;
  *events_on_0 = -1;
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "pools")) {
    int device = (int)cJSON_GetObjectItem(p, "device")->valuedouble;
    *devices |= 1u << device;
    const cJSON *input = cJSON_GetObjectItem(p, "input");
    cr_assert_not_null(input, "%s: no input (error: %s)", target,
                       cJSON_GetStringValue(cJSON_GetObjectItem(p, "error")));
    if (device == 0)
      *events_on_0 = cJSON_GetObjectItem(input, "events")->valuedouble;
  }
  cJSON_Delete(root);
}

Test(agent_pool_label, advice_selects_the_pools_of_the_label) {
  unsigned devices;
  double first_events, second_events;
  advice_of("/advice?pool=bfc", &devices, &first_events);
  cr_expect_eq(devices, 3u, "one pool per device");
  advice_of("/advice?pool=bfc%232", &devices, &second_events);
  cr_expect_eq(devices, 1u, "the second bfc only");
  cr_expect_gt(second_events, first_events, "its own history: one allocation more");
  cr_expect_eq(status_of("/advice?pool=bfc%233"), 400);
}

/* /advice names each pool by its label, and so do its gauges in /metrics:
 * two pools of one name on a device are two series, not one label set
 * twice. */
Test(agent_pool_label, advice_gauges_carry_the_label) {
  cJSON *root = http_get_json(gpupool_agent_port(), "/advice");
  const cJSON *p;
  int seconds = 0;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "pools")) {
    const char *pool = cJSON_GetStringValue(cJSON_GetObjectItem(p, "pool"));
    int device = (int)cJSON_GetObjectItem(p, "device")->valuedouble;
    cr_assert_not_null(pool);
    seconds += strcmp(pool, "bfc#2") == 0 && device == 0;
  }
  cr_expect_eq(seconds, 1, "/advice names the second bfc bfc#2");
  cJSON_Delete(root);
  http_response r = get("/metrics");
  cr_assert_eq(r.status, 200);
  const char *first_on_0[] = {"device=\"0\"", "pool=\"bfc\"", NULL};
  const char *second_on_0[] = {"device=\"0\"", "pool=\"bfc#2\"", NULL};
  cr_expect_eq(metrics_count(r.body, "gpupool_advice_input_events", first_on_0), 1);
  cr_expect_eq(metrics_count(r.body, "gpupool_advice_input_events", second_on_0), 1);
  http_response_free(&r);
}

Test(agent_pool_label, ui_state_gives_each_pool_its_label) {
  cJSON *root = http_get_json(gpupool_agent_port(), "/ui/state.json");
  int seen = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "pools")) {
    unsigned id = (unsigned)cJSON_GetObjectItem(p, "id")->valuedouble;
    const char *label = cJSON_GetStringValue(cJSON_GetObjectItem(p, "label"));
    cr_assert_not_null(label, "pool %u has no label", id);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(p, "name")), "bfc");
    cr_expect_str_eq(label, id == pool_id(second) ? "bfc#2" : "bfc", "pool %u", id);
    seen++;
  }
  cr_expect_eq(seen, 3);
  cJSON_Delete(root);
}

/* A pool named like another's label ("bfc#2" beside two pools named "bfc",
 * created before or after them) gets a label of its own: every series of a
 * device stays distinct (a duplicate makes Prometheus refuse the whole
 * scrape), and each label still selects one pool. */
static void expect_labels(const char *const names[3], const char *const labels[3]) {
  gpupool_agent_options o = {
      .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .trace_events = 1024, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool *p[3];
  for (int i = 0; i < 3; i++)
    p[i] = host_pool(names[i], 0, i + 1);
  http_response r = get("/metrics");
  cr_assert_eq(r.status, 200);
  for (int i = 0; i < 3; i++) {
    char pool[64];
    snprintf(pool, sizeof pool, "pool=\"%s\"", labels[i]);
    const char *want[] = {pool, "state=\"allocated\"", NULL};
    double v;
    cr_assert_eq(metrics_count(r.body, "gpupool_blocks", want), 1, "%s: %s", names[i], pool);
    cr_assert_eq(metrics_value(r.body, "gpupool_blocks", want, &v), 0);
    cr_expect_eq(v, i + 1, "%s: %s", names[i], pool);
    char target[96];
    snprintf(target, sizeof target, "/snapshot?pool=%s", labels[i]);
    for (char *h = strchr(target, '#'); h; h = strchr(h, '#')) { /* %23 */
      memmove(h + 3, h + 1, strlen(h + 1) + 1);
      memcpy(h, "%23", 3);
    }
    cr_expect_eq(snapshot_ids(target), bit(p[i]), "%s", target);
  }
  http_response_free(&r);
  gpupool_agent_stop();
  for (int i = 0; i < 3; i++)
    gpupool_destroy(p[i]);
}

Test(agent_pool_label_names, a_name_like_a_label_after_the_pools_of_that_name) {
  expect_labels((const char *const[]){"bfc", "bfc", "bfc#2"},
                (const char *const[]){"bfc", "bfc#2", "bfc#2#2"});
}

Test(agent_pool_label_names, a_name_like_a_label_before_the_pools_of_that_name) {
  expect_labels((const char *const[]){"bfc#2", "bfc", "bfc"},
                (const char *const[]){"bfc#2", "bfc", "bfc#3"});
}
