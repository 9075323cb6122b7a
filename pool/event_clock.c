#include "event_clock.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "core/assert.h"

event_clock_word event_clock_coarse;

/* ctl serialises start and stop (held across the join, never taken by the
 * ticker); lock guards what the ticker reads: stopping and tick_us. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t ctl = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake; /* on CLOCK_MONOTONIC: wall-clock jumps stall no tick */
static pthread_t thread;
static int running;  /* the thread exists (ctl) */
static int stopping; /* asks it to end (lock) */
static unsigned tick_us;
static _Atomic unsigned resolution_us; /* the tick while ticked, else 0 */
static _Atomic unsigned running_tick_us;
static _Atomic uint64_t switches;
static _Atomic uint64_t max_late_ns;

static void init_cond(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&wake, &a);
  pthread_condattr_destroy(&a);
}

/* A forked child has no ticker thread: a stamp published by the parent
 * would stay there forever and freeze the child's clock. Back to exact. */
static void after_fork_child(void) {
  atomic_store(&event_clock_coarse.stamp, 0);
  pthread_mutex_init(&ctl, NULL);
  pthread_mutex_init(&lock, NULL);
  init_cond();
  running = stopping = 0;
  atomic_store(&resolution_us, 0);
  atomic_store(&running_tick_us, 0);
}

static void init_once(void) {
  init_cond();
  pthread_atfork(NULL, NULL, after_fork_child);
}

void event_clock_publish(uint64_t stamp) {
  atomic_store_explicit(&event_clock_coarse.stamp, stamp, memory_order_relaxed);
}

static _Atomic uint64_t on_rate = (uint64_t)EVENT_CLOCK_ON_RATE;

void event_clock_set_on_rate(uint64_t events_per_s) {
  atomic_store(&on_rate, events_per_s ? events_per_s : (uint64_t)EVENT_CLOCK_ON_RATE);
}

int event_clock_meter_step(event_clock_meter *m, uint64_t before_ns, uint64_t after_ns,
                           uint64_t events_total) {
  gp_assert_internal(before_ns <= after_ns);
  if (m->have_last && after_ns > m->last_before && events_total >= m->last_events) {
    double on = (double)atomic_load_explicit(&on_rate, memory_order_relaxed);
    double events = (double)(events_total - m->last_events);
    m->rate_low = events * 1e9 / (double)(after_ns - m->last_before);
    m->rate_high =
        before_ns > m->last_after ? events * 1e9 / (double)(before_ns - m->last_after) : INFINITY;
    if (!m->ticked && m->rate_low >= on)
      m->ticked = 1;
    else if (m->ticked && m->rate_high < on / 4)
      m->ticked = 0;
  }
  m->last_before = before_ns;
  m->last_after = after_ns;
  m->last_events = events_total;
  m->have_last = 1;
  return m->ticked;
}

/* What the rate is measured with; NULL: no events are counted. */
static uint64_t (*_Atomic event_source)(void);

void event_clock_set_event_source(uint64_t (*events_total)(void)) {
  atomic_store(&event_source, events_total);
}

static uint64_t count_events(void) {
  uint64_t (*fn)(void) = atomic_load(&event_source);
  return fn ? fn() : 0;
}

static struct timespec timespec_of(uint64_t ns) {
  return (struct timespec){.tv_sec = (time_t)(ns / 1000000000ull),
                           .tv_nsec = (long)(ns % 1000000000ull)};
}

/* One measurement of the event rate. The count is taken at some instant
 * between the two clock readings around it, which may lie far apart where
 * the ticker was preempted while counting (more busy threads than cores, or
 * the registry's lock held by a scrape): the meter bounds the rate with
 * both readings. (It once judged no period whose count took over 5 ms, and
 * with 8 threads busy on 2 cores the clock then never went ticked.)
 * Returns the time after the count. */
static uint64_t measure(event_clock_meter *m) {
  uint64_t before = clock_monotonic_ns();
  uint64_t events = count_events();
  uint64_t after = clock_monotonic_ns();
  event_clock_meter_step(m, before, after, events);
  return after;
}

/* Exact mode: wakes every EVENT_CLOCK_CHECK_NS to measure the event rate.
 * Ticked mode: publishes clock_stamp() every tick and measures at the same
 * period. */
static void *ticker_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "gpupool-tick");
  event_clock_meter m = {0};
  uint64_t now = measure(&m);
  uint64_t next_check = now + EVENT_CLOCK_CHECK_NS, next_tick = next_check;
  pthread_mutex_lock(&lock);
  for (;;) {
    uint64_t deadline = m.ticked && next_tick < next_check ? next_tick : next_check;
    struct timespec ts = timespec_of(deadline);
    while (!stopping && pthread_cond_timedwait(&wake, &lock, &ts) != ETIMEDOUT)
      ; /* woken early: by stop, a new tick or spuriously */
    if (stopping)
      break;
    uint64_t tick_ns = (uint64_t)tick_us * 1000;
    pthread_mutex_unlock(&lock);
    now = clock_monotonic_ns();
    if (m.ticked && now >= next_tick) {
      event_clock_publish(clock_stamp());
      if (now - next_tick > atomic_load_explicit(&max_late_ns, memory_order_relaxed))
        atomic_store_explicit(&max_late_ns, now - next_tick, memory_order_relaxed);
      next_tick += tick_ns;
      if (next_tick <= now) /* late (not scheduled): do not catch up in a burst */
        next_tick = now + tick_ns;
    }
    if (now >= next_check) {
      int was = m.ticked;
      now = measure(&m);
      next_check += EVENT_CLOCK_CHECK_NS;
      if (next_check <= now)
        next_check = now + EVENT_CLOCK_CHECK_NS;
      if (m.ticked && !was) {
        event_clock_publish(clock_stamp());
        next_tick = now + tick_ns;
        atomic_fetch_add(&switches, 1);
      } else if (!m.ticked && was) {
        event_clock_publish(0);
        atomic_fetch_add(&switches, 1);
      }
      atomic_store(&resolution_us, m.ticked ? (unsigned)(tick_ns / 1000) : 0);
    }
    pthread_mutex_lock(&lock);
  }
  pthread_mutex_unlock(&lock);
  event_clock_publish(0);
  atomic_store(&resolution_us, 0);
  return NULL;
}

int event_clock_start(unsigned us) {
  if (us == 0) {
    event_clock_stop();
    return 0;
  }
  if (us > EVENT_CLOCK_MAX_TICK)
    us = EVENT_CLOCK_MAX_TICK;
  pthread_once(&once, init_once);
  clock_stamp_init(); /* before any stamp is published */
  pthread_mutex_lock(&ctl);
  pthread_mutex_lock(&lock);
  tick_us = us;
  stopping = 0;
  pthread_cond_signal(&wake); /* a running ticker takes the new tick at its next wake-up */
  pthread_mutex_unlock(&lock);
  atomic_store(&running_tick_us, us);
  if (atomic_load(&resolution_us))
    atomic_store(&resolution_us, us);
  int rc = 0;
  if (!running) {
    atomic_store(&max_late_ns, 0);
    /* The application's signal handlers never run on this thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    running = pthread_create(&thread, NULL, ticker_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!running) {
      atomic_store(&running_tick_us, 0);
      rc = -1;
    }
  }
  pthread_mutex_unlock(&ctl);
  return rc;
}

void event_clock_stop(void) {
  pthread_once(&once, init_once);
  pthread_mutex_lock(&ctl);
  if (running) {
    pthread_mutex_lock(&lock);
    stopping = 1;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
    running = 0;
  }
  event_clock_publish(0);
  atomic_store(&resolution_us, 0);
  atomic_store(&running_tick_us, 0);
  pthread_mutex_unlock(&ctl);
}

unsigned event_clock_resolution_us(void) {
  return atomic_load(&resolution_us);
}

uint64_t event_clock_max_late_ns(void) {
  return atomic_load(&max_late_ns);
}

uint64_t event_clock_switches(void) {
  return atomic_load(&switches);
}

unsigned event_clock_tick_us(void) {
  return atomic_load(&running_tick_us);
}

int64_t event_clock_thread_cpu_ns(void) {
  int64_t ns = -1;
  pthread_once(&once, init_once);
  pthread_mutex_lock(&ctl);
  clockid_t id;
  struct timespec ts;
  if (running && pthread_getcpuclockid(thread, &id) == 0 && clock_gettime(id, &ts) == 0)
    ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  pthread_mutex_unlock(&ctl);
  return ns;
}
