/* The statistics themselves: exact values of every stat after a short known
 * sequence, peaks, and the two resets. */
#include <criterion/criterion.h>
#include <string.h>

#include "helpers/pool_check.h"
#include "pool/pool_view.h"

#define KiB PC_KiB
#define MiB PC_MiB
#define A   GPUPOOL_STAT_ALL
#define S   GPUPOOL_STAT_SMALL
#define L   GPUPOOL_STAT_LARGE

static void expect_stat(const gpupool_stat *s, int64_t current, int64_t peak, int64_t allocated,
                        int64_t freed, const char *name) {
  cr_expect_eq(s->current, current, "%s.current %lld, expected %lld", name, (long long)s->current,
               (long long)current);
  cr_expect_eq(s->peak, peak, "%s.peak %lld, expected %lld", name, (long long)s->peak,
               (long long)peak);
  cr_expect_eq(s->allocated, allocated, "%s.allocated %lld, expected %lld", name,
               (long long)s->allocated, (long long)allocated);
  cr_expect_eq(s->freed, freed, "%s.freed %lld, expected %lld", name, (long long)s->freed,
               (long long)freed);
}

Test(pool_stats, exact_values_after_a_known_sequence) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a = pc_must_malloc(p, 1000, NULL); /* 1024 */
  pc_must_malloc(p, 3000, NULL);           /* 3072 */
  void *big = pc_must_malloc(p, 3 * MiB, NULL);
  pc_must_free(p, a);
  pc_must_free(p, big);
  gpupool_stats s = pc_stats(p);

  expect_stat(&s.allocation[A], 1, 3, 3, 2, "allocation[all]");
  expect_stat(&s.allocation[S], 1, 2, 2, 1, "allocation[small]");
  expect_stat(&s.allocation[L], 0, 1, 1, 1, "allocation[large]");
  expect_stat(&s.allocated_bytes[S], 3072, 4096, 4096, 1024, "allocated_bytes[small]");
  expect_stat(&s.allocated_bytes[L], 0, 3 * MiB, 3 * MiB, 3 * MiB, "allocated_bytes[large]");
  expect_stat(&s.requested_bytes[S], 3000, 4000, 4000, 1000, "requested_bytes[small]");
  expect_stat(&s.active_bytes[S], 3072, 4096, 4096, 1024, "active_bytes[small]");
  expect_stat(&s.active[A], 1, 3, 3, 2, "active[all]");
  expect_stat(&s.segment[S], 1, 1, 1, 0, "segment[small]");
  expect_stat(&s.segment[L], 1, 1, 1, 0, "segment[large]");
  expect_stat(&s.reserved_bytes[S], 2 * MiB, 2 * MiB, 2 * MiB, 0, "reserved_bytes[small]");
  expect_stat(&s.reserved_bytes[L], 20 * MiB, 20 * MiB, 20 * MiB, 0, "reserved_bytes[large]");
  /* small: the freed 1024 B hole and the tail; large: the segment is whole again */
  cr_expect_eq(s.inactive_split[S].current, 2);
  cr_expect_eq(s.inactive_split_bytes[S].current, 1024 + 2 * MiB - 4096);
  cr_expect_eq(s.inactive_split[L].current, 0);
  cr_expect_eq(s.inactive_split_bytes[L].current, 0);
  cr_expect_eq(s.free_blocks, 3);
  cr_expect_eq(s.largest_free_block, 20 * MiB);
  cr_expect_eq(s.num_cache_hits, 1);
  cr_expect_eq(s.num_device_sourced, 2);
  cr_expect_eq(s.num_device_alloc, 2);
  cr_expect_eq(s.num_device_free, 0);
  cr_expect_eq(s.num_frees, 2);
  cr_expect_eq(s.num_alloc_retries, 0);
  cr_expect_eq(s.num_ooms, 0);
  cr_expect_eq(s.pending_free_blocks, 0);
  char msg[256];
  cr_expect_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, 0, msg, sizeof msg), 0, "%s", msg);
  gpupool_destroy(p);
}

Test(pool_stats, reset_peak_restarts_peaks_from_current) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a = pc_must_malloc(p, 1 * MiB, NULL);
  pc_must_malloc(p, 1 * MiB, NULL);
  pc_must_free(p, a);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.allocated_bytes[A].peak, 2 * MiB);
  cr_expect_eq(s.allocated_bytes[A].current, 1 * MiB);
  gpupool_reset_peak_stats(p);
  s = pc_stats(p);
  cr_expect_eq(s.allocated_bytes[A].peak, 1 * MiB);
  cr_expect_eq(s.allocation[A].peak, 1);
  cr_expect_eq(s.reserved_bytes[A].peak, 2 * MiB, "one small segment");
  cr_expect_eq(s.allocated_bytes[A].allocated, 2 * MiB, "the reset keeps accumulations");
  pc_must_malloc(p, 512, NULL);
  s = pc_stats(p);
  cr_expect_eq(s.allocated_bytes[A].peak, 1 * MiB + 512);
  cr_expect_eq(gpupool_empty_cache(p), 0, "the small segment is in use");
  char msg[256];
  cr_expect_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, 0, msg, sizeof msg), 0, "%s", msg);
  gpupool_destroy(p);
}

Test(pool_stats, reset_accumulated_zeroes_counters_but_not_state) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 32 * MiB, NULL);
  void *keep = pc_must_malloc(p, 4096, NULL);
  pc_must_free(p, pc_must_malloc(p, 8192, NULL));
  pc_must_free(p, pc_must_malloc(p, 12 * MiB, NULL));
  void *x = NULL;
  cr_expect_eq(gpupool_malloc(p, &x, 40 * MiB, NULL), GPUPOOL_ERR_OOM);
  gpupool_stats before = pc_stats(p);
  gpupool_reset_accumulated_stats(p);
  gpupool_stats s = pc_stats(p);
  const gpupool_stat *all[] = {
      s.allocation,      s.segment,        s.active,       s.inactive_split,
      s.allocated_bytes, s.reserved_bytes, s.active_bytes, s.inactive_split_bytes,
      s.requested_bytes};
  const gpupool_stat *old[] = {before.allocation,      before.segment,
                               before.active,          before.inactive_split,
                               before.allocated_bytes, before.reserved_bytes,
                               before.active_bytes,    before.inactive_split_bytes,
                               before.requested_bytes};
  for (int k = 0; k < 9; k++)
    for (int i = 0; i < GPUPOOL_STAT_TYPES; i++) {
      cr_expect_eq(all[k][i].allocated, 0, "stat %d[%d].allocated", k, i);
      cr_expect_eq(all[k][i].freed, 0, "stat %d[%d].freed", k, i);
      cr_expect_eq(all[k][i].current, old[k][i].current, "stat %d[%d].current", k, i);
      cr_expect_eq(all[k][i].peak, old[k][i].peak, "stat %d[%d].peak", k, i);
    }
  cr_expect_eq(s.num_alloc_retries, 0);
  cr_expect_eq(s.num_ooms, 0);
  cr_expect_eq(s.num_device_alloc, 0);
  cr_expect_eq(s.num_device_free, 0);
  cr_expect_eq(s.num_cache_hits, 0);
  cr_expect_eq(s.num_device_sourced, 0);
  cr_expect_eq(s.num_frees, 0);
  cr_expect_eq(s.num_sync_events, 0);
  pool_histogram h;
  pool_get_histogram(p, &h);
  cr_expect_eq(h.count, 0, "the size histogram counts allocations: reset with them");
  cr_expect_eq(h.sum, 0);
  pool_device_timing t;
  pool_get_device_timing(p, &t);
  cr_expect_eq(t.alloc_count + t.free_count + t.alloc_ns_total + t.free_ns_total, 0,
               "device-call times count device calls: reset with them");
  cr_expect_eq(s.free_blocks, before.free_blocks, "state, not a counter");
  cr_expect_eq(s.largest_free_block, before.largest_free_block);
  char msg[256];
  cr_expect_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, PC_ACCUMULATED_RESET, msg, sizeof msg),
               0, "%s", msg);

  pc_must_free(p, keep);
  pc_must_malloc(p, 4096, NULL);
  s = pc_stats(p);
  cr_expect_eq(s.allocation[A].allocated, 1);
  cr_expect_eq(s.allocation[A].freed, 1);
  cr_expect_eq(s.num_cache_hits, 1);
  cr_expect_eq(s.num_frees, 1);
  cr_expect_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, PC_ACCUMULATED_RESET, msg, sizeof msg),
               0, "%s", msg);
  gpupool_destroy(p);
}

Test(pool_stats, get_stats_is_idempotent) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_ROUND, 0, NULL);
  pc_must_malloc(p, 5000, NULL);
  pc_must_free(p, pc_must_malloc(p, 3 * MiB, NULL));
  gpupool_stats a = pc_stats(p), b = pc_stats(p);
  cr_expect_eq(memcmp(&a, &b, sizeof a), 0, "reading the stats changed them");
  gpupool_destroy(p);
}

/* active = allocation + frees waiting on other streams: its current,
 * accumulations and peak while a free is pending, after it completes, and
 * after the resets. */
Test(pool_stats, active_counts_pending_frees_exactly) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 << 20, NULL);
  gpupool_host_stream *s1 = gpupool_host_stream_create();
  void *a, *b, *c, *d;
  cr_assert_eq(gpupool_malloc(p, &a, 1000, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_record_stream(p, a, s1), GPUPOOL_OK);
  gpupool_host_stream_enqueue(s1);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK); /* pending: 1024 B stay active */
  cr_assert_eq(gpupool_malloc(p, &b, 1000, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &c, 3000, NULL), GPUPOOL_OK);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.allocation[GPUPOOL_STAT_ALL].current, 2);
  cr_expect_eq(s.allocation[GPUPOOL_STAT_ALL].peak, 2);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].current, 3);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].peak, 3);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].allocated, 3);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].freed, 0);
  cr_expect_eq(s.active_bytes[GPUPOOL_STAT_SMALL].current, 1024 + 1024 + 3072);
  cr_expect_eq(s.active_bytes[GPUPOOL_STAT_SMALL].peak, 1024 + 1024 + 3072);
  cr_expect_eq(s.active_bytes[GPUPOOL_STAT_LARGE].current, 0);

  gpupool_host_stream_complete(s1);
  cr_assert_eq(gpupool_free(p, c), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &d, 512, NULL), GPUPOOL_OK); /* polls: a completes */
  s = pc_stats(p);
  cr_expect_eq(s.pending_free_blocks, 0);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].current, 2);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].peak, 3);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].allocated, 4);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].freed, 2);
  cr_expect_eq(s.active_bytes[GPUPOOL_STAT_ALL].current, 1024 + 512);
  cr_expect_eq(s.active_bytes[GPUPOOL_STAT_ALL].peak, 1024 + 1024 + 3072);

  gpupool_reset_peak_stats(p);
  s = pc_stats(p);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].peak, 2);
  cr_expect_eq(s.active_bytes[GPUPOOL_STAT_ALL].peak, 1024 + 512);
  gpupool_reset_accumulated_stats(p);
  s = pc_stats(p);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].allocated, 0);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].freed, 0);
  cr_expect_eq(s.active[GPUPOOL_STAT_ALL].current, 2);
  gpupool_free(p, b);
  gpupool_free(p, d);
  gpupool_host_stream_destroy(s1);
  gpupool_destroy(p);
}

/* inactive_split as PyTorch counts it: cutting a request out of a block that
 * is already an inactive split block shrinks it (bytes freed by the part
 * taken) without counting a block freed and another allocated. */
Test(pool_stats, inactive_split_accumulates_as_pytorch_does) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a = pc_must_malloc(p, 5 * MiB, NULL);  /* a 20 MiB segment: 15 MiB split off */
  void *b = pc_must_malloc(p, 12 * MiB, NULL); /* cut from those 15 MiB: 3 MiB stay */
  gpupool_stats s = pc_stats(p);
  expect_stat(&s.inactive_split[L], 1, 1, 1, 0, "inactive_split");
  expect_stat(&s.inactive_split_bytes[L], 3 * MiB, 15 * MiB, 15 * MiB, 12 * MiB,
              "inactive_split_bytes");
  pc_must_free(p, a);
  pc_must_free(p, b);
  gpupool_destroy(p);
}

/* Freeing changes inactive_split by its net amount, as PyTorch counts it: a
 * free that merges with the free rest of the segment leaves the count as it
 * was; one that merges two neighbours into an unsplit segment removes two. */
Test(pool_stats, inactive_split_changes_by_net_amount_on_free) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a = pc_must_malloc(p, 1024, NULL); /* splits the 2 MiB segment: the rest is one */
  void *b = pc_must_malloc(p, 1024, NULL); /* cut from the rest: the rest shrinks */
  void *c = pc_must_malloc(p, 1024, NULL);
  pc_must_free(p, a); /* no free neighbour: +1 */
  pc_must_free(p, c); /* merges with the rest, still one block: net 0 */
  gpupool_stats s = pc_stats(p);
  expect_stat(&s.inactive_split[S], 2, 2, 2, 0, "inactive_split after freeing a and c");
  pc_must_free(p, b); /* merges a and the rest: the segment is whole again, -2 */
  s = pc_stats(p);
  expect_stat(&s.inactive_split[S], 0, 2, 2, 2, "inactive_split after freeing b");
  /* bytes: +(2 MiB - 1 KiB) at a's split, -1 KiB for b and for c, +1 KiB
   * for a's free, net +1 KiB for c's, -(2 MiB - 1 KiB) for b's. */
  expect_stat(&s.inactive_split_bytes[S], 0, 2 * MiB - 1 * KiB, 2 * MiB + 1 * KiB,
              2 * MiB + 1 * KiB, "inactive_split_bytes");
  gpupool_destroy(p);
}

/* One thread, two streams: the pool-wide peaks are the peaks of the sums
 * over the streams, even when no one read the stats at the peak. */
Test(pool_stats, peaks_span_streams_of_one_thread) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  gpupool_host_stream *s1 = gpupool_host_stream_create(), *s2 = gpupool_host_stream_create();
  void *a = pc_must_malloc(p, 1 * MiB, s1);
  void *b = pc_must_malloc(p, 1 * MiB, s2);
  void *c = pc_must_malloc(p, 3000, s2);
  pc_must_free(p, a);
  pc_must_free(p, b);
  pc_must_free(p, c);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.allocation[A].current, 0);
  cr_expect_eq(s.allocation[A].peak, 3);
  cr_expect_eq(s.allocated_bytes[A].peak, 2 * MiB + 3072);
  cr_expect_eq(s.allocated_bytes[S].peak, 2 * MiB + 3072);
  cr_expect_eq(s.requested_bytes[A].peak, 2 * MiB + 3000);
  cr_expect_eq(s.active_bytes[A].peak, 2 * MiB + 3072);
  gpupool_reset_peak_stats(p);
  s = pc_stats(p);
  cr_expect_eq(s.allocation[A].peak, 0);
  cr_expect_eq(s.allocated_bytes[A].peak, 0);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(s1);
  gpupool_host_stream_destroy(s2);
}

/* The sums follow frees on a stream other than the one allocated from (a
 * peak counts what is live then, not what was), and start again from the
 * current values after a reset, also below the peaks before it. Blocks of
 * 12 MiB fill segments of their own: no split block raises a peak. */
Test(pool_stats, peaks_span_streams_after_frees_and_resets) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  gpupool_host_stream *s1 = gpupool_host_stream_create(), *s2 = gpupool_host_stream_create();
  void *a = pc_must_malloc(p, 12 * MiB, s1);
  pc_must_free(p, pc_must_malloc(p, 12 * MiB, s1)); /* c will find its segment cached */
  void *b = pc_must_malloc(p, 12 * MiB, s2);
  pc_must_free(p, b);
  void *c = pc_must_malloc(p, 12 * MiB, s1);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.allocated_bytes[A].peak, 24 * MiB, "two blocks were live at once, not three");
  cr_expect_eq(s.allocation[A].peak, 2);
  cr_expect_eq(s.inactive_split_bytes[A].peak, 0);
  pc_must_free(p, a);
  pc_must_free(p, c);
  gpupool_reset_peak_stats(p);
  a = pc_must_malloc(p, 12 * MiB, s1);
  b = pc_must_malloc(p, 12 * MiB, s2);
  pc_must_free(p, a);
  pc_must_free(p, b);
  s = pc_stats(p);
  cr_expect_eq(s.allocated_bytes[A].peak, 24 * MiB, "after the reset: the sum, not one stream's");
  cr_expect_eq(s.requested_bytes[A].peak, 24 * MiB);
  cr_expect_eq(s.allocation[A].peak, 2);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(s1);
  gpupool_host_stream_destroy(s2);
}
