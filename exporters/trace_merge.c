#include "trace_merge.h"

#include <stdlib.h>
#include <string.h>

#include "core/array_grow.h"

/* Batch buffers of all sources together stay under this many bytes. */
#define BUFFER_BUDGET (512 * 1024)
#define BATCH_MIN     8
#define BATCH_MAX     256
#define ITEM_BYTES    sizeof(pool_event) /* >= sizeof(counter_sample) */

typedef struct source {
  trace_src_kind kind;
  uint32_t tag;
  event_ring *ring;                 /* NULL for the counter ring */
  const counter_ring_ops *counters; /* the counter ring */
  uint64_t pos;                     /* forward: next position to read */
  uint64_t end;                     /* head when reading began */
  event_ring_end ring_end;          /* a ring's end then (the mark of its newest record) */
  int end_given;                    /* ring_end came with the ring (trace_merge_add_ring_to) */
  uint64_t oldest;                  /* oldest position still held when reading began */
  uint64_t back;                    /* backward: positions below this are not read yet */
  uint64_t first;                   /* position of buf item 0 (backward pass) */
  uint64_t last_ts;                 /* forward: time of the previous record (kept non-decreasing) */
  uint64_t cur_ts;                  /* forward: time of the current item */
  /* The limit's oldest record of this source, where it keeps only the newest
   * of its repeated lifetimes: the repeats to drop from it (0: none). */
  unsigned trim;
  size_t n, i; /* items in buf, index of the current one */
  unsigned char *buf;
} source;

struct trace_merge {
  source *src;
  size_t nsrc, capsrc, batch;
  size_t *heap, nheap;
  uint64_t since, until, limit, emitted, skipped;
  trace_accept_fn accept;
  void *ctx;
  int limited, has_pending;
  trace_record pending;
};

trace_merge *trace_merge_create(void) {
  return calloc(1, sizeof(trace_merge));
}

static int add_source(trace_merge *m, trace_src_kind kind, event_ring *r, uint32_t tag) {
  if (array_grow((void **)&m->src, &m->capsrc, m->nsrc + 1, sizeof *m->src, 16) != 0)
    return -1;
  source *s = &m->src[m->nsrc++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->ring = r;
  s->tag = tag;
  return 0;
}

int trace_merge_add_ring(trace_merge *m, event_ring *r, trace_src_kind kind, uint32_t tag) {
  if (add_source(m, kind, r, tag) != 0) {
    event_ring_unref(r);
    return -1;
  }
  return 0;
}

int trace_merge_add_ring_to(trace_merge *m, event_ring *r, event_ring_end end, trace_src_kind kind,
                            uint32_t tag) {
  if (trace_merge_add_ring(m, r, kind, tag) != 0)
    return -1;
  m->src[m->nsrc - 1].ring_end = end;
  m->src[m->nsrc - 1].end_given = 1;
  return 0;
}

int trace_merge_add_counters(trace_merge *m, const counter_ring_ops *ring) {
  if (add_source(m, TRACE_SRC_COUNTERS, NULL, 0) != 0)
    return -1;
  m->src[m->nsrc - 1].counters = ring;
  return 0;
}

static size_t src_read(source *s, uint64_t *cursor, size_t max, uint64_t *skipped) {
  if (s->kind == TRACE_SRC_COUNTERS)
    return s->counters->read(cursor, (counter_sample *)s->buf, max, skipped);
  /* The newest record of the window as it was when reading began, in both
   * passes: its free said later is after the window. */
  return event_ring_read_to(s->ring, cursor, s->ring_end, (pool_event *)s->buf, max, skipped);
}

static uint64_t item_ts(const source *s, size_t i) {
  if (s->kind == TRACE_SRC_COUNTERS)
    return ((const counter_sample *)s->buf)[i].ts_ns;
  return ((const pool_event *)s->buf)[i].ts_ns;
}

static void item_record(const source *s, size_t i, trace_record *r) {
  r->kind = s->kind;
  r->tag = s->tag;
  r->ring_stream = s->ring ? s->ring->stream : 0;
  if (s->kind == TRACE_SRC_COUNTERS) {
    r->u.cs = ((const counter_sample *)s->buf)[i];
    r->ts_ns = r->u.cs.ts_ns;
  } else {
    r->u.ev = ((const pool_event *)s->buf)[i];
    r->ts_ns = r->u.ev.ts_ns;
  }
}

/* The heap orders sources by their current item: (time, source index).
 * `newest_first` makes it a max-heap for the backward pass; the tie-break on
 * the index keeps both passes in exactly opposite orders. */
static int before(const trace_merge *m, size_t a, size_t b, int newest_first) {
  const source *sa = &m->src[a], *sb = &m->src[b];
  uint64_t ta = newest_first ? item_ts(sa, sa->n - 1) : sa->cur_ts;
  uint64_t tb = newest_first ? item_ts(sb, sb->n - 1) : sb->cur_ts;
  if (ta != tb)
    return newest_first ? ta > tb : ta < tb;
  return newest_first ? a > b : a < b;
}

static void sift_down(trace_merge *m, size_t i, int newest_first) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, best = i;
    if (l < m->nheap && before(m, m->heap[l], m->heap[best], newest_first))
      best = l;
    if (r < m->nheap && before(m, m->heap[r], m->heap[best], newest_first))
      best = r;
    if (best == i)
      return;
    size_t t = m->heap[i];
    m->heap[i] = m->heap[best];
    m->heap[best] = t;
    i = best;
  }
}

static void heap_build(trace_merge *m, int newest_first) {
  for (size_t i = m->nheap / 2; i-- > 0;)
    sift_down(m, i, newest_first);
}

static void heap_pop(trace_merge *m, int newest_first) {
  m->heap[0] = m->heap[--m->nheap];
  sift_down(m, 0, newest_first);
}

/* Backward pass: loads the batch just below s->back. Returns 0 when nothing
 * older is left (or it was overwritten). */
static int load_back(trace_merge *m, source *s) {
  if (s->back <= s->oldest)
    return 0;
  uint64_t first = s->back > m->batch ? s->back - m->batch : 0;
  if (first < s->oldest)
    first = s->oldest;
  uint64_t c = first, sk = 0;
  size_t want = (size_t)(s->back - first);
  size_t got = src_read(s, &c, want, &sk);
  if (sk == 0 && got == want) {
    s->first = first;
    s->n = got;
    s->back = first;
    return 1;
  }
  /* The ring is overwriting what we read: take the newest one alone. */
  c = s->back - 1;
  sk = 0;
  if (src_read(s, &c, 1, &sk) == 1 && sk == 0) {
    s->first = s->back - 1;
    s->n = 1;
    s->back--;
    return 1;
  }
  return 0;
}

/* Finds, for each source, the position of its oldest record among the
 * newest m->limit accepted ones; reading forward then starts there. */
static void find_limit_start(trace_merge *m) {
  m->nheap = 0;
  for (size_t k = 0; k < m->nsrc; k++) {
    source *s = &m->src[k];
    s->back = s->end;
    s->n = 0;
    if (load_back(m, s))
      m->heap[m->nheap++] = k;
    s->pos = s->end; /* nothing of this source unless a record counts */
  }
  heap_build(m, 1);
  uint64_t count = 0;
  trace_record r;
  while (m->nheap > 0 && count < m->limit) {
    source *s = &m->src[m->heap[0]];
    size_t i = s->n - 1;
    uint64_t ts = item_ts(s, i);
    if (ts < m->since) { /* this source has nothing newer left in the window */
      heap_pop(m, 1);
      continue;
    }
    if (ts <= m->until) {
      item_record(s, i, &r);
      if (!m->accept || m->accept(m->ctx, &r)) {
        uint64_t events = trace_record_events(&r);
        if (count + events > m->limit) {
          /* A record's last lifetime stays whole (an allocation and its
           * free); of its repeated ones, the newest that fit are kept. */
          uint64_t own = events - 2 * (uint64_t)(r.kind == TRACE_SRC_POOL ? r.u.ev.repeats : 0);
          if (own < events && count + own <= m->limit) {
            uint64_t keep = (m->limit - count - own) / 2;
            s->trim = (unsigned)(r.u.ev.repeats - keep);
            s->pos = s->first + i;
          }
          count = m->limit;
          break;
        }
        count += events;
        s->pos = s->first + i;
      }
    }
    s->n--;
    if (s->n == 0 && !load_back(m, s))
      heap_pop(m, 1);
    else
      sift_down(m, 0, 1);
  }
  m->limited = count == m->limit;
}

/* Forward pass: makes the source's next item current; 0 at its end. */
static int load_forward(trace_merge *m, source *s) {
  if (++s->i >= s->n) { /* the batch is used up: read the next one */
    s->n = s->i = 0;
    while (s->n == 0 && s->pos < s->end) {
      uint64_t want = s->end - s->pos, at = s->pos, skipped = m->skipped;
      s->n = src_read(s, &s->pos, want < m->batch ? (size_t)want : m->batch, &m->skipped);
      if (s->trim && s->n) { /* the first batch begins at the limit's record, unless it was lost */
        pool_event *first = (pool_event *)s->buf;
        if (m->skipped == skipped && at < s->pos && first->repeats >= s->trim)
          first->repeats = (uint16_t)(first->repeats - s->trim);
        s->trim = 0;
      }
    }
    if (s->n == 0)
      return 0;
  }
  /* Rings are written in time order; should their times ever step back, the
   * records stay in order by taking the time of the one before. */
  s->cur_ts = item_ts(s, s->i);
  if (s->cur_ts < s->last_ts)
    s->cur_ts = s->last_ts;
  return 1;
}

int trace_merge_begin(trace_merge *m, uint64_t since_ns, uint64_t until_ns, uint64_t limit,
                      trace_accept_fn accept, void *ctx) {
  m->since = since_ns;
  m->until = until_ns;
  m->limit = limit;
  m->accept = accept;
  m->ctx = ctx;
  size_t nsrc = m->nsrc ? m->nsrc : 1;
  m->batch = BUFFER_BUDGET / (nsrc * ITEM_BYTES);
  m->batch = m->batch < BATCH_MIN ? BATCH_MIN : m->batch > BATCH_MAX ? BATCH_MAX : m->batch;
  m->heap = malloc(nsrc * sizeof *m->heap);
  if (!m->heap)
    return -1;
  for (size_t k = 0; k < m->nsrc; k++) {
    source *s = &m->src[k];
    s->buf = malloc(m->batch * ITEM_BYTES);
    if (!s->buf)
      return -1;
    uint64_t cap;
    if (s->kind == TRACE_SRC_COUNTERS) {
      s->end = s->counters->head();
      cap = s->counters->capacity();
    } else {
      if (!s->end_given)
        s->ring_end = event_ring_end_now(s->ring);
      s->end = s->ring_end.head;
      cap = event_ring_capacity(s->ring);
    }
    s->oldest = s->end > cap ? s->end - cap : 0;
    s->pos = s->oldest;
  }
  if (limit > 0)
    find_limit_start(m);
  m->nheap = 0;
  for (size_t k = 0; k < m->nsrc; k++) {
    source *s = &m->src[k];
    s->n = 0;
    s->i = (size_t)-1; /* load_forward moves to the next item first */
    s->last_ts = 0;
    if (load_forward(m, s))
      m->heap[m->nheap++] = k;
  }
  heap_build(m, 0);
  return 0;
}

/* The next record in time order that passes the filters, into m->pending. */
static int fill_pending(trace_merge *m) {
  while (!m->has_pending && m->nheap > 0) {
    if (m->limit && m->emitted >= m->limit)
      return 0;
    size_t k = m->heap[0];
    source *s = &m->src[k];
    trace_record r;
    item_record(s, s->i, &r);
    r.ts_ns = s->cur_ts;
    s->last_ts = s->cur_ts;
    if (r.ts_ns > m->until) { /* everything after is later still */
      heap_pop(m, 0);
      continue;
    }
    if (load_forward(m, s))
      sift_down(m, 0, 0);
    else
      heap_pop(m, 0);
    if (r.ts_ns < m->since || (m->accept && !m->accept(m->ctx, &r)))
      continue;
    uint64_t events = trace_record_events(&r); /* counted as the backward pass did */
    if (m->limit && m->emitted + events > m->limit)
      return 0;
    m->pending = r;
    m->has_pending = 1;
    m->emitted += events;
  }
  return m->has_pending;
}

int trace_merge_peek_ts(trace_merge *m, uint64_t *ts_ns) {
  if (!fill_pending(m))
    return 0;
  *ts_ns = m->pending.ts_ns;
  return 1;
}

int trace_merge_next(trace_merge *m, trace_record *out) {
  if (!fill_pending(m))
    return 0;
  *out = m->pending;
  m->has_pending = 0;
  return 1;
}

uint64_t trace_merge_skipped(const trace_merge *m) {
  return m->skipped;
}

uint64_t trace_merge_dropped(const trace_merge *m, trace_src_kind kind) {
  uint64_t d = 0;
  for (size_t k = 0; k < m->nsrc; k++)
    if (m->src[k].kind == kind)
      d += m->src[k].ring ? event_ring_dropped(m->src[k].ring) : m->src[k].counters->dropped();
  return d;
}

int trace_merge_limited(const trace_merge *m) {
  return m->limited;
}

void trace_merge_destroy(trace_merge *m) {
  if (!m)
    return;
  for (size_t k = 0; k < m->nsrc; k++) {
    free(m->src[k].buf);
    event_ring_unref(m->src[k].ring);
  }
  free(m->src);
  free(m->heap);
  free(m);
}
