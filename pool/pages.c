#include "pages.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/errors.h"
#include "segment_observers.h"

char pages_stale_marker;

/* A page taken off a segment: where it was mapped and its physical handle. */
typedef struct loose_page {
  segment *seg;
  size_t index;
  void *handle;
  int fenced; /* freed before a completed fence: no queued work uses it */
  int stale;  /* its old mapping stays until the fence passes seq (PAGE_STALE) */
  uint64_t seq;
} loose_page;

/* An old mapping left in place by a move (PAGE_STALE in its slot). */
struct stale_page {
  segment *seg;
  size_t index;
  uint64_t seq; /* the free it waits for: unmapped once seg's shard's safe_seq reaches it */
};

typedef struct page_list {
  loose_page *v;
  size_t n, cap;
} page_list;

static int list_push(page_list *l, loose_page pg) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    loose_page *v = realloc(l->v, cap * sizeof *v);
    if (!v)
      return -1;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = pg;
  return 0;
}

static void reserved_add(gpupool *p, const segment *seg, int64_t bytes) {
  POOL_COUNT(p, stat_add(&p->c.reserved_bytes, seg->large, bytes));
}

gpupool_status pages_segment_create(gpupool *p, size_t size, int large, segment **out) {
  backend *be = p->be;
  size_t ps = be->page_size;
  gp_assert_internal(ps && !(ps & (ps - 1))); /* every backend's (page_of) */
  size = (size + ps - 1) / ps * ps;
  segment *seg = calloc(1, sizeof *seg);
  void ***pages = seg ? calloc((size / ps + PAGE_CHUNK - 1) / PAGE_CHUNK, sizeof *pages) : NULL;
  uint64_t *mapped = pages ? calloc((size / ps + 63) / 64, sizeof *mapped) : NULL;
  if (!mapped) {
    free(pages);
    free(seg);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "pool '%s': out of host memory", p->cfg.name);
  }
  void *base = NULL;
  gpupool_status st = be->ops->vmm->reserve(be, size, &base);
  if (st != GPUPOOL_OK) {
    free(mapped);
    free(pages);
    free(seg);
    return st;
  }
  seg->addr = (uintptr_t)base;
  seg->size = size;
  seg->large = large;
  seg->pages = pages;
  seg->mapped = mapped;
  seg->page_size = ps;
  seg->page_shift = (unsigned)__builtin_ctzll(ps);
  seg->npages = size / ps;
  segment_observers_note(p, seg->addr, size, 1); /* the mappings lie inside this range */
  *out = seg;
  return GPUPOOL_OK;
}

/* How unmap_list treats the pages it unmaps. */
enum { PAGES_KEEP, PAGES_RELEASE, PAGES_RELEASE_DETACHED };

/* Tells w's listener (if any; w may be NULL) of a run of pages mapped or
 * unmapped. */
static void pages_tell(const pages_work *w, int mapped, uintptr_t addr, size_t bytes, uint64_t ns) {
  if (w && w->pages_changed)
    w->pages_changed(w->ctx, mapped, addr, bytes, ns);
}

/* Unmaps the pages of l (grouping neighbours of one segment into one call)
 * and, unless mode is PAGES_KEEP, returns them to the device; the reserved
 * bytes drop with them, except for a segment already out of its shard
 * (shard_remove_segment counted its pages off). */
static void unmap_list(gpupool *p, page_list *l, int mode, pages_work *w) {
  int release = mode != PAGES_KEEP;
  backend *be = p->be;
  uint64_t t0 = clock_monotonic_ns();
  /* Work queued before the frees may still use these pages: unlike
   * cudaFree, unmapping does not wait for it. */
  int unfenced = 0;
  for (size_t i = 0; i < l->n && !unfenced; i++)
    unfenced = !l->v[i].fenced;
  if (unfenced) {
    be->ops->synchronize(be);
    POOL_COUNT(p, p->c.device_syncs++);
  }
  for (size_t i = 0, j; i < l->n; i = j) {
    for (j = i + 1;
         j < l->n && l->v[j].seg == l->v[i].seg && l->v[j].index == l->v[j - 1].index + 1; j++)
      ;
    segment *seg = l->v[i].seg;
    uintptr_t at = seg->addr + l->v[i].index * seg->page_size;
    uint64_t t_run = clock_monotonic_ns();
    be->ops->vmm->unmap(be, (void *)at, j - i);
    if (w) {
      w->unmapped += j - i;
      pages_tell(w, 0, at, (j - i) * seg->page_size, clock_monotonic_ns() - t_run);
    }
  }
  if (release && l->n) {
    void **h = malloc(l->n * sizeof *h);
    for (size_t i = 0; i < l->n; i++) {
      if (mode == PAGES_RELEASE)
        reserved_add(p, l->v[i].seg, -(int64_t)l->v[i].seg->page_size);
      if (h)
        h[i] = l->v[i].handle;
      else /* without host memory: one call per page */
        be->ops->vmm->release(be, &l->v[i].handle, 1);
    }
    if (h)
      be->ops->vmm->release(be, h, l->n);
    free(h);
    POOL_COUNT(p, p->c.device_frees += l->n);
    if (w)
      w->released += l->n * be->page_size;
  }
  uint64_t dur = clock_monotonic_ns() - t0;
  if (release) {
    POOL_COUNT(p, p->c.timing.free_count++; p->c.timing.free_ns_total += dur);
  }
}

static void advance_fence(gpupool *p, shard *sh);

static int address_order(const void *a, const void *b) {
  const loose_page *x = a, *y = b;
  uintptr_t xa = x->seg->addr + x->index * x->seg->page_size;
  uintptr_t ya = y->seg->addr + y->index * y->seg->page_size;
  return xa < ya ? -1 : xa > ya;
}

/* Unmaps the old mappings left by moves (of seg's pages [first, last] only
 * when seg is not NULL), after a device synchronize if a stream has not
 * passed one yet. With fences, the streams' fences are advanced first, so
 * that those their stream passed need none; without, no fence is touched:
 * pool destruction flushes each segment's old mappings while other shards
 * (and their fences) are already gone. Returns how many it unmapped. */
static size_t stale_flush(gpupool *p, segment *seg, size_t first, size_t last, int fences) {
  if (!p->nstale)
    return 0;
  if (fences)
    for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard)
      advance_fence(p, sh);
  page_list l = {0};
  for (size_t i = 0; i < p->nstale;) {
    struct stale_page e = p->stale[i];
    if (seg && (e.seg != seg || e.index < first || e.index > last)) {
      i++;
      continue;
    }
    int passed = e.seq <= e.seg->sh->safe_seq;
    if (list_push(&l, (loose_page){e.seg, e.index, NULL, passed, 0, 0}) != 0) {
      i++;
      continue;
    }
    p->stale[i] = p->stale[--p->nstale];
  }
  /* in address order: neighbours become one run (one call, one trace event) */
  if (l.n > 1)
    qsort(l.v, l.n, sizeof *l.v, address_order);
  unmap_list(p, &l, PAGES_KEEP, NULL);
  for (size_t i = 0; i < l.n; i++) {
    shard *sh = l.v[i].seg->sh;
    spin_lock(&sh->lock);
    page_handle_set(l.v[i].seg, l.v[i].index, NULL);
    spin_unlock(&sh->lock);
  }
  size_t unmapped = l.n;
  free(l.v);
  if (!p->nstale) {
    free(p->stale);
    p->stale = NULL;
    p->cap_stale = 0;
  }
  return unmapped;
}

static int stale_push(gpupool *p, const loose_page *pg) {
  if (p->nstale == p->cap_stale) {
    size_t cap = p->cap_stale ? 2 * p->cap_stale : 64;
    struct stale_page *v = realloc(p->stale, cap * sizeof *v);
    if (!v)
      return -1;
    p->stale = v;
    p->cap_stale = cap;
  }
  p->stale[p->nstale++] = (struct stale_page){pg->seg, pg->index, pg->seq};
  return 0;
}

size_t pages_segment_release(gpupool *p, segment *seg, pages_work *w) {
  page_list l = {0};
  size_t bytes = 0;
  stale_flush(p, seg, 0, SIZE_MAX, 0);
  for (size_t i = 0; i < seg->top; i++) {
    void *h = page_handle(seg, i);
    if (!h)
      continue;
    bytes += seg->page_size;
    if (list_push(&l, (loose_page){seg, i, h, 0, 0, 0}) != 0) {
      uint64_t t0 = clock_monotonic_ns();
      p->be->ops->vmm->unmap(p->be, (void *)(seg->addr + i * seg->page_size), 1);
      pages_tell(w, 0, seg->addr + i * seg->page_size, seg->page_size, clock_monotonic_ns() - t0);
      p->be->ops->vmm->release(p->be, &h, 1);
      POOL_COUNT(p, p->c.device_frees++);
    }
    page_handle_set(seg, i, NULL);
  }
  /* no page at or above top was ever mapped: a range as large as a 1 PiB
   * device has 64 MiB of bits, nearly all of them never touched */
  memset(seg->mapped, 0, (seg->top + 63) / 64 * sizeof *seg->mapped);
  seg->nmapped = 0;
  seg->top = 0; /* nothing mapped now: a second release (pages_segment_destroy's) walks nothing */
  unmap_list(p, &l, PAGES_RELEASE_DETACHED, w);
  free(l.v);
  return bytes;
}

size_t pages_segment_destroy(gpupool *p, segment *seg) {
  size_t bytes = pages_segment_release(p, seg, NULL);
  segment_observers_note(p, seg->addr, seg->size, 0);
  p->be->ops->vmm->unreserve(p->be, (void *)seg->addr, seg->size);
  free(seg->mapped);
  for (size_t c = 0; c < seg->chunks_top; c++)
    free(seg->pages[c]);
  free(seg->pages);
  free(seg);
  return bytes;
}

size_t pages_mapped_stretches(const segment *seg, uintptr_t addr, size_t len, size_t *longest) {
  size_t ps = seg->page_size, first = page_of(seg, addr), last = page_of(seg, addr + len - 1);
  size_t sum = 0;
  *longest = 0;
  if (!seg->top) /* no page was ever mapped */
    return 0;
  if (last >= seg->top)
    last = seg->top - 1;
  for (size_t i = pages_find(seg, first, last, 1), j; i <= last; i = pages_find(seg, j, last, 1)) {
    j = pages_find(seg, i, last, 0); /* the run of mapped pages [i, j) */
    uintptr_t lo = seg->addr + i * ps, hi = seg->addr + j * ps;
    lo = lo > addr ? lo : addr;
    hi = hi < addr + len ? hi : addr + len;
    sum += hi - lo;
    *longest = hi - lo > *longest ? hi - lo : *longest;
  }
  return sum;
}

size_t pages_longest_mapped(const segment *seg, uintptr_t addr, size_t len) {
  size_t longest;
  pages_mapped_stretches(seg, addr, len, &longest);
  return longest;
}

/* The pages of seg wholly under free block b that may be mapped (below
 * seg->top): [*first, *last]; 0 if none. */
static int interior_pages(const segment *seg, const block *b, size_t *first, size_t *last) {
  size_t ps = seg->page_size;
  uintptr_t lo = (b->addr - seg->addr + ps - 1) / ps, hi = (b->addr + b->size - seg->addr) / ps;
  if (hi > seg->top)
    hi = seg->top;
  if (hi <= lo)
    return 0;
  *first = lo;
  *last = hi - 1;
  return 1;
}

/* Where the pages take_idle_under takes go. */
enum {
  TAKE_RELEASE,      /* back to the device: unmapped now */
  TAKE_OTHER_STREAM, /* to a block of another stream */
  TAKE_SAME_STREAM,  /* to a block of the same stream, whose work runs after the old work */
};

/* Takes the idle mapped pages under b, if b is still a free block of seg, in
 * [first, last] (at most max of them, none in [keep_first, keep_last]) off
 * the segment into l. A page moving to another block keeps its old mapping
 * for now (PAGE_STALE) where that is safe: no queued work uses it any more
 * (fenced), or the new block's work runs after the work that may (dest
 * TAKE_SAME_STREAM). The old mapping is unmapped only when a block is placed
 * over it or idle pages are released (pages_back, stale_flush): most moves
 * then cost the allocating thread a map and no unmap. Under seg's shard
 * lock. Returns how many were taken. */
static size_t take_idle_under(segment *seg, block *b, size_t first, size_t last, size_t keep_first,
                              size_t keep_last, size_t max, int dest, page_list *l) {
  size_t lo, hi, taken = 0;
  if (b->state != BLOCK_FREE || b->seg != seg || !interior_pages(seg, b, &lo, &hi))
    return 0;
  int fenced = b->free_seq <= seg->sh->safe_seq;
  int stale = dest == TAKE_SAME_STREAM || (dest == TAKE_OTHER_STREAM && fenced);
  lo = lo > first ? lo : first;
  hi = hi < last ? hi : last;
  for (size_t i = lo; i <= hi && taken < max; i++) {
    if (!page_mapped(seg, i) || (i >= keep_first && i <= keep_last))
      continue;
    if (list_push(l, (loose_page){seg, i, page_handle(seg, i), fenced, stale, b->free_seq}) != 0)
      return taken;
    page_handle_set(seg, i, stale ? PAGE_STALE : NULL);
    page_set_mapped(seg, i, 0);
    seg->nmapped--;
    taken++;
  }
  if (taken) /* the pages were wholly under b: no other block's stretch changed */
    b->mapped_run = mapped_run_exact(b);
  return taken;
}

/* Every idle mapped page of seg into l; under seg's shard lock. */
static void take_all_idle(segment *seg, page_list *l) {
  for (block *b = seg->first; b; b = b->next)
    take_idle_under(seg, b, 0, SIZE_MAX, 1, 0, SIZE_MAX, TAKE_RELEASE, l);
}

/* An idle stretch found while looking for pages to move: the pages
 * [first, last] of free block b. */
typedef struct candidate {
  uint64_t free_seq;
  int fenced;
  int other_kind; /* in a segment of the other size kind than the pages' target */
  segment *seg;
  block *b;
  size_t first, last;
} candidate;

/* Pages of the target's size kind first (moving a small segment's page to a
 * large block, or back, only where the kind has none idle: the small blocks
 * of the next step would take it back), then those no queued work uses
 * (they move without a synchronize), then the oldest free. */
static int move_order(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  if (x->other_kind != y->other_kind)
    return x->other_kind - y->other_kind;
  if (x->fenced != y->fenced)
    return y->fenced - x->fenced;
  return x->free_seq < y->free_seq ? -1 : x->free_seq > y->free_seq;
}

/* Moves sh's fence forward: when its event completed, what was freed
 * before it is safe to unmap; a new one is recorded if blocks were freed
 * since. The fence fields change under the slow lock only; the shard lock
 * is taken just to read the free count, so that no event call happens
 * under it. */
static void advance_fence(gpupool *p, shard *sh) {
  backend *be = p->be;
  if (sh->fence) {
    if (be->ops->event_query(be, sh->fence) == 0)
      return;
    be->ops->event_destroy(be, sh->fence);
    sh->fence = NULL;
    spin_lock(&sh->lock); /* take_idle_under reads safe_seq under it */
    sh->safe_seq = sh->fence_seq;
    spin_unlock(&sh->lock);
  }
  spin_lock(&sh->lock);
  uint64_t freed = sh->free_seq;
  spin_unlock(&sh->lock);
  /* Recorded after those frees: once complete, they are safe. */
  if (freed != sh->safe_seq && be->ops->event_record(be, sh->stream, &sh->fence) == 0)
    sh->fence_seq = freed;
  else
    sh->fence = NULL;
}

/* Free blocks with idle mapped pages, in every shard, for pages going to
 * target; no shard lock held. */
static candidate *find_candidates(gpupool *p, const segment *target, size_t *n) {
  size_t cap = 64;
  candidate *c = malloc(cap * sizeof *c);
  *n = 0;
  for (shard *sh = atomic_load(&p->shards); sh && c; sh = sh->next_shard) {
    advance_fence(p, sh);
    spin_lock(&sh->lock);
    for (segment *seg = sh->segments; seg && c; seg = seg->next) {
      if (!seg->pages || !seg->nmapped)
        continue;
      /* In a segment of one page (a small one), only a block that is all of
       * it can hold the page idle: with several blocks, none need a look. */
      if (seg->npages == 1 && seg->nblocks > 1)
        continue;
      for (block *b = seg->first; b; b = b->next) {
        size_t lo, hi;
        if (b->state != BLOCK_FREE || !interior_pages(seg, b, &lo, &hi) ||
            pages_find(seg, lo, hi, 1) > hi)
          continue;
        if (*n == cap) {
          candidate *g = realloc(c, (cap *= 2) * sizeof *c);
          if (!g)
            break;
          c = g;
        }
        c[(*n)++] = (candidate){
            b->free_seq, b->free_seq <= sh->safe_seq, seg->large != target->large, seg, b, lo, hi};
      }
    }
    spin_unlock(&sh->lock);
  }
  return c;
}

/* Moves up to `want` idle pages off their segments (move_order)
 * into l, sparing target's pages [keep_first, keep_last].
 * The candidates are checked again under each shard's lock: blocks may have
 * been taken since (block structs and segments go away only under the slow
 * lock, so the pointers stay valid). */
static void gather_idle(gpupool *p, segment *target, size_t keep_first, size_t keep_last,
                        size_t want, page_list *l) {
  size_t n;
  candidate *c = find_candidates(p, target, &n);
  if (!c)
    return;
  qsort(c, n, sizeof *c, move_order);
  for (size_t i = 0; i < n && l->n < want; i++) {
    shard *sh = c[i].seg->sh;
    size_t kf = c[i].seg == target ? keep_first : 1, kl = c[i].seg == target ? keep_last : 0;
    spin_lock(&sh->lock);
    take_idle_under(c[i].seg, c[i].b, c[i].first, c[i].last, kf, kl, want - l->n,
                    sh == target->sh ? TAKE_SAME_STREAM : TAKE_OTHER_STREAM, l);
    spin_unlock(&sh->lock);
  }
  free(c);
}

/* The free blocks other than claimed block b that share its first page or
 * its last (pages first and last of b's segment): pages mapped there add to
 * their stretch over mapped pages (block.mapped_run). A page that was not
 * mapped has no allocated block on it, so walking out over other blocks
 * stops within a page. Under the shard lock. */
static void neighbours_gained(block *b, size_t first, size_t last) {
  segment *seg = b->seg;
  uintptr_t lo = seg->addr + first * seg->page_size, hi = seg->addr + (last + 1) * seg->page_size;
  for (block *n = b->prev; n && n->addr + n->size > lo; n = n->prev)
    if (n->state == BLOCK_FREE)
      n->mapped_run = mapped_run_exact(n);
  for (block *n = b->next; n && n->addr < hi; n = n->next)
    if (n->state == BLOCK_FREE)
      n->mapped_run = mapped_run_exact(n);
}

/* Makes the chunks of seg's handle table that hold pages [first, last],
 * where not made yet; -1 without host memory (those made stay: the next
 * call uses them). Under the slow lock; each chunk is published under the
 * shard lock, as the handles are. */
static int make_chunks(segment *seg, size_t first, size_t last) {
  for (size_t c = first >> PAGE_CHUNK_SHIFT; c <= last >> PAGE_CHUNK_SHIFT; c++) {
    if (seg->pages[c])
      continue;
    void **chunk = calloc(PAGE_CHUNK, sizeof *chunk);
    if (!chunk)
      return -1;
    spin_lock(&seg->sh->lock);
    seg->pages[c] = chunk;
    if (c >= seg->chunks_top)
      seg->chunks_top = c + 1;
    spin_unlock(&seg->sh->lock);
  }
  return 0;
}

/* Maps handles h (one per missing page of claimed block b's segment in
 * [first, last], in order); on failure maps none of the rest and returns how
 * many were used. The device maps with no lock held; the pages are recorded
 * under the shard lock (the hot path reads them there). */
static size_t map_missing(gpupool *p, block *b, size_t first, size_t last, void **h,
                          gpupool_status *st, pages_work *w) {
  backend *be = p->be;
  segment *seg = b->seg;
  size_t used = 0;
  *st = GPUPOOL_OK;
  for (size_t i = first, j; i <= last; i = j) {
    if (page_mapped(seg, i)) {
      j = i + 1;
      continue;
    }
    for (j = i + 1; j <= last && !page_mapped(seg, j); j++)
      ;
    uint64_t t_run = clock_monotonic_ns();
    *st = be->ops->vmm->map(be, (void *)(seg->addr + i * seg->page_size), h + used, j - i);
    if (*st != GPUPOOL_OK)
      return used;
    uint64_t ns = clock_monotonic_ns() - t_run;
    spin_lock(&seg->sh->lock);
    for (size_t k = i; k < j; k++) {
      page_handle_set(seg, k, h[used++]);
      page_set_mapped(seg, k, 1);
      seg->nmapped++;
    }
    if (j > seg->top)
      seg->top = j;
    if (i == first || j - 1 == last) /* pages b may share with other blocks */
      neighbours_gained(b, first, last);
    spin_unlock(&seg->sh->lock);
    pages_tell(w, 1, seg->addr + i * seg->page_size, (j - i) * seg->page_size, ns);
  }
  return used;
}

/* Unmaps up to `want` idle pages (gather_idle) and puts their handles in h;
 * returns how many. */
static size_t move_idle(gpupool *p, segment *seg, size_t first, size_t last, size_t want, void **h,
                        pages_work *w) {
  page_list moved = {0}, now = {0};
  gather_idle(p, seg, first, last, want, &moved);
  size_t other_kind = 0;
  for (size_t i = 0; i < moved.n; i++)
    other_kind += moved.v[i].seg->large != seg->large;
  if (other_kind) /* reserved by the target's size kind from now on */
    POOL_COUNT(
        p, stat_transfer(&p->c.reserved_bytes, seg->large, (int64_t)(other_kind * seg->page_size)));
  for (size_t i = 0; i < moved.n; i++) {
    loose_page *pg = &moved.v[i];
    h[i] = pg->handle;
    if (pg->stale && stale_push(p, pg) == 0) {
      /* its old mapping goes once the stream passed it: no synchronize; the
       * trace shows the page leaving now */
      pages_tell(w, 0, pg->seg->addr + pg->index * pg->seg->page_size, pg->seg->page_size, 0);
      continue;
    }
    if (pg->stale) { /* without host memory to remember it: unmapped now */
      spin_lock(&pg->seg->sh->lock);
      page_handle_set(pg->seg, pg->index, NULL);
      spin_unlock(&pg->seg->sh->lock);
    }
    if (list_push(&now, *pg) != 0) { /* one at a time */
      page_list one = {pg, 1, 1};
      unmap_list(p, &one, PAGES_KEEP, w);
    }
  }
  unmap_list(p, &now, PAGES_KEEP, w);
  free(now.v);
  free(moved.v);
  return moved.n;
}

/* How many of `missing` new pages may be created rather than moved: while
 * what the pool holds stays within (1 + slack) times the most it has had
 * allocated (each shard's allocated-bytes peak, summed, or what is allocated
 * now plus this block), idle pages stay where they are, ready for the blocks
 * that freed them; moving them costs an unmap and a map each. Every
 * expandable_growth_moves pages moved add one page to that room: a workload
 * whose shapes keep moving pages buys the few pages that stop it, one that
 * settles keeps the slack. Under the slow lock, no shard lock held. */
static size_t pages_to_create(gpupool *p, const segment *seg, size_t len, size_t missing) {
  double slack = p->cfg.expandable_slack;
  if (slack <= 0)
    return 0;
  int64_t peak, now = stats_allocated_bytes(p, NULL, &peak) + (int64_t)len;
  unsigned every = p->cfg.expandable_growth_moves;
  double grown = every ? (double)(p->moves_for_growth / every) * (double)seg->page_size : 0;
  double allowed = (1 + slack) * (double)(peak > now ? peak : now) + grown;
  double room = allowed - (double)stat_total(&p->c.reserved_bytes);
  size_t pages = room > 0 ? (size_t)(room / (double)seg->page_size) : 0;
  return pages < missing ? pages : missing;
}

/* n new pages into h, unless memory_fraction's cap (w->may_create) leaves
 * no room for them. */
static gpupool_status create_pages(gpupool *p, pages_work *w, void **h, size_t n) {
  if (n > w->may_create / p->be->page_size) {
    w->limit_refused = 1;
    return pool_fail(GPUPOOL_ERR_OOM,
                     "pool '%s': memory_fraction's limit leaves no room for %zu "
                     "new pages",
                     p->cfg.name, n);
  }
  return p->be->ops->vmm->create(p->be, h, n);
}

gpupool_status pages_back(gpupool *p, block *b, pages_work *w) {
  backend *be = p->be;
  segment *seg = b->seg;
  uintptr_t addr = b->addr;
  size_t ps = seg->page_size, len = b->size;
  size_t first = page_of(seg, addr), last = page_of(seg, addr + len - 1);
  size_t missing = 0, stale = 0, unmapped_before = w->unmapped;
  for (size_t i = first; i <= last; i++) {
    missing += !page_mapped(seg, i);
    stale += p->nstale && page_handle(seg, i) == PAGE_STALE; /* none without old mappings */
  }
  if (stale) { /* old mappings where this block goes: they must go first */
    size_t flushed = stale_flush(p, seg, first, last, 1);
    POOL_COUNT(p, p->c.alloc_unmaps += flushed);
  }
  if (!missing)
    return GPUPOOL_OK;
  void **h = malloc(missing * sizeof *h);
  if (!h || make_chunks(seg, first, last) != 0) {
    free(h);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "pool '%s': out of host memory", p->cfg.name);
  }

  size_t create = pages_to_create(p, seg, len, missing);
  if (create > w->may_create / ps) /* the cap leaves room for fewer: move more */
    create = w->may_create / ps;
  size_t have = create < missing ? move_idle(p, seg, first, last, missing - create, h, w) : 0;

  uint64_t t0 = clock_monotonic_ns();
  gpupool_status st = GPUPOOL_OK;
  if (have < missing) {
    st = create_pages(p, w, h + have, missing - have);
    if (st != GPUPOOL_OK && create) { /* no room for new pages after all: move instead */
      have += move_idle(p, seg, first, last, missing - have, h + have, w);
      st = have < missing ? create_pages(p, w, h + have, missing - have) : GPUPOOL_OK;
    }
    if (st == GPUPOOL_OK) {
      reserved_add(p, seg, (int64_t)((missing - have) * ps));
      w->created += (missing - have) * ps;
      POOL_COUNT(p, p->c.device_allocs += missing - have);
    }
  }
  size_t used = 0;
  if (st == GPUPOOL_OK)
    used = map_missing(p, b, first, last, h, &st, w);
  uint64_t dur = clock_monotonic_ns() - t0;
  POOL_COUNT(p, p->c.timing.alloc_count++; p->c.timing.alloc_ns_total += dur);
  w->moved += (used < have ? used : have) * ps;
  p->moves_for_growth += used < have ? used : have;
  POOL_COUNT(p, p->c.pages_moved += used < have ? used : have;
             p->c.alloc_unmaps += w->unmapped - unmapped_before);
  /* What was not mapped goes back to the device: moved pages included, which
   * is what an allocation that is about to fail needs. */
  size_t spare = (st == GPUPOOL_OK ? missing : have) - used;
  if (spare) {
    be->ops->vmm->release(be, h + used, spare);
    reserved_add(p, seg, -(int64_t)(spare * ps));
    POOL_COUNT(p, p->c.device_frees += spare);
    w->released += spare * ps;
  }
  free(h);
  return st;
}

void pages_release_idle(gpupool *p, pages_work *w) {
  stale_flush(p, NULL, 0, 0, 1);
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    page_list l = {0};
    spin_lock(&sh->lock);
    for (segment *seg = sh->segments; seg; seg = seg->next)
      if (seg->pages && seg->nmapped)
        take_all_idle(seg, &l);
    spin_unlock(&sh->lock);
    unmap_list(p, &l, PAGES_RELEASE, w);
    free(l.v);
  }
}
