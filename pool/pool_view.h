/* What the agent and exporters may read of a pool beyond the public API:
 * identity, the allocation-size histogram, the event rings and a walk over
 * segments and blocks (for /snapshot). Every function copies under the pool's
 * own locks and returns; none makes a device call. */
#ifndef GPUPOOL_POOL_VIEW_H
#define GPUPOOL_POOL_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "event_ring.h"
#include "gpupool/gpupool.h"
#include "view_types.h"

struct backend;
/* The pool's backend (for host fault injection and backend attributes). */
struct backend *pool_get_backend(gpupool *p);

/* A process-unique id, never reused (pool names may repeat). */
uint32_t pool_id(const gpupool *p);

/* GPUPOOL_OK where p serves this process; GPUPOOL_ERR_UNSUPPORTED, with the
 * reason for `call` in gpupool_last_error(), where p was created before this
 * process was forked (a pool is its creator's: a child cannot use its
 * parent's locks and device memory). Public calls that take a pool's locks
 * ask it first. */
gpupool_status pool_check_not_inherited(const gpupool *p, const char *call);

/* Allocation sizes (requested bytes): pool_histogram (view_types.h). */
void pool_get_histogram(gpupool *p, pool_histogram *out);

/* Device-call latency: pool_device_timing (view_types.h). */
void pool_get_device_timing(gpupool *p, pool_device_timing *out);

/* Backend-level numbers (cuda_async: cudaMemPoolGetAttribute; others 0). */
typedef struct pool_backend_info {
  uint64_t reserved_current, reserved_high, used_current, used_high;
  int valid;
} pool_backend_info;
void pool_get_backend_info(gpupool *p, pool_backend_info *out);

/* Snapshot walk: for each segment, fn_segment once, then fn_block for each of
 * its blocks in address order. States: "active_allocated",
 * "active_pending_free" (freed, waiting on other streams), "inactive". */
typedef struct pool_segment_info {
  uint64_t addr, size, allocated, active;
  uint64_t requested; /* of its allocated blocks */
  uint64_t mapped;    /* bytes of device memory behind it: size, less unmapped vmm pages */
  uint64_t stream;
  int is_large;
  size_t nblocks;
} pool_segment_info;
typedef struct pool_block_info {
  uint64_t addr, size;
  uint64_t requested; /* allocated and pending blocks (what the allocation asked); free: 0 */
  uint64_t stream;
  const char *state;
  uint64_t unmapped; /* bytes of its pages not mapped (free blocks of vmm segments) */
  /* CLOCK_REALTIME ns when it was allocated (allocated and pending blocks),
   * 0 when unknown: known only while the agent records events (the time is
   * its allocation event's, which costs the hot path no clock read). */
  uint64_t alloc_ns;
  const char *tag; /* gpupool_tag_push's name for allocated and pending blocks; NULL: none */
} pool_block_info;
typedef struct pool_walker {
  void (*segment)(void *arg, const pool_segment_info *s);
  void (*block)(void *arg, const pool_block_info *b);
  void *arg;
} pool_walker;
/* Copies the segment table under the pool locks, then calls the walker
 * without holding them. Returns the number of segments. */
size_t pool_walk(gpupool *p, const pool_walker *w);

/* Event rings: tracing is off until the agent turns it on. Turning it on
 * gives every shard of every pool (and later ones) a ring of `capacity`
 * events, and the event clock (event_clock.h) the count of them it
 * measures the event rate with; off stops recording (rings stay readable
 * until replaced). */
void pool_events_enable(size_t capacity);
void pool_events_disable(void);
/* Recording on (capacity > 0: the rings given before, and capacity for
 * shards created later) or off, without new rings: bench_events flips it
 * between phases. */
void pool_events_switch(size_t capacity);
int pool_events_enabled(void);
/* Records ever pushed into the rings of all registered pools. */
uint64_t pool_events_recorded_total(void);
/* The events that the allocations of the shards with rings stand for, two
 * an allocation (it and its free), whether they have records of their own,
 * share one (event_ring.h, "One record per lifetime") or repeat one
 * ("Repeated lifetimes"): the event clock's measure of the event rate
 * (pool_events_enable hands it over). Counted from the size histogram, which
 * the hot path keeps anyway, so that a repeat stores nothing but its
 * record's word; it steps back where a pool is destroyed or its accumulated
 * statistics are reset, and the clock does not judge such a period. Takes
 * no shard lock: it never waits for an allocating thread, even one
 * preempted inside its critical section. */
uint64_t pool_events_lifetimes_total(void);
/* Events p's rings have recorded and overwritten, summed over its streams. */
void pool_event_counts(gpupool *p, uint64_t *recorded, uint64_t *dropped);
/* Takes a reference on each ring of p (at most max), its newest record
 * settled (shard_settle_events), and where ends is not NULL the ring's end
 * then, under the shard's lock (event_ring_end_now): a reader that stops
 * there (event_ring_read_to) reads every event up to that moment, each free
 * included. Returns how many. */
size_t pool_event_rings_at(gpupool *p, event_ring **out, event_ring_end *ends, size_t max);

#endif
