#include "reclaim.h"

#include <stdio.h>
#include <stdlib.h>

#include "agent/segment_index.h"
#include "clock.h"
#include "errors.h"
#include "free_index.h"
#include "shard.h"
#include "sizeclass.h"

static void update_segment_stats(gpupool *p, int large, int64_t bytes) {
  if (bytes > 0) {
    stat_inc(p->seg_stats[0], large, 1);
    stat_inc(p->seg_stats[1], large, bytes);
  } else {
    stat_dec(p->seg_stats[0], large, 1);
    stat_dec(p->seg_stats[1], large, -bytes);
  }
}

/* Bytes allocated over all shards, for the slow path's events (callers
 * hold no shard lock). */
static int64_t pool_allocated(gpupool *p) {
  int64_t sum = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    sum += sh->st.s[STAT_ALLOCATED_BYTES][GPUPOOL_STAT_ALL].current;
    spin_unlock(&sh->lock);
  }
  return sum;
}

static void emit_locked(shard *sh, pool_event *ev) {
  spin_lock(&sh->lock);
  shard_emit(sh, ev);
  spin_unlock(&sh->lock);
}

static void emit_segment_event(gpupool *p, shard *sh, int type, segment *seg, uint64_t dur) {
  pool_event ev = {.type = (uint8_t)type,
                   .flags = seg->large ? EVF_LARGE : 0,
                   .dur_ns = dur > UINT32_MAX ? UINT32_MAX : (uint32_t)dur,
                   .addr = seg->addr,
                   .size = seg->size,
                   .stream = (uint64_t)(uintptr_t)sh->stream,
                   .a = (uint64_t)p->seg_stats[1][0].current,
                   .b = (uint64_t)pool_allocated(p)};
  emit_locked(sh, &ev);
}

static gpupool_status device_alloc(gpupool *p, shard *sh, size_t size, int large, segment **out) {
  void *ptr = NULL;
  uint64_t t0 = clock_monotonic_ns();
  gpupool_status st = p->be->ops->alloc(p->be, &ptr, size, sh->stream);
  uint64_t dur = clock_monotonic_ns() - t0;
  p->timing.alloc_count++;
  p->timing.alloc_ns_total += dur;
  if (st != GPUPOOL_OK)
    return st;
  segment *seg = calloc(1, sizeof *seg);
  spin_lock(&sh->lock);
  block *b = block_new(sh);
  spin_unlock(&sh->lock);
  if (!seg || !b) {
    p->be->ops->free(p->be, ptr, size, sh->stream);
    free(seg);
    free(b);
    return pool_fail(GPUPOOL_ERR_OOM, "pool '%s': out of host memory", p->cfg.name);
  }
  seg->addr = (uintptr_t)ptr;
  seg->size = size;
  seg->large = large;
  seg->nblocks = 1;
  seg->first = b;
  b->addr = seg->addr;
  b->size = size;
  b->seg = seg;
  b->state = BLOCK_FREE;
  b->prev = b->next = NULL;
  p->device_allocs++;
  update_segment_stats(p, large, (int64_t)size);
  if (!backend_is_host(p->be)) /* CUPTI sees device memory only */
    cupti_note_segment(seg->addr, size, p->cfg.device, 1);
  seg->sh = sh;
  emit_segment_event(p, sh, EV_SEGMENT_ALLOC, seg, dur);
  *out = seg;
  return GPUPOOL_OK;
}

/* seg is already detached from its shard. */
static void device_free(gpupool *p, segment *seg) {
  shard *sh = seg->sh;
  if (!backend_is_host(p->be))
    cupti_note_segment(seg->addr, seg->size, p->cfg.device, 0);
  uint64_t t0 = clock_monotonic_ns();
  p->be->ops->free(p->be, (void *)seg->addr, seg->size, sh->stream);
  uint64_t dur = clock_monotonic_ns() - t0;
  p->timing.free_count++;
  p->timing.free_ns_total += dur;
  p->device_frees++;
  update_segment_stats(p, seg->large, -(int64_t)seg->size);
  emit_segment_event(p, sh, EV_SEGMENT_FREE, seg, dur);
  free(seg->first->streams);
  free(seg->first);
  free(seg);
}

void reclaim_poll_all(gpupool *p) {
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    if (sh->pending)
      shard_poll_pending(sh);
    spin_unlock(&sh->lock);
  }
}

size_t reclaim_release_cached(gpupool *p, int large_only) {
  size_t released = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    segment *list = NULL;
    spin_lock(&sh->lock);
    for (segment *seg = sh->segments, *next; seg; seg = next) {
      next = seg->next;
      if (segment_is_free(seg) && (!large_only || seg->large)) {
        shard_remove_segment(sh, seg);
        seg->next = list;
        list = seg;
      }
    }
    spin_unlock(&sh->lock);
    for (segment *seg = list, *next; seg; seg = next) {
      next = seg->next;
      released += seg->size;
      device_free(p, seg);
    }
  }
  return released;
}

typedef struct gc_candidate {
  segment *seg;
  uint64_t free_seq;
} gc_candidate;

static int by_free_seq(const void *a, const void *b) {
  uint64_t x = ((const gc_candidate *)a)->free_seq, y = ((const gc_candidate *)b)->free_seq;
  return x < y ? -1 : x > y;
}

/* garbage_collection_threshold: above threshold * device memory, return the
 * cached large segments freed longest ago until under it. */
static void garbage_collect(gpupool *p, shard *caller) {
  if (!p->device_total) {
    size_t free_b, total_b;
    if (p->be->ops->mem_info(p->be, &free_b, &total_b) != GPUPOOL_OK)
      return;
    p->device_total = total_b;
  }
  int64_t limit = (int64_t)(p->cfg.gc_threshold * (double)p->device_total);
  if (p->seg_stats[1][0].current <= limit)
    return;
  size_t n = 0, cap = 64;
  gc_candidate *c = malloc(cap * sizeof *c);
  for (shard *sh = atomic_load(&p->shards); sh && c; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    for (segment *seg = sh->segments; seg && c; seg = seg->next) {
      if (!seg->large || !segment_is_free(seg))
        continue;
      if (n == cap) {
        gc_candidate *g = realloc(c, (cap *= 2) * sizeof *c);
        if (!g)
          break;
        c = g;
      }
      c[n++] = (gc_candidate){seg, seg->first->free_seq};
    }
    spin_unlock(&sh->lock);
  }
  if (!c)
    return;
  qsort(c, n, sizeof *c, by_free_seq);
  size_t released = 0;
  for (size_t i = 0; i < n && p->seg_stats[1][0].current > limit; i++) {
    segment *seg = c[i].seg; /* segments are freed only under slow_lock: still valid */
    shard *sh = seg->sh;
    spin_lock(&sh->lock);
    int still_free = segment_is_free(seg);
    if (still_free)
      shard_remove_segment(sh, seg);
    spin_unlock(&sh->lock);
    if (still_free) {
      released += seg->size;
      device_free(p, seg);
    }
  }
  free(c);
  p->gc_runs++;
  pool_event ev = {.type = EV_GC,
                   .size = released,
                   .stream = (uint64_t)(uintptr_t)caller->stream,
                   .a = (uint64_t)p->seg_stats[1][0].current,
                   .b = (uint64_t)pool_allocated(p)};
  emit_locked(caller, &ev);
}

/* reserve_percent (MXNet): keep that share of the device free by emptying the
 * cache before an allocation would eat into it. */
static void keep_reserve(gpupool *p, size_t size) {
  size_t free_b, total_b;
  if (p->be->ops->mem_info(p->be, &free_b, &total_b) != GPUPOOL_OK)
    return;
  double reserve = p->cfg.reserve_percent / 100.0 * (double)total_b;
  if (free_b < size || (double)(free_b - size) < reserve)
    reclaim_release_cached(p, 0);
}

static size_t largest_free(gpupool *p) {
  size_t best = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    for (int k = 0; k < 2; k++) {
      block *b = free_index_largest(sh->free_tree[k]);
      if (b && b->size > best)
        best = b->size;
    }
    spin_unlock(&sh->lock);
  }
  return best;
}

static gpupool_status out_of_memory(gpupool *p, shard *sh, size_t segsize, size_t requested) {
  p->ooms++;
  size_t dev_free = 0, dev_total = 0;
  p->be->ops->mem_info(p->be, &dev_free, &dev_total);
  int64_t reserved = p->seg_stats[1][0].current, allocated = pool_allocated(p);
  size_t largest = largest_free(p);
  pool_event ev = {.type = EV_OOM,
                   .size = segsize,
                   .requested = requested,
                   .a = (uint64_t)(reserved - allocated),
                   .b = largest,
                   .addr = (uint64_t)reserved,
                   .stream = dev_free};
  emit_locked(sh, &ev);
  return pool_fail(GPUPOOL_ERR_OOM,
                   "pool '%s': out of memory allocating %zu bytes (segment %zu): reserved %lld, "
                   "allocated %lld, free in pool %lld, largest free block %zu, device free %zu "
                   "of %zu",
                   p->cfg.name, requested, segsize, (long long)reserved, (long long)allocated,
                   (long long)(reserved - allocated), largest, dev_free, dev_total);
}

gpupool_status reclaim_alloc_segment(gpupool *p, shard *sh, size_t rounded, size_t requested,
                                     block **out) {
  int large = size_is_large(rounded);
  size_t segsize = size_segment(&p->cfg, rounded);
  if (p->cfg.gc_threshold > 0)
    garbage_collect(p, sh);
  if (p->cfg.reserve_percent > 0)
    keep_reserve(p, segsize);
  segment *seg = NULL;
  gpupool_status st = device_alloc(p, sh, segsize, large, &seg);
  if (st == GPUPOOL_ERR_OOM) {
    /* Wait for the device, finish every deferred free, return all cached
     * segments, then try once more. */
    p->be->ops->synchronize(p->be);
    reclaim_poll_all(p);
    reclaim_release_cached(p, 0);
    p->alloc_retries++;
    st = device_alloc(p, sh, segsize, large, &seg);
  }
  if (st == GPUPOOL_ERR_OOM)
    return out_of_memory(p, sh, segsize, requested);
  if (st != GPUPOOL_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", gpupool_last_error()); /* the backend's reason */
    return pool_fail(st, "pool '%s': %s backend failed to allocate %zu bytes: %s", p->cfg.name,
                     p->be->name, segsize, why);
  }
  spin_lock(&sh->lock);
  shard_add_segment(sh, seg);
  block *b = seg->first;
  int lost = shard_serve(sh, b, rounded, requested, 1) != 0;
  spin_unlock(&sh->lock);
  if (lost)
    return pool_fail(GPUPOOL_ERR_OOM, "pool '%s': out of host memory", p->cfg.name);
  *out = b;
  return GPUPOOL_OK;
}
