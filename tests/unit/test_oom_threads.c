/* OOM reports from several threads at once (run under TSan in CI): threads
 * on their own streams of one pool allocate and fail, while another thread
 * writes torch snapshots and reads the store's counts; every failure is
 * explained and counted once. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/oom_store.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/http_client.h"

#define MiB     ((size_t)1 << 20)
#define THREADS 3
#define ROUNDS  200

static gpupool *pool;
static atomic_int done;

typedef struct worker {
  gpupool_host_stream *stream;
  int ooms, unexplained;
} worker;

static void *allocate(void *arg) {
  worker *w = arg;
  void *keep[4] = {0};
  for (int i = 0; i < ROUNDS; i++) {
    void *p = NULL;
    size_t size = (size_t)(i % 5 + 1) * 3 * MiB;
    if (gpupool_malloc(pool, &p, size, w->stream) == GPUPOOL_OK) {
      if (keep[i % 4])
        gpupool_free(pool, keep[i % 4]);
      keep[i % 4] = p;
    }
    if (gpupool_malloc(pool, &p, 200 * MiB, w->stream) != GPUPOOL_ERR_OOM)
      continue;
    w->ooms++;
    if (strncmp(gpupool_last_error(), "CUDA out of memory.", 19) != 0)
      w->unexplained++;
  }
  for (int i = 0; i < 4; i++)
    if (keep[i])
      gpupool_free(pool, keep[i]);
  return NULL;
}

static void *observe(void *arg) {
  int *failures = arg;
  while (!atomic_load(&done)) {
    FILE *f = tmpfile();
    if (!f || gpupool_snapshot_write_torch(f, NULL) != GPUPOOL_OK)
      (*failures)++;
    if (f)
      fclose(f);
    oom_store_counts c;
    oom_store_get_counts(&c);
    if (c.kept > 4)
      (*failures)++;
  }
  return NULL;
}

/* The agent keeping 4 OOM reports (listening on listen), and the 64 MiB
 * pool named name that the threads fail in. */
static void start_agent_and_pool(const char *listen, const char *name) {
  setenv("GPUPOOL_AGENT_CONF", "oom_reports:4", 1);
  gpupool_agent_options o = {.listen = listen, .cupti = GPUPOOL_CUPTI_OFF};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_options po = {
      .name = name, .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64 * MiB, .ignore_env = 1};
  cr_assert_eq(gpupool_create(&po, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
}

Test(oom_threads, concurrent_ooms_are_each_explained_and_counted) {
  start_agent_and_pool("off", "race");
  worker w[THREADS] = {{0}};
  pthread_t t[THREADS], obs;
  int obs_failures = 0;
  cr_assert_eq(pthread_create(&obs, NULL, observe, &obs_failures), 0);
  for (int i = 0; i < THREADS; i++) {
    w[i].stream = gpupool_host_stream_create();
    cr_assert_eq(pthread_create(&t[i], NULL, allocate, &w[i]), 0);
  }
  int ooms = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    ooms += w[i].ooms;
    cr_expect_eq(w[i].unexplained, 0, "thread %d: an OOM without its explanation", i);
  }
  atomic_store(&done, 1);
  pthread_join(obs, NULL);
  cr_expect_eq(obs_failures, 0);
  cr_expect_eq(ooms, THREADS * ROUNDS, "every 200 MiB request fails");
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_geq(c.total, (uint64_t)ooms, "each failure was reported (fills may add more)");
  cr_expect_eq(c.kept, 4);
  gpupool_agent_stop();
  gpupool_destroy(pool);
  for (int i = 0; i < THREADS; i++)
    gpupool_host_stream_destroy(w[i].stream);
}

/* Threads that fail at once take their report ids in one order and deliver
 * them in another: /oom lists the kept reports by id, lowest first, and
 * they are the highest ids (those named by the last messages). */
#define LINKED_ROUNDS 100

typedef struct linked {
  gpupool_host_stream *stream;
  unsigned long long highest;
  int unlinked;
} linked;

static void *fail_linked(void *arg) {
  linked *w = arg;
  for (int i = 0; i < LINKED_ROUNDS; i++) {
    void *p = NULL;
    if (gpupool_malloc(pool, &p, 200 * MiB, w->stream) != GPUPOOL_ERR_OOM)
      continue;
    const char *at = strstr(gpupool_last_error(), " Report: /oom/");
    if (!at) {
      w->unlinked++;
      continue;
    }
    unsigned long long id = strtoull(at + 14, NULL, 10);
    if (id > w->highest)
      w->highest = id;
  }
  return NULL;
}

Test(oom_threads, concurrent_reports_are_listed_by_id) {
  start_agent_and_pool("127.0.0.1:0", "ids");
  linked w[THREADS] = {{0}};
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i].stream = gpupool_host_stream_create();
    cr_assert_eq(pthread_create(&t[i], NULL, fail_linked, &w[i]), 0);
  }
  unsigned long long highest = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    cr_expect_eq(w[i].unlinked, 0, "thread %d: a message without its report link", i);
    if (w[i].highest > highest)
      highest = w[i].highest;
  }
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/oom", NULL, &r), 0);
  cr_assert_eq(r.status, 200);
  unsigned long long ids[4];
  int n = 0;
  for (const char *at = r.body; n < 4 && (at = strstr(at, "\"id\":")); at += 5)
    ids[n++] = strtoull(at + 5, NULL, 10);
  http_response_free(&r);
  cr_assert_eq(n, 4);
  for (int i = 0; i < 4; i++)
    cr_expect_eq(ids[i], highest - 3 + (unsigned long long)i, "kept %llu, %llu, %llu, %llu of %llu",
                 ids[0], ids[1], ids[2], ids[3], highest);
  gpupool_agent_stop();
  gpupool_destroy(pool);
  for (int i = 0; i < THREADS; i++)
    gpupool_host_stream_destroy(w[i].stream);
}
