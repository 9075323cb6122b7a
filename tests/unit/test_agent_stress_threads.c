/* The agent under load (run under ThreadSanitizer in CI): scrapes from
 * several threads while others allocate, a thousand connections at once, and
 * clients that never finish their request. Every loop is bounded in count
 * and every socket operation in time. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/http_client.h"
#include "helpers/metrics_text.h"

#include <cjson/cJSON.h>

static void clean_env(void) {
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_CONF");
  unsetenv("LOCAL_RANK");
}

static void stop_agent(void) {
  gpupool_agent_stop();
}

/* Per test (not per suite): the ThreadSanitizer build's harness runs tests
 * in one process and knows no suites. */
#define STRESS_TEST(name)                                                                          \
  Test(agent_stress, name, .init = clean_env, .fini = stop_agent, .timeout = 120)

static gpupool *make_pool(const char *name, int device) {
  gpupool_options o = {.name = name,
                       .device = device,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = 512 << 20,
                       .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

static int start_agent(void) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .sample_interval_ms = 5,
                             .trace_events = 1024,
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  return gpupool_agent_port();
}

typedef struct alloc_job {
  gpupool *pool;
  gpupool_host_stream *stream;
  int failures;
} alloc_job;

#define ALLOC_ROUNDS 1500

static void *allocate(void *arg) {
  alloc_job *j = arg;
  void *live[16] = {0};
  for (int i = 0; i < ALLOC_ROUNDS; i++) {
    int slot = i % 16;
    if (live[slot] && gpupool_free(j->pool, live[slot]) != GPUPOOL_OK)
      j->failures++;
    size_t size = (size_t)(512 + (i * 7919) % (3 << 20));
    if (gpupool_malloc(j->pool, &live[slot], size, j->stream) != GPUPOOL_OK) {
      live[slot] = NULL;
      j->failures++;
    }
    if (i % 500 == 0)
      gpupool_empty_cache(j->pool); /* segment changes wake the sampler */
  }
  for (int s = 0; s < 16; s++)
    if (live[s])
      gpupool_free(j->pool, live[s]);
  return NULL;
}

/* What a scraper saw. Each request ends one of three ways: a complete 200
 * answer whose body is well-formed for its path (ok), no complete answer
 * (unanswered: only expected while the agent stops), or a complete answer
 * that is not right (bad, with the first reason kept). Counters read from
 * successive /metrics scrapes of one thread must never go down. */
typedef struct scrape_job {
  int port;
  int rounds;
  _Atomic int ok;
  int unanswered, bad;
  char why[256];
  double last[2][3]; /* pools s0, s1: allocations {cache, device}, frees */
} scrape_job;

/* Every line a comment (HELP or TYPE) or "name[{labels}] value". */
static int metrics_lines_ok(const char *text, char *why, size_t n) {
  for (const char *l = text; *l;) {
    const char *end = strchr(l, '\n');
    if (!end) {
      snprintf(why, n, "/metrics: the last line has no newline");
      return 0;
    }
    char line[1024];
    size_t len = (size_t)(end - l) < sizeof line - 1 ? (size_t)(end - l) : sizeof line - 1;
    memcpy(line, l, len);
    line[len] = '\0';
    l = end + 1;
    if (line[0] == '#') {
      if (strncmp(line, "# HELP ", 7) && strncmp(line, "# TYPE ", 7)) {
        snprintf(why, n, "/metrics: bad comment '%.80s'", line);
        return 0;
      }
      continue;
    }
    char *sp = strrchr(line, ' ');
    char *num_end;
    if (!sp || sp == line || !(line[0] == '_' || line[0] == ':' || (line[0] | 32) >= 'a') ||
        (strtod(sp + 1, &num_end), *num_end != '\0' || num_end == sp + 1)) {
      snprintf(why, n, "/metrics: bad sample line '%.80s'", line);
      return 0;
    }
  }
  return 1;
}

static int counters_never_go_down(scrape_job *j, const char *text) {
  static const char *const what[3][2] = {{"gpupool_allocations_total", "source=\"cache\""},
                                         {"gpupool_allocations_total", "source=\"device\""},
                                         {"gpupool_frees_total", NULL}};
  for (int p = 0; p < 2; p++) {
    char pool[16];
    snprintf(pool, sizeof pool, "pool=\"s%d\"", p);
    for (int k = 0; k < 3; k++) {
      const char *labels[] = {pool, what[k][1], NULL};
      double v;
      if (metrics_value(text, what[k][0], labels, &v) != 0)
        continue; /* not this test's pools */
      if (!(v >= j->last[p][k])) {
        snprintf(j->why, sizeof j->why, "%s{%s,%s} went from %g to %g", what[k][0], pool,
                 what[k][1] ? what[k][1] : "", j->last[p][k], v);
        return 0;
      }
      j->last[p][k] = v;
    }
  }
  return 1;
}

static int well_formed(scrape_job *j, const char *target, http_response *r) {
  if (r->status != 200) {
    snprintf(j->why, sizeof j->why, "%s: status %d", target, r->status);
    return 0;
  }
  char enc[32];
  char *body = r->body, *plain = NULL;
  size_t len = r->body_len;
  if (http_header(r, "Content-Encoding", enc, sizeof enc) && strcmp(enc, "gzip") == 0) {
    if (http_gunzip(r->body, r->body_len, &plain, &len) != 0) {
      snprintf(j->why, sizeof j->why, "%s: a gzip body that does not inflate", target);
      return 0;
    }
    body = plain;
  }
  int ok = 1;
  if (strcmp(target, "/metrics") == 0) {
    ok = metrics_lines_ok(body, j->why, sizeof j->why) && counters_never_go_down(j, body);
  } else if (strcmp(target, "/healthz") == 0) {
    ok = len > 0;
  } else { /* /snapshot, /trace: JSON objects with their arrays */
    cJSON *doc = cJSON_Parse(body);
    const char *key = strncmp(target, "/trace", 6) == 0 ? "traceEvents" : "pools";
    ok = doc && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(doc, key));
    cJSON_Delete(doc);
  }
  if (!ok && !j->why[0])
    snprintf(j->why, sizeof j->why, "%s: a malformed body (%zu bytes)", target, len);
  free(plain);
  return ok;
}

static void *scrape(void *arg) {
  scrape_job *j = arg;
  static const char *const targets[] = {"/metrics", "/metrics", "/snapshot", "/trace?limit=100",
                                        "/healthz"};
  for (int i = 0; i < j->rounds; i++) {
    http_response r;
    const char *headers = i % 2 ? "Accept-Encoding: gzip\r\n" : NULL;
    const char *target = targets[i % 5];
    if (http_request("127.0.0.1", j->port, "GET", target, headers, &r) != 0) {
      j->unanswered++;
      continue;
    }
    if (well_formed(j, target, &r))
      atomic_fetch_add(&j->ok, 1);
    else
      j->bad++;
    http_response_free(&r);
  }
  return NULL;
}

STRESS_TEST(scrapes_while_threads_allocate) {
  gpupool *pools[2] = {make_pool("s0", 0), make_pool("s1", 1)};
  int port = start_agent();
  enum { ALLOCATORS = 4, SCRAPERS = 3 };
  alloc_job aj[ALLOCATORS];
  scrape_job sj[SCRAPERS];
  pthread_t at[ALLOCATORS], st[SCRAPERS];
  for (int i = 0; i < ALLOCATORS; i++) {
    aj[i] = (alloc_job){.pool = pools[i % 2], .stream = gpupool_host_stream_create()};
    cr_assert_eq(pthread_create(&at[i], NULL, allocate, &aj[i]), 0);
  }
  for (int i = 0; i < SCRAPERS; i++) {
    sj[i] = (scrape_job){.port = port, .rounds = 25};
    cr_assert_eq(pthread_create(&st[i], NULL, scrape, &sj[i]), 0);
  }
  for (int i = 0; i < ALLOCATORS; i++)
    pthread_join(at[i], NULL);
  for (int i = 0; i < SCRAPERS; i++) {
    pthread_join(st[i], NULL);
    cr_assert_eq(sj[i].bad, 0, "scraper %d: %d bad answers, first: %s", i, sj[i].bad, sj[i].why);
    cr_assert_eq(atomic_load(&sj[i].ok), sj[i].rounds, "scraper %d: %d of %d answered well", i,
                 atomic_load(&sj[i].ok), sj[i].rounds);
  }
  for (int i = 0; i < ALLOCATORS; i++) {
    cr_assert_eq(aj[i].failures, 0);
    gpupool_host_stream_destroy(aj[i].stream);
  }

  /* At rest, the scrape agrees with the pools exactly. */
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, "GET", "/metrics", NULL, &r), 0);
  for (int i = 0; i < 2; i++) {
    gpupool_stats s;
    gpupool_get_stats(pools[i], &s);
    char label[32];
    snprintf(label, sizeof label, "pool=\"s%d\"", i);
    const char *labels[] = {label, NULL};
    double reserved, frees;
    cr_assert_eq(metrics_value(r.body, "gpupool_reserved_bytes", labels, &reserved), 0);
    cr_assert_eq(reserved, (double)s.reserved_bytes[0].current);
    cr_assert_eq(metrics_value(r.body, "gpupool_frees_total", labels, &frees), 0);
    cr_assert_eq(frees, (double)s.num_frees);
    cr_assert_eq(frees, 2.0 * ALLOC_ROUNDS, "every allocation was freed");
  }
  http_response_free(&r);
  gpupool_agent_stop();
  gpupool_destroy(pools[0]);
  gpupool_destroy(pools[1]);
}

/* Serves again within a few seconds (closed connections take a moment to be
 * reaped by the server). */
static int serves_again(int port) {
  for (int attempt = 0; attempt < 50; attempt++) {
    http_response r;
    int ok = http_request("127.0.0.1", port, "GET", "/healthz", NULL, &r) == 0 && r.status == 200;
    http_response_free(&r);
    if (ok)
      return 1;
    usleep(100 * 1000);
  }
  return 0;
}

STRESS_TEST(a_thousand_connections_at_once) {
  struct rlimit lim;
  cr_assert_eq(getrlimit(RLIMIT_NOFILE, &lim), 0);
  int n = 1000;
  if (lim.rlim_cur < (rlim_t)n + 64)
    n = (int)lim.rlim_cur - 64;
  if (n < 100)
    cr_skip("only %d file descriptors may be opened here", (int)lim.rlim_cur);
  int port = start_agent();

  int *fds = malloc((size_t)n * sizeof *fds);
  int connected = 0;
  for (int i = 0; i < n; i++) {
    fds[i] = http_connect("127.0.0.1", port);
    if (fds[i] >= 0)
      connected++;
  }
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0)
      send(fds[i], req, sizeof req - 1, MSG_NOSIGNAL);
  int answered = 0, refused = 0;
  for (int i = 0; i < n; i++) {
    if (fds[i] < 0)
      continue;
    char buf[512];
    ssize_t k = recv(fds[i], buf, sizeof buf - 1, 0);
    if (k > 0) {
      buf[k] = '\0';
      if (strncmp(buf, "HTTP/1.1 200", 12) == 0)
        answered++;
    } else {
      refused++; /* closed by the server: over the connection limit */
    }
    close(fds[i]);
  }
  free(fds);
  cr_log_info("%d connections: %d answered, %d closed by the server", connected, answered, refused);
  cr_assert_gt(answered, 0, "the server answered none of %d connections", connected);
  cr_assert(serves_again(port), "the server does not serve after the flood");
  gpupool_agent_stop();
  cr_assert_eq(gpupool_agent_port(), 0);
}

STRESS_TEST(clients_that_never_finish_do_not_block_others) {
  int port = start_agent();
  int idle = http_connect("127.0.0.1", port); /* connects, sends nothing */
  int partial = http_connect("127.0.0.1", port);
  cr_assert_geq(idle, 0);
  cr_assert_geq(partial, 0);
  static const char half[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  cr_assert_eq(send(partial, half, sizeof half - 1, MSG_NOSIGNAL), (ssize_t)(sizeof half - 1));
  for (int i = 0; i < 10; i++) {
    http_response r;
    cr_assert_eq(http_request("127.0.0.1", port, "GET", "/metrics", NULL, &r), 0,
                 "request %d was not answered while slow clients wait", i);
    cr_assert_eq(r.status, 200);
    http_response_free(&r);
  }
  /* A stream being read stops cleanly too. */
  int streaming = http_connect("127.0.0.1", port);
  static const char trace[] = "GET /trace HTTP/1.1\r\nHost: x\r\n\r\n";
  send(streaming, trace, sizeof trace - 1, MSG_NOSIGNAL);
  char buf[256];
  cr_assert_gt(recv(streaming, buf, sizeof buf, 0), 0);

  gpupool_agent_stop(); /* must return with the slow clients still connected */
  cr_assert_eq(gpupool_agent_port(), 0);
  ssize_t k = recv(idle, buf, sizeof buf, 0);
  cr_assert(k == 0 || (k < 0 && errno == ECONNRESET), "the idle client is closed at stop");
  close(idle);
  close(partial);
  close(streaming);
}

/* Stops the agent while a client sends requests: each request gets a
 * well-formed answer or none (never a malformed one), at least one is
 * answered before the stop (waited for, bounded), and the port is closed
 * after it. */
STRESS_TEST(start_and_stop_while_clients_knock) {
  gpupool *p = make_pool("knock", 0);
  for (int round = 0; round < 5; round++) {
    int port = start_agent();
    scrape_job j = {.port = port, .rounds = 5};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, scrape, &j), 0);
    for (int waited = 0; atomic_load(&j.ok) == 0 && waited < 10000; waited++)
      usleep(1000);       /* until one answer came (at most 10 s) */
    gpupool_agent_stop(); /* requests in flight end with the server */
    cr_assert_eq(gpupool_agent_port(), 0);
    pthread_join(t, NULL);
    cr_assert_eq(j.bad, 0, "round %d: %d bad answers, first: %s", round, j.bad, j.why);
    cr_assert_geq(atomic_load(&j.ok), 1, "round %d: no request was answered before the stop",
                  round);
    cr_assert_eq(atomic_load(&j.ok) + j.unanswered, j.rounds, "round %d: requests lost", round);
    int fd = http_connect("127.0.0.1", port);
    if (fd >= 0)
      close(fd);
    cr_assert_lt(fd, 0, "round %d: port %d still accepts after the stop", round, port);
  }
  gpupool_destroy(p);
}
