/* pool_capture.h: a consistent, bounded copy of one pool. */
#include "pool_capture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "pages.h"
#include "pool_internal.h"
#include "segment.h"
#include "shard.h"
#include "sizeclass.h"

/* Events of one stream, up to (not past) the head seen under its lock. */
typedef struct ring_part {
  pool_event *ev;
  size_t n;
  int partial; /* the stream had older events than ev[0] */
} ring_part;

/* Where free block b of seg (longest: its longest stretch over mapped
 * pages, mapped: its bytes over them) lies for the request of lim: see
 * pool_capture_totals' usable_largest. */
static void add_request_totals(pool_capture_totals *t, const pool_config *cfg, const segment *seg,
                               const block *b, size_t longest, size_t mapped,
                               const pool_capture_limits *lim) {
  int large = size_is_large(lim->rounded);
  if ((uint64_t)(uintptr_t)seg->sh->stream != lim->stream) {
    t->other_stream_free += mapped;
    if (longest > t->other_stream_largest)
      t->other_stream_largest = longest;
  } else if (seg->large != large && !(seg->pages && seg->large && !large)) {
    /* (an expandable pool's small request may take mapped pages of its
     * stream's large range: shard_place_ready) */
    t->other_pool_free += mapped;
    if (longest > t->other_pool_largest)
      t->other_pool_largest = longest;
  } else if (longest >= lim->rounded && !shard_fit_allowed(cfg, b, lim->rounded)) {
    t->rules_free += mapped;
    if (longest > t->rules_largest)
      t->rules_largest = longest;
  } else if (longest > t->usable_largest) {
    t->usable_largest = longest;
  }
}

static void add_totals(pool_capture_totals *t, const pool_config *cfg, const segment *seg,
                       const pool_capture_limits *lim) {
  size_t mapped = segment_mapped_bytes(seg);
  t->segments++;
  t->blocks += seg->nblocks;
  t->reserved += mapped;
  if (!seg->large)
    t->small_reserved += mapped;
  int live = 0;
  for (const block *b = seg->first; b; b = b->next)
    live |= b->state != BLOCK_FREE;
  if (!live)
    t->cached_bytes += mapped;
  for (const block *b = seg->first; b; b = b->next) {
    if (b->state == BLOCK_FREE) {
      size_t longest, mapped = free_block_mapped(b, &longest);
      t->free_blocks++;
      t->free_bytes += mapped;
      if (longest > t->largest_free) {
        t->largest_free = longest;
        t->largest_free_addr = b->addr;
      }
      if (live) {
        t->split_free_bytes += mapped;
        if (lim->split_limit && seg->size >= lim->split_limit)
          t->split_free_at_least += mapped;
      }
      if (lim->request)
        add_request_totals(t, cfg, seg, b, longest, mapped, lim);
    } else if (seg->large) {
      t->large_live_bytes += b->size;
      if (t->page_size)
        t->large_live_pages += (b->size + t->page_size - 1) / t->page_size;
    }
  }
}

/* The runs of mapped pages of vmm segment seg into c->runs (s says where),
 * at most max_runs in all: 0; 1 when seg's would pass max_runs (none of
 * them is kept then); -1 out of host memory. Under seg's shard lock. */
static int copy_runs(pool_capture *c, const segment *seg, pool_capture_segment *s,
                     size_t max_runs) {
  s->first_run = c->nruns;
  s->nruns = 0;
  if (!seg->top)
    return 0;
  for (size_t i = pages_find(seg, 0, seg->top - 1, 1); i < seg->top;) {
    size_t end = pages_find(seg, i, seg->top - 1, 0); /* one past the run */
    if (c->nruns >= max_runs) {
      c->nruns = s->first_run;
      s->nruns = 0;
      return 1;
    }
    if (c->nruns == c->cap_runs) {
      size_t cap = c->cap_runs ? 2 * c->cap_runs : 64;
      if (cap > max_runs)
        cap = max_runs;
      pool_capture_run *r = realloc(c->runs, cap * sizeof *r);
      if (!r)
        return -1;
      c->runs = r;
      c->cap_runs = cap;
    }
    c->runs[c->nruns++] =
        (pool_capture_run){seg->addr + i * seg->page_size, (end - i) * seg->page_size};
    s->nruns++;
    i = pages_find(seg, end, seg->top - 1, 1); /* top past the last run */
  }
  return 0;
}

/* Copies sh's segments (while they fit in lim's counts, those of the
 * arrays) and its ring's head. */
static int copy_shard(const pool_config *cfg, shard *sh, pool_capture *c,
                      const pool_capture_limits *lim, ring_part *part) {
  size_t max_events = lim->max_events;
  event_ring *ring = NULL;
  event_ring_end end = {0};
  int no_memory = 0;
  spin_lock(&sh->lock);
  for (segment *seg = sh->segments; seg; seg = seg->next) {
    add_totals(&c->t, cfg, seg, lim);
    if (c->truncated || no_memory || c->nsegs >= lim->max_segments ||
        c->nblocks + seg->nblocks > lim->max_blocks) {
      c->truncated = 1;
      continue;
    }
    pool_capture_segment *s = &c->segs[c->nsegs];
    s->expandable = seg->pages != NULL;
    s->first_block = c->nblocks;
    segment_describe(seg, &s->info, &c->blocks[c->nblocks]); /* stamps: see stamps_to_ns */
    s->first_run = s->nruns = 0;
    int runs = seg->pages ? copy_runs(c, seg, s, lim->max_runs) : 0;
    if (runs < 0)
      no_memory = 1;
    if (runs != 0) {
      c->truncated |= runs > 0;
      continue;
    }
    c->nsegs++;
    c->nblocks += seg->nblocks;
  }
  if (sh->ring && max_events) {
    ring = sh->ring;
    event_ring_ref(ring);
    end = shard_events_end(sh);
  }
  spin_unlock(&sh->lock);
  if (no_memory) {
    if (ring)
      event_ring_unref(ring);
    return -1;
  }
  if (!ring)
    return 0;
  /* Read outside the lock: only events before the head seen under it
   * (those that match the blocks copied, a free marked later left out); the
   * writer may overwrite the oldest meanwhile. */
  uint64_t head = end.head, want = event_ring_capacity(ring);
  if (want > max_events)
    want = max_events;
  uint64_t cursor = head > want ? head - want : 0, lost = 0;
  part->partial = cursor > 0;
  part->ev = malloc((size_t)(head - cursor + 1) * sizeof *part->ev);
  size_t n = 0;
  uint64_t events = 0;
  if (part->ev) {
    n = event_ring_read_to(ring, &cursor, end, part->ev, (size_t)(head - cursor), &lost);
    /* At most max_events, and twice the ring's capacity: what its records
     * held before a record could repeat lifetimes. */
    uint64_t budget = 2 * (uint64_t)event_ring_capacity(ring), left;
    budget = budget < max_events ? budget : max_events;
    size_t kept = event_ring_keep_newest(part->ev, n, budget, &events, &left);
    part->partial |= kept < n;
    n = kept;
  }
  /* Room for the events that records with repeats or marked EVF_FREED stand
   * for, expanded in place. */
  pool_event *ev = events > n ? realloc(part->ev, (size_t)events * sizeof *ev) : part->ev;
  if (!ev) {
    free(part->ev);
    part->ev = NULL;
  } else {
    part->ev = ev;
    part->n = event_ring_expand(ev, n);
  }
  c->events_lost += lost;
  part->partial |= lost > 0;
  event_ring_unref(ring);
  return part->ev ? 0 : -1;
}

/* The streams' events in time order (a stable merge: each stream keeps its
 * own order) from the time on which every stream's are here
 * (events_since_ns), the newest max_events of them. A window starts after
 * the stamp of the newest event left out: events of one tick of the coarse
 * clock share a stamp, and a tick some of whose events are gone is left
 * out whole (its kept events could need the lost ones to replay). */
static int merge_events(pool_capture *c, ring_part *parts, size_t nparts, size_t max_events) {
  uint64_t since = 0;
  for (size_t i = 0; i < nparts; i++)
    if (parts[i].partial && parts[i].n && parts[i].ev[0].ts_ns + 1 > since)
      since = parts[i].ev[0].ts_ns + 1; /* older events of its tick may be gone */
  size_t *pos = calloc(nparts + 1, sizeof *pos);
  if (!pos)
    return -1;
  size_t total = 0;
  for (size_t i = 0; i < nparts; i++) {
    while (pos[i] < parts[i].n && parts[i].ev[pos[i]].ts_ns < since)
      pos[i]++;
    total += parts[i].n - pos[i];
  }
  size_t skip = total > max_events ? total - max_events : 0;
  c->events = malloc((total - skip + 1) * sizeof *c->events);
  if (!c->events) {
    free(pos);
    return -1;
  }
  for (size_t k = 0; k < total; k++) {
    size_t best = nparts;
    for (size_t i = 0; i < nparts; i++)
      if (pos[i] < parts[i].n &&
          (best == nparts ||
           pool_capture_goes_first(&parts[i].ev[pos[i]], &parts[best].ev[pos[best]])))
        best = i;
    pool_event e = parts[best].ev[pos[best]++];
    if (k >= skip)
      c->events[c->nevents++] = e;
    else if (k + 1 == skip)
      since = e.ts_ns + 1; /* the newest left out */
  }
  free(pos);
  size_t first = 0;
  while (first < c->nevents && c->events[first].ts_ns < since)
    first++;
  c->nevents -= first;
  memmove(c->events, c->events + first, c->nevents * sizeof *c->events);
  c->events_since_ns = since;
  return 0;
}

/* The blocks' allocation stamps as CLOCK_REALTIME ns, once no spinlock is
 * held (the conversion takes a mutex). */
static void stamps_to_ns(pool_capture *c) {
  for (size_t i = 0; i < c->nblocks; i++)
    if (c->blocks[i].alloc_ns)
      c->blocks[i].alloc_ns = clock_stamp_to_ns(c->blocks[i].alloc_ns);
}

void pool_capture_hold(gpupool *p) {
  pthread_mutex_lock(&p->slow_lock);
}

void pool_capture_let_go(gpupool *p) {
  pthread_mutex_unlock(&p->slow_lock);
}

/* Gives back what the arrays hold beyond their counts (a bounded copy's
 * arrays were allocated for its limits). */
static void trim(pool_capture *c) {
  pool_capture_segment *s = realloc(c->segs, (c->nsegs + 1) * sizeof *s);
  if (s)
    c->segs = s;
  pool_block_info *b = realloc(c->blocks, (c->nblocks + 1) * sizeof *b);
  if (b)
    c->blocks = b;
  if (c->nruns < c->cap_runs) {
    pool_capture_run *r = realloc(c->runs, (c->nruns + 1) * sizeof *r);
    if (r) {
      c->runs = r;
      c->cap_runs = c->nruns + 1;
    }
  }
}

static size_t at_most(size_t v, size_t limit) {
  return v < limit ? v : limit;
}

int pool_capture_take_limited(gpupool *p, int slow_locked, const pool_capture_limits *lim,
                              pool_capture *out) {
  memset(out, 0, sizeof *out);
  out->pool_id = p->id;
  snprintf(out->name, sizeof out->name, "%s", p->cfg.name);
  out->device = p->cfg.device;
  out->backend = gpupool_backend_name(p);
  out->strategy = gpupool_strategy_name(p);
  out->expandable = p->cfg.expandable;
  out->max_split_size = p->cfg.max_split_size == SIZE_MAX ? UINT64_MAX : p->cfg.max_split_size;
  out->t.page_size = p->be->page_size;
  if (!slow_locked)
    pthread_mutex_lock(&p->slow_lock);
  /* Segments change only under the slow lock: count them once for the arrays. */
  size_t nsegs = 0, nblocks = 0, nshards = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    nshards++;
    spin_lock(&sh->lock);
    for (segment *seg = sh->segments; seg; seg = seg->next) {
      nsegs++;
      nblocks += seg->nblocks;
    }
    spin_unlock(&sh->lock);
  }
  /* Blocks split and merge under shard locks only: allow for growth. The
   * arrays hold at most the limits. */
  pool_capture_limits room = *lim;
  room.max_segments = at_most(nsegs, lim->max_segments);
  room.max_blocks = at_most(nblocks + 2 * nsegs + 16, lim->max_blocks);
  out->segs = malloc((room.max_segments + 1) * sizeof *out->segs);
  out->blocks = malloc((room.max_blocks + 1) * sizeof *out->blocks);
  ring_part *parts = calloc(nshards + 1, sizeof *parts);
  int rc = out->segs && out->blocks && parts ? 0 : -1;
  size_t np = 0;
  for (shard *sh = atomic_load(&p->shards); sh && rc == 0 && np < nshards; sh = sh->next_shard)
    rc = copy_shard(&p->cfg, sh, out, &room, &parts[np++]);
  if (!slow_locked)
    pthread_mutex_unlock(&p->slow_lock);
  if (rc == 0) {
    stamps_to_ns(out);
    rc = merge_events(out, parts, np, lim->max_events);
  }
  for (size_t i = 0; parts && i < np; i++)
    free(parts[i].ev);
  free(parts);
  if (rc != 0) {
    pool_capture_free(out);
    return -1;
  }
  if (lim->max_segments != SIZE_MAX || lim->max_blocks != SIZE_MAX || lim->max_runs != SIZE_MAX)
    trim(out);
  return 0;
}

int pool_capture_take(gpupool *p, int slow_locked, size_t max_blocks, size_t max_events,
                      uint64_t split_limit, pool_capture *out) {
  pool_capture_limits lim = {.max_segments = SIZE_MAX,
                             .max_blocks = max_blocks,
                             .max_runs = SIZE_MAX,
                             .max_events = max_events,
                             .split_limit = split_limit};
  return pool_capture_take_limited(p, slow_locked, &lim, out);
}

void pool_capture_free(pool_capture *c) {
  free(c->segs);
  free(c->blocks);
  free(c->runs);
  free(c->events);
  c->segs = NULL;
  c->blocks = NULL;
  c->runs = NULL;
  c->events = NULL;
  c->nsegs = c->nblocks = c->nruns = c->cap_runs = c->nevents = 0;
}
