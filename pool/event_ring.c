#include "event_ring.h"

#include "clock.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

event_ring *event_ring_create(size_t capacity) {
  size_t cap = 16;
  while (cap < capacity && cap < ((size_t)1 << 40))
    cap <<= 1;
  event_ring *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->slots = calloc(cap, sizeof(event_ring_slot));
  if (!r->slots) {
    free(r);
    return NULL;
  }
  r->mask = cap - 1;
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
  size_t got = 0;
  uint64_t cap = r->mask + 1;
  while (got < max) {
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t n = *cursor;
    if (n >= head)
      break;
    if (head - n > cap) { /* overwritten before we got there */
      *skipped += head - cap - n;
      *cursor = n = head - cap;
    }
    event_ring_slot *s = &r->slots[n & r->mask];
    uint64_t before = atomic_load_explicit(&s->seq, memory_order_acquire);
    uint64_t w[EVENT_RING_WORDS];
    for (size_t i = 0; i < EVENT_RING_WORDS; i++)
      w[i] = atomic_load_explicit(&s->word[i], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    uint64_t after = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if (before != 2 * n + 2 || after != before) {
      /* Overwritten by a later event while we copied it: this one is lost. */
      *skipped += 1;
      *cursor = n + 1;
      continue;
    }
    memcpy(&out[got], w, sizeof w);
    if (r->stamped)
      out[got].ts_ns = clock_stamp_to_ns(out[got].ts_ns);
    got++;
    *cursor = n + 1;
  }
  return got;
}

uint64_t event_ring_head(const event_ring *r) {
  return atomic_load_explicit(&((event_ring *)r)->head, memory_order_acquire);
}

uint64_t event_ring_dropped(const event_ring *r) {
  uint64_t head = event_ring_head(r), cap = r->mask + 1;
  return head > cap ? head - cap : 0;
}

size_t event_ring_capacity(const event_ring *r) {
  return r->mask + 1;
}
