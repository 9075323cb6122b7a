/* The pool's data structures. A pool is split into shards, one per stream:
 * each shard has its own lock, free-block index, pending list, statistics and
 * event ring, so threads allocating on different streams never contend.
 * Segments (device allocations) belong to one shard; blocks tile segments.
 * What spans shards — segment counts, reserved bytes, the device-call path —
 * sits in the pool under `slow_lock`, taken only on the slow path. */
#ifndef GPUPOOL_POOL_INTERNAL_H
#define GPUPOOL_POOL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend.h"
#include "core/clock.h"
#include "conf.h"
#include "event_clock.h"
#include "event_ring.h"
#include "pool_view.h"
#include "addrmap.h"
#include "core/spinlock.h"
#include "stats.h"
#include "thread_state.h"

typedef struct shard shard;

/* What spans the shards of a pool (see gpupool.counters_lock). */
typedef struct pool_counters {
  stat_counter segments, reserved_bytes;
  uint64_t alloc_retries, ooms, device_allocs, device_frees, gc_runs, pages_moved, device_syncs;
  pool_device_timing timing;
  uint64_t seq; /* bumped by every change: a reader that saw it move reads again */
} pool_counters;
typedef struct segment segment;

/* BLOCK_CLAIMED: taken by the slow path while it maps the block's pages
 * (shard_claim), neither free nor handed out yet. */
typedef enum { BLOCK_FREE = 0, BLOCK_ALLOCATED, BLOCK_PENDING, BLOCK_CLAIMED } block_state;

typedef struct block {
  uintptr_t addr;
  size_t size;
  size_t requested;
  segment *seg;
  struct block *prev, *next;  /* address neighbours in the segment */
  struct block *left, *right; /* free index (treap) */
  uint32_t prio;
  uint8_t state;
  uint8_t nstreams; /* other streams it was used on (record_stream) */
  uint8_t cap_streams;
  uint8_t tag;    /* the allocating thread's tag id (thread_state.h) while allocated */
  void **streams; /* then, while pending: the events to wait for */
  struct block *pending_next;
  uint64_t free_seq; /* shard-local free order, for GC */
  /* While allocated or pending: the clock_stamp() of its EV_ALLOC event (the
   * stamp the event took anyway, no clock read of its own); 0 when events
   * were off. Read by pool_walk only. */
  uint64_t alloc_stamp;
} block;

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

struct segment {
  uintptr_t addr;
  size_t size;
  shard *sh;
  int large;
  size_t nblocks;
  block *first;
  segment *prev, *next; /* the shard's segments */
  /* vmm segments (expandable_segments) only, else pages is NULL: the
   * physical page mapped at each page_size step, NULL where none. Every page
   * under an allocated or pending block is mapped; pages wholly under free
   * blocks may not be. Changed under the shard lock and the slow lock. */
  void **pages;
  size_t page_size, npages, nmapped;
  size_t top; /* no page at or above this index was ever mapped: scans stop there */
};

/* Bytes of device memory behind seg: all of it, or its mapped pages. */
static inline size_t segment_mapped_bytes(const segment *seg) {
  return seg->pages ? seg->nmapped * seg->page_size : seg->size;
}

/* Cache hits and frees are not counted apart: they are the allocation
 * statistic's increments (less device_sourced) and decrements. */
typedef struct shard_stats {
  stat_counter s[STAT_COUNT];
  /* Highest active count [0] and bytes [1] reached while frees were pending. */
  int64_t active_peak[2][GPUPOOL_STAT_TYPES];
  uint64_t device_sourced, sync_events;
  uint64_t hist_bucket[POOL_HIST_BUCKETS]; /* requests (pool_histogram) */
  uint64_t hist_sum;
} shard_stats;

struct shard {
  spinlock lock;
  void *stream;
  gpupool *pool;
  block *free_tree[2]; /* [0] small, [1] large */
  size_t nfree;
  block *pending; /* freed, waiting on events */
  size_t npending;
  segment *segments;
  block *spare; /* recycled block structs */
  uint32_t rng;
  uint64_t free_seq;
  shard_stats st;
  int64_t tag_bytes[POOL_TAG_SLOTS]; /* allocated bytes per tag id ([0] unused) */
  addrmap live;                      /* allocated and not yet freed blocks, by address */
  event_ring *ring;                  /* NULL when events are off */
  /* Expandable segments: an event recorded on the stream after the frees up
   * to fence_seq; once it completed, blocks freed up to safe_seq are no
   * longer used by queued work, and their pages move without a synchronize. */
  void *fence;
  uint64_t fence_seq, safe_seq;
  shard *next_shard;
} __attribute__((aligned(64)));

#define SHARD_TABLE 1024 /* distinct streams per pool */

struct gpupool {
  pool_config cfg;
  backend *be;
  uint32_t id;
  _Atomic(shard *) shard_table[SHARD_TABLE];
  shard *_Atomic shards; /* list of all shards, newest first */
  pthread_mutex_t shard_create_lock;

  pthread_mutex_t slow_lock; /* device calls, cross-shard reclaim */
  /* Pool-wide counters: changed on the slow path (under slow_lock) inside
   * counters_lock, a leaf lock held for a few stores, so that
   * gpupool_get_stats reads them without waiting on a device call. */
  spinlock counters_lock;
  pool_counters c;
  size_t device_total; /* cached for the GC threshold and vmm ranges; 0 until needed */
  /* Expandable segments: pages moved so far, under slow_lock; every
   * expandable_growth_moves of them add a page to the slack (pages.c). */
  uint64_t moves_for_growth;
  /* Old mappings of moved pages waiting for their stream's fence (pages.c),
   * under slow_lock; freed when empty. */
  struct stale_page *stale;
  size_t nstale, cap_stale;
  /* The last device reading the pool made (GC threshold, reserve), for OOM
   * reports, which make no device call; seen_ns 0: none. */
  size_t seen_free, seen_total;
  uint64_t seen_ns;

  pthread_mutex_t peak_lock; /* peaks of sums across shards (see stats.c) */
  int64_t agg_peak[VIEW_COUNT][GPUPOOL_STAT_TYPES];
  /* While one thread uses a pool of several shards, pool-wide peaks are kept
   * exact after each operation (pool.c note_peaks). */
  _Atomic int nshards;
  _Atomic(const void *) owner; /* the first thread to allocate once there are several */
  _Atomic int shared;          /* another thread allocated too: tracking is off */
};

/* Runs stmt (an update of p->c) inside counters_lock. Callers hold
 * slow_lock, and may hold a shard lock: counters_lock is a leaf. */
#define POOL_COUNT(p, stmt)                                                                        \
  do {                                                                                             \
    spin_lock(&(p)->counters_lock);                                                                \
    stmt;                                                                                          \
    (p)->c.seq++;                                                                                  \
    spin_unlock(&(p)->counters_lock);                                                              \
  } while (0)

extern _Atomic size_t shard_events_cap; /* 0: events off */
static inline int shard_recording(const shard *sh) {
  return sh->ring && atomic_load_explicit(&shard_events_cap, memory_order_relaxed);
}

/* Records ev with a timestamp; callers hold the shard lock. */
static inline void shard_emit(shard *sh, const pool_event *ev) {
  if (!shard_recording(sh))
    return;
  pool_event e = *ev;
  e.ts_ns = event_clock_ring_stamp(sh->ring);
  event_ring_push(sh->ring, &e);
}

#endif
