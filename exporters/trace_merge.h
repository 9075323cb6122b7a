/* Merges recorded events from many rings (every pool stream's event ring, the
 * CUPTI ring, the counter-sample ring) into one sequence ordered by time, for
 * the trace writer. Rings are read lock-free in small batches: nothing is
 * copied whole. The window is fixed when reading begins (each ring's head is
 * noted then), so a busy program cannot keep a trace from ending. Events
 * overwritten before they could be read are skipped and counted. */
#ifndef GPUPOOL_TRACE_MERGE_H
#define GPUPOOL_TRACE_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "pool/event_ring.h"
#include "trace_samples.h"

typedef enum {
  TRACE_SRC_POOL = 0, /* a pool stream's event ring */
  TRACE_SRC_CUPTI,    /* CUPTI-observed allocations */
  TRACE_SRC_COUNTERS, /* trace_counters samples */
} trace_src_kind;

typedef struct trace_record {
  trace_src_kind kind;
  uint32_t tag;   /* the tag given with the source (the writer's pool index) */
  uint64_t ts_ns; /* never smaller than the previous record's */
  /* TRACE_SRC_POOL: the stream of the ring it came from (a pool shard's),
   * which an OOM event, whose words hold the pool's state, does not carry */
  uint64_t ring_stream;
  union {
    pool_event ev;     /* TRACE_SRC_POOL, TRACE_SRC_CUPTI */
    counter_sample cs; /* TRACE_SRC_COUNTERS */
  } u;
} trace_record;

/* The recorded events r stands for: for a pool's allocation, 2 for each
 * repeated lifetime, 1, and 1 more where marked EVF_FREED (its free is in
 * the same record); else 1. The limit counts these; it never parts an
 * allocation from its free, and of a record's repeated lifetimes it keeps
 * the newest that fit. */
static inline uint64_t trace_record_events(const trace_record *r) {
  return r->kind == TRACE_SRC_POOL ? event_count(&r->u.ev) : 1;
}

/* Returns nonzero to keep a record (applied before the limit is counted). */
typedef int (*trace_accept_fn)(void *ctx, const trace_record *r);

typedef struct trace_merge trace_merge;

trace_merge *trace_merge_create(void);
/* Adds a ring, read to its end when trace_merge_begin is called; the merge
 * takes over one reference (released at destroy, or at once if adding
 * fails). 0 on success, -1 on allocation failure. */
int trace_merge_add_ring(trace_merge *m, event_ring *r, trace_src_kind kind, uint32_t tag);
/* trace_merge_add_ring, read to end, taken earlier where the ring's writer
 * lets go (a pool's: pool_event_rings_at). */
int trace_merge_add_ring_to(trace_merge *m, event_ring *r, event_ring_end end, trace_src_kind kind,
                            uint32_t tag);
/* Adds the counter samples of ring (one counter source). */
int trace_merge_add_counters(trace_merge *m, const counter_ring_ops *ring);

/* Fixes the window and prepares reading: records with since_ns <= ts <=
 * until_ns that `accept` keeps; with limit > 0, only the newest `limit` of
 * them (found by reading the rings backwards from their heads). 0 on
 * success, -1 on allocation failure. */
int trace_merge_begin(trace_merge *m, uint64_t since_ns, uint64_t until_ns, uint64_t limit,
                      trace_accept_fn accept, void *ctx);
/* The time of the next record without taking it: 1 if there is one. */
int trace_merge_peek_ts(trace_merge *m, uint64_t *ts_ns);
/* The next record: 1, or 0 at the end. */
int trace_merge_next(trace_merge *m, trace_record *out);

uint64_t trace_merge_skipped(const trace_merge *m); /* overwritten while this merge read */
/* Overwritten, ever, in the sources of one kind: the pools' rings (the sum of
 * their gpupool_trace_events_dropped_total), the CUPTI ring, the counter
 * ring. */
uint64_t trace_merge_dropped(const trace_merge *m, trace_src_kind kind);
int trace_merge_limited(const trace_merge *m); /* 1 if the limit cut older records */

void trace_merge_destroy(trace_merge *m);

#endif
