/* The CUPTI degraded paths seen from outside: an agent started with
 * cupti:auto on a machine without a GPU serves /metrics with
 * gpupool_cupti_up 0 and the reason; cupti:force makes the start fail; the
 * injection library (inject/) starts the agent from InitializeInjection, once,
 * and never fails the program. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/agent.h"
#include "helpers/http_client.h"
#include "helpers/metrics_text.h"

static void setup(void) {
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_CUPTI_PATH");
  unsetenv("LOCAL_RANK");
}

static void teardown(void) {
  gpupool_agent_stop();
}

TestSuite(cupti_agent, .init = setup, .fini = teardown);

/* GET /metrics from port into a malloc'd string. */
static char *get_metrics(int port) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, "GET", "/metrics", NULL, &r), 0);
  cr_assert_eq(r.status, 200);
  char *body = strdup(r.body);
  http_response_free(&r);
  return body;
}

/* The reason label of gpupool_cupti_up, which must read 0; skips on a machine
 * where CUPTI records (a GPU is present). */
static const char *cupti_down_reason(const char *text) {
  static char reason[64];
  const char *line = strstr(text, "\ngpupool_cupti_up{");
  cr_assert_not_null(line, "no gpupool_cupti_up in /metrics");
  const char *r = strstr(line, "reason=\"");
  cr_assert_not_null(r, "gpupool_cupti_up has no reason label");
  r += strlen("reason=\"");
  size_t n = strcspn(r, "\"");
  cr_assert_lt(n, sizeof reason);
  memcpy(reason, r, n);
  reason[n] = '\0';
  double up = -1;
  const char *labels[] = {"reason=\"", NULL};
  cr_assert_eq(metrics_value(text, "gpupool_cupti_up", labels, &up), 0);
  if (up == 1)
    cr_skip("CUPTI records on this machine (a GPU is present)");
  cr_assert_eq(up, 0);
  return reason;
}

Test(cupti_agent, auto_without_gpu_serves_cupti_up_0) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_AUTO, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  char *text = get_metrics(gpupool_agent_port());
  const char *reason = cupti_down_reason(text);
  cr_assert(!strcmp(reason, "no_driver") || !strcmp(reason, "no_device") ||
                !strcmp(reason, "no_cupti"),
            "reason %s", reason);
  free(text);
}

Test(cupti_agent, missing_cupti_library_shows_no_cupti) {
  setenv("GPUPOOL_CUPTI_PATH", "/nonexistent/libcupti.so", 1);
  gpupool_agent_options o = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_AUTO, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  char *text = get_metrics(gpupool_agent_port());
  cr_assert_str_eq(cupti_down_reason(text), "no_cupti");
  free(text);
}

Test(cupti_agent, force_without_gpu_fails_the_start) {
  setenv("GPUPOOL_CUPTI_PATH", "/nonexistent/libcupti.so", 1);
  gpupool_agent_options o = {
      .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_FORCE, .ignore_env = 1};
  cr_assert_neq(gpupool_agent_start(&o), GPUPOOL_OK);
  cr_assert(strstr(gpupool_last_error(), "no_cupti"), "%s", gpupool_last_error());
}

/* ---- the injection library ---- */

typedef struct injected {
  int (*initialize)(void);
  int (*port)(void);
  void (*stop)(void);
} injected;

/* dlopens the built libgpupool_inject.so (a copy of the library of its own,
 * as the driver would load it); skips when the build directory is unknown. */
static injected open_inject(void) {
  const char *bin = getenv("GPUPOOL_BINARY_DIR");
  if (!bin)
    cr_skip("GPUPOOL_BINARY_DIR is not set (run through ctest)");
  char path[4096];
  snprintf(path, sizeof path, "%s/inject/libgpupool_inject.so", bin);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h, "%s", dlerror());
  injected in;
  *(void **)&in.initialize = dlsym(h, "InitializeInjection");
  *(void **)&in.port = dlsym(h, "gpupool_agent_port");
  *(void **)&in.stop = dlsym(h, "gpupool_agent_stop");
  cr_assert(in.initialize && in.port && in.stop, "missing exports");
  cr_assert_null(dlsym(h, "cupti_start"), "internals must stay private");
  cr_assert_null(dlsym(h, "cudaMalloc"), "cudart_static must not interpose");
  return in;
}

Test(cupti_agent, injection_starts_the_agent_once) {
  setenv("GPUPOOL_AGENT_CONF", "listen:127.0.0.1:0", 1);
  injected in = open_inject();
  cr_assert_eq(in.initialize(), 1);
  int port = in.port();
  cr_assert_gt(port, 0, "the injected agent is not serving");
  cr_assert_eq(in.initialize(), 1);
  cr_assert_eq(in.port(), port, "a second call starts nothing");
  char *text = get_metrics(port);
  const char *reason = cupti_down_reason(text);
  cr_assert(!strcmp(reason, "no_driver") || !strcmp(reason, "no_cupti"), "reason %s", reason);
  free(text);
  in.stop();
}

Test(cupti_agent, injection_with_a_bad_conf_never_fails_the_program) {
  setenv("GPUPOOL_AGENT_CONF", "listen:127.0.0.1:0,no_such_key:1", 1);
  injected in = open_inject();
  cr_assert_eq(in.initialize(), 1, "the driver must always be told success");
  cr_assert_eq(in.port(), 0, "no agent with a bad configuration");
}
