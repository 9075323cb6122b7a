/* A bounded ring of allocation events. One ring per pool stream shard,
 * written only under that shard's lock (so a single writer at a time, no
 * atomic read-modify-write on the hot path) and read lock-free by the trace
 * writer. Two layouts:
 *
 * - full: a slot is exactly one 64-byte event (pool_event), 64-byte aligned
 *   (one cache line). The CUPTI decoder and the counter samples use these.
 * - compact (a pool's rings, event_ring_create_pool): a slot is a 32-byte
 *   record, two to a cache line. An allocation, free or completed free is
 *   the whole record (timestamp, address, block size, requested bytes, type,
 *   flags; the stream is the ring's); any other event (device calls,
 *   empty_cache, GC, OOM: rare, off the hot path) is written whole into a
 *   side array of 64-byte events and its record says where. Half the bytes
 *   per event and half the stores, so an allocating thread takes a new cache
 *   line every second event instead of every event.
 *
 * Neither has a per-slot sequence number: the ring's head alone tells a
 * reader which of the events it copied are whole (protocol below), so a
 * reader never returns a torn event. When full, the oldest events are
 * overwritten; the number overwritten is head - capacity, never lost
 * silently. Readers get pool_event either way (event_ring_read). Rings are
 * reference-counted so a trace being streamed can outlive its pool. */
#ifndef GPUPOOL_EVENT_RING_H
#define GPUPOOL_EVENT_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/assert.h"

typedef enum {
  EV_ALLOC = 1,      /* addr, size (block), requested, stream; flags: EVF_FROM_DEVICE */
  EV_FREE,           /* addr, size, requested, stream; flags: EVF_DEFERRED if waiting on events */
  EV_FREE_COMPLETED, /* a deferred free whose events completed: addr, size */
  EV_SEGMENT_ALLOC,  /* addr, size, stream, seq; a = reserved after, b = allocated after, dur_ns */
  EV_SEGMENT_FREE,   /* addr, size, stream, seq; a = reserved after, b = allocated after, dur_ns */
  EV_EMPTY_CACHE,    /* size = bytes released; a = reserved after, b = allocated after */
  EV_GC,             /* size = bytes released by garbage collection; a, b as above */
  EV_OOM,            /* the fields of .oom (below) */
} event_type;

/* EVF_PAGES: a segment event that mapped or unmapped pages of an expandable
 * segment (size = the bytes of those pages). EVF_FREED: an EV_ALLOC that
 * stands for its block's EV_FREE as well, which came next in its ring with
 * the same timestamp (a free recorded in no record of its own: see "One
 * record per lifetime" below): readers take it as the two events,
 * event_alloc_part then event_freed_part. EVF_PREV_FREED lives in a
 * compact ring's records only, never in an event read out: the record
 * before this one is such an EV_ALLOC. */
enum {
  EVF_FROM_DEVICE = 1,
  EVF_DEFERRED = 2,
  EVF_LARGE = 4,
  EVF_PAGES = 8,
  EVF_PREV_FREED = 64,
  EVF_FREED = 128
};

typedef struct pool_event {
  uint64_t ts_ns; /* CLOCK_REALTIME nanoseconds (see clock.h) */
  uint8_t type;   /* event_type */
  uint8_t flags;
  /* An EV_ALLOC read from a pool's ring: the lifetimes before this one that
   * its record stands for too, each this allocation and then its free, all
   * at this time ("Repeated lifetimes" below); 0 in every other event. */
  uint16_t repeats;
  uint32_t dur_ns; /* device call duration for segment events (saturates) */
  union {
    struct { /* every type but EV_OOM */
      uint64_t addr;
      uint64_t size;
      union {
        uint64_t requested; /* block events */
        /* Segment events: a number across all pools, in the order their
         * stamps were taken (segment.c), which orders them within a tick. */
        uint64_t seq;
      };
      uint64_t stream;
      uint64_t a, b; /* meaning by type, above */
    };
    struct {                    /* EV_OOM: the pool's state when it gave up */
      uint64_t reserved_bytes;  /* (in addr's place: there is no address) */
      uint64_t segment_size;    /* the segment it tried to allocate */
      uint64_t requested_bytes; /* the request */
      uint64_t device_free;     /* device free bytes, 0 if unknown */
      uint64_t free_in_pool;    /* reserved - allocated */
      uint64_t largest_free;    /* the largest free block */
    } oom;
  };
} pool_event; /* 64 bytes: one cache line */

/* Protocol. Event number n lives in slot n mod S (S slots, a power of two).
 *
 * Writer (one at a time; the caller serialises): n = head (relaxed); a
 * release fence; the event's 8 words stored relaxed; head = n + 1 (release).
 *
 * Reader: h1 = head (acquire); copies the words of events [cursor, h1)
 * relaxed; an acquire fence; h2 = head again. The writer of event n + S, the
 * one that reuses n's slot, starts only after head = n + S was stored, and
 * its release fence orders that store before its slot stores: a reader that
 * copied any word of it therefore reads h2 >= n + S (fence to fence
 * synchronisation). So an event n whose n + S > h2 was copied whole; the
 * others are dropped (counted as skipped, like events overwritten before the
 * reader got to them). Words are loaded and stored with relaxed atomics, so
 * racing copies are well-defined (and TSan-clean).
 *
 * A consequence: with head = h the slot of event h - S may be being
 * rewritten right now (the writer of event h needs no further store to
 * start), so a ring of S slots keeps S - 1 readable events: its capacity is
 * S - 1 and event_ring_dropped() counts the events beyond that.
 *
 * Compact rings: the side array has S entries too, filled in order by the
 * k-th side event (k counted by the writer). A writer stores the side entry
 * after its release fence and before its record, and a reader copies the
 * entry a record names before its acquire fence, so the same argument
 * covers it: entry k is reused by side event k + S, which is at least S
 * events after the record naming k, so a reader that copied any word of the
 * reuse finds that record overwritten (h2 >= its number + S) and drops it.
 *
 * One record per lifetime. A plain free in its allocation's tick, while
 * that allocation is still the newest record, writes nothing: the pool
 * knows it happened from the block (shard.c, which keeps the block of the
 * newest record in last_block). The next record says so, EVF_PREV_FREED in
 * its own flags, stored with its other words; until one comes, the pool
 * says so where a reader asks under its lock (event_ring_mark_newest_freed:
 * EVF_FREED in word 3 of record head - 1, the one store after publication,
 * and only while that record is the newest). A reader copies that word
 * before or after the store, and either is whole: the allocation alone, or
 * with its free. Readers move EVF_PREV_FREED onto the record before as
 * EVF_FREED (event_ring_read peeks at the record after its last, where it
 * exists). A reader that stops at a head seen at some moment and must match
 * that moment reads the newest record's flag then too (event_ring_end_now),
 * drops a later one and looks at no record past the head
 * (event_ring_read_to).
 *
 * Repeated lifetimes. Where the pool allocates the block of the newest
 * record again, with the same timestamp, address and sizes, after a free that
 * wrote no record, it writes no record either: it counts one more repeat
 * of that record (event_ring_repeat_newest), up to EVENT_REC_REPEATS_MAX.
 * The record then stands for that many lifetimes (allocation, then free)
 * before its own allocation. A storm of malloc+free pairs on one block thus
 * writes one record per 128 pairs, and the ring keeps that many more
 * events. The count lives in the ring's header until the next push, or the
 * pool's settle where a reader asks under its lock, adds it to the record's
 * repeats (word 3, one store after publication, event_ring_flush_repeats).
 * A reader copies word 3 before or after such a store, either whole: fewer
 * lifetimes, which is what there were when the count was last flushed. A
 * reader that stops at a moment takes the newest record's repeats then
 * (event_ring_end_now, after the settle) and keeps those
 * (event_ring_read_to). */
_Static_assert(offsetof(pool_event, oom.reserved_bytes) == offsetof(pool_event, addr) &&
                   offsetof(pool_event, oom.largest_free) == offsetof(pool_event, b),
               "an OOM event's fields are the words of the others");
#define EVENT_RING_WORDS (sizeof(pool_event) / sizeof(uint64_t))

/* ThreadSanitizer does not model fences (GCC warns, -Wtsan, and TSan could
 * miss the ordering): built with it, every word is stored with release and
 * loaded with acquire instead, which orders the same things (a reader that
 * loads a word of the writer of event n + S synchronises with it, so its
 * later load of head sees n + S) in a form TSan follows. */
#if defined(__SANITIZE_THREAD__)
#define EVENT_RING_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EVENT_RING_TSAN 1
#endif
#endif
#ifdef EVENT_RING_TSAN
#define EVENT_RING_FENCE(order) ((void)0)
#define EVENT_RING_WORD_STORE   memory_order_release
#define EVENT_RING_WORD_LOAD    memory_order_acquire
#else
#define EVENT_RING_FENCE(order) atomic_thread_fence(order)
#define EVENT_RING_WORD_STORE   memory_order_relaxed
#define EVENT_RING_WORD_LOAD    memory_order_relaxed
#endif
#define EVENT_RING_SLOT 64 /* bytes: one cache line */
/* The push prefetches the slot this many cache lines ahead (written soon). */
#define EVENT_RING_PREFETCH 4

typedef struct event_ring_slot {
  _Alignas(EVENT_RING_SLOT) _Atomic uint64_t word[EVENT_RING_WORDS];
} event_ring_slot;

_Static_assert(sizeof(pool_event) == EVENT_RING_SLOT, "an event is one cache line");
_Static_assert(offsetof(pool_event, addr) == 2 * sizeof(uint64_t) &&
                   offsetof(pool_event, b) == 7 * sizeof(uint64_t),
               "event_ring_push stores the fields as words 0-7");
_Static_assert(sizeof(event_ring_slot) == EVENT_RING_SLOT, "a slot is exactly one event");

/* A compact record: ts, then addr and size for a block event (the side
 * entry's number k and 0 for any other), then an EV_ALLOC's repeats (7 bits)
 * with the requested bytes (40 bits), EVENT_REC_SIDE, the type and the flags
 * above them. A request of 2^40 bytes (1 TiB) or more, which no device can
 * serve today, goes whole into the side array. The repeats are the lowest
 * bits so that one subtraction tells a record that can take one more
 * (event_ring_repeat_newest). */
typedef struct event_ring_rec {
  _Alignas(32) _Atomic uint64_t word[4];
} event_ring_rec;
_Static_assert(sizeof(event_ring_rec) == 32, "two records to a cache line");
#define EVENT_REC_REPEATS_MAX     127u /* bits 0-6 */
#define EVENT_REC_REQUESTED_SHIFT 7
#define EVENT_REC_REQUESTED_BITS  40           /* bits 7-46 */
#define EVENT_REC_SIDE            (1ull << 47) /* the event is side entry word[1] */
#define EVENT_REC_TYPE_SHIFT      48
#define EVENT_REC_FLAGS_SHIFT     56
/* The requested bytes of a block event in its record's word 3. */
#define EVENT_REC_REQUESTED(requested) ((uint64_t)(requested) << EVENT_REC_REQUESTED_SHIFT)
/* The type and flags of a block event in its record's word 3. */
#define EVENT_REC_TF(type, flags)                                                                  \
  ((uint64_t)(type) << EVENT_REC_TYPE_SHIFT | (uint64_t)(flags) << EVENT_REC_FLAGS_SHIFT)

/* Cache-line aligned, on lines of its own (ring_alloc): the writer stores
 * head on every event, and the rings of two streams, created one after the
 * other in adjacent heap chunks, would otherwise share a line between the
 * two streams' threads. */
typedef struct event_ring {
  _Alignas(EVENT_RING_SLOT) _Atomic uint64_t head; /* events ever pushed */
  /* Writer only: the block whose allocation is record head - 1, as the
   * push that wrote it said (event_ring_push_block's `last`), else NULL.
   * Next to head, so that its store joins head's on the hot path. The pool
   * reads the block's state through it (shard.c); the ring never does. */
  const void *last_block;
  event_ring_rec *newest_block; /* writer only: the newest block record, where one was pushed */
  /* Writer only: what newest_block holds, and how many more repeats it
   * takes (0 where it takes none), so that a repeat is told on this line
   * alone, with no type and flags to compose (event_ring_repeat_newest). */
  uint64_t repeat_ts, repeat_addr, repeat_size, repeat_requested;
  unsigned repeats_left;
  /* Writer only: repeats_left when the newest record's word 3 last took the
   * repeats counted (event_ring_flush_repeats): repeats_room - repeats_left
   * are counted on this line and not yet in the record. */
  unsigned repeats_room;
  /* the second line: what pushing a record reads */
  _Alignas(EVENT_RING_SLOT) size_t mask; /* slots - 1 */
  event_ring_rec *recs;                  /* compact layout: the records */
  event_ring_slot *slots;                /* full layout; NULL in a compact ring */
  event_ring_slot *side; /* compact layout: the other events (mapped, touched as used) */
  uint64_t last_stamp;   /* writer only: the newest timestamp pushed (event_clock.h) */
  uint64_t side_next;    /* writer only: side events ever pushed */
  uint64_t stream;       /* compact layout: the stream of every block event */
  int stamped;           /* ts_ns holds clock_stamp() values */
  _Atomic int refs;
} event_ring;
_Static_assert(sizeof(event_ring) % EVENT_RING_SLOT == 0, "a ring shares no cache line");
_Static_assert(offsetof(event_ring, repeats_left) < EVENT_RING_SLOT,
               "a repeat reads the ring's first line alone");

/* capacity rounded up to a power of two (at least 16) slots, which keep one
 * event fewer (see above): event_ring_capacity() says how many. */
event_ring *event_ring_create(size_t capacity);
/* A ring whose events carry clock_stamp() values in ts_ns (cheaper to take
 * on the hot path); event_ring_read converts them to CLOCK_REALTIME ns. */
event_ring *event_ring_create_stamped(size_t capacity);
/* A pool stream's ring: compact layout, stamped, block events on stream. */
event_ring *event_ring_create_pool(size_t capacity, uint64_t stream);
void event_ring_ref(event_ring *r);
void event_ring_unref(event_ring *r); /* frees at zero */

/* Word 1 of an event as it lies in memory (type, flags, repeats, dur_ns). */
static inline uint64_t event_ring_word1(const pool_event *ev) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return (uint64_t)ev->type | (uint64_t)ev->flags << 8 | (uint64_t)ev->repeats << 16 |
         (uint64_t)ev->dur_ns << 32;
#else
  uint64_t w;
  memcpy(&w, (const char *)ev + sizeof ev->ts_ns, sizeof w);
  return w;
#endif
}

/* Writer side: the caller serialises pushes (the shard lock). */

/* Writer side: brings the newest record's word 3 up to date with the
 * repeats counted since (event_ring_repeat_newest counts them on the ring's
 * first line alone; one add and store here, after publication, as each
 * repeat's was). Every push calls it first, and so does the pool where a
 * reader asks under its lock (shard_settle_events); a reader sees the
 * repeats from then on. */
static inline void event_ring_flush_repeats(event_ring *r) {
  unsigned added = r->repeats_room - r->repeats_left;
  if (__builtin_expect(!added, 1))
    return;
  event_ring_rec *s = r->newest_block;
  uint64_t have = atomic_load_explicit(&s->word[3], memory_order_relaxed);
  gp_assert_internal((have & EVENT_REC_REPEATS_MAX) + added <= EVENT_REC_REPEATS_MAX);
  atomic_store_explicit(&s->word[3], have + added, EVENT_RING_WORD_STORE);
  r->repeats_room = r->repeats_left;
}

/* A block event (EV_ALLOC, EV_FREE, EV_FREE_COMPLETED) into a compact ring:
 * tf = EVENT_REC_TF(type, flags), requested < 2^EVENT_REC_REQUESTED_BITS
 * (event_ring_push checks; a block that size cannot exist); last becomes
 * r->last_block (the block of an allocation, else NULL). The hot path's
 * whole cost of recording: four stores into a line shared with the
 * neighbouring record, and the head with last_block beside it. */
static inline void event_ring_push_block(event_ring *r, uint64_t ts, uint64_t tf, uint64_t addr,
                                         uint64_t size, uint64_t requested, const void *last) {
  event_ring_flush_repeats(r); /* the record it follows takes its repeats first */
  uint64_t n = atomic_load_explicit(&r->head, memory_order_relaxed);
  event_ring_rec *s = &r->recs[n & r->mask];
  EVENT_RING_FENCE(memory_order_release); /* head = n (stored before) -> these words */
  atomic_store_explicit(&s->word[0], ts, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[1], addr, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[2], size, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[3], EVENT_REC_REQUESTED(requested) | tf, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&r->head, n + 1, memory_order_release);
  r->last_block = last;
  r->newest_block = s;
  r->repeat_ts = ts;
  r->repeat_addr = addr;
  r->repeat_size = size;
  r->repeat_requested = requested;
  /* a plain allocation (EVF_LARGE and EVF_PREV_FREED at most) repeats */
  const uint64_t plain = EVENT_REC_TF(0xff, ~(EVF_LARGE | EVF_PREV_FREED));
  r->repeats_left = r->repeats_room =
      (tf & plain) == EVENT_REC_TF(EV_ALLOC, 0) ? EVENT_REC_REPEATS_MAX : 0;
  /* A few lines ahead, unmasked (a prefetch never faults; past the end it
   * is only wasted): an add, not the index arithmetic of a masked one. */
  __builtin_prefetch((const void *)((uintptr_t)s + EVENT_RING_SLOT * EVENT_RING_PREFETCH), 1);
}

/* Writer side, off the hot path: says in r's newest record, an EV_ALLOC
 * whose block was freed with no record of its own, that it stands for that
 * free too (EVF_FREED, one store; the pool calls it where a reader asks
 * under its lock, "One record per lifetime" above). 1 when set; 0 where the
 * newest record is no such allocation (none, another type, a side event,
 * marked already). Compact rings only. */
static inline int event_ring_mark_newest_freed(event_ring *r) {
  event_ring_flush_repeats(r);
  uint64_t n = atomic_load_explicit(&r->head, memory_order_relaxed);
  event_ring_rec *s = &r->recs[(n - 1) & r->mask]; /* n = 0: a zeroed record, no EV_ALLOC */
  uint64_t w3 = atomic_load_explicit(&s->word[3], memory_order_relaxed);
  const uint64_t what = EVENT_REC_SIDE | EVENT_REC_TF(0xff, EVF_FREED);
  if ((w3 & what) != EVENT_REC_TF(EV_ALLOC, 0))
    return 0;
  atomic_store_explicit(&s->word[3], w3 | EVENT_REC_TF(0, EVF_FREED), EVENT_RING_WORD_STORE);
  r->repeats_left = r->repeats_room = 0; /* a record marked freed takes no repeat */
  return 1;
}
/* Writer side, the pool's hot path: where the newest record is a plain
 * allocation (no flag but EVF_LARGE and EVF_PREV_FREED, as the caller's is:
 * the same block, so the same EVF_LARGE) stamped ts, of a block at addr of
 * size bytes and of requested bytes, with room for one more repeat, adds
 * one (the block allocated again, its last lifetime ended with no record)
 * and returns 1. Else 0: the caller pushes a record. Compact rings only.
 * The test reads the ring's first line alone; the record's word 3 is the
 * one store after publication. */
static inline int event_ring_repeat_newest(event_ring *r, uint64_t ts, uint64_t addr, uint64_t size,
                                           uint64_t requested) {
  if (__builtin_expect(!r->repeats_left || r->repeat_ts != ts || r->repeat_addr != addr ||
                           r->repeat_size != size || r->repeat_requested != requested,
                       0)) /* the caller's straight path is the repeat (shard.c) */
    return 0;
  /* counted on the line the test has just read, and nothing else written:
   * the record takes it at the next push or settle
   * (event_ring_flush_repeats; bench/README.md, the forty-sixth session) */
  r->repeats_left--;
  return 1;
}

/* Where a reader stops to match one moment: the head then, and whether
 * record head - 1 was marked EVF_FREED then (a mark set later is after that
 * moment), and its repeats then (repeats added later are after it). A pool's readers take it under
 * the shard lock right after the newest record is settled (pool_capture, so that the events match
 * the blocks it copies; pool_event_rings_at, for the trace and the advisor); a trace takes other
 * rings' when its window begins (a flag set between the two reads is in the window or not). */
typedef struct event_ring_end {
  uint64_t head;
  int newest_freed;
  unsigned newest_repeats;
} event_ring_end;
event_ring_end event_ring_end_now(const event_ring *r);

/* Any event into a compact ring (out of line: block events that fit take
 * event_ring_push_block, others the side array). */
void event_ring_push_compact(event_ring *r, const pool_event *ev);

/* Any event into either layout. Inline, so that the fields of an event built
 * by the caller go from registers straight into its slot (copying the
 * struct into an array of words first goes through the stack, where narrow
 * stores read back wide stall forwarding). */
static inline void event_ring_push(event_ring *r, const pool_event *ev) {
  if (r->recs) {
    event_ring_push_compact(r, ev);
    return;
  }
  uint64_t n = atomic_load_explicit(&r->head, memory_order_relaxed);
  event_ring_slot *s = &r->slots[n & r->mask];
  EVENT_RING_FENCE(memory_order_release); /* head = n (stored before) -> these words */
  atomic_store_explicit(&s->word[0], ev->ts_ns, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[1], event_ring_word1(ev), EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[2], ev->addr, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[3], ev->size, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[4], ev->requested, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[5], ev->stream, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[6], ev->a, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&s->word[7], ev->b, EVENT_RING_WORD_STORE);
  atomic_store_explicit(&r->head, n + 1, memory_order_release);
  /* Fetch a slot a few pushes ahead now, off those pushes' path (a ring
   * larger than the cache would otherwise miss on every event). */
  __builtin_prefetch(&r->slots[(n + EVENT_RING_PREFETCH) & r->mask], 1);
}

/* Reader side, lock-free. *cursor is the sequence number of the next event
 * wanted (start at 0). Events already overwritten, or being overwritten
 * while they were copied, are skipped: *cursor jumps forward and the number
 * skipped is added to *skipped. Returns the number of events copied into out
 * (at most max). */
size_t event_ring_read(event_ring *r, uint64_t *cursor, pool_event *out, size_t max,
                       uint64_t *skipped);
/* event_ring_read, of the events numbered below `before` only: a reader
 * that saw head = before (with the state those events describe) gets no
 * later one, even where the writer overwrote events it had not copied yet
 * and the cursor skipped ahead. */
size_t event_ring_read_before(event_ring *r, uint64_t *cursor, uint64_t before, pool_event *out,
                              size_t max, uint64_t *skipped);
/* event_ring_read_before(end.head), and the moment of end kept: a mark set
 * on record end.head - 1 after end was taken is dropped from its copy, and
 * repeats added to it after are too. */
size_t event_ring_read_to(event_ring *r, uint64_t *cursor, event_ring_end end, pool_event *out,
                          size_t max, uint64_t *skipped);
/* Records ever pushed: events, but for an EV_ALLOC marked EVF_FREED or
 * with repeats, which stands for more (event_count). */
uint64_t event_ring_head(const event_ring *r);
uint64_t event_ring_dropped(const event_ring *r); /* records overwritten: head - capacity */
size_t event_ring_capacity(const event_ring *r);  /* records kept: slots - 1 */

/* The events an EV_ALLOC with repeats or marked EVF_FREED stands for: its
 * lifetimes' allocations (any other event unchanged), and its block's plain
 * EV_FREEs, all at the same time. */
static inline pool_event event_alloc_part(const pool_event *e) {
  pool_event a = *e;
  if (a.type == EV_ALLOC) {
    a.flags &= (uint8_t)~EVF_FREED;
    a.repeats = 0;
  }
  return a;
}
static inline pool_event event_freed_part(const pool_event *alloc) {
  pool_event f = *alloc;
  f.type = EV_FREE;
  f.flags = alloc->flags & EVF_LARGE;
  f.repeats = 0;
  return f;
}
/* The n events at ev, read from rings, made the events they stand for:
 * each EV_ALLOC with repeats or marked EVF_FREED becomes its allocations and
 * frees, in place, the order kept (ev has room for the sum of their
 * event_count). Returns how many there are then. */
size_t event_ring_expand(pool_event *ev, size_t n);
/* Of the n events at ev, read from one ring (oldest first) and not yet
 * expanded, keeps the newest records whose events (event_count) fit in
 * max_events, each whole, moved to ev's start. Returns how many it keeps;
 * *events: the events those stand for; *left: the events of the records
 * left out. Readers that copy a ring bound their copies so (a record with
 * repeats stands for up to 256 events). */
size_t event_ring_keep_newest(pool_event *ev, size_t n, uint64_t max_events, uint64_t *events,
                              uint64_t *left);
/* The events e stands for: 1, or for an allocation 2 per repeat, 1, and 1
 * more where marked EVF_FREED. */
static inline size_t event_count(const pool_event *e) {
  if (e->type != EV_ALLOC)
    return 1;
  return 2 * (size_t)e->repeats + 1 + ((e->flags & EVF_FREED) != 0);
}

#endif
