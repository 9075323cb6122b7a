/* Timestamps. Events carry a cheap stamp taken on the hot path (the TSC on
 * x86-64 with an invariant TSC, else CLOCK_REALTIME ns); readers convert
 * stamps to CLOCK_REALTIME nanoseconds (the clock CUPTI's timestamps use). */
#ifndef GPUPOOL_CLOCK_H
#define GPUPOOL_CLOCK_H

#include <stdint.h>

uint64_t clock_realtime_ns(void);  /* wall clock, ns since the epoch */
uint64_t clock_monotonic_ns(void); /* for durations */

/* Decides the stamp source and anchors it to the wall clock; call once
 * before stamps are taken (idempotent, thread-safe). */
void clock_stamp_init(void);
extern int clock_use_tsc; /* set by clock_stamp_init */
/* A stamp: one rdtsc on x86-64 with an invariant TSC. */
static inline uint64_t clock_stamp(void) {
#if defined(__x86_64__)
  if (clock_use_tsc) {
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
  }
#endif
  return clock_realtime_ns();
}
/* CLOCK_REALTIME ns of a stamp taken after clock_stamp_init. */
uint64_t clock_stamp_to_ns(uint64_t stamp);

#endif
