/* The gpupool segment index that attributes CUPTI records to pools. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "agent/segment_index.h"
#include "core/clock.h"

#define MiB (1ull << 20)

Test(cupti_segments, live_segment_contains_its_range_only) {
  cupti_note_segment(100 * MiB, 2 * MiB, 0, 1);
  cupti_note_segment(110 * MiB, 20 * MiB, 0, 1);
  cupti_note_segment(90 * MiB, 4 * MiB, 1, 1);
  cr_assert_eq(segment_index_live_count(), 3);
  cr_assert(segment_index_contains(100 * MiB, 0));
  cr_assert(segment_index_contains(102 * MiB - 1, 0));
  cr_assert_not(segment_index_contains(102 * MiB, 0));
  cr_assert_not(segment_index_contains(100 * MiB - 1, 0));
  cr_assert(segment_index_contains(129 * MiB, 0));
  cr_assert(segment_index_contains(93 * MiB, 0));
  cr_assert_not(segment_index_contains(130 * MiB, 0));
  cr_assert_not(segment_index_contains(1, 0));
}

Test(cupti_segments, freed_segment_is_gone_when_not_retaining) {
  cupti_note_segment(100 * MiB, 2 * MiB, 0, 1);
  cupti_note_segment(100 * MiB, 2 * MiB, 0, 0);
  cr_assert_eq(segment_index_live_count(), 0);
  cr_assert_eq(segment_index_dead_count(), 0);
  cr_assert_not(segment_index_contains(100 * MiB, 0));
}

Test(cupti_segments, dead_segment_claims_records_stamped_before_its_death) {
  segment_index_retain_dead(1);
  uint64_t before = clock_realtime_ns();
  cupti_note_segment(200 * MiB, 2 * MiB, 0, 1);
  cupti_note_segment(200 * MiB, 2 * MiB, 0, 0);
  uint64_t after = clock_realtime_ns();
  cr_assert_eq(segment_index_live_count(), 0);
  cr_assert_eq(segment_index_dead_count(), 1);
  /* The pool's own allocation record, decoded late, is still the pool's... */
  cr_assert(segment_index_contains(200 * MiB + 4096, before));
  /* ...an allocation at that address after the free is someone else's. */
  cr_assert_not(segment_index_contains(200 * MiB + 4096, after + 1));
  /* A flush that began after the death purges it. */
  segment_index_purge(before);
  cr_assert_eq(segment_index_dead_count(), 1);
  segment_index_purge(after + 1);
  cr_assert_eq(segment_index_dead_count(), 0);
  cr_assert_not(segment_index_contains(200 * MiB + 4096, before));
}

Test(cupti_segments, retain_off_drops_dead_segments) {
  segment_index_retain_dead(1);
  cupti_note_segment(300 * MiB, 2 * MiB, 0, 1);
  cupti_note_segment(300 * MiB, 2 * MiB, 0, 0);
  cr_assert_eq(segment_index_dead_count(), 1);
  segment_index_retain_dead(0);
  cr_assert_eq(segment_index_dead_count(), 0);
}

Test(cupti_segments, overlapping_new_segment_replaces_stale_ones) {
  cupti_note_segment(400 * MiB, 2 * MiB, 0, 1);
  cupti_note_segment(402 * MiB, 2 * MiB, 0, 1);
  cupti_note_segment(406 * MiB, 2 * MiB, 0, 1);
  /* Frees of the first two were never noted; a new segment covers both. */
  cupti_note_segment(401 * MiB, 4 * MiB, 0, 1);
  cr_assert_eq(segment_index_live_count(), 2);
  cr_assert(segment_index_contains(404 * MiB, 0));
  cr_assert_not(segment_index_contains(400 * MiB, 0));
  cr_assert(segment_index_contains(407 * MiB, 0));
}

Test(cupti_segments, many_segments_in_any_order) {
  enum { N = 1000 };
  for (uint64_t i = 0; i < N; i++) {
    uint64_t k = (i * 7919) % N; /* a permutation of 0..N-1 */
    cupti_note_segment((1000 + 4 * k) * MiB, 2 * MiB, 0, 1);
  }
  cr_assert_eq(segment_index_live_count(), N);
  for (uint64_t k = 0; k < N; k++) {
    cr_assert(segment_index_contains((1000 + 4 * k) * MiB + MiB, 0));
    cr_assert_not(segment_index_contains((1000 + 4 * k + 2) * MiB, 0));
  }
  for (uint64_t k = 0; k < N; k += 2)
    cupti_note_segment((1000 + 4 * k) * MiB, 2 * MiB, 0, 0);
  cr_assert_eq(segment_index_live_count(), N / 2);
  for (uint64_t k = 0; k < N; k++)
    cr_assert_eq(segment_index_contains((1000 + 4 * k) * MiB, 0), (int)(k % 2));
}

Test(cupti_segments, zero_sized_or_null_segments_are_ignored) {
  cupti_note_segment(0, 2 * MiB, 0, 1);
  cupti_note_segment(500 * MiB, 0, 0, 1);
  cr_assert_eq(segment_index_live_count(), 0);
}

static uint64_t g_heard_addr, g_heard_size;
static void listener(uint64_t addr, uint64_t size) {
  g_heard_addr = addr;
  g_heard_size = size;
}

Test(cupti_segments, listener_hears_new_segments) {
  segment_index_set_listener(listener);
  cupti_note_segment(600 * MiB, 20 * MiB, 0, 1);
  cr_assert_eq(g_heard_addr, 600 * MiB);
  cr_assert_eq(g_heard_size, 20 * MiB);
  g_heard_addr = 0;
  cupti_note_segment(600 * MiB, 20 * MiB, 0, 0);
  cr_assert_eq(g_heard_addr, 0, "frees are not announced");
  segment_index_set_listener(NULL);
}
