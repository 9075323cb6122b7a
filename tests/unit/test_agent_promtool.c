/* `promtool check metrics` (Prometheus' own linter) on a real scrape, with
 * pools whose names need escaping: any complaint fails the test. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpupool/agent.h"
#include "helpers/http_client.h"

static int have(const char *tool) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
  return system(cmd) == 0;
}

/* Runs promtool on text; returns its exit status, its output in out. */
static int promtool(const char *text, char *out, size_t outlen) {
  char path[] = "/tmp/gpupool-scrape-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  size_t len = strlen(text);
  cr_assert_eq(write(fd, text, len), (ssize_t)len);
  close(fd);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, outlen - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  unlink(path);
  return status;
}

Test(agent_promtool, a_scrape_passes_promtool_clean) {
  if (!have("promtool"))
    cr_skip("promtool is not installed (Debian: apt-get install prometheus)");
  unsetenv("GPUPOOL_CONF");
  /* Names are UTF-8 text without control characters (gpupool_create refuses
   * a newline); the label writer's escaping of \n is in test_prom_writer. */
  const char *names[] = {"plain", "quote\"back\\slash", "<a & b>", "ünïcødé ☃", "plain"};
  gpupool *pools[5];
  for (int i = 0; i < 5; i++) {
    gpupool_options o = {.name = names[i],
                         .device = i % 2,
                         .backend = GPUPOOL_BACKEND_HOST,
                         .host_capacity = 64 << 20,
                         .ignore_env = 1};
    cr_assert_eq(gpupool_create(&o, &pools[i]), GPUPOOL_OK, "%s", gpupool_last_error());
    void *p;
    cr_assert_eq(gpupool_malloc(pools[i], &p, (size_t)(i + 1) * 100000, NULL), GPUPOOL_OK);
    gpupool_free(pools[i], p);
    cr_assert_eq(gpupool_malloc(pools[i], &p, 300, NULL), GPUPOOL_OK);
  }
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .labels = "team=a \"b\" \\c;env=dev",
                             .trace_events = 64,
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  http_response r;
  for (int round = 0; round < 2; round++) { /* the second scrape has agent health filled */
    cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics", NULL, &r), 0);
    cr_assert_eq(r.status, 200);
    char out[8192];
    int status = promtool(r.body, out, sizeof out);
    cr_assert_eq(status, 0, "promtool failed (%d): %s", status, out);
    cr_assert_str_eq(out, "", "promtool complains: %s", out);
    http_response_free(&r);
  }
  gpupool_agent_stop();
  for (int i = 0; i < 5; i++)
    gpupool_destroy(pools[i]);
}
