/* Timestamps for events: CLOCK_REALTIME nanoseconds (the clock CUPTI's
 * timestamps use), read cheaply. */
#ifndef GPUPOOL_CLOCK_H
#define GPUPOOL_CLOCK_H

#include <stdint.h>

uint64_t clock_realtime_ns(void);  /* wall clock, ns since the epoch */
uint64_t clock_monotonic_ns(void); /* for durations */

#endif
