/* The agent's sampler thread: every sample_interval_ms it reads the devices
 * (device_info), the backend numbers that need CUDA (sampler_backend) and
 * adds a counter sample of every pool to the trace (trace_counters); a
 * segment change in any pool wakes it early for one more counter sample. */
#ifndef GPUPOOL_SAMPLER_H
#define GPUPOOL_SAMPLER_H

#include <stddef.h>

/* 0 on success; -1 with a reason when the thread cannot be made. */
int sampler_start(unsigned interval_ms, char *err, size_t errlen);
/* Stops and joins the thread; idempotent. */
void sampler_stop(void);

#endif
