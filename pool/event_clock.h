/* Event timestamps: exact or ticked (adaptive).
 *
 * An exact stamp is one clock_stamp() (an rdtsc), too much for a hot path
 * that should pay a few ns per event. In ticked mode a ticker thread publishes
 * clock_stamp() into one global word every tick (default 1 ms) and events
 * take that word: one relaxed load of a line every core keeps in its cache.
 * Stamps stay in clock_stamp()'s units either way (clock_stamp_to_ns converts
 * both).
 *
 * The ticker costs wake-ups, so it ticks only while events are frequent: it
 * measures the event rate (two events an allocation of a recording pool, it
 * and its free, however few records they took: the function
 * event_clock_set_event_source gave it) every 50 ms, switches ticking on at
 * EVENT_CLOCK_ON_RATE events/s and off again below a quarter of that. The
 * gap keeps a rate near the threshold from flapping. Why
 * 1,000,000 events/s: above that rate the ticker's fixed cost (its wake-ups)
 * is less than what exact stamps cost at that rate, below it more;
 * bench/README.md (bench_events) gives the measured costs behind the choice.
 * Training runs record far fewer events, so their timestamps are exact; the
 * ticker serves allocation storms, where the cost per operation matters.
 * While exact, the ticker only measures the rate.
 *
 * Resolution in ticked mode: events within one tick share a timestamp
 * (order within a ring stays exact: it is the ring's order). Block events
 * (the hot path, shard.c) take event_clock_stamp() as it comes, so a ring's
 * stamps can step back by under a tick where the mode switches; the rare
 * events take event_clock_ring_stamp, never older than the ring's previous
 * one of those. Readers that merge rings keep each ring's order. The
 * ticker needs a CPU at every tick: where busy threads outnumber cores it
 * publishes late and stamps get staler than the tick
 * (event_clock_max_late_ns says by how much). */
#ifndef GPUPOOL_EVENT_CLOCK_H
#define GPUPOOL_EVENT_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/clock.h"
#include "event_ring.h"

#define EVENT_CLOCK_ON_RATE      1000000.0 /* records/s: ticking on; off below a quarter */
#define EVENT_CLOCK_CHECK_NS     50000000  /* the event rate is measured every 50 ms */
#define EVENT_CLOCK_DEFAULT_TICK 1000      /* us */
#define EVENT_CLOCK_MAX_TICK     100000    /* us */

/* The stamp published by the ticker; 0 = exact mode. Alone on its cache
 * line: written once a tick, read by every event. Hidden: position-
 * independent code then reads it in one instruction, where a symbol that
 * could be exported takes two (its address first: a GOT load, which the
 * linker at best turns into a lea), at each of a pair's two reads. */
typedef struct event_clock_word {
  _Alignas(64) _Atomic uint64_t stamp;
  char pad[64 - sizeof(uint64_t)];
} event_clock_word;
extern __attribute__((visibility("hidden"))) event_clock_word event_clock_coarse;

/* A timestamp for an event: the published stamp in ticked mode, else an
 * exact clock_stamp(). */
static inline uint64_t event_clock_stamp(void) {
  uint64_t t = atomic_load_explicit(&event_clock_coarse.stamp, memory_order_relaxed);
  return t ? t : clock_stamp();
}

/* Whether an event now would take stamp, a stamp event_clock_stamp() gave
 * earlier (never 0: the caller knows the event was recorded): in ticked
 * mode, while the same tick is published (an exact stamp is never the
 * published word, which is 0 then). */
static inline int event_clock_ticked_at(uint64_t stamp) {
  gp_assert_internal(stamp != 0);
  return atomic_load_explicit(&event_clock_coarse.stamp, memory_order_relaxed) == stamp;
}

/* The timestamp for the next event pushed into r (writer side, under the
 * caller's serialisation): event_clock_stamp(), but never older than the
 * previous one taken this way for r, so these stamps never decrease when
 * the mode switches (a coarse stamp can be up to a tick older than an exact
 * one taken just before). The pool's rare events use it; block events do
 * not (shard.c: the hot path). _at: with stamp t taken earlier by the
 * caller (an event_clock_stamp() from before its device call). */
static inline uint64_t event_clock_ring_stamp_at(event_ring *r, uint64_t t) {
  t = t < r->last_stamp ? r->last_stamp : t;
  r->last_stamp = t;
  return t;
}
static inline uint64_t event_clock_ring_stamp(event_ring *r) {
  return event_clock_ring_stamp_at(r, event_clock_stamp());
}

/* Starts the ticker thread with a tick of tick_us microseconds (at most
 * EVENT_CLOCK_MAX_TICK; 0: never tick, every stamp exact: no thread, and a
 * running ticker is stopped). Idempotent: while it runs, a new call only
 * changes the tick. 0, or -1 when the thread cannot be started (stamps stay
 * exact). */
int event_clock_start(unsigned tick_us);
/* Stops the ticker (prompt: it is woken) and returns to exact stamps.
 * Idempotent; start may be called again after it. */
void event_clock_stop(void);
/* The tick while the ticker is in ticked mode, else 0. */
unsigned event_clock_resolution_us(void);
/* The tick the ticker runs with (ticked or measuring), 0 when not running. */
unsigned event_clock_tick_us(void);
/* Switches between exact and ticked mode so far (both ways). */
uint64_t event_clock_switches(void);
/* The latest a tick was published after its time since the ticker started,
 * ns: how stale a ticked stamp got beyond the tick (the ticker waiting for a
 * CPU on a machine with more busy threads than cores). */
uint64_t event_clock_max_late_ns(void);
/* CPU time the ticker thread has used, ns; -1 when it is not running. */
int64_t event_clock_thread_cpu_ns(void);

/* The ticker's decisions, separated from its thread so that tests can drive
 * them with made-up event counts and times. */
typedef struct event_clock_meter {
  uint64_t last_before, last_after, last_events; /* the previous measurement */
  int have_last;
  int ticked; /* the mode decided */
  /* The event rate over the last period judged, events/s: at least
   * rate_low, at most rate_high (INFINITY where the two counts' times
   * overlap); equal where each count was taken at one instant. */
  double rate_low, rate_high;
} event_clock_meter;
/* One measurement: events_total events ever made, counted at some instant
 * between before_ns and after_ns (a count of many pools and streams, which
 * a preempted ticker may take long over). The period since the previous
 * measurement then lasted at least from its after to this before and at
 * most from its before to this after, which bounds the rate; the mode
 * switches only where the bound decides it: on where the lower bound
 * reaches EVENT_CLOCK_ON_RATE (or the rate set with
 * event_clock_set_on_rate), off where the upper bound is below a quarter
 * of it. A period in which the total went down (rings went away, counts
 * were reset) is not judged. Returns the mode: 1 ticked, 0 exact.
 * Publishes nothing. */
int event_clock_meter_step(event_clock_meter *m, uint64_t before_ns, uint64_t after_ns,
                           uint64_t events_total);
/* The rate at which ticking switches on (off below a quarter of it), records/s;
 * 0 restores EVENT_CLOCK_ON_RATE. For tests, so that the ticker's switching
 * can be driven by a rate any machine reaches. */
void event_clock_set_on_rate(uint64_t events_per_s);
/* Sets the published stamp (0: exact mode). The ticker's only store; for
 * tests, while no ticker runs. */
void event_clock_publish(uint64_t stamp);
/* Sets the function the ticker measures the event rate with: a count of
 * the events ever made by those whose events it stamps (a count that steps
 * back leaves that period unjudged). The clock knows no pools: whoever gives
 * them rings sets it (pool_events_enable sets pool_events_lifetimes_total).
 * NULL, the default: no events, never ticked. */
void event_clock_set_event_source(uint64_t (*events_total)(void));

#endif
