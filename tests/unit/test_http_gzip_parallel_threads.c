/* The parallel gzip compressor under concurrency (run under ThreadSanitizer
 * in CI): several threads compress through one compressor at once (it takes
 * one body at a time), and concurrent gzip'd scrapes of an agent with
 * gzip_threads:3 read back as complete expositions while another thread
 * changes the thread count. Failures are counted in the threads and
 * asserted on the main one; every loop is bounded in count. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "agent/http_gzip_parallel.h"
#include "agent/metrics.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/http_client.h"

#define BODY (300 * 1000)

static atomic_int failures;

/* 1 when z[0..zlen) is one gzip member that inflates to exactly in[0..n). */
static int reads_back(const uint8_t *z, size_t zlen, const uint8_t *in, size_t n) {
  uint8_t *back = malloc(n + 1);
  z_stream s = {0};
  if (!back || inflateInit2(&s, 31) != Z_OK) {
    free(back);
    return 0;
  }
  s.next_in = (Bytef *)z;
  s.avail_in = (uInt)zlen;
  s.next_out = back;
  s.avail_out = (uInt)n + 1;
  int ok = inflate(&s, Z_FINISH) == Z_STREAM_END && s.avail_in == 0 && s.total_out == n &&
           memcmp(back, in, n) == 0;
  inflateEnd(&s);
  free(back);
  return ok;
}

typedef struct job {
  http_gzip_par *par;
  unsigned seed;
} job;

static void *compress_loop(void *arg) {
  job *j = arg;
  uint8_t *in = malloc(BODY);
  size_t cap = http_gzip_par_bound(j->par, BODY);
  uint8_t *z = malloc(cap);
  for (int round = 0; round < 20 && in && z; round++) {
    size_t n = BODY - (size_t)round * 7919 * j->seed % (BODY / 2);
    static const char line[] = "gpupool_bytes{pool=\"p\"} 12345\n";
    for (size_t i = 0; i < n; i++) /* text-like, different per thread and round */
      in[i] = (uint8_t)line[(i + j->seed + round) % (sizeof line - 1)];
    size_t zlen = http_gzip_par_run(j->par, (const char *)in, n, z, cap);
    if (!zlen || !reads_back(z, zlen, in, n))
      atomic_fetch_add(&failures, 1);
  }
  if (!in || !z)
    atomic_fetch_add(&failures, 1);
  free(in);
  free(z);
  return NULL;
}

Test(http_gzip_parallel_threads, one_compressor_shared_by_threads) {
  atomic_store(&failures, 0);
  http_gzip_par *par = http_gzip_par_new(3);
  cr_assert_not_null(par);
  pthread_t t[4];
  job jobs[4];
  for (unsigned i = 0; i < 4; i++) {
    jobs[i] = (job){.par = par, .seed = i + 1};
    cr_assert_eq(pthread_create(&t[i], NULL, compress_loop, &jobs[i]), 0);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  http_gzip_par_free(par);
  cr_assert_eq(atomic_load(&failures), 0, "%d bodies did not read back", atomic_load(&failures));
}

static int g_port;
/* Scrapes made and scrapers finished, for the thread that changes the
 * thread count between scrapes. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_scrapes, g_scrapers_done;

static void count(int *what) {
  pthread_mutex_lock(&g_lock);
  (*what)++;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_lock);
}

static void *scrape_loop(void *arg) {
  (void)arg;
  for (int i = 0; i < 15; i++) {
    http_response r;
    if (http_request("127.0.0.1", g_port, "GET", "/metrics", "Accept-Encoding: gzip\r\n", &r) !=
        0) {
      atomic_fetch_add(&failures, 1);
      continue;
    }
    char enc[32];
    char *text = NULL;
    size_t len = 0;
    int ok = r.status == 200 && http_header(&r, "Content-Encoding", enc, sizeof enc) &&
             !strcmp(enc, "gzip") && http_gunzip(r.body, r.body_len, &text, &len) == 0 &&
             strstr(text, "pool=\"gz7\"") && len > 2 * HTTP_GZIP_CHUNK_MIN && text[len - 1] == '\n';
    if (!ok)
      atomic_fetch_add(&failures, 1);
    free(text);
    http_response_free(&r);
    count(&g_scrapes);
  }
  count(&g_scrapers_done);
  return NULL;
}

/* Threads of this process named gpupool-gzip (the compressor's workers). */
static int gzip_workers(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char path[300], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f && fgets(comm, sizeof comm, f) && !strcmp(comm, "gpupool-gzip\n"))
      n++;
    if (f)
      fclose(f);
  }
  if (d)
    closedir(d);
  return n;
}

/* Changes the thread count (the compressor is freed and made anew) while
 * the scrapers run. */
static void *change_loop(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_lock);
  for (unsigned i = 0; g_scrapers_done < 3; i++) {
    int seen = g_scrapes;
    while (g_scrapes == seen && g_scrapers_done < 3)
      pthread_cond_wait(&g_cond, &g_lock);
    pthread_mutex_unlock(&g_lock);
    metrics_gzip_threads(1 + i % 4);
    pthread_mutex_lock(&g_lock);
  }
  pthread_mutex_unlock(&g_lock);
  return NULL;
}

Test(http_gzip_parallel_threads, concurrent_gzip_scrapes, .timeout = 300) {
  atomic_store(&failures, 0);
  unsetenv("GPUPOOL_CONF");
  setenv("GPUPOOL_AGENT_CONF", "gzip_threads:3", 1);
  /* 32 pools: a body of several chunks. */
  gpupool *pools[32];
  for (int i = 0; i < 32; i++) {
    char name[16];
    snprintf(name, sizeof name, "gz%d", i);
    gpupool_options o = {.name = name,
                         .device = i % 8,
                         .backend = GPUPOOL_BACKEND_HOST,
                         .host_capacity = 64 << 20,
                         .ignore_env = 1};
    cr_assert_eq(gpupool_create(&o, &pools[i]), GPUPOOL_OK, "%s", gpupool_last_error());
  }
  gpupool_agent_options ao = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF};
  cr_assert_eq(gpupool_agent_start(&ao), GPUPOOL_OK, "%s", gpupool_last_error());
  unsetenv("GPUPOOL_AGENT_CONF");
  g_port = gpupool_agent_port();
  cr_assert_eq(gzip_workers(), 0, "the workers start with the first gzip'd scrape");
  scrape_loop(NULL); /* 15 scrapes alone */
  cr_assert_eq(atomic_load(&failures), 0);
  /* The workers are named as they are made: one the caller never needed
   * may not have run yet (a loaded CI machine), and still counts. */
  int workers = gzip_workers();
  cr_assert_eq(workers, 2, "gzip_threads:3: the scraping thread and 2 workers, not %d", workers);
  g_scrapes = g_scrapers_done = 0; /* no other thread yet */
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, i == 3 ? change_loop : scrape_loop, NULL), 0);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  gpupool_agent_stop();
  cr_assert_eq(gzip_workers(), 0, "agent stop joins the compression threads");
  for (int i = 0; i < 32; i++)
    gpupool_destroy(pools[i]);
  cr_assert_eq(atomic_load(&failures), 0, "%d scrapes failed or did not read back",
               atomic_load(&failures));
}
