#include "event_ring.h"

#include "core/clock.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

event_ring *event_ring_create(size_t capacity) {
  size_t slots = 16;
  while (slots < capacity && slots < ((size_t)1 << 40))
    slots <<= 1;
  event_ring *r = calloc(1, sizeof *r);
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
    free(r);
  }
}

size_t event_ring_read(event_ring *r, uint64_t *cursor, pool_event *out, size_t max,
                       uint64_t *skipped) {
  const uint64_t cap = r->mask; /* events kept: one slot fewer than the ring has */
  size_t got = 0;
  while (got < max) {
    uint64_t h1 = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t n = *cursor;
    if (n >= h1)
      break;
    if (h1 - n > cap) { /* overwritten before we got there */
      *skipped += h1 - cap - n;
      *cursor = n = h1 - cap;
    }
    uint64_t end = h1 - n < max - got ? h1 : n + (max - got);
    for (uint64_t m = n; m < end; m++) {
      const event_ring_slot *s = &r->slots[m & r->mask];
      uint64_t w[EVENT_RING_WORDS];
      for (size_t i = 0; i < EVENT_RING_WORDS; i++)
        w[i] = atomic_load_explicit(&s->word[i], EVENT_RING_WORD_LOAD);
      memcpy(&out[got + (m - n)], w, sizeof w);
    }
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
    for (uint64_t m = n; m < end; m++, got++)
      if (r->stamped)
        out[got].ts_ns = clock_stamp_to_ns(out[got].ts_ns);
    *cursor = end;
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
