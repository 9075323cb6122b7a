/* One record per lifetime (pool/event_ring.h, EVF_FREED): a plain free in
 * the tick of its allocation's stamp, with nothing recorded between, is
 * marked into the allocation's record. The ring's rules for the mark, the
 * pool's, and every reader giving the events two records would give: the
 * trace (and its limit), PyTorch's snapshot, the advisor's history. */
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
#include "pool/pool_view.h"

#define STREAM 0x77

static void push(event_ring *r, uint64_t ts, event_type type, unsigned flags, uint64_t addr) {
  event_ring_push_block(r, ts, EVENT_REC_TF(type, flags), addr, 4096, 1000 + ts);
}

Test(event_ring_freed, only_the_newest_unmarked_allocation_at_the_address_takes_the_mark) {
  event_ring *r = event_ring_create_pool(64, STREAM);
  cr_assert_not_null(r);
  r->stamped = 0; /* ts as given */
  cr_assert_not(event_ring_mark_freed(r, 0x1000), "an empty ring");
  push(r, 1, EV_ALLOC, EVF_LARGE, 0x1000);
  cr_assert_not(event_ring_mark_freed(r, 0x2000), "another address");
  cr_assert_not(event_ring_end_now(r).newest_freed);
  cr_assert(event_ring_mark_freed(r, 0x1000));
  cr_assert_eq(event_ring_head(r), 1, "no new record");
  cr_assert(event_ring_end_now(r).newest_freed);
  cr_assert_not(event_ring_mark_freed(r, 0x1000), "marked already");
  push(r, 2, EV_FREE, 0, 0x3000);
  cr_assert_not(event_ring_mark_freed(r, 0x3000), "a free is no allocation");
  push(r, 3, EV_ALLOC, 0, 0x4000);
  push(r, 4, EV_ALLOC, EVF_FROM_DEVICE, 0x5000);
  cr_assert_not(event_ring_mark_freed(r, 0x4000), "not the newest record");
  pool_event side = {.ts_ns = 5, .type = EV_ALLOC, .addr = 0x6000, .size = 512, .a = 1};
  event_ring_push(r, &side); /* a field a record has no room for: a side event */
  cr_assert_not(event_ring_mark_freed(r, 0x6000), "a side event");
  cr_assert_not(event_ring_end_now(r).newest_freed);
  push(r, 6, EV_ALLOC, EVF_FROM_DEVICE, 0x7000);
  cr_assert(event_ring_mark_freed(r, 0x7000));

  pool_event ev[16];
  uint64_t cursor = 0, skipped = 0;
  size_t n = event_ring_read(r, &cursor, ev, 8, &skipped);
  cr_assert_eq(n, 6);
  cr_assert_eq(skipped, 0);
  cr_assert_eq(ev[0].flags, EVF_LARGE | EVF_FREED, "the mark reads back");
  cr_assert_eq(event_count(&ev[0]), 2);
  cr_assert_eq(event_count(&ev[3]), 1);
  cr_assert_eq(ev[5].flags, EVF_FROM_DEVICE | EVF_FREED);
  n = event_ring_expand(ev, n);
  cr_assert_eq(n, 8);
  const struct {
    event_type type;
    unsigned flags;
    uint64_t ts, addr;
  } want[] = {{EV_ALLOC, EVF_LARGE, 1, 0x1000},
              {EV_FREE, EVF_LARGE, 1, 0x1000},
              {EV_FREE, 0, 2, 0x3000},
              {EV_ALLOC, 0, 3, 0x4000},
              {EV_ALLOC, EVF_FROM_DEVICE, 4, 0x5000},
              {EV_ALLOC, 0, 5, 0x6000},
              {EV_ALLOC, EVF_FROM_DEVICE, 6, 0x7000},
              {EV_FREE, 0, 6, 0x7000}};
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq(ev[i].type, want[i].type, "event %zu", i);
    cr_expect_eq(ev[i].flags, want[i].flags, "event %zu: flags %u", i, ev[i].flags);
    cr_expect_eq(ev[i].ts_ns, want[i].ts, "event %zu", i);
    cr_expect_eq(ev[i].addr, want[i].addr, "event %zu", i);
    if (i != 5) {
      cr_expect_eq(ev[i].size, 4096, "event %zu", i);
      cr_expect_eq(ev[i].requested, 1000 + want[i].ts, "event %zu", i);
      cr_expect_eq(ev[i].stream, STREAM, "event %zu", i);
    }
  }
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
  cr_assert_eq(pool_event_rings(p, rings, 2), 1);
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

Test(event_ring_freed, a_pool_marks_a_plain_free_in_its_allocations_tick_only) {
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
