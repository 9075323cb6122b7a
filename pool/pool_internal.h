/* Small inline helpers over the pool's types (types.h) that every module of
 * the pool uses: block and segment queries, the pool-wide counters' lock and
 * event recording under a shard lock. */
#ifndef GPUPOOL_POOL_INTERNAL_H
#define GPUPOOL_POOL_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/spinlock.h"
#include "event_clock.h"
#include "event_ring.h"
#include "stats.h"
#include "thread_state.h"
#include "types.h"

/* The state's name in snapshots (PyTorch's snapshot words). */
static inline const char *block_state_name(const block *b) {
  switch (b->state) {
  case BLOCK_ALLOCATED:
    return "active_allocated";
  case BLOCK_PENDING:
    return "active_pending_free";
  default:
    return "inactive";
  }
}

/* Bytes of device memory behind seg: all of it, or its mapped pages. */
static inline size_t segment_mapped_bytes(const segment *seg) {
  return seg->pages ? seg->nmapped * seg->page_size : seg->size;
}

/* The root of sh's free index for small blocks (large 0) or large ones
 * (large 1; nothing else). */
static inline block **shard_free_tree(shard *sh, int large) {
  return &sh->free_tree.by_kind[large];
}

/* Runs stmt (an update of p->c) inside counters_lock. Callers hold
 * slow_lock, and may hold a shard lock: counters_lock is a leaf. */
#define POOL_COUNT(p, stmt)                                                                        \
  do {                                                                                             \
    spin_lock(&(p)->counters_lock);                                                                \
    stmt;                                                                                          \
    (p)->c.seq++;                                                                                  \
    spin_unlock(&(p)->counters_lock);                                                              \
  } while (0)

/* The ring to record into, NULL while events are off. Callers hold the
 * shard lock. */
static inline event_ring *shard_recording(const shard *sh) {
  return atomic_load_explicit(&sh->recording, memory_order_relaxed);
}

/* Says in sh's ring r (sh->ring; the caller holds sh's lock) what its
 * newest record does not say yet: that the allocation it holds has ended,
 * its block freed with no record of its own (event_ring.h, "One record per
 * lifetime"; event_ring_mark_newest_freed). Where a reader is about to take
 * r's head, before an event the hot path does not write, and before events
 * go off or the ring goes away; forget: the block is not followed further
 * (an allocation still live is then freed in a record of its own). */
void shard_settle_events(shard *sh, event_ring *r, int forget);
/* The end of sh's ring now (sh->ring is set; the caller holds sh's lock),
 * its newest record settled first: a reader that stops there
 * (event_ring_read_to) reads every event up to this moment, each free
 * included. */
event_ring_end shard_events_end(shard *sh);

/* Stamps ev (never older than r's previous such stamp) and pushes it into
 * r, the ring of sh a caller holding sh's lock read; returns the stamp.
 * ev->ts_ns: 0, now; else an event_clock_stamp() the caller took before
 * what the event reports. */
static inline uint64_t shard_emit_into(shard *sh, event_ring *r, pool_event *ev) {
  shard_settle_events(sh, r, 1);
  ev->ts_ns = ev->ts_ns ? event_clock_ring_stamp_at(r, ev->ts_ns) : event_clock_ring_stamp(r);
  event_ring_push(r, ev);
  return ev->ts_ns;
}

/* Records ev with a timestamp; callers hold the shard lock. */
static inline void shard_emit(shard *sh, const pool_event *ev) {
  event_ring *r = shard_recording(sh);
  if (!r)
    return;
  pool_event e = *ev;
  shard_emit_into(sh, r, &e);
}

/* shard_emit for a caller that does not hold sh's lock. */
static inline void shard_emit_locked(shard *sh, const pool_event *ev) {
  spin_lock(&sh->lock);
  shard_emit(sh, ev);
  spin_unlock(&sh->lock);
}

#endif
