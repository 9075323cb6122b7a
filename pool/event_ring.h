/* A bounded ring of allocation events. One ring per pool stream shard,
 * written only under that shard's lock (so a single writer at a time, no
 * atomic read-modify-write on the hot path) and read lock-free by the trace
 * writer: each slot carries a sequence number (seqlock), so a reader never
 * returns a torn event. When full, the oldest events are overwritten; the
 * number overwritten is head - capacity, never lost silently. Rings are
 * reference-counted so a trace being streamed can outlive its pool. */
#ifndef GPUPOOL_EVENT_RING_H
#define GPUPOOL_EVENT_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
  EV_ALLOC = 1,      /* addr, size (block), requested, stream; flags: EVF_FROM_DEVICE */
  EV_FREE,           /* addr, size, requested, stream; flags: EVF_DEFERRED if waiting on events */
  EV_FREE_COMPLETED, /* a deferred free whose events completed: addr, size */
  EV_SEGMENT_ALLOC,  /* addr, size, stream; a = reserved after, b = allocated after, dur_ns */
  EV_SEGMENT_FREE,   /* addr, size, stream; a = reserved after, b = allocated after, dur_ns */
  EV_EMPTY_CACHE,    /* size = bytes released; a = reserved after, b = allocated after */
  EV_GC,             /* size = bytes released by garbage collection; a, b as above */
  EV_OOM,            /* size = segment size tried, requested; a = free bytes in pool,
                        b = largest free block; addr = reserved bytes (there is no
                        address), stream = device free bytes (0 if unknown) */
} event_type;

enum { EVF_FROM_DEVICE = 1, EVF_DEFERRED = 2, EVF_LARGE = 4 };

typedef struct pool_event {
  uint64_t ts_ns; /* CLOCK_REALTIME nanoseconds (see clock.h) */
  uint8_t type;   /* event_type */
  uint8_t flags;
  uint16_t reserved0;
  uint32_t dur_ns; /* device call duration for segment events (saturates) */
  uint64_t addr;
  uint64_t size;
  uint64_t requested;
  uint64_t stream;
  uint64_t a, b; /* meaning by type, above */
} pool_event;    /* 64 bytes: one cache line */

/* Slot protocol (seqlock): the writer of event number n stores seq = 2n+1,
 * the payload, then seq = 2n+2. A reader wanting event n accepts the payload
 * only if it read seq == 2n+2 both before and after copying it. The payload is
 * copied word by word with relaxed atomics so that concurrent reads and
 * writes are well-defined (and TSan-clean). */
#define EVENT_RING_WORDS (sizeof(pool_event) / sizeof(uint64_t))

typedef struct event_ring_slot {
  _Atomic uint64_t seq;
  _Atomic uint64_t word[EVENT_RING_WORDS];
} event_ring_slot;

typedef struct event_ring {
  _Atomic uint64_t head; /* events ever pushed */
  _Atomic int refs;
  int stamped; /* ts_ns holds clock_stamp() values */
  size_t mask;
  event_ring_slot *slots;
} event_ring;

event_ring *event_ring_create(size_t capacity); /* capacity rounded up to a power of two */
/* A ring whose events carry clock_stamp() values in ts_ns (cheaper to take
 * on the hot path); event_ring_read converts them to CLOCK_REALTIME ns. */
event_ring *event_ring_create_stamped(size_t capacity);
void event_ring_ref(event_ring *r);
void event_ring_unref(event_ring *r); /* frees at zero */

/* Writer side: the caller serialises pushes (the shard lock). Inline, so
 * that an event built by the caller goes straight into its slot. */
static inline void event_ring_push(event_ring *r, const pool_event *ev) {
  uint64_t n = atomic_load_explicit(&r->head, memory_order_relaxed);
  event_ring_slot *s = &r->slots[n & r->mask];
  uint64_t w[EVENT_RING_WORDS];
  memcpy(w, ev, sizeof w);
  atomic_store_explicit(&s->seq, 2 * n + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  for (size_t i = 0; i < EVENT_RING_WORDS; i++)
    atomic_store_explicit(&s->word[i], w[i], memory_order_relaxed);
  atomic_store_explicit(&s->seq, 2 * n + 2, memory_order_release);
  atomic_store_explicit(&r->head, n + 1, memory_order_release);
  /* The next push writes the next slot: fetch it now, off that push's path
   * (a ring larger than the cache would otherwise miss on every event). */
  __builtin_prefetch(&r->slots[(n + 1) & r->mask], 1);
}

/* Reader side, lock-free. *cursor is the sequence number of the next event
 * wanted (start at 0). Events already overwritten are skipped: *cursor jumps
 * forward and the number skipped is added to *skipped. Returns the number of
 * events copied into out (at most max). */
size_t event_ring_read(event_ring *r, uint64_t *cursor, pool_event *out, size_t max,
                       uint64_t *skipped);
uint64_t event_ring_head(const event_ring *r);    /* events ever pushed */
uint64_t event_ring_dropped(const event_ring *r); /* events overwritten */
size_t event_ring_capacity(const event_ring *r);

#endif
