/* Timing loops for malloc+free pairs; see pair_timer.h. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "pair_timer.h"

uint64_t bench_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
  if (n <= 0)
    return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* n pairs, then whatever the allocator queued is waited for (inside the
 * timing: it is part of the cost of a pair). 0, or -1 on a failed malloc. */
static int run_pairs(const bench_alloc *a, size_t size, void *stream, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    void *p = NULL;
    if (a->alloc(a->ctx, &p, size, stream))
      return -1;
    a->free(a->ctx, p, size, stream);
  }
  if (a->sync)
    a->sync(a->ctx, stream);
  return 0;
}

/* The untimed warm-up, in doubling batches; returns the pairs of a timed
 * batch (sized from the last warm-up batch), or 0 when a malloc failed. */
static uint64_t warm_up(const bench_alloc *a, size_t size, void *stream, const pair_plan *p) {
  uint64_t start = bench_clock_ns(), n = 1;
  double per_pair = 0;
  for (;;) {
    uint64_t t0 = bench_clock_ns();
    if (run_pairs(a, size, stream, n))
      return 0;
    uint64_t t1 = bench_clock_ns();
    per_pair = (double)(t1 - t0) / (double)n;
    if (t1 - start >= p->warmup_ns)
      break;
    n *= 2;
  }
  uint64_t batch = per_pair > 0 ? (uint64_t)((double)p->batch_ns / per_pair) : 1;
  return batch < 1 ? 1 : batch > (1u << 24) ? 1u << 24 : batch;
}

void pair_ns_side_by_side(const bench_alloc *const *a, int n, size_t size, void *stream,
                          const pair_plan *p, double *out) {
  uint64_t *batch = calloc((size_t)n, sizeof *batch);
  double *samples = calloc((size_t)n * (size_t)p->reps, sizeof *samples);
  for (int i = 0; i < n; i++)
    out[i] = NAN;
  if (!batch || !samples)
    goto out;
  for (int i = 0; i < n; i++)
    batch[i] = a[i] ? warm_up(a[i], size, stream, p) : 0;
  for (int r = 0; r < p->reps; r++)
    for (int i = 0; i < n; i++) {
      if (!batch[i])
        continue;
      uint64_t t0 = bench_clock_ns();
      if (run_pairs(a[i], size, stream, batch[i])) {
        batch[i] = 0; /* failed: NAN */
        continue;
      }
      samples[(size_t)i * (size_t)p->reps + (size_t)r] =
          (double)(bench_clock_ns() - t0) / (double)batch[i];
    }
  for (int i = 0; i < n; i++)
    if (batch[i])
      out[i] = bench_median(&samples[(size_t)i * (size_t)p->reps], p->reps);
out:
  free(batch);
  free(samples);
}

double pair_ns_one_thread(const bench_alloc *a, size_t size, void *stream, const pair_plan *p) {
  double ns;
  pair_ns_side_by_side(&a, 1, size, stream, p, &ns);
  return ns;
}

/* ---- several threads ----
 * Rounds are released by the main thread through `round` (round 0 is the
 * warm-up); each thread runs pairs until `stop`, then reports its count and
 * the time it stopped. Waiting is done with sched_yield rather than barriers
 * so that a thread that failed to start cannot hang the others. */

typedef struct mt_shared {
  const bench_alloc *a;
  size_t size;
  void *const *streams;
  int rounds;
  atomic_int round;
  atomic_int stop;
  atomic_int done;
  atomic_int aborted;
  atomic_int failed;
  uint64_t *counts;
  uint64_t *ends;
} mt_shared;

typedef struct mt_arg {
  mt_shared *s;
  int index;
} mt_arg;

static void *mt_worker(void *arg) {
  mt_arg *m = arg;
  mt_shared *s = m->s;
  const bench_alloc *a = s->a;
  void *stream = s->streams[m->index];
  for (int r = 0; r < s->rounds; r++) {
    while (atomic_load_explicit(&s->round, memory_order_acquire) < r) {
      if (atomic_load(&s->aborted))
        return NULL;
      sched_yield();
    }
    uint64_t n = 0;
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
      void *p = NULL;
      if (a->alloc(a->ctx, &p, s->size, stream)) {
        atomic_store(&s->failed, 1);
        break;
      }
      a->free(a->ctx, p, s->size, stream);
      n++;
    }
    if (a->sync)
      a->sync(a->ctx, stream);
    s->ends[m->index] = bench_clock_ns();
    s->counts[m->index] = n;
    atomic_fetch_add_explicit(&s->done, 1, memory_order_release);
  }
  return NULL;
}

double pairs_per_s_threads(const bench_alloc *a, size_t size, void *const *streams, int nthreads,
                           const pair_plan *p) {
  mt_shared s = {.a = a, .size = size, .streams = streams, .rounds = 1 + p->runs};
  atomic_init(&s.round, -1);
  atomic_init(&s.stop, 0);
  atomic_init(&s.done, 0);
  atomic_init(&s.aborted, 0);
  atomic_init(&s.failed, 0);
  pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
  mt_arg *args = calloc((size_t)nthreads, sizeof *args);
  s.counts = calloc((size_t)nthreads, sizeof *s.counts);
  s.ends = calloc((size_t)nthreads, sizeof *s.ends);
  double *samples = calloc((size_t)p->runs, sizeof *samples);
  double result = NAN;
  int started = 0;
  if (!tid || !args || !s.counts || !s.ends || !samples)
    goto out;
  for (; started < nthreads; started++) {
    args[started] = (mt_arg){&s, started};
    if (pthread_create(&tid[started], NULL, mt_worker, &args[started]) != 0) {
      atomic_store(&s.aborted, 1);
      goto out;
    }
  }
  for (int r = 0; r < s.rounds; r++) {
    atomic_store_explicit(&s.stop, 0, memory_order_relaxed);
    uint64_t t0 = bench_clock_ns();
    atomic_store_explicit(&s.round, r, memory_order_release);
    sleep_ns(r == 0 ? p->warmup_ns : p->run_ns);
    atomic_store_explicit(&s.stop, 1, memory_order_relaxed);
    while (atomic_load_explicit(&s.done, memory_order_acquire) < nthreads * (r + 1))
      sleep_ns(20000);
    if (r == 0)
      continue;
    uint64_t total = 0, end = t0;
    for (int i = 0; i < nthreads; i++) {
      total += s.counts[i];
      if (s.ends[i] > end)
        end = s.ends[i];
    }
    samples[r - 1] = end > t0 ? (double)total * 1e9 / (double)(end - t0) : NAN;
  }
  if (!atomic_load(&s.failed))
    result = bench_median(samples, p->runs);
out:
  for (int i = 0; i < started; i++)
    pthread_join(tid[i], NULL);
  free(tid);
  free(args);
  free(s.counts);
  free(s.ends);
  free(samples);
  return result;
}

double pair_ns_threads(const bench_alloc *a, size_t size, void *const *streams, int nthreads,
                       const pair_plan *p) {
  if (nthreads == 1)
    return pair_ns_one_thread(a, size, streams[0], p);
  double per_s = pairs_per_s_threads(a, size, streams, nthreads, p);
  return per_s > 0 ? 1e9 / per_s : NAN;
}

void pairs_until(const bench_alloc *a, size_t size, void *stream, unsigned (*done)(void),
                 uint64_t timeout_ns) {
  uint64_t deadline = bench_clock_ns() + timeout_ns;
  while (!done() && bench_clock_ns() < deadline) {
    for (int i = 0; i < 1000; i++) {
      void *ptr;
      if (a->alloc(a->ctx, &ptr, size, stream) != 0)
        return;
      a->free(a->ctx, ptr, size, stream);
    }
  }
}
