/* The pool's types, in one header (as mimalloc's types.h): configuration,
 * statistics, blocks, segments, shards and the pool, and the per-thread
 * state. The pool's modules include it; their own headers declare functions
 * only. It includes the headers of the self-contained data structures the
 * types embed (addrmap, event_ring) and the backend interface, nothing
 * of the pool's modules.
 *
 * A pool is split into shards, one per stream: each shard has its own lock,
 * free-block index, pending list, statistics and event ring, so threads
 * allocating on different streams never contend. Segments (device
 * allocations) belong to one shard; blocks tile segments. What spans shards —
 * segment counts, reserved bytes, the device-call path — sits in the pool
 * under `slow_lock`, taken only on the slow path. */
#ifndef GPUPOOL_TYPES_H
#define GPUPOOL_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "addrmap.h"
#include "backend.h"
#include "core/spinlock.h"
#include "event_ring.h"
#include "gpupool/gpupool.h"
#include "gpupool/tag.h"
#include "view_types.h"

#define MiB ((size_t)1 << 20)

/* A pool's configuration: defaults, then gpupool_options, then its tunables
 * string, then GPUPOOL_CONF; later wins (conf.c). */
typedef struct pool_config {
  char name[128];
  int device;
  gpupool_backend backend; /* DEFAULT is resolved at create time */
  gpupool_strategy strategy;
  size_t host_capacity;
  size_t max_split_size; /* SIZE_MAX: no limit */
  size_t max_non_split_rounding;
  unsigned roundup_power2_divisions; /* 0 or 1: off */
  double gc_threshold;               /* fraction of device memory; 0: off */
  double reserve_percent;            /* 0: off */
  unsigned round_linear_cutoff;      /* log2 bytes */
  int expandable;                    /* expandable_segments: large segments on vmm pages */
  double expandable_slack;           /* expandable_slack_percent / 100 */
  unsigned expandable_growth_moves;  /* pages moved per page added to the slack; 0: never */
  unsigned fault_every_n;
  double fault_rate;
  uint64_t fault_seed;
  /* The last fault_* key given, whatever its value (NULL: none): only
   * backend host takes them, so gpupool_create refuses them on another. */
  const char *fault_key;
  /* The cap on reserved bytes, as a fraction of the device's memory
   * (PyTorch's per-process memory fraction); < 0: none. Changed by
   * gpupool_set_memory_fraction under slow_lock while others read it:
   * accessed with __atomic_load and __atomic_store. */
  double memory_fraction;
} pool_config;

/* What each shard counts. "active" (allocated, or freed and waiting on other
 * streams) is not counted: it is allocation + pending, derived when read,
 * which keeps two statistics off the hot path. */
typedef enum {
  STAT_ALLOCATION,
  STAT_PENDING, /* freed blocks waiting on other streams' events */
  STAT_INACTIVE_SPLIT,
  STAT_ALLOCATED_BYTES,
  STAT_PENDING_BYTES,
  STAT_INACTIVE_SPLIT_BYTES,
  STAT_REQUESTED_BYTES,
  STAT_COUNT
} shard_stat_id;

/* What gpupool_get_stats reports per shard, in this order. */
typedef enum {
  VIEW_ALLOCATION,
  VIEW_ACTIVE,
  VIEW_INACTIVE_SPLIT,
  VIEW_ALLOCATED_BYTES,
  VIEW_ACTIVE_BYTES,
  VIEW_INACTIVE_SPLIT_BYTES,
  VIEW_REQUESTED_BYTES,
  VIEW_COUNT
} view_stat_id;

/* One statistic, counted for small and large blocks apart and reported for
 * each and for both (GPUPOOL_STAT_ALL) as a gpupool_stat. An update touches
 * its own kind only: `allocated` is derived (current - base + freed, base
 * being current at the last reset of the accumulations) and ALL is summed
 * when read; only ALL's peak needs a field of its own. */
typedef struct kind_count {
  int64_t current, peak, freed, base;
} kind_count;

typedef struct stat_counter {
  union { /* read by name; stat_kind() picks one by a segment's `large` */
    struct {
      kind_count small, large;
    };
    kind_count by_kind[2]; /* for stat_kind only: a load, no branch */
  };
  int64_t total_peak;
} stat_counter;
_Static_assert(offsetof(stat_counter, small) == offsetof(stat_counter, by_kind[0]) &&
                   offsetof(stat_counter, large) == offsetof(stat_counter, by_kind[1]),
               "by_kind[large] is the kind named by large");

/* Tag ids: 0 is "no tag", 1 .. GPUPOOL_TAG_MAX - 1 the named tags in the
 * order the process first used them, GPUPOOL_TAG_MAX "other". */
#define POOL_TAG_SLOTS (GPUPOOL_TAG_MAX + 1)
#define POOL_TAG_OTHER GPUPOOL_TAG_MAX

typedef struct shard shard;
typedef struct segment segment;

/* What the pool keeps per thread (thread_state.h). */
typedef struct pool_thread_state {
  const struct gpupool *pool;
  uint32_t id; /* a pool created where a destroyed one was is another pool */
  struct shard *sh;
  uint8_t tag;   /* current tag id */
  uint8_t depth; /* pushed tags */
  uint8_t stack[GPUPOOL_TAG_DEPTH];
} pool_thread_state;

/* What spans the shards of a pool (see gpupool.counters_lock). */
typedef struct pool_counters {
  stat_counter segments, reserved_bytes;
  uint64_t alloc_retries, ooms, device_allocs, device_frees, gc_runs, pages_moved, device_syncs,
      alloc_unmaps;
  pool_device_timing timing;
  uint64_t seq; /* bumped by every change: a reader that saw it move reads again */
} pool_counters;

/* BLOCK_CLAIMED: taken by the slow path while it maps the block's pages
 * (shard_claim), neither free nor handed out yet. BLOCK_PLACED: split off a
 * free block by the search over mapped pages for the request its caller
 * carves next (shard_place_mapped), never in the index; nothing else sees
 * it, as that happens under the shard lock the search held. */
typedef enum {
  BLOCK_FREE = 0,
  BLOCK_ALLOCATED,
  BLOCK_PENDING,
  BLOCK_CLAIMED,
  BLOCK_PLACED
} block_state;

typedef struct block {
  uintptr_t addr;
  size_t size;
  union {
    size_t requested; /* while allocated (and while pending, until its free is recorded) */
    /* While free: in a vmm segment, at least the longest stretch of the
     * block over mapped pages, in bytes (exact where pages change under it,
     * pages.c; an upper bound after a split or a merge, shard.c, tightened
     * by the search it misleads); unused in a plain segment. A request of
     * more bytes cannot be placed over mapped pages only here, so the search
     * for such a placement skips the block in a compare. Next to size and
     * the index's links: the search reads it on every block it passes.
     * Bit 0 (sizes and stretches are multiples of MIN_BLOCK) is clear only
     * where every page under the block is known to be mapped (the value is
     * then the block's size), so that the hot path reads no page for such a
     * block (mapped_run_full); set where that is unknown. A merge's sum of
     * its parts' values keeps the bit clear only if it is clear in each
     * (shard_release), so that pools without vmm segments pay nothing. */
    size_t mapped_run;
  };
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

struct segment {
  uintptr_t addr;
  size_t size;
  shard *sh;
  int large;
  size_t nblocks;
  block *first;
  segment *prev, *next; /* the shard's segments */
  /* vmm segments (expandable_segments) only, else pages is NULL: the
   * physical page mapped at each page_size step, NULL where none, read and
   * written through page_handle and page_handle_set (pages.h). A directory
   * of chunks of PAGE_CHUNK handles, each allocated when a page in it is
   * first mapped: a range as large as the device mostly never is, and a
   * replay creates such ranges by the dozen. Every page under an allocated
   * or pending block is mapped; pages wholly under free blocks may not be.
   * Changed under the shard lock and the slow lock. */
  void ***pages;
  uint64_t *mapped; /* a bit per page: mapped for its blocks (page_mapped) */
  size_t page_size, npages, nmapped;
  unsigned page_shift; /* log2(page_size), a power of two */
  size_t top;          /* no page at or above this index was mapped since the range was made or last
                          released whole: scans stop there */
  size_t chunks_top;   /* no chunk of pages at or above this index was made */
};

/* Cache hits and frees are not counted apart: they are the allocation
 * statistic's increments (less device_sourced) and decrements. */
typedef struct shard_stats {
  stat_counter s[STAT_COUNT];
  /* Highest active count and bytes reached while frees were pending. */
  struct {
    int64_t count[GPUPOOL_STAT_TYPES], bytes[GPUPOOL_STAT_TYPES];
  } active_peak;
  uint64_t device_sourced, sync_events;
  /* requests (pool_histogram); stored with __atomic_store_n: the event
   * clock's count reads them without the lock (pool_events_lifetimes_total) */
  uint64_t hist_bucket[POOL_HIST_BUCKETS];
  uint64_t hist_sum;
} shard_stats;

struct shard {
  spinlock lock;
  void *stream;
  gpupool *pool;
  /* The free index (free_index.h) of each size kind; shard_free_tree()
   * picks one by a segment's `large`. */
  union {
    struct {
      block *small, *large;
    };
    block *by_kind[2]; /* for shard_free_tree only: a load, no branch */
  } free_tree;
  size_t nfree;
  block *pending; /* freed, waiting on events */
  size_t npending;
  segment *segments;
  block *spare; /* recycled block structs */
  uint32_t rng;
  int by_block; /* the pool's by_block: no live map */
  uint64_t free_seq;
  shard_stats st;
  int64_t tag_bytes[POOL_TAG_SLOTS]; /* allocated bytes per tag id ([0] unused) */
  addrmap live;                      /* allocated and not yet freed blocks, by address */
  /* NULL until events are first turned on; stored with __atomic_store_n
   * once the shard is listed (pool_events_lifetimes_total reads it unlocked) */
  event_ring *ring;
  /* ring while events are on, NULL while off: the hot path's one test of
   * whether to record, read under the shard lock. Stored relaxed by
   * pool_events_switch without that lock (a thread allocating in a loop
   * would keep it from a spinning switch); ring and recording change
   * together only under the lock (pool_events_enable). */
  _Atomic(event_ring *) recording;
  /* Expandable segments: an event recorded on the stream after the frees up
   * to fence_seq; once it completed, blocks freed up to safe_seq are no
   * longer used by queued work, and their pages move without a synchronize. */
  void *fence;
  uint64_t fence_seq, safe_seq;
  shard *next_shard;
  /* The tracking thread's copy of st's current values [0 small, 1
   * large][id], as last read (stats.c stats_note_peaks; only it touches them). */
  int64_t peak_cur[2][STAT_COUNT];
} __attribute__((aligned(64)));
_Static_assert(offsetof(shard, free_tree.large) == offsetof(shard, free_tree.by_kind[1]),
               "free_tree.by_kind[large] is the tree named by large");

#define SHARD_TABLE 1024 /* distinct streams per pool */

struct gpupool {
  pool_config cfg;
  backend *be;
  uint32_t id;
  /* process_forks when the pool was created: a pool created before this
   * process was forked from its parent is the parent's (pool.c). */
  unsigned forks;
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
  /* The memory_fraction cap refused the current allocation's last try at
   * more device memory (reclaim.c), under slow_lock: its OOM says so. */
  int limit_refused;

  pthread_mutex_t peak_lock; /* peaks of sums across shards (see stats.c) */
  int64_t agg_peak[VIEW_COUNT][GPUPOOL_STAT_TYPES];
  /* While one thread uses a pool of several shards, pool-wide peaks are kept
   * exact after each operation (pool.c note_peaks). */
  _Atomic int nshards;
  _Atomic(const void *) owner; /* the first thread to allocate once there are several */
  _Atomic int shared;          /* another thread allocated too: tracking is off */
  int by_block;                /* no map of live addresses (pool_blocks.h) */
  /* The owner's running sums of the shards' peak_cur, and the highest sums
   * it has raised agg_peak to since gpupool_reset_peak_stats last bumped
   * peak_epoch (under peak_lock): agg_peak is locked only for a new high. */
  int64_t peak_sum[2][STAT_COUNT];
  int64_t peak_seen[VIEW_COUNT][GPUPOOL_STAT_TYPES];
  unsigned peak_seen_epoch;
  _Atomic unsigned peak_epoch;
};

#endif
