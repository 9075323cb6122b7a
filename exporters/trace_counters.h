/* Counter samples for the trace: the agent's sampler calls
 * trace_counters_sample() at every interval and at every segment change; each
 * call appends one sample per live pool to a bounded ring (the oldest samples
 * are overwritten and counted). Readers (trace streams) read the ring
 * lock-free with the same cursor protocol as event_ring_read. The module also
 * remembers the name and device of every pool it sampled (a bounded table),
 * so a trace can label the samples of pools destroyed since. */
#ifndef GPUPOOL_TRACE_COUNTERS_H
#define GPUPOOL_TRACE_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#define TRACE_COUNTERS_CAPACITY 32767 /* samples kept (32768 slots, 2 MiB), made at first use */
#define TRACE_POOL_TABLE_SIZE   1024  /* pools remembered by id */
#define TRACE_LABEL_MAX         128   /* pool names are kept up to this many bytes */

typedef struct counter_sample {
  uint64_t ts_ns; /* CLOCK_REALTIME */
  uint32_t pool_id;
  int32_t device;
  uint64_t allocated;   /* allocated_bytes current */
  uint64_t reserved;    /* reserved_bytes current; free in pool = reserved - allocated */
  uint64_t requested;   /* requested_bytes current */
  uint64_t from_cache;  /* allocations served from the pool (cumulative) */
  uint64_t from_device; /* allocations that needed a device allocation (cumulative) */
} counter_sample;

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

typedef struct trace_pool_info {
  uint32_t id;
  int device;
  char name[TRACE_LABEL_MAX];
  char backend[16];
  char strategy[16];
} trace_pool_info;

/* Copies of the remembered pools (at most max); returns how many. */
size_t trace_counters_pools(trace_pool_info *out, size_t max);
/* 1 if a remembered pool has this name. */
int trace_counters_knows_name(const char *name);

#endif
