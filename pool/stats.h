/* Statistics kept per shard under its lock, summed on read. */
#ifndef GPUPOOL_STATS_H
#define GPUPOOL_STATS_H

#include "core/assert.h"
#include "gpupool/gpupool.h"
#include "types.h"

/* The count of small blocks (large 0) or large ones (large 1; nothing else). */
static inline kind_count *stat_kind(stat_counter *s, int large) {
  return &s->by_kind[large];
}

/* Adds n >= 0 to kind large (0 or 1). */
static inline void stat_inc(stat_counter *s, int large, int64_t n) {
  kind_count *k = stat_kind(s, large);
  int64_t cur = k->current += n;
  if (cur > k->peak)
    k->peak = cur;
  int64_t total = cur + stat_kind(s, !large)->current;
  if (total > s->total_peak)
    s->total_peak = total;
}

/* Subtracts n >= 0 from kind large. */
static inline void stat_dec(stat_counter *s, int large, int64_t n) {
  kind_count *k = stat_kind(s, large);
  gp_assert_internal(n >= 0 && k->current >= n); /* counts never go negative */
  k->current -= n;
  k->freed += n;
}

/* Adds delta of either sign; 0 changes nothing. */
static inline void stat_add(stat_counter *s, int large, int64_t delta) {
  if (delta > 0)
    stat_inc(s, large, delta);
  else if (delta < 0)
    stat_dec(s, large, -delta);
}

/* Moves n >= 0 from the other kind to kind large (a page of an expandable
 * pool moved between a small and a large segment): the total, and what each
 * kind reports as allocated less freed, follow; nothing is freed. */
static inline void stat_transfer(stat_counter *s, int large, int64_t n) {
  kind_count *from = stat_kind(s, !large), *to = stat_kind(s, large);
  gp_assert_internal(n >= 0 && from->current >= n);
  from->current -= n;
  to->current += n;
  if (to->current > to->peak)
    to->peak = to->current;
}

static inline int64_t stat_total(const stat_counter *s) {
  return s->small.current + s->large.current;
}

/* current of type t (GPUPOOL_STAT_ALL, _SMALL or _LARGE). */
static inline int64_t stat_current(const stat_counter *s, int t) {
  if (t == GPUPOOL_STAT_ALL)
    return stat_total(s);
  return t == GPUPOOL_STAT_SMALL ? s->small.current : s->large.current;
}

static inline gpupool_stat kind_report(const kind_count *c) {
  return (gpupool_stat){.current = c->current,
                        .peak = c->peak,
                        .allocated = c->current - c->base + c->freed,
                        .freed = c->freed};
}

/* s as gpupool_get_stats reports it, indexed by GPUPOOL_STAT_ALL/_SMALL/_LARGE. */
static inline void stat_report(const stat_counter *s, gpupool_stat out[GPUPOOL_STAT_TYPES]) {
  out[GPUPOOL_STAT_SMALL] = kind_report(&s->small);
  out[GPUPOOL_STAT_LARGE] = kind_report(&s->large);
  out[GPUPOOL_STAT_ALL] = (gpupool_stat){
      .current = out[GPUPOOL_STAT_SMALL].current + out[GPUPOOL_STAT_LARGE].current,
      .peak = s->total_peak,
      .allocated = out[GPUPOOL_STAT_SMALL].allocated + out[GPUPOOL_STAT_LARGE].allocated,
      .freed = out[GPUPOOL_STAT_SMALL].freed + out[GPUPOOL_STAT_LARGE].freed};
}

/* peak = current. */
static inline void stat_reset_peak(stat_counter *s) {
  s->small.peak = s->small.current;
  s->large.peak = s->large.current;
  s->total_peak = stat_total(s);
}

/* allocated = freed = 0. */
static inline void stat_reset_accumulated(stat_counter *s) {
  s->small.freed = s->large.freed = 0;
  s->small.base = s->small.current;
  s->large.base = s->large.current;
}

/* active = allocation + pending, from their reports. Its increments are the
 * allocations; its decrements are the frees not deferred plus the deferred
 * ones completed. Its peak is reached either with nothing pending (then it
 * is the allocation peak) or while frees are pending (then it was recorded
 * in pending_peak at that allocation). */
static inline gpupool_stat stat_active(const gpupool_stat *alloc, const gpupool_stat *pending,
                                       int64_t pending_peak) {
  gpupool_stat a;
  a.current = alloc->current + pending->current;
  a.allocated = alloc->allocated;
  a.freed = alloc->freed - pending->allocated + pending->freed;
  a.peak = alloc->peak > pending_peak ? alloc->peak : pending_peak;
  return a;
}

/* gpupool_get_stats without its argument checks. It takes no slow_lock, so
 * a caller may hold it (the OOM report does); no shard lock may be held. */
void stats_collect(gpupool *p, gpupool_stats *out);

/* Raises the pool-wide peaks to the current sums over all shards. Called
 * by the one thread that tracks them (pool.c note_peaks), holding no lock;
 * it reads each shard but `fresh` (read by stats_peaks_read just before, or
 * NULL) under the shard's lock. */
void stats_note_peaks(gpupool *p, const struct shard *fresh);
/* The same thread, holding sh's lock: sh's current values into its copy
 * and the running sums. */
void stats_peaks_read(gpupool *p, struct shard *sh);

/* Bytes allocated now over all shards; with peak_sum, also the sum of each
 * shard's peak of them (the pool's peak when it has one stream). `held` is a
 * shard the caller has locked already, or NULL. */
int64_t stats_allocated_bytes(gpupool *p, const struct shard *held, int64_t *peak_sum);

#endif
