/* bench_agent: what the agent costs.
 *
 * 1. The pool's hot path (a malloc+free pair that hits the cache, host
 *    backend) on one thread and on 8 threads each on its own stream, with
 *    the agent off, and on while a thread scrapes /metrics 10 times a
 *    second: ns per pair side by side, with events recorded (the default)
 *    and with trace_events:0, and the ratios to off (issue 15's target:
 *    events on at most 1.05x off at every size, 1 and 8 threads).
 * 2. The server time of one /metrics scrape with 8 devices x 4 pools (host
 *    pools on ordinals 0..7): rendering alone and the whole handler (format
 *    negotiation, rendering, gzip), median and p99 over many scrapes, plus a
 *    loopback HTTP round trip for scale. Then gzip by 1 thread (serial) and
 *    by several (gzip_threads, agent/http_gzip_parallel.h) side by side in
 *    rounds taken in turns: the whole handler (OpenMetrics + gzip, as
 *    Prometheus asks) and the compression of its body alone, with their
 *    ratios to 1 thread.
 *
 *   bench_agent [--quick] [--scrape-only]
 *
 * --scrape-only leaves part 1 out. bench/compare_agent.py runs two builds
 * (before and after a change) in turns and prints part 2 side by side.
 *
 * Exit status 1 when a measurement failed. */
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/agent_conf.h"
#include "agent/endpoint.h"
#include "agent/http_gzip_parallel.h"
#include "bench_alloc.h"
#include "bench_format.h"
#include "agent/metrics.h"
#include "exporters/metrics_pools.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "pair_timer.h"
#include "pool/event_clock.h"

#define ROUNDS  5
#define THREADS 8

/* ---- a scraper: GET /metrics every 100 ms on its own thread ---- */

/* One GET; the bytes received, or -1. */
static long fetch_metrics(int port, const char *extra_headers) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  long total = -1;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
    char req[256];
    int n =
        snprintf(req, sizeof req, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n",
                 extra_headers);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) == n) {
      char buf[65536];
      ssize_t k;
      total = 0;
      while ((k = recv(fd, buf, sizeof buf, 0)) > 0)
        total += k;
      if (k < 0)
        total = -1;
    }
  }
  close(fd);
  return total;
}

typedef struct scraper {
  pthread_t thread;
  atomic_int stop;
  int port;
  int scrapes, failures;
} scraper;

static void *scrape_loop(void *arg) {
  scraper *s = arg;
  while (!atomic_load(&s->stop)) {
    if (fetch_metrics(s->port, "Accept-Encoding: gzip\r\n") > 0)
      s->scrapes++;
    else
      s->failures++;
    for (int i = 0; i < 10 && !atomic_load(&s->stop); i++) /* 100 ms, in 10 ms steps */
      usleep(10000);
  }
  return NULL;
}

static int agent_start(size_t trace_events, int trace_off) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .trace_events = trace_events,
                             .trace_off = trace_off,
                             .ignore_env = 1};
  if (gpupool_agent_start(&o) != GPUPOOL_OK) {
    fprintf(stderr, "bench_agent: %s\n", gpupool_last_error());
    return -1;
  }
  return 0;
}

/* ns per pair with the agent on (and scraped) or off. mode: 0 off, 1 on with
 * events, 2 on without events. */
static double measure_mode(const bench_alloc *a, size_t size, void *const *streams, int threads,
                           const pair_plan *plan, int mode, int *scrapes) {
  if (mode == 0)
    return pair_ns_threads(a, size, streams, threads, plan);
  if (agent_start(0, mode == 2) != 0)
    return NAN;
  /* With events, measured once the event clock is ticked (it switches after
   * a 50 ms check sees 1,000,000 events/s), as in a busy program; at most 2 s. */
  if (mode == 1)
    pairs_until(a, size, streams[0], event_clock_resolution_us, 2000000000ull);
  scraper s = {.port = gpupool_agent_port()};
  atomic_init(&s.stop, 0);
  if (pthread_create(&s.thread, NULL, scrape_loop, &s) != 0) {
    gpupool_agent_stop();
    return NAN;
  }
  double ns = pair_ns_threads(a, size, streams, threads, plan);
  atomic_store(&s.stop, 1);
  pthread_join(s.thread, NULL);
  gpupool_agent_stop();
  *scrapes += s.scrapes;
  return s.failures ? NAN : ns;
}

static int hot_path(const pair_plan *plan) {
  static const size_t sizes[] = {512, 65536, 1 << 20};
  bench_alloc a;
  char why[256];
  if (bench_alloc_gpupool(&a, "gpupool bfc", GPUPOOL_BACKEND_HOST, GPUPOOL_STRATEGY_BFC, NULL,
                          (size_t)8 << 30, why, sizeof why) != 0) {
    fprintf(stderr, "bench_agent: %s\n", why);
    return -1;
  }
  void *streams[THREADS];
  for (int i = 0; i < THREADS; i++)
    streams[i] = gpupool_host_stream_create();
  printf("### Hot path: ns per malloc+free pair (cache hits, host backend)\n\n");
  printf("- median of %d rounds; each round measures off, on, on without events in turn\n", ROUNDS);
  printf("- \"on\": gpupool_agent_start (events on, default ring) and a thread GETting /metrics "
         "(gzip) every 100 ms during the measurement; with events, measured once the event "
         "clock's ticker has switched to ticked mode (a busy program's steady state)\n");
  printf("- %d threads: each on its own stream; the process's ns per pair (1e9 / total pairs "
         "per second)\n",
         THREADS);
  printf("- events on / off: issue 15's target is at most 1.05 at every size, 1 and %d threads\n\n",
         THREADS);
  printf("| size | threads | agent off ns | agent on ns | events on / off | on, trace_events:0 ns "
         "| trace_events:0 / off |\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  int failed = 0, scrapes = 0;
  const int thread_counts[] = {1, THREADS};
  for (int t = 0; t < 2; t++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      double v[3][ROUNDS];
      for (int r = 0; r < ROUNDS; r++)
        for (int m = 0; m < 3; m++)
          v[m][r] = measure_mode(&a, sizes[i], streams, thread_counts[t], plan, m, &scrapes);
      char size[32];
      bench_bytes(sizes[i], size, sizeof size);
      double med[3];
      for (int m = 0; m < 3; m++)
        med[m] = bench_median(v[m], ROUNDS);
      if (isnan(med[0]) || isnan(med[1]) || isnan(med[2])) {
        printf("| %s | %d | failed | | | | |\n", size, thread_counts[t]);
        failed = 1;
        continue;
      }
      printf("| %s | %d | %.1f | %.1f | %.3f | %.1f | %.3f |\n", size, thread_counts[t], med[0],
             med[1], med[1] / med[0], med[2], med[2] / med[0]);
      fflush(stdout);
    }
  }
  for (int i = 0; i < THREADS; i++)
    gpupool_host_stream_destroy(streams[i]);
  printf("\n- %d scrapes served during the \"on\" measurements\n\n", scrapes);
  bench_alloc_destroy(&a);
  return failed ? -1 : 0;
}

/* ---- the server time of one scrape ---- */

static const char *no_arg(void *ctx, const char *key) {
  (void)ctx, (void)key;
  return NULL;
}
static void no_args(void *ctx, void (*fn)(void *, const char *, const char *), void *arg) {
  (void)ctx, (void)fn, (void)arg;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct timing {
  double median_us, p99_us;
  size_t bytes;
} timing;

static void summarise(double *us, int n, timing *t) {
  qsort(us, (size_t)n, sizeof us[0], cmp_double);
  t->median_us = us[n / 2];
  t->p99_us = us[(n * 99) / 100];
}

/* The /metrics handler as the server calls it. */
static int time_endpoint(const char *accept, const char *encoding, int n, timing *t) {
  double *us = malloc((size_t)n * sizeof *us);
  endpoint_args args = {
      .get = no_arg, .each = no_args, .accept = accept, .accept_encoding = encoding};
  for (int i = 0; i < n; i++) {
    endpoint_body body = {0};
    uint64_t t0 = bench_clock_ns();
    metrics_endpoint(&args, &body);
    us[i] = (double)(bench_clock_ns() - t0) / 1e3;
    t->bytes = body.len;
    free(body.data);
    if (body.status != 200) {
      free(us);
      return -1;
    }
  }
  summarise(us, n, t);
  free(us);
  return 0;
}

/* Rendering alone, into a buffer reused like the handler's. */
static int time_render(prom_format f, int n, timing *t) {
  double *us = malloc((size_t)n * sizeof *us);
  for (int i = 0; i < n; i++) {
    prom_buf b;
    prom_buf_init(&b, 1 << 20);
    uint64_t t0 = bench_clock_ns();
    int rc = metrics_render(&b, f);
    us[i] = (double)(bench_clock_ns() - t0) / 1e3;
    t->bytes = b.len;
    prom_buf_free(&b);
    if (rc != 0) {
      free(us);
      return -1;
    }
  }
  summarise(us, n, t);
  free(us);
  return 0;
}

static int time_http(int port, const char *headers, int n, timing *t) {
  double *us = malloc((size_t)n * sizeof *us);
  for (int i = 0; i < n; i++) {
    uint64_t t0 = bench_clock_ns();
    long bytes = fetch_metrics(port, headers);
    us[i] = (double)(bench_clock_ns() - t0) / 1e3;
    if (bytes <= 0) {
      free(us);
      return -1;
    }
    t->bytes = (size_t)bytes;
  }
  summarise(us, n, t);
  free(us);
  return 0;
}

#define DEVICES          8
#define POOLS_PER_DEVICE 4

#define OPENMETRICS_ACCEPT                                                                         \
  "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"

/* ---- gzip by 1 thread and by several, side by side ---- */

#define GZ_COUNTS 4  /* gzip_threads 1..4 */
#define GZ_ROUNDS 20 /* handler rounds, in turns */

/* One round of n handler scrapes with gzip_threads t, after a few untimed
 * ones (the first starts the compression threads); us[0..n) filled. */
static int gz_handler_round(unsigned t, int n, double *us, size_t *bytes) {
  metrics_gzip_threads(t);
  endpoint_args args = {
      .get = no_arg, .each = no_args, .accept = OPENMETRICS_ACCEPT, .accept_encoding = "gzip"};
  for (int i = -3; i < n; i++) {
    endpoint_body body = {0};
    uint64_t t0 = bench_clock_ns();
    metrics_endpoint(&args, &body);
    double dt = (double)(bench_clock_ns() - t0) / 1e3;
    int ok = body.status == 200 && body.content_encoding;
    *bytes = body.len;
    free(body.data);
    if (!ok)
      return -1;
    if (i >= 0)
      us[i] = dt;
  }
  return 0;
}

/* Compression alone: body i by each count in turn; us[t][i] filled. */
static int gz_alone(http_gzip_par *const *c, const prom_buf *body, uint8_t *out, size_t cap, int n,
                    double *const *us, size_t *bytes) {
  for (int i = -2; i < n; i++)
    for (unsigned t = 0; t < GZ_COUNTS; t++) {
      uint64_t t0 = bench_clock_ns();
      size_t z = http_gzip_par_run(c[t], body->data, body->len, out, cap);
      double dt = (double)(bench_clock_ns() - t0) / 1e3;
      if (!z)
        return -1;
      bytes[t] = z;
      if (i >= 0)
        us[t][i] = dt;
    }
  return 0;
}

static int gzip_side_by_side(int n) {
  unsigned def = agent_default_gzip_threads();
  prom_buf body;
  prom_buf_init(&body, 1 << 20);
  http_gzip_par *c[GZ_COUNTS] = {0};
  double *hus[GZ_COUNTS], *aus[GZ_COUNTS];
  int per_round = n / GZ_ROUNDS, failed = metrics_render(&body, PROM_FORMAT_OPENMETRICS) != 0;
  size_t cap = 0;
  for (unsigned t = 0; t < GZ_COUNTS; t++) {
    c[t] = http_gzip_par_new(t + 1);
    hus[t] = malloc((size_t)n * sizeof(double));
    aus[t] = malloc((size_t)n * sizeof(double));
    failed |= !c[t] || !hus[t] || !aus[t];
    if (c[t] && http_gzip_par_bound(c[t], body.len) > cap)
      cap = http_gzip_par_bound(c[t], body.len);
  }
  uint8_t *out = malloc(cap);
  failed |= !out;
  timing h[GZ_COUNTS] = {0}, a[GZ_COUNTS] = {0};
  size_t abytes[GZ_COUNTS] = {0};
  /* In turns: 1, 2, 3, 4 threads, then again (the handler in rounds, since
   * a change of count restarts the workers; compression alone body by
   * body), so that a change in the machine's load falls on every count
   * alike. */
  for (int r = 0; r < GZ_ROUNDS && !failed; r++)
    for (unsigned t = 0; t < GZ_COUNTS && !failed; t++)
      failed |= gz_handler_round(t + 1, per_round, hus[t] + r * per_round, &h[t].bytes) != 0;
  failed = failed || gz_alone(c, &body, out, cap, per_round * GZ_ROUNDS, aus, abytes) != 0;
  metrics_gzip_threads(def);
  if (!failed) {
    printf("### gzip by 1 thread and by several (`gzip_threads`), side by side\n\n");
    printf("- the handler with OpenMetrics + gzip (as Prometheus asks): %d rounds of %d\n"
           "  scrapes, the counts in turns; the compression alone of its %zu-byte body,\n"
           "  the counts in turns body by body; the body is cut into chunks of at least\n"
           "  %d KiB, one per thread; this machine has %ld online CPUs, the default here\n"
           "  is gzip_threads:%u\n\n",
           GZ_ROUNDS, per_round, body.len, HTTP_GZIP_CHUNK_MIN / 1024,
           sysconf(_SC_NPROCESSORS_ONLN), def);
    printf("| gzip_threads | chunks | handler median us | p99 us | ratio to 1 | compression "
           "median us | p99 us | ratio to 1 | gzip bytes |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned t = 0; t < GZ_COUNTS; t++) {
      summarise(hus[t], per_round * GZ_ROUNDS, &h[t]);
      summarise(aus[t], per_round * GZ_ROUNDS, &a[t]);
      printf("| %u%s | %u | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %zu |\n", t + 1,
             t + 1 == def ? " (default)" : "", http_gzip_par_chunks(c[t], body.len), h[t].median_us,
             h[t].p99_us, h[t].median_us / h[0].median_us, a[t].median_us, a[t].p99_us,
             a[t].median_us / a[0].median_us, abytes[t]);
    }
    printf("\n");
  } else {
    printf("### gzip by 1 thread and by several: failed\n\n");
  }
  for (unsigned t = 0; t < GZ_COUNTS; t++) {
    http_gzip_par_free(c[t]);
    free(hus[t]);
    free(aus[t]);
  }
  free(out);
  prom_buf_free(&body);
  return failed ? -1 : 0;
}

static int scrape_time(int n) {
  gpupool *pools[DEVICES * POOLS_PER_DEVICE];
  int made = 0, failed = 0;
  for (int d = 0; d < DEVICES; d++) {
    for (int k = 0; k < POOLS_PER_DEVICE; k++) {
      char name[32];
      snprintf(name, sizeof name, "pool%d", k);
      gpupool_options o = {.name = name,
                           .device = d,
                           .backend = GPUPOOL_BACKEND_HOST,
                           .host_capacity = (size_t)1 << 30,
                           .ignore_env = 1};
      if (gpupool_create(&o, &pools[made]) != GPUPOOL_OK) {
        fprintf(stderr, "bench_agent: %s\n", gpupool_last_error());
        failed = 1;
        break;
      }
      void *p;
      for (int i = 0; i < 64; i++) /* blocks of many sizes: a filled histogram */
        if (gpupool_malloc(pools[made], &p, (size_t)(i + 1) * 3000 + (size_t)i * i * 1000, NULL) ==
                GPUPOOL_OK &&
            i % 3 == 0)
          gpupool_free(pools[made], p);
      made++;
    }
  }
  if (!failed && agent_start(0, 0) != 0)
    failed = 1;
  if (!failed) {
    printf("### Server time of one /metrics scrape: %d devices x %d pools (host backend)\n\n",
           DEVICES, POOLS_PER_DEVICE);
    printf("- %d scrapes each; the agent runs (sampler, HTTP server) meanwhile; gzip with\n"
           "  the default gzip_threads:%u\n\n",
           n, agent_default_gzip_threads());
    printf("| what | median us | p99 us | bytes |\n|---|---:|---:|---:|\n");
    const struct {
      const char *what;
      int kind; /* 0 render, 1 endpoint, 2 http */
      prom_format format;
      const char *accept, *encoding;
      int classic; /* size_buckets:classic (41 buckets a pool, not 15) */
    } rows[] = {
        {"render, text 0.0.4", 0, PROM_FORMAT_TEXT, NULL, NULL, 0},
        {"render, text 0.0.4, classic buckets", 0, PROM_FORMAT_TEXT, NULL, NULL, 1},
        {"render, OpenMetrics", 0, PROM_FORMAT_OPENMETRICS, NULL, NULL, 0},
        {"handler, text", 1, 0, NULL, NULL, 0},
        {"handler, text + gzip", 1, 0, NULL, "gzip", 0},
        {"handler, OpenMetrics", 1, 0, OPENMETRICS_ACCEPT, NULL, 0},
        {"handler, OpenMetrics + gzip (as Prometheus asks)", 1, 0, OPENMETRICS_ACCEPT, "gzip", 0},
        {"handler, OpenMetrics + gzip, classic buckets", 1, 0, OPENMETRICS_ACCEPT, "gzip", 1},
        {"HTTP round trip on loopback, text", 2, 0, "", NULL, 0},
        {"HTTP round trip on loopback, gzip", 2, 0, "Accept-Encoding: gzip\r\n", NULL, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
      timing t = {0};
      metrics_pools_size_buckets(rows[i].classic);
      int rc = rows[i].kind == 0   ? time_render(rows[i].format, n, &t)
               : rows[i].kind == 1 ? time_endpoint(rows[i].accept, rows[i].encoding, n, &t)
                                   : time_http(gpupool_agent_port(), rows[i].accept, n / 4, &t);
      metrics_pools_size_buckets(0);
      if (rc != 0) {
        printf("| %s | failed | | |\n", rows[i].what);
        failed = 1;
        continue;
      }
      printf("| %s | %.1f | %.1f | %zu |\n", rows[i].what, t.median_us, t.p99_us, t.bytes);
      fflush(stdout);
    }
    printf("\n- throughput on loopback: run the agent (e.g. examples/demo) and\n"
           "  `wrk -t2 -c8 -d10s -H 'Accept-Encoding: gzip' http://127.0.0.1:9477/metrics`\n\n");
    failed |= gzip_side_by_side(n) != 0;
    gpupool_agent_stop();
  }
  for (int i = 0; i < made; i++)
    gpupool_destroy(pools[i]);
  return failed ? -1 : 0;
}

int main(int argc, char **argv) {
  int quick = 0, scrape_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      quick = 1;
    } else if (!strcmp(argv[i], "--scrape-only")) {
      scrape_only = 1;
    } else {
      fprintf(stderr, "usage: bench_agent [--quick] [--scrape-only]\n");
      return 2;
    }
  }
  const pair_plan plan = quick ? (pair_plan){.warmup_ns = 2000000,
                                             .batch_ns = 20000000,
                                             .reps = 3,
                                             .run_ns = 20000000,
                                             .runs = 1}
                               : (pair_plan){.warmup_ns = 10000000,
                                             .batch_ns = 100000000,
                                             .reps = 7,
                                             .run_ns = 100000000,
                                             .runs = 3};
  printf("## bench_agent%s\n\n", quick ? " (--quick: few repetitions)" : "");
  printf("- gpupool %s\n\n", GPUPOOL_VERSION);
  int failed = !scrape_only && hot_path(&plan) != 0;
  failed |= scrape_time(quick ? 200 : 2000) != 0;
  return failed;
}
