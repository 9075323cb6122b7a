/* The host backend from several threads at once (run under TSan in CI):
 * allocation and free, fault injection counts, simulated streams. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "gpupool/host.h"
#include "pool/backend.h"

#define MiB     ((size_t)1 << 20)
#define THREADS 4

static backend *make_host(size_t capacity, unsigned every_n, double rate, uint64_t seed) {
  host_backend_config cfg = {
      .capacity = capacity, .fail_every_n = every_n, .fail_rate = rate, .fail_seed = seed};
  backend *b = NULL;
  cr_assert_eq(backend_host_create(&cfg, &b), GPUPOOL_OK);
  return b;
}

static void run_threads(void *(*fn)(void *), void *args, size_t arg_size) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, fn, (char *)args + i * arg_size), 0);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
}

static uint64_t next_random(uint64_t *state) { /* xorshift64 */
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

typedef struct churn_arg {
  backend *b;
  int id;
  int corrupted; /* a live segment whose pattern changed */
  int ooms;
} churn_arg;

enum { LIVE = 8, ROUNDS = 600 };

/* Each thread keeps up to LIVE segments, each filled with its own byte, and
 * checks the byte on free: overlapping segments would show up here. */
static void *churn(void *p) {
  churn_arg *a = p;
  backend *b = a->b;
  unsigned char *seg[LIVE] = {0};
  size_t size[LIVE] = {0};
  uint64_t rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(a->id + 1);
  for (int r = 0; r < ROUNDS; r++) {
    int i = (int)(next_random(&rng) % LIVE);
    if (seg[i]) {
      unsigned char want = (unsigned char)(a->id * LIVE + i);
      if (seg[i][0] != want || seg[i][size[i] / 2] != want || seg[i][size[i] - 1] != want)
        a->corrupted++;
      b->ops->free(b, seg[i], size[i], NULL);
      seg[i] = NULL;
    } else {
      size[i] = 4096 + (size_t)(next_random(&rng) % MiB);
      if (b->ops->alloc(b, (void **)&seg[i], size[i], NULL) != GPUPOOL_OK) {
        a->ooms++;
        seg[i] = NULL;
        continue;
      }
      unsigned char v = (unsigned char)(a->id * LIVE + i);
      seg[i][0] = seg[i][size[i] / 2] = seg[i][size[i] - 1] = v;
    }
  }
  for (int i = 0; i < LIVE; i++)
    if (seg[i])
      b->ops->free(b, seg[i], size[i], NULL);
  return NULL;
}

Test(backend_host_threads, alloc_and_free_from_several_threads) {
  /* 16 MiB for 4 threads x up to 8 segments of up to 1 MiB: some OOMs. */
  backend *b = make_host(16 * MiB, 0, 0, 0);
  churn_arg args[THREADS];
  for (int i = 0; i < THREADS; i++)
    args[i] = (churn_arg){.b = b, .id = i};
  run_threads(churn, args, sizeof args[0]);
  for (int i = 0; i < THREADS; i++)
    cr_assert_eq(args[i].corrupted, 0, "thread %d saw overlapping segments", i);
  size_t free_b, total;
  cr_assert_eq(b->ops->mem_info(b, &free_b, &total), GPUPOOL_OK);
  cr_assert_eq(free_b, total, "every byte came back");
  b->ops->destroy(b);
}

typedef struct attempt_arg {
  backend *b;
  int attempts;
  int failures;
} attempt_arg;

static void *attempt(void *p) {
  attempt_arg *a = p;
  for (int k = 0; k < a->attempts; k++) {
    void *ptr = NULL;
    if (a->b->ops->alloc(a->b, &ptr, 4096, NULL) == GPUPOOL_OK)
      a->b->ops->free(a->b, ptr, 4096, NULL);
    else
      a->failures++;
  }
  return NULL;
}

static int failures_in_threads(backend *b, int per_thread) {
  attempt_arg args[THREADS];
  for (int i = 0; i < THREADS; i++)
    args[i] = (attempt_arg){.b = b, .attempts = per_thread};
  run_threads(attempt, args, sizeof args[0]);
  int total = 0;
  for (int i = 0; i < THREADS; i++)
    total += args[i].failures;
  return total;
}

Test(backend_host_threads, every_nth_counts_all_threads) {
  backend *b = make_host(64 * MiB, 7, 0, 0);
  cr_assert_eq(failures_in_threads(b, 700), THREADS * 700 / 7);
  b->ops->destroy(b);
}

Test(backend_host_threads, seeded_rate_does_not_depend_on_interleaving) {
  /* The decision for attempt k depends on (seed, k) only. */
  backend *one = make_host(64 * MiB, 0, 0.25, 1234);
  attempt_arg single = {.b = one, .attempts = THREADS * 500};
  attempt(&single);
  backend *many = make_host(64 * MiB, 0, 0.25, 1234);
  cr_assert_eq(failures_in_threads(many, 500), single.failures);
  cr_assert_gt(single.failures, 0);
  one->ops->destroy(one);
  many->ops->destroy(many);
}

typedef struct stream_arg {
  backend *b;
  gpupool_host_stream *s;
  atomic_int *stop;
  int id;
  int bad; /* an event seen complete before its work was */
} stream_arg;

/* Producer: enqueues and completes work in a loop. */
static void *stream_producer(void *p) {
  stream_arg *a = p;
  while (!atomic_load(a->stop)) {
    gpupool_host_stream_enqueue(a->s);
    gpupool_host_stream_complete(a->s);
  }
  return NULL;
}

/* Recorders: each has a stream of its own (work only it enqueues, so it knows
 * what must be pending) and also records on the shared, busy stream. */
static void *stream_recorder(void *p) {
  stream_arg *a = p;
  backend *b = a->b;
  gpupool_host_stream *own = gpupool_host_stream_create();
  for (int r = 0; r < 2000; r++) {
    void *shared_event = NULL, *own_event = NULL;
    gpupool_host_stream_enqueue(own);
    if (b->ops->event_record(b, own, &own_event) != GPUPOOL_OK)
      a->bad++;
    if (b->ops->event_record(b, a->s, &shared_event) != GPUPOOL_OK)
      a->bad++;
    if (own_event && b->ops->event_query(b, own_event) != 0)
      a->bad++;
    if (shared_event)
      (void)b->ops->event_query(b, shared_event);
    gpupool_host_stream_complete(own);
    if (own_event && b->ops->event_query(b, own_event) != 1)
      a->bad++;
    b->ops->event_destroy(b, own_event);
    b->ops->event_destroy(b, shared_event);
  }
  gpupool_host_stream_destroy(own);
  return NULL;
}

static void *stream_role(void *p) {
  stream_arg *a = p;
  return a->id == 0 ? stream_producer(p) : stream_recorder(p);
}

Test(backend_host_threads, streams_and_events_from_several_threads) {
  backend *b = make_host(MiB, 0, 0, 0);
  gpupool_host_stream *shared = gpupool_host_stream_create();
  atomic_int stop = 0;
  stream_arg args[THREADS];
  for (int i = 0; i < THREADS; i++)
    args[i] = (stream_arg){.b = b, .s = shared, .stop = &stop, .id = i};

  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, stream_role, &args[i]), 0);
  for (int i = 1; i < THREADS; i++)
    pthread_join(t[i], NULL);
  atomic_store(&stop, 1);
  pthread_join(t[0], NULL);

  for (int i = 1; i < THREADS; i++)
    cr_assert_eq(args[i].bad, 0, "recorder %d saw a wrong event state", i);
  gpupool_host_stream_enqueue(shared);
  void *e = NULL;
  cr_assert_eq(b->ops->event_record(b, shared, &e), GPUPOOL_OK);
  cr_assert_eq(b->ops->event_query(b, e), 0);
  cr_assert_eq(b->ops->synchronize(b), GPUPOOL_OK);
  cr_assert_eq(b->ops->event_query(b, e), 1);
  b->ops->event_destroy(b, e);
  gpupool_host_stream_destroy(shared);
  b->ops->destroy(b);
}
