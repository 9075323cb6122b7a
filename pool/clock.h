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
/* A stamp: a few ns on x86-64. */
uint64_t clock_stamp(void);
/* CLOCK_REALTIME ns of a stamp taken after clock_stamp_init. */
uint64_t clock_stamp_to_ns(uint64_t stamp);

#endif
