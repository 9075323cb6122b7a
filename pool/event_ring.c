#include "event_ring.h"

#include "core/assert.h"
#include "core/clock.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static size_t slots_for(size_t capacity) {
  size_t slots = 16;
  while (slots < capacity && slots < ((size_t)1 << 40))
    slots <<= 1;
  return slots;
}

/* A zeroed ring struct on cache lines of its own (see event_ring). */
static event_ring *ring_alloc(void) {
  event_ring *r = aligned_alloc(EVENT_RING_SLOT, sizeof *r);
  if (r)
    memset(r, 0, sizeof *r);
  return r;
}

event_ring *event_ring_create(size_t capacity) {
  size_t slots = slots_for(capacity);
  event_ring *r = ring_alloc();
  if (!r)
    return NULL;
  r->slots = aligned_alloc(EVENT_RING_SLOT, slots * sizeof(event_ring_slot));
  if (!r->slots) {
    free(r);
    return NULL;
  }
  memset(r->slots, 0, slots * sizeof(event_ring_slot));
  r->mask = slots - 1;
  atomic_init(&r->refs, 1);
  return r;
}

/* The records are touched now (no page fault on the hot path); the side
 * array is mapped untouched: its pages cost memory only as side events
 * (device calls, a few per second) fill it. */
event_ring *event_ring_create_pool(size_t capacity, uint64_t stream) {
  size_t slots = slots_for(capacity);
  event_ring *r = ring_alloc();
  if (!r)
    return NULL;
  r->recs = aligned_alloc(EVENT_RING_SLOT, slots * sizeof(event_ring_rec));
  void *side = mmap(NULL, slots * sizeof(event_ring_slot), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (!r->recs || side == MAP_FAILED) {
    free(r->recs);
    if (side != MAP_FAILED)
      munmap(side, slots * sizeof(event_ring_slot));
    free(r);
    return NULL;
  }
  memset(r->recs, 0, slots * sizeof(event_ring_rec));
  r->side = side;
  r->mask = slots - 1;
  r->stream = stream;
  atomic_init(&r->refs, 1);
  clock_stamp_init();
  r->stamped = 1;
  return r;
}

void event_ring_push_compact(event_ring *r, const pool_event *ev) {
  if ((ev->type == EV_ALLOC || ev->type == EV_FREE || ev->type == EV_FREE_COMPLETED) &&
      ev->stream == r->stream && ev->requested >> EVENT_REC_REQUESTED_BITS == 0 && !ev->dur_ns &&
      !ev->a && !ev->b && !ev->repeats) {
    event_ring_push_block(r, ev->ts_ns, EVENT_REC_TF(ev->type, ev->flags), ev->addr, ev->size,
                          ev->requested, NULL);
    return;
  }
  event_ring_flush_repeats(r);
  uint64_t n = atomic_load_explicit(&r->head, memory_order_relaxed), k = r->side_next++;
  event_ring_slot *e = &r->side[k & r->mask];
  event_ring_rec *s = &r->recs[n & r->mask];
  EVENT_RING_FENCE(memory_order_release); /* head = n (stored before) -> these words */
  atomic_store_explicit(&e->word[0], ev->ts_ns, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&e->word[1], event_ring_word1(ev), EVENT_RING_WORD_STORE);
  atomic_store_explicit(&e->word[2], ev->addr, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&e->word[3], ev->size, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&e->word[4], ev->requested, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&e->word[5], ev->stream, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&e->word[6], ev->a, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&e->word[7], ev->b, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[0], ev->ts_ns, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[1], k, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[2], 0, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[3], EVENT_REC_SIDE | EVENT_REC_TF(ev->type, ev->flags),
                        EVENT_RING_WORD_STORE);
  atomic_store_explicit(&r->head, n + 1, memory_order_release);
  r->last_block = NULL;
  r->repeats_left = r->repeats_room = 0; /* the newest record is this one */
}

event_ring *event_ring_create_stamped(size_t capacity) {
  event_ring *r = event_ring_create(capacity);
  if (r) {
    clock_stamp_init();
    r->stamped = 1;
  }
  return r;
}

void event_ring_ref(event_ring *r) {
  atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

void event_ring_unref(event_ring *r) {
  if (r && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
    free(r->slots);
    free(r->recs);
    if (r->side)
      munmap(r->side, (r->mask + 1) * sizeof(event_ring_slot));
    free(r);
  }
}

static void copy_slot(const event_ring_slot *s, pool_event *out) {
  uint64_t w[EVENT_RING_WORDS];
  for (size_t i = 0; i < EVENT_RING_WORDS; i++)
    w[i] = atomic_load_explicit(&s->word[i], EVENT_RING_WORD_LOAD);
  memcpy(out, w, sizeof w);
}

/* Whether record m of compact ring r is a block event with flag set in its
 * word 3 (a side event's flags are in its side entry). */
static int record_has_flag(const event_ring *r, uint64_t m, unsigned flag) {
  uint64_t w3 = atomic_load_explicit(&r->recs[m & r->mask].word[3], EVENT_RING_WORD_LOAD);
  return !(w3 & EVENT_REC_SIDE) && (w3 & EVENT_REC_TF(0, flag));
}

/* Record m of a compact ring as an event (its side entry, for the others),
 * EVF_PREV_FREED left in its flags for read_before to move. What is copied
 * may be torn: event_ring_read checks the head after. */
static void copy_record(const event_ring *r, uint64_t m, pool_event *out) {
  const event_ring_rec *s = &r->recs[m & r->mask];
  uint64_t w[4];
  for (size_t i = 0; i < 4; i++)
    w[i] = atomic_load_explicit(&s->word[i], EVENT_RING_WORD_LOAD);
  if (w[3] & EVENT_REC_SIDE) {
    copy_slot(&r->side[w[1] & r->mask], out);
    out->ts_ns = w[0];
    return;
  }
  *out = (pool_event){.ts_ns = w[0],
                      .type = (uint8_t)(w[3] >> EVENT_REC_TYPE_SHIFT),
                      .flags = (uint8_t)(w[3] >> EVENT_REC_FLAGS_SHIFT),
                      .addr = w[1],
                      .size = w[2],
                      .repeats = (uint16_t)(w[3] & EVENT_REC_REPEATS_MAX),
                      .requested = (w[3] & (EVENT_REC_SIDE - 1)) >> EVENT_REC_REQUESTED_SHIFT,
                      .stream = r->stream};
}

size_t event_ring_read(event_ring *r, uint64_t *cursor, pool_event *out, size_t max,
                       uint64_t *skipped) {
  return event_ring_read_before(r, cursor, UINT64_MAX, out, max, skipped);
}

/* The n events at ev, copied from compact records in order, followed in the
 * ring by one that says EVF_PREV_FREED where next_prev_freed: each record's
 * EVF_PREV_FREED becomes EVF_FREED on the allocation before it (the first's
 * names a record not copied, whose reader saw it then). */
static void move_prev_freed(pool_event *ev, size_t n, int next_prev_freed) {
  for (size_t i = 0; i < n; i++) {
    int prev_freed = i + 1 < n ? (ev[i + 1].flags & EVF_PREV_FREED) != 0 : next_prev_freed;
    ev[i].flags &= (uint8_t)~EVF_PREV_FREED;
    if (prev_freed && ev[i].type == EV_ALLOC)
      ev[i].flags |= EVF_FREED;
  }
}

size_t event_ring_read_before(event_ring *r, uint64_t *cursor, uint64_t before, pool_event *out,
                              size_t max, uint64_t *skipped) {
  const uint64_t cap = r->mask; /* events kept: one slot fewer than the ring has */
  size_t got = 0;
  while (got < max) {
    uint64_t h1 = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t n = *cursor;
    if (h1 > before) /* events from `before` on are not wanted, however far the cursor skipped */
      h1 = before;
    if (n >= h1)
      break;
    if (h1 - n > cap) { /* overwritten before we got there */
      *skipped += h1 - cap - n;
      *cursor = n = h1 - cap;
    }
    uint64_t end = h1 - n < max - got ? h1 : n + (max - got);
    for (uint64_t m = n; m < end; m++) {
      if (r->recs)
        copy_record(r, m, &out[got + (m - n)]);
      else
        copy_slot(&r->slots[m & r->mask], &out[got + (m - n)]);
    }
    /* The record after the last copied, where it is wanted: whether its
     * block's free is in no record of its own (newer than the copies, so
     * whole when they are) */
    int next_prev_freed = r->recs && end < h1 && record_has_flag(r, end, EVF_PREV_FREED);
    EVENT_RING_FENCE(memory_order_acquire);
    uint64_t h2 = atomic_load_explicit(&r->head, memory_order_relaxed);
    /* Event m was copied whole iff m + slots > h2, i.e. m >= h2 - cap. */
    uint64_t valid = h2 > cap ? h2 - cap : 0;
    if (valid > n) { /* the writer lapped us while we copied: those are lost */
      uint64_t lost = (valid < end ? valid : end) - n;
      *skipped += lost;
      if (lost < end - n)
        memmove(&out[got], &out[got + lost], (size_t)(end - n - lost) * sizeof *out);
      n += lost;
    }
    if (r->recs)
      move_prev_freed(&out[got], (size_t)(end - n), next_prev_freed);
    for (uint64_t m = n; m < end; m++, got++)
      if (r->stamped)
        out[got].ts_ns = clock_stamp_to_ns(out[got].ts_ns);
    *cursor = end;
  }
  return got;
}

size_t event_ring_expand(pool_event *ev, size_t n) {
  size_t m = n;
  for (size_t i = 0; i < n; i++)
    m += event_count(&ev[i]) - 1;
  /* From the back: item i moves to j >= i, past the items before it. */
  for (size_t i = n, j = m; i-- > 0;) {
    pool_event e = ev[i];
    size_t count = event_count(&e);
    j -= count;
    gp_assert_internal(j >= i);
    pool_event alloc = event_alloc_part(&e), freed = event_freed_part(&e);
    size_t k = j;
    for (unsigned r = 0; r < (e.type == EV_ALLOC ? e.repeats : 0u); r++) {
      ev[k++] = alloc;
      ev[k++] = freed;
    }
    ev[k++] = alloc;
    if (k < j + count)
      ev[k++] = freed;
    gp_assert_internal(k == j + count);
  }
  return m;
}

size_t event_ring_keep_newest(pool_event *ev, size_t n, uint64_t max_events, uint64_t *events,
                              uint64_t *left) {
  size_t first = n;
  *events = *left = 0;
  while (first > 0 && *events + event_count(&ev[first - 1]) <= max_events)
    *events += event_count(&ev[--first]);
  for (size_t i = 0; i < first; i++)
    *left += event_count(&ev[i]);
  memmove(ev, ev + first, (n - first) * sizeof *ev);
  return n - first;
}

event_ring_end event_ring_end_now(const event_ring *r) {
  event_ring_end end = {.head = event_ring_head(r)};
  if (r->recs && end.head) { /* the newest record's flag and repeats, from one load */
    uint64_t w3 =
        atomic_load_explicit(&r->recs[(end.head - 1) & r->mask].word[3], EVENT_RING_WORD_LOAD);
    if (!(w3 & EVENT_REC_SIDE)) {
      end.newest_freed = (w3 & EVENT_REC_TF(0, EVF_FREED)) != 0;
      end.newest_repeats = (unsigned)(w3 & EVENT_REC_REPEATS_MAX);
    }
  }
  return end;
}

size_t event_ring_read_to(event_ring *r, uint64_t *cursor, event_ring_end end, pool_event *out,
                          size_t max, uint64_t *skipped) {
  size_t got = event_ring_read_before(r, cursor, end.head, out, max, skipped);
  /* out[got - 1] is record end.head - 1 when the cursor reached it; only a
   * compact ring's records are marked or repeated */
  pool_event *newest = got && *cursor == end.head && r->recs ? &out[got - 1] : NULL;
  if (newest && newest->type == EV_ALLOC) {
    gp_assert_internal(newest->repeats >= end.newest_repeats); /* they only grow */
    newest->repeats = (uint16_t)end.newest_repeats;
    if (!end.newest_freed)
      newest->flags &= (uint8_t)~EVF_FREED;
  }
  return got;
}

uint64_t event_ring_head(const event_ring *r) {
  return atomic_load_explicit(&((event_ring *)r)->head, memory_order_acquire);
}

uint64_t event_ring_dropped(const event_ring *r) {
  uint64_t head = event_ring_head(r), cap = r->mask;
  return head > cap ? head - cap : 0;
}

size_t event_ring_capacity(const event_ring *r) {
  return r->mask;
}
