/* A bounded ring of allocation events. One ring per pool stream shard,
 * written only under that shard's lock (so a single writer at a time, no
 * atomic read-modify-write on the hot path) and read lock-free by the trace
 * writer: each slot carries a sequence number (seqlock), so a reader never
 * returns a torn event. When full, the oldest events are overwritten; the
 * number overwritten is head - capacity, never lost silently. Rings are
 * reference-counted so a trace being streamed can outlive its pool. */
#ifndef GPUPOOL_EVENT_RING_H
#define GPUPOOL_EVENT_RING_H

#include <stddef.h>
#include <stdint.h>

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

typedef struct event_ring event_ring;

event_ring *event_ring_create(size_t capacity); /* capacity rounded up to a power of two */
/* A ring whose events carry clock_stamp() values in ts_ns (cheaper to take
 * on the hot path); event_ring_read converts them to CLOCK_REALTIME ns. */
event_ring *event_ring_create_stamped(size_t capacity);
void event_ring_ref(event_ring *r);
void event_ring_unref(event_ring *r); /* frees at zero */

/* Writer side: the caller serialises pushes (the shard lock). */
void event_ring_push(event_ring *r, const pool_event *ev);

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
