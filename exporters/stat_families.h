/* The statistics of gpupool_stats by PyTorch's names (memory_stats keys
 * "<family>.<type>.<field>"), for the JSON documents that spell them out:
 * /snapshot and the OOM report. */
#ifndef GPUPOOL_STAT_FAMILIES_H
#define GPUPOOL_STAT_FAMILIES_H

#include "gpupool/gpupool.h"

#define STAT_FAMILIES 9

typedef struct stat_family {
  const char *name;      /* "allocation", "segment", ... */
  const gpupool_stat *s; /* indexed by GPUPOOL_STAT_ALL, _SMALL, _LARGE */
} stat_family;

/* The name of type t (GPUPOOL_STAT_ALL, _SMALL or _LARGE). */
static inline const char *stat_type_name(int t) {
  return t == GPUPOOL_STAT_SMALL ? "small_pool" : t == GPUPOOL_STAT_LARGE ? "large_pool" : "all";
}

/* st's families in PyTorch's order. */
static inline void stat_families(const gpupool_stats *st, stat_family out[STAT_FAMILIES]) {
  const stat_family f[STAT_FAMILIES] = {
      {"allocation", st->allocation},
      {"segment", st->segment},
      {"active", st->active},
      {"inactive_split", st->inactive_split},
      {"allocated_bytes", st->allocated_bytes},
      {"reserved_bytes", st->reserved_bytes},
      {"active_bytes", st->active_bytes},
      {"inactive_split_bytes", st->inactive_split_bytes},
      {"requested_bytes", st->requested_bytes},
  };
  for (int i = 0; i < STAT_FAMILIES; i++)
    out[i] = f[i];
}

#endif
