/* Counter samples for the trace: the agent's sampler calls
 * trace_counters_sample() at every interval and at every segment change; each
 * call appends one sample per live pool to a bounded ring (the oldest samples
 * are overwritten and counted). Readers (trace streams) read the ring
 * lock-free with the same cursor protocol as event_ring_read. The module also
 * remembers the name, label (agent/pool_label.h) and device of every pool it
 * sampled (a bounded table), so a trace can name and select the samples of
 * pools destroyed since. */
#ifndef GPUPOOL_TRACE_COUNTERS_H
#define GPUPOOL_TRACE_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "pool_label.h"
#include "exporters/trace_merge.h"
#include "exporters/trace_samples.h"

#define TRACE_COUNTERS_CAPACITY 32767 /* samples kept (32768 slots, 2 MiB), made at first use */
#define TRACE_POOL_TABLE_SIZE   1024  /* pools remembered by id */

/* One sample of every live pool, now. Safe from any thread (writers are
 * serialised); makes no device call. */
void trace_counters_sample(void);
/* Forgets every sample and pool (the next sample starts afresh). */
void trace_counters_reset(void);

/* Reader side, lock-free: *cursor is the number of the next sample wanted
 * (start at 0); overwritten samples are skipped, *cursor jumps and *skipped
 * grows by their number. Returns the samples copied (at most max). */
size_t trace_counters_read(uint64_t *cursor, counter_sample *out, size_t max, uint64_t *skipped);
uint64_t trace_counters_head(void);    /* samples ever appended since the last reset */
uint64_t trace_counters_dropped(void); /* of those, overwritten */
size_t trace_counters_capacity(void);
/* The four above, as the trace merge reads a counter source. */
extern const counter_ring_ops trace_counters_ring;

typedef struct trace_known_pool {
  trace_pool_info info;
  char label[POOL_LABEL_MAX]; /* its label at its last sample */
} trace_known_pool;
/* Copies of the remembered pools (at most max); returns how many. */
size_t trace_counters_pools(trace_known_pool *out, size_t max);
/* 1 if a remembered pool that `live` did not see (gone since the walk of
 * live: its label then was current) had this label at its last sample. */
int trace_counters_knows_label(const char *label, const pool_labeler *live);

#endif
