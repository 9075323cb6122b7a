/* A consistent copy of one pool at one moment: its segments with their
 * blocks, and the last events of its rings, taken under the pool's slow lock
 * and each stream's lock, so that replaying the events backwards from the
 * blocks stays within the segments (PyTorch's memory snapshot needs that).
 * Bounded (pool_capture_limits): whole segments only, while their count,
 * their blocks and their runs of mapped pages fit the limits, and the last
 * max_events events; the aggregates below always cover every block. No
 * device call. */
#ifndef GPUPOOL_POOL_CAPTURE_H
#define GPUPOOL_POOL_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include "event_ring.h"
#include "gpupool/gpupool.h"
#include "pool_view.h"

typedef struct pool_capture_segment {
  pool_segment_info info;
  int expandable;     /* a vmm segment (expandable_segments) */
  size_t first_block; /* index into pool_capture.blocks */
  /* A vmm segment's runs of mapped pages, in address order (maximal: two
   * never touch): pool_capture.runs[first_run, first_run + nruns). A plain
   * segment has none (all of it is device memory). */
  size_t first_run, nruns;
} pool_capture_segment;

/* Mapped bytes [addr, addr + size) of a vmm segment. */
typedef struct pool_capture_run {
  uint64_t addr, size;
} pool_capture_run;

/* Sums over every block and segment (never truncated). */
typedef struct pool_capture_totals {
  uint64_t segments, blocks;
  uint64_t reserved;       /* device memory held: mapped bytes of every segment */
  uint64_t small_reserved; /* of small segments */
  /* Free blocks; in vmm segments their bytes over mapped pages only, and the
   * longest such stretch (free_block_mapped). */
  uint64_t free_bytes, free_blocks, largest_free;
  uint64_t largest_free_addr;   /* the first free block (in the capture's order) of largest_free */
  uint64_t cached_bytes;        /* device memory of segments with no live block:
                                   what an empty_cache would return now */
  uint64_t split_free_bytes;    /* free blocks inside segments that hold live blocks */
  uint64_t split_free_at_least; /* ...of those, in segments of at least split_limit bytes */
  uint64_t large_live_bytes;    /* allocated and pending blocks of large segments */
  uint64_t large_live_pages;    /* the same, in whole pages of page_size (no sharing) */
  uint64_t page_size;           /* the backend's vmm page size (0: none) */
  /* With a request (pool_capture_limits.request): where the free blocks
   * lie that it could not take. A block serves only its stream, and only
   * requests of its size pool (small: up to 1 MiB; an expandable pool's
   * small request may also take mapped pages of its stream's large range);
   * and the strategy's rules keep some blocks large enough from it
   * (round and naive take a block of the rounded size only; bfc's blocks
   * of max_split_size or more serve only requests within
   * max_non_split_rounding of their size). Bytes over mapped pages; the
   * largest: the longest such stretch, as largest_free. */
  uint64_t usable_largest;                          /* the largest free block it could take */
  uint64_t other_stream_free, other_stream_largest; /* free blocks of other streams */
  uint64_t other_pool_free, other_pool_largest;     /* its stream's, of the other size pool */
  uint64_t rules_free, rules_largest; /* large enough, but refused by the strategy's rules */
} pool_capture_totals;

typedef struct pool_capture {
  uint32_t pool_id;
  char name[128];
  int device;
  const char *backend, *strategy; /* static strings */
  int expandable;
  uint64_t max_split_size; /* UINT64_MAX: no limit */
  pool_capture_segment *segs;
  size_t nsegs;
  pool_block_info *blocks; /* state strings are static */
  size_t nblocks;
  pool_capture_run *runs; /* of the vmm segments copied */
  size_t nruns, cap_runs;
  int truncated;      /* not every segment was copied (a limit of pool_capture_limits) */
  pool_event *events; /* oldest first; CLOCK_REALTIME ns stamps */
  size_t nevents;
  uint64_t events_lost; /* events of the window overwritten before the copy */
  /* The events from this time on (CLOCK_REALTIME ns) are all here, every
   * stream's, and none before it; 0: all since the pool began. The streams' rings reach back
   * differently far: a stream's older events, where another's ring no
   * longer holds its own, are left out, so that the events replay the pool
   * consistently (backwards from the blocks copied). */
  uint64_t events_since_ns;
  pool_capture_totals t;
} pool_capture;

/* Where an event goes among events of other rings with the same stamp
 * (pool_capture_goes_first): block releases, block takings, the rest, and
 * segment events last, in the order of their numbers. */
static inline int pool_capture_tie_rank(const pool_event *e) {
  switch (e->type) {
  case EV_FREE:
  case EV_FREE_COMPLETED:
    return 0;
  case EV_ALLOC:
    return 1;
  case EV_SEGMENT_ALLOC:
  case EV_SEGMENT_FREE:
    return 3;
  default:
    return 2;
  }
}

/* Whether event a, the head of one ring, goes before b, another's, when
 * rings are merged by time: the earlier; on a tie (stamps taken within one
 * tick of the coarse clock are equal), by pool_capture_tie_rank, and segment
 * events by their numbers. Each ring keeps its own order (only heads are
 * compared), and a block event waits on no other ring's: its segment's (or
 * pages') event is in its own ring, before it. Across rings an address
 * changes hands only by segment events (one pool's or stream's segment free,
 * then another's alloc), whose numbers follow that order, so the merge
 * replays consistently however many events share the tick. */
static inline int pool_capture_goes_first(const pool_event *a, const pool_event *b) {
  if (a->ts_ns != b->ts_ns)
    return a->ts_ns < b->ts_ns;
  int ra = pool_capture_tie_rank(a), rb = pool_capture_tie_rank(b);
  if (ra != rb)
    return ra < rb;
  return ra == 3 && a->seq < b->seq; /* two segment events; else ring order */
}

/* Copies p (taking its slow lock unless slow_locked) into out. split_limit:
 * see split_free_at_least (0: not wanted). 0, or -1 when out of host memory
 * (out is then empty). As pool_capture_take_limited with max_blocks and
 * max_events, and no other limit. */
int pool_capture_take(gpupool *p, int slow_locked, size_t max_blocks, size_t max_events,
                      uint64_t split_limit, pool_capture *out);

/* What a copy may hold: whole segments, in the pools' order, while all of
 * them, their blocks and their runs of mapped pages fit (the first that
 * does not ends the copy: truncated), and the last max_events events, of
 * each ring at most twice its capacity (what its records held before a
 * record could repeat lifetimes, event_ring.h). The
 * arrays are allocated for at most these counts and trimmed to what was
 * copied, so that a copy holds at most
 * max_segments * sizeof(pool_capture_segment) + max_blocks *
 * sizeof(pool_block_info) + max_runs * sizeof(pool_capture_run) +
 * max_events * sizeof(pool_event) bytes of host memory. */
typedef struct pool_capture_limits {
  size_t max_segments, max_blocks, max_runs, max_events;
  uint64_t split_limit; /* see split_free_at_least (0: not wanted) */
  /* The request the copy explains (an OOM report's): its stream and its
   * rounded size fill the totals' usable_largest, other_stream_*,
   * other_pool_* and rules_*. */
  int request;
  uint64_t stream;
  uint64_t rounded;
} pool_capture_limits;
int pool_capture_take_limited(gpupool *p, int slow_locked, const pool_capture_limits *lim,
                              pool_capture *out);
void pool_capture_free(pool_capture *c);
/* Takes and lets go of p's slow lock, for pool_capture_take(p, 1, ...):
 * while it is held, p's segments do not change. Pools captured each under
 * its lock, every lock held until the last is captured, show their
 * segments at one moment (the pools of a device share its addresses: one
 * pool's released segment can be another's new one). */
void pool_capture_hold(gpupool *p);
void pool_capture_let_go(gpupool *p);

#endif
