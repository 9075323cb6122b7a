/* Statistics kept per shard under its lock, summed on read. */
#ifndef GPUPOOL_STATS_H
#define GPUPOOL_STATS_H

#include "gpupool/gpupool.h"

typedef enum {
  STAT_ALLOCATION,
  STAT_ACTIVE,
  STAT_INACTIVE_SPLIT,
  STAT_ALLOCATED_BYTES,
  STAT_ACTIVE_BYTES,
  STAT_INACTIVE_SPLIT_BYTES,
  STAT_REQUESTED_BYTES,
  STAT_COUNT
} shard_stat_id;

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

static inline void stat_reset_peak(gpupool_stat *s) {
  s->peak = s->current;
}

static inline void stat_reset_accumulated(gpupool_stat *s) {
  s->allocated = s->freed = 0;
}

#endif
