/* The event clock (pool/event_clock.h): exact and ticked stamps, per-ring
 * order across mode switches, the ticker's switching decisions
 * (driven with made-up event counts and times) and its thread's life cycle.
 * No test depends on how fast anything runs: waits on the real ticker are
 * for a state, with a deadline only as a safety net. */
#include <criterion/criterion.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/pool_check.h"
#include "core/clock.h"
#include "pool/event_clock.h"
#include "pool/pool_internal.h"
#include "pool/pool_view.h"

#define MS 1000000ull /* ns */

static void exact(void) {
  clock_stamp_init();
  event_clock_publish(0);
}

TestSuite(event_clock, .init = exact);

Test(event_clock, coarse_mode_returns_the_published_stamp) {
  event_clock_publish(123456789);
  cr_assert_eq(event_clock_stamp(), 123456789);
  cr_assert_eq(event_clock_stamp(), 123456789, "the same until the next tick");
  event_clock_publish(123456790);
  cr_assert_eq(event_clock_stamp(), 123456790);
  event_clock_publish(0);
}

Test(event_clock, exact_mode_takes_a_fresh_stamp) {
  uint64_t before = clock_stamp();
  uint64_t t = event_clock_stamp();
  uint64_t after = clock_stamp();
  cr_assert_leq(before, t);
  cr_assert_leq(t, after);
}

Test(event_clock, ring_stamps_never_go_back_across_mode_switches) {
  event_ring *r = event_ring_create_stamped(64);
  uint64_t start = clock_stamp(), last = 0;
  uint64_t t = event_clock_ring_stamp(r); /* exact */
  cr_assert_geq(t, start);
  last = t;
  event_clock_publish(start); /* ticked, with a stamp older than the last event's */
  t = event_clock_ring_stamp(r);
  cr_assert_eq(t, last, "an older coarse stamp does not take the ring back");
  event_clock_publish(0); /* exact again: later than the coarse stamp */
  t = event_clock_ring_stamp(r);
  cr_assert_geq(t, last);
  last = t;
  event_clock_publish(last + 1000000000000ull); /* a coarse stamp ahead of the clock */
  t = event_clock_ring_stamp(r);
  cr_assert_eq(t, last + 1000000000000ull, "coarse stamps are taken as published");
  last = t;
  event_clock_publish(0); /* exact, now behind the ring's last stamp */
  for (int i = 0; i < 100; i++) {
    t = event_clock_ring_stamp(r);
    cr_assert_geq(t, last);
    last = t;
  }
  event_ring_unref(r);
}

/* Events of a pool through its ring while the mode switches every few
 * events, coarse stamps lagging: the ring keeps their exact order, each
 * event has the stamp of its mode (a block event takes the stamp as it
 * comes: a ring's times may step back where the mode switches, and the
 * readers that merge rings keep each ring's order), and exact stamps never
 * decrease. */
Test(event_clock, pool_events_keep_their_order_across_mode_switches) {
  pool_events_enable(4096);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * PC_MiB, NULL);
  uint64_t old = clock_stamp();
  static int coarse[1000];
  for (int i = 0; i < 1000; i++) {
    if (i % 7 == 0)
      event_clock_publish(i % 14 == 0 ? old : 0);
    coarse[i] = i % 14 < 7;
    void *x;
    cr_assert_eq(gpupool_malloc(p, &x, 4096 + (size_t)i, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  }
  event_clock_publish(0);
  event_ring *rings[4];
  size_t n = pool_event_rings_at(p, rings, NULL, 4);
  cr_assert_eq(n, 1);
  static pool_event ev[4096];
  uint64_t cursor = 0, skipped = 0;
  size_t got = event_ring_read(rings[0], &cursor, ev, 2048, &skipped);
  cr_assert_eq(skipped, 0);
  size_t k = 0;
  while (k < got && ev[k].type != EV_ALLOC) /* the first segment's allocation */
    k++;
  /* A pair in one tick of the published stamp is one record (the free
   * writes none); an exact pair is two. */
  size_t records = 0;
  for (int i = 0; i < 1000; i++)
    records += coarse[i] ? 1 : 2;
  cr_assert_eq(got - k, records, "one record a coarse pair, two an exact one");
  got = event_ring_expand(ev, got);
  cr_assert_eq(got - k, 2000, "an alloc and a free event each time");
  uint64_t last_exact = 0, old_ns = clock_stamp_to_ns(old);
  for (int i = 0; i < 1000; i++) {
    for (int j = 0; j < 2; j++) {
      const pool_event *e = &ev[k + 2 * (size_t)i + (size_t)j];
      cr_assert_eq(e->type, j ? EV_FREE : EV_ALLOC, "event %d.%d in order", i, j);
      cr_assert_eq(e->requested, 4096 + (uint64_t)i, "event %d.%d in order", i, j);
      if (coarse[i]) {
        cr_assert_eq(e->ts_ns, old_ns, "event %d.%d takes the published stamp", i, j);
      } else {
        cr_assert_geq(e->ts_ns, last_exact, "exact event %d.%d steps back", i, j);
        cr_assert_gt(e->ts_ns, old_ns);
        last_exact = e->ts_ns;
      }
    }
  }
  event_ring_unref(rings[0]);
  gpupool_destroy(p);
  pool_events_disable();
}

/* Off below a quarter of the threshold keeps a rate near it from
 * flapping. */
Test(event_clock, meter_switches_on_at_the_threshold_and_off_below_a_quarter) {
  event_clock_meter m = {0};
  cr_assert_eq(event_clock_meter_step(&m, 1000 * MS, 1000 * MS, 50000), 0,
               "a first measurement: no rate");
  /* 10 ms periods: 10,000 records = 1,000,000/s. */
  cr_assert_eq(event_clock_meter_step(&m, 1010 * MS, 1010 * MS, 59990), 0, "999,000/s: below");
  cr_assert_eq(event_clock_meter_step(&m, 1020 * MS, 1020 * MS, 69990), 1, "1,000,000/s: on");
  cr_assert_eq(m.rate_low, 1000000.0, "counts at one instant: the bounds are the rate");
  cr_assert_eq(m.rate_high, 1000000.0);
  cr_assert_eq(event_clock_meter_step(&m, 1030 * MS, 1030 * MS, 74990), 1, "500,000/s: stays on");
  cr_assert_eq(event_clock_meter_step(&m, 1040 * MS, 1040 * MS, 77490), 1, "250,000/s: stays on");
  cr_assert_eq(event_clock_meter_step(&m, 1050 * MS, 1050 * MS, 79980), 0, "249,000/s: off");
  cr_assert_eq(event_clock_meter_step(&m, 1060 * MS, 1060 * MS, 89000), 0, "902,000/s: stays off");
  cr_assert_eq(event_clock_meter_step(&m, 1070 * MS, 1070 * MS, 89000), 0, "idle");
  cr_assert_eq(event_clock_meter_step(&m, 2070 * MS, 2070 * MS, 10089000), 1,
               "10,000,000/s over 1 s: on");
  cr_assert_eq(event_clock_meter_step(&m, 2080 * MS, 2080 * MS, 10089000), 0, "idle: off");
}

/* A count taken over a long time (the ticker preempted while counting, or
 * waiting for the registry's lock) bounds the period: the mode switches
 * where the bound decides it, and stays where the bounds straddle the
 * threshold. */
Test(event_clock, meter_judges_a_slow_count_by_the_bounds_of_its_period) {
  event_clock_meter m = {0};
  event_clock_meter_step(&m, 0, 0, 0);
  /* 40 ms of counting: the period lasted 50 to 90 ms; 45,000 events are
   * 500,000 to 900,000/s, below 1,000,000/s whatever the period was */
  cr_assert_eq(event_clock_meter_step(&m, 50 * MS, 90 * MS, 45000), 0);
  cr_assert_eq(m.rate_low, 500000.0);
  cr_assert_eq(m.rate_high, 900000.0);
  /* from the count over 50-90 ms to one at 140 ms: 50 to 90 ms again;
   * 70,000 more: 777,778 to 1,400,000/s, which may be either: no switch */
  cr_assert_eq(event_clock_meter_step(&m, 140 * MS, 140 * MS, 115000), 0);
  /* 30 ms of counting again, period 50 to 80 ms, 80,000 more: at least
   * 1,000,000/s: on */
  cr_assert_eq(event_clock_meter_step(&m, 190 * MS, 220 * MS, 195000), 1);
  cr_assert_eq(m.rate_low, 1000000.0);
  /* from 190-220 to 230: 10 to 40 ms; 10,000 more: 250,000 to 1,000,000/s:
   * perhaps a quarter: stays on */
  cr_assert_eq(event_clock_meter_step(&m, 230 * MS, 230 * MS, 205000), 1);
  /* a count begun as the previous one ended (a clock that did not move
   * between them): no upper bound */
  cr_assert_eq(event_clock_meter_step(&m, 230 * MS, 260 * MS, 205000), 1, "idle, but unbounded");
  cr_assert(isinf(m.rate_high));
  /* 30 ms after a count that ended at 260: idle: off */
  cr_assert_eq(event_clock_meter_step(&m, 290 * MS, 290 * MS, 205000), 0);
  cr_assert_eq(m.rate_high, 0.0);
}

Test(event_clock, meter_keeps_its_mode_when_rings_go_away) {
  event_clock_meter m = {0};
  event_clock_meter_step(&m, 0, 0, 0);
  cr_assert_eq(event_clock_meter_step(&m, 10 * MS, 10 * MS, 100000), 1);
  cr_assert_eq(event_clock_meter_step(&m, 20 * MS, 20 * MS, 40), 1, "the total fell: not a rate");
  cr_assert_eq(event_clock_meter_step(&m, 30 * MS, 30 * MS, 20040), 1,
               "2,000,000/s from the new total");
  cr_assert_eq(event_clock_meter_step(&m, 30 * MS, 30 * MS, 20040), 1,
               "no time passed: not a rate");
  cr_assert_eq(event_clock_meter_step(&m, 40 * MS, 40 * MS, 20040), 0);
}

Test(event_clock, counts_the_events_of_every_pool) {
  pool_events_enable(64);
  uint64_t before = pool_events_recorded_total();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * PC_MiB, NULL);
  gpupool *q = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * PC_MiB, NULL);
  for (int i = 0; i < 100; i++) {
    void *x;
    cr_assert_eq(gpupool_malloc(i % 2 ? p : q, &x, 4096, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(i % 2 ? p : q, x), GPUPOOL_OK);
  }
  /* 200 alloc and free events, plus each pool's first segment allocation. */
  cr_assert_eq(pool_events_recorded_total() - before, 202);
  gpupool_destroy(p);
  gpupool_destroy(q);
  pool_events_disable();
}

/* The clock's count: two events an allocation of a pool with rings, taken
 * from the allocation counts that gpupool_reset_accumulated_stats resets
 * (a step back, which the meter leaves unjudged: above). */
Test(event_clock, the_rate_counts_two_events_an_allocation_of_recording_pools) {
  pool_events_enable(64);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * PC_MiB, NULL);
  uint64_t before = pool_events_lifetimes_total();
  for (int i = 0; i < 100; i++) {
    void *x;
    cr_assert_eq(gpupool_malloc(p, &x, 4096 + (size_t)i, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  }
  cr_assert_eq(pool_events_lifetimes_total() - before, 200);
  before = pool_events_lifetimes_total();
  void *y;
  cr_assert_eq(gpupool_malloc(p, &y, 512, NULL), GPUPOOL_OK); /* live: counts already */
  cr_assert_eq(pool_events_lifetimes_total() - before, 2);
  gpupool_reset_accumulated_stats(p);
  cr_assert_eq(pool_events_lifetimes_total(), 0, "p's counts reset: a step back");
  cr_assert_eq(gpupool_free(p, y), GPUPOOL_OK);
  pool_events_disable();
  gpupool_destroy(p);
}

/* The ticker's count takes no shard lock: where busy threads outnumber
 * cores, one preempted inside its pool call held its shard's lock for a
 * time slice, and the count waited for it (the ticker then judged no
 * period; now such a wait would widen the meter's bounds). Here this thread
 * holds the lock: a count that took it would never return (the timeout
 * fails the test). */
Test(event_clock, the_rate_count_does_not_wait_for_a_held_shard_lock, .timeout = 30) {
  pool_events_enable(64);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * PC_MiB, NULL);
  uint64_t before = pool_events_lifetimes_total();
  void *x;
  cr_assert_eq(gpupool_malloc(p, &x, 4096, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  shard *sh = atomic_load(&p->shards);
  cr_assert_not_null(sh);
  spin_lock(&sh->lock);
  uint64_t counted = pool_events_lifetimes_total() - before;
  spin_unlock(&sh->lock);
  cr_assert_eq(counted, 2, "one allocation and its free");
  pool_events_disable();
  gpupool_destroy(p);
}

/* One malloc+free pair on stream s of p. */
static void one_pair(gpupool *p, void *s) {
  void *x;
  cr_assert_eq(gpupool_malloc(p, &x, 4096, s), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
}

Test(event_clock, switching_events_off_and_on_keeps_the_rings) {
  pool_events_enable(64);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * PC_MiB, NULL);
  gpupool_host_stream *s = gpupool_host_stream_create();
  cr_assert_not_null(s);
  one_pair(p, NULL);
  event_ring *before[4];
  cr_assert_eq(pool_event_rings_at(p, before, NULL, 4), 1);
  uint64_t recorded = pool_events_recorded_total();

  pool_events_switch(0);
  cr_assert_not(pool_events_enabled());
  one_pair(p, NULL);
  one_pair(p, s); /* a stream first seen while off: no ring */
  cr_assert_eq(pool_events_recorded_total(), recorded, "nothing recorded while off");

  pool_events_switch(64);
  cr_assert(pool_events_enabled());
  one_pair(p, NULL);
  cr_assert_eq(pool_events_recorded_total(), recorded + 2, "the first stream records again");
  event_ring *after[4];
  cr_assert_eq(pool_event_rings_at(p, after, NULL, 4), 1, "the stream seen while off got none");
  cr_assert_eq(after[0], before[0], "the same ring, its events kept");
  cr_assert_eq(event_ring_head(after[0]), 5, "segment, alloc, free; then alloc, free");
  event_ring_unref(before[0]);
  event_ring_unref(after[0]);

  pool_events_enable(64); /* rings for every stream now */
  one_pair(p, s);
  cr_assert_eq(pool_events_recorded_total(), recorded + 4);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(s);
  pool_events_disable();
}

Test(event_clock, start_and_stop_are_idempotent) {
  event_clock_stop(); /* nothing running */
  cr_assert_eq(event_clock_tick_us(), 0);
  cr_assert_eq(event_clock_start(1000), 0);
  cr_assert_eq(event_clock_tick_us(), 1000);
  cr_assert_eq(event_clock_start(500), 0, "again: only the tick changes");
  cr_assert_eq(event_clock_tick_us(), 500);
  cr_assert_geq(event_clock_thread_cpu_ns(), 0, "the thread runs");
  event_clock_stop();
  event_clock_stop();
  cr_assert_eq(event_clock_tick_us(), 0);
  cr_assert_eq(event_clock_resolution_us(), 0);
  cr_assert_eq(event_clock_thread_cpu_ns(), -1);
  cr_assert_eq(atomic_load(&event_clock_coarse.stamp), 0, "stopped: exact stamps");
  cr_assert_eq(event_clock_start(0), 0, "tick 0: no thread, every stamp exact");
  cr_assert_eq(event_clock_tick_us(), 0);
  cr_assert_eq(event_clock_start(200000), 0, "a tick above the maximum is capped");
  cr_assert_eq(event_clock_tick_us(), EVENT_CLOCK_MAX_TICK);
  cr_assert_eq(event_clock_start(0), 0, "tick 0 while running stops the ticker");
  cr_assert_eq(event_clock_thread_cpu_ns(), -1);
  cr_assert_eq(event_clock_start(1000), 0, "starts again after a stop");
  event_clock_stop();
}

/* Allocates and frees on p until done() says so, or a safety-net deadline
 * passes (far beyond what the state needs). */
static int pairs_until(gpupool *p, int (*done)(void)) {
  uint64_t deadline = clock_monotonic_ns() + 60000 * MS;
  while (!done()) {
    if (clock_monotonic_ns() > deadline)
      return 0;
    for (int i = 0; i < 1000 && p; i++) {
      void *x;
      cr_assert_eq(gpupool_malloc(p, &x, 4096, NULL), GPUPOOL_OK);
      cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
    }
    if (!p)
      usleep(1000);
  }
  return 1;
}

static int is_ticked(void) {
  return event_clock_resolution_us() != 0;
}
static int is_exact(void) {
  return event_clock_resolution_us() == 0;
}
static uint64_t seen_stamp;
static int stamp_moved(void) {
  return atomic_load(&event_clock_coarse.stamp) != seen_stamp;
}

/* Ticking switches on at a rate this test sets low (1000 events/s: a few
 * pairs per 50 ms measurement), so that it does not depend on how many
 * events a second this machine can make. */
Test(event_clock, the_ticker_ticks_while_events_are_frequent_and_stops_when_idle) {
  event_clock_set_on_rate(1000);
  pool_events_enable(1024);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * PC_MiB, NULL);
  cr_assert_eq(event_clock_start(1000), 0);
  cr_assert(pairs_until(p, is_ticked), "ticking never started under a stream of events");
  cr_assert_eq(event_clock_resolution_us(), 1000);
  seen_stamp = atomic_load(&event_clock_coarse.stamp);
  cr_assert(pairs_until(p, stamp_moved), "the published stamp never moved");
  uint64_t t = event_clock_stamp();
  cr_assert(t != 0);
  cr_assert(pairs_until(NULL, is_exact), "ticking never stopped when events stopped");
  cr_assert_eq(atomic_load(&event_clock_coarse.stamp), 0, "exact mode publishes 0");
  event_clock_stop();
  gpupool_destroy(p);
  pool_events_disable();
  event_clock_set_on_rate(0);
}

Test(event_clock, the_rate_that_switches_ticking_on_can_be_set) {
  event_clock_meter m = {0};
  event_clock_set_on_rate(1000);
  event_clock_meter_step(&m, 0, 0, 0);
  cr_assert_eq(event_clock_meter_step(&m, 1000 * MS, 1000 * MS, 999), 0, "999/s: below");
  cr_assert_eq(event_clock_meter_step(&m, 2000 * MS, 2000 * MS, 1999), 1, "1000/s: on");
  cr_assert_eq(event_clock_meter_step(&m, 3000 * MS, 3000 * MS, 2249), 1, "250/s: stays on");
  cr_assert_eq(event_clock_meter_step(&m, 4000 * MS, 4000 * MS, 2498), 0, "249/s: off");
  event_clock_set_on_rate(0);
  m = (event_clock_meter){0};
  event_clock_meter_step(&m, 0, 0, 0);
  cr_assert_eq(event_clock_meter_step(&m, 1000 * MS, 1000 * MS, 999999), 0,
               "the default again: below");
  cr_assert_eq(event_clock_meter_step(&m, 2000 * MS, 2000 * MS, 1999999), 1, "1,000,000/s: on");
}

/* The agent runs the ticker while it records events, with its tick. */
static unsigned tick_while_agent_runs(gpupool_agent_options o) {
  o.listen = "off";
  o.cupti = GPUPOOL_CUPTI_OFF;
  o.ignore_env = 1;
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  unsigned tick = event_clock_tick_us();
  gpupool_agent_stop();
  cr_assert_eq(event_clock_tick_us(), 0, "the agent's stop stops the ticker");
  cr_assert_eq(atomic_load(&event_clock_coarse.stamp), 0);
  return tick;
}

Test(event_clock, the_agent_starts_and_stops_the_ticker) {
  cr_assert_eq(tick_while_agent_runs((gpupool_agent_options){0}), 1000, "the default tick");
  cr_assert_eq(tick_while_agent_runs((gpupool_agent_options){.trace_tick_us = 250}), 250);
  cr_assert_eq(tick_while_agent_runs((gpupool_agent_options){.trace_tick_off = 1}), 0,
               "trace_tick_off: no ticker");
  cr_assert_eq(tick_while_agent_runs((gpupool_agent_options){.trace_off = 1}), 0,
               "no events, no ticker");
}

Test(event_clock, a_forked_child_stamps_exactly) {
  event_clock_stop(); /* sets up the fork handler */
  event_clock_publish(42);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0)
    _exit(event_clock_stamp() != 42 && atomic_load(&event_clock_coarse.stamp) == 0 ? 0 : 1);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child kept the parent's published stamp");
  cr_assert_eq(event_clock_stamp(), 42, "the parent keeps it");
  event_clock_publish(0);
}
