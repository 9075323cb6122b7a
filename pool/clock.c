#include "clock.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

uint64_t clock_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t clock_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The TSC is used only when the CPU says it ticks at a constant rate in every
 * power state (constant_tsc and nonstop_tsc): then ns = anchor_ns + (tsc -
 * anchor_tsc) / rate, with the rate measured over everything since the
 * anchor, so it only gets more precise as the process runs. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
int clock_use_tsc;
static uint64_t anchor_tsc, anchor_ns;
static pthread_mutex_t rate_lock = PTHREAD_MUTEX_INITIALIZER;
static double ticks_per_ns;
static uint64_t rate_at_ns; /* when ticks_per_ns was last measured */

#if defined(__x86_64__)
static int cpu_has_invariant_tsc(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return 0;
  char line[4096];
  int constant = 0, nonstop = 0;
  while (fgets(line, sizeof line, f) && !(constant && nonstop)) {
    if (strncmp(line, "flags", 5) != 0)
      continue;
    constant = strstr(line, " constant_tsc") != NULL;
    nonstop = strstr(line, " nonstop_tsc") != NULL;
    break;
  }
  fclose(f);
  return constant && nonstop;
}
#endif

static void stamp_init(void) {
#if defined(__x86_64__)
  clock_use_tsc = cpu_has_invariant_tsc();
  if (clock_use_tsc) {
    anchor_ns = clock_realtime_ns();
    anchor_tsc = __rdtsc();
    /* A first rate over 2 ms; clock_stamp_to_ns refines it as time passes. */
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
    uint64_t tsc = __rdtsc(), ns = clock_realtime_ns();
    ticks_per_ns = ns > anchor_ns ? (double)(tsc - anchor_tsc) / (double)(ns - anchor_ns) : 1;
    rate_at_ns = ns;
  }
#endif
}

void clock_stamp_init(void) {
  pthread_once(&once, stamp_init);
}

uint64_t clock_stamp_to_ns(uint64_t stamp) {
  if (!clock_use_tsc)
    return stamp;
#if defined(__x86_64__)
  pthread_mutex_lock(&rate_lock);
  uint64_t now_ns = clock_realtime_ns();
  if (now_ns - rate_at_ns > 10000000ull) { /* re-measure every 10 ms */
    uint64_t now_tsc = __rdtsc();
    now_ns = clock_realtime_ns();
    ticks_per_ns = (double)(now_tsc - anchor_tsc) / (double)(now_ns - anchor_ns);
    rate_at_ns = now_ns;
  }
  double rate = ticks_per_ns;
  pthread_mutex_unlock(&rate_lock);
  int64_t ticks = (int64_t)(stamp - anchor_tsc);
  return anchor_ns + (uint64_t)((double)ticks / rate);
#endif
}
