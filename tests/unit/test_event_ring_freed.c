/* One record per lifetime (pool/event_ring.h): a plain free in the tick of
 * its allocation's stamp, with nothing recorded between, writes no record;
 * the next record says so (EVF_PREV_FREED), or the pool does in the
 * allocation's record where a reader asks (EVF_FREED). The ring's rules,
 * the pool's, and every reader giving the events two records would give:
 * the trace (and its limit), PyTorch's snapshot, the advisor's history. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "agent/trace_counters.h"
#include "core/clock.h"
#include "gpupool/advisor.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/pool_check.h"
#include "helpers/trace_check.h"
#include "pool/event_clock.h"
#include "pool/event_ring.h"
#include "pool/pool_capture.h"
#include "pool/pool_view.h"

#define STREAM 0x77

static void push(event_ring *r, uint64_t ts, event_type type, unsigned flags, uint64_t addr) {
  event_ring_push_block(r, ts, EVENT_REC_TF(type, flags), addr, 4096, 1000 + ts, NULL);
}

static const struct {
  event_type type;
  unsigned flags;
  uint64_t ts, addr;
} ring_want[] = {{EV_ALLOC, EVF_LARGE, 1, 0x1000}, {EV_FREE, EVF_LARGE, 1, 0x1000},
                 {EV_FREE, 0, 2, 0x3000},          {EV_ALLOC, 0, 3, 0x4000},
                 {EV_FREE, 0, 3, 0x4000},          {EV_ALLOC, EVF_FROM_DEVICE, 4, 0x5000},
                 {EV_ALLOC, 0, 5, 0x6000},         {EV_ALLOC, EVF_FROM_DEVICE, 6, 0x7000},
                 {EV_FREE, 0, 6, 0x7000},          {EV_FREE, 0, 7, 0x8000},
                 {EV_ALLOC, 0, 8, 0x9000}};
#define RING_WANT (sizeof ring_want / sizeof ring_want[0])

static void expect_ring_events(const pool_event *ev, size_t n, size_t first, size_t batch) {
  for (size_t j = 0; j < n; j++) {
    size_t i = first + j;
    cr_assert_lt(i, RING_WANT, "batches of %zu: too many events", batch);
    cr_expect_eq(ev[j].type, ring_want[i].type, "batches of %zu: event %zu", batch, i);
    cr_expect_eq(ev[j].flags, ring_want[i].flags, "batches of %zu: event %zu: flags %u", batch, i,
                 ev[j].flags);
    cr_expect_eq(ev[j].ts_ns, ring_want[i].ts, "batches of %zu: event %zu", batch, i);
    cr_expect_eq(ev[j].addr, ring_want[i].addr, "batches of %zu: event %zu", batch, i);
    if (ring_want[i].addr != 0x6000) {
      cr_expect_eq(ev[j].size, 4096, "event %zu", i);
      cr_expect_eq(ev[j].requested, 1000 + ring_want[i].ts, "event %zu", i);
      cr_expect_eq(ev[j].stream, STREAM, "event %zu", i);
    }
  }
}

Test(event_ring_freed, the_next_record_or_a_mark_says_the_newest_allocation_was_freed) {
  event_ring *r = event_ring_create_pool(64, STREAM);
  cr_assert_not_null(r);
  r->stamped = 0; /* ts as given */
  cr_assert_not(event_ring_mark_newest_freed(r), "an empty ring");
  push(r, 1, EV_ALLOC, EVF_LARGE, 0x1000);
  cr_assert_not(event_ring_end_now(r).newest_freed);
  cr_assert(event_ring_mark_newest_freed(r));
  cr_assert_eq(event_ring_head(r), 1, "no new record");
  cr_assert(event_ring_end_now(r).newest_freed);
  cr_assert_not(event_ring_mark_newest_freed(r), "marked already");
  push(r, 2, EV_FREE, 0, 0x3000);
  cr_assert_not(event_ring_mark_newest_freed(r), "a free is no allocation");
  push(r, 3, EV_ALLOC, 0, 0x4000);
  push(r, 4, EV_ALLOC, EVF_FROM_DEVICE | EVF_PREV_FREED, 0x5000); /* 0x4000 was freed */
  pool_event side = {.ts_ns = 5, .type = EV_ALLOC, .addr = 0x6000, .size = 512, .a = 1};
  event_ring_push(r, &side); /* a field a record has no room for: a side event */
  cr_assert_not(event_ring_mark_newest_freed(r), "a side event");
  cr_assert_not(event_ring_end_now(r).newest_freed);
  push(r, 6, EV_ALLOC, EVF_FROM_DEVICE, 0x7000);
  push(r, 7, EV_FREE, EVF_PREV_FREED, 0x8000); /* 0x7000 was freed, then 0x8000 */
  push(r, 8, EV_ALLOC, 0, 0x9000);

  /* In batches of every size: the record after a batch's last is looked at */
  for (size_t batch = 1; batch <= 10; batch++) {
    pool_event ev[2 * 10];
    uint64_t cursor = 0, skipped = 0;
    size_t events = 0, n;
    while ((n = event_ring_read(r, &cursor, ev, batch, &skipped)) > 0) {
      n = event_ring_expand(ev, n);
      expect_ring_events(ev, n, events, batch);
      events += n;
    }
    cr_expect_eq(events, RING_WANT, "batches of %zu: %zu events", batch, events);
    cr_expect_eq(skipped, 0);
  }

  /* A reader that stopped at a moment: a free said after it is not read */
  event_ring_end end = event_ring_end_now(r);
  push(r, 9, EV_ALLOC, EVF_PREV_FREED, 0xa000); /* 0x9000 was freed after the moment */
  pool_event ev[16];
  uint64_t cursor = 0, skipped = 0;
  size_t n = event_ring_read_to(r, &cursor, end, ev, 16, &skipped);
  cr_assert_eq(n, 8);
  cr_expect_eq(ev[7].addr, 0x9000);
  cr_expect_eq(ev[7].flags, 0, "the free after the moment is not read");
  cursor = 7;
  n = event_ring_read(r, &cursor, ev, 16, &skipped);
  cr_assert_eq(n, 2);
  cr_expect_eq(ev[0].flags, EVF_FREED, "read on, it is");
  cr_expect_eq(ev[1].flags, 0, "EVF_PREV_FREED is the ring's own");
  event_ring_unref(r);
}

static gpupool *host_pool(const char *name) {
  gpupool_options o = {.name = name,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = 256 * PC_MiB,
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

/* Records pushed into the ring of p's one stream. */
static uint64_t records(gpupool *p) {
  event_ring *rings[2];
  cr_assert_eq(pool_event_rings_at(p, rings, NULL, 2), 1);
  uint64_t head = event_ring_head(rings[0]);
  event_ring_unref(rings[0]);
  return head;
}

/* Records one malloc+free pair of p costs. */
static uint64_t pair_records(gpupool *p, size_t size) {
  uint64_t before = records(p);
  pc_must_free(p, pc_must_malloc(p, size, NULL));
  return records(p) - before;
}

Test(event_ring_freed, a_plain_free_in_its_allocations_tick_writes_no_record) {
  pool_events_enable(4096);
  gpupool *p = host_pool("marks");
  pc_must_free(p, pc_must_malloc(p, 4096, NULL)); /* the segments' records */
  pc_must_free(p, pc_must_malloc(p, 8 * PC_MiB, NULL));
  cr_assert_eq(pair_records(p, 4096), 2, "exact stamps: two records");

  event_clock_publish(clock_stamp()); /* ticked, one tick from here on */
  cr_assert_eq(pair_records(p, 4096), 1, "one tick: one record");
  cr_assert_eq(pair_records(p, 8 * PC_MiB), 1, "a large block too");

  uint64_t before = records(p);
  void *x = pc_must_malloc(p, 4096, NULL), *y = pc_must_malloc(p, 4096, NULL);
  pc_must_free(p, x); /* y's allocation was recorded after x's */
  pc_must_free(p, y); /* x's free was recorded after y's allocation */
  cr_assert_eq(records(p) - before, 4, "frees after other records: a record each");

  x = pc_must_malloc(p, 4096, NULL);
  event_clock_publish(clock_stamp()); /* the next tick */
  before = records(p);
  pc_must_free(p, x);
  cr_assert_eq(records(p) - before, 1, "a free in a later tick: its own record");

  gpupool_host_stream *s = gpupool_host_stream_create();
  cr_assert_not_null(s);
  x = pc_must_malloc(p, 4096, NULL);
  before = records(p);
  cr_assert_eq(gpupool_record_stream(p, x, s), GPUPOOL_OK);
  pc_must_free(p, x);
  cr_assert_geq(records(p) - before, 1, "a deferred free: its own record");
  gpupool_host_stream_destroy(s);

  pool_events_switch(0);
  x = pc_must_malloc(p, 4096, NULL); /* no record */
  pool_events_switch(4096);
  before = records(p);
  pc_must_free(p, x);
  cr_assert_eq(records(p) - before, 1, "an allocation not recorded: the free is");

  /* With exact stamps, whose published word is 0: a block allocated while
   * events were off (no stamp) at the address of the newest record, an
   * allocation whose free was not recorded either. Its free is its own. */
  event_clock_publish(0);
  x = pc_must_malloc(p, 4096, NULL); /* recorded */
  pool_events_switch(0);
  pc_must_free(p, x);
  void *y2 = pc_must_malloc(p, 4096, NULL);
  cr_assert_eq(y2, x, "the same block again");
  pool_events_switch(4096);
  before = records(p);
  pc_must_free(p, y2);
  cr_assert_eq(records(p) - before, 1, "the free of an allocation not recorded");

  event_clock_publish(0);
  cr_assert_eq(pair_records(p, 4096), 2, "exact again: two records");
  gpupool_destroy(p);
  pool_events_disable();
}

/* The same operations on pool p: pairs of several sizes, between blocks
 * that live long, one still live at the end. */
static void churn(gpupool *p) {
  void *keep[4];
  for (int i = 0; i < 4; i++)
    keep[i] = pc_must_malloc(p, (size_t)(i + 1) * 3 * PC_MiB, NULL);
  for (int i = 0; i < 60; i++)
    pc_must_free(p, pc_must_malloc(p, (size_t)(i % 6 + 1) * 4000 + (i % 2) * 4 * PC_MiB, NULL));
  for (int i = 0; i < 3; i++)
    pc_must_free(p, keep[i]);
}

static gpupool_history *history_of(gpupool *p) {
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_from_pool(p, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  return h;
}

static gpupool_history *torch_snapshot_history(const char *pool) {
  char path[] = "/tmp/gpupool_freed_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_not_null(f);
  cr_assert_eq(gpupool_snapshot_write_torch(f, pool), GPUPOOL_OK, "%s", gpupool_last_error());
  fclose(f);
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load(path, "torch", NULL, &h), GPUPOOL_OK, "%s",
               gpupool_last_error());
  unlink(path);
  return h;
}

static void expect_same_history(gpupool_history *a, gpupool_history *b, const char *what) {
  const gpupool_history_info *x = gpupool_history_get_info(a), *y = gpupool_history_get_info(b);
  cr_expect_eq(x->events, y->events, "%s: events %llu, %llu", what, (unsigned long long)x->events,
               (unsigned long long)y->events);
  cr_expect_eq(x->allocations, y->allocations, "%s", what);
  cr_expect_eq(x->frees, y->frees, "%s", what);
  cr_expect_eq(x->unmatched_frees, y->unmatched_frees, "%s", what);
  cr_expect_eq(x->live_at_end, y->live_at_end, "%s", what);
  cr_expect_eq(x->peak_requested, y->peak_requested, "%s", what);
  cr_expect_eq(x->requested_bytes, y->requested_bytes, "%s", what);
  gpupool_replay_result rx, ry;
  cr_assert_eq(gpupool_replay(a, NULL, 4 * PC_GiB, &rx), GPUPOOL_OK);
  cr_assert_eq(gpupool_replay(b, NULL, 4 * PC_GiB, &ry), GPUPOOL_OK);
  cr_expect_eq(rx.peak_reserved, ry.peak_reserved, "%s", what);
  cr_expect_eq(rx.peak_allocated, ry.peak_allocated, "%s", what);
  cr_expect_eq(rx.device_allocs, ry.device_allocs, "%s", what);
}

static cJSON *trace_of(const char *pool_query, const char *limit_query) {
  const char *q[] = {pool_query, limit_query};
  return trace_parse_checked(trace_read_query(q, limit_query ? 2 : 1, 4096));
}

/* The events ring r holds (expanded) into out (room for max), the oldest
 * first; returns how many. */
static size_t events_of_ring(event_ring *r, pool_event *out, size_t max) {
  uint64_t head = event_ring_head(r), cap = event_ring_capacity(r);
  uint64_t cursor = head > cap ? head - cap : 0, skipped = 0;
  cr_assert_leq(head - cursor, max);
  size_t n = event_ring_read(r, &cursor, out, max, &skipped), events = 0;
  cr_assert_eq(skipped, 0);
  for (size_t i = 0; i < n; i++)
    events += event_count(&out[i]);
  cr_assert_leq(events, max, "%zu events in %zu records", events, n);
  return event_ring_expand(out, n);
}

/* The events of p's one stream, as a reader gets them. */
static size_t events_of(gpupool *p, pool_event *out, size_t max) {
  event_ring *rings[2];
  cr_assert_eq(pool_event_rings_at(p, rings, NULL, 2), 1);
  size_t n = events_of_ring(rings[0], out, max);
  event_ring_unref(rings[0]);
  return n;
}

/* Whether events ev[i..] are, in order, the types in want (EV_ALLOC, EV_FREE
 * ...) of the block at addr, each at the same time as the first. */
static void expect_lifetimes(const pool_event *ev, size_t n, size_t i, uintptr_t addr,
                             const event_type *want, size_t nwant, const char *what) {
  cr_assert_leq(i + nwant, n, "%s: %zu events", what, n);
  for (size_t k = 0; k < nwant; k++) {
    cr_expect_eq(ev[i + k].type, want[k], "%s: event %zu: type %u", what, k, ev[i + k].type);
    cr_expect_eq(ev[i + k].addr, addr, "%s: event %zu", what, k);
  }
}

#define RING_EVENTS 8192

Test(event_ring_freed, a_free_with_no_record_reads_as_freed_however_it_is_read) {
  pool_events_enable(4096);
  gpupool *p = host_pool("settled");
  pool_event *ev = malloc(RING_EVENTS * sizeof *ev);
  cr_assert_not_null(ev);
  pc_must_free(p, pc_must_malloc(p, 4096, NULL)); /* the segments' records */
  event_clock_publish(clock_stamp());             /* ticked */

  /* a reader asks while the free is in no record yet */
  void *x = pc_must_malloc(p, 4096, NULL);
  uint64_t before = records(p);
  pc_must_free(p, x);
  gpupool_history *h = torch_snapshot_history("settled"); /* read first */
  cr_expect_eq(gpupool_history_get_info(h)->allocations, 2);
  cr_expect_eq(gpupool_history_get_info(h)->frees, 2, "PyTorch's snapshot has x's free");
  gpupool_history_free(h);
  cr_assert_eq(records(p), before, "the free wrote no record");
  size_t n = events_of(p, ev, RING_EVENTS);
  static const event_type pair[] = {EV_ALLOC, EV_FREE}, two_allocs[] = {EV_ALLOC, EV_ALLOC},
                          pair_then_alloc[] = {EV_ALLOC, EV_FREE, EV_ALLOC};
  expect_lifetimes(ev, n, n - 2, (uintptr_t)x, pair, 2, "read right after the free");
  cr_expect_eq(ev[n - 1].ts_ns, ev[n - 2].ts_ns, "the free at the allocation's time");
  void *y = pc_must_malloc(p, 4096, NULL);
  cr_assert_eq(y, x, "the same block again");
  n = events_of(p, ev, RING_EVENTS);
  expect_lifetimes(ev, n, n - 3, (uintptr_t)x, pair_then_alloc, 3, "the free said once");

  /* events going off: the free before it is said, none after it */
  pc_must_free(p, y);
  pool_events_switch(0);
  n = events_of(p, ev, RING_EVENTS);
  expect_lifetimes(ev, n, n - 2, (uintptr_t)y, pair, 2, "a free before events went off");
  pool_events_switch(4096);
  x = pc_must_malloc(p, 4096, NULL); /* recorded */
  pool_events_switch(0);
  pc_must_free(p, x); /* not recorded: events are off */
  pool_events_switch(4096);
  y = pc_must_malloc(p, 4096, NULL);
  cr_assert_eq(y, x);
  n = events_of(p, ev, RING_EVENTS);
  expect_lifetimes(ev, n, n - 2, (uintptr_t)x, two_allocs, 2, "no free while events were off");
  pc_must_free(p, y);

  /* the block's segment released before anything else is recorded: the
   * free is said before the block goes (ASan: no read of a freed block) */
  void *big = pc_must_malloc(p, 64 * PC_MiB, NULL);
  pc_must_free(p, big);
  cr_assert_gt(gpupool_empty_cache(p), 0);
  n = events_of(p, ev, RING_EVENTS);
  size_t at = n;
  for (size_t i = 0; i < n; i++)
    if (ev[i].type == EV_ALLOC && ev[i].addr == (uintptr_t)big)
      at = i;
  expect_lifetimes(ev, n, at, (uintptr_t)big, pair, 2, "a block whose segment was released");
  cr_expect_eq(ev[at + 2].type, EV_SEGMENT_FREE);

  /* the pool destroyed: a reader that kept the ring still reads the free */
  event_ring *rings[2];
  cr_assert_eq(pool_event_rings_at(p, rings, NULL, 2), 1);
  x = pc_must_malloc(p, 4096, NULL);
  pc_must_free(p, x);
  gpupool_destroy(p);
  n = events_of_ring(rings[0], ev, RING_EVENTS);
  expect_lifetimes(ev, n, n - 2, (uintptr_t)x, pair, 2, "after the pool was destroyed");
  event_ring_unref(rings[0]);
  event_clock_publish(0);
  free(ev);
  pool_events_disable();
}

Test(event_ring_freed, a_reader_stops_at_the_end_taken_with_the_ring) {
  pool_events_enable(4096);
  gpupool *p = host_pool("moment");
  pc_must_free(p, pc_must_malloc(p, 4096, NULL)); /* the segments' records */
  event_clock_publish(clock_stamp());
  void *x = pc_must_malloc(p, 4096, NULL);
  pc_must_free(p, x);
  event_ring *rings[2];
  event_ring_end ends[2];
  cr_assert_eq(pool_event_rings_at(p, rings, ends, 2), 1);
  void *y = pc_must_malloc(p, 8192, NULL); /* after the moment */
  pc_must_free(p, y);

  pool_event ev[8];
  uint64_t cursor = ends[0].head - 1, skipped = 0;
  size_t n = event_ring_read_to(rings[0], &cursor, ends[0], ev, 4, &skipped);
  cr_assert_eq(n, 1, "x's record only");
  n = event_ring_expand(ev, n);
  cr_assert_eq(n, 2);
  cr_expect(ev[0].type == EV_ALLOC && ev[1].type == EV_FREE && ev[1].addr == (uintptr_t)x,
            "x's free, settled when the ring was taken");
  cursor = ends[0].head - 1;
  n = event_ring_expand(ev, event_ring_read(rings[0], &cursor, ev, 4, &skipped));
  cr_assert_eq(n, 3, "read on: y's allocation, whose free no record says yet");
  cr_expect(ev[2].type == EV_ALLOC && ev[2].size == 8192);
  event_ring_unref(rings[0]);

  gpupool_history *h = history_of(p); /* its own moment: y's free is said */
  cr_expect_eq(gpupool_history_get_info(h)->live_at_end, 0);
  gpupool_history_free(h);
  event_clock_publish(0);
  gpupool_destroy(p);
  pool_events_disable();
}

/* An independent oracle: random operations on a pool (allocations, frees
 * of the newest block and of any, events off and on, new ticks and exact
 * stamps, readers taking the ring, segments released, PyTorch snapshots),
 * each block event logged as the program sees it while events are on. The
 * ring, read at the end, must give exactly that sequence. */
#define ORACLE_OPS 1500
typedef struct logged {
  event_type type;
  uintptr_t addr;
} logged;

static uint32_t oracle_rand(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static void oracle_run(uint32_t seed) {
  pool_events_enable(4096);
  gpupool *p = host_pool("oracle");
  logged *log = malloc((2 * ORACLE_OPS + 2) * sizeof *log);
  pool_event *ev = malloc(RING_EVENTS * sizeof *ev);
  cr_assert(log && ev);
  static const size_t sizes[] = {512, 3000, 4096, 64 << 10, PC_MiB, 16 * PC_MiB};
  void *live[16];
  size_t nlive = 0, nlog = 0, reads = 0;
  int on = 1;
  uint32_t rng = seed;
  void *first = pc_must_malloc(p, 4096, NULL); /* the stream's shard and ring */
  pc_must_free(p, first);
  log[nlog++] = (logged){EV_ALLOC, (uintptr_t)first};
  log[nlog++] = (logged){EV_FREE, (uintptr_t)first};
  event_clock_publish(clock_stamp());
  for (int op = 0; op < ORACLE_OPS; op++) {
    uint32_t r = oracle_rand(&rng) % 100;
    if (r < 40 && nlive < 16) {
      void *x = pc_must_malloc(p, sizes[oracle_rand(&rng) % 6], NULL);
      live[nlive++] = x;
      if (on)
        log[nlog++] = (logged){EV_ALLOC, (uintptr_t)x};
    } else if (r < 75 && nlive) { /* the newest block mostly: the storm's case */
      size_t i = r < 60 ? nlive - 1 : oracle_rand(&rng) % nlive;
      pc_must_free(p, live[i]);
      if (on)
        log[nlog++] = (logged){EV_FREE, (uintptr_t)live[i]};
      live[i] = live[--nlive];
    } else if (r < 80) {
      on = !on;
      pool_events_switch(on ? 4096 : 0);
    } else if (r < 88) {
      event_clock_publish(oracle_rand(&rng) % 8 ? clock_stamp() : 0); /* a tick, or exact */
    } else if (r < 96) {
      events_of(p, ev, RING_EVENTS); /* a reader takes the ring */
      reads++;
    } else if (r < 98) {
      gpupool_empty_cache(p);
    } else { /* PyTorch's snapshot copies the pool (not loaded: events were off between) */
      FILE *f = tmpfile();
      cr_assert_not_null(f);
      cr_assert_eq(gpupool_snapshot_write_torch(f, "oracle"), GPUPOOL_OK);
      fclose(f);
    }
  }
  event_clock_publish(0);
  uint64_t records_pushed = records(p);
  size_t n = events_of(p, ev, RING_EVENTS), k = 0;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].type != EV_ALLOC && ev[i].type != EV_FREE)
      continue;
    cr_assert_lt(k, nlog, "more block events than logged (%zu)", nlog);
    cr_assert_eq(ev[i].type, log[k].type, "seed %u: block event %zu: type %u, logged %u", seed, k,
                 ev[i].type, log[k].type);
    cr_assert_eq(ev[i].addr, log[k].addr, "block event %zu", k);
    k++;
  }
  cr_assert_eq(k, nlog, "%zu block events read, %zu logged", k, nlog);
  cr_assert_lt(records_pushed, n, "some records stood for two events (%zu events, %llu records)", n,
               (unsigned long long)records_pushed);
  cr_assert_gt(reads, 0);
  for (size_t i = 0; i < nlive; i++)
    pc_must_free(p, live[i]);
  gpupool_destroy(p);
  free(log);
  free(ev);
  pool_events_disable();
}

Test(event_ring_freed, random_operations_read_as_an_oracle_logged_them) {
  static const uint32_t seeds[] = {12345, 777, 2024, 99991};
  for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
    oracle_run(seeds[i]);
}

Test(event_ring_freed, readers_give_the_events_two_records_would) {
  pool_events_enable(4096);
  trace_counters_reset();
  gpupool *exact = host_pool("exact"), *ticked = host_pool("ticked");
  churn(exact);
  event_clock_publish(clock_stamp());
  churn(ticked);
  event_clock_publish(0);
  cr_assert_lt(records(ticked) + 50, records(exact), "%llu and %llu records",
               (unsigned long long)records(ticked), (unsigned long long)records(exact));

  gpupool_history *he = history_of(exact), *ht = history_of(ticked);
  cr_assert_eq(gpupool_history_get_info(he)->allocations, 64);
  cr_assert_eq(gpupool_history_get_info(he)->live_at_end, 1);
  expect_same_history(he, ht, "the pool's history");
  gpupool_history_free(he);
  gpupool_history_free(ht);

  he = torch_snapshot_history("exact");
  ht = torch_snapshot_history("ticked");
  cr_assert_eq(gpupool_history_get_info(he)->allocations, 64);
  expect_same_history(he, ht, "PyTorch's snapshot");
  gpupool_history_free(he);
  gpupool_history_free(ht);

  cJSON *te = trace_of("pool=exact", NULL), *tt = trace_of("pool=ticked", NULL);
  cr_expect_eq(trace_count(te, "b", NULL), 64);
  cr_expect_eq(trace_count(tt, "b", NULL), 64, "an allocation's bar each");
  cr_expect_eq(trace_count(tt, "e", NULL), trace_count(te, "e", NULL), "and its end");
  cr_expect_eq(trace_other_number(tt, "events_written"), trace_other_number(te, "events_written"));
  cJSON_Delete(te);
  cJSON_Delete(tt);

  /* The newest 7 events of the ticked pool: its last three frees (records
   * of their own), then pairs of one record each, two events: two fit. */
  tt = trace_of("pool=ticked", "limit=7");
  cr_expect_eq(trace_other_number(tt, "events_written"), 7);
  cr_expect_eq(trace_count(tt, "b", NULL), 2, "a record's two events are kept together");
  cr_expect(
      cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(tt, "otherData"), "limit_reached")));
  cJSON_Delete(tt);
  tt = trace_of("pool=ticked", "limit=6");
  cr_expect_eq(trace_other_number(tt, "events_written"), 5,
               "the pair that would be cut is left out");
  cr_expect_eq(trace_count(tt, "b", NULL), 1);
  cJSON_Delete(tt);

  gpupool_destroy(exact);
  gpupool_destroy(ticked);
  pool_events_disable();
}

/* A record of another pool that the filter leaves out weighs nothing
 * against the limit, even a marked one of two events: the newest two
 * events of pool a are its allocation and free, with pool b's marked pair
 * stamped between them. */
Test(event_ring_freed, a_filtered_out_pair_does_not_count_against_the_limit) {
  pool_events_enable(4096);
  trace_counters_reset();
  gpupool *a = host_pool("a"), *b = host_pool("b");
  pc_must_free(a, pc_must_malloc(a, 4096, NULL)); /* the segments' records, older */
  pc_must_free(b, pc_must_malloc(b, 4096, NULL));
  void *x = pc_must_malloc(a, 4096, NULL);
  event_clock_publish(clock_stamp()); /* after x's exact stamp */
  cr_assert_eq(pair_records(b, 4096), 1, "b's pair in one record");
  event_clock_publish(0);
  pc_must_free(a, x); /* an exact stamp after the published one */
  cJSON *t = trace_of("pool=a", "limit=2");
  cr_expect_eq(trace_other_number(t, "events_written"), 2, "x's allocation and free");
  cr_expect_eq(trace_count(t, "b", NULL), 1);
  cr_expect_eq(trace_count(t, "e", NULL), 1, "x's bar ends at its free");
  cJSON_Delete(t);
  gpupool_destroy(a);
  gpupool_destroy(b);
  pool_events_disable();
}

/* The ring's own rule for a repeat, apart from the pool's: only the newest
 * record, only a plain allocation (EVF_LARGE and EVF_PREV_FREED at most),
 * only with its stamp, address and sizes, at most EVENT_REC_REPEATS_MAX. */
Test(event_ring_freed, a_repeat_takes_only_the_newest_plain_allocation_as_it_was) {
  event_ring *r = event_ring_create_pool(1024, STREAM);
  cr_assert_not_null(r);
  r->stamped = 0;
  const uint64_t ts = 10, addr = 0x1000, size = 4096, requested = 1000 + ts;
  push(r, ts, EV_ALLOC, EVF_LARGE | EVF_PREV_FREED, addr);
  cr_expect_not(event_ring_repeat_newest(r, ts + 1, addr, size, requested), "another stamp");
  cr_expect_not(event_ring_repeat_newest(r, ts, addr + 512, size, requested), "another address");
  cr_expect_not(event_ring_repeat_newest(r, ts, addr, size + 512, requested), "another size");
  cr_expect_not(event_ring_repeat_newest(r, ts, addr, size, requested - 1), "another request");
  for (unsigned i = 0; i < EVENT_REC_REPEATS_MAX; i++)
    cr_assert(event_ring_repeat_newest(r, ts, addr, size, requested), "repeat %u", i);
  cr_expect_not(event_ring_repeat_newest(r, ts, addr, size, requested), "a record takes 127");
  uint64_t cursor = 0, skipped = 0;
  pool_event ev[2];
  cr_assert_eq(event_ring_read(r, &cursor, ev, 2, &skipped), 1);
  cr_expect_eq(ev[0].repeats, 0, "counted in the ring's header until flushed");
  event_ring_flush_repeats(r);
  event_ring_flush_repeats(r); /* a second flush adds nothing */
  cursor = 0;
  cr_assert_eq(event_ring_read(r, &cursor, ev, 2, &skipped), 1);
  cr_expect_eq(ev[0].repeats, EVENT_REC_REPEATS_MAX);
  cr_expect_eq(ev[0].flags, EVF_LARGE, "the repeats changed no flag (readers move EVF_PREV_FREED)");

  const struct {
    event_type type;
    unsigned flags;
  } refused[] = {{EV_ALLOC, EVF_FROM_DEVICE}, {EV_ALLOC, EVF_PAGES}, {EV_FREE, 0}};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    push(r, ts, refused[i].type, refused[i].flags, addr);
    cr_expect_not(event_ring_repeat_newest(r, ts, addr, size, requested),
                  "type %d, flags %u: no repeat", refused[i].type, refused[i].flags);
  }
  push(r, ts, EV_ALLOC, 0, addr);
  cr_expect(event_ring_repeat_newest(r, ts, addr, size, requested), "a plain allocation again");
  cr_assert(event_ring_mark_newest_freed(r));
  cr_expect_not(event_ring_repeat_newest(r, ts, addr, size, requested), "marked freed: no repeat");
  push(r, ts, EV_ALLOC, 0, addr);
  pool_event side = {.ts_ns = ts, .type = EV_SEGMENT_ALLOC, .addr = addr, .size = 1 << 20};
  event_ring_push(r, &side);
  cr_expect_not(event_ring_repeat_newest(r, ts, addr, size, requested),
                "a side event is the newest record: no repeat of the one before");
  event_ring_unref(r);
}

/* Repeated lifetimes: a storm of pairs on one block in one tick writes one
 * record per 128 pairs, and every reader still gets each allocation and
 * free, in order, at the tick's time. */
Test(event_ring_freed, a_storm_on_one_block_repeats_its_record) {
  pool_events_enable(4096);
  trace_counters_reset();
  gpupool *p = host_pool("storm");
  pool_event *ev = malloc(RING_EVENTS * sizeof *ev);
  cr_assert_not_null(ev);
  void *x = pc_must_malloc(p, 4096, NULL); /* the segments' records, exact stamps */
  pc_must_free(p, x);
  event_clock_publish(clock_stamp());
  uint64_t before = records(p), lifetimes = pool_events_lifetimes_total();
  for (int i = 0; i < 1000; i++) {
    void *y = pc_must_malloc(p, 4096, NULL);
    cr_assert_eq(y, x, "the same block each time");
    pc_must_free(p, y);
  }
  cr_expect_eq(records(p) - before, 8, "1000 pairs in records of up to 128 lifetimes each");
  cr_expect_eq(pool_events_lifetimes_total() - lifetimes, 2000,
               "two events a pair for the clock, folded or not");

  size_t n = events_of(p, ev, RING_EVENTS);
  cr_assert_geq(n, 2000);
  for (size_t i = n - 2000; i < n; i++) {
    cr_assert_eq(ev[i].type, (i - (n - 2000)) % 2 ? EV_FREE : EV_ALLOC, "event %zu", i);
    cr_assert_eq(ev[i].addr, (uintptr_t)x);
    cr_assert_eq(ev[i].requested, 4096);
    cr_assert_eq(ev[i].repeats, 0, "expanded");
    cr_assert_eq(ev[i].ts_ns, ev[n - 1].ts_ns, "the tick's time");
  }
  gpupool_history *h = history_of(p);
  cr_expect_eq(gpupool_history_get_info(h)->allocations, 1001);
  cr_expect_eq(gpupool_history_get_info(h)->frees, 1001);
  cr_expect_eq(gpupool_history_get_info(h)->live_at_end, 0);
  gpupool_history_free(h);
  h = torch_snapshot_history("storm");
  cr_expect_eq(gpupool_history_get_info(h)->allocations, 1001, "PyTorch's snapshot");
  cr_expect_eq(gpupool_history_get_info(h)->frees, 1001);
  gpupool_history_free(h);
  cJSON *t = trace_of("pool=storm", NULL);
  cr_expect_eq(trace_count(t, "b", NULL), 1001, "an allocation's bar each");
  cr_expect_eq(trace_count(t, "e", NULL), 1001, "and its end");
  cJSON_Delete(t);

  /* another requested size, the same block: a record of its own */
  before = records(p);
  pc_must_free(p, pc_must_malloc(p, 4000, NULL));
  pc_must_free(p, pc_must_malloc(p, 4000, NULL));
  cr_expect_eq(records(p) - before, 1, "4000 bytes: a new record, then its repeat");

  /* a reader that stops at a moment keeps the repeats of then (records()
   * took the ring as a reader does, which said the 4000-byte record's last
   * free in it: a new record for 3000 bytes) */
  pc_must_free(p, pc_must_malloc(p, 3000, NULL));
  pc_must_free(p, pc_must_malloc(p, 3000, NULL));
  void *y = pc_must_malloc(p, 3000, NULL); /* the record's third lifetime, live */
  event_ring *rings[2];
  event_ring_end ends[2];
  cr_assert_eq(pool_event_rings_at(p, rings, ends, 2), 1);
  cr_expect_eq(ends[0].newest_repeats, 2);
  cr_expect_eq(ends[0].newest_freed, 0);
  pc_must_free(p, y);
  for (int i = 0; i < 3; i++) /* after the moment */
    pc_must_free(p, pc_must_malloc(p, 3000, NULL));
  uint64_t cursor = ends[0].head - 1, skipped = 0;
  n = event_ring_read_to(rings[0], &cursor, ends[0], ev, 4, &skipped);
  cr_assert_eq(n, 1);
  cr_expect_eq(ev[0].repeats, 2, "the repeats taken with the moment");
  n = event_ring_expand(ev, n);
  cr_assert_eq(n, 5, "two lifetimes, then the allocation still live then");
  cr_expect(ev[4].type == EV_ALLOC && ev[3].type == EV_FREE && ev[4].requested == 3000);
  cursor = ends[0].head - 1;
  n = event_ring_read(rings[0], &cursor, ev, 4, &skipped);
  cr_assert_eq(n, 1);
  cr_expect_eq(ev[0].repeats, 2, "the later ones wait in the ring's header for a reader to ask");
  event_ring_end later;
  cr_assert_eq(pool_event_rings_at(p, rings + 1, &later, 1), 1);
  cr_assert_eq(rings[1], rings[0]);
  cr_expect_eq(later.newest_repeats, 5);
  cursor = ends[0].head - 1;
  n = event_ring_read(rings[0], &cursor, ev, 4, &skipped);
  cr_assert_eq(n, 1);
  cr_expect_eq(ev[0].repeats, 5, "read on once a reader asked: the later ones too");
  event_ring_unref(rings[1]);
  event_ring_unref(rings[0]);

  /* a copy of the pool keeps at most its limit of events, whole records */
  pool_capture c;
  cr_assert_eq(pool_capture_take(p, 0, 1024, 10, 0, &c), 0);
  cr_expect_leq(c.nevents, 10, "%zu events", c.nevents);
  pool_capture_free(&c);

  /* exact stamps: no repeats */
  event_clock_publish(0);
  before = records(p);
  for (int i = 0; i < 3; i++)
    pc_must_free(p, pc_must_malloc(p, 4096, NULL));
  cr_expect_eq(records(p) - before, 6, "exact stamps: two records a pair");
  gpupool_destroy(p);
  free(ev);
  pool_events_disable();
}

/* `limit` keeps whole records, but of a record's repeated lifetimes only
 * the newest that fit: 300 pairs in one tick are records of 128, 128 and
 * 44 lifetimes; the newest 100 events are the last record's 88 and 6
 * lifetimes of the one before. */
Test(event_ring_freed, a_limit_keeps_the_newest_lifetimes_of_a_repeated_record) {
  pool_events_enable(4096);
  trace_counters_reset();
  gpupool *p = host_pool("limited");
  pc_must_free(p, pc_must_malloc(p, 4096, NULL)); /* the segments' records, exact stamps */
  event_clock_publish(clock_stamp());
  uint64_t before = records(p);
  for (int i = 0; i < 300; i++)
    pc_must_free(p, pc_must_malloc(p, 4096, NULL));
  cr_assert_eq(records(p) - before, 3);
  cJSON *t = trace_of("pool=limited", "limit=100");
  cr_expect_eq(trace_other_number(t, "events_written"), 100);
  cr_expect_eq(trace_count(t, "b", NULL), 50, "an allocation's bar each");
  cr_expect_eq(trace_count(t, "e", NULL), 50, "and its end");
  cr_expect(
      cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(t, "otherData"), "limit_reached")));
  cJSON_Delete(t);
  t = trace_of("pool=limited", "limit=91");
  cr_expect_eq(trace_other_number(t, "events_written"), 90, "the last lifetime kept whole");
  cr_expect_eq(trace_count(t, "b", NULL), 45);
  cJSON_Delete(t);
  t = trace_of("pool=limited", "limit=1");
  cr_expect_eq(trace_other_number(t, "events_written"), 0, "a lifetime is never cut");
  cJSON_Delete(t);
  event_clock_publish(0);
  gpupool_destroy(p);
  pool_events_disable();
}

/* Readers that copy a ring's events keep at most twice its capacity, the
 * newest, whole records: what its records held before they could repeat
 * lifetimes. A ring of 15 records: a storm of 1000 pairs in one tick (8
 * records), 10 pairs in the next, 5 in the one after. */
Test(event_ring_freed, copies_keep_at_most_twice_a_rings_capacity) {
  pool_events_enable(16);
  gpupool *p = host_pool("bounded");
  pc_must_free(p, pc_must_malloc(p, 4096, NULL)); /* the segments' records, exact stamps */
  event_clock_publish(clock_stamp());
  for (int i = 0; i < 1000; i++)
    pc_must_free(p, pc_must_malloc(p, 4096, NULL));
  event_clock_publish(clock_stamp());
  for (int i = 0; i < 10; i++)
    pc_must_free(p, pc_must_malloc(p, 8192, NULL));
  event_clock_publish(clock_stamp());
  for (int i = 0; i < 5; i++)
    pc_must_free(p, pc_must_malloc(p, 12288, NULL));
  cr_assert_leq(records(p), 15, "nothing overwritten");

  pool_capture c;
  cr_assert_eq(pool_capture_take(p, 0, 1024, SIZE_MAX, 0, &c), 0);
  /* the newest 30 events are the last two ticks' whole; the older tick's
   * left out, the oldest tick kept is too (it may have lost events) */
  cr_expect_eq(c.nevents, 10, "%zu events", c.nevents);
  for (size_t i = 0; i < c.nevents; i++)
    cr_expect_eq(c.events[i].requested, 12288);
  pool_capture_free(&c);

  gpupool_history *h = history_of(p);
  cr_expect_eq(gpupool_history_get_info(h)->allocations, 15, "the last 30 events");
  cr_expect_eq(gpupool_history_get_info(h)->dropped, 2003,
               "%llu: the storm's, the first pair's and its segment's",
               (unsigned long long)gpupool_history_get_info(h)->dropped);
  gpupool_history_free(h);
  event_clock_publish(0);
  gpupool_destroy(p);
  pool_events_disable();
}
