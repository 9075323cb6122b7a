/* A scrape never waits on a device call: while another thread holds a pool
 * in a slow device allocation (the host backend's allocation hook blocks it
 * with the pool's slow lock held), /metrics and /snapshot answer, and show
 * the pool. Ordering, not timing: the scrape runs after the allocating
 * thread is known to be inside the call and before it is let go. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/agent.h"
#include "gpupool/gpupool.h"
#include "helpers/http_client.h"
#include "pool/backend_host_testing.h"

typedef struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int entered, released;
} gate;

static gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

/* The device call: says it is in, then waits to be let go. */
static void slow_alloc(void *arg) {
  gate *gt = arg;
  pthread_mutex_lock(&gt->lock);
  gt->entered = 1;
  pthread_cond_broadcast(&gt->cond);
  while (!gt->released)
    pthread_cond_wait(&gt->cond, &gt->lock);
  pthread_mutex_unlock(&gt->lock);
}

static void release_gate(void) {
  pthread_mutex_lock(&g.lock);
  g.released = 1;
  pthread_cond_broadcast(&g.cond);
  pthread_mutex_unlock(&g.lock);
}

typedef struct alloc_job {
  gpupool *pool;
  void *ptr;
  gpupool_status st;
} alloc_job;

static void *allocate(void *arg) {
  alloc_job *j = arg;
  j->st = gpupool_malloc(j->pool, &j->ptr, 64 << 20, NULL);
  return NULL;
}

static void scrape(int port, const char *target, const char *expect) {
  http_response r;
  int rc = http_request("127.0.0.1", port, "GET", target, NULL, &r);
  if (rc != 0)
    release_gate(); /* let the allocating thread finish before failing */
  cr_assert_eq(rc, 0, "%s did not answer while a device call was in progress", target);
  cr_expect_eq(r.status, 200, "%s: %d", target, r.status);
  cr_expect(strstr(r.body, expect), "%s does not show %s", target, expect);
  http_response_free(&r);
}

Test(scrape_slow_device, metrics_and_snapshot_answer_during_a_device_call) {
  unsetenv("GPUPOOL_CONF");
  unsetenv("GPUPOOL_AGENT_CONF");
  gpupool_options po = {.name = "slowdev",
                        .backend = GPUPOOL_BACKEND_HOST,
                        .host_capacity = 1 << 30,
                        .ignore_env = 1};
  gpupool *pool = NULL;
  cr_assert_eq(gpupool_create(&po, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_agent_options ao = {.listen = "127.0.0.1:0",
                              .cupti = GPUPOOL_CUPTI_OFF,
                              .hostname = "arch-host",
                              .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&ao), GPUPOOL_OK, "%s", gpupool_last_error());
  int port = gpupool_agent_port();

  backend_host_testing_set_alloc_hook(slow_alloc, &g);
  alloc_job job = {.pool = pool};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, allocate, &job), 0);
  pthread_mutex_lock(&g.lock);
  while (!g.entered)
    pthread_cond_wait(&g.cond, &g.lock);
  pthread_mutex_unlock(&g.lock);

  /* The allocating thread is inside the device call, holding the slow lock. */
  scrape(port, "/metrics", "pool=\"slowdev\"");
  scrape(port, "/snapshot", "\"slowdev\"");
  /* Every endpoint reports the hostname option. */
  scrape(port, "/metrics", "hostname=\"arch-host\"");
  scrape(port, "/snapshot", "\"hostname\":\"arch-host\"");
  scrape(port, "/trace", "\"hostname\":\"arch-host\"");
  gpupool_stats s;
  cr_expect_eq(gpupool_get_stats(pool, &s), GPUPOOL_OK);
  pthread_mutex_lock(&g.lock);
  int still_inside = !g.released;
  pthread_mutex_unlock(&g.lock);
  cr_expect(still_inside, "the scrapes ran while the device call was in progress");

  release_gate();
  pthread_join(t, NULL);
  backend_host_testing_set_alloc_hook(NULL, NULL);
  cr_expect_eq(job.st, GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(gpupool_free(pool, job.ptr), GPUPOOL_OK);
  gpupool_agent_stop();
  gpupool_destroy(pool);
}
