/* bench_events: what recording allocation events costs the hot path. ns per
 * malloc+free pair (a cache hit after the warm-up) on the host backend with
 * pool events off and on, side by side, on one thread and on N threads each
 * on its own stream (each stream has its own ring). "On" is measured twice:
 * with the exact clock (an rdtsc per event, as trace_tick_us:0) and with the
 * event clock's ticker running (the agent's default, pool/event_clock.h),
 * which publishes a shared stamp every tick once events are frequent; the
 * ticker thread's CPU time during that measurement is reported as a percent
 * of one core, with the clock mode it was in. Off, exact and ticker
 * alternate on the same pool, several rounds, and the medians are compared.
 *
 * Then the same comparison made robust to a noisy machine: events switched
 * on and off in alternating phases of a few ms while the threads run pairs
 * without stopping (the ticker running, as in the agent), the ratio on/off
 * taken per pair of adjacent phases and its median (and quartiles) printed:
 * a slow stretch of a shared machine hits both halves of a pair alike.
 * That table twice: with the loop reloading the allocator's functions and
 * arguments after every call (issue 15's figure), and holding them in
 * registers (another shape of caller, which the events' ratio depends on).
 *
 *   bench_events [--quick] [--threads N] [--capacity EVENTS] [--tick-us US]
 *   bench_events --count-pairs N on|off
 *
 * --count-pairs runs N cache-hit 512 B pairs on one thread in count_pairs,
 * with events on (ticked mode: one stamp published, no ticker, so every
 * pair is the storm's repeat) or off, and nothing else: for an instruction
 * count, `valgrind --tool=callgrind --toggle-collect='count_pairs*'` (the
 * optimiser may clone it under a suffixed name), the layout-free figure of
 * what events add to a pair (bench/README.md).
 *
 * Exit status 1 when a measurement failed. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_alloc.h"
#include "bench_format.h"
#include "gpupool/host.h"
#include "pair_timer.h"
#include "core/clock.h"
#include "pool/event_clock.h"
#include "pool/event_ring.h"
#include "pool/pool_view.h"
#include "pool/shard.h"

static const size_t sizes[] = {512, 65536, 1 << 20, 16 << 20};
#define NSIZES      (sizeof sizes / sizeof sizes[0])
#define ROUNDS      5
#define MAX_THREADS 64

typedef struct options {
  int quick, threads;
  size_t capacity;
  unsigned tick_us;
  long count_pairs; /* --count-pairs N: only that, events on or off */
  int count_events; /* its on|off */
} options;

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.threads = 8, .capacity = 65536, .tick_us = EVENT_CLOCK_DEFAULT_TICK};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      o->quick = 1;
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      o->threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--capacity") && i + 1 < argc) {
      o->capacity = (size_t)strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--tick-us") && i + 1 < argc) {
      o->tick_us = (unsigned)strtoul(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--count-pairs") && i + 2 < argc &&
               (!strcmp(argv[i + 2], "on") || !strcmp(argv[i + 2], "off"))) {
      o->count_pairs = atol(argv[i + 1]);
      o->count_events = !strcmp(argv[i + 2], "on");
      if (o->count_pairs < 1) {
        fprintf(stderr, "bench_events: --count-pairs takes at least 1 pair\n");
        return -1;
      }
      i += 2;
    } else {
      fprintf(stderr, "usage: bench_events [--quick] [--threads N] [--capacity EVENTS] "
                      "[--tick-us US]\n       bench_events --count-pairs N on|off\n");
      return -1;
    }
  }
  if (o->threads < 1 || o->threads > MAX_THREADS || o->capacity < 1 || o->tick_us < 1 ||
      o->tick_us > EVENT_CLOCK_MAX_TICK) {
    fprintf(stderr, "bench_events: --threads must be 1..%d, --capacity >= 1, --tick-us 1..%d\n",
            MAX_THREADS, EVENT_CLOCK_MAX_TICK);
    return -1;
  }
  return 0;
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
  printf("\n- one clock_stamp() (the event's timestamp, exact mode): %.1f ns; clock_realtime_ns() "
         "for comparison: %.1f ns\n",
         per_call(clock_stamp, n), per_call(clock_realtime_ns, n));
  event_clock_publish(clock_stamp()); /* ticked mode, with no ticker moving the stamp */
  double coarse = per_call(event_clock_stamp, n);
  event_clock_publish(0);
  printf("- one event_clock_stamp() in ticked mode (a load of the published stamp): %.1f ns\n",
         coarse);
  event_ring *r = event_ring_create_pool(capacity, 0);
  event_ring *full = event_ring_create_stamped(capacity);
  if (!r || !full) {
    event_ring_unref(r);
    event_ring_unref(full);
    return;
  }
  const uint64_t tf = EVENT_REC_TF(EV_ALLOC, 0);
  for (size_t i = 0; i <= event_ring_capacity(r); i++) /* touch the whole ring first */
    event_ring_push_block(r, 0, tf, 0, 4096, 4096, NULL);
  uint64_t t0 = bench_clock_ns();
  for (int i = 0; i < n; i++)
    event_ring_push_block(r, (uint64_t)i, tf, (uint64_t)i << 9, 4096, 4096, NULL);
  uint64_t t1 = bench_clock_ns();
  printf("- one event_ring_push_block() into a pool's ring of %zu events (32-byte records, the "
         "hot path's): %.1f ns\n",
         event_ring_capacity(r), (double)(t1 - t0) / n);
  pool_event ev = {.type = EV_ALLOC, .size = 4096};
  for (size_t i = 0; i <= event_ring_capacity(full); i++)
    event_ring_push(full, &ev);
  t0 = bench_clock_ns();
  for (int i = 0; i < n; i++) {
    ev.addr = (uint64_t)i;
    event_ring_push(full, &ev);
  }
  t1 = bench_clock_ns();
  printf("- one event_ring_push() into a full-layout ring (64-byte slots, as the pools used "
         "before): %.1f ns\n",
         (double)(t1 - t0) / n);
  printf("- a malloc+free pair records two events\n");
  event_ring_unref(r);
  event_ring_unref(full);
}

/* The ticker's own cost while no events come: one rate check every 50 ms. */
static void idle_ticker(unsigned tick_us, int quick) {
  if (event_clock_start(tick_us) != 0)
    return;
  int64_t cpu0 = event_clock_thread_cpu_ns();
  uint64_t t0 = bench_clock_ns();
  struct timespec pause = {quick ? 0 : 1, quick ? 250000000 : 0};
  nanosleep(&pause, NULL);
  int64_t cpu1 = event_clock_thread_cpu_ns();
  uint64_t t1 = bench_clock_ns();
  printf("- the ticker thread with no events (exact mode, a rate check every %d ms): %.2f %% of "
         "one core\n",
         EVENT_CLOCK_CHECK_NS / 1000000, 100.0 * (double)(cpu1 - cpu0) / (double)(t1 - t0));
  event_clock_stop();
}

typedef struct result {
  double off, exact, ticker; /* ns per pair, medians */
  double ticker_cpu;         /* the ticker thread's CPU, % of one core (median) */
  int ticked_rounds;         /* rounds whose ticker measurement started in ticked mode */
  uint64_t switches;         /* mode switches during the ticker measurements */
  double late_ms;            /* the latest tick, beyond its time (max over rounds) */
  double records_exact;      /* ring records a pair with exact stamps (last round) */
  double records_ticked;     /* the same in ticked mode */
} result;

#define RECORD_PAIRS 10000

/* n cache-hit pairs of size bytes on stream, one after the other; -1 when
 * an allocation failed. Inline: count_pairs is this loop and nothing else. */
static inline int run_pairs(const bench_alloc *a, size_t size, void *stream, long n) {
  for (long i = 0; i < n; i++) {
    void *p;
    if (a->alloc(a->ctx, &p, size, stream) != 0)
      return -1;
    a->free(a->ctx, p, size, stream);
  }
  return 0;
}

/* Ring records RECORD_PAIRS pairs on stream write, a pair's share: 2 with
 * exact stamps; with ticked stamps 1 where the allocation's record stands
 * for the free too (a free in its allocation's tick writes none), and 1/128
 * where the same block's lifetimes in one tick repeat a record (up to 128
 * lifetimes a record). -1 when an allocation failed. */
static double records_a_pair(const bench_alloc *a, size_t size, void *stream) {
  uint64_t before = pool_events_recorded_total();
  if (run_pairs(a, size, stream, RECORD_PAIRS) != 0)
    return -1;
  return (double)(pool_events_recorded_total() - before) / RECORD_PAIRS;
}

/* Medians of ROUNDS alternating off / on with the exact clock / on with the
 * ticker measurements. */
static int compare(const bench_alloc *a, size_t size, void *const *streams, int threads,
                   const pair_plan *plan, const options *o, result *res) {
  double v_off[ROUNDS], v_exact[ROUNDS], v_ticker[ROUNDS], cpu[ROUNDS];
  res->ticked_rounds = 0;
  res->switches = 0;
  res->late_ms = 0;
  for (int r = 0; r < ROUNDS; r++) {
    event_clock_stop();
    pool_events_disable();
    v_off[r] = pair_ns_threads(a, size, streams, threads, plan);
    pool_events_enable(o->capacity);
    v_exact[r] = pair_ns_threads(a, size, streams, threads, plan);
    res->records_exact = records_a_pair(a, size, streams[0]);
    if (event_clock_start(o->tick_us) != 0)
      return -1;
    /* until the ticker has switched to ticked mode (EVENT_CLOCK_ON_RATE
     * events/s over one 50 ms check); at most 2 s: the round then says how
     * many rounds were ticked */
    pairs_until(a, size, streams[0], event_clock_resolution_us, 2000000000ull);
    res->ticked_rounds += event_clock_resolution_us() != 0;
    uint64_t sw0 = event_clock_switches();
    int64_t cpu0 = event_clock_thread_cpu_ns();
    uint64_t t0 = bench_clock_ns();
    v_ticker[r] = pair_ns_threads(a, size, streams, threads, plan);
    uint64_t t1 = bench_clock_ns();
    int64_t cpu1 = event_clock_thread_cpu_ns();
    cpu[r] = 100.0 * (double)(cpu1 - cpu0) / (double)(t1 - t0);
    res->switches += event_clock_switches() - sw0;
    double late = (double)event_clock_max_late_ns() / 1e6;
    res->late_ms = late > res->late_ms ? late : res->late_ms;
    res->records_ticked = records_a_pair(a, size, streams[0]);
    event_clock_stop();
    pool_events_disable();
    if (isnan(v_off[r]) || isnan(v_exact[r]) || isnan(v_ticker[r]))
      return -1;
  }
  res->off = bench_median(v_off, ROUNDS);
  res->exact = bench_median(v_exact, ROUNDS);
  res->ticker = bench_median(v_ticker, ROUNDS);
  res->ticker_cpu = bench_median(cpu, ROUNDS);
  return 0;
}

/* ---- on / off in alternating phases ---- */

typedef struct alt_worker {
  _Alignas(64) _Atomic uint64_t pairs;
  pthread_t thread;
  const bench_alloc *a;
  size_t size;
  void *stream;
  _Atomic int *stop;
  int failed;
  int in_registers; /* the loop's shape: alt_loop_in_registers */
} alt_worker;

/* alt_loop with the allocator's functions and arguments in locals, which
 * the compiler keeps in registers across the calls, where alt_loop reloads
 * them through w after every call (a call may change *w, as far as the
 * compiler knows). The same pairs; on the dev VM the events' ratio
 * measured 0.01-0.02 lower in this shape, with the same events-off time
 * (bench/README.md, the forty-third session). */
static void *alt_loop_in_registers(alt_worker *w) {
  int (*alloc)(void *, void **, size_t, void *) = w->a->alloc;
  void (*release)(void *, void *, size_t, void *) = w->a->free;
  void *ctx = w->a->ctx, *stream = w->stream;
  size_t size = w->size;
  uint64_t n = 0;
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    for (int i = 0; i < 64; i++) {
      void *p;
      if (alloc(ctx, &p, size, stream) != 0) {
        w->failed = 1;
        return NULL;
      }
      release(ctx, p, size, stream);
    }
    n += 64;
    atomic_store_explicit(&w->pairs, n, memory_order_relaxed);
  }
  return NULL;
}

static void *alt_loop(void *arg) {
  alt_worker *w = arg;
  if (w->in_registers)
    return alt_loop_in_registers(w);
  uint64_t n = 0;
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    for (int i = 0; i < 64; i++) {
      void *p;
      if (w->a->alloc(w->a->ctx, &p, w->size, w->stream) != 0) {
        w->failed = 1;
        return NULL;
      }
      w->a->free(w->a->ctx, p, w->size, w->stream);
    }
    n += 64;
    atomic_store_explicit(&w->pairs, n, memory_order_relaxed);
  }
  return NULL;
}

static uint64_t alt_total(alt_worker *w, int threads) {
  uint64_t n = 0;
  for (int i = 0; i < threads; i++)
    n += atomic_load_explicit(&w[i].pairs, memory_order_relaxed);
  return n;
}

static void sleep_ns(uint64_t ns) {
  struct timespec t = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  nanosleep(&t, NULL);
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* ns per pair with events off and on (medians over phases) and the ratio
 * on/off per pair of adjacent phases: q[0..2] = 25th, 50th, 75th
 * percentiles; *ticked: the phases with events on that began with the
 * clock ticked (of *got). Events are switched by pool_events_switch, which
 * the shards see at their next event (their rings stay installed). */
static int alternate(const bench_alloc *a, size_t size, void *const *streams, int threads,
                     int in_registers, const options *o, int phases, uint64_t phase_ns, double *off,
                     double *on, double q[3], int *ticked, int *got_out) {
  alt_worker w[MAX_THREADS];
  _Atomic int stop;
  atomic_init(&stop, 0);
  pool_events_enable(o->capacity);
  if (event_clock_start(o->tick_us) != 0)
    return -1;
  int started = 0, failed = 0;
  for (; started < threads; started++) {
    w[started] = (alt_worker){.a = a,
                              .size = size,
                              .stream = streams[started],
                              .stop = &stop,
                              .in_registers = in_registers};
    atomic_init(&w[started].pairs, 0);
    if (pthread_create(&w[started].thread, NULL, alt_loop, &w[started]) != 0)
      break;
  }
  double *ratio = malloc((size_t)phases * sizeof *ratio);
  double *ns[2] = {malloc((size_t)phases * sizeof(double)),
                   malloc((size_t)phases * sizeof(double))};
  int got = 0, on_ticked = 0;
  if (started == threads && ratio && ns[0] && ns[1]) {
    sleep_ns(o->quick ? 50000000 : 200000000); /* warm-up: caches full, the ticker ticked */
    for (int ph = 0, tries = 0; got < phases && tries < 4 * phases; ph++, tries++) {
      double v[2];
      int ticked_now = 0;
      for (int k = 0; k < 2; k++) {
        int events = ph & 1 ? k : !k; /* on first, then off first, in turn */
        pool_events_switch(events ? o->capacity : 0);
        sleep_ns(200000); /* a switch is seen at the next event; this lets it settle */
        if (events)
          ticked_now = event_clock_resolution_us() != 0;
        uint64_t p0 = alt_total(w, threads), t0 = bench_clock_ns();
        sleep_ns(phase_ns);
        uint64_t p1 = alt_total(w, threads), t1 = bench_clock_ns();
        v[events] = p1 > p0 ? (double)(t1 - t0) / (double)(p1 - p0) : NAN;
      }
      if (isnan(v[0]) || isnan(v[1])) /* no pair ran in a phase: a descheduled stretch */
        continue;
      ns[0][got] = v[0];
      ns[1][got] = v[1];
      ratio[got++] = v[1] / v[0];
      on_ticked += ticked_now;
    }
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < started; i++) {
    pthread_join(w[i].thread, NULL);
    failed |= w[i].failed;
  }
  event_clock_stop();
  pool_events_disable();
  if (got > 0 && !failed && started == threads) {
    qsort(ratio, (size_t)got, sizeof *ratio, cmp_double);
    q[0] = ratio[got / 4];
    q[1] = ratio[got / 2];
    q[2] = ratio[(3 * got) / 4];
    *off = bench_median(ns[0], got);
    *on = bench_median(ns[1], got);
    *ticked = on_ticked;
    *got_out = got;
  }
  int rc = got > 0 && !failed && started == threads ? 0 : -1;
  free(ratio);
  free(ns[0]);
  free(ns[1]);
  return rc;
}

/* A phase of N threads on `cores` online cores (sysconf's answer; -1 where
 * unknown), ns: 10 ms, longer than a time slice, times the threads each core
 * runs in turn where they outnumber the cores, so that a phase sees every
 * thread run (the scheduler's turn of 8 threads on 2 cores is 4 slices, and
 * phases shorter than it spread the ratios by 0.3). */
static uint64_t threads_phase_ns(int threads, long cores) {
  uint64_t turns = cores > 0 && threads > cores ? (uint64_t)((threads + cores - 1) / cores) : 1;
  return 10000000 * turns;
}

/* The alternating table in one loop shape: alt_loop's (in_registers 0,
 * issue 15's figure) or alt_loop_in_registers'. */
static int alternating_table(const bench_alloc *a, void *const *streams, const options *o,
                             int in_registers) {
  const int phases = o->quick ? 40 : 200;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN); /* asked once: the note and the phases */
  if (in_registers) {
    printf("\n### The same, the loop holding the allocator's functions and arguments in "
           "registers\n\n");
    printf("- the table above reloads them through its worker struct after every call; here "
           "they are locals: the same pairs and phases, another shape of caller\n\n");
  } else {
    printf("\n### Events on (ticker) / off in alternating phases\n\n");
    printf("- the threads run pairs without stopping; events are switched on and off every phase "
           "(2 ms on one thread, %.0f ms on %d: longer than a time slice, times the threads a core "
           "runs in turn where they outnumber the %ld online cores), %d pairs of phases, the order "
           "within a pair alternating; on/off is taken per pair of adjacent phases: its median and "
           "quartiles\n",
           (double)threads_phase_ns(o->threads, cores) / 1e6, o->threads, cores, phases);
    printf("- clock: the phases with events on that began with the clock ticked, of those "
           "measured (the rest took exact stamps: a record per event, no repeats)\n");
    printf("- the loop reloads the allocator's functions and arguments through its worker struct "
           "after every call (a call may change it, as far as the compiler knows)\n");
    printf("- issue 15's target: on/off at most 1.05 at every size, 1 and %d threads\n\n",
           o->threads);
  }
  printf("| size | threads | events off ns | events on ns | on/off (median) | q25 | q75 | clock "
         "|\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|---|\n");
  int failed = 0;
  const int thread_counts[2] = {1, o->threads};
  for (int t = 0; t < (o->threads > 1 ? 2 : 1); t++) {
    for (size_t s = 0; s < NSIZES; s++) {
      char size[32];
      bench_bytes(sizes[s], size, sizeof size);
      double off = NAN, on = NAN, q[3];
      int ticked = 0, got = 0;
      uint64_t phase_ns =
          thread_counts[t] == 1 ? 2000000 : threads_phase_ns(thread_counts[t], cores);
      if (alternate(a, sizes[s], streams, thread_counts[t], in_registers, o, phases, phase_ns, &off,
                    &on, q, &ticked, &got) != 0) {
        printf("| %s | %d | failed | | | | | |\n", size, thread_counts[t]);
        failed = 1;
        continue;
      }
      printf("| %s | %d | %.1f | %.1f | %.3f | %.3f | %.3f | ticked %d/%d |\n", size,
             thread_counts[t], off, on, q[1], q[0], q[2], ticked, got);
      fflush(stdout);
    }
  }
  return failed;
}

/* --count-pairs: n pairs and nothing else, the function callgrind counts
 * (--toggle-collect='count_pairs*'); -1 when an allocation failed. */
static __attribute__((noinline)) int count_pairs(const bench_alloc *a, size_t size, void *stream,
                                                 long n) {
  return run_pairs(a, size, stream, n);
}

/* --count-pairs N on|off: a warm-up outside count_pairs, so that callgrind
 * counts none of it (the block cached, with events on its record written
 * and the stamp published), then N pairs in it. */
static int count_only(const bench_alloc *a, void *stream, const options *o) {
  const size_t size = 512;
  if (o->count_events) {
    pool_events_enable(o->capacity);
    clock_stamp_init();
    event_clock_publish(clock_stamp()); /* ticked mode, the stamp standing still */
  }
  if (run_pairs(a, size, stream, 1000) != 0)
    return -1;
  uint64_t before = pool_events_recorded_total();
  if (count_pairs(a, size, stream, o->count_pairs) != 0)
    return -1;
  printf("bench_events --count-pairs: %ld pairs of %zu B, events %s, %llu records written\n",
         o->count_pairs, size, o->count_events ? "on (ticked)" : "off",
         (unsigned long long)(pool_events_recorded_total() - before));
  event_clock_publish(0);
  pool_events_disable();
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
  if (o.count_pairs) { /* one thread, one stream */
    void *stream = gpupool_host_stream_create();
    int rc = count_only(&a, stream, &o);
    gpupool_host_stream_destroy(stream);
    bench_alloc_destroy(&a);
    return rc != 0;
  }
  void *streams[MAX_THREADS];
  for (int i = 0; i < o.threads; i++)
    streams[i] = gpupool_host_stream_create();

  printf("## bench_events%s\n\n", o.quick ? " (--quick: few repetitions)" : "");
  printf("- gpupool %s, host backend, bfc; events ring of %zu per stream when on\n",
         GPUPOOL_VERSION, o.capacity);
  printf("- ns per malloc+free pair (cache hits), median of %d rounds, each measuring off, on "
         "with the exact clock, on with the ticker, in turn\n",
         ROUNDS);
  printf("- %d threads: the process's ns per pair (1e9 / total pairs per second), each thread "
         "on its own stream\n",
         o.threads);
  printf("- exact clock: an rdtsc per event (trace_tick_us:0); ticker: the agent's default, a "
         "stamp published every %u us while events are frequent (pool/event_clock.h)\n",
         o.tick_us);
  printf("- ticker CPU: the ticker thread's CPU time during the ticker measurement, %% of one "
         "core; clock: the ticker's mode when the measurement started (rounds ticked / rounds) "
         "and its mode switches during the measurements (the threaded measurement ends with "
         "threads stopping: an idle tail that may switch it off); late tick: the most a tick "
         "was published after its time (a stamp is that much staler than the tick), max over "
         "rounds; records a pair: ring records %d pairs on one stream wrote, per pair, with each "
         "clock (a free in its allocation's tick writes nothing: the allocation's record "
         "stands for both, and the same block's next lifetimes in that tick are repeats of that "
         "record, up to 128 lifetimes a record: pool/event_ring.h)\n\n",
         RECORD_PAIRS);
  printf(
      "| size | threads | events off ns | on, exact clock ns | on, ticker ns | added ns, exact | "
      "added ns, ticker | ticker/off | ticker CPU | clock | late tick | records a pair, exact, "
      "ticker |\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n");
  int failed = 0;
  const int thread_counts[2] = {1, o.threads};
  for (int t = 0; t < (o.threads > 1 ? 2 : 1); t++) {
    for (size_t s = 0; s < NSIZES; s++) {
      char size[32];
      bench_bytes(sizes[s], size, sizeof size);
      result r;
      if (compare(&a, sizes[s], streams, thread_counts[t], &plan, &o, &r) != 0) {
        printf("| %s | %d | failed | failed | failed | | | | | | | |\n", size, thread_counts[t]);
        failed = 1;
        continue;
      }
      printf("| %s | %d | %.1f | %.1f | %.1f | %+.1f | %+.1f | %.3f | %.2f %% | %s %d/%d, "
             "%llu switches | %.2f ms | %.2f, %.3f |\n",
             size, thread_counts[t], r.off, r.exact, r.ticker, r.exact - r.off, r.ticker - r.off,
             r.ticker / r.off, r.ticker_cpu, r.ticked_rounds == ROUNDS ? "ticked" : "exact",
             r.ticked_rounds, ROUNDS, (unsigned long long)r.switches, r.late_ms, r.records_exact,
             r.records_ticked);
      fflush(stdout);
    }
  }
  failed |= alternating_table(&a, streams, &o, 0);
  failed |= alternating_table(&a, streams, &o, 1);
  breakdown(o.capacity, o.quick);
  idle_ticker(o.tick_us, o.quick);
  for (int i = 0; i < o.threads; i++)
    gpupool_host_stream_destroy(streams[i]);
  bench_alloc_destroy(&a);
  return failed;
}
