/* /advice over the live process: the agent replays its pools' recorded
 * histories; the current configuration's predicted peak equals the pool's
 * own; the answer is cached with its age; bad parameters are a 400; the
 * gpupool_advice_* gauges appear in /metrics once it ran. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpupool/advisor.h"
#include "gpupool/agent.h"
#include "gpupool/gpupool.h"
#include "helpers/http_client.h"
#include "helpers/http_json.h"

#define MiB ((size_t)1 << 20)

static gpupool *pool;

static void setup(void) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_options po = {.name = "train",
                        .backend = GPUPOOL_BACKEND_HOST,
                        .tunables = "roundup_power2_divisions:2",
                        .ignore_env = 1};
  cr_assert_eq(gpupool_create(&po, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
  void *keep[64];
  for (int step = 0; step < 30; step++) {
    size_t seq = 10 + (size_t)(step * 37 % 90);
    for (int l = 0; l < 64; l++)
      cr_assert_eq(gpupool_malloc(pool, &keep[l], seq * (size_t)(20000 + 3000 * l), NULL),
                   GPUPOOL_OK);
    for (int l = 0; l < 64; l++)
      cr_assert_eq(gpupool_free(pool, keep[l]), GPUPOOL_OK);
  }
}

static void teardown(void) {
  gpupool_destroy(pool);
  gpupool_agent_stop();
}

TestSuite(advisor_agent, .init = setup, .fini = teardown);

static cJSON *pool_of(cJSON *doc, const char *name) {
  cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(doc, "pools")) {
    if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(p, "pool")), name))
      return p;
  }
  cr_assert_fail("no pool %s in /advice", name);
  return NULL;
}

Test(advisor_agent, live_advice) {
  cJSON *doc = http_get_json(gpupool_agent_port(), "/advice?max_age=0");
  cJSON *p = pool_of(doc, "train");
  cJSON *cur = cJSON_GetObjectItem(p, "current");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cur, "gpupool_conf")),
                   "roundup_power2_divisions:2");
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(pool, &s), GPUPOOL_OK);
  cr_expect_eq(cJSON_GetObjectItem(cur, "peak_reserved_bytes")->valuedouble,
               (double)s.reserved_bytes[GPUPOOL_STAT_ALL].peak,
               "the replay of the pool's own configuration reproduces its peak");
  cr_expect_eq(cJSON_GetObjectItem(cur, "device_allocs")->valuedouble, (double)s.num_device_alloc);
  cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(p, "input"), "events")->valuedouble,
               30 * 64 * 2);
  cr_expect_geq(cJSON_GetArraySize(cJSON_GetObjectItem(p, "candidates")), 50);
  cr_expect(
      cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(p, "recommended"), "gpupool_conf")));
  cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(doc, "age_s")));
  double computed = cJSON_GetObjectItem(doc, "computed_at")->valuedouble;
  cJSON_Delete(doc);
  /* within max_age: the cached answer (same computation time) */
  doc = http_get_json(gpupool_agent_port(), "/advice?max_age=3600");
  cr_expect_eq(cJSON_GetObjectItem(doc, "computed_at")->valuedouble, computed);
  cJSON_Delete(doc);

  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics", NULL, &r), 0);
  cr_expect(strstr(r.body, "gpupool_advice_recommended_peak_reserved_bytes{"), "%s", r.body);
  cr_expect(strstr(r.body, "gpupool_advice_age_seconds"), "no age gauge");
  cr_expect(!strstr(r.body, "pool=\"replay\""), "a replay's pool shows in /metrics");
  if (system("command -v promtool > /dev/null 2>&1") == 0) { /* the families lint clean */
    char path[] = "/tmp/gpupool_advisor_metricsXXXXXX", cmd[128], out[2048] = "";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, r.body, r.body_len), (ssize_t)r.body_len);
    close(fd);
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    unlink(path);
    cr_expect_eq(st, 0, "promtool: %s", out);
    cr_expect_str_eq(out, "", "promtool complains: %s", out);
  }
  http_response_free(&r);
  cr_assert_eq(
      http_request("127.0.0.1", gpupool_agent_port(), "GET", "/advice?format=table", NULL, &r), 0);
  cr_expect_eq(r.status, 200);
  cr_expect(strstr(r.body, "== pool train"), "%s", r.body);
  cr_expect(strstr(r.body, "GPUPOOL_CONF="), "%s", r.body);
  http_response_free(&r);
}

/* Before the first result, requests that find the computation running
 * wait for it and get its answer (a page loaded twice at once, two tabs):
 * every one 200, the same computed_at; none a 503. */
typedef struct advice_get {
  pthread_t thread;
  int status;
  double computed_at;
} advice_get;

static void *get_advice(void *arg) {
  advice_get *g = arg;
  http_response r;
  g->status = -1;
  if (http_request("127.0.0.1", gpupool_agent_port(), "GET", "/advice", NULL, &r) != 0)
    return NULL;
  g->status = r.status;
  cJSON *doc = r.status == 200 ? cJSON_Parse(r.body) : NULL;
  const cJSON *at = cJSON_GetObjectItem(doc, "computed_at");
  g->computed_at = cJSON_IsNumber(at) ? at->valuedouble : -1;
  cJSON_Delete(doc);
  http_response_free(&r);
  return NULL;
}

Test(advisor_agent, first_requests_at_once_share_the_first_answer) {
  advice_get g[4];
  for (int i = 0; i < 4; i++)
    cr_assert_eq(pthread_create(&g[i].thread, NULL, get_advice, &g[i]), 0);
  for (int i = 0; i < 4; i++)
    pthread_join(g[i].thread, NULL);
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(g[i].status, 200, "request %d: %d", i, g[i].status);
    cr_expect_eq(g[i].computed_at, g[0].computed_at, "request %d: another computation", i);
  }
}

/* A /trace document saved from the agent replays like the live pool. */
Test(advisor_agent, saved_trace_replays_exactly) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/trace", NULL, &r), 0);
  cr_assert_eq(r.status, 200);
  char path[] = "/tmp/gpupool_advisor_traceXXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_eq(fwrite(r.body, 1, r.body_len, f), r.body_len);
  fclose(f);
  http_response_free(&r);
  gpupool_history *h;
  gpupool_status st = gpupool_history_load(path, NULL, "train", &h);
  unlink(path);
  cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_str_eq(gpupool_history_get_info(h)->format, "trace");
  cr_expect_eq(gpupool_history_get_info(h)->events, 30 * 64 * 2);
  gpupool_replay_result res;
  cr_assert_eq(gpupool_replay(h, "roundup_power2_divisions:2", (uint64_t)8 << 30, &res),
               GPUPOOL_OK);
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(pool, &s), GPUPOOL_OK);
  cr_expect_eq(res.peak_reserved, (uint64_t)s.reserved_bytes[GPUPOOL_STAT_ALL].peak);
  cr_expect_eq(res.device_allocs, s.num_device_alloc);
  cr_expect_eq(res.device_frees, s.num_device_free);
  gpupool_history_free(h);
}

/* Without capacity_gib each pool's replays simulate its own device (here the
 * host backend's 256 MiB), not a fixed 80 GiB; capacity_gib sets one size. */
Test(advisor_agent, replays_on_the_pools_own_device) {
  gpupool *small;
  gpupool_options po = {.name = "small",
                        .backend = GPUPOOL_BACKEND_HOST,
                        .host_capacity = 256 * MiB,
                        .ignore_env = 1};
  cr_assert_eq(gpupool_create(&po, &small), GPUPOOL_OK, "%s", gpupool_last_error());
  for (int i = 0; i < 20; i++) {
    void *x;
    cr_assert_eq(gpupool_malloc(small, &x, (size_t)(i + 1) * MiB, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(small, x), GPUPOOL_OK);
  }
  cJSON *doc = http_get_json(gpupool_agent_port(), "/advice?pool=small");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(doc, "capacity_gib")), "each pool's own device");
  cr_expect_eq(cJSON_GetObjectItem(pool_of(doc, "small"), "capacity_bytes")->valuedouble,
               (double)(256 * MiB));
  cJSON_Delete(doc);
  doc = http_get_json(gpupool_agent_port(), "/advice?pool=small&capacity_gib=1");
  cr_expect_eq(cJSON_GetObjectItem(doc, "capacity_gib")->valuedouble, 1.0);
  cr_expect_eq(cJSON_GetObjectItem(pool_of(doc, "small"), "capacity_bytes")->valuedouble,
               (double)(1024 * MiB));
  cJSON_Delete(doc);
  gpupool_destroy(small);
}

/* A pool with a memory_fraction cap may use only the cap: its replays
 * simulate a device of that size (here a quarter of 256 MiB). */
Test(advisor_agent, a_capped_pool_replays_on_a_device_of_its_cap) {
  gpupool *capped;
  gpupool_options po = {.name = "capped",
                        .backend = GPUPOOL_BACKEND_HOST,
                        .host_capacity = 256 * MiB,
                        .tunables = "memory_fraction:0.25",
                        .ignore_env = 1};
  cr_assert_eq(gpupool_create(&po, &capped), GPUPOOL_OK, "%s", gpupool_last_error());
  for (int i = 0; i < 20; i++) {
    void *x;
    cr_assert_eq(gpupool_malloc(capped, &x, (size_t)(i + 1) * MiB, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(capped, x), GPUPOOL_OK);
  }
  cJSON *doc = http_get_json(gpupool_agent_port(), "/advice?pool=capped");
  cr_expect_eq(cJSON_GetObjectItem(pool_of(doc, "capped"), "capacity_bytes")->valuedouble,
               (double)(64 * MiB));
  cJSON_Delete(doc);
  gpupool_destroy(capped);
}

/* A what-if query (capacity_gib) is answered alone: the cached answer on
 * each pool's own device, which /ui and the gauges show, stays as it was. */
Test(advisor_agent, capacity_query_leaves_the_cache) {
  cJSON *doc = http_get_json(gpupool_agent_port(), "/advice?max_age=0");
  double computed_at = cJSON_GetObjectItem(doc, "computed_at")->valuedouble;
  cr_assert(cJSON_IsNull(cJSON_GetObjectItem(doc, "capacity_gib")));
  cJSON_Delete(doc);
  doc = http_get_json(gpupool_agent_port(), "/advice?capacity_gib=1000");
  cr_expect_eq(cJSON_GetObjectItem(doc, "capacity_gib")->valuedouble, 1000.0);
  cr_expect_eq(cJSON_GetObjectItem(pool_of(doc, "train"), "capacity_bytes")->valuedouble,
               1000.0 * (1 << 30));
  cJSON_Delete(doc);
  doc = http_get_json(gpupool_agent_port(), "/advice");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(doc, "capacity_gib")),
            "the what-if query replaced the cached answer");
  cr_expect_eq(cJSON_GetObjectItem(doc, "computed_at")->valuedouble, computed_at,
               "the cached answer was recomputed");
  cJSON_Delete(doc);
}

/* GET target, which must be a 400 of /advice's; the response, to free. */
static http_response get_bad_request(const char *target) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", target, NULL, &r), 0);
  cr_expect_eq(r.status, 400, "%s: %d", target, r.status);
  cr_expect(strstr(r.body, "/advice"), "%s", r.body);
  return r;
}

Test(advisor_agent, bad_parameters) {
  const char *bad[] = {
      "/advice?format=xml", "/advice?max_age=-1", "/advice?capacity_gib=abc", "/advice?nope=1",
      "/advice?pool", "/advice?pool=", "/advice?pool=train&pool=train",
      "/advice?format=json&format=json", "/advice?pool=nope", "/advice?pool=train%00x",
      "/advice?max_age=5%00", "/advice?device", "/advice?device=x", "/advice?device=-1",
      "/advice?device=4096", "/advice?device=0&device=0", "/advice?device=9",
      "/advice?pool=train&device=9",
      /* plain decimals only: what strtod alone would take */
      "/advice?capacity_gib=0x10", "/advice?capacity_gib=%201", "/advice?capacity_gib=1%20",
      "/advice?capacity_gib=1e3", "/advice?capacity_gib=inf", "/advice?capacity_gib=+1",
      "/advice?capacity_gib=.5", "/advice?capacity_gib=1.", "/advice?max_age=0x10",
      "/advice?max_age=nan", "/advice?max_age=-0", "/advice?capacity_gib=0.001",
      "/advice?capacity_gib=1048577"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    http_response r = get_bad_request(bad[i]);
    http_response_free(&r);
  }
}

/* The range in a refusal is written as the parameter takes numbers (plain
 * decimals: no exponent), so that a client can send its bounds back. */
Test(advisor_agent, ranges_are_written_as_plain_decimals) {
  http_response r = get_bad_request("/advice?max_age=1000000001");
  cr_expect(strstr(r.body, "is not a number from 0 to 1000000000\n"), "%s", r.body);
  http_response_free(&r);
  r = get_bad_request("/advice?capacity_gib=1048577");
  cr_expect(strstr(r.body, "is not a number from 0.01 to 1048576\n"), "%s", r.body);
  http_response_free(&r);
}

/* A value echoed in a 400 is shown with bytes other than printable ASCII
 * replaced: no terminal escape reaches the reader of the line. */
Test(advisor_agent, bad_values_are_echoed_printable) {
  const char *bad[] = {"/advice?format=%1b%5b2J%07x%ff", "/advice?capacity_gib=%1b%5b2J%ff",
                       "/advice?max_age=%c3%a91"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    http_response r = get_bad_request(bad[i]);
    for (const unsigned char *c = (const unsigned char *)r.body; *c; c++)
      cr_expect((*c >= 0x20 && *c < 0x7f) || *c == '\n', "%s: byte 0x%02x in %s", bad[i], *c,
                r.body);
    http_response_free(&r);
  }
}

/* Plain decimals with a fraction are taken. */
Test(advisor_agent, decimal_values_are_taken) {
  cJSON *doc = http_get_json(gpupool_agent_port(), "/advice?capacity_gib=1.5&max_age=0.5");
  cr_assert(doc);
  cr_expect_eq(cJSON_GetObjectItem(doc, "capacity_gib")->valuedouble, 1.5);
  cJSON_Delete(doc);
}

/* A request for one pool answers for it alone and leaves the shared answer
 * (every pool's: /advice, /ui, the gauges) as it was. */
Test(advisor_agent, one_pool_leaves_the_shared_answer) {
  gpupool *other;
  gpupool_options po = {.name = "other", .backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};
  cr_assert_eq(gpupool_create(&po, &other), GPUPOOL_OK, "%s", gpupool_last_error());
  void *p;
  cr_assert_eq(gpupool_malloc(other, &p, 3 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(other, p), GPUPOOL_OK);
  cJSON *all = http_get_json(gpupool_agent_port(), "/advice?max_age=0");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(all, "pools")), 2);
  double computed = cJSON_GetObjectItem(all, "computed_at")->valuedouble;
  cJSON_Delete(all);
  cJSON *one = http_get_json(gpupool_agent_port(), "/advice?pool=other");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(one, "pools")), 1);
  pool_of(one, "other");
  cJSON_Delete(one);
  all = http_get_json(gpupool_agent_port(), "/advice?max_age=3600");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(all, "pools")), 2);
  cr_expect_eq(cJSON_GetObjectItem(all, "computed_at")->valuedouble, computed);
  pool_of(all, "train");
  cJSON_Delete(all);
  gpupool_destroy(other);
}

/* ?device= answers for the pools on one device, alone or with ?pool= (a
 * label is per device); a device no live pool (of that label) is on is a
 * 400 that says so. */
Test(advisor_agent, device_selects_the_pools_on_it) {
  gpupool *z[2];
  for (int i = 0; i < 2; i++) {
    gpupool_options po = {
        .name = "z", .backend = GPUPOOL_BACKEND_HOST, .device = 5 + i, .ignore_env = 1};
    cr_assert_eq(gpupool_create(&po, &z[i]), GPUPOOL_OK, "%s", gpupool_last_error());
    void *p;
    cr_assert_eq(gpupool_malloc(z[i], &p, (size_t)(1 + i) * MiB, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(z[i], p), GPUPOOL_OK);
  }
  static const struct {
    const char *target;
    int device; /* of the one entry */
  } one[] = {{"/advice?pool=z&device=6", 6}, {"/advice?device=5", 5}, {"/advice?device=0", 0}};
  for (size_t i = 0; i < sizeof one / sizeof *one; i++) {
    cJSON *doc = http_get_json(gpupool_agent_port(), one[i].target);
    cJSON *pools = cJSON_GetObjectItem(doc, "pools");
    cr_assert_eq(cJSON_GetArraySize(pools), 1, "%s", one[i].target);
    cr_expect_eq(json_number(cJSON_GetArrayItem(pools, 0), "device"), one[i].device, "%s",
                 one[i].target);
    cJSON_Delete(doc);
  }
  cJSON *both = http_get_json(gpupool_agent_port(), "/advice?pool=z");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(both, "pools")), 2, "z on 5 and on 6");
  cJSON_Delete(both);
  static const struct {
    const char *target, *says;
  } bad[] = {{"/advice?device=7", "bad device '7': no live pool is on it"},
             {"/advice?pool=train&device=6", "bad pool 'train' on device 6: no live pool"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    http_response r;
    cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", bad[i].target, NULL, &r),
                 0);
    cr_expect_eq(r.status, 400, "%s: %d", bad[i].target, r.status);
    cr_expect(strstr(r.body, bad[i].says), "%s: %s", bad[i].target, r.body);
    http_response_free(&r);
  }
  for (int i = 0; i < 2; i++)
    gpupool_destroy(z[i]);
}

/* The gpupool_advice_* gauges follow their pool: a pool destroyed since the
 * computation has none, and a pool whose label changed (the first of two
 * pools named "z" went: the second, "z#2", is "z" now) has them under its
 * label now, the one its other series carry. */
Test(advisor_agent, advice_gauges_follow_their_pool) {
  gpupool *z[2];
  void *ptr[2];
  for (int i = 0; i < 2; i++) {
    gpupool_options po = {
        .name = "z", .backend = GPUPOOL_BACKEND_HOST, .device = 5, .ignore_env = 1};
    cr_assert_eq(gpupool_create(&po, &z[i]), GPUPOOL_OK, "%s", gpupool_last_error());
    cr_assert_eq(gpupool_malloc(z[i], &ptr[i], i ? 3 * MiB : 1000, NULL), GPUPOOL_OK);
  }
  cJSON_Delete(http_get_json(gpupool_agent_port(), "/advice?max_age=0"));
  cr_assert_eq(gpupool_free(z[0], ptr[0]), GPUPOOL_OK);
  gpupool_destroy(z[0]);
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics", NULL, &r), 0);
  cr_assert_eq(r.status, 200);
  cr_expect_null(strstr(r.body, "pool=\"z#2\""), "a label no pool has now");
  /* the series of the pool labelled z: the second pool's 3 MiB, a 20 MiB segment */
  static const char series[] = "gpupool_advice_current_peak_reserved_bytes{";
  int found = 0;
  for (const char *at = r.body; (at = strstr(at, series)); at += sizeof series - 1) {
    const char *end = strchr(at, '\n');
    cr_assert_not_null(end);
    size_t len = (size_t)(end - at);
    if (!memmem(at, len, "pool=\"z\"", 8))
      continue;
    found++;
    cr_expect_not_null(memmem(at, len, "device=\"5\"", 10), "%.*s", (int)len, at);
    cr_expect_not_null(memmem(at, len, "} 20971520", 10), "%.*s", (int)len, at);
    /* the labels of the pool's other series, UUID included */
    const char *brace = memchr(at, '{', len), *close = memchr(at, '}', len);
    cr_assert(brace && close);
    char other[512];
    snprintf(other, sizeof other, "\ngpupool_reserved_bytes%.*s} ", (int)(close - brace), brace);
    cr_expect_not_null(strstr(r.body, other), "no series %s", other + 1);
    cr_expect_not_null(memmem(at, len, "UUID=\"GPU-", 10), "%.*s", (int)len, at);
  }
  cr_expect_eq(found, 1, "one series for the pool now labelled z: %s", r.body);
  http_response_free(&r);
  cr_assert_eq(gpupool_free(z[1], ptr[1]), GPUPOOL_OK);
  gpupool_destroy(z[1]);
}

/* Every pool has its answer, however many a process has: 8 devices x 4
 * pools (and setup's) are 33 entries in /advice and 33 pools' gauges in
 * /metrics (a fixed table held 16, and the rest were left out unsaid). */
Test(advisor_agent, every_pool_of_eight_devices) {
  enum { DEVICES = 8, PER_DEVICE = 4 };
  static const char *const names[PER_DEVICE] = {"weights", "activations", "optimizer", "kv"};
  gpupool *p[DEVICES][PER_DEVICE];
  for (int d = 0; d < DEVICES; d++)
    for (int k = 0; k < PER_DEVICE; k++) {
      gpupool_options po = {
          .name = names[k], .backend = GPUPOOL_BACKEND_HOST, .device = d, .ignore_env = 1};
      cr_assert_eq(gpupool_create(&po, &p[d][k]), GPUPOOL_OK, "%s", gpupool_last_error());
      void *ptr;
      cr_assert_eq(gpupool_malloc(p[d][k], &ptr, (size_t)(1 + k) * MiB, NULL), GPUPOOL_OK);
      cr_assert_eq(gpupool_free(p[d][k], ptr), GPUPOOL_OK);
    }
  cJSON *doc = http_get_json(gpupool_agent_port(), "/advice?max_age=0");
  cJSON *pools = cJSON_GetObjectItem(doc, "pools");
  cr_assert_eq(cJSON_GetArraySize(pools), 1 + DEVICES * PER_DEVICE);
  int seen[DEVICES][PER_DEVICE] = {{0}};
  cJSON *e;
  cJSON_ArrayForEach(e, pools) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "pool"));
    int d = (int)json_number(e, "device");
    cr_expect_null(cJSON_GetObjectItem(e, "error"), "%s@%d: %s", name, d,
                   cJSON_GetStringValue(cJSON_GetObjectItem(e, "error")));
    for (int k = 0; k < PER_DEVICE; k++)
      if (!strcmp(name, names[k]) && d >= 0 && d < DEVICES)
        seen[d][k]++;
  }
  cJSON_Delete(doc);
  for (int d = 0; d < DEVICES; d++)
    for (int k = 0; k < PER_DEVICE; k++)
      cr_expect_eq(seen[d][k], 1, "%s on device %d: %d entries", names[k], d, seen[d][k]);
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics", NULL, &r), 0);
  int series = 0;
  static const char family[] = "\ngpupool_advice_current_peak_reserved_bytes{";
  for (const char *at = r.body; (at = strstr(at, family)); at += sizeof family - 1)
    series++;
  cr_expect_eq(series, 1 + DEVICES * PER_DEVICE, "%d pools' gauges", series);
  http_response_free(&r);
  for (int d = 0; d < DEVICES; d++)
    for (int k = 0; k < PER_DEVICE; k++)
      gpupool_destroy(p[d][k]);
}
