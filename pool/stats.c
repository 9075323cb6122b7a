/* gpupool_get_stats and the resets: per-shard statistics summed under each
 * shard's lock, pool-wide counters copied under counters_lock (never the
 * slow lock, which is held across device calls). */

/* Copies tried before a snapshot is returned as read (segments changing
 * without pause): each retry is cheap, and a change is a device call. */
#define STATS_MAX_RETRIES 64
#include <string.h>

#include "core/errors.h"
#include "shard.h"
#include "pool_internal.h"
#include "pool_view.h"

static gpupool_stat *field(gpupool_stats *out, int id) {
  switch (id) {
  case VIEW_ALLOCATION:
    return out->allocation;
  case VIEW_ACTIVE:
    return out->active;
  case VIEW_INACTIVE_SPLIT:
    return out->inactive_split;
  case VIEW_ALLOCATED_BYTES:
    return out->allocated_bytes;
  case VIEW_ACTIVE_BYTES:
    return out->active_bytes;
  case VIEW_INACTIVE_SPLIT_BYTES:
    return out->inactive_split_bytes;
  default:
    return out->requested_bytes;
  }
}

/* A shard's statistics as reported (under its lock). */
static void shard_view(const shard_stats *st, gpupool_stat v[VIEW_COUNT][GPUPOOL_STAT_TYPES]) {
  gpupool_stat r[STAT_COUNT][GPUPOOL_STAT_TYPES];
  for (int id = 0; id < STAT_COUNT; id++)
    stat_report(&st->s[id], r[id]);
  for (int t = 0; t < GPUPOOL_STAT_TYPES; t++) {
    v[VIEW_ALLOCATION][t] = r[STAT_ALLOCATION][t];
    v[VIEW_ACTIVE][t] =
        stat_active(&r[STAT_ALLOCATION][t], &r[STAT_PENDING][t], st->active_peak.count[t]);
    v[VIEW_INACTIVE_SPLIT][t] = r[STAT_INACTIVE_SPLIT][t];
    v[VIEW_ALLOCATED_BYTES][t] = r[STAT_ALLOCATED_BYTES][t];
    v[VIEW_ACTIVE_BYTES][t] = stat_active(&r[STAT_ALLOCATED_BYTES][t], &r[STAT_PENDING_BYTES][t],
                                          st->active_peak.bytes[t]);
    v[VIEW_INACTIVE_SPLIT_BYTES][t] = r[STAT_INACTIVE_SPLIT_BYTES][t];
    v[VIEW_REQUESTED_BYTES][t] = r[STAT_REQUESTED_BYTES][t];
  }
}

void stats_peaks_read(gpupool *p, shard *sh) {
  for (int k = 0; k < 2; k++)
    for (int id = 0; id < STAT_COUNT; id++) {
      const stat_counter *c = &sh->st.s[id];
      int64_t v = k ? c->large.current : c->small.current;
      p->peak_sum[k][id] += v - sh->peak_cur[k][id];
      sh->peak_cur[k][id] = v;
    }
}

/* View id's sum for one kind, from its running sums c. */
static inline int64_t view_sum(const int64_t c[STAT_COUNT], int id) {
  switch (id) {
  case VIEW_ALLOCATION:
    return c[STAT_ALLOCATION];
  case VIEW_ACTIVE:
    return c[STAT_ALLOCATION] + c[STAT_PENDING];
  case VIEW_INACTIVE_SPLIT:
    return c[STAT_INACTIVE_SPLIT];
  case VIEW_ALLOCATED_BYTES:
    return c[STAT_ALLOCATED_BYTES];
  case VIEW_ACTIVE_BYTES:
    return c[STAT_ALLOCATED_BYTES] + c[STAT_PENDING_BYTES];
  case VIEW_INACTIVE_SPLIT_BYTES:
    return c[STAT_INACTIVE_SPLIT_BYTES];
  default:
    return c[STAT_REQUESTED_BYTES];
  }
}

void stats_note_peaks(gpupool *p, const shard *fresh) {
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard)
    if (sh != fresh) {
      spin_lock(&sh->lock);
      stats_peaks_read(p, sh);
      spin_unlock(&sh->lock);
    }
  if (atomic_load_explicit(&p->peak_epoch, memory_order_relaxed) != p->peak_seen_epoch) {
    pthread_mutex_lock(&p->peak_lock); /* reset since: agg_peak is the new floor */
    memcpy(p->peak_seen, p->agg_peak, sizeof p->peak_seen);
    p->peak_seen_epoch = atomic_load_explicit(&p->peak_epoch, memory_order_relaxed);
    pthread_mutex_unlock(&p->peak_lock);
  }
  /* The sums are compared as they are computed, with no array between:
   * values just stored are read back as they were written (a wider read
   * of several fresh stores stalls). */
  int higher = 0;
  for (int id = 0; id < VIEW_COUNT; id++) {
    int64_t small = view_sum(p->peak_sum[0], id), large = view_sum(p->peak_sum[1], id);
    const int64_t *seen = p->peak_seen[id];
    higher |= (small > seen[GPUPOOL_STAT_SMALL]) | (large > seen[GPUPOOL_STAT_LARGE]) |
              (small + large > seen[GPUPOOL_STAT_ALL]);
  }
  if (!higher)
    return; /* agg_peak >= peak_seen >= every sum */
  pthread_mutex_lock(&p->peak_lock);
  for (int id = 0; id < VIEW_COUNT; id++) {
    int64_t v[GPUPOOL_STAT_TYPES];
    v[GPUPOOL_STAT_SMALL] = view_sum(p->peak_sum[0], id);
    v[GPUPOOL_STAT_LARGE] = view_sum(p->peak_sum[1], id);
    v[GPUPOOL_STAT_ALL] = v[GPUPOOL_STAT_SMALL] + v[GPUPOOL_STAT_LARGE];
    for (int t = 0; t < GPUPOOL_STAT_TYPES; t++) {
      if (v[t] > p->agg_peak[id][t])
        p->agg_peak[id][t] = v[t];
      if (v[t] > p->peak_seen[id][t])
        p->peak_seen[id][t] = v[t];
    }
  }
  pthread_mutex_unlock(&p->peak_lock);
}

int64_t stats_allocated_bytes(gpupool *p, const shard *held, int64_t *peak_sum) {
  int64_t now = 0, peak = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    if (sh != held)
      spin_lock(&sh->lock);
    now += stat_total(&sh->st.s[STAT_ALLOCATED_BYTES]);
    peak += sh->st.s[STAT_ALLOCATED_BYTES].total_peak;
    if (sh != held)
      spin_unlock(&sh->lock);
  }
  if (peak_sum)
    *peak_sum = peak;
  return now;
}

/* Sums the shards' statistics into out (zeroed first). */
static int sum_shards(gpupool *p, gpupool_stats *out,
                      int64_t max_shard_peak[VIEW_COUNT][GPUPOOL_STAT_TYPES]) {
  memset(out, 0, sizeof *out);
  memset(max_shard_peak, 0, sizeof(int64_t) * VIEW_COUNT * GPUPOOL_STAT_TYPES);
  int nshards = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard, nshards++) {
    gpupool_stat view[VIEW_COUNT][GPUPOOL_STAT_TYPES];
    spin_lock(&sh->lock);
    shard_view(&sh->st, view);
    for (int id = 0; id < VIEW_COUNT; id++) {
      gpupool_stat *dst = field(out, id);
      for (int t = 0; t < GPUPOOL_STAT_TYPES; t++) {
        const gpupool_stat *src = &view[id][t];
        dst[t].current += src->current;
        dst[t].allocated += src->allocated;
        dst[t].freed += src->freed;
        if (src->peak > max_shard_peak[id][t])
          max_shard_peak[id][t] = src->peak;
      }
    }
    const gpupool_stat *allocs = &view[VIEW_ALLOCATION][GPUPOOL_STAT_ALL];
    out->num_cache_hits += (uint64_t)allocs->allocated - sh->st.device_sourced;
    out->num_device_sourced += sh->st.device_sourced;
    out->num_frees += (uint64_t)allocs->freed;
    out->num_sync_events += sh->st.sync_events;
    out->free_blocks += sh->nfree;
    out->pending_free_blocks += sh->npending;
    size_t largest = shard_largest_free(sh);
    if (largest > out->largest_free_block)
      out->largest_free_block = largest;
    spin_unlock(&sh->lock);
  }
  return nshards;
}

void stats_collect(gpupool *p, gpupool_stats *out) {
  /* No slow_lock: a scrape never waits on a device call. The pool-wide
   * counters are copied before the shards are summed and their sequence
   * checked after: a segment appears in them before any block of it is
   * allocated and leaves after its blocks are free, so an unchanged sequence
   * means the two sides agree (reserved bytes cover allocated bytes). */
  pool_counters c;
  int64_t max_shard_peak[VIEW_COUNT][GPUPOOL_STAT_TYPES];
  int nshards;
  for (int tries = 0;; tries++) {
    spin_lock(&p->counters_lock);
    c = p->c;
    spin_unlock(&p->counters_lock);
    nshards = sum_shards(p, out, max_shard_peak);
    spin_lock(&p->counters_lock);
    uint64_t seq = p->c.seq;
    spin_unlock(&p->counters_lock);
    if (seq == c.seq || tries == STATS_MAX_RETRIES)
      break;
  }
  /* One stream: its peaks are exact. Several: the peak of the sum is the
   * largest of every sum observed here, after each operation while one
   * thread uses the pool (pool.c note_peaks), and of each stream's own peak. */
  pthread_mutex_lock(&p->peak_lock);
  for (int id = 0; id < VIEW_COUNT; id++) {
    gpupool_stat *dst = field(out, id);
    for (int t = 0; t < GPUPOOL_STAT_TYPES; t++) {
      int64_t peak = max_shard_peak[id][t];
      if (nshards > 1) {
        int64_t *agg = &p->agg_peak[id][t];
        if (dst[t].current > *agg)
          *agg = dst[t].current;
        if (peak > *agg)
          *agg = peak;
        peak = *agg;
      }
      dst[t].peak = peak;
    }
  }
  pthread_mutex_unlock(&p->peak_lock);
  stat_report(&c.segments, out->segment);
  stat_report(&c.reserved_bytes, out->reserved_bytes);
  out->num_alloc_retries = c.alloc_retries;
  out->num_ooms = c.ooms;
  out->num_device_alloc = c.device_allocs;
  out->num_device_free = c.device_frees;
  out->num_pages_moved = c.pages_moved;
  out->num_device_syncs = c.device_syncs;
  out->num_alloc_unmaps = c.alloc_unmaps;
  out->num_gc_runs = c.gc_runs;
}

gpupool_status gpupool_get_stats(gpupool *p, gpupool_stats *out) {
  if (!p || !out)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_get_stats: %s is NULL", p ? "out" : "pool");
  gpupool_status st = pool_check_not_inherited(p, "gpupool_get_stats");
  if (st != GPUPOOL_OK)
    return st;
  stats_collect(p, out);
  return GPUPOOL_OK;
}

void gpupool_reset_peak_stats(gpupool *p) {
  if (!p) {
    pool_fail(GPUPOOL_ERR_INVALID, "gpupool_reset_peak_stats: pool is NULL");
    return;
  }
  if (pool_check_not_inherited(p, "gpupool_reset_peak_stats") != GPUPOOL_OK)
    return;
  pthread_mutex_lock(&p->slow_lock);
  pthread_mutex_lock(&p->peak_lock);
  int64_t sum[VIEW_COUNT][GPUPOOL_STAT_TYPES] = {{0}};
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    gpupool_stat view[VIEW_COUNT][GPUPOOL_STAT_TYPES];
    spin_lock(&sh->lock);
    for (int id = 0; id < STAT_COUNT; id++)
      stat_reset_peak(&sh->st.s[id]);
    shard_view(&sh->st, view);
    for (int t = 0; t < GPUPOOL_STAT_TYPES; t++) {
      sh->st.active_peak.count[t] = view[VIEW_ACTIVE][t].current;
      sh->st.active_peak.bytes[t] = view[VIEW_ACTIVE_BYTES][t].current;
    }
    for (int id = 0; id < VIEW_COUNT; id++)
      for (int t = 0; t < GPUPOOL_STAT_TYPES; t++)
        sum[id][t] += view[id][t].current;
    spin_unlock(&sh->lock);
  }
  memcpy(p->agg_peak, sum, sizeof sum);
  atomic_fetch_add(&p->peak_epoch, 1); /* the tracking thread's peak_seen is stale */
  pthread_mutex_unlock(&p->peak_lock);
  POOL_COUNT(p, stat_reset_peak(&p->c.segments); stat_reset_peak(&p->c.reserved_bytes));
  pthread_mutex_unlock(&p->slow_lock);
}

void gpupool_reset_accumulated_stats(gpupool *p) {
  if (!p) {
    pool_fail(GPUPOOL_ERR_INVALID, "gpupool_reset_accumulated_stats: pool is NULL");
    return;
  }
  if (pool_check_not_inherited(p, "gpupool_reset_accumulated_stats") != GPUPOOL_OK)
    return;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    for (int id = 0; id < STAT_COUNT; id++)
      stat_reset_accumulated(&sh->st.s[id]);
    sh->st.device_sourced = sh->st.sync_events = 0;
    /* the size histogram counts allocations too: its count stays theirs */
    for (int i = 0; i < POOL_HIST_BUCKETS; i++) /* read without the lock: count_request */
      __atomic_store_n(&sh->st.hist_bucket[i], 0, __ATOMIC_RELAXED);
    sh->st.hist_sum = 0;
    spin_unlock(&sh->lock);
  }
  pthread_mutex_lock(&p->slow_lock);
  POOL_COUNT(p, stat_reset_accumulated(&p->c.segments);
             stat_reset_accumulated(&p->c.reserved_bytes);
             p->c.alloc_retries = p->c.ooms = p->c.device_allocs = p->c.device_frees = 0;
             p->c.gc_runs = p->c.pages_moved = p->c.device_syncs = p->c.alloc_unmaps = 0;
             memset(&p->c.timing, 0, sizeof p->c.timing));
  pthread_mutex_unlock(&p->slow_lock);
}
