/* Statistics kept per shard under its lock, summed on read. */
#ifndef GPUPOOL_STATS_H
#define GPUPOOL_STATS_H

#include "gpupool/gpupool.h"

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

static inline void stat_inc_one(gpupool_stat *s, int64_t n) {
  s->current += n;
  s->allocated += n;
  if (s->current > s->peak)
    s->peak = s->current;
}

/* Adds n >= 0 to the ALL entry and to the small or large entry. */
static inline void stat_inc(gpupool_stat s[GPUPOOL_STAT_TYPES], int large, int64_t n) {
  stat_inc_one(&s[GPUPOOL_STAT_ALL], n);
  stat_inc_one(&s[GPUPOOL_STAT_SMALL + large], n);
}

/* Subtracts n >= 0 from the ALL entry and from the small or large entry. */
static inline void stat_dec(gpupool_stat s[GPUPOOL_STAT_TYPES], int large, int64_t n) {
  s[GPUPOOL_STAT_ALL].current -= n;
  s[GPUPOOL_STAT_ALL].freed += n;
  s[GPUPOOL_STAT_SMALL + large].current -= n;
  s[GPUPOOL_STAT_SMALL + large].freed += n;
}

/* active = allocation + pending. Its increments are the allocations; its
 * decrements are the frees not deferred plus the deferred ones completed.
 * Its peak is reached either with nothing pending (then it is the
 * allocation peak) or while frees are pending (then it was recorded in
 * pending_peak at that allocation). */
/* Adds delta of either sign; 0 changes nothing. */
static inline void stat_add(gpupool_stat s[GPUPOOL_STAT_TYPES], int large, int64_t delta) {
  if (delta > 0)
    stat_inc(s, large, delta);
  else if (delta < 0)
    stat_dec(s, large, -delta);
}

static inline gpupool_stat stat_active(const gpupool_stat *alloc, const gpupool_stat *pending,
                                       int64_t pending_peak) {
  gpupool_stat a;
  a.current = alloc->current + pending->current;
  a.allocated = alloc->allocated;
  a.freed = alloc->freed - pending->allocated + pending->freed;
  a.peak = alloc->peak > pending_peak ? alloc->peak : pending_peak;
  return a;
}

/* Raises the pool-wide peaks to the current sums over all shards (each read
 * under its lock). Callers hold no pool lock. */
void stats_note_peaks(gpupool *p);

static inline void stat_reset_peak(gpupool_stat *s) {
  s->peak = s->current;
}

static inline void stat_reset_accumulated(gpupool_stat *s) {
  s->allocated = s->freed = 0;
}

#endif
