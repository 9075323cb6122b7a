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

/* Adds delta to the ALL entry and to the small or large entry. */
static inline void stat_update(gpupool_stat s[GPUPOOL_STAT_TYPES], int large, int64_t delta) {
  gpupool_stat *t[2] = {&s[GPUPOOL_STAT_ALL], &s[large ? GPUPOOL_STAT_LARGE : GPUPOOL_STAT_SMALL]};
  for (int i = 0; i < 2; i++) {
    t[i]->current += delta;
    if (delta > 0) {
      t[i]->allocated += delta;
      if (t[i]->current > t[i]->peak) t[i]->peak = t[i]->current;
    } else {
      t[i]->freed -= delta;
    }
  }
}

static inline void stat_reset_peak(gpupool_stat *s) {
  s->peak = s->current;
}

static inline void stat_reset_accumulated(gpupool_stat *s) {
  s->allocated = s->freed = 0;
}

#endif
