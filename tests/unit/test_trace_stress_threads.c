/* The trace streamed over and over, in small chunks, while 8 threads allocate
 * and free on 8 streams and counter samples are taken: every document parses
 * and follows the format, whatever the rings overwrite meanwhile. Once through
 * the stream API directly, once over HTTP from a running agent (with
 * /snapshot too); and with events switched off and on meanwhile. CI runs this
 * under ThreadSanitizer. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/trace_counters.h"
#include "core/clock.h"
#include "gpupool/advisor.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/http_client.h"
#include "helpers/trace_check.h"
#include "pool/event_clock.h"
#include "pool/pool_view.h"

#define THREADS   8
#define DOCUMENTS 12

typedef struct worker {
  pthread_t thread;
  gpupool *pool;
  gpupool_host_stream *stream;
  unsigned seed;
  int failed;
} worker;

static atomic_int running; /* workers past their first allocations */
static atomic_int stop;    /* set once the documents are read: workers overlap them all */

static void *allocate(void *arg) {
  worker *w = arg;
  void *held[16] = {0};
  for (int i = 0; !atomic_load(&stop) && !w->failed; i++) {
    unsigned slot = (unsigned)rand_r(&w->seed) % 16;
    if (held[slot]) {
      w->failed |= gpupool_free(w->pool, held[slot]) != GPUPOOL_OK;
      held[slot] = NULL;
    } else {
      size_t size = 256 + (size_t)rand_r(&w->seed) % (2u << 20);
      w->failed |= gpupool_malloc(w->pool, &held[slot], size, w->stream) != GPUPOOL_OK;
    }
    if (i % 4 == 0) { /* a block freed at once: with ticked stamps, one record */
      void *t = NULL;
      w->failed |= gpupool_malloc(w->pool, &t, 512 + (size_t)i % 4096, w->stream) != GPUPOOL_OK;
      w->failed |= t && gpupool_free(w->pool, t) != GPUPOOL_OK;
    }
    if (i == 100)
      atomic_fetch_add(&running, 1);
    if (i % 1000 == 999)
      gpupool_empty_cache(w->pool);
  }
  for (int s = 0; s < 16; s++)
    if (held[s])
      w->failed |= gpupool_free(w->pool, held[s]) != GPUPOOL_OK;
  return NULL;
}

static void *sample(void *arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    trace_counters_sample();
    usleep(1000); /* the agent samples at an interval too */
  }
  return NULL;
}

typedef struct workload {
  gpupool *pool;
  worker w[THREADS];
  pthread_t sampler;
  int with_sampler;
} workload;

/* Starts the workers (and our own sampler when the agent's is not running)
 * and returns once all of them allocate. */
static void workload_start(workload *wl, int with_sampler) {
  atomic_store(&running, 0); /* tests may share a process (the TSan runner) */
  atomic_store(&stop, 0);
  gpupool_options o = {.name = "stress",
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = (size_t)1 << 30,
                       .ignore_env = 1};
  cr_assert_eq(gpupool_create(&o, &wl->pool), GPUPOOL_OK, "%s", gpupool_last_error());
  for (int i = 0; i < THREADS; i++) {
    wl->w[i] = (worker){
        .pool = wl->pool, .stream = gpupool_host_stream_create(), .seed = 1234u + (unsigned)i};
    cr_assert_eq(pthread_create(&wl->w[i].thread, NULL, allocate, &wl->w[i]), 0);
  }
  wl->with_sampler = with_sampler;
  if (with_sampler)
    cr_assert_eq(pthread_create(&wl->sampler, NULL, sample, NULL), 0);
  while (atomic_load(&running) < THREADS)
    sched_yield();
}

static void workload_stop(workload *wl) {
  atomic_store(&stop, 1);
  for (int i = 0; i < THREADS; i++) {
    pthread_join(wl->w[i].thread, NULL);
    cr_expect_eq(wl->w[i].failed, 0, "worker %d: %s", i, gpupool_last_error());
    gpupool_host_stream_destroy(wl->w[i].stream);
  }
  if (wl->with_sampler)
    pthread_join(wl->sampler, NULL);
  event_ring *rings[THREADS + 1];
  size_t n = pool_event_rings_at(wl->pool, rings, NULL, THREADS + 1);
  cr_expect_eq(n, THREADS, "one ring per stream, got %zu", n);
  for (size_t i = 0; i < n; i++)
    event_ring_unref(rings[i]);
  gpupool_destroy(wl->pool);
}

/* Parses and checks one document; returns its skipped-while-streaming count. */
static uint64_t check_document(const char *doc, int n) {
  cr_assert_not_null(doc, "document %d could not be read", n);
  cJSON *root = cJSON_Parse(doc);
  cr_assert_not_null(root, "document %d is not JSON", n);
  char why[512];
  cr_assert_eq(trace_check_format(root, why, sizeof why), 0, "document %d: %s", n, why);
  uint64_t skipped = (uint64_t)trace_other_number(root, "events_skipped_while_streaming");
  cJSON_Delete(root);
  return skipped;
}

Test(trace_stress_threads, streamed_documents_stay_valid_while_threads_allocate) {
  pool_events_enable(256); /* small rings: they lap the readers */
  trace_counters_reset();
  workload wl;
  workload_start(&wl, 1);
  uint64_t skipped = 0;
  for (int d = 0; d < DOCUMENTS; d++) {
    char *doc = trace_read_all(NULL, 1000 + (size_t)d % 7, NULL);
    skipped += check_document(doc, d);
    free(doc);
  }
  workload_stop(&wl);
  cr_log_info("%d documents, %llu events skipped while streaming", DOCUMENTS,
              (unsigned long long)skipped);
}

/* The same in one tick of the event clock (a stamp published, as the
 * ticker does in allocation storms): frees that write no record (their
 * allocations' records stand for them) while the documents are read, whole
 * and with a limit. */
Test(trace_stress_threads, streamed_documents_stay_valid_while_frees_write_no_record) {
  pool_events_enable(256);
  trace_counters_reset();
  event_clock_publish(clock_stamp());
  workload wl;
  workload_start(&wl, 1);
  uint64_t skipped = 0;
  for (int d = 0; d < DOCUMENTS; d++) {
    char limit[32];
    snprintf(limit, sizeof limit, "limit=%d", 1 + d * 37);
    const char *q[] = {limit};
    char *doc = d % 2 ? trace_read_query(q, 1, 1000 + (size_t)d % 7)
                      : trace_read_all(NULL, 1000 + (size_t)d % 7, NULL);
    skipped += check_document(doc, d);
    free(doc);
  }
  event_ring *rings[THREADS + 1];
  size_t n = pool_event_rings_at(wl.pool, rings, NULL, THREADS + 1);
  uint64_t head = 0, marked = 0;
  for (size_t i = 0; i < n; i++) {
    static pool_event ev[256];
    uint64_t h = event_ring_head(rings[i]), cap = event_ring_capacity(rings[i]);
    uint64_t cursor = h > cap ? h - cap : 0, lost = 0;
    size_t got = event_ring_read(rings[i], &cursor, ev, 256, &lost);
    for (size_t k = 0; k < got; k++)
      marked += event_count(&ev[k]) == 2;
    head += h;
    event_ring_unref(rings[i]);
  }
  cr_expect_gt(marked, 0, "no allocation's record stood for its free");
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_from_pool(wl.pool, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_gt(gpupool_history_get_info(h)->frees, 0);
  gpupool_history_free(h);
  workload_stop(&wl);
  event_clock_publish(0);
  cr_log_info("%d documents, %llu events skipped while streaming, %llu records", DOCUMENTS,
              (unsigned long long)skipped, (unsigned long long)head);
}

Test(trace_stress_threads, events_switched_off_and_on_while_threads_allocate) {
  pool_events_enable(256);
  trace_counters_reset();
  workload wl;
  workload_start(&wl, 1);
  for (int d = 0; d < DOCUMENTS; d++) {
    pool_events_switch(d % 2 ? 256 : 0); /* the threads see it at their next event */
    char *doc = trace_read_all(NULL, 1000, NULL);
    check_document(doc, d);
    free(doc);
  }
  pool_events_switch(0);
  uint64_t off = pool_events_recorded_total();
  usleep(20000); /* the workers go on allocating: nothing more is recorded */
  cr_assert_eq(pool_events_recorded_total(), off, "events recorded after the switch off");
  pool_events_switch(256);
  uint64_t on = pool_events_recorded_total();
  for (int i = 0; i < 2000 && pool_events_recorded_total() == on; i++)
    usleep(1000);
  cr_assert_gt(pool_events_recorded_total(), on, "no event recorded after the switch on");
  workload_stop(&wl);
  pool_events_disable();
}

/* The event clock's count reads the shards' allocation counts without
 * their locks, while 8 threads allocate: it never steps back while no pool
 * goes away, and the ticker, counting too, switches to ticked stamps. */
Test(trace_stress_threads, the_rate_count_reads_while_threads_allocate) {
  pool_events_enable(256);
  event_clock_set_on_rate(1000); /* a rate any machine reaches, TSan's too */
  cr_assert_eq(event_clock_start(1000), 0);
  workload wl;
  workload_start(&wl, 0);
  uint64_t first = pool_events_lifetimes_total(), last = first;
  for (int i = 0; i < 2000 && (i < 200 || !event_clock_resolution_us()); i++) {
    uint64_t now = pool_events_lifetimes_total();
    cr_assert_geq(now, last, "the count stepped back: %llu after %llu", (unsigned long long)now,
                  (unsigned long long)last);
    last = now;
    usleep(500);
  }
  cr_assert_gt(last, first, "the workers' allocations were not counted");
  cr_assert_eq(event_clock_resolution_us(), 1000, "the ticker never went ticked");
  workload_stop(&wl);
  event_clock_stop();
  event_clock_set_on_rate(0);
  pool_events_disable();
}

Test(trace_stress_threads, trace_and_snapshot_over_http_while_threads_allocate) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .sample_interval_ms = 5,
                             .trace_events = 512,
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  int port = gpupool_agent_port();
  cr_assert_gt(port, 0);
  workload wl;
  workload_start(&wl, 0);
  static const char *const targets[] = {"/trace", "/trace?limit=300", "/trace?since=-1&pool=stress",
                                        "/snapshot"};
  for (int d = 0; d < DOCUMENTS; d++) {
    const char *target = targets[d % 4];
    http_response r;
    cr_assert_eq(http_request("127.0.0.1", port, "GET", target, NULL, &r), 0, "GET %s", target);
    cr_assert_eq(r.status, 200, "GET %s: %d %s", target, r.status, r.body);
    if (strncmp(target, "/snapshot", 9) == 0) {
      cJSON *root = cJSON_Parse(r.body);
      cr_expect(cJSON_IsArray(cJSON_GetObjectItem(root, "pools")), "snapshot %d", d);
      cJSON_Delete(root);
    } else {
      check_document(r.body, d);
    }
    http_response_free(&r);
  }
  workload_stop(&wl);
  gpupool_agent_stop();
}
