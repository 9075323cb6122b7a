#include "sampler.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "device_info.h"
#include "trace_counters.h"
#include "pool/registry.h"
#include "sampler_backend.h"
#include "ui_history.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond;
static pthread_once_t g_cond_once = PTHREAD_ONCE_INIT;
static pthread_t g_thread;
static int g_running; /* the thread exists */
static int g_stop;    /* asks it to end */
static int g_woken;   /* a segment changed since the last sample */
static unsigned g_interval_ms;

/* The condition variable waits on CLOCK_MONOTONIC: wall-clock jumps must not
 * stall or hurry the sampler. */
static void init_cond(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&g_cond, &a);
  pthread_condattr_destroy(&a);
}

/* The registry's segment listener: runs on a pool's slow path, so it only
 * raises a flag and signals. */
static void on_segment_change(gpupool *p) {
  (void)p;
  pthread_mutex_lock(&g_lock);
  g_woken = 1;
  pthread_cond_signal(&g_cond);
  pthread_mutex_unlock(&g_lock);
}

static void deadline_after(struct timespec *t, unsigned ms) {
  clock_gettime(CLOCK_MONOTONIC, t);
  t->tv_sec += ms / 1000;
  t->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (t->tv_nsec >= 1000000000L) {
    t->tv_sec++;
    t->tv_nsec -= 1000000000L;
  }
}

static int passed(const struct timespec *t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* Wake-ups take at most one sample per millisecond, so that a pool changing
 * segments in a tight loop cannot keep the sampler busy. */
#define MIN_SPACING_MS 1

static void *sampler_main(void *arg) {
  (void)arg;
  struct timespec next, earliest;
  pthread_mutex_lock(&g_lock);
  int full = 1; /* the first pass reads everything at once */
  while (!g_stop) {
    pthread_mutex_unlock(&g_lock);
    if (full) {
      device_info_refresh();
      sampler_backend_refresh();
      ui_history_sample_now();
    }
    trace_counters_sample();
    pthread_mutex_lock(&g_lock);
    if (full)
      deadline_after(&next, g_interval_ms);
    deadline_after(&earliest, MIN_SPACING_MS);
    full = 0;
    while (!g_stop && !passed(&earliest))
      pthread_cond_timedwait(&g_cond, &g_lock, &earliest);
    while (!g_stop && !g_woken) {
      if (pthread_cond_timedwait(&g_cond, &g_lock, &next) == ETIMEDOUT) {
        full = 1;
        break;
      }
    }
    if (passed(&next))
      full = 1;
    g_woken = 0;
  }
  pthread_mutex_unlock(&g_lock);
  return NULL;
}

int sampler_start(unsigned interval_ms, char *err, size_t errlen) {
  pthread_once(&g_cond_once, init_cond);
  pthread_mutex_lock(&g_lock);
  if (g_running) {
    pthread_mutex_unlock(&g_lock);
    return 0;
  }
  g_stop = 0;
  g_woken = 0;
  g_interval_ms = interval_ms;
  int rc = pthread_create(&g_thread, NULL, sampler_main, NULL);
  if (rc == 0)
    g_running = 1;
  pthread_mutex_unlock(&g_lock);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start the sampler thread: %s", strerror(rc));
    return -1;
  }
  registry_set_segment_listener(on_segment_change);
  return 0;
}

void sampler_stop(void) {
  pthread_once(&g_cond_once, init_cond);
  registry_set_segment_listener(NULL);
  pthread_mutex_lock(&g_lock);
  if (!g_running) {
    pthread_mutex_unlock(&g_lock);
    return;
  }
  g_stop = 1;
  pthread_cond_signal(&g_cond);
  pthread_mutex_unlock(&g_lock);
  pthread_join(g_thread, NULL);
  pthread_mutex_lock(&g_lock);
  g_running = 0;
  pthread_mutex_unlock(&g_lock);
  sampler_backend_clear();
  device_info_clear();
  ui_history_clear();
}
