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
 * power state (constant_tsc and nonstop_tsc). Stamps become wall-clock time
 * through anchors: (tsc, ns) pairs taken at least ANCHOR_NS apart, each with
 * the rate measured since the previous one. A stamp is converted with the
 * last anchor before it and that anchor's rate, which never change once the
 * anchor exists: converting a stamp again gives the same ns (a trace read
 * twice is the same document), and the error stays within what the clocks
 * drift apart in one interval. */
#define ANCHOR_NS 10000000000ull /* 10 s */
#define ANCHORS   4096           /* about 11 hours of history */

typedef struct anchor {
  uint64_t tsc, ns;
  double ticks_per_ns; /* over the interval that ends here */
} anchor;

static pthread_once_t once = PTHREAD_ONCE_INIT;
int clock_use_tsc;
static pthread_mutex_t anchor_lock = PTHREAD_MUTEX_INITIALIZER;
static anchor anchors[ANCHORS];
static uint64_t nanchors; /* ever taken; the last ANCHORS are kept */

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

#if defined(__x86_64__)
static void add_anchor(uint64_t tsc, uint64_t ns) {
  const anchor *prev = &anchors[(nanchors - 1) % ANCHORS];
  double rate = (double)(tsc - prev->tsc) / (double)(ns - prev->ns);
  anchors[nanchors++ % ANCHORS] = (anchor){tsc, ns, rate};
}
#endif

static void stamp_init(void) {
#if defined(__x86_64__)
  clock_use_tsc = cpu_has_invariant_tsc();
  if (clock_use_tsc) {
    anchors[0] = (anchor){__rdtsc(), clock_realtime_ns(), 0};
    nanchors = 1;
    /* A first rate over 2 ms; the next anchors measure it over 10 s. */
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
    add_anchor(__rdtsc(), clock_realtime_ns());
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
  pthread_mutex_lock(&anchor_lock);
  const anchor *last = &anchors[(nanchors - 1) % ANCHORS];
  uint64_t now_ns = clock_realtime_ns();
  if (now_ns - last->ns >= ANCHOR_NS)
    add_anchor(__rdtsc(), clock_realtime_ns());
  /* The last anchor at or before the stamp (binary search over the kept
   * ones, oldest first); stamps older than all of them use the oldest. */
  uint64_t lo = nanchors > ANCHORS ? nanchors - ANCHORS : 0, hi = nanchors - 1;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo + 1) / 2;
    if (anchors[mid % ANCHORS].tsc <= stamp)
      lo = mid;
    else
      hi = mid - 1;
  }
  anchor a = anchors[lo % ANCHORS];
  if (a.ticks_per_ns == 0) /* the very first anchor: use the next one's rate */
    a.ticks_per_ns = anchors[1].ticks_per_ns;
  pthread_mutex_unlock(&anchor_lock);
  return a.ns + (uint64_t)((double)(int64_t)(stamp - a.tsc) / a.ticks_per_ns);
#endif
}
