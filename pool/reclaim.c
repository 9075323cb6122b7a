#include "reclaim.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/errors.h"
#include "oom_report.h"
#include "pages.h"
#include "segment.h"
#include "shard.h"
#include "sizeclass.h"

/* Each run of pages unmapped (moved away or released) or mapped as a
 * segment event on the track of the shard whose call moved them (ctx): the
 * trace shows memory changing hands inside vmm segments, run by run, each
 * inside its segment. */
typedef struct page_events {
  gpupool *p;
  shard *sh;
} page_events;

static void emit_pages(void *ctx, int mapped, uintptr_t addr, size_t bytes, uint64_t ns) {
  const page_events *e = ctx;
  segment_emit_event(e->p, e->sh, mapped ? EV_SEGMENT_ALLOC : EV_SEGMENT_FREE,
                     EVF_LARGE | EVF_PAGES, addr, bytes, ns, NULL, 0);
}

/* Returns the idle pages of every vmm segment to the device, with their
 * events on sh's track; the bytes released. */
static size_t release_idle_pages(gpupool *p, shard *sh) {
  page_events e = {p, sh};
  pages_work w = {.pages_changed = emit_pages, .ctx = &e};
  pages_release_idle(p, &w);
  return w.released;
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
    size_t held = 0; /* the list's bytes: off the statistic, still the device's */
    for (segment *seg = list; seg; seg = seg->next)
      held += segment_mapped_bytes(seg);
    for (segment *seg = list, *next; seg; seg = next) {
      next = seg->next;
      size_t bytes = segment_mapped_bytes(seg);
      released += bytes;
      held -= bytes;
      segment_destroy(p, seg, held);
    }
  }
  if (p->cfg.expandable) /* the pages under free blocks of segments still in use */
    released += release_idle_pages(p, atomic_load(&p->shards));
  return released;
}

/* The backend's mem_info, remembered for OOM reports. */
static gpupool_status mem_info(gpupool *p, size_t *free_b, size_t *total_b) {
  gpupool_status st = p->be->ops->mem_info(p->be, free_b, total_b);
  if (st == GPUPOOL_OK) {
    p->seen_free = *free_b;
    p->seen_total = *total_b;
    p->seen_ns = clock_realtime_ns();
  }
  return st;
}

/* The bytes reserved memory may still grow by under memory_fraction's cap
 * (SIZE_MAX: no cap). */
static size_t room_under_limit(gpupool *p) {
  size_t limit = segment_reserved_limit(p);
  if (limit == SIZE_MAX)
    return SIZE_MAX;
  int64_t reserved = stat_total(&p->c.reserved_bytes);
  return reserved >= 0 && (uint64_t)reserved < limit ? limit - (size_t)reserved : 0;
}

typedef struct gc_candidate {
  segment *seg;
  uint64_t free_seq;
} gc_candidate;

static int by_free_seq(const void *a, const void *b) {
  uint64_t x = ((const gc_candidate *)a)->free_seq, y = ((const gc_candidate *)b)->free_seq;
  return x < y ? -1 : x > y;
}

/* garbage_collection_threshold: above threshold * device memory (or, as in
 * PyTorch, * memory_fraction's cap where one is set), return the cached large
 * segments freed longest ago until under it. */
static void garbage_collect(gpupool *p, shard *caller) {
  size_t total = segment_reserved_limit(p);
  if (total == SIZE_MAX)
    total = segment_device_total(p);
  if (!total)
    return;
  int64_t limit = (int64_t)(p->cfg.gc_threshold * (double)total);
  if (stat_total(&p->c.reserved_bytes) <= limit)
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
  for (size_t i = 0; i < n && stat_total(&p->c.reserved_bytes) > limit; i++) {
    segment *seg = c[i].seg; /* segments are freed only under slow_lock: still valid */
    shard *sh = seg->sh;
    spin_lock(&sh->lock);
    int still_free = segment_is_free(seg);
    if (still_free)
      shard_remove_segment(sh, seg);
    spin_unlock(&sh->lock);
    if (still_free) {
      released += segment_mapped_bytes(seg);
      segment_destroy(p, seg, 0);
    }
  }
  free(c);
  if (p->cfg.expandable && stat_total(&p->c.reserved_bytes) > limit)
    released += release_idle_pages(p, caller);
  POOL_COUNT(p, p->c.gc_runs++);
  pool_event ev = {.type = EV_GC,
                   .size = released,
                   .stream = (uint64_t)(uintptr_t)caller->stream,
                   .a = (uint64_t)stat_total(&p->c.reserved_bytes),
                   .b = (uint64_t)stats_allocated_bytes(p, NULL, NULL)};
  shard_emit_locked(caller, &ev);
}

/* reserve_percent (MXNet): keep that share of the device free by emptying the
 * cache before an allocation would eat into it. */
static void keep_reserve(gpupool *p, size_t size) {
  size_t free_b, total_b;
  if (mem_info(p, &free_b, &total_b) != GPUPOOL_OK)
    return;
  double reserve = p->cfg.reserve_percent / 100.0 * (double)total_b;
  if (free_b < size || (double)(free_b - size) < reserve)
    reclaim_release_cached(p, 0);
}

static size_t largest_free(gpupool *p) {
  size_t best = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    size_t largest = shard_largest_free(sh);
    if (largest > best)
      best = largest;
    spin_unlock(&sh->lock);
  }
  return best;
}

/* The final failure: an OOM event with what the pool knows, and the report
 * (oom_report.h), delivered once the slow lock is released. No device call:
 * the device reading is the last one known. */
static gpupool_status out_of_memory(gpupool *p, shard *sh, size_t rounded, size_t segsize,
                                    size_t requested) {
  POOL_COUNT(p, p->c.ooms++);
  int64_t reserved = stat_total(&p->c.reserved_bytes),
          allocated = stats_allocated_bytes(p, NULL, NULL);
  size_t largest = largest_free(p);
  size_t dev_free = 0;
  if (backend_is_host(p->be)) { /* the simulated device's accounting, no device */
    size_t total;
    p->be->ops->mem_info(p->be, &dev_free, &total);
  } else if (p->seen_ns) {
    dev_free = p->seen_free;
  }
  pool_event ev = {.type = EV_OOM,
                   .oom = {.reserved_bytes = (uint64_t)reserved,
                           .segment_size = segsize,
                           .requested_bytes = requested,
                           .device_free = dev_free,
                           .free_in_pool = (uint64_t)(reserved - allocated),
                           .largest_free = largest}};
  shard_emit_locked(sh, &ev);
  if (!backend_is_sim(p->be)) /* a replay's OOM is the advisor's answer, not a report */
    pool_oom_capture(p, sh->stream, requested, rounded, segsize);
  if (p->limit_refused)
    return pool_fail(GPUPOOL_ERR_OOM,
                     "CUDA out of memory. pool '%s': allocating %zu bytes (segment %zu) would take "
                     "reserved memory past the pool's limit of %zu bytes (memory_fraction): "
                     "reserved %lld, allocated %lld, free in pool %lld, largest free block %zu",
                     p->cfg.name, requested, segsize, segment_reserved_limit(p),
                     (long long)reserved, (long long)allocated, (long long)(reserved - allocated),
                     largest);
  return pool_fail(GPUPOOL_ERR_OOM,
                   "CUDA out of memory. pool '%s': allocating %zu bytes (segment %zu): reserved "
                   "%lld, allocated %lld, free in pool %lld, largest free block %zu",
                   p->cfg.name, requested, segsize, (long long)reserved, (long long)allocated,
                   (long long)(reserved - allocated), largest);
}

/* The final failure of an expandable pool that could not reserve a new
 * address range of `range` bytes: the process's virtual address space ran
 * out (each stream's range is as large as the device), not the device's
 * memory. GPUPOOL_ERR_OOM, the status of an allocation that finds no memory
 * after the retry, but not a device OOM: not in num_ooms, and no OOM event
 * or report, whose account of the device's memory and remedies would
 * mislead (docs/pool.md, "Expandable segments"). */
static gpupool_status out_of_address_space(gpupool *p, shard *sh, size_t range, size_t requested) {
  size_t ranges = 0, bytes = 0;
  for (shard *s = atomic_load(&p->shards); s; s = s->next_shard) {
    spin_lock(&s->lock);
    for (const segment *seg = s->segments; seg; seg = seg->next)
      if (seg->pages) {
        ranges++;
        bytes += seg->size;
      }
    spin_unlock(&s->lock);
  }
  return pool_fail(GPUPOOL_ERR_OOM,
                   "pool '%s': out of virtual address space, not of device memory: allocating "
                   "%zu bytes on stream %p needs a new address range of %zu bytes, which could "
                   "not be reserved, also after the cache was emptied (%s). The pool holds %zu "
                   "ranges, %zu bytes of address space (streams: %u): expandable_segments "
                   "reserves a range as large as the device per stream; use fewer streams per "
                   "pool, or expandable_segments:False",
                   p->cfg.name, requested, sh->stream, range, gpupool_last_error(), ranges, bytes,
                   (unsigned)atomic_load(&p->nshards));
}

/* Maps the missing pages under b, claimed by the caller (shard_claim) with
 * sh's lock, which is not held here: no device call happens under it. Then
 * hands b out, or returns it to the free blocks when that failed. */
static gpupool_status back_claimed(gpupool *p, shard *sh, block *b, size_t requested, block **out) {
  page_events e = {p, sh};
  pages_work w = {.pages_changed = emit_pages, .ctx = &e, .may_create = room_under_limit(p)};
  gpupool_status st = pages_back(p, b, &w);
  p->limit_refused = w.limit_refused;
  spin_lock(&sh->lock);
  if (st != GPUPOOL_OK)
    shard_unclaim(sh, b);
  else if (shard_allocate_claimed(sh, b, requested, pool_thread.tag) != 0)
    st = pool_fail(GPUPOOL_ERR_HOST_OOM, "pool '%s': out of host memory", p->cfg.name);
  spin_unlock(&sh->lock);
  *out = st == GPUPOOL_OK ? b : NULL;
  return st;
}

/* One try at serving a request on sh: a cached block (mapping its pages
 * first if it is in a vmm segment), else a new segment. *unreserved: as
 * segment_create's. */
static gpupool_status attempt(gpupool *p, shard *sh, size_t rounded, size_t requested, block **out,
                              int *to_device, size_t *unreserved) {
  int large = size_is_large(rounded);
  gpupool_status st = GPUPOOL_OK;
  *unreserved = 0;
  p->limit_refused = 0;
  spin_lock(&sh->lock);
  if (sh->pending)
    shard_poll_pending(sh);
  /* A small request of an expandable pool: over mapped pages first, the
   * large range's too, before a page is created or moved. */
  block *b = !large && p->cfg.expandable ? shard_place_ready(sh, 0, rounded) : NULL;
  if (!b)
    b = shard_place(sh, large, rounded, 0);
  int ready = b && shard_fit_is_mapped(sh, b, rounded);
  if (ready && shard_allocate(sh, b, rounded, requested, 0, pool_thread.tag) != 0)
    st = pool_fail(GPUPOOL_ERR_HOST_OOM, "pool '%s': out of host memory", p->cfg.name);
  else if (b && !ready)
    shard_claim(sh, b, rounded);
  spin_unlock(&sh->lock);
  if (b && !ready) {
    *to_device = 1;
    return back_claimed(p, sh, b, requested, out);
  }
  if (b) {
    *out = st == GPUPOOL_OK ? b : NULL;
    return st;
  }

  *to_device = 1;
  size_t segsize = size_segment(&p->cfg, rounded);
  if (p->cfg.gc_threshold > 0)
    garbage_collect(p, sh);
  /* A plain segment's memory is reserved whole (an expandable pool's
   * segment is address space: its pages are checked as they are made). */
  if (!p->cfg.expandable && segsize > room_under_limit(p)) {
    p->limit_refused = 1;
    return pool_fail(GPUPOOL_ERR_OOM, "pool '%s': a segment of %zu bytes would pass the limit",
                     p->cfg.name, segsize);
  }
  if (p->cfg.reserve_percent > 0)
    keep_reserve(p, segsize);
  segment *seg = NULL;
  if ((st = segment_create(p, sh, segsize, large, &seg, unreserved)) != GPUPOOL_OK)
    return st;
  spin_lock(&sh->lock);
  shard_add_segment(sh, seg);
  b = seg->first;
  if (seg->pages)
    shard_claim(sh, b, rounded);
  else if (shard_allocate(sh, b, rounded, requested, 1, pool_thread.tag) != 0)
    st = pool_fail(GPUPOOL_ERR_HOST_OOM, "pool '%s': out of host memory", p->cfg.name);
  spin_unlock(&sh->lock);
  if (seg->pages)
    return back_claimed(p, sh, b, requested, out);
  *out = st == GPUPOOL_OK ? b : NULL;
  return st;
}

gpupool_status reclaim_malloc(gpupool *p, shard *sh, size_t rounded, size_t requested, block **out,
                              int *to_device) {
  *to_device = 0;
  p->limit_refused = 0;
  size_t total = segment_device_total(p);
  if (total && rounded > total) {
    /* No cache or retry can serve a block larger than the device: fail now,
     * without emptying the cache first or, with expandable segments,
     * creating pages until the device refuses (a 16 TiB request took about
     * 4 s on an 80 GB H100 that way). */
    return out_of_memory(p, sh, rounded, size_segment(&p->cfg, rounded), requested);
  }
  if (rounded > segment_reserved_limit(p)) { /* nor one past memory_fraction's cap */
    p->limit_refused = 1;
    return out_of_memory(p, sh, rounded, size_segment(&p->cfg, rounded), requested);
  }
  size_t unreserved = 0;
  gpupool_status st = attempt(p, sh, rounded, requested, out, to_device, &unreserved);
  if (st == GPUPOOL_ERR_OOM) {
    /* Wait for the device, finish every deferred free, return all cached
     * segments (their address ranges too) and idle pages, then try once
     * more. */
    p->be->ops->synchronize(p->be);
    reclaim_poll_all(p);
    reclaim_release_cached(p, 0);
    POOL_COUNT(p, p->c.alloc_retries++);
    st = attempt(p, sh, rounded, requested, out, to_device, &unreserved);
  }
  if (st == GPUPOOL_ERR_OOM && unreserved)
    return out_of_address_space(p, sh, unreserved, requested);
  size_t segsize = size_segment(&p->cfg, rounded);
  if (st == GPUPOOL_ERR_OOM)
    return out_of_memory(p, sh, rounded, segsize, requested);
  if (st == GPUPOOL_ERR_HOST_OOM) /* its reason says where */
    return st;
  if (st != GPUPOOL_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", gpupool_last_error()); /* the backend's reason */
    return pool_fail(st, "pool '%s': %s backend failed to allocate %zu bytes: %s", p->cfg.name,
                     p->be->name, segsize, why);
  }
  return GPUPOOL_OK;
}
