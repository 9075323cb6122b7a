/* Operations on one shard; callers hold sh->lock unless said otherwise. */
#ifndef GPUPOOL_SHARD_H
#define GPUPOOL_SHARD_H

#include "free_index.h"
#include "pages.h"
#include "pool_internal.h"
#include "sizeclass.h"

/* The shard for stream into *out, created on first use. Fails, *out NULL,
 * with GPUPOOL_ERR_UNSUPPORTED when the pool already has SHARD_TABLE streams
 * and GPUPOOL_ERR_HOST_OOM when out of host memory; sets no last error.
 * Takes no shard lock. */
gpupool_status shard_get(gpupool *p, void *stream, shard **out);
/* Frees sh, its blocks and events; each segment goes to free_segment (the
 * segment module's segment_free_memory: the shard does not call up into it). */
void shard_destroy(gpupool *p, shard *sh, void (*free_segment)(gpupool *p, segment *seg));

/* Whether free block b (size >= rounded) of a plain segment may serve a
 * request of rounded: the strategy's rules. */
static inline int plain_fit_allowed(const pool_config *c, const block *b, size_t rounded) {
  if (c->strategy != GPUPOOL_STRATEGY_BFC)
    return b->size == rounded; /* exact-size buckets */
  /* Oversize blocks (>= max_split_size) serve only large requests that waste
   * less than max_non_split_rounding of them. */
  if (rounded < c->max_split_size && b->size >= c->max_split_size)
    return 0;
  if (rounded >= c->max_split_size && b->size >= rounded + c->max_non_split_rounding)
    return 0;
  return 1;
}
/* Whether free block b (size >= rounded) may serve a request of rounded. A
 * vmm segment (expandable segments, whose pools have strategy bfc) is an
 * address range whose free blocks hold pages only where mapped: the pool
 * splits them for any request, as PyTorch does. */
static inline int shard_fit_allowed(const pool_config *c, const block *b, size_t rounded) {
  return b->seg->pages || plain_fit_allowed(c, b, rounded);
}

/* The smallest free block of the size kind `large` that may serve a request
 * of `rounded` bytes (the strategy's rules), or NULL. Looks only. */
static inline block *shard_best_fit(shard *sh, int large, size_t rounded) {
  block *b = free_index_lower_bound(*shard_free_tree(sh, large), rounded);
  return b && shard_fit_allowed(&sh->pool->cfg, b, rounded) ? b : NULL;
}
/* The free block for a request of rounded bytes that needs the fewest
 * unmapped pages (vmm segments), when fit, the best fit (shard_best_fit),
 * has some under the part the request would take (shard_fit_is_mapped):
 * among all the free blocks that fit, smallest first, the first whose
 * placement (its start, its end, or a run of mapped pages inside it) needs
 * none; else the one whose best placement needs the fewest. up is what
 * follows fit's subtree in the index (free_index_lower_bound_up). A block
 * placed past its start is split there: the part below stays free, and the
 * block returned starts at the placement, out of the index (BLOCK_PLACED:
 * the caller carves it next, shard_allocate or shard_claim). With
 * mapped_only, NULL (and nothing split) when every placement needs pages:
 * the hot path's question, which the slow path then asks again. */
block *shard_place_mapped(shard *sh, block *fit, block *up, size_t rounded, int mapped_only);
/* The bytes a request of `rounded` takes from free block b: rounded when b
 * is split for it, all of b otherwise. */
size_t shard_carve_size(const shard *sh, const block *b, size_t rounded);
/* The least rest that a free block of a vmm segment, taken by a request of
 * rounded bytes, leaves as a free block of its own (should_split_rest,
 * strategy bfc): in a large range, more than SMALL_SIZE for a large request
 * (a smaller rest serves only small requests, which would rather take it
 * whole), MIN_BLOCK for a small one (shard_place_ready). */
static inline size_t vmm_min_rest(const block *b, size_t rounded) {
  return b->seg->large && size_is_large(rounded) ? SMALL_SIZE + 1 : MIN_BLOCK;
}
/* shard_carve_size for free block b of a vmm segment (whose pool has
 * strategy bfc), without the strategy's tests: the hot path's copy. */
static inline size_t vmm_carve_size(const block *b, size_t rounded) {
  return b->size - rounded >= vmm_min_rest(b, rounded) ? rounded : b->size;
}
/* shard_fit_is_mapped for fit b of a vmm segment, whose pool has strategy
 * bfc (no test of either). */
static inline int vmm_fit_is_mapped(const block *b, size_t rounded) {
  const segment *seg = b->seg;
  if (seg->nmapped == seg->npages)
    return 1;
  if (b->mapped_run < rounded) { /* no stretch over mapped pages that long: no look at pages */
    gp_assert_internal(!pages_cover(seg, b->addr, vmm_carve_size(b, rounded)));
    return 0;
  }
  if (mapped_run_full(b)) { /* every page under it mapped: no look at pages either */
    gp_assert_internal(b->mapped_run == b->size && pages_cover(seg, b->addr, b->size));
    return 1;
  }
  return pages_window_mapped(seg, b->addr, vmm_carve_size(b, rounded));
}
/* Whether fit b can be handed out now: false when some page it would take
 * is not mapped (vmm segments), which is the slow path's work. */
static inline int shard_fit_is_mapped(const shard *sh, const block *b, size_t rounded) {
  gp_assert_internal(!b->seg->pages ||
                     vmm_carve_size(b, rounded) == shard_carve_size(sh, b, rounded));
  return !b->seg->pages || vmm_fit_is_mapped(b, rounded);
}
/* shard_place in an expandable pool, whose segments are all vmm ranges
 * (strategy bfc: every block that fits may serve): the best fit, or
 * shard_place_mapped's answer where it needs pages. The descent notes what
 * follows the fit's subtree (up), where that search's walk goes on. */
static inline block *vmm_place(shard *sh, int large, size_t rounded, int mapped_only) {
  block *up;
  block *fit = free_index_lower_bound_up(*shard_free_tree(sh, large), rounded, &up);
  if (fit && !vmm_fit_is_mapped(fit, rounded))
    fit = shard_place_mapped(sh, fit, up, rounded, mapped_only);
  return fit;
}
/* shard_place in a pool without expandable segments, whose segments are all
 * plain (mapped): the best fit. */
static inline block *plain_place(shard *sh, int large, size_t rounded) {
  block *b = free_index_lower_bound(*shard_free_tree(sh, large), rounded);
  return b && plain_fit_allowed(&sh->pool->cfg, b, rounded) ? b : NULL;
}
/* A free block of the size kind `large` for a request of rounded bytes: the
 * best fit, or where some of its pages are missing (vmm segments)
 * shard_place_mapped's answer; NULL when no free block fits (with
 * mapped_only, also when every placement needs pages). Pools with and
 * without expandable segments part at once: a plain pool's blocks need no
 * look at pages, and an expandable pool's no test of the strategy's rules.
 * Inline: the hot path asks it. */
static inline block *shard_place(shard *sh, int large, size_t rounded, int mapped_only) {
  if (sh->pool->cfg.expandable)
    return vmm_place(sh, large, rounded, mapped_only);
  return plain_place(sh, large, rounded);
}
/* A free block that can be handed out now (no page to map): shard_place
 * with mapped_only, and for a small request of an expandable pool that no
 * small segment serves so, a placement over mapped pages in the stream's
 * large range, so that an idle page of the range serves it where a small
 * segment would need a page created or moved. Such a block is one of the
 * range (its statistics count as large); freed, it merges with its
 * neighbours there. NULL when there is none. */
static inline block *shard_place_ready(shard *sh, int large, size_t rounded) {
  if (!sh->pool->cfg.expandable)
    return plain_place(sh, large, rounded);
  block *b = vmm_place(sh, large, rounded, 1);
  if (!b && !large)
    b = vmm_place(sh, 1, rounded, 1);
  return b;
}
/* Allocates free block b for a request: carves it out of the index
 * (splitting it when the strategy allows; statistics and the event), then
 * records it as live, counted under tag id `tag` (0: none); -1 (and b back
 * in the index) when out of host memory. */
int shard_allocate(shard *sh, block *b, size_t rounded, size_t requested, int from_device,
                   unsigned tag);
/* The slow path's way to map pages under a block without holding the lock
 * through device calls: shard_claim carves free block b (split to what a
 * request of rounded takes) out of the index, so that no other thread
 * allocates or merges it; then, under the lock again,
 * shard_allocate_claimed hands it out (as shard_allocate, from the device)
 * or shard_unclaim returns it to the free index (merging it with free
 * neighbours). */
void shard_claim(shard *sh, block *b, size_t rounded);
int shard_allocate_claimed(shard *sh, block *b, size_t requested, unsigned tag);
void shard_unclaim(shard *sh, block *b);
/* The caller's free of allocated block b: statistics and event; the block
 * returns to the index unless deferred (then it is on the pending list). */
void shard_free(shard *sh, block *b, int deferred);
/* Whether the free of allocated block b, used on other streams (nstreams:
 * callers test it first, keeping the call off the common free), is
 * deferred: with events recorded on those streams (record_stream) it
 * becomes pending, on the pending list, and returns to the pool when they
 * complete (1); with none it is free now (0). */
int shard_defer_free(shard *sh, block *b);
/* Returns pending blocks whose events have completed. */
void shard_poll_pending(shard *sh);
/* The caller's free of allocated block b while another process still maps
 * it (an export, share.c): counted as freed now, as a free deferred by
 * record_stream is, and pending, off the pending list, until
 * shard_end_held_free returns it to the index, or, if streams were recorded
 * on it, puts it on the pending list to wait for their events. */
void shard_free_held(shard *sh, block *b);
void shard_end_held_free(shard *sh, block *b);
/* Adds segment seg (one free block, not yet indexed) to the shard. */
void shard_add_segment(shard *sh, segment *seg);
/* Detaches seg (fully free) from the shard: its block leaves the index. */
void shard_remove_segment(shard *sh, segment *seg);
static inline int segment_is_free(const segment *seg) {
  return seg->nblocks == 1 && seg->first->state == BLOCK_FREE;
}

/* The size of sh's largest free block, 0 when none; in a vmm segment, the
 * longest stretch of a free block over mapped pages (free_block_mapped). */
size_t shard_largest_free(const shard *sh);

/* Event ring capacity for new shards; 0 when events are off. */
size_t shard_events_capacity(void);
void shard_set_events_capacity(size_t cap);

block *block_new(shard *sh);

#endif
