/* expandable_segments:True on the host backend: large segments are address
 * space, pages are mapped where blocks need them, idle pages move before new
 * ones are created, and what the pool reports as reserved is what is
 * mapped. Exact page counts after known sequences. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpupool/host.h"
#include "helpers/pool_check.h"
#include "pool/oom_report.h"
#include "pool/pool_view.h"

#define MiB  PC_MiB
#define PAGE (2 * MiB)
#define L    GPUPOOL_STAT_LARGE
#define A    GPUPOOL_STAT_ALL

static gpupool *expandable_pool(size_t capacity) {
  return pc_pool(GPUPOOL_STRATEGY_BFC, capacity, "expandable_segments:True");
}

/* No slack: every idle page moves before a new one is created. */
static gpupool *moving_pool(size_t capacity) {
  return pc_pool(GPUPOOL_STRATEGY_BFC, capacity,
                 "expandable_segments:True,expandable_slack_percent:0");
}

static void *take(gpupool *p, size_t size, uint64_t id) {
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, size, NULL), GPUPOOL_OK, "%zu bytes: %s", size,
               gpupool_last_error());
  pc_pattern_fill(x, size, id);
  return x;
}

static void check_and_free(gpupool *p, void *x, size_t size, uint64_t id) {
  cr_assert_eq(pc_pattern_check(x, size, id), SIZE_MAX, "the data of allocation %llu changed",
               (unsigned long long)id);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
}

static void check_invariants(gpupool *p) {
  gpupool_stats s = pc_stats(p);
  char msg[512];
  cr_assert_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, PC_EXPANDABLE, msg, sizeof msg), 0,
               "%s", msg);
}

static void add_mapped(void *arg, const pool_segment_info *s) {
  *(uint64_t *)arg += s->mapped;
}

/* The snapshot's segments say how much of them is mapped; it adds up to
 * reserved_bytes. */
static void check_mapped_is_reserved(gpupool *p) {
  uint64_t mapped = 0;
  pool_walker w = {.segment = add_mapped, .arg = &mapped};
  pool_walk(p, &w);
  cr_assert_eq((int64_t)mapped, pc_stats(p).reserved_bytes[A].current);
}

Test(pool_expandable, maps_only_the_pages_blocks_use) {
  gpupool *p = expandable_pool(0);
  void *a = take(p, 3 * MiB, 1); /* a 20 MiB segment of address space: 2 pages mapped */
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.segment[L].current, 1);
  cr_assert_eq(s.reserved_bytes[L].current, 2 * PAGE);
  cr_assert_eq(s.num_device_alloc, 2, "device allocations count pages");
  void *b = take(p, 3 * MiB, 2); /* [3, 6) MiB of the same segment: page 2 is new */
  s = pc_stats(p);
  cr_assert_eq(s.segment[L].current, 1);
  cr_assert_eq(s.reserved_bytes[L].current, 3 * PAGE);
  check_mapped_is_reserved(p);
  check_invariants(p);
  check_and_free(p, a, 3 * MiB, 1);
  check_and_free(p, b, 3 * MiB, 2);
  gpupool_destroy(p);
}

/* A large block that does not fit where idle pages are: a at [0, 40) MiB of
 * the stream's range, pin at [40, 42), then b (50 MiB) after pin. */
static void *pinned_move(gpupool *p, void **pin) {
  void *a = take(p, 40 * MiB, 1);
  *pin = take(p, 2 * MiB, 3);
  check_and_free(p, a, 40 * MiB, 1); /* 20 idle pages stay mapped, cached */
  return take(p, 50 * MiB, 2);       /* a's 40 MiB cannot hold it: it goes after pin */
}

Test(pool_expandable, one_range_holds_the_large_blocks) {
  gpupool *p = moving_pool(0);
  void *a = take(p, 40 * MiB, 1);
  check_and_free(p, a, 40 * MiB, 1);
  void *b = take(p, 50 * MiB, 2); /* where a was: a's pages, 5 new ones */
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(b, a, "the stream's range is reused from its start");
  cr_assert_eq(s.num_pages_moved, 0);
  cr_assert_eq(s.num_device_alloc, 25);
  cr_assert_eq(s.segment[L].current, 1);
  check_and_free(p, b, 50 * MiB, 2);
  gpupool_destroy(p);
}

Test(pool_expandable, moves_idle_pages_instead_of_growing) {
  gpupool *p = moving_pool(0);
  void *pin, *b = pinned_move(p, &pin);
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_pages_moved, 20, "the 20 idle pages move under the new block");
  cr_assert_eq(s.num_device_alloc, 26, "a's 20 pages, pin's, and only 5 new ones");
  cr_assert_eq(s.reserved_bytes[L].current, 52 * MiB);
  cr_assert_eq(s.reserved_bytes[L].peak, 52 * MiB, "plain bfc would hold 110 MiB here");
  cr_assert_eq(s.segment[L].current, 1);
  cr_assert_eq(s.num_device_syncs, 0,
               "work queued on the stream before the free may still use a's pages: their old "
               "mapping stays until the stream passed it, no synchronize");
  cr_assert_eq(s.num_alloc_unmaps, 0, "the moved pages' old mappings stay: no unmap");
  check_mapped_is_reserved(p);
  check_invariants(p);
  check_and_free(p, b, 50 * MiB, 2);
  check_and_free(p, pin, 2 * MiB, 3);
  gpupool_destroy(p);

  gpupool *plain = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  b = pinned_move(plain, &pin);
  cr_assert_eq(pc_stats(plain).reserved_bytes[L].current, 110 * MiB);
  check_and_free(plain, b, 50 * MiB, 2);
  check_and_free(plain, pin, 2 * MiB, 3);
  gpupool_destroy(plain);
}

/* A move costs the allocating thread a map and no unmap: the old mappings
 * stay (the same physical pages, so no memory) until a block is placed over
 * them, which unmaps them before mapping its own pages there; the data of
 * the block that took the pages is untouched by the new block's. */
Test(pool_expandable, old_mappings_go_when_a_block_is_placed_over_them) {
  gpupool *p = moving_pool(0);
  void *pin, *b = pinned_move(p, &pin);
  cr_assert_eq(pc_stats(p).num_alloc_unmaps, 0);
  void *c = take(p, 40 * MiB, 4); /* where a was: its 20 old mappings go, 20 new pages */
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(c, (char *)pin - 40 * MiB, "c is where a was, in front of pin");
  cr_assert_eq(s.num_alloc_unmaps, 20);
  cr_assert_eq(s.num_pages_moved, 20, "nothing idle to move: new pages");
  cr_assert_eq(s.num_device_syncs, 0, "the default stream passed a's free");
  cr_assert_eq(s.reserved_bytes[L].current, 92 * MiB);
  check_mapped_is_reserved(p);
  check_invariants(p);
  check_and_free(p, b, 50 * MiB, 2); /* c's pattern did not reach the pages b took */
  check_and_free(p, c, 40 * MiB, 4);
  check_and_free(p, pin, 2 * MiB, 3);
  cr_assert_eq(gpupool_empty_cache(p), 92 * MiB);
  cr_assert_eq(pc_stats(p).num_alloc_unmaps, 20, "empty_cache's unmaps are not the allocations'");
  gpupool_destroy(p);
}

Test(pool_expandable, prefers_a_mapped_block_to_moving_pages) {
  gpupool *p = expandable_pool(0);
  void *keep = take(p, 12 * MiB, 1);
  void *a = take(p, 40 * MiB, 2);
  void *c = take(p, 44 * MiB, 3);
  check_and_free(p, a, 40 * MiB, 2);
  check_and_free(p, c, 44 * MiB, 3);
  size_t moved = pc_stats(p).num_pages_moved;
  void *d = take(p, 40 * MiB, 4); /* the 40 MiB block, still mapped: a cache hit */
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_pages_moved, moved);
  cr_assert_eq(s.reserved_bytes[L].current, (12 + 40 + 44) * MiB);
  check_and_free(p, d, 40 * MiB, 4);
  check_and_free(p, keep, 12 * MiB, 1);
  gpupool_destroy(p);
}

Test(pool_expandable, empty_cache_returns_idle_pages_of_used_segments) {
  gpupool *p = expandable_pool(0);
  void *a = take(p, 3 * MiB, 1);  /* pages 0-1 of a 20 MiB segment */
  void *b = take(p, 14 * MiB, 2); /* [3, 17) MiB: pages 1-8 */
  check_and_free(p, b, 14 * MiB, 2);
  cr_assert_eq(pc_stats(p).reserved_bytes[L].current, 9 * PAGE);
  size_t released = gpupool_empty_cache(p);
  /* pages 2-8 lie wholly in the free block after a; page 1 is shared */
  cr_assert_eq(released, 7 * PAGE);
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.reserved_bytes[L].current, 2 * PAGE);
  cr_assert_eq(s.segment[L].current, 1, "the segment stays: a lives in it");
  cr_assert_eq(s.largest_free_block, 1 * MiB,
               "the free block [3, 20) MiB holds only the mapped rest of page 1");
  check_mapped_is_reserved(p);
  check_invariants(p);
  void *c = take(p, 14 * MiB, 3); /* maps them again */
  cr_assert_eq(pc_stats(p).reserved_bytes[L].current, 9 * PAGE);
  check_and_free(p, c, 14 * MiB, 3);
  check_and_free(p, a, 3 * MiB, 1);
  cr_assert_eq(gpupool_empty_cache(p), 9 * PAGE);
  s = pc_stats(p);
  cr_assert_eq(s.reserved_bytes[A].current, 0);
  cr_assert_eq(s.segment[A].current, 0);
  cr_assert_eq(s.num_device_alloc, s.num_device_free);
  gpupool_destroy(p);
}

Test(pool_expandable, a_full_device_moves_pages_then_fails_cleanly) {
  gpupool *p = moving_pool(64 * MiB);
  void *a = take(p, 40 * MiB, 1);
  check_and_free(p, a, 40 * MiB, 1);
  void *b = take(p, 60 * MiB, 2); /* a's 20 pages where they are, 10 created: 64 MiB hold it */
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_alloc_retries, 0, "no cache flush was needed");
  cr_assert_eq(s.reserved_bytes[A].current, 60 * MiB);
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 10 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_assert_null(x);
  cr_assert(strstr(gpupool_last_error(), "out of memory"), "%s", gpupool_last_error());
  s = pc_stats(p);
  cr_assert_eq(s.num_ooms, 1);
  cr_assert_eq(s.reserved_bytes[A].current, 60 * MiB, "the failure changed nothing");
  check_invariants(p);
  check_mapped_is_reserved(p);
  check_and_free(p, b, 60 * MiB, 2);
  void *c = take(p, 62 * MiB, 3); /* the pool still works */
  check_and_free(p, c, 62 * MiB, 3);
  gpupool_destroy(p);
}

Test(pool_expandable, pages_under_a_pending_free_do_not_move) {
  gpupool *p = expandable_pool(0);
  gpupool_host_stream *side = gpupool_host_stream_create();
  void *a = take(p, 40 * MiB, 1);
  cr_assert_eq(gpupool_record_stream(p, a, side), GPUPOOL_OK);
  gpupool_host_stream_enqueue(side); /* work on the other stream keeps a in use */
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  void *b = take(p, 50 * MiB, 2);
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_pages_moved, 0, "a's pages are still in use on the other stream");
  cr_assert_eq(s.reserved_bytes[L].current, 90 * MiB);
  cr_assert_eq(pc_pattern_check(a, 40 * MiB, 1), SIZE_MAX, "a's data was kept");
  gpupool_host_stream_complete(side);
  check_and_free(p, b, 50 * MiB, 2);
  gpupool_host_stream_destroy(side);
  gpupool_destroy(p);
}

static void *take_on(gpupool *p, size_t size, gpupool_host_stream *s, uint64_t id) {
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, size, s), GPUPOOL_OK, "%s", gpupool_last_error());
  pc_pattern_fill(x, size, id);
  return x;
}

/* Pages moved to a block of the same stream keep their old mapping until the
 * stream has passed the work queued before their free: no synchronize; a
 * block placed over such a mapping waits for it (a synchronize only if the
 * stream has not passed it yet). */
Test(pool_expandable, moved_pages_keep_their_old_mapping_until_the_stream_passed_it) {
  for (int passed = 0; passed < 2; passed++) {
    gpupool *p = moving_pool(0);
    gpupool_host_stream *s = gpupool_host_stream_create();
    void *a = take_on(p, 40 * MiB, s, 1), *pin = take_on(p, 2 * MiB, s, 3);
    gpupool_host_stream_enqueue(s); /* a kernel still using a */
    check_and_free(p, a, 40 * MiB, 1);
    void *b = take_on(p, 50 * MiB, s, 2); /* a's 20 pages move after pin */
    gpupool_stats st = pc_stats(p);
    cr_assert_eq(st.num_pages_moved, 20);
    cr_assert_eq(st.num_device_syncs, 0);
    if (passed)
      gpupool_host_stream_complete(s);
    void *c = take_on(p, 40 * MiB, s, 4); /* where a was: its old mappings go first */
    st = pc_stats(p);
    cr_assert_eq(c, a);
    cr_assert_eq(st.num_device_syncs, passed ? 0 : 1);
    cr_assert_eq(st.reserved_bytes[L].current, 92 * MiB, "20 new pages under c");
    check_mapped_is_reserved(p);
    check_invariants(p);
    check_and_free(p, b, 50 * MiB, 2);
    check_and_free(p, c, 40 * MiB, 4);
    check_and_free(p, pin, 2 * MiB, 3);
    cr_assert_eq(gpupool_empty_cache(p), 92 * MiB);
    gpupool_destroy(p);
    gpupool_host_stream_destroy(s);
  }
}

/* A pool destroyed while old mappings still wait for their stream unmaps
 * them with the rest (ASan and the host backend's page file check it). */
Test(pool_expandable, destroy_with_old_mappings_pending) {
  gpupool *p = moving_pool(0);
  gpupool_host_stream *s = gpupool_host_stream_create();
  void *a = take_on(p, 40 * MiB, s, 1), *pin = take_on(p, 2 * MiB, s, 3);
  gpupool_host_stream_enqueue(s);
  check_and_free(p, a, 40 * MiB, 1);
  void *b = take_on(p, 50 * MiB, s, 2);
  cr_assert_eq(pc_stats(p).num_pages_moved, 20);
  check_and_free(p, b, 50 * MiB, 2);
  check_and_free(p, pin, 2 * MiB, 3);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(s);
}

/* Pages freed on another stream move only once that stream's work is done:
 * a synchronize when its fence has not completed. */
Test(pool_expandable, pages_of_another_busy_stream_move_after_a_synchronize) {
  gpupool *p = moving_pool(0);
  gpupool_host_stream *s1 = gpupool_host_stream_create(), *s2 = gpupool_host_stream_create();
  void *a = take_on(p, 40 * MiB, s1, 1);
  gpupool_host_stream_enqueue(s1);
  check_and_free(p, a, 40 * MiB, 1);
  void *b = take_on(p, 50 * MiB, s2, 2); /* s2's own range: a's pages move there */
  gpupool_stats st = pc_stats(p);
  cr_assert_eq(st.num_pages_moved, 20);
  cr_assert_eq(st.num_device_syncs, 1);
  cr_assert_eq(st.num_alloc_unmaps, 20, "their old mappings go now, after the synchronize");
  cr_assert_eq(st.reserved_bytes[L].current, 50 * MiB);
  check_mapped_is_reserved(p);
  check_and_free(p, b, 50 * MiB, 2);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(s1);
  gpupool_host_stream_destroy(s2);
}

/* Pages freed on another stream whose work is done (its fence completed)
 * move without a synchronize and keep their old mapping, like those of the
 * same stream. The first move finds s1's fence only just recorded: that
 * page moves after a synchronize and is unmapped at once. */
Test(pool_expandable, pages_of_another_idle_stream_keep_their_old_mapping) {
  gpupool *p = moving_pool(0);
  gpupool_host_stream *s1 = gpupool_host_stream_create(), *s2 = gpupool_host_stream_create();
  void *a = take_on(p, 40 * MiB, s1, 1);
  check_and_free(p, a, 40 * MiB, 1);
  void *b0 = take_on(p, 2 * MiB, s2, 2); /* one of a's pages, after a synchronize */
  gpupool_stats st = pc_stats(p);
  cr_assert_eq(st.num_pages_moved, 1);
  cr_assert_eq(st.num_device_syncs, 1);
  cr_assert_eq(st.num_alloc_unmaps, 1);
  void *b = take_on(p, 38 * MiB, s2, 3); /* a's other 19 pages: s1's fence has completed */
  st = pc_stats(p);
  cr_assert_eq(st.num_pages_moved, 20);
  cr_assert_eq(st.num_device_syncs, 1);
  cr_assert_eq(st.num_alloc_unmaps, 1, "the 19 old mappings stay");
  void *c = take_on(p, 40 * MiB, s1, 4); /* where a was on s1: the old mappings go */
  st = pc_stats(p);
  cr_assert_eq(c, a);
  cr_assert_eq(st.num_alloc_unmaps, 20);
  cr_assert_eq(st.num_device_syncs, 1);
  check_mapped_is_reserved(p);
  check_invariants(p);
  check_and_free(p, b0, 2 * MiB, 2);
  check_and_free(p, b, 38 * MiB, 3);
  check_and_free(p, c, 40 * MiB, 4);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(s1);
  gpupool_host_stream_destroy(s2);
}

Test(pool_expandable, needs_bfc_and_a_boolean) {
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST,
                       .strategy = GPUPOOL_STRATEGY_ROUND,
                       .tunables = "expandable_segments:True",
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_ERR_INVALID);
  cr_assert_null(p);
  cr_assert(strstr(gpupool_last_error(), "expandable_segments needs strategy bfc"), "%s",
            gpupool_last_error());
  o.strategy = GPUPOOL_STRATEGY_BFC;
  o.tunables = "expandable_segments:yes";
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "expandable_segments: 'yes' is not True or False"), "%s",
            gpupool_last_error());
  o.tunables = "expandable_segments:False";
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_destroy(p);
}

/* The trace shows pages changing hands: an unmap of the idle pages, then a
 * map of the new block's pages, each with the bytes involved. */
Test(pool_expandable, page_moves_are_segment_events_of_the_trace) {
  pool_events_enable(256);
  gpupool *p = moving_pool(0);
  void *pin, *b = pinned_move(p, &pin);
  event_ring *ring;
  cr_assert_eq(pool_event_rings_at(p, &ring, NULL, 1), 1);
  pool_event ev[64];
  uint64_t cursor = 0, skipped = 0;
  size_t n = event_ring_read(ring, &cursor, ev, 64, &skipped);
  event_ring_unref(ring);
  size_t mapped = 0, unmapped = 0, maps = 0;
  for (size_t i = 0; i < n; i++) {
    if (!(ev[i].flags & EVF_PAGES))
      continue;
    cr_assert(ev[i].type == EV_SEGMENT_ALLOC || ev[i].type == EV_SEGMENT_FREE);
    if (ev[i].type == EV_SEGMENT_ALLOC) {
      mapped += ev[i].size;
      maps++;
    } else {
      unmapped += ev[i].size;
      cr_assert_eq(ev[i].a, 42 * MiB,
                   "reserved as each page leaves: pin and a's 20 (a move "
                   "keeps them reserved; the 5 new pages come after)");
    }
  }
  cr_assert_eq(maps, 3, "a's pages, pin's, then b's");
  cr_assert_eq(mapped, 40 * MiB + 2 * MiB + 50 * MiB);
  cr_assert_eq(unmapped, 40 * MiB, "a's 20 idle pages, moved");
  check_and_free(p, b, 50 * MiB, 2);
  check_and_free(p, pin, 2 * MiB, 3);
  gpupool_destroy(p);
  pool_events_disable();
}

/* A training step whose shapes repeat maps its pages in the first steps and
 * then finds every block mapped: no page moves after that. y does not fit in
 * the holes its step leaves, so its pages move there and back until the
 * slack has grown by the pages that stop it (one per 8 moved here). Blocks
 * go where their pages are mapped (the start of a run of mapped pages inside
 * a free block, when its own start has none): the layout drifts down the
 * range for a few dozen steps, the pages moved from under the last step's
 * blocks, before the growth catches up. */
Test(pool_expandable, repeating_shapes_stop_moving_pages) {
  static const size_t step[] = {30 * MiB, 12 * MiB, 7 * MiB, 50 * MiB, 3 * MiB, 24 * MiB};
  enum { N = sizeof step / sizeof step[0], STEPS = 48 };
  gpupool *p =
      pc_pool(GPUPOOL_STRATEGY_BFC, 0, "expandable_segments:True,expandable_growth_moves:8");
  uint64_t moved_after[STEPS];
  for (int it = 0; it < STEPS; it++) {
    void *x[N];
    for (int i = 0; i < N; i++)
      x[i] = take(p, step[i], (uint64_t)i);
    for (int i = 0; i < N; i += 2) /* activations freed out of order */
      check_and_free(p, x[i], step[i], (uint64_t)i);
    void *y = take(p, 40 * MiB, 100);
    for (int i = 1; i < N; i += 2)
      check_and_free(p, x[i], step[i], (uint64_t)i);
    check_and_free(p, y, 40 * MiB, 100);
    moved_after[it] = pc_stats(p).num_pages_moved;
  }
  cr_assert_eq(moved_after[STEPS - 1], moved_after[32],
               "pages moved %llu after step 33, %llu after %d", (unsigned long long)moved_after[32],
               (unsigned long long)moved_after[STEPS - 1], STEPS);
  cr_assert_eq(moved_after[32], 136);
  cr_assert_gt(moved_after[32], moved_after[31], "the last move happens in step 33");
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.reserved_bytes[L].peak, 166 * MiB, "the range's high water: 126 MiB live + y");
  check_invariants(p);
  gpupool_destroy(p);
}

/* The default slack (5 %): new pages while the pool holds at most 1.05x the
 * most it has had allocated; idle pages move only for the rest. */
Test(pool_expandable, creates_pages_within_the_slack_and_moves_the_rest) {
  gpupool *p = expandable_pool(0);
  void *pin, *b = pinned_move(p, &pin); /* 25 pages: 1.05 x 52 MiB leaves room for 6 new ones */
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_pages_moved, 19);
  cr_assert_eq(s.reserved_bytes[L].current, 54 * MiB);
  cr_assert_leq(s.reserved_bytes[A].peak, 1.05 * (double)s.allocated_bytes[A].peak);
  check_mapped_is_reserved(p);
  check_invariants(p);
  check_and_free(p, b, 50 * MiB, 2);
  check_and_free(p, pin, 2 * MiB, 3);
  gpupool_destroy(p);

  p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "expandable_segments:True,expandable_slack_percent:25");
  b = pinned_move(p, &pin); /* 1.25 x 52 MiB: room for 11 new pages, 14 move */
  s = pc_stats(p);
  cr_assert_eq(s.num_pages_moved, 14);
  cr_assert_eq(s.reserved_bytes[L].current, 64 * MiB);
  check_mapped_is_reserved(p);
  check_and_free(p, b, 50 * MiB, 2);
  check_and_free(p, pin, 2 * MiB, 3);
  gpupool_destroy(p);
}

/* Slack allows new pages the device does not have: the pool moves idle ones
 * instead, without the OOM path's cache flush. */
Test(pool_expandable, a_full_device_moves_pages_despite_the_slack) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * MiB,
                       "expandable_segments:True,expandable_slack_percent:50");
  void *a = take(p, 40 * MiB, 1);
  void *pin = take(p, 2 * MiB, 3);
  check_and_free(p, a, 40 * MiB, 1);
  void *b = take(p, 60 * MiB, 2); /* 30 pages; 25 new ones do not fit in 64 MiB: 20 move */
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_alloc_retries, 0);
  cr_assert_eq(s.num_ooms, 0);
  cr_assert_eq(s.num_pages_moved, 20);
  cr_assert_eq(s.reserved_bytes[A].current, 62 * MiB);
  check_mapped_is_reserved(p);
  check_invariants(p);
  check_and_free(p, b, 60 * MiB, 2);
  check_and_free(p, pin, 2 * MiB, 3);
  gpupool_destroy(p);
}

/* Each expandable key's bad values: refused by gpupool_create and
 * gpupool_conf_check alike, the reason naming the key and its range. */
Test(pool_expandable, expandable_keys_are_checked) {
  static const struct {
    const char *conf, *key, *range;
  } bad[] = {
      {"expandable_slack_percent:101", "expandable_slack_percent: ", "(0 <= x <= 100)"},
      {"expandable_slack_percent:-1", "expandable_slack_percent: ", "(0 <= x <= 100)"},
      {"expandable_slack_percent:five", "expandable_slack_percent: ", "(0 <= x <= 100)"},
      {"expandable_growth_moves:-1", "expandable_growth_moves: ", "1048576"},
      {"expandable_growth_moves:1048577", "expandable_growth_moves: ", "1048576"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1, .tunables = bad[i].conf};
    gpupool *p = NULL;
    cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_ERR_INVALID, "%s", bad[i].conf);
    cr_assert_null(p);
    cr_assert(strstr(gpupool_last_error(), bad[i].key) &&
                  strstr(gpupool_last_error(), bad[i].range),
              "%s", gpupool_last_error());
    cr_assert_eq(gpupool_conf_check(&o, bad[i].conf), GPUPOOL_ERR_INVALID, "%s", bad[i].conf);
  }
}

/* A block goes where its pages are mapped, inside a free block whose start
 * has none: b's pages, idle in the free block [0, 40) MiB whose first half
 * gave its pages to c, take d at its end (against pin), with no page moved
 * or created (placed at the free block's start, d would move 8 pages). */
Test(pool_expandable, places_blocks_where_pages_are_mapped) {
  gpupool *p = moving_pool(0);
  void *a = take(p, 20 * MiB, 1), *b = take(p, 20 * MiB, 2), *pin = take(p, 4 * MiB, 3);
  cr_assert_eq((char *)b, (char *)a + 20 * MiB);
  check_and_free(p, a, 20 * MiB, 1);
  void *c = take(p, 30 * MiB, 4); /* past pin: a's 10 idle pages move, 5 are new */
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_pages_moved, 10);
  cr_assert_eq(s.num_device_alloc, 27);
  check_and_free(p, b, 20 * MiB, 2); /* the free block [0, 40): pages only in [20, 40) */
  void *d = take(p, 16 * MiB, 5);
  cr_assert_eq((char *)d, (char *)a + 24 * MiB, "d at the end of b's mapped pages");
  s = pc_stats(p);
  cr_assert_eq(s.num_pages_moved, 10, "no page moved for d");
  cr_assert_eq(s.num_device_alloc, 27, "no page created for d");
  check_mapped_is_reserved(p);
  check_invariants(p);
  /* [0, 24) has 2 pages, at its end: e's fewest missing pages are 6, at 8 MiB
   * (the 2 pages are e's, not moved) */
  void *e = take(p, 16 * MiB, 6);
  cr_assert_eq((char *)e, (char *)a + 8 * MiB);
  s = pc_stats(p);
  cr_assert_eq(s.num_pages_moved, 10);
  cr_assert_eq(s.num_device_alloc, 33);
  check_mapped_is_reserved(p);
  check_invariants(p);
  check_and_free(p, c, 30 * MiB, 4);
  check_and_free(p, d, 16 * MiB, 5);
  check_and_free(p, e, 16 * MiB, 6);
  check_and_free(p, pin, 4 * MiB, 3);
  check_invariants(p);
  gpupool_destroy(p);
}

/* Small blocks live in one-page segments whose pages count in the slack like
 * the large range's: the idle page of a free small segment moves to a large
 * block (reserved bytes follow it from small to large) before a page is
 * created, and a small block that needs a page then gets a new one. */
Test(pool_expandable, small_segment_pages_move_to_large_blocks) {
  gpupool *p = moving_pool(0);
  void *s1 = take(p, 512 * 1024, 1);
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.segment[GPUPOOL_STAT_SMALL].current, 1);
  cr_assert_eq(s.reserved_bytes[GPUPOOL_STAT_SMALL].current, PAGE);
  cr_assert_eq(s.num_device_alloc, 1, "the small segment's page");
  check_and_free(p, s1, 512 * 1024, 1);
  void *big = take(p, 2 * MiB, 2);
  s = pc_stats(p);
  cr_assert_eq(s.num_pages_moved, 1, "the small segment's idle page moved");
  cr_assert_eq(s.num_device_alloc, 1);
  cr_assert_eq(s.reserved_bytes[GPUPOOL_STAT_SMALL].current, 0);
  cr_assert_eq(s.reserved_bytes[L].current, PAGE);
  cr_assert_eq(s.reserved_bytes[A].current, PAGE);
  cr_assert_eq(s.reserved_bytes[A].peak, PAGE, "a move is no new reservation");
  cr_assert_eq(s.segment[GPUPOOL_STAT_SMALL].current, 1, "the small segment stays, unmapped");
  check_mapped_is_reserved(p);
  check_invariants(p);
  void *s2 = take(p, 512 * 1024, 3); /* no idle page anywhere: a new one */
  s = pc_stats(p);
  cr_assert_eq(s.num_device_alloc, 2);
  cr_assert_eq(s.num_pages_moved, 1);
  cr_assert_eq(s.reserved_bytes[GPUPOOL_STAT_SMALL].current, PAGE);
  cr_assert_eq(s.reserved_bytes[A].current, 2 * PAGE);
  check_mapped_is_reserved(p);
  check_invariants(p);
  check_and_free(p, s2, 512 * 1024, 3);
  check_and_free(p, big, 2 * MiB, 2);
  cr_assert_eq(gpupool_empty_cache(p), 2 * PAGE, "both pages, and the small segment");
  s = pc_stats(p);
  cr_assert_eq(s.reserved_bytes[A].current, 0);
  cr_assert_eq(s.segment[GPUPOOL_STAT_SMALL].current, 0);
  check_invariants(p);
  gpupool_destroy(p);
}

/* A small request that no small segment can serve over mapped pages takes
 * idle mapped pages of the large range instead of a page created or moved
 * for a small segment: there it is a block of the range (counted as large),
 * split to its size, and freed it merges with its neighbours, so that a
 * large block takes the same pages again. Only when the range has no mapped
 * stretch long enough does a small segment get a page. */
Test(pool_expandable, small_blocks_take_idle_pages_of_the_large_range) {
  gpupool *p = moving_pool(0);
  char *a = take(p, 4 * MiB, 1); /* 2 pages of the range */
  check_and_free(p, a, 4 * MiB, 1);
  char *s1 = take(p, 512 * 1024, 2); /* the hot path: the range's idle pages */
  cr_assert_eq(s1, a);
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_device_alloc, 2, "no page created");
  cr_assert_eq(s.num_pages_moved, 0, "no page moved");
  cr_assert_eq(s.segment[GPUPOOL_STAT_SMALL].current, 0, "no small segment");
  cr_assert_eq(s.allocation[L].current, 1);
  cr_assert_eq(s.allocated_bytes[L].current, 512 * 1024, "split to its size, counted as large");
  cr_assert_eq(s.allocated_bytes[GPUPOOL_STAT_SMALL].current, 0);
  cr_assert_eq(s.reserved_bytes[GPUPOOL_STAT_SMALL].current, 0);
  char *s2 = take(p, 1 * MiB, 3), *s3 = take(p, 1 * MiB, 4), *s4 = take(p, 1 * MiB, 5);
  cr_assert_eq(s2, a + 512 * 1024);
  cr_assert_eq(s3, a + 1536 * 1024);
  cr_assert_eq(s4, a + 2560 * 1024);
  s = pc_stats(p);
  cr_assert_eq(s.num_device_alloc, 2);
  cr_assert_eq(s.allocated_bytes[L].current, 3584 * 1024);
  check_mapped_is_reserved(p);
  check_invariants(p);
  /* 512 KiB left over mapped pages: the next MiB needs a page, a small
   * segment's (the slow path; no idle page anywhere, so a new one) */
  char *s5 = take(p, 1 * MiB, 6);
  s = pc_stats(p);
  cr_assert_eq(s.num_device_alloc, 3);
  cr_assert_eq(s.num_pages_moved, 0);
  cr_assert_eq(s.segment[GPUPOOL_STAT_SMALL].current, 1);
  cr_assert_eq(s.allocated_bytes[GPUPOOL_STAT_SMALL].current, 1 * MiB);
  cr_assert_eq(s.reserved_bytes[GPUPOOL_STAT_SMALL].current, PAGE);
  cr_assert_eq(s.reserved_bytes[L].current, 2 * PAGE);
  cr_assert(s5 < a || s5 >= a + 4 * MiB, "s5 in a small segment");
  check_mapped_is_reserved(p);
  check_invariants(p);
  /* freed out of order, they merge into the range's free block again */
  check_and_free(p, s3, 1 * MiB, 4);
  check_and_free(p, s1, 512 * 1024, 2);
  check_and_free(p, s4, 1 * MiB, 5);
  check_and_free(p, s2, 1 * MiB, 3);
  check_invariants(p);
  char *b = take(p, 4 * MiB, 7);
  cr_assert_eq(b, a, "the merged free block's pages, as a had them");
  s = pc_stats(p);
  cr_assert_eq(s.num_device_alloc, 3);
  cr_assert_eq(s.num_pages_moved, 0);
  cr_assert_eq(s.allocated_bytes[L].current, 4 * MiB);
  check_and_free(p, b, 4 * MiB, 7);
  check_and_free(p, s5, 1 * MiB, 6);
  cr_assert_eq(gpupool_empty_cache(p), 3 * PAGE);
  s = pc_stats(p);
  cr_assert_eq(s.reserved_bytes[A].current, 0);
  cr_assert_eq(s.segment[GPUPOOL_STAT_SMALL].current, 0);
  check_invariants(p);
  gpupool_destroy(p);
}

static int oom_reports;

static void count_report(pool_oom_report *r, void *arg) {
  (void)arg;
  oom_reports++;
  pool_oom_report_free(r);
}

/* Each stream's range is as large as the device: on a 32 TiB host-backend
 * device a process's 128 TiB of address space holds three or four. The
 * stream that finds none left fails with GPUPOOL_ERR_OOM that says so, and
 * with no device OOM counted or reported: the device is nearly empty. */
Test(pool_expandable, running_out_of_address_space_is_not_a_device_oom) {
  const size_t device = (size_t)32 << 40, max_streams = 64;
  gpupool *p = expandable_pool(device);
  pool_oom_observer o = {.deliver = count_report};
  pool_oom_set_observer(&o);
  gpupool_host_stream *s[64];
  void *x[64];
  size_t n = 0;
  gpupool_status st = GPUPOOL_OK;
  for (; n < max_streams; n++) {
    s[n] = gpupool_host_stream_create();
    x[n] = NULL;
    if ((st = gpupool_malloc(p, &x[n], 4 * MiB, s[n])) != GPUPOOL_OK)
      break;
  }
  cr_assert_lt(n, max_streams, "%zu streams of 32 TiB ranges fit: is the address space larger?", n);
  cr_assert_gt(n, 0, "no 32 TiB range fits at all");
  cr_assert_eq(st, GPUPOOL_ERR_OOM, "%s", gpupool_status_string(st));
  const char *why = gpupool_last_error();
  char range[64];
  snprintf(range, sizeof range, "a new address range of %zu bytes", device);
  cr_expect(strstr(why, "out of virtual address space, not of device memory"), "%s", why);
  cr_expect(strstr(why, range), "the size asked: %s", why);
  cr_expect_neq(strncmp(why, "CUDA out of memory.", 19), 0, "%s", why);
  gpupool_stats st_after = pc_stats(p);
  cr_expect_eq(st_after.num_ooms, 0, "not a device OOM");
  cr_expect_eq(st_after.num_alloc_retries, 1, "the cache was emptied for a retry first");
  cr_expect_eq(oom_reports, 0, "no OOM report");
  /* The address space of a freed range comes back with the retry. */
  pc_must_free(p, x[0]);
  void *y = NULL;
  cr_expect_eq(gpupool_malloc(p, &y, 4 * MiB, s[n]), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(pc_stats(p).num_alloc_retries, 2);
  pool_oom_set_observer(NULL);
  if (y)
    pc_must_free(p, y);
  for (size_t i = 1; i < n; i++)
    pc_must_free(p, x[i]);
  gpupool_destroy(p);
  for (size_t i = 0; i <= n; i++)
    gpupool_host_stream_destroy(s[i]);
}
