/* Segments: creating one (a device allocation, or a vmm address range whose
 * pages pages.c maps) with its first block, and returning one to the device,
 * with the device call's timing, the segment observers and the segment
 * events; and describing one to readers. The policy of when (reclaim.c) and
 * the shard's bookkeeping (shard.c) are elsewhere. */
#include "segment.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/assert.h"
#include "core/errors.h"
#include "pages.h"
#include "segment_observers.h"
#include "shard.h"

/* Segment events ever marked, in every pool. A free's number is taken
 * before its device call and the next alloc of that address after its own,
 * so their numbers follow that order (the driver orders the calls, and one
 * atomic's values follow every order between the threads that take them). */
static _Atomic uint64_t segment_events_marked;

segment_event_mark segment_event_mark_now(void) {
  uint64_t seq = atomic_fetch_add_explicit(&segment_events_marked, 1, memory_order_relaxed) + 1;
  return (segment_event_mark){.stamp = event_clock_stamp(), .seq = seq};
}

void segment_emit_event(gpupool *p, shard *sh, int type, int flags, uintptr_t addr, size_t size,
                        uint64_t dur, const segment_event_mark *mark, size_t uncounted) {
  segment_event_mark now = mark ? *mark : segment_event_mark_now();
  pool_event ev = {.ts_ns = now.stamp,
                   .seq = now.seq,
                   .type = (uint8_t)type,
                   .flags = (uint8_t)flags,
                   .dur_ns = dur > UINT32_MAX ? UINT32_MAX : (uint32_t)dur,
                   .addr = addr,
                   .size = size,
                   .stream = (uint64_t)(uintptr_t)sh->stream,
                   .a = (uint64_t)stat_total(&p->c.reserved_bytes) + uncounted,
                   .b = (uint64_t)stats_allocated_bytes(p, NULL, NULL)};
  shard_emit_locked(sh, &ev);
}

size_t segment_device_total(gpupool *p) {
  size_t free_b, total_b, total = segment_device_total_known(p);
  if (!total && p->be->ops->mem_info(p->be, &free_b, &total_b) == GPUPOOL_OK) {
    total = total_b;
    __atomic_store_n(&p->device_total, total, __ATOMIC_RELAXED); /* the agent reads it */
  }
  return total;
}

size_t segment_device_total_known(const gpupool *p) {
  return __atomic_load_n(&p->device_total, __ATOMIC_RELAXED);
}

static size_t limit_of(const gpupool *p, size_t total) {
  double fraction;
  __atomic_load(&p->cfg.memory_fraction, &fraction, __ATOMIC_RELAXED);
  if (fraction < 0 || !total)
    return SIZE_MAX;
  return (size_t)(fraction * (double)total);
}

size_t segment_reserved_limit(gpupool *p) {
  return limit_of(p, segment_device_total(p));
}

size_t segment_reserved_limit_known(const gpupool *p) {
  return limit_of(p, segment_device_total_known(p));
}

/* The address range of a large segment of an expandable pool: as much as the
 * device has memory, as PyTorch reserves, so that one range per stream holds
 * every large block, and blocks of different steps share pages in place
 * rather than moving them between ranges of their own (size when more, or
 * when the device does not say). Under the slow lock. */
static size_t vmm_range(gpupool *p, size_t size) {
  size_t total = segment_device_total(p);
  if (!total)
    return size;
  size_t ps = p->be->page_size;
  size_t range = (total + ps - 1) / ps * ps;
  return range > size ? range : size;
}

/* A new segment of size bytes for shard sh: device memory, or for a large
 * segment of an expandable pool, address space whose pages are mapped as
 * blocks need them (vmm_range). Not yet in the shard. */
gpupool_status segment_create(gpupool *p, shard *sh, size_t size, int large, segment **out,
                              size_t *unreserved) {
  segment *seg = NULL;
  uint64_t dur = 0;
  *unreserved = 0;
  if (p->cfg.expandable) { /* a small segment: a range of one page */
    size_t range = large ? vmm_range(p, size) : size;
    uint64_t t0 = clock_monotonic_ns();
    gpupool_status st = pages_segment_create(p, range, large, &seg);
    dur = clock_monotonic_ns() - t0;
    if (st == GPUPOOL_ERR_OOM)
      *unreserved = range;
    if (st != GPUPOOL_OK)
      return st;
  } else {
    void *ptr = NULL;
    uint64_t t0 = clock_monotonic_ns();
    gpupool_status st = p->be->ops->alloc(p->be, &ptr, size, sh->stream);
    dur = clock_monotonic_ns() - t0;
    POOL_COUNT(p, p->c.timing.alloc_count++; p->c.timing.alloc_ns_total += dur);
    if (st != GPUPOOL_OK)
      return st;
    if (!(seg = calloc(1, sizeof *seg))) {
      p->be->ops->free(p->be, ptr, size, sh->stream);
      return pool_fail(GPUPOOL_ERR_HOST_OOM, "pool '%s': out of host memory", p->cfg.name);
    }
    seg->addr = (uintptr_t)ptr;
    seg->size = size;
    seg->large = large;
    segment_observers_note(p, seg->addr, size, 1);
  }
  seg->sh = sh;
  spin_lock(&sh->lock);
  block *b = block_new(sh);
  spin_unlock(&sh->lock);
  if (!b) {
    segment_free_memory(p, seg);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "pool '%s': out of host memory", p->cfg.name);
  }
  seg->nblocks = 1;
  seg->first = b;
  b->addr = seg->addr;
  b->size = seg->size;
  b->seg = seg;
  b->state = BLOCK_FREE;
  b->prev = b->next = NULL;
  /* A vmm range too: segment_destroy reports its release as a segment free,
   * and a trace replayed backwards (torch snapshots) needs the range's
   * creation to undo it (a range created again at a released one's address
   * would otherwise appear out of nowhere). Its pages' maps follow as
   * EVF_PAGES events. */
  segment_emit_event(p, sh, EV_SEGMENT_ALLOC, large ? EVF_LARGE : 0, seg->addr, seg->size, dur,
                     NULL, segment_mapped_bytes(seg)); /* counted once the caller adds it */
  *out = seg;
  return GPUPOOL_OK;
}

void segment_free_memory(gpupool *p, segment *seg) {
  if (seg->pages) {
    pages_segment_destroy(p, seg);
    return;
  }
  segment_observers_note(p, seg->addr, seg->size, 0);
  uint64_t t0 = clock_monotonic_ns();
  p->be->ops->free(p->be, (void *)seg->addr, seg->size, seg->sh->stream);
  uint64_t dur = clock_monotonic_ns() - t0;
  POOL_COUNT(p, p->c.timing.free_count++; p->c.timing.free_ns_total += dur);
  free(seg);
}

/* The pages a vmm range still has when it is released, unmapped run by run
 * before the range goes: each run an event, as a move's unmaps are, so that
 * the events alone say which memory was mapped when (a torch snapshot's
 * segments are the mapped runs). Reserved after each: the pool's, plus the
 * bytes already off the statistic but not yet returned (uncounted). */
typedef struct range_release {
  gpupool *p;
  shard *sh;
  int large;
  size_t uncounted;
} range_release;

static void range_pages_unmapped(void *ctx, int mapped, uintptr_t addr, size_t bytes, uint64_t ns) {
  range_release *r = ctx;
  gp_assert_internal(!mapped && bytes <= r->uncounted);
  (void)mapped;
  r->uncounted -= bytes;
  segment_emit_event(r->p, r->sh, EV_SEGMENT_FREE, (r->large ? EVF_LARGE : 0) | EVF_PAGES, addr,
                     bytes, ns, NULL, r->uncounted);
}

void segment_destroy(gpupool *p, segment *seg, size_t still_held) {
  gp_assert_internal(segment_is_free(seg));
  shard *sh = seg->sh;
  int large = seg->large;
  uintptr_t addr = seg->addr;
  size_t size = seg->size;
  block *first = seg->first;
  if (seg->pages) {
    range_release r = {p, sh, large, still_held + segment_mapped_bytes(seg)};
    pages_work w = {.pages_changed = range_pages_unmapped, .ctx = &r};
    pages_segment_release(p, seg, &w);
    gp_assert_internal(r.uncounted == still_held);
  }
  segment_event_mark mark = segment_event_mark_now(); /* before the call: see there */
  uint64_t t0 = clock_monotonic_ns();
  segment_free_memory(p, seg);
  uint64_t dur = clock_monotonic_ns() - t0;
  segment_emit_event(p, sh, EV_SEGMENT_FREE, large ? EVF_LARGE : 0, addr, size, dur, &mark,
                     still_held);
  free(first->streams);
  free(first);
}

/* Bytes of b's range on pages of a vmm segment that are not mapped. */
static uint64_t unmapped_bytes(const segment *seg, const block *b) {
  if (!seg->pages || seg->nmapped == seg->npages || b->state != BLOCK_FREE)
    return 0; /* pages under allocated and pending blocks are always mapped */
  uint64_t n = 0;
  uintptr_t end = b->addr + b->size;
  for (size_t i = page_of(seg, b->addr); i < seg->top; i++) {
    uintptr_t lo = seg->addr + i * seg->page_size, hi = lo + seg->page_size;
    if (lo >= end)
      return n;
    if (!page_mapped(seg, i))
      n += (hi < end ? hi : end) - (lo > b->addr ? lo : b->addr);
  }
  uintptr_t top = seg->addr + seg->top * seg->page_size; /* nothing mapped from here */
  return n + (end > top ? end - (top > b->addr ? top : b->addr) : 0);
}

void segment_describe(const segment *seg, pool_segment_info *info, pool_block_info *blocks) {
  void *stream = seg->sh->stream;
  *info = (pool_segment_info){.addr = seg->addr,
                              .size = seg->size,
                              .mapped = segment_mapped_bytes(seg),
                              .stream = (uint64_t)(uintptr_t)stream,
                              .is_large = seg->large,
                              .nblocks = seg->nblocks};
  size_t i = 0;
  for (const block *b = seg->first; b; b = b->next) {
    blocks[i++] = (pool_block_info){b->addr,
                                    b->size,
                                    b->state == BLOCK_FREE ? 0 : b->requested,
                                    (uint64_t)(uintptr_t)stream,
                                    block_state_name(b),
                                    unmapped_bytes(seg, b),
                                    b->state == BLOCK_FREE ? 0 : b->alloc_stamp,
                                    b->state == BLOCK_FREE ? NULL : pool_tag_name(b->tag)};
    if (b->state == BLOCK_ALLOCATED) {
      info->allocated += b->size;
      info->requested += b->requested;
    }
    if (b->state != BLOCK_FREE)
      info->active += b->size;
  }
}
