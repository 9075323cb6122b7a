/* The event ring's protocol (pool/event_ring.h): readers racing a writer
 * that laps the ring never get a torn event, and what they miss is counted.
 * Every word of event n is derived from n, so a copy mixing two events is
 * caught; in a pool's (compact) ring, block records and side events mixed,
 * and allocations marked freed or repeated while readers may be copying
 * them.
 * CI runs this under ThreadSanitizer. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "helpers/pool_check.h"
#include "pool/event_ring.h"

#define READERS 2

static uint64_t word_of(uint64_t n, size_t i) {
  return i == 0 ? n : (n + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i << 56);
}

static pool_event event_of(uint64_t n) {
  uint64_t w[EVENT_RING_WORDS];
  for (size_t i = 0; i < EVENT_RING_WORDS; i++)
    w[i] = word_of(n, i);
  pool_event ev;
  memcpy(&ev, w, sizeof ev);
  return ev;
}

/* The event's number, or UINT64_MAX when its words do not all belong to it. */
static uint64_t number_of(const pool_event *ev) {
  uint64_t w[EVENT_RING_WORDS];
  memcpy(w, ev, sizeof w);
  for (size_t i = 0; i < EVENT_RING_WORDS; i++)
    if (w[i] != word_of(w[0], i))
      return UINT64_MAX;
  return w[0];
}

/* A pool's ring: event n is a side event (a device call, every field
 * derived from n) when n % 3 == 0, else a block record. ts carries n. */
#define COMPACT_STREAM 0x5151
#define REQUESTED_MASK ((1ull << EVENT_REC_REQUESTED_BITS) - 1)
static int is_side(uint64_t n) {
  return n % 3 == 0;
}

/* The repeats the writer adds to block allocation n right after pushing it
 * (event_ring_repeat_newest): a reader sees from none up to these. */
static unsigned repeats_of(uint64_t n) {
  return !is_side(n) && n % 8 == 4 ? (unsigned)(n % 5) : 0;
}

static void push_compact(event_ring *r, uint64_t n) {
  if (is_side(n)) {
    pool_event ev = {.ts_ns = n,
                     .type = EV_SEGMENT_ALLOC,
                     .flags = (uint8_t)(n & 15),
                     .dur_ns = (uint32_t)n,
                     .addr = word_of(n, 2),
                     .size = word_of(n, 3),
                     .requested = word_of(n, 4),
                     .stream = word_of(n, 5),
                     .a = word_of(n, 6),
                     .b = word_of(n, 7)};
    event_ring_push(r, &ev);
  } else {
    unsigned prev_freed = n % 8 == 7 && !is_side(n - 1) ? EVF_PREV_FREED : 0;
    event_ring_push_block(r, n, EVENT_REC_TF(n % 2 ? EV_FREE : EV_ALLOC, (n & 7) | prev_freed),
                          word_of(n, 2), word_of(n, 3), word_of(n, 4) & REQUESTED_MASK, NULL);
  }
}

/* Block allocations freed with no record of their own: the writer marks
 * some right after pushing them (event_ring_mark_newest_freed), the next
 * record says so for others (EVF_PREV_FREED, push_compact). A reader sees
 * the allocation with or without its free: without where it read the
 * record before the mark, or as the newest. */
static int is_marked(uint64_t n) {
  return !is_side(n) && (n % 8 == 2 || (n % 8 == 6 && !is_side(n + 1)));
}

static uint64_t number_of_compact(const pool_event *ev) {
  uint64_t n = ev->ts_ns;
  int ok = ev->addr == word_of(n, 2) && ev->size == word_of(n, 3);
  if (is_side(n))
    ok = ok && ev->type == EV_SEGMENT_ALLOC && ev->flags == (n & 15) && ev->dur_ns == (uint32_t)n &&
         ev->requested == word_of(n, 4) && ev->stream == word_of(n, 5) && ev->a == word_of(n, 6) &&
         ev->b == word_of(n, 7);
  else
    ok = ok && ev->type == (n % 2 ? EV_FREE : EV_ALLOC) &&
         (ev->flags == (n & 7) || (is_marked(n) && ev->flags == ((n & 7) | EVF_FREED))) &&
         ev->dur_ns == 0 && ev->requested == (word_of(n, 4) & REQUESTED_MASK) &&
         ev->repeats <= repeats_of(n) && ev->stream == COMPACT_STREAM && ev->a == 0 && ev->b == 0;
  return ok ? n : UINT64_MAX;
}

typedef struct reader {
  pthread_t thread;
  event_ring *ring;
  atomic_int *done;
  uint64_t got, skipped, cursor, torn, out_of_order, last;
} reader;

static void *read_ring(void *arg) {
  reader *rd = arg;
  pool_event buf[64];
  uint64_t next = 0; /* the lowest number the next event may have */
  for (unsigned round = 0;; round++) {
    int finished = atomic_load(rd->done);
    size_t want = 1 + round % 64; /* batches of every size */
    size_t n;
    while ((n = event_ring_read(rd->ring, &rd->cursor, buf, want, &rd->skipped)) > 0) {
      for (size_t i = 0; i < n; i++) {
        uint64_t num = rd->ring->recs ? number_of_compact(&buf[i]) : number_of(&buf[i]);
        if (num == UINT64_MAX) {
          rd->torn++;
          continue;
        }
        if (num < next || num >= rd->cursor)
          rd->out_of_order++;
        next = num + 1;
        rd->last = num;
      }
      rd->got += n;
    }
    if (finished)
      break; /* read everything the writer left */
    if (round % 16 == 0)
      sched_yield();
  }
  return NULL;
}

static void race(size_t capacity, uint64_t events, int compact) {
  event_ring *r =
      compact ? event_ring_create_pool(capacity, COMPACT_STREAM) : event_ring_create(capacity);
  cr_assert_not_null(r);
  r->stamped = 0; /* ts carries the event's number, not a clock stamp */
  atomic_int done = 0;
  reader rd[READERS];
  for (int i = 0; i < READERS; i++) {
    rd[i] = (reader){.ring = r, .done = &done};
    cr_assert_eq(pthread_create(&rd[i].thread, NULL, read_ring, &rd[i]), 0);
  }
  for (uint64_t n = 0; n < events; n++) { /* the only writer */
    if (compact) {
      push_compact(r, n);
      if (is_marked(n) && n % 8 == 2)
        cr_assert(event_ring_mark_newest_freed(r));
      for (unsigned k = 0; k < repeats_of(n); k++)
        cr_assert(event_ring_repeat_newest(r, n, word_of(n, 2), word_of(n, 3),
                                           word_of(n, 4) & REQUESTED_MASK));
      continue;
    }
    pool_event ev = event_of(n);
    event_ring_push(r, &ev);
  }
  atomic_store(&done, 1);
  uint64_t laps = 0;
  for (int i = 0; i < READERS; i++) {
    pthread_join(rd[i].thread, NULL);
    cr_expect_eq(rd[i].torn, 0, "reader %d got %llu torn events", i,
                 (unsigned long long)rd[i].torn);
    cr_expect_eq(rd[i].out_of_order, 0, "reader %d: numbers out of order", i);
    cr_expect_eq(rd[i].cursor, events, "reader %d read to the end", i);
    cr_expect_eq(rd[i].got + rd[i].skipped, events, "reader %d: every event read or counted", i);
    cr_expect_eq(rd[i].last, events - 1, "reader %d got the newest event", i);
    laps += rd[i].skipped;
  }
  cr_expect_eq(event_ring_head(r), events);
  cr_expect_eq(event_ring_dropped(r), events - event_ring_capacity(r));
  cr_log_info("ring of %zu: %llu events, readers skipped %llu together", event_ring_capacity(r),
              (unsigned long long)events, (unsigned long long)laps);
  event_ring_unref(r);
}

Test(event_ring_threads, readers_racing_a_lapping_writer_never_get_a_torn_event) {
  race(16, pc_scaled(2000000), 0);
}

Test(event_ring_threads, readers_racing_a_writer_on_a_larger_ring) {
  race(1024, pc_scaled(2000000), 0);
}

Test(event_ring_threads, a_pools_compact_ring_raced_never_gives_a_torn_record_or_side_event) {
  race(16, pc_scaled(2000000), 1);
}

Test(event_ring_threads, a_pools_compact_ring_raced_on_a_larger_ring) {
  race(1024, pc_scaled(2000000), 1);
}

Test(event_ring_threads, a_pools_ring_at_rest_gives_back_every_field) {
  event_ring *r = event_ring_create_pool(16, COMPACT_STREAM);
  r->stamped = 0;
  cr_assert_eq(event_ring_capacity(r), 15);
  cr_assert_eq((uintptr_t)r->recs % 64, 0, "records are aligned to pair in cache lines");
  for (uint64_t n = 0; n < 100; n++)
    push_compact(r, n);
  pool_event big = {.ts_ns = 100, .type = EV_ALLOC, .addr = 1, .size = 2, .requested = 1ull << 50};
  event_ring_push(r, &big); /* a block event too large for a record: a side event */
  cr_assert_eq(event_ring_head(r), 101);
  cr_assert_eq(event_ring_dropped(r), 86);
  pool_event out[32];
  uint64_t cursor = 0, skipped = 0;
  size_t n = event_ring_read(r, &cursor, out, 32, &skipped);
  cr_assert_eq(n, 15);
  cr_assert_eq(skipped, 86);
  for (size_t i = 0; i < 14; i++)
    cr_assert_eq(number_of_compact(&out[i]), 86 + i, "event %zu", 86 + i);
  cr_assert_eq(out[14].requested, 1ull << 50, "kept whole");
  cr_assert_eq(out[14].type, EV_ALLOC);
  cr_assert_eq(out[14].size, 2);
  event_ring_unref(r);
}

Test(event_ring_threads, a_full_ring_at_rest_gives_back_all_it_keeps) {
  event_ring *r = event_ring_create(16);
  cr_assert_eq(event_ring_capacity(r), 15, "16 slots keep 15 events");
  for (uint64_t n = 0; n < 100; n++) {
    pool_event ev = event_of(n);
    event_ring_push(r, &ev);
  }
  cr_assert_eq(event_ring_dropped(r), 85);
  pool_event out[32];
  uint64_t cursor = 0, skipped = 0;
  size_t n = event_ring_read(r, &cursor, out, 32, &skipped);
  cr_assert_eq(n, 15, "everything kept is read back, no spurious skip");
  cr_assert_eq(skipped, 85, "the dropped ones, counted");
  cr_assert_eq(cursor, 100);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(number_of(&out[i]), 85 + i);
  event_ring_unref(r);
}

/* A reader that saw head = 50 (and copied the state those 50 events
 * describe) gets none of the later events, even where the writer has since
 * overwritten the ones it wanted and the cursor skips: pool_capture's
 * events once matched blocks copied earlier this way. */
Test(event_ring_threads, reading_before_a_head_seen_gives_nothing_later) {
  event_ring *r = event_ring_create(16);
  for (uint64_t n = 0; n < 100; n++) {
    pool_event ev = event_of(n);
    event_ring_push(r, &ev);
  }
  pool_event out[32];
  uint64_t cursor = 0, skipped = 0;
  size_t n = event_ring_read_before(r, &cursor, 50, out, 50, &skipped);
  cr_assert_eq(n, 0, "events 0-49 were all overwritten; 85-99 come after 50");
  cr_assert_eq(skipped, 50);
  cr_assert_eq(cursor, 50);
  cursor = 40;
  skipped = 0;
  n = event_ring_read_before(r, &cursor, 95, out, 32, &skipped);
  cr_assert_eq(n, 10, "85-94: kept, and below 95");
  cr_assert_eq(skipped, 45);
  cr_assert_eq(cursor, 95);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(number_of(&out[i]), 85 + i);
  event_ring_unref(r);
}

Test(event_ring_threads, slots_are_cache_lines) {
  event_ring *r = event_ring_create(100);
  cr_assert_eq(event_ring_capacity(r), 127, "100 rounds up to 128 slots");
  cr_assert_eq((uintptr_t)r->slots % 64, 0, "slots are 64-byte aligned");
  cr_assert_eq(sizeof r->slots[0], 64);
  event_ring_unref(r);
}
