/* The `hostname` agent option reaches every endpoint that reports a host:
 * the /metrics label, the metadata of /trace, /snapshot and /ui/state.json,
 * and the index page; the agent keeps it once (agent/metrics.h). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/agent.h"
#include "helpers/http_client.h"

#define HOST "hn-option-7"

static gpupool *pool;

static void setup(void) {
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_CONF");
  gpupool_options o = {
      .name = "hn", .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64 << 20, .ignore_env = 1};
  cr_assert_eq(gpupool_create(&o, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
  void *x;
  cr_assert_eq(gpupool_malloc(pool, &x, 4096, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(pool, x), GPUPOOL_OK);
}

static void teardown(void) {
  gpupool_agent_stop();
  gpupool_destroy(pool);
}

TestSuite(agent_hostname, .init = setup, .fini = teardown);

static int start(const char *hostname) {
  gpupool_agent_options o = {
      .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .hostname = hostname, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  int port = gpupool_agent_port();
  cr_assert_gt(port, 0);
  return port;
}

static char *body_of(int port, const char *target) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, "GET", target, NULL, &r), 0, "GET %s", target);
  cr_assert_eq(r.status, 200, "GET %s: %d %s", target, r.status, r.body);
  char *body = r.body;
  r.body = NULL;
  http_response_free(&r);
  return body;
}

/* The string at path (keys, NULL-terminated) of the JSON document target. */
static void expect_json_host(int port, const char *target, const char *const *path,
                             const char *want) {
  char *text = body_of(port, target);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root, "%s: not JSON", target);
  const cJSON *v = root;
  for (const char *const *k = path; *k; k++)
    v = cJSON_GetObjectItemCaseSensitive(v, *k);
  cr_assert(cJSON_IsString(v), "%s: no %s", target, path[0]);
  cr_expect_str_eq(v->valuestring, want, "%s", target);
  cJSON_Delete(root);
  free(text);
}

static void expect_everywhere(int port, const char *want) {
  static const char *const trace_path[] = {"otherData", "hostname", NULL};
  static const char *const top_path[] = {"hostname", NULL};
  expect_json_host(port, "/trace", trace_path, want);
  expect_json_host(port, "/snapshot", top_path, want);
  expect_json_host(port, "/ui/state.json", top_path, want);
  char label[128];
  snprintf(label, sizeof label, "hostname=\"%s\"", want);
  char *metrics = body_of(port, "/metrics");
  cr_expect(strstr(metrics, label), "/metrics has no %s", label);
  free(metrics);
  char *index = body_of(port, "/");
  cr_expect(strstr(index, want), "the index page does not show %s", want);
  free(index);
}

Test(agent_hostname, the_option_reaches_every_endpoint) {
  expect_everywhere(start(HOST), HOST);
}

Test(agent_hostname, a_restart_with_another_name_reports_the_new_one) {
  start(HOST);
  gpupool_agent_stop();
  expect_everywhere(start("hn-second"), "hn-second");
}
