/* The counter samples and pool descriptions a trace is written from
 * (agent/trace_counters.c keeps them; the trace renderer reads them). */
#ifndef GPUPOOL_TRACE_SAMPLES_H
#define GPUPOOL_TRACE_SAMPLES_H

#include <stddef.h>
#include <stdint.h>

#define TRACE_LABEL_MAX 128 /* pool names are kept up to this many bytes */

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

typedef struct trace_pool_info {
  uint32_t id;
  int device;
  char name[TRACE_LABEL_MAX];
  char backend[16];
  char strategy[16];
} trace_pool_info;

/* A ring of counter samples, read lock-free with the cursor protocol of
 * event_ring_read (agent/trace_counters.h provides the process's). */
typedef struct counter_ring_ops {
  size_t (*read)(uint64_t *cursor, counter_sample *out, size_t max, uint64_t *skipped);
  uint64_t (*head)(void);    /* samples ever appended */
  uint64_t (*dropped)(void); /* of those, overwritten */
  size_t (*capacity)(void);
} counter_ring_ops;

#endif
