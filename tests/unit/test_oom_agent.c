/* The agent's OOM flight recorder: /oom and /oom/<id> (JSON and PyTorch
 * pickle), bad ids, oom_dir, the metric, /snapshot?format=torch and
 * gpupool_snapshot_write_torch; every pickle checked by Python's pickle
 * (tests/unit/torch_snapshot_check.py); and bounded memory under 10^5 OOMs. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dirent.h>
#include <signal.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/oom_store.h"
#include "core/clock.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/http_client.h"
#include "pool/oom_report.h"
#include "pool/event_clock.h"
#include "pool/pool_capture.h"
#include "pool/pool_view.h"

#define MiB ((size_t)1 << 20)

static char dir[64];

static void setup(void) {
  unsetenv("GPUPOOL_CONF");
  unsetenv("LOCAL_RANK");
  snprintf(dir, sizeof dir, "/tmp/gpupool-oom-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  gpupool_agent_stop();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(oom_agent, .init = setup, .fini = teardown);

static int start(const char *conf) {
  setenv("GPUPOOL_AGENT_CONF", conf, 1);
  gpupool_agent_options o = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  return gpupool_agent_port();
}

static gpupool *host_pool(const char *name, const char *tunables) {
  gpupool_options o = {.name = name,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = 64 * MiB,
                       .tunables = tunables,
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

static http_response get(int port, const char *target) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, "GET", target, NULL, &r), 0, "GET %s", target);
  return r;
}

static void expect_status(int port, const char *target, int status) {
  http_response r = get(port, target);
  cr_expect_eq(r.status, status, "GET %s: %d, expected %d (%s)", target, r.status, status, r.body);
  cr_expect_neq(r.body_len, 0, "GET %s: a one-line reason", target);
  http_response_free(&r);
}

static void save(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(data, 1, len, f), len);
  cr_assert_eq(fclose(f), 0);
}

/* Runs the Python checker on a pickle (and /snapshot JSON to compare);
 * its exit status. */
static int run_checker(const char *path, const char *json) {
  const char *src = getenv("GPUPOOL_SOURCE_DIR");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "python3 %s/tests/unit/torch_snapshot_check.py %s%s%s", src ? src : ".",
           path, json ? " --json " : "", json ? json : "");
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void check_pickle(const char *path, const char *json) {
  cr_expect_eq(run_checker(path, json), 0, "%s: the checker failed", path);
}

/* Writes pool's pickle with gpupool_snapshot_write_torch into the test's
 * directory and runs the checker on it. */
static void write_and_check_pickle(const char *pool) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s.pickle", dir, pool);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(gpupool_snapshot_write_torch(f, pool), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(fclose(f), 0);
  check_pickle(path, NULL);
}

/* Every value of key in the JSON text is written as digits (no exponent, no
 * fraction: a time since 1970 in ns or us, exact) and is at least least. */
static void expect_integer_times(const char *json, const char *key, double least) {
  int seen = 0;
  for (const char *p = json; (p = strstr(p, key)) != NULL; seen++) {
    p += strlen(key);
    size_t n = strspn(p, "0123456789");
    cr_expect(n > 0 && (p[n] == ',' || p[n] == '}'), "%s %.30s is not an integer", key, p);
    cr_expect_geq(strtod(p, NULL), least, "%s %.30s", key, p);
  }
  cr_expect_gt(seen, 0, "no %s in %s", key, json);
}

/* Some history: splits, deferred frees on another stream, an expandable
 * pool whose pages move. The requests are not multiples of 512 bytes, so
 * the trace's sizes (requested bytes, as PyTorch's) differ from the
 * blocks'. */
static void workload(gpupool *p, gpupool *x) {
  gpupool_host_stream *s = gpupool_host_stream_create();
  void *a[12];
  for (int i = 0; i < 12; i++)
    cr_assert_eq(gpupool_malloc(p, &a[i], (size_t)(i + 1) * 300 * 1024 + 100, NULL), GPUPOOL_OK);
  for (int i = 0; i < 12; i += 3) {
    cr_assert_eq(gpupool_record_stream(p, a[i], s), GPUPOOL_OK);
    gpupool_host_stream_enqueue(s);
    cr_assert_eq(gpupool_free(p, a[i]), GPUPOOL_OK);
  }
  gpupool_host_stream_complete(s);
  void *b;
  cr_assert_eq(gpupool_malloc(p, &b, 5 * MiB, NULL), GPUPOOL_OK); /* completes the deferred */
  cr_assert_eq(gpupool_free(p, a[1]), GPUPOOL_OK);
  void *e[4];
  for (int i = 0; i < 4; i++)
    cr_assert_eq(gpupool_malloc(x, &e[i], 6 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(x, e[1]), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(x, e[2]), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(x, &e[1], 10 * MiB, NULL), GPUPOOL_OK);
  gpupool_host_stream_destroy(s);
}

/* The name (without extension) of this process's report id in oom_dir:
 * gpupool-oom-<YYYYMMDDTHHMMSS.uuuuuuZ>-<pid>-<id>.json. 1 when found. */
static int report_name(unsigned long long id, char *out, size_t n) {
  char tail[64];
  snprintf(tail, sizeof tail, "Z-%ld-%llu.json", (long)getpid(), id);
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  int found = 0;
  for (struct dirent *e; !found && (e = readdir(d));) {
    size_t len = strlen(e->d_name), k = strlen(tail);
    unsigned y, mo, day, h, mi, sec, us;
    char z;
    if (len > k && !strcmp(e->d_name + len - k, tail) &&
        sscanf(e->d_name, "gpupool-oom-%4u%2u%2uT%2u%2u%2u.%6u%c", &y, &mo, &day, &h, &mi, &sec,
               &us, &z) == 8 &&
        z == 'Z' && y >= 2024 && len - k == strlen("gpupool-oom-20240101T000000.000000")) {
      snprintf(out, n, "%.*s", (int)(len - 5), e->d_name);
      found = 1;
    }
  }
  closedir(d);
  return found;
}

Test(oom_agent, serves_reports_and_torch_snapshots) {
  char conf[160];
  snprintf(conf, sizeof conf, "oom_reports:4,oom_dir:%s", dir);
  int port = start(conf);
  gpupool *p = host_pool("web", NULL), *x = host_pool("pages", "expandable_segments:True");
  workload(p, x);
  void *big;
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_expect_eq(strncmp(gpupool_last_error(), "CUDA out of memory.", 19), 0);

  http_response r = get(port, "/oom");
  cr_assert_eq(r.status, 200, "%s", r.body);
  expect_integer_times(r.body, "\"time_unix_ns\":", 1e18);
  cJSON *list = cJSON_Parse(r.body);
  cr_assert(cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1, "%s", r.body);
  int id = cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "id")->valueint;
  char url[64], want[64];
  snprintf(want, sizeof want, "/oom/%d", id);
  cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "url")->valuestring, want);
  cr_expect(strstr(gpupool_last_error(), want), "the message names the report");
  cJSON_Delete(list);
  http_response_free(&r);

  r = get(port, want);
  cr_assert_eq(r.status, 200);
  expect_integer_times(r.body, "\"time_unix_ns\":", 1e18);
  expect_integer_times(r.body, "\"time_us\":", 1e15);
  cJSON *rep = cJSON_Parse(r.body);
  cr_assert_not_null(rep);
  cr_expect_eq(strncmp(cJSON_GetObjectItem(rep, "message")->valuestring, "CUDA out of memory.", 19),
               0);
  cJSON *ex = cJSON_GetObjectItem(rep, "explanation");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(ex, "larger_than_device")));
  cr_expect_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(ex, "remedies"), "empty_cache"));
  cr_expect_gt(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "segments")), 0);
  cr_expect_gt(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "events")), 0);
  cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "request"), "size")->valuedouble,
               100.0 * MiB);
  cJSON_Delete(rep);
  http_response_free(&r);

  char path[160], json[160], hdr[256];
  snprintf(url, sizeof url, "/oom/%d?format=torch", id);
  r = get(port, url);
  cr_assert_eq(r.status, 200);
  cr_expect_str_eq(http_header(&r, "Content-Type", hdr, sizeof hdr), "application/octet-stream");
  cr_expect(strstr(http_header(&r, "Content-Disposition", hdr, sizeof hdr), "filename="));
  snprintf(path, sizeof path, "%s/report.pickle", dir);
  save(path, r.body, r.body_len);
  check_pickle(path, NULL);
  /* The checker can fail: protocol 5, and a block cut short. */
  char bad[160];
  snprintf(bad, sizeof bad, "%s/bad.pickle", dir);
  r.body[1] = 5;
  save(bad, r.body, r.body_len);
  cr_expect_eq(run_checker(bad, NULL), 1, "a protocol 5 pickle passed");
  r.body[1] = 4;
  static const char key[] = "\x8c\x04size"; /* SHORT_BINUNICODE 'size', then its int */
  char *at = memmem(r.body, r.body_len, key, sizeof key - 1);
  cr_assert_not_null(at);
  at[sizeof key - 1 + 1] ^= 0x40; /* the size's low byte (a BININT or LONG1 follows) */
  save(bad, r.body, r.body_len);
  cr_expect_eq(run_checker(bad, NULL), 1, "a block that does not tile its segment passed");
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "python3 -c \"import pickle,sys; pickle.dump({'segments': [], 'device_traces': "
           "[[{'action': 'alloc', 'addr': 4096, 'size': 512, 'stream': 0, 'time_us': 1, "
           "'frames': []}]]}, open(sys.argv[1], 'wb'), protocol=4)\" %s",
           bad);
  cr_assert_eq(system(cmd), 0);
  cr_expect_eq(run_checker(bad, NULL), 1, "an allocation outside every segment passed");
  http_response_free(&r);

  /* The live snapshot, as a pickle and as JSON: the same totals. */
  r = get(port, "/snapshot?format=torch");
  cr_assert_eq(r.status, 200);
  snprintf(path, sizeof path, "%s/live.pickle", dir);
  save(path, r.body, r.body_len);
  http_response_free(&r);
  r = get(port, "/snapshot?format=json");
  cr_assert_eq(r.status, 200);
  expect_integer_times(r.body, "\"alloc_time_us\":", 1e15);
  snprintf(json, sizeof json, "%s/live.json", dir);
  save(json, r.body, r.body_len);
  http_response_free(&r);
  check_pickle(path, json);

  snprintf(path, sizeof path, "%s/written.pickle", dir);
  FILE *f = fopen(path, "wb");
  cr_assert_eq(gpupool_snapshot_write_torch(f, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  fclose(f);
  check_pickle(path, NULL);

  /* oom_dir has the report as JSON and as a pickle:
   * gpupool-oom-<UTC time>-<pid>-<id>.json and .pickle. */
  char name[80];
  cr_assert(report_name(id, name, sizeof name), "no report %d in %s", id, dir);
  snprintf(path, sizeof path, "%s/%s.json", dir, name);
  cr_expect_eq(access(path, R_OK), 0, "%s", path);
  snprintf(path, sizeof path, "%s/%s.pickle", dir, name);
  cr_expect_eq(access(path, R_OK), 0, "%s", path);
  check_pickle(path, NULL);

  r = get(port, "/metrics");
  cr_expect(strstr(r.body, "\ngpupool_oom_reports_total{") != NULL);
  cr_expect(strstr(r.body, "\ngpupool_oom_reports_kept{") != NULL);
  http_response_free(&r);

  gpupool_destroy(x);
  gpupool_destroy(p);
}

Test(oom_agent, bad_ids_and_parameters) {
  int port = start("oom_reports:2");
  gpupool *p = host_pool("web", NULL);
  void *big;
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  expect_status(port, "/oom/abc", 400);
  expect_status(port, "/oom/0", 400);
  expect_status(port, "/oom/", 400);
  expect_status(port, "/oom/1x", 400);
  expect_status(port, "/oom/-1", 400);
  expect_status(port, "/oom/99999999999999999999", 400); /* past 2^64 - 1 */
  expect_status(port, "/oom/18446744073709551616", 400);
  expect_status(port, "/oom/18446744073709551615", 404); /* an id, none kept */
  expect_status(port, "/oom/99999", 404);
  expect_status(port, "/oom/1?format=xml", 400);
  expect_status(port, "/oom/1?format=json&format=torch", 400);
  expect_status(port, "/oom/1?x=1", 400);
  expect_status(port, "/oom?format=torch", 400);
  expect_status(port, "/snapshot?format=xml", 400);
  expect_status(port, "/snapshot?format=torch&pool=nope", 400);
  /* Two more OOMs: the first report is no longer kept. */
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  http_response r = get(port, "/oom");
  cJSON *list = cJSON_Parse(r.body);
  cr_assert_eq(cJSON_GetArraySize(list), 2);
  int oldest = cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "id")->valueint;
  cJSON_Delete(list);
  http_response_free(&r);
  char url[32];
  snprintf(url, sizeof url, "/oom/%d", oldest - 1);
  expect_status(port, url, 404);
  snprintf(url, sizeof url, "/oom/%d", oldest);
  r = get(port, url);
  cr_expect_eq(r.status, 200);
  http_response_free(&r);
  gpupool_destroy(p);
}

/* A report's URL is /oom/<id> with the id as /oom writes it: decimal
 * digits without a leading zero. /oom/01 served report 1 (a second URL for
 * it, which a cache or a link check takes for another document); it is a
 * bad id (400), as "0", "+1" and " 1" are, with or without ?format. */
Test(oom_agent, ids_are_read_in_their_canonical_form_only) {
  int port = start("oom_reports:2");
  gpupool *p = host_pool("web", NULL);
  void *big;
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  http_response r = get(port, "/oom");
  cJSON *list = cJSON_Parse(r.body);
  cr_assert(cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1, "%s", r.body);
  int id = cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "id")->valueint;
  cJSON_Delete(list);
  http_response_free(&r);
  char url[64];
  snprintf(url, sizeof url, "/oom/%d", id);
  r = get(port, url);
  cr_assert_eq(r.status, 200, "%s: %d", url, r.status);
  http_response_free(&r);
  const char *forms[] = {"/oom/0%d",  "/oom/00%d",   "/oom/000000000000000000000%d",
                         "/oom/+%d",  "/oom/%%20%d", "/oom/%d%%20",
                         "/oom/%d.0", "/oom/0x%x",   "/oom/0%d?format=torch",
                         "/oom/-0%d", "/oom/%%2B%d", "/oom/%d%%09"};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    snprintf(url, sizeof url, forms[i], id);
    r = get(port, url);
    cr_expect_eq(r.status, 400, "%s: %d, expected 400 (%.100s)", url, r.status, r.body);
    cr_expect(r.status != 400 || strstr(r.body, "bad OOM report id"), "%s: %s", url, r.body);
    http_response_free(&r);
    http_response h;
    cr_assert_eq(http_request("127.0.0.1", port, "HEAD", url, NULL, &h), 0, "HEAD %s", url);
    cr_expect_eq(h.status, 400, "HEAD %s: %d", url, h.status);
    http_response_free(&h);
  }
  expect_status(port, "/oom/00", 400);
  expect_status(port, "/oom/018446744073709551615", 400);
  gpupool_destroy(p);
}

Test(oom_agent, snapshot_write_torch_refuses_bad_input) {
  cr_expect_eq(gpupool_snapshot_write_torch(NULL, NULL), GPUPOOL_ERR_INVALID);
  FILE *f = tmpfile();
  cr_expect_eq(gpupool_snapshot_write_torch(f, "no such pool"), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "no such pool"), "%s", gpupool_last_error());
  cr_expect_eq(ftell(f), 0, "nothing written");
  fclose(f);
}

/* A full disk: the pickle stays in f's buffer until the flush, which fails;
 * the status and the message say so. */
Test(oom_agent, snapshot_write_torch_to_a_full_disk_fails) {
  gpupool *p = host_pool("full", NULL);
  FILE *f = fopen("/dev/full", "w");
  cr_assert_not_null(f);
  cr_expect_eq(gpupool_snapshot_write_torch(f, "full"), GPUPOOL_ERR_BACKEND);
  cr_expect(strstr(gpupool_last_error(), "gpupool_snapshot_write_torch: write failed: ") &&
                strstr(gpupool_last_error(), strerror(ENOSPC)),
            "%s", gpupool_last_error());
  fclose(f);
  gpupool_destroy(p);
}

Test(oom_agent, bad_configuration_is_refused) {
  setenv("GPUPOOL_AGENT_CONF", "oom_reports:5000", 1);
  gpupool_agent_options o = {.listen = "off", .cupti = GPUPOOL_CUPTI_OFF};
  cr_expect_eq(gpupool_agent_start(&o), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "oom_reports"), "%s", gpupool_last_error());
  setenv("GPUPOOL_AGENT_CONF", "oom_dir:/nonexistent/gpupool", 1);
  cr_expect_eq(gpupool_agent_start(&o), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "oom_dir"), "%s", gpupool_last_error());
  cr_expect(strstr(gpupool_last_error(), strerror(ENOENT)), "the reason: %s", gpupool_last_error());
}

/* An oom_dir that names a file is refused at start, even an executable one
 * (access(2)'s W_OK | X_OK alone passes it: every report would then fail). */
Test(oom_agent, oom_dir_that_is_a_file_is_refused) {
  char file[128], conf[160];
  snprintf(file, sizeof file, "%s/not-a-dir", dir);
  save(file, "#!/bin/sh\n", 10);
  cr_assert_eq(chmod(file, 0700), 0);
  snprintf(conf, sizeof conf, "oom_dir:%s", file);
  setenv("GPUPOOL_AGENT_CONF", conf, 1);
  gpupool_agent_options o = {.listen = "off", .cupti = GPUPOOL_CUPTI_OFF};
  cr_expect_eq(gpupool_agent_start(&o), GPUPOOL_ERR_INVALID);
  char want[200];
  snprintf(want, sizeof want, "gpupool agent: oom_dir '%s' is not a writable directory: %s", file,
           strerror(ENOTDIR));
  cr_expect_str_eq(gpupool_last_error(), want);
  gpupool_agent_stop(); /* if it started */
}

/* The files in path whose names end with suffix. */
static int count_files(const char *path, const char *suffix) {
  DIR *d = opendir(path);
  cr_assert_not_null(d, "%s", path);
  int n = 0;
  size_t k = strlen(suffix);
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    n += len > k && !strcmp(e->d_name + len - k, suffix);
  }
  closedir(d);
  return n;
}

/* A relative oom_dir is the directory it named when the agent started:
 * a program that chdir()s while the agent runs still gets its reports there
 * (they were written against the new working directory, or not at all). */
Test(oom_agent, relative_oom_dir_holds_across_a_chdir) {
  char cwd[PATH_MAX], away[] = "/tmp/gpupool-oom-away-XXXXXX", path[160];
  cr_assert_not_null(getcwd(cwd, sizeof cwd));
  cr_assert_not_null(mkdtemp(away));
  cr_assert_eq(chdir(dir), 0);
  cr_assert_eq(mkdir("reports", 0700), 0);
  start("oom_dir:reports");
  cr_assert_eq(chdir(away), 0);
  gpupool *p = host_pool("moved", NULL);
  void *big;
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_eq(c.write_errors, 0);
  snprintf(path, sizeof path, "%s/reports", dir);
  cr_expect_eq(count_files(path, ".json"), 1, "the report's JSON in %s", path);
  cr_expect_eq(count_files(path, ".pickle"), 1, "the report's pickle in %s", path);
  cr_expect_eq(rmdir(away), 0, "nothing was written to the new working directory");
  cr_assert_eq(chdir(cwd), 0);
  gpupool_destroy(p);
}

/* oom_dir on a full disk (no file may grow past 8 bytes: EFBIG): the report
 * is counted as not written, no file is left, and stderr says why, once. */
Test(oom_agent, oom_dir_on_a_full_disk_counts_and_says_why) {
  char conf[160];
  snprintf(conf, sizeof conf, "oom_dir:%s", dir);
  start(conf);
  gpupool *p = host_pool("full", NULL);
  cr_redirect_stderr();
  struct rlimit old, tiny = {.rlim_cur = 8};
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  tiny.rlim_max = old.rlim_max;
  signal(SIGXFSZ, SIG_IGN); /* else the write past the limit kills the test */
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &tiny), 0);
  void *big;
  for (int i = 0; i < 2; i++)
    cr_expect_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_eq(c.write_errors, 2);
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  struct dirent *e;
  while ((e = readdir(d)))
    cr_expect(e->d_name[0] == '.', "%s was left in oom_dir", e->d_name);
  closedir(d);
  fflush(stderr);
  char text[1024] = "";
  size_t n = fread(text, 1, sizeof text - 1, cr_get_redirected_stderr());
  text[n] = '\0';
  const char *line = strstr(text, "cannot write OOM report");
  cr_expect(line && strstr(text, strerror(EFBIG)), "%s", text);
  cr_expect(line && !strstr(line + 1, "cannot write OOM report"), "more than one line: %s", text);
  gpupool_destroy(p);
}

static void put_text(const char *name, const char *text) {
  char path[sizeof dir + 160];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  save(path, text, strlen(text));
}

static int text_is(const char *name, const char *text) {
  char path[sizeof dir + 160], got[256] = "";
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(got, 1, sizeof got - 1, f);
  got[n] = '\0';
  fclose(f);
  return !strcmp(got, text);
}

/* The reports of an earlier run of a program with the same pid (PID 1 in a
 * container, ids from 1 again) had the names gpupool-oom-<pid>-<id>, which
 * a new report renamed its files over; and a link planted at a temporary
 * name (a shared oom_dir) had the report written through it into its
 * target. A report replaces no file of oom_dir and writes through no link:
 * each has a name of its own (with the time), put in place without
 * replacing, and its temporary files are new files. Here at the names the
 * next reports had. Both files of each report are there. */
Test(oom_agent, reports_replace_no_file_and_follow_no_link) {
  char conf[160], name[128], path[256], victim[128];
  snprintf(conf, sizeof conf, "oom_dir:%s", dir);
  start(conf);
  gpupool *p = host_pool("restarted", NULL);
  void *big;
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  http_response r = get(gpupool_agent_port(), "/oom");
  cJSON *list = cJSON_Parse(r.body);
  cr_assert(cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1, "%s", r.body);
  unsigned long long id =
      (unsigned long long)cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "id")->valuedouble;
  cJSON_Delete(list);
  http_response_free(&r);
  long pid = (long)getpid();
  /* report id + 1's names: an earlier run's pair */
  snprintf(name, sizeof name, "gpupool-oom-%ld-%llu.json", pid, id + 1);
  put_text(name, "an earlier run's JSON");
  snprintf(name, sizeof name, "gpupool-oom-%ld-%llu.pickle", pid, id + 1);
  put_text(name, "an earlier run's pickle");
  /* report id + 2's temporary name: a link to a file of someone else's */
  snprintf(victim, sizeof victim, "%s/victim", dir);
  put_text("victim", "precious");
  snprintf(path, sizeof path, "%s/gpupool-oom-%ld-%llu.json.tmp", dir, pid, id + 2);
  cr_assert_eq(symlink(victim, path), 0);
  for (int i = 0; i < 2; i++)
    cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_eq(c.total, 3);
  cr_expect_eq(c.write_errors, 0);
  snprintf(name, sizeof name, "gpupool-oom-%ld-%llu.json", pid, id + 1);
  cr_expect(text_is(name, "an earlier run's JSON"), "%s was replaced", name);
  snprintf(name, sizeof name, "gpupool-oom-%ld-%llu.pickle", pid, id + 1);
  cr_expect(text_is(name, "an earlier run's pickle"), "%s was replaced", name);
  cr_expect(text_is("victim", "precious"), "the report was written through the link");
  for (unsigned long long k = id; k <= id + 2; k++) {
    cr_expect(report_name(k, name, sizeof name), "report %llu's JSON", k);
    snprintf(path, sizeof path, "%s/%s.pickle", dir, name);
    cr_expect_eq(access(path, R_OK), 0, "report %llu's pickle", k);
  }
  cr_expect_eq(count_files(dir, ".json"), 4, "three reports and the earlier run's");
  cr_expect_eq(count_files(dir, ".pickle"), 4);
  gpupool_destroy(p);
}

/* An OOM retry loop does not fill the disk: oom_dir keeps the last 64
 * reports of an agent (OOM_STORE_DEFAULT_DIR_MAX); 300 OOMs left 600
 * files. */
Test(oom_agent, oom_dir_keeps_the_last_reports_of_a_retry_loop, .timeout = 300) {
  char conf[160];
  snprintf(conf, sizeof conf, "oom_reports:2,oom_dir:%s", dir);
  start(conf);
  gpupool *p = host_pool("loop", NULL);
  void *big;
  for (int i = 0; i < 70; i++)
    cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_eq(c.total, 70);
  cr_expect_eq(c.write_errors, 0);
  cr_expect_eq(count_files(dir, ".json"), 64);
  cr_expect_eq(count_files(dir, ".pickle"), 64);
  /* the newest are kept: the report the last message names */
  const char *at = strstr(gpupool_last_error(), "Report: /oom/");
  cr_assert_not_null(at, "%s", gpupool_last_error());
  char name[128];
  cr_expect(report_name(strtoull(at + 13, NULL, 10), name, sizeof name));
  gpupool_destroy(p);
}

/* 10^5 OOMs: the agent keeps the last 8 reports and no more memory. */
Test(oom_agent, memory_stays_bounded_under_many_ooms, .timeout = 300) {
  setenv("GPUPOOL_AGENT_CONF", "oom_reports:8", 1);
  gpupool_agent_options o = {.listen = "off", .cupti = GPUPOOL_CUPTI_OFF};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool *p = host_pool("many", NULL);
  void *live[20], *big;
  for (int i = 0; i < 20; i++)
    cr_assert_eq(gpupool_malloc(p, &live[i], (size_t)(i + 1) * 64 * 1024, NULL), GPUPOOL_OK);
  oom_store_counts c;
  uint64_t bytes_at_1000 = 0;
  for (int i = 1; i <= 100000; i++) {
    cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
    if (i == 1000) {
      oom_store_get_counts(&c);
      bytes_at_1000 = c.kept_bytes;
    }
  }
  oom_store_get_counts(&c);
  cr_expect_eq(c.total, 100000);
  cr_expect_eq(c.kept, 8);
  cr_expect_eq(c.kept_bytes, bytes_at_1000, "the kept reports hold the same memory");
  cr_expect_leq(c.kept_bytes, 8 * (sizeof(pool_oom_report) + 64 * 1024), "%llu bytes",
                (unsigned long long)c.kept_bytes);
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
  cr_expect_eq(s.num_ooms, 100000);
  for (int i = 0; i < 20; i++)
    cr_assert_eq(gpupool_free(p, live[i]), GPUPOOL_OK);
  gpupool_destroy(p);
}

/* A tick of the coarse clock some of whose events were overwritten is left
 * out whole: its kept events could need the lost ones (another pool's
 * segment free of an address this one took within the tick). */
Test(oom_agent, capture_leaves_out_a_tick_with_lost_events) {
  pool_events_enable(16); /* a ring keeps 15 events */
  gpupool *p = host_pool("ticks", NULL);
  clock_stamp_init();
  event_clock_publish(clock_stamp()); /* ticked: every event gets this stamp */
  for (int i = 0; i < 20; i++) {      /* sizes that alternate: a record a pair, no repeats */
    void *a;
    cr_assert_eq(gpupool_malloc(p, &a, i % 2 ? 8192 : 4096, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  }
  pool_capture c;
  cr_assert_eq(pool_capture_take(p, 0, SIZE_MAX, SIZE_MAX, 0, &c), 0);
  cr_expect_eq(c.nevents, 0, "the tick lost events: none of it is kept");
  cr_expect_gt(c.events_since_ns, 0);
  pool_capture_free(&c);
  usleep(1000);
  event_clock_publish(clock_stamp()); /* the next tick */
  for (int i = 0; i < 5; i++) {
    void *a;
    cr_assert_eq(gpupool_malloc(p, &a, i % 2 ? 8192 : 4096, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  }
  cr_assert_eq(pool_capture_take(p, 0, SIZE_MAX, SIZE_MAX, 0, &c), 0);
  cr_expect_eq(c.nevents, 10, "the new tick, whole; the old one's 5 left out");
  for (size_t i = 0; i < c.nevents; i++)
    cr_expect_geq(c.events[i].ts_ns, c.events_since_ns);
  pool_capture_free(&c);
  /* At most 4 newest events: the tick they share is cut, so none. */
  cr_assert_eq(pool_capture_take(p, 0, SIZE_MAX, 4, 0, &c), 0);
  cr_expect_eq(c.nevents, 0);
  pool_capture_free(&c);
  event_clock_publish(0);
  gpupool_destroy(p);
}

/* Streams whose rings reach back differently far: a copy keeps only the
 * events from the time every stream's are all there (events_since_ns), so
 * an old event of a quiet stream does not meet the busy stream's missing
 * ones; and the pickles built from it pass the checker. */
Test(oom_agent, capture_keeps_the_window_every_stream_has) {
  start("trace_events:16");
  gpupool *p = host_pool("streams", NULL);
  gpupool_host_stream *quiet = gpupool_host_stream_create();
  void *a;
  cr_assert_eq(gpupool_malloc(p, &a, 4 * MiB, quiet), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK); /* two events on the quiet stream */
  usleep(2000);
  for (int i = 0; i < 100; i++) { /* 200 on the default stream: its ring keeps 15 */
    cr_assert_eq(gpupool_malloc(p, &a, (size_t)(i % 7 + 1) * MiB, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  }
  pool_capture c;
  cr_assert_eq(pool_capture_take(p, 0, SIZE_MAX, SIZE_MAX, 0, &c), 0);
  cr_expect_gt(c.events_since_ns, 0);
  cr_expect_gt(c.nevents, 0);
  cr_expect_leq(c.nevents, 15);
  for (size_t i = 0; i < c.nevents; i++) {
    cr_expect_geq(c.events[i].ts_ns, c.events_since_ns);
    cr_expect_neq(c.events[i].stream, (uint64_t)(uintptr_t)quiet, "the quiet stream's old event");
  }
  pool_capture_free(&c);
  write_and_check_pickle("streams");
  gpupool_host_stream_destroy(quiet);
  gpupool_destroy(p);
}

/* An expandable pool releases an empty address range and reserves a new one,
 * usually at the same address (the host backend's mmap hands it back, as
 * the driver may): the trace has the first range's segment_free and the
 * second's segment_alloc, so replaying it backwards from the segments works
 * (without the alloc, the free found the segment there already). */
Test(oom_agent, expandable_range_released_and_reserved_again) {
  start("trace_events:1024");
  gpupool *p = host_pool("again", "expandable_segments:True");
  void *a;
  cr_assert_eq(gpupool_malloc(p, &a, 10 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_empty_cache(p), 10 * MiB, "the range's pages");
  void *b;
  cr_assert_eq(gpupool_malloc(p, &b, 10 * MiB, NULL), GPUPOOL_OK);
  /* Usually at a's address (mmap hands it back), but another thread's
   * mapping can take it first: the events and the pickle hold either way. */
  pool_capture c;
  cr_assert_eq(pool_capture_take(p, 0, SIZE_MAX, SIZE_MAX, 0, &c), 0);
  int allocs = 0, frees = 0;
  for (size_t i = 0; i < c.nevents; i++)
    if (!(c.events[i].flags & EVF_PAGES) && c.events[i].size >= 64 * MiB) {
      allocs += c.events[i].type == EV_SEGMENT_ALLOC;
      frees += c.events[i].type == EV_SEGMENT_FREE;
    }
  cr_expect_eq(allocs, 2, "each range's reservation is a segment alloc");
  cr_expect_eq(frees, 1, "the first range's release is a segment free");
  pool_capture_free(&c);
  write_and_check_pickle("again");
  cr_assert_eq(gpupool_free(p, b), GPUPOOL_OK);
  gpupool_destroy(p);
}

/* An expandable pool's segments in the pickle are its runs of mapped pages,
 * as PyTorch's snapshot() reports them: a 3 MiB block maps two 2 MiB pages
 * of its range, so the segment is those 4 MiB (the block, and the free
 * block's first MiB over the second page), not the range's address space;
 * the range's reservation and release are no trace entries, its pages'
 * maps and unmaps are, the release's last unmap included. */
Test(oom_agent, expandable_segments_are_their_mapped_runs) {
  start("trace_events:1024");
  gpupool *p = host_pool("runs", "expandable_segments:True");
  void *a;
  cr_assert_eq(gpupool_malloc(p, &a, 3 * MiB, NULL), GPUPOOL_OK);
  write_and_check_pickle("runs");
  char script[1024], path[160];
  snprintf(path, sizeof path, "%s/runs.pickle", dir);
  snprintf(script, sizeof script,
           "python3 -c \"import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); "
           "s=d['segments']; assert len(s)==1 and s[0]['is_expandable'], s; "
           "assert s[0]['total_size']==%zu, s[0]['total_size']; "
           "assert [(b['size'],b['state']) for b in s[0]['blocks']]==[(%zu,'active_allocated'),"
           "(%zu,'inactive')], s[0]['blocks']; "
           "t=[e['action'] for e in d['device_traces'][0]]; "
           "assert t==['segment_map','alloc'], t\" %s",
           4 * MiB, 3 * MiB, 1 * MiB, path);
  cr_expect_eq(system(script), 0, "%s", script);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_empty_cache(p), 4 * MiB, "the range's two pages");
  write_and_check_pickle("runs");
  snprintf(script, sizeof script,
           "python3 -c \"import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); "
           "assert d['segments']==[], d['segments']; "
           "t=[(e['action'],e['size']) for e in d['device_traces'][0]]; "
           "assert t==[('segment_map',%zu),('alloc',%zu),('free_requested',%zu),"
           "('free_completed',%zu),('segment_unmap',%zu)], t\" %s",
           4 * MiB, 3 * MiB, 3 * MiB, 3 * MiB, 4 * MiB, path);
  cr_expect_eq(system(script), 0, "%s", script);
  gpupool_destroy(p);
}

/* A block freed while another stream still uses it is active_pending_free:
 * in the pickle it keeps its requested bytes, and its segment's
 * requested_size counts them, as PyTorch's do, so undoing its allocation
 * entry finds them (it found 0 before). */
Test(oom_agent, pending_block_keeps_its_requested_bytes) {
  start("trace_events:1024");
  gpupool *p = host_pool("pending", NULL);
  gpupool_host_stream *s = gpupool_host_stream_create();
  void *a;
  cr_assert_eq(gpupool_malloc(p, &a, 3 * MiB + 100, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_record_stream(p, a, s), GPUPOOL_OK);
  gpupool_host_stream_enqueue(s);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  gpupool_stats st;
  cr_assert_eq(gpupool_get_stats(p, &st), GPUPOOL_OK);
  cr_assert_eq(st.pending_free_blocks, 1);
  write_and_check_pickle("pending");
  gpupool_host_stream_complete(s);
  gpupool_host_stream_destroy(s);
  gpupool_destroy(p);
}

/* Rings merged by time: on equal stamps (one tick of the coarse clock)
 * block events go first, releases before takings, and segment events after
 * them in the order of their numbers. An address one pool released and
 * another took within the tick replays in that order even where the first
 * pool's ring holds block events of the tick before its segment free. */
Test(oom_agent, merged_rings_order_a_tie_by_kind_and_segment_number) {
  pool_event free_seg = {.ts_ns = 5, .type = EV_SEGMENT_FREE, .seq = 7};
  pool_event alloc_seg = {.ts_ns = 5, .type = EV_SEGMENT_ALLOC, .seq = 8};
  pool_event alloc_seg_before = {.ts_ns = 5, .type = EV_SEGMENT_ALLOC, .seq = 6};
  pool_event free_block = {.ts_ns = 5, .type = EV_FREE};
  pool_event alloc_block = {.ts_ns = 5, .type = EV_ALLOC};
  pool_event earlier = {.ts_ns = 4, .type = EV_SEGMENT_ALLOC, .seq = 9};
  cr_expect(pool_capture_goes_first(&free_seg, &alloc_seg), "by number");
  cr_expect(!pool_capture_goes_first(&alloc_seg, &free_seg));
  cr_expect(pool_capture_goes_first(&alloc_seg_before, &free_seg),
            "by number, not by kind: the alloc came first");
  cr_expect(pool_capture_goes_first(&free_block, &alloc_block));
  cr_expect(pool_capture_goes_first(&free_block, &free_seg));
  /* A's ring: alloc_block, then (its free and) its segment free; B's ring:
   * alloc_seg at the address A frees. B's head must wait. */
  cr_expect(pool_capture_goes_first(&alloc_block, &alloc_seg));
  cr_expect(!pool_capture_goes_first(&alloc_seg, &alloc_block));
  cr_expect(pool_capture_goes_first(&earlier, &free_block), "time first");
  cr_expect(!pool_capture_goes_first(&free_seg, &free_seg), "a tie of equals keeps ring order");
}

/* Segment events are numbered across pools in the order they happen. */
Test(oom_agent, segment_events_are_numbered_across_pools) {
  pool_events_enable(1024);
  gpupool *a = host_pool("numbered_a", NULL), *b = host_pool("numbered_b", NULL);
  gpupool *pools[] = {a, b, a, b};
  for (int i = 0; i < 4; i++) { /* each a segment alloc, then a segment free */
    void *x = NULL;
    cr_assert_eq(gpupool_malloc(pools[i], &x, 8 << 20, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(pools[i], x), GPUPOOL_OK);
    gpupool_empty_cache(pools[i]);
  }
  uint64_t seqs[2][8];
  size_t n[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    event_ring *rings[4];
    size_t nr = pool_event_rings_at(k ? b : a, rings, NULL, 4);
    cr_assert_eq(nr, 1);
    pool_event ev[64];
    uint64_t cursor = 0, skipped = 0;
    size_t got = event_ring_read(rings[0], &cursor, ev, 64, &skipped);
    for (size_t i = 0; i < got; i++)
      if (ev[i].type == EV_SEGMENT_ALLOC || ev[i].type == EV_SEGMENT_FREE)
        seqs[k][n[k]++] = ev[i].seq;
    event_ring_unref(rings[0]);
  }
  cr_assert_eq(n[0], 4);
  cr_assert_eq(n[1], 4);
  /* a's alloc, free; b's alloc, free; a's; b's: consecutive numbers. */
  for (int i = 0; i < 4; i++) {
    int k = i % 2;
    uint64_t base = seqs[0][0] + 4 * (uint64_t)(i / 2) + 2 * (uint64_t)k;
    cr_expect_eq(seqs[k][2 * (i / 2)], base, "pool %c, round %d: alloc", 'a' + k, i / 2);
    cr_expect_eq(seqs[k][2 * (i / 2) + 1], base + 1, "pool %c, round %d: free", 'a' + k, i / 2);
  }
  gpupool_destroy(a);
  gpupool_destroy(b);
}

/* Idle pages moved from two places (two streams' small segments) under one
 * new block: each run of pages is its own unmap event, at its own address
 * (one event from the first page with every page's bytes covered addresses
 * outside every segment), and the pickle replays. */
Test(oom_agent, pages_moved_from_two_places_are_two_unmaps) {
  start("trace_events:1024");
  gpupool *p = host_pool("moves", "expandable_segments:True,expandable_slack_percent:0");
  gpupool_host_stream *s1 = gpupool_host_stream_create(), *s2 = gpupool_host_stream_create();
  void *a, *b, *c;
  cr_assert_eq(gpupool_malloc(p, &a, 1000, s1), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &b, 1000, s2), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, b), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &c, 4 * MiB, NULL), GPUPOOL_OK);
  gpupool_stats st;
  cr_assert_eq(gpupool_get_stats(p, &st), GPUPOOL_OK);
  cr_assert_eq(st.num_pages_moved, 2, "both idle pages move under c");
  pool_capture cap;
  cr_assert_eq(pool_capture_take(p, 0, SIZE_MAX, SIZE_MAX, 0, &cap), 0);
  int unmaps = 0;
  for (size_t i = 0; i < cap.nevents; i++)
    if (cap.events[i].type == EV_SEGMENT_FREE && (cap.events[i].flags & EVF_PAGES)) {
      unmaps++;
      cr_expect_eq(cap.events[i].size, 2 * MiB, "one page each");
    }
  cr_expect_eq(unmaps, 2);
  pool_capture_free(&cap);
  write_and_check_pickle("moves");
  cr_assert_eq(gpupool_free(p, c), GPUPOOL_OK);
  gpupool_host_stream_destroy(s1);
  gpupool_host_stream_destroy(s2);
  gpupool_destroy(p);
}

/* The message links /oom/<id> only where the agent serves that report:
 * with oom_reports:0 (counted, not kept) /oom/<id> is 404, and with
 * listen:off nothing serves it. */
Test(oom_agent, the_message_links_a_report_only_where_the_agent_serves_it) {
  int port = start("oom_reports:0");
  gpupool *p = host_pool("linked", NULL);
  void *big;
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_expect(strncmp(gpupool_last_error(), "CUDA out of memory.", 19) == 0);
  cr_expect_null(strstr(gpupool_last_error(), "/oom/"), "oom_reports:0: %s", gpupool_last_error());
  cr_expect_null(strstr(gpupool_last_error(), "/advice"), "%s", gpupool_last_error());
  http_response r = get(port, "/oom");
  cr_expect_str_eq(r.body, "[]");
  http_response_free(&r);
  gpupool_agent_stop();

  setenv("GPUPOOL_AGENT_CONF", "oom_reports:4", 1);
  gpupool_agent_options off = {.listen = "off", .cupti = GPUPOOL_CUPTI_OFF};
  cr_assert_eq(gpupool_agent_start(&off), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_expect_null(strstr(gpupool_last_error(), "/oom/"), "listen:off: %s", gpupool_last_error());
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_eq(c.kept, 1, "kept all the same");
  gpupool_agent_stop();

  port = start("oom_reports:4");
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  const char *at = strstr(gpupool_last_error(), " Report: /oom/");
  cr_assert_not_null(at, "%s", gpupool_last_error());
  char url[64];
  snprintf(url, sizeof url, "/oom/%llu", strtoull(at + 14, NULL, 10));
  r = get(port, url);
  cr_expect_eq(r.status, 200, "%s: %d", url, r.status);
  http_response_free(&r);
  gpupool_destroy(p);
}

/* Reports take their ids at the capture and reach the agent later, not
 * always in that order (threads that fail at once). /oom lists them by id,
 * oldest first, and a full store lets the lowest id go, not the one
 * delivered first. Here report a is captured first and delivered last. */
static gpupool *order_pool;
static sem_t order_captured, order_delivered;

static void capture_one(void) {
  pool_capture_hold(order_pool);
  pool_oom_capture(order_pool, NULL, 100 * MiB, 100 * MiB, 100 * MiB);
  pool_capture_let_go(order_pool);
}

static void *captured_first_delivered_last(void *arg) {
  (void)arg;
  capture_one();
  sem_post(&order_captured);
  sem_wait(&order_delivered);
  pool_oom_deliver();
  return NULL;
}

static int list_ids(int port, double *ids, int max) {
  http_response r = get(port, "/oom");
  cJSON *list = cJSON_Parse(r.body);
  cr_assert(cJSON_IsArray(list), "%s", r.body);
  int n = cJSON_GetArraySize(list);
  for (int i = 0; i < n && i < max; i++)
    ids[i] = cJSON_GetObjectItem(cJSON_GetArrayItem(list, i), "id")->valuedouble;
  cJSON_Delete(list);
  http_response_free(&r);
  return n;
}

Test(oom_agent, reports_are_kept_by_id_whatever_order_they_arrive_in) {
  int port = start("oom_reports:2");
  order_pool = host_pool("order", NULL);
  cr_assert_eq(sem_init(&order_captured, 0, 0), 0);
  cr_assert_eq(sem_init(&order_delivered, 0, 0), 0);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, captured_first_delivered_last, NULL), 0);
  sem_wait(&order_captured);
  capture_one(); /* a + 1, delivered first */
  pool_oom_deliver();
  sem_post(&order_delivered);
  pthread_join(t, NULL);
  double ids[4];
  cr_assert_eq(list_ids(port, ids, 4), 2);
  cr_expect_lt(ids[0], ids[1], "oldest first: %.0f, %.0f", ids[0], ids[1]);
  double a = ids[0] < ids[1] ? ids[0] : ids[1];
  capture_one(); /* a + 2: a goes */
  pool_oom_deliver();
  cr_assert_eq(list_ids(port, ids, 4), 2);
  cr_expect(ids[0] == a + 1 && ids[1] == a + 2, "kept %.0f, %.0f; expected %.0f, %.0f", ids[0],
            ids[1], a + 1, a + 2);
  char url[64];
  snprintf(url, sizeof url, "/oom/%.0f", a);
  expect_status(port, url, 404);
  sem_destroy(&order_captured);
  sem_destroy(&order_delivered);
  gpupool_destroy(order_pool);
}

/* An expandable pool's free block over unmapped pages says how many of its
 * bytes are unmapped (as /snapshot's blocks do), so that its blocks add up
 * to free_in_pool_bytes. */
Test(oom_agent, expandable_blocks_say_their_unmapped_bytes) {
  int port = start("oom_reports:2");
  gpupool *x = host_pool("unmapped", "expandable_segments:True");
  void *a, *big;
  cr_assert_eq(gpupool_malloc(x, &a, 3 * MiB, NULL), GPUPOOL_OK); /* two pages: 1 MiB free */
  cr_assert_eq(gpupool_malloc(x, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  double ids[1];
  cr_assert_eq(list_ids(port, ids, 1), 1);
  char url[64];
  snprintf(url, sizeof url, "/oom/%.0f", ids[0]);
  http_response r = get(port, url);
  cr_assert_eq(r.status, 200);
  cJSON *rep = cJSON_Parse(r.body);
  cr_assert_not_null(rep);
  double free_in_pool =
      cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "explanation"), "free_in_pool_bytes")
          ->valuedouble;
  cr_expect_eq(free_in_pool, 1.0 * MiB);
  double free_mapped = 0, unmapped = 0;
  cJSON *seg;
  cJSON_ArrayForEach(seg, cJSON_GetObjectItem(rep, "segments")) {
    cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItem(seg, "blocks")) {
      if (strcmp(cJSON_GetObjectItem(b, "state")->valuestring, "inactive"))
        continue;
      cJSON *u = cJSON_GetObjectItem(b, "unmapped");
      free_mapped += cJSON_GetObjectItem(b, "size")->valuedouble - (u ? u->valuedouble : 0);
      unmapped += u ? u->valuedouble : 0;
    }
  }
  cr_expect_gt(unmapped, 0, "no block says its unmapped bytes: %.300s", r.body);
  cr_expect_eq(free_mapped, free_in_pool, "free blocks less their unmapped bytes: %.0f",
               free_mapped);
  cJSON_Delete(rep);
  http_response_free(&r);
  cr_assert_eq(gpupool_free(x, a), GPUPOOL_OK);
  gpupool_destroy(x);
}
