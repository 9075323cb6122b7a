#include "shard.h"

#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/clock.h"
#include "core/errors.h"
#include "free_index.h"
#include "sizeclass.h"

static _Atomic size_t shard_events_cap; /* 0: events off */

size_t shard_events_capacity(void) {
  return atomic_load_explicit(&shard_events_cap, memory_order_relaxed);
}

void shard_set_events_capacity(size_t cap) {
  atomic_store(&shard_events_cap, cap);
}

static uint32_t xorshift(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

static inline uint64_t stream_hash(void *stream) {
  return ((uint64_t)(uintptr_t)stream * 0x9E3779B97F4A7C15ull) >> 32;
}

static shard *shard_lookup(gpupool *p, void *stream, size_t *free_slot) {
  for (size_t n = 0, i = stream_hash(stream) % SHARD_TABLE; n < SHARD_TABLE;
       n++, i = (i + 1) % SHARD_TABLE) {
    shard *sh = atomic_load_explicit(&p->shard_table[i], memory_order_acquire);
    if (!sh) {
      *free_slot = i;
      return NULL;
    }
    if (sh->stream == stream)
      return sh;
  }
  *free_slot = SHARD_TABLE;
  return NULL;
}

gpupool_status shard_get(gpupool *p, void *stream, shard **out) {
  size_t slot;
  shard *sh = shard_lookup(p, stream, &slot);
  if ((*out = sh))
    return GPUPOOL_OK;
  pthread_mutex_lock(&p->shard_create_lock);
  sh = shard_lookup(p, stream, &slot); /* another thread may have won */
  int full = !sh && slot == SHARD_TABLE;
  if (!sh && !full && (sh = aligned_alloc(64, sizeof *sh))) {
    memset(sh, 0, sizeof *sh);
    sh->stream = stream;
    sh->pool = p;
    sh->rng = (uint32_t)(stream_hash(stream) | 1);
    sh->by_block = p->by_block;
    size_t cap = backend_is_sim(p->be) ? 0 : shard_events_capacity(); /* replays: none */
    if (cap) { /* read under shard_create_lock: pool_events_switch relies on it */
      sh->ring = event_ring_create_pool(cap, (uint64_t)(uintptr_t)stream);
      atomic_init(&sh->recording, sh->ring);
    }
    sh->next_shard = atomic_load(&p->shards);
    atomic_store(&p->shards, sh);
    atomic_fetch_add(&p->nshards, 1);
    atomic_store_explicit(&p->shard_table[slot], sh, memory_order_release);
  }
  pthread_mutex_unlock(&p->shard_create_lock);
  *out = sh;
  return sh ? GPUPOOL_OK : full ? GPUPOOL_ERR_UNSUPPORTED : GPUPOOL_ERR_HOST_OOM;
}

static void free_block_list(block *b) {
  while (b) {
    block *next = b->next;
    free(b->streams);
    free(b);
    b = next;
  }
}

void shard_destroy(gpupool *p, shard *sh, void (*free_segment)(gpupool *p, segment *seg)) {
  for (block *b = sh->pending; b; b = b->pending_next)
    for (unsigned i = 0; i < b->nstreams; i++)
      if (b->streams[i])
        p->be->ops->event_destroy(p->be, b->streams[i]);
  if (sh->fence)
    p->be->ops->event_destroy(p->be, sh->fence);
  if (sh->ring) /* before the blocks go: a trace may outlive the pool */
    shard_settle_events(sh, sh->ring, 1);
  for (segment *seg = sh->segments, *next; seg; seg = next) {
    next = seg->next;
    block *blocks = seg->first;
    free_segment(p, seg);
    free_block_list(blocks);
  }
  for (block *b = sh->spare, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  event_ring_unref(sh->ring);
  addrmap_destroy(&sh->live);
  free(sh);
}

block *block_new(shard *sh) {
  block *b = sh->spare;
  if (b)
    sh->spare = b->next;
  else if (!(b = malloc(sizeof *b))) {
    return NULL;
  }
  /* The caller sets addr, size, seg, state, prev and next; the index sets
   * left and right. */
  b->prio = xorshift(&sh->rng);
  b->requested = 0;
  b->nstreams = b->cap_streams = 0;
  b->streams = NULL;
  b->pending_next = NULL;
  b->free_seq = 0;
  return b;
}

static void block_recycle(shard *sh, block *b) {
  if (b->streams) {
    free(b->streams);
    b->streams = NULL;
  }
  b->next = sh->spare;
  sh->spare = b;
}

static void index_insert(shard *sh, block *b) {
  gp_assert_internal(b->state == BLOCK_FREE && b->seg->sh == sh);
  free_index_insert(shard_free_tree(sh, b->seg->large), b);
  sh->nfree++;
}

static void index_remove(shard *sh, block *b) {
  gp_assert_internal(b->state == BLOCK_FREE && sh->nfree > 0);
  free_index_remove(shard_free_tree(sh, b->seg->large), b);
  sh->nfree--;
}

static int should_split_rest(const pool_config *c, const block *b, size_t rest, size_t rounded);

/* The bytes that a request of rounded bytes placed at `at` in free block b
 * (of a vmm segment; min_rest: vmm_min_rest(b)) takes from there: rounded,
 * or all up to b's end where the rest would be too small to split off; 0
 * where it does not fit there. */
static inline size_t window_at(const block *b, uintptr_t at, size_t rounded, size_t min_rest) {
  uintptr_t end = b->addr + b->size;
  if (at < b->addr || at > end || end - at < rounded)
    return 0;
  return end - at - rounded >= min_rest ? rounded : end - at;
}

/* The unmapped pages that a request of rounded bytes placed at `at` in free
 * block b needs (window_at), SIZE_MAX where it does not fit there. */
static inline size_t missing_at(const block *b, uintptr_t at, size_t rounded, size_t min_rest) {
  size_t len = window_at(b, at, rounded, min_rest);
  if (!len)
    return SIZE_MAX;
  const segment *seg = b->seg;
  size_t first = page_of(seg, at), last = page_of(seg, at + len - 1);
  return last - first + 1 - pages_mapped_in(seg, first, last);
}

/* Keeps at in *best_at when it needs fewer unmapped pages than *best. */
static inline void try_at(const block *b, uintptr_t at, size_t rounded, size_t min_rest,
                          size_t *best, uintptr_t *best_at) {
  size_t m = missing_at(b, at, rounded, min_rest);
  if (m < *best) {
    *best = m;
    *best_at = at;
  }
}

/* Where in free block b (of a vmm segment, in a pool of strategy bfc) a
 * request of rounded bytes needs the fewest unmapped pages, *at: its start,
 * its end, or the start or end of a run of mapped pages inside it (the first
 * of these on ties). Returns how many it needs there. The slow path's
 * question; the hot path asks mapped_at_start and
 * mapped_window_past_start. */
static size_t best_window(const shard *sh, const block *b, size_t rounded, uintptr_t *at) {
  gp_assert_internal(b->seg->pages && sh->pool->cfg.strategy == GPUPOOL_STRATEGY_BFC);
  const segment *seg = b->seg;
  size_t ps = seg->page_size, min_rest = vmm_min_rest(b, rounded);
  size_t best = missing_at(b, b->addr, rounded, min_rest);
  uintptr_t end = b->addr + b->size;
  *at = b->addr;
  if (!best)
    return 0;
  try_at(b, end - rounded, rounded, min_rest, &best, at);
  size_t first = page_of(seg, b->addr), last = page_of(seg, end - 1);
  if (last >= seg->top) /* no page at or above top was ever mapped */
    last = seg->top ? seg->top - 1 : 0;
  for (size_t i = pages_find(seg, first, last, 1); best && i <= last;) {
    size_t j = pages_find(seg, i, last, 0); /* the run of mapped pages [i, j) */
    try_at(b, seg->addr + i * ps, rounded, min_rest, &best, at);
    try_at(b, seg->addr + j * ps - rounded, rounded, min_rest, &best, at);
    i = pages_find(seg, j, last, 1);
  }
  return best;
}

/* Whether a request of rounded bytes placed at `at` in free block b (as
 * missing_at) needs no unmapped page. */
static inline int mapped_at(const block *b, uintptr_t at, size_t rounded, size_t min_rest) {
  size_t len = window_at(b, at, rounded, min_rest);
  return len && pages_window_mapped(b->seg, at, len);
}

/* best_window's answer when it is 0, past b's start (mapped_at_start asks
 * that): 1 and *at where a request of rounded bytes needs no unmapped page
 * at b's end or at a run of mapped pages inside it (the same places, in the
 * same order); else 0, and b's longest stretch over mapped pages, exact
 * (pages_longest_mapped: the same runs), in *longest: no page counted, and
 * the runs walked once for both. Out of line: most looks end at the start,
 * and the walk around them keeps fewer values live without this part. */
static __attribute__((noinline)) int mapped_window_past_start(const block *b, size_t rounded,
                                                              size_t min_rest, uintptr_t *at,
                                                              size_t *longest) {
  const segment *seg = b->seg;
  size_t ps = seg->page_size;
  uintptr_t end = b->addr + b->size;
  if (pages_window_mapped(seg, end - rounded, rounded)) { /* mapped_at: no rest past it */
    *at = end - rounded;
    return 1;
  }
  size_t first = page_of(seg, b->addr), last = page_of(seg, end - 1), run = 0;
  if (last >= seg->top) /* no page at or above top was ever mapped */
    last = seg->top ? seg->top - 1 : 0;
  for (size_t i = pages_find(seg, first, last, 1); i <= last;) {
    size_t j = pages_find(seg, i, last, 0); /* the run of mapped pages [i, j) */
    uintptr_t lo = seg->addr + i * ps, hi = seg->addr + j * ps;
    if ((j - i) * ps >= rounded) {
      if (mapped_at(b, lo, rounded, min_rest)) {
        *at = lo;
        return 1;
      }
      if (mapped_at(b, hi - rounded, rounded, min_rest)) {
        *at = hi - rounded;
        return 1;
      }
    }
    lo = lo > b->addr ? lo : b->addr;
    hi = hi < end ? hi : end;
    run = hi - lo > run ? hi - lo : run;
    i = pages_find(seg, j, last, 1);
  }
  *longest = run;
  return 0;
}

/* Whether a request of rounded bytes placed at free block b's start needs
 * no unmapped page: mapped_at(b, b->addr, ...), the block holding it. */
static inline int mapped_at_start(const block *b, size_t rounded) {
  return pages_window_mapped(b->seg, b->addr, vmm_carve_size(b, rounded));
}

/* Splits free block b at address at, inside it: b keeps the part below at,
 * a free block still, and a new block, returned, takes the part from at,
 * out of the index (BLOCK_PLACED: the caller carves it next, which then
 * costs an index operation only where a remainder stays free). b's key
 * only shrinks: where it still sorts
 * after its predecessor (pred, the search's previous block, NULL where
 * unknown), it keeps its place in the index, no descent. Without host
 * memory for the new block, b is returned whole. */
static block *split_front(shard *sh, block *b, uintptr_t at, const block *pred) {
  block *p = block_new(sh);
  if (!p)
    return b;
  size_t front = at - b->addr;
  p->addr = at;
  p->size = b->size - front;
  p->seg = b->seg;
  p->state = BLOCK_PLACED; /* never in the index: b keeps its count */
  p->free_seq = b->free_seq;
  /* each part's stretch over mapped pages is at most the whole's */
  p->mapped_run = mapped_run_cap(b->mapped_run, p->size);
  p->prev = b;
  p->next = b->next;
  if (b->next)
    b->next->prev = p;
  b->next = p;
  b->seg->nblocks++;
  free_index_shrink_size(shard_free_tree(sh, b->seg->large), b, front, pred);
  b->mapped_run = mapped_run_cap(b->mapped_run, front);
  return p;
}

#ifndef NDEBUG
/* Whether the search's answer for b (mapped_at_start, then
 * mapped_window_past_start) is best_window's and pages_longest_mapped's. */
static int same_window(const shard *sh, const block *b, size_t rounded, int found, uintptr_t at,
                       size_t longest) {
  uintptr_t best_at;
  size_t m = best_window(sh, b, rounded, &best_at);
  if (found)
    return m == 0 && at == best_at;
  return m != 0 && longest == pages_longest_mapped(b->seg, b->addr, b->size);
}
#endif

/* Whether free block b, whose start does not hold a request of rounded
 * bytes, holds it over mapped pages further in (mapped_window_past_start:
 * *at); where it does not, b found loose is tightened. */
static inline int mapped_past_start(const shard *sh, block *b, size_t rounded, uintptr_t *at) {
  size_t longest;
  int found = mapped_window_past_start(b, rounded, vmm_min_rest(b, rounded), at, &longest);
  /* *at is set only where found, longest only where not */
  gp_assert_internal(same_window(sh, b, rounded, found, found ? *at : 0, found ? 0 : longest));
  if (!found)
    b->mapped_run = longest | 1; /* not all mapped, or its start would have served */
  return found;
}

/* The first free block from fit (the best fit) on, in the index's order,
 * with a placement for a request of rounded bytes over mapped pages only
 * (*at: where, as best_window finds it; *pred: the block before it, NULL
 * where that is unknown), or NULL. The walk starts at fit without a second
 * descent (free_index_iter_from, with up). Such a placement lies in one
 * stretch of the block over mapped pages: a block whose mapped_run is
 * shorter is skipped in a compare, without looking at its pages (most
 * blocks, which is what makes the search cheap), and one known to be all
 * mapped serves at its start. fit's start was looked at already
 * (shard_fit_is_mapped). Only expandable pools search (a plain segment's
 * blocks are mapped): their segments are all vmm ranges, and their strategy
 * bfc, under which shard_fit_allowed holds for every block of a vmm
 * segment. Inline in shard_place_mapped, its one caller: one call and one
 * prologue per search, not two. */
static inline __attribute__((always_inline)) block *
first_mapped(shard *sh, block *fit, block *up, size_t rounded, uintptr_t *at, block **pred) {
  free_index_iter it;
  free_index_iter_from(&it, *shard_free_tree(sh, fit->seg->large), fit, up);
  *pred = NULL; /* fit's is not known */
  if (fit->mapped_run >= rounded && mapped_past_start(sh, fit, rounded, at))
    return fit;
  for (block *b = fit; (*pred = b, b = free_index_iter_next(&it));) {
    gp_assert_internal(b->seg->pages && shard_fit_allowed(&sh->pool->cfg, b, rounded));
    gp_assert_internal(pages_longest_mapped(b->seg, b->addr, b->size) <= b->mapped_run);
    gp_assert_internal(!mapped_run_full(b) || pages_cover(b->seg, b->addr, b->size));
    if (b->mapped_run < rounded)
      continue;
    if (mapped_run_full(b) || mapped_at_start(b, rounded)) {
      gp_assert_internal(same_window(sh, b, rounded, 1, b->addr, 0));
      *at = b->addr;
      return b;
    }
    if (mapped_past_start(sh, b, rounded, at))
      return b;
  }
  return NULL;
}

/* When no placement over mapped pages only exists: among the free blocks
 * from fit on, smallest first, the one whose best placement (*at) needs the
 * fewest unmapped pages (the first on ties). As first_mapped, in expandable
 * pools only. */
static block *fewest_missing(shard *sh, block *fit, int large, size_t rounded, uintptr_t *at) {
  block *best = fit;
  size_t best_missing = SIZE_MAX;
  free_index_iter it;
  *at = fit->addr;
  for (block *b = free_index_iter_start(&it, *shard_free_tree(sh, large), rounded); b;
       b = free_index_iter_next(&it)) {
    gp_assert_internal(b->seg->pages && shard_fit_allowed(&sh->pool->cfg, b, rounded));
    uintptr_t b_at;
    size_t m = best_window(sh, b, rounded, &b_at);
    if (m < best_missing) {
      best_missing = m;
      best = b;
      *at = b_at;
    }
  }
  return best;
}

/* Out of line: inlined into shard_place, it made every allocation save
 * registers that only this search needs, plain pools' included. */
__attribute__((noinline)) block *shard_place_mapped(shard *sh, block *fit, block *up,
                                                    size_t rounded, int mapped_only) {
  gp_assert_internal(fit && fit == shard_best_fit(sh, fit->seg->large, rounded) &&
                     !shard_fit_is_mapped(sh, fit, rounded));
  int large = fit->seg->large;
  uintptr_t at;
  block *pred;
  block *best = first_mapped(sh, fit, up, rounded, &at, &pred);
  if (!best && !mapped_only) {
    best = fewest_missing(sh, fit, large, rounded, &at);
    pred = NULL;
  }
  if (best && at != best->addr)
    best = split_front(sh, best, at, pred);
  return best;
}

/* Whether a request of rounded bytes taken from free block b leaves the
 * rest (rest bytes) as a free block of its own. */
static int should_split_rest(const pool_config *c, const block *b, size_t rest, size_t rounded) {
  if (c->strategy != GPUPOOL_STRATEGY_BFC)
    return 0;
  if (!b->seg->large)
    return rest >= MIN_BLOCK;
  if (b->seg->pages) /* an expandable segment's range: the request takes only its own size */
    return rest >= vmm_min_rest(b, rounded);
  return rounded < c->max_split_size && rest > SMALL_SIZE; /* PyTorch: the request decides */
}

static int should_split(const pool_config *c, const block *b, size_t rounded) {
  return should_split_rest(c, b, b->size - rounded, rounded);
}

size_t shard_carve_size(const shard *sh, const block *b, size_t rounded) {
  return should_split(&sh->pool->cfg, b, rounded) ? rounded : b->size;
}

/* record_block_event's rare case: a request too large for a compact
 * record (1 TiB or more: no device has that much today), written whole into the
 * side array of r, the ring the caller read once (a switch may clear the
 * shard's pointer meanwhile). Out of line, so the hot path keeps no
 * registers for it. */
static __attribute__((noinline, cold)) uint64_t
record_block_event_whole(shard *sh, event_ring *r, uint64_t tf, const block *b, size_t requested) {
  pool_event ev = {.type = (uint8_t)(tf >> EVENT_REC_TYPE_SHIFT),
                   .flags = (uint8_t)(tf >> EVENT_REC_FLAGS_SHIFT),
                   .addr = b->addr,
                   .size = b->size,
                   .requested = requested,
                   .stream = (uint64_t)(uintptr_t)sh->stream};
  return shard_emit_into(sh, r, &ev);
}

/* Whether the allocation that r's newest record holds (that of
 * r->last_block) has ended, seen from a push about block b of type `type`:
 * its block was then freed by a plain free in its tick, which wrote no
 * record (record_free_event), since every other free of it while recording
 * writes one. Block b allocated anew: its last lifetime ended; b's own free
 * (deferred, or in a later tick): that is this record; another block: it
 * ended where the block is no longer allocated (a reuse of the block would
 * have pushed its own record, and events going off forget it, shard_settle).
 * Block structs are freed only after a settle (segment_destroy's event,
 * shard_destroy), so last_block can be read. */
static inline int allocation_ended(const block *last) {
  gp_assert_internal(last->state != BLOCK_PENDING); /* a deferred free pushes a record */
  return last->state != BLOCK_ALLOCATED;
}
static inline int newest_allocation_ended(const event_ring *r, const block *b, uint8_t type) {
  const block *last = r->last_block;
  if (!last)
    return 0;
  if (last == b)
    return type == EV_ALLOC;
  return allocation_ended(last);
}

void shard_settle_events(shard *sh, event_ring *r, int forget) {
  const block *last = r->last_block;
  if (!last) /* so no repeat waits to be flushed: only last_block's record takes them */
    return;
  gp_assert_internal(r == sh->ring);
  event_ring_flush_repeats(r);
  if (allocation_ended(last)) {
    int marked = event_ring_mark_newest_freed(r);
    gp_assert_internal(marked);
    (void)marked;
  } else if (!forget) {
    return;
  }
  r->last_block = NULL;
}

event_ring_end shard_events_end(shard *sh) {
  shard_settle_events(sh, sh->ring, 0);
  gp_assert_internal(sh->ring->repeats_room == sh->ring->repeats_left); /* flushed */
  return event_ring_end_now(sh->ring);
}

/* Records an event about block b when events are on: one compact record
 * (event_ring.h), which says whether the allocation in the record before it
 * has ended (EVF_PREV_FREED), or a repeat of the newest record where b's
 * lifetime repeats its last one; large is 0 or 1 (EVF_LARGE is added here, by a
 * shift). Returns its timestamp, 0 when events are off. The stamp is
 * event_clock_stamp() as it comes (no event_clock_ring_stamp: keeping a
 * ring's stamps from stepping back, by under a tick where the clock mode
 * switches, cost 1.5 ns a pair; the readers that merge rings keep each
 * ring's order instead). */
static inline uint64_t record_block_event(shard *sh, uint8_t type, unsigned flags, const block *b,
                                          int large, size_t requested) {
  event_ring *r = shard_recording(sh);
  if (__builtin_expect(!r, 0)) /* events are on by default: theirs is the straight path */
    return 0;
  gp_assert_internal(large == 0 || large == 1);
  uint64_t ts = event_clock_stamp();
  /* b allocated again from the cache, its last lifetime the newest record
   * and ended with no record of its free: the same lifetime again, in the
   * same tick, is a repeat of that record (event_ring.h, "Repeated
   * lifetimes"). Tried first, before the record's type and flags are
   * composed, and laid out as the straight path: in an allocation storm it
   * is all that recording adds (bench_events; bench/README.md). */
  if (__builtin_expect(r->last_block == b && type == EV_ALLOC && flags == 0 &&
                           event_ring_repeat_newest(r, ts, b->addr, b->size, requested),
                       1)) {
    gp_assert_internal((atomic_load_explicit(&r->newest_block->word[3], memory_order_relaxed) >>
                            EVENT_REC_FLAGS_SHIFT &
                        EVF_LARGE) == (unsigned)large << 2); /* b's segment: its record's */
    return ts;
  }
  _Static_assert(EVF_LARGE == 1 << 2, "the shift below sets EVF_LARGE");
  uint64_t tf = EVENT_REC_TF(type, flags | (unsigned)large << 2);
  if (__builtin_expect(requested >> EVENT_REC_REQUESTED_BITS != 0, 0))
    return record_block_event_whole(sh, r, tf, b, requested);
  _Static_assert(EVF_PREV_FREED == 1 << 6, "the shift below sets EVF_PREV_FREED");
  tf |= EVENT_REC_TF(0, (unsigned)newest_allocation_ended(r, b, type) << 6);
  event_ring_push_block(r, ts, tf, b->addr, b->size, requested, type == EV_ALLOC ? b : NULL);
  return ts;
}

/* Records the free of allocated block b when events are on (deferred: it
 * waits on events of other streams, EVF_DEFERRED). A plain free in the tick
 * of the allocation's stamp, with nothing recorded since (b is the ring's
 * last_block), writes nothing at all: the allocation's record stands for
 * both, as the next record or shard_settle_events says (event_ring.h, "One
 * record per lifetime"). In the allocation storms that the ticked clock
 * serves, one record per lifetime instead of two, and no store at the free
 * (bench_events measures what it saves). */
static inline void record_free_event(shard *sh, int deferred, const block *b, int large) {
  event_ring *r = shard_recording(sh);
  if (!r)
    return;
  /* last_block == b: b's allocation was recorded, so its stamp is not 0 */
  if (!deferred && r->last_block == b && event_clock_ticked_at(b->alloc_stamp))
    return;
  record_block_event(sh, EV_FREE, deferred ? EVF_DEFERRED : 0, b, large, b->requested);
}

/* While frees are pending, active exceeds allocation: keep its peak. */
static void note_active_peak(shard *sh) {
  const stat_counter *s = sh->st.s;
  for (int t = 0; t < GPUPOOL_STAT_TYPES; t++) {
    int64_t n = stat_current(&s[STAT_ALLOCATION], t) + stat_current(&s[STAT_PENDING], t);
    int64_t bytes =
        stat_current(&s[STAT_ALLOCATED_BYTES], t) + stat_current(&s[STAT_PENDING_BYTES], t);
    if (n > sh->st.active_peak.count[t])
      sh->st.active_peak.count[t] = n;
    if (bytes > sh->st.active_peak.bytes[t])
      sh->st.active_peak.bytes[t] = bytes;
  }
}

/* hist_bucket's one writer, under the lock: a relaxed load and store, no
 * read-modify-write, which the event clock's count reads without the lock
 * (pool_events_lifetimes_total). */
static void count_request(shard *sh, size_t requested) {
  unsigned i = requested <= 1 ? 0 : 64 - (unsigned)__builtin_clzll(requested - 1);
  uint64_t *bucket = &sh->st.hist_bucket[i < POOL_HIST_BUCKETS ? i : POOL_HIST_BUCKETS - 1];
  __atomic_store_n(bucket, *bucket + 1, __ATOMIC_RELAXED);
  sh->st.hist_sum += requested;
}

/* split_counted: inactive_split counts the free blocks of split segments
 * that are not vmm ranges. Those of a vmm range (expandable segments) hold
 * only idle pages, which the pool moves to other blocks or releases: they
 * are not memory lost to fragmentation, and the range's last free block
 * spans address space as large as the device. */

/* Takes free block b out of the index for a request of rounded bytes,
 * splitting it when the strategy allows (the remainder stays free). A block
 * the search placed (BLOCK_PLACED, split_front) is out of it already: its
 * remainder enters anew. */
static void carve_out(shard *sh, block *b, size_t rounded) {
  gp_assert_internal((b->state == BLOCK_FREE || b->state == BLOCK_PLACED) && b->seg->sh == sh);
  gp_assert_internal(b->size >= rounded);
  int large = b->seg->large;
  int placed = b->state == BLOCK_PLACED; /* a vmm segment's block, out of the index */
  gp_assert_internal(!placed || b->seg->pages);
  block *r = should_split(&sh->pool->cfg, b, rounded) ? block_new(sh) : NULL;
  if (r) { /* without host memory for the remainder, the whole block is used */
    /* Counted as PyTorch does: an inactive split block that is cut stays one,
     * shrunk by what is taken; an unsplit block leaves one behind. */
    if (b->seg->pages) { /* not counted (split_counted); a bound, as in split_front */
      r->mapped_run = mapped_run_cap(b->mapped_run, b->size - rounded);
    } else if (b->seg->nblocks > 1) {
      stat_dec(&sh->st.s[STAT_INACTIVE_SPLIT_BYTES], large, (int64_t)rounded);
    } else {
      stat_inc(&sh->st.s[STAT_INACTIVE_SPLIT], large, 1);
      stat_inc(&sh->st.s[STAT_INACTIVE_SPLIT_BYTES], large, (int64_t)(b->size - rounded));
    }
    r->addr = b->addr + rounded;
    r->size = b->size - rounded;
    r->seg = b->seg;
    r->state = BLOCK_FREE;
    r->free_seq = b->free_seq;
    r->prev = b;
    r->next = b->next;
    /* a remainder, smaller: takes b's place where the order allows (before
     * b's key changes: the index finds b by it); a placed b has none */
    if (placed)
      index_insert(sh, r);
    else
      free_index_shrink(shard_free_tree(sh, large), b, r);
    if (b->next)
      b->next->prev = r;
    b->next = r;
    b->size = rounded;
    b->seg->nblocks++;
  } else {
    if (!placed)
      index_remove(sh, b);
    if (b->seg->nblocks > 1 && !b->seg->pages) { /* a split block taken whole */
      stat_dec(&sh->st.s[STAT_INACTIVE_SPLIT], large, 1);
      stat_dec(&sh->st.s[STAT_INACTIVE_SPLIT_BYTES], large, (int64_t)b->size);
    }
  }
  gp_assert_internal(b->size >= rounded && (!b->next || b->next->addr == b->addr + b->size));
}

/* Block b, carved out (carve_out), becomes allocated: statistics and event. */
static void count_allocation(shard *sh, block *b, size_t requested, int from_device) {
  gp_assert_internal(b->size >= requested);
  int large = b->seg->large;
  b->state = BLOCK_ALLOCATED;
  b->requested = requested;
  b->nstreams = 0;
  stat_inc(&sh->st.s[STAT_ALLOCATION], large, 1);
  stat_inc(&sh->st.s[STAT_ALLOCATED_BYTES], large, (int64_t)b->size);
  stat_inc(&sh->st.s[STAT_REQUESTED_BYTES], large, (int64_t)requested);
  if (sh->npending)
    note_active_peak(sh);
  count_request(sh, requested);
  sh->st.device_sourced += from_device != 0;
  b->alloc_stamp = record_block_event(sh, EV_ALLOC, (unsigned)(from_device != 0) * EVF_FROM_DEVICE,
                                      b, large, requested);
}

/* count_allocation, then the tag and the table of live blocks. */
static int record_live(shard *sh, block *b, size_t requested, int from_device, unsigned tag) {
  count_allocation(sh, b, requested, from_device);
  b->tag = (uint8_t)tag;
  if (tag) /* untagged allocations (the common case) count nothing more */
    sh->tag_bytes[tag] += (int64_t)b->size;
  if (sh->by_block || addrmap_insert(&sh->live, b->addr, b) == 0)
    return 0;
  shard_free(sh, b, 0);
  return -1;
}

int shard_allocate(shard *sh, block *b, size_t rounded, size_t requested, int from_device,
                   unsigned tag) {
  gp_assert_internal(requested <= rounded);
  carve_out(sh, b, rounded);
  return record_live(sh, b, requested, from_device, tag);
}

static void shard_release(shard *sh, block *b);

void shard_claim(shard *sh, block *b, size_t rounded) {
  carve_out(sh, b, rounded);
  b->state = BLOCK_CLAIMED;
}

int shard_allocate_claimed(shard *sh, block *b, size_t requested, unsigned tag) {
  gp_assert_internal(b->state == BLOCK_CLAIMED && b->seg->sh == sh);
  return record_live(sh, b, requested, 1, tag);
}

void shard_unclaim(shard *sh, block *b) {
  gp_assert_internal(b->state == BLOCK_CLAIMED && b->seg->sh == sh);
  shard_release(sh, b);
  b->mapped_run |= 1; /* some of its pages may have stayed unmapped */
}

/* Absorbs free neighbour n into b's address range and unlinks it from the
 * segment; n keeps its own fields, so that the index still finds it.
 * Returns the bytes it had. */
static size_t absorb(block *b, block *n) {
  gp_assert_internal(n->state == BLOCK_FREE && n->seg == b->seg);
  gp_assert_internal(n == b->prev ? n->addr + n->size == b->addr : b->addr + b->size == n->addr);
  size_t size = n->size;
  if (n == b->prev) {
    b->addr = n->addr;
    b->prev = n->prev;
    if (b->prev)
      b->prev->next = b;
    else
      b->seg->first = b;
  } else {
    b->next = n->next;
    if (b->next)
      b->next->prev = b;
  }
  b->size += n->size;
  b->seg->nblocks--;
  return size;
}

/* Returns block b (allocated or pending, not in the index) to the free
 * index, merging it with its free neighbours. */
static void shard_release(shard *sh, block *b) {
  gp_assert_internal(b->state != BLOCK_FREE && b->seg->sh == sh);
  gp_assert_internal(!b->seg->pages || b->state == BLOCK_CLAIMED ||
                     pages_cover(b->seg, b->addr, b->size)); /* allocated: all mapped */
  b->state = BLOCK_FREE;
  b->free_seq = ++sh->free_seq;
  b->nstreams = 0;
  /* inactive_split changes by its net amount, as PyTorch counts it: each
   * neighbour absorbed was one, the merged block is one if the segment is
   * still split. */
  int64_t blocks = 0, bytes = 0;
  block *slot = NULL; /* an absorbed neighbour whose place in the index b takes */
  /* A stretch over mapped pages of the merged block is at most b's size
   * plus those of the neighbours (a bound: b's pages may be loose when it
   * was claimed, and the neighbours' stretches need not meet b). The sum
   * also adds the neighbours' bit 0 (types.h): clear only where b (all
   * mapped unless claimed: shard_unclaim) and each neighbour are full. */
  size_t run = b->size;
  if (b->prev && b->prev->state == BLOCK_FREE) {
    slot = b->prev;
    blocks--;
    run += slot->mapped_run;
    bytes -= (int64_t)absorb(b, slot);
  }
  if (b->next && b->next->state == BLOCK_FREE) {
    block *n = b->next;
    blocks--;
    run += n->mapped_run;
    bytes -= (int64_t)absorb(b, n);
    if (slot) {
      index_remove(sh, n);
      block_recycle(sh, n);
    } else
      slot = n;
  }
  if (b->seg->nblocks > 1) {
    blocks++;
    bytes += (int64_t)b->size;
  }
  if (!b->seg->pages) { /* split_counted */
    stat_add(&sh->st.s[STAT_INACTIVE_SPLIT], b->seg->large, blocks);
    stat_add(&sh->st.s[STAT_INACTIVE_SPLIT_BYTES], b->seg->large, bytes);
  } else {
    gp_assert_internal(b->size % MIN_BLOCK == 0 && run % MIN_BLOCK <= 2);
    b->mapped_run = run - ((run >> 1) & 1); /* two bits 0 summed (bit 1): one */
  }
  if (slot) {
    free_index_grow(shard_free_tree(sh, b->seg->large), slot, b); /* b absorbed slot: larger */
    block_recycle(sh, slot);
  } else
    index_insert(sh, b);
}

void shard_free(shard *sh, block *b, int deferred) {
  gp_assert_internal(b->state == (deferred ? BLOCK_PENDING : BLOCK_ALLOCATED) && b->seg->sh == sh);
  int large = b->seg->large;
  stat_dec(&sh->st.s[STAT_ALLOCATION], large, 1);
  stat_dec(&sh->st.s[STAT_ALLOCATED_BYTES], large, (int64_t)b->size);
  stat_dec(&sh->st.s[STAT_REQUESTED_BYTES], large, (int64_t)b->requested);
  if (b->tag)
    sh->tag_bytes[b->tag] -= (int64_t)b->size;
  record_free_event(sh, deferred, b, large);
  if (!deferred) {
    shard_release(sh, b);
    return;
  }
  stat_inc(&sh->st.s[STAT_PENDING], large, 1);
  stat_inc(&sh->st.s[STAT_PENDING_BYTES], large, (int64_t)b->size);
}

static int events_complete(gpupool *p, block *b) {
  for (unsigned i = 0; i < b->nstreams; i++) {
    if (!b->streams[i])
      continue;
    if (p->be->ops->event_query(p->be, b->streams[i]) == 0)
      return 0;
    p->be->ops->event_destroy(p->be, b->streams[i]);
    b->streams[i] = NULL;
  }
  return 1;
}

/* Records an event on each other stream that allocated block b was used
 * on (record_stream), in place of the stream; the number recorded, which
 * the block must wait for before it is free. */
static unsigned record_uses(shard *sh, block *b) {
  backend *be = sh->pool->be;
  unsigned pending = 0;
  pool_error_scope scope; /* the free succeeds all the same: no failure of the caller's */
  pool_error_scope_enter(&scope);
  for (unsigned i = 0; i < b->nstreams; i++) {
    void *ev = NULL;
    if (be->ops->event_record(be, b->streams[i], &ev) != GPUPOOL_OK)
      ev = NULL; /* cannot wait on it: treat that stream as done */
    b->streams[i] = ev;
    pending += ev != NULL;
  }
  pool_error_scope_leave(&scope, GPUPOOL_OK);
  sh->st.sync_events += pending;
  return pending;
}

/* Pending block b (off the pending list) is no longer used: it returns to
 * the index. */
static void complete_free(shard *sh, block *b) {
  gp_assert_internal(b->state == BLOCK_PENDING && sh->npending > 0);
  sh->npending--;
  record_block_event(sh, EV_FREE_COMPLETED, 0, b, b->seg->large, b->requested);
  stat_dec(&sh->st.s[STAT_PENDING], b->seg->large, 1);
  stat_dec(&sh->st.s[STAT_PENDING_BYTES], b->seg->large, (int64_t)b->size);
  shard_release(sh, b);
}

void shard_poll_pending(shard *sh) {
  block **link = &sh->pending;
  while (*link) {
    block *b = *link;
    if (!events_complete(sh->pool, b)) {
      link = &b->pending_next;
      continue;
    }
    *link = b->pending_next;
    complete_free(sh, b);
  }
}

/* Allocated block b becomes a pending free (pending_free_blocks counts it;
 * allocations keep the active peak). */
static void make_pending(shard *sh, block *b) {
  gp_assert_internal(b->state == BLOCK_ALLOCATED);
  b->state = BLOCK_PENDING;
  sh->npending++;
}

/* Pending block b waits on the pending list for its streams' events. */
static void wait_on_events(shard *sh, block *b) {
  gp_assert_internal(b->state == BLOCK_PENDING);
  b->pending_next = sh->pending;
  sh->pending = b;
}

int shard_defer_free(shard *sh, block *b) {
  gp_assert_internal(b->nstreams);
  if (!record_uses(sh, b))
    return 0;
  make_pending(sh, b);
  wait_on_events(sh, b);
  return 1;
}

void shard_free_held(shard *sh, block *b) {
  make_pending(sh, b);
  shard_free(sh, b, 1);
}

void shard_end_held_free(shard *sh, block *b) {
  /* The streams' events are recorded now rather than at the free: none is
   * left behind if the pool is destroyed during the export, and waiting for
   * later work as well is only safer. */
  if (b->nstreams && record_uses(sh, b))
    wait_on_events(sh, b);
  else
    complete_free(sh, b);
}

/* A segment counts (its bytes reserved, a plain one as a device
 * allocation) while it is in a shard, so that gpupool_get_stats, which does
 * not take the slow lock, sees both sides change together (stats.c). */
static void count_segment(gpupool *p, const segment *seg, int delta) {
  pool_counters *c = &p->c;
  spin_lock(&p->counters_lock);
  stat_add(&c->segments, seg->large, delta);
  stat_add(&c->reserved_bytes, seg->large, delta * (int64_t)segment_mapped_bytes(seg));
  if (!seg->pages) {
    if (delta > 0)
      c->device_allocs++;
    else
      c->device_frees++;
  }
  c->seq++;
  spin_unlock(&p->counters_lock);
}

void shard_add_segment(shard *sh, segment *seg) {
  gp_assert_internal(segment_is_free(seg) && seg->first->addr == seg->addr &&
                     seg->first->size == seg->size && seg->first->seg == seg);
  seg->sh = sh;
  seg->prev = NULL;
  seg->next = sh->segments;
  if (sh->segments)
    sh->segments->prev = seg;
  sh->segments = seg;
  seg->first->free_seq = ++sh->free_seq;
  if (seg->pages)
    seg->first->mapped_run = mapped_run_exact(seg->first);
  index_insert(sh, seg->first);
  count_segment(sh->pool, seg, 1);
}

void shard_remove_segment(shard *sh, segment *seg) {
  gp_assert_internal(seg->sh == sh && segment_is_free(seg));
  index_remove(sh, seg->first);
  count_segment(sh->pool, seg, -1);
  if (seg->prev)
    seg->prev->next = seg->next;
  else
    sh->segments = seg->next;
  if (seg->next)
    seg->next->prev = seg->prev;
  seg->prev = seg->next = NULL;
}

/* The longest stretch over mapped pages among the free blocks of one tree,
 * by a walk of every block (for statistics and OOM reports, not requests). */
static size_t largest_mapped_free(block *root) {
  size_t best = 0;
  free_index_iter it;
  for (block *b = free_index_iter_start(&it, root, 0); b; b = free_index_iter_next(&it))
    if (b->size > best) {
      size_t run;
      free_block_mapped(b, &run);
      best = run > best ? run : best;
    }
  return best;
}

/* A plain segment's largest free block is the answer as it stands: no
 * block of the tree holds more. */
size_t shard_largest_free(const shard *sh) {
  size_t best = 0;
  block *trees[2] = {sh->free_tree.small, sh->free_tree.large};
  for (int i = 0; i < 2; i++) {
    const block *largest = free_index_largest(trees[i]);
    size_t run = !largest ? 0 : largest->seg->pages ? largest_mapped_free(trees[i]) : largest->size;
    best = run > best ? run : best;
  }
  return best;
}
