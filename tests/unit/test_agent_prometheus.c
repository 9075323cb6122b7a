/* A real Prometheus server on loopback finds the agent through its file_sd
 * target file, scrapes it (OpenMetrics and gzip, as Prometheus asks) and
 * answers PromQL queries with the pool's own numbers. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpupool/agent.h"
#include "helpers/http_client.h"

#define READY_TIMEOUT_S 90

static char dir[64];
static pid_t prometheus = -1;
static int prom_port;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  getsockname(fd, (struct sockaddr *)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

static void stop_prometheus(void) {
  gpupool_agent_stop();
  if (prometheus > 0) {
    kill(prometheus, SIGTERM);
    int status;
    for (int i = 0; i < 100 && waitpid(prometheus, &status, WNOHANG) == 0; i++)
      usleep(100 * 1000);
    if (waitpid(prometheus, &status, WNOHANG) == 0) {
      kill(prometheus, SIGKILL);
      waitpid(prometheus, &status, 0);
    }
    prometheus = -1;
  }
  if (dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s 2>/dev/null", dir);
    for (int i = 0; i < 10 && access(dir, F_OK) == 0; i++) /* files may linger a moment */
      if (system(cmd) != 0)
        usleep(100 * 1000);
    if (access(dir, F_OK) == 0)
      cr_log_warn("could not remove %s", dir);
  }
}

static void start_prometheus(const char *sd_dir) {
  char config[128], tsdb[128], log[128], listen[64];
  snprintf(config, sizeof config, "%s/prometheus.yml", dir);
  snprintf(tsdb, sizeof tsdb, "%s/data", dir);
  snprintf(log, sizeof log, "%s/prometheus.log", dir);
  FILE *f = fopen(config, "w");
  cr_assert_not_null(f);
  fprintf(f,
          "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
          "scrape_configs:\n  - job_name: gpupool\n    file_sd_configs:\n"
          "      - files: ['%s/*.json']\n        refresh_interval: 1s\n",
          sd_dir);
  fclose(f);
  prom_port = free_port();
  snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", prom_port);
  char config_flag[160], tsdb_flag[160];
  snprintf(config_flag, sizeof config_flag, "--config.file=%s", config);
  snprintf(tsdb_flag, sizeof tsdb_flag, "--storage.tsdb.path=%s", tsdb);
  fflush(NULL);
  prometheus = fork();
  cr_assert_geq(prometheus, 0);
  if (prometheus == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a test killed half-way */
    FILE *out = freopen(log, "w", stdout);
    if (out)
      dup2(fileno(out), 2);
    execlp("prometheus", "prometheus", config_flag, tsdb_flag, listen, "--log.level=warn",
           (char *)NULL);
    _exit(127);
  }
}

static void url_encode(const char *s, char *out, size_t outlen) {
  size_t o = 0;
  for (; *s && o + 4 < outlen; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '.' || c == '-')
      out[o++] = (char)c;
    else
      o += (size_t)snprintf(out + o, outlen - o, "%%%02X", c);
  }
  out[o] = '\0';
}

/* The value of an instant query with one result; NAN when it has none yet. */
static double query(const char *promql) {
  char enc[1024], target[1200];
  url_encode(promql, enc, sizeof enc);
  snprintf(target, sizeof target, "/api/v1/query?query=%s", enc);
  http_response r;
  if (http_request("127.0.0.1", prom_port, "GET", target, NULL, &r) != 0)
    return NAN;
  double v = NAN;
  cJSON *doc = r.status == 200 ? cJSON_Parse(r.body) : NULL;
  cJSON *result = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "data"), "result");
  if (cJSON_GetArraySize(result) == 1) {
    cJSON *value = cJSON_GetObjectItem(cJSON_GetArrayItem(result, 0), "value");
    const char *s = cJSON_GetStringValue(cJSON_GetArrayItem(value, 1));
    if (s)
      v = strtod(s, NULL);
  }
  cJSON_Delete(doc);
  http_response_free(&r);
  return v;
}

/* Waits until the query has a value (Prometheus up, target found, scraped). */
static double wait_for(const char *promql) {
  double deadline = now_s() + READY_TIMEOUT_S;
  while (now_s() < deadline) {
    int status;
    if (waitpid(prometheus, &status, WNOHANG) == prometheus) {
      prometheus = -1;
      cr_assert_fail("prometheus exited (status %d); see its log in %s", status, dir);
    }
    double v = query(promql);
    if (!isnan(v))
      return v;
    usleep(250 * 1000);
  }
  cr_assert_fail("no answer to %s within %d s", promql, READY_TIMEOUT_S);
  return NAN;
}

Test(agent_prometheus, prometheus_scrapes_and_answers_promql, .fini = stop_prometheus,
     .timeout = 180) {
  if (system("command -v prometheus >/dev/null 2>&1") != 0)
    cr_skip("prometheus is not installed (Debian: apt-get install prometheus)");
  unsetenv("GPUPOOL_CONF");
  snprintf(dir, sizeof dir, "/tmp/gpupool-prom-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  char sd_dir[96];
  snprintf(sd_dir, sizeof sd_dir, "%s/sd", dir);
  cr_assert_eq(mkdir(sd_dir, 0700), 0);

  gpupool_options po = {.name = "prom",
                        .device = 3,
                        .backend = GPUPOOL_BACKEND_HOST,
                        .host_capacity = 256 << 20,
                        .ignore_env = 1};
  gpupool *pool;
  cr_assert_eq(gpupool_create(&po, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
  void *p[20];
  for (int i = 0; i < 20; i++)
    cr_assert_eq(gpupool_malloc(pool, &p[i], (size_t)(i + 1) * 50000, NULL), GPUPOOL_OK);
  for (int i = 0; i < 20; i += 2)
    gpupool_free(pool, p[i]);
  gpupool_stats s;
  gpupool_get_stats(pool, &s);

  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .sd_dir = sd_dir,
                             .hostname = "promhost",
                             .labels = "team=ml",
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  start_prometheus(sd_dir);

  double allocated = wait_for("gpupool_allocated_bytes{pool=\"prom\",device=\"3\",team=\"ml\"}");
  cr_assert_eq(allocated, (double)s.allocated_bytes[0].current);
  cr_assert_eq(wait_for("up{job=\"gpupool\"}"), 1);
  const struct {
    const char *promql;
    double want;
  } expect[] = {
      {"gpupool_reserved_bytes{pool=\"prom\",hostname=\"promhost\"}",
       (double)s.reserved_bytes[0].current},
      {"gpupool_requested_bytes{pool=\"prom\"}", (double)s.requested_bytes[0].current},
      {"gpupool_allocations_total{pool=\"prom\",source=\"device\"}", (double)s.num_device_sourced},
      {"gpupool_allocations_total{pool=\"prom\",source=\"cache\"}", (double)s.num_cache_hits},
      {"gpupool_frees_total{pool=\"prom\"}", (double)s.num_frees},
      {"gpupool_allocation_size_bytes_count{pool=\"prom\"}", 20},
      {"gpupool_allocation_size_bytes_bucket{pool=\"prom\",le=\"+Inf\"}", 20},
      {"gpupool_blocks{pool=\"prom\",state=\"allocated\"}", 10},
      {"1 - gpupool_allocated_bytes{pool=\"prom\"} / gpupool_reserved_bytes{pool=\"prom\"}",
       1.0 - (double)s.allocated_bytes[0].current / (double)s.reserved_bytes[0].current},
      {"1 - gpupool_largest_free_block_bytes{pool=\"prom\"} / (gpupool_reserved_bytes{pool="
       "\"prom\"} - gpupool_allocated_bytes{pool=\"prom\"})",
       1.0 - (double)s.largest_free_block /
                 (double)(s.reserved_bytes[0].current - s.allocated_bytes[0].current)},
  };
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    double got = wait_for(expect[i].promql);
    cr_assert(fabs(got - expect[i].want) <= 1e-9 * fmax(1.0, fabs(expect[i].want)),
              "%s = %.17g, the pool says %.17g", expect[i].promql, got, expect[i].want);
  }
  /* The target came from the sd file: its __meta_ labels were usable. */
  char by_instance[128];
  snprintf(by_instance, sizeof by_instance, "up{instance=\"127.0.0.1:%d\"}", gpupool_agent_port());
  cr_assert_eq(wait_for(by_instance), 1);

  gpupool_agent_stop();
  gpupool_destroy(pool);
}
