/* bench_events: what recording allocation events costs the hot path. ns per
 * malloc+free pair (a cache hit after the warm-up) on the host backend with
 * pool events off and on, side by side, on one thread and on N threads each
 * on its own stream (each stream has its own ring). Off and on alternate on
 * the same pool, several rounds, and the medians are compared.
 *
 *   bench_events [--quick] [--threads N] [--capacity EVENTS]
 *
 * Exit status 1 when a measurement failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_alloc.h"
#include "bench_format.h"
#include "gpupool/host.h"
#include "pair_timer.h"
#include "pool/clock.h"
#include "pool/event_ring.h"
#include "pool/pool_view.h"

static const size_t sizes[] = {512, 65536, 1 << 20, 16 << 20};
#define NSIZES      (sizeof sizes / sizeof sizes[0])
#define ROUNDS      5
#define MAX_THREADS 64

typedef struct options {
  int quick, threads;
  size_t capacity;
} options;

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.threads = 8, .capacity = 65536};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      o->quick = 1;
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      o->threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--capacity") && i + 1 < argc) {
      o->capacity = (size_t)strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: bench_events [--quick] [--threads N] [--capacity EVENTS]\n");
      return -1;
    }
  }
  if (o->threads < 1 || o->threads > MAX_THREADS || o->capacity < 1) {
    fprintf(stderr, "bench_events: --threads must be 1..%d, --capacity >= 1\n", MAX_THREADS);
    return -1;
  }
  return 0;
}

/* One measurement: ns per pair on one thread, or (threads > 1) ns per pair
 * of the whole process, 1e9 / total pairs per second. */
static double measure(const bench_alloc *a, size_t size, void *const *streams, int threads,
                      const pair_plan *plan) {
  if (threads == 1)
    return pair_ns_one_thread(a, size, streams[0], plan);
  double per_s = pairs_per_s_threads(a, size, streams, threads, plan);
  return per_s > 0 ? 1e9 / per_s : NAN;
}

/* ns per call of f, over n calls. */
static double per_call(uint64_t (*f)(void), int n) {
  volatile uint64_t sink = 0;
  uint64_t t0 = bench_clock_ns();
  for (int i = 0; i < n; i++)
    sink += f();
  (void)sink;
  return (double)(bench_clock_ns() - t0) / n;
}

/* Where the time goes: the parts of recording one event, alone. */
static void breakdown(size_t capacity, int quick) {
  const int n = quick ? 1000000 : 10000000;
  clock_stamp_init();
  printf("\n- one clock_stamp() (the event's timestamp): %.1f ns; clock_realtime_ns() for "
         "comparison: %.1f ns\n",
         per_call(clock_stamp, n), per_call(clock_realtime_ns, n));
  event_ring *r = event_ring_create_stamped(capacity);
  if (!r)
    return;
  pool_event ev = {.type = EV_ALLOC, .size = 4096};
  for (size_t i = 0; i < event_ring_capacity(r); i++) /* touch the whole ring first */
    event_ring_push(r, &ev);
  uint64_t t0 = bench_clock_ns();
  for (int i = 0; i < n; i++) {
    ev.addr = (uint64_t)i;
    event_ring_push(r, &ev);
  }
  uint64_t t1 = bench_clock_ns();
  printf("- one event_ring_push() into a ring of %zu: %.1f ns\n", event_ring_capacity(r),
         (double)(t1 - t0) / n);
  printf("- a malloc+free pair records two events\n");
  event_ring_unref(r);
}

/* Medians of ROUNDS alternating off/on measurements. */
static int compare(const bench_alloc *a, size_t size, void *const *streams, int threads,
                   const pair_plan *plan, size_t capacity, double *off, double *on) {
  double v_off[ROUNDS], v_on[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    pool_events_disable();
    v_off[r] = measure(a, size, streams, threads, plan);
    pool_events_enable(capacity);
    v_on[r] = measure(a, size, streams, threads, plan);
    pool_events_disable();
    if (isnan(v_off[r]) || isnan(v_on[r]))
      return -1;
  }
  *off = bench_median(v_off, ROUNDS);
  *on = bench_median(v_on, ROUNDS);
  return 0;
}

int main(int argc, char **argv) {
  options o;
  if (parse_args(argc, argv, &o) != 0)
    return 2;
  const pair_plan plan = o.quick ? (pair_plan){.warmup_ns = 2000000,
                                               .batch_ns = 2000000,
                                               .reps = 3,
                                               .run_ns = 10000000,
                                               .runs = 1}
                                 : (pair_plan){.warmup_ns = 10000000,
                                               .batch_ns = 10000000,
                                               .reps = 9,
                                               .run_ns = 50000000,
                                               .runs = 3};
  bench_alloc a;
  char why[256];
  if (bench_alloc_gpupool(&a, "gpupool bfc", GPUPOOL_BACKEND_HOST, GPUPOOL_STRATEGY_BFC, NULL,
                          (size_t)8 << 30, why, sizeof why) != 0) {
    fprintf(stderr, "bench_events: %s\n", why);
    return 1;
  }
  void *streams[MAX_THREADS];
  for (int i = 0; i < o.threads; i++)
    streams[i] = gpupool_host_stream_create();

  printf("## bench_events%s\n\n", o.quick ? " (--quick: few repetitions)" : "");
  printf("- gpupool %s, host backend, bfc; events ring of %zu per stream when on\n",
         GPUPOOL_VERSION, o.capacity);
  printf("- ns per malloc+free pair (cache hits), median of %d alternating off/on rounds\n",
         ROUNDS);
  printf("- %d threads: the process's ns per pair (1e9 / total pairs per second), each thread "
         "on its own stream\n\n",
         o.threads);
  printf("| size | threads | events off ns | events on ns | on/off | added ns |\n");
  printf("|---:|---:|---:|---:|---:|---:|\n");
  int failed = 0;
  const int thread_counts[2] = {1, o.threads};
  for (int t = 0; t < (o.threads > 1 ? 2 : 1); t++) {
    for (size_t s = 0; s < NSIZES; s++) {
      char size[32];
      bench_bytes(sizes[s], size, sizeof size);
      double off, on;
      if (compare(&a, sizes[s], streams, thread_counts[t], &plan, o.capacity, &off, &on) != 0) {
        printf("| %s | %d | failed | failed | | |\n", size, thread_counts[t]);
        failed = 1;
        continue;
      }
      printf("| %s | %d | %.1f | %.1f | %.3f | %+.1f |\n", size, thread_counts[t], off, on,
             on / off, on - off);
      fflush(stdout);
    }
  }
  breakdown(o.capacity, o.quick);
  for (int i = 0; i < o.threads; i++)
    gpupool_host_stream_destroy(streams[i]);
  bench_alloc_destroy(&a);
  return failed;
}
