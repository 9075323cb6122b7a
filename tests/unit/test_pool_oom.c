/* Out of memory on a small simulated device: cached segments released and
 * one retry before GPUPOOL_ERR_OOM, live allocations untouched, the pool
 * usable after; fault injection; garbage_collection_threshold,
 * reserve_percent and empty_cache. */
#include <criterion/criterion.h>
#include <string.h>

#include "helpers/pool_check.h"

#define KiB PC_KiB
#define MiB PC_MiB
#define A   GPUPOOL_STAT_ALL

static void expect_oom(gpupool *p, size_t size) {
  void *ptr = NULL;
  gpupool_status st = gpupool_malloc(p, &ptr, size, NULL);
  cr_expect_eq(st, GPUPOOL_ERR_OOM, "malloc(%zu): %s, expected out of memory", size,
               gpupool_status_string(st));
  cr_expect_neq(gpupool_last_error()[0], '\0', "an OOM gives a reason");
}

Test(pool_oom, retry_after_releasing_cached_segments_succeeds) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * MiB, NULL);
  pc_must_free(p, pc_must_malloc(p, 30 * MiB, NULL));
  void *b = pc_must_malloc(p, 40 * MiB, NULL); /* 30 cached + 40 > 64: release, retry */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_alloc_retries, 1);
  cr_expect_eq(s.num_ooms, 0);
  cr_expect_eq(s.num_device_free, 1);
  cr_expect_eq(s.num_device_alloc, 2);
  cr_expect_eq(s.reserved_bytes[A].current, 40 * (int64_t)MiB);
  cr_expect_eq(s.segment[A].current, 1);
  pc_pattern_fill(b, 40 * MiB, 1);
  cr_expect_eq(pc_pattern_check(b, 40 * MiB, 1), SIZE_MAX);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_oom, oom_leaves_live_allocations_intact_and_the_pool_usable) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * MiB, NULL);
  void *big = pc_must_malloc(p, 30 * MiB, NULL);
  void *small =
      pc_must_malloc(p, 1000, NULL); /* a split 2 MiB segment: never released while used */
  pc_pattern_fill(big, 30 * MiB, 11);
  pc_pattern_fill(small, 1000, 12);
  pc_must_free(p, pc_must_malloc(p, 12 * MiB, NULL)); /* 12 MiB cached */
  gpupool_stats before = pc_stats(p);

  expect_oom(p, 40 * MiB); /* 30 + 2 + 40 > 64 even after releasing the cache */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_ooms, 1);
  cr_expect_eq(s.num_alloc_retries, 1);
  cr_expect_eq(s.num_device_free, 1, "the cached 12 MiB segment was released before failing");
  cr_expect_eq(s.reserved_bytes[A].current, 32 * (int64_t)MiB);
  cr_expect_eq(s.segment[A].current, 2);
  cr_expect_eq(s.allocation[A].current, before.allocation[A].current);
  cr_expect_eq(s.allocated_bytes[A].current, before.allocated_bytes[A].current);
  cr_expect_eq(s.requested_bytes[A].current, before.requested_bytes[A].current);
  cr_expect_eq(s.allocation[A].allocated, before.allocation[A].allocated,
               "a failed malloc is not an allocation");
  cr_expect_eq(s.num_cache_hits + s.num_device_sourced,
               before.num_cache_hits + before.num_device_sourced);
  cr_expect_eq(pc_pattern_check(big, 30 * MiB, 11), SIZE_MAX, "a live allocation was touched");
  cr_expect_eq(pc_pattern_check(small, 1000, 12), SIZE_MAX, "a live allocation was touched");
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);

  void *c = pc_must_malloc(p, 20 * MiB, NULL); /* 52 MiB of 64: fits */
  pc_pattern_fill(c, 20 * MiB, 13);
  pc_must_free(p, big);
  pc_must_free(p, small);
  cr_expect_eq(pc_pattern_check(c, 20 * MiB, 13), SIZE_MAX);
  pc_must_free(p, c);
  gpupool_empty_cache(p);
  s = pc_stats(p);
  char msg[256];
  cr_expect_eq(pc_check_empty(&s, msg, sizeof msg), 0, "%s", msg);
  gpupool_destroy(p);
}

Test(pool_oom, a_request_larger_than_the_device_fails_for_each_strategy) {
  static const gpupool_strategy st[] = {GPUPOOL_STRATEGY_BFC, GPUPOOL_STRATEGY_ROUND,
                                        GPUPOOL_STRATEGY_NAIVE};
  for (int k = 0; k < 3; k++) {
    gpupool *p = pc_pool(st[k], 16 * MiB, NULL);
    void *x = pc_must_malloc(p, 1 * MiB, NULL); /* a 1 or 2 MiB segment */
    expect_oom(p, 16 * MiB); /* as large as the device: the cache released, a retry */
    gpupool_stats mid = pc_stats(p);
    expect_oom(p, 64 * MiB); /* larger: no retry can help, it fails at once */
    gpupool_stats s = pc_stats(p);
    cr_expect_eq(s.num_ooms, 2, "strategy %d", st[k]);
    cr_expect_eq(s.num_alloc_retries, 1, "strategy %d", st[k]);
    cr_expect_eq(s.num_device_alloc, mid.num_device_alloc, "strategy %d", st[k]);
    cr_expect(strstr(gpupool_last_error(), "out of memory"), "%s", gpupool_last_error());
    cr_expect_eq(s.allocation[A].current, 1);
    pc_expect_consistent(p, st[k]);
    pc_must_free(p, x);
    gpupool_destroy(p);
  }
}

/* A request larger than the device leaves the cache and, with expandable
 * segments, the pages where they are: no retry, no page created or moved. */
Test(pool_oom, a_request_larger_than_the_device_changes_nothing) {
  static const char *const tunables[] = {NULL, "expandable_segments:True"};
  for (int k = 0; k < 2; k++) {
    gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * MiB, tunables[k]);
    void *live = pc_must_malloc(p, 12 * MiB, NULL);
    pc_must_free(p, pc_must_malloc(p, 30 * MiB, NULL)); /* cached */
    gpupool_stats before = pc_stats(p);
    expect_oom(p, 65 * MiB);
    expect_oom(p, (size_t)1 << 44); /* 16 TiB */
    gpupool_stats s = pc_stats(p);
    cr_expect_eq(s.num_ooms, before.num_ooms + 2, "%s", tunables[k]);
    cr_expect_eq(s.num_alloc_retries, before.num_alloc_retries, "%s", tunables[k]);
    cr_expect_eq(s.num_device_alloc, before.num_device_alloc, "%s", tunables[k]);
    cr_expect_eq(s.num_device_free, before.num_device_free, "%s", tunables[k]);
    cr_expect_eq(s.num_pages_moved, before.num_pages_moved, "%s", tunables[k]);
    cr_expect_eq(s.reserved_bytes[A].current, before.reserved_bytes[A].current, "%s", tunables[k]);
    pc_must_free(p, pc_must_malloc(p, 30 * MiB, NULL)); /* still a cache hit */
    s = pc_stats(p);
    cr_expect_eq(s.num_device_alloc, before.num_device_alloc, "%s", tunables[k]);
    char msg[512];
    cr_expect_eq(
        pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, k ? PC_EXPANDABLE : 0, msg, sizeof msg), 0,
        "%s: %s", tunables[k], msg);
    pc_must_free(p, live);
    gpupool_destroy(p);
  }
}

Test(pool_oom, every_device_allocation_fails_with_fault_every_n_1) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "fault_every_n:1");
  expect_oom(p, 512);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_ooms, 1);
  cr_expect_eq(s.num_alloc_retries, 1);
  cr_expect_eq(s.num_device_alloc, 0);
  cr_expect_eq(s.reserved_bytes[A].current, 0);
  cr_expect_eq(gpupool_host_inject_faults(p, 0, 0, 0), GPUPOOL_OK); /* off */
  pc_must_malloc(p, 512, NULL);
  cr_expect_eq(pc_stats(p).num_device_alloc, 1);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_oom, fault_every_n_2_fails_every_second_attempt_and_the_retry_succeeds) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "fault_every_n:2");
  /* attempts 1 ok; 2 fails, 3 ok; 4 fails, 5 ok; ... */
  for (int i = 0; i < 10; i++)
    pc_must_malloc(p, 12 * MiB, NULL);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 10);
  cr_expect_eq(s.num_alloc_retries, 9);
  cr_expect_eq(s.num_ooms, 0);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_oom, injected_faults_do_not_touch_cache_hits) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x = pc_must_malloc(p, 4096, NULL);
  pc_must_free(p, x);
  cr_assert_eq(gpupool_host_inject_faults(p, 1, 0, 0), GPUPOOL_OK);
  cr_expect_eq(pc_must_malloc(p, 4096, NULL), x, "a cache hit needs no device call");
  pc_must_malloc(p, 512 * KiB, NULL); /* still room in the 2 MiB segment */
  expect_oom(p, 12 * MiB);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_cache_hits, 2);
  cr_expect_eq(s.num_ooms, 1);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

/* Outcomes of n allocations that each need a new segment. */
static void fault_outcomes(gpupool *p, char *out, int n) {
  for (int i = 0; i < n; i++) {
    void *x = NULL;
    gpupool_status st = gpupool_malloc(p, &x, 12 * MiB, NULL);
    cr_assert(st == GPUPOOL_OK || st == GPUPOOL_ERR_OOM, "%s", gpupool_status_string(st));
    out[i] = st == GPUPOOL_OK ? '.' : 'X';
    if (st == GPUPOOL_OK) {
      pc_must_free(p, x);
      gpupool_empty_cache(p);
    }
  }
  out[n] = '\0';
}

Test(pool_oom, fault_rate_is_seeded_and_counted) {
  enum { N = 200 };
  char o1[N + 1], o2[N + 1], o3[N + 1];
  gpupool *p1 = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "fault_rate:0.5,fault_seed:42");
  gpupool *p2 = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  cr_assert_eq(gpupool_host_inject_faults(p2, 0, 0.5, 42), GPUPOOL_OK);
  gpupool *p3 = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "fault_rate:0.5,fault_seed:43");
  fault_outcomes(p1, o1, N);
  fault_outcomes(p2, o2, N);
  fault_outcomes(p3, o3, N);
  cr_expect_str_eq(o1, o2, "the same seed gives the same faults");
  cr_expect_str_neq(o1, o3, "another seed gives other faults");
  int ooms = 0;
  for (int i = 0; i < N; i++)
    ooms += o1[i] == 'X';
  gpupool_stats s = pc_stats(p1);
  cr_expect_eq(s.num_ooms, (uint64_t)ooms);
  cr_expect(ooms > 0 && ooms < N, "%d of %d failed at rate 0.5 (both attempts fail 1 in 4)", ooms,
            N);
  cr_expect(s.num_alloc_retries > (uint64_t)ooms, "retries %llu, ooms %d",
            (unsigned long long)s.num_alloc_retries, ooms);
  cr_expect_eq(s.num_device_alloc, (uint64_t)(N - ooms));
  pc_expect_consistent(p1, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p1);
  gpupool_destroy(p2);
  gpupool_destroy(p3);

  gpupool *p4 = pc_pool(GPUPOOL_STRATEGY_ROUND, 0, "fault_rate:1");
  expect_oom(p4, 4096);
  cr_expect_eq(pc_stats(p4).num_device_alloc, 0);
  gpupool_destroy(p4);
}

Test(pool_oom, inject_faults_rejects_bad_arguments) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  cr_expect_neq(gpupool_host_inject_faults(NULL, 1, 0, 0), GPUPOOL_OK);
  cr_expect_eq(gpupool_host_inject_faults(p, 0, 1.5, 0), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_host_inject_faults(p, 0, -0.1, 0), GPUPOOL_ERR_INVALID);
  pc_must_malloc(p, 4096, NULL); /* injection stayed off */
  gpupool_destroy(p);
}

Test(pool_oom, garbage_collection_releases_the_oldest_cached_segments) {
  /* threshold: 0.5 * 128 MiB = 64 MiB */
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 128 * MiB, "garbage_collection_threshold:0.5");
  void *a = pc_must_malloc(p, 12 * MiB, NULL);
  void *b = pc_must_malloc(p, 14 * MiB, NULL);
  void *c = pc_must_malloc(p, 16 * MiB, NULL);
  pc_must_malloc(p, 20 * MiB, NULL);
  pc_must_malloc(p, 20 * MiB, NULL); /* 62 MiB reserved before it: no pass yet */
  cr_expect_eq(pc_stats(p).num_gc_runs, 0);
  pc_must_free(p, a); /* freed first: the oldest */
  pc_must_free(p, b);
  pc_must_free(p, c);

  /* 18 MiB misses the cache; 82 MiB > 64 MiB: release a (70), then b (56) */
  pc_must_malloc(p, 18 * MiB, NULL);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_gc_runs, 1);
  cr_expect_eq(s.num_device_free, 2);
  cr_expect_eq(s.num_alloc_retries, 0);
  cr_expect_eq(s.reserved_bytes[A].current, 74 * (int64_t)MiB);
  cr_expect_eq(s.largest_free_block, 16 * MiB, "c, freed last, stays cached");
  cr_expect_eq(pc_must_malloc(p, 16 * MiB, NULL), c);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_oom, garbage_collection_stays_idle_under_the_threshold) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 100 * MiB, "garbage_collection_threshold:0.5");
  pc_must_malloc(p, 12 * MiB, NULL);
  pc_must_free(p, pc_must_malloc(p, 12 * MiB, NULL));
  pc_must_malloc(p, 14 * MiB, NULL); /* 24 MiB reserved < 50 MiB */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_gc_runs, 0);
  cr_expect_eq(s.num_device_free, 0);
  cr_expect_eq(s.reserved_bytes[A].current, 38 * (int64_t)MiB);
  gpupool_destroy(p);
}

Test(pool_oom, reserve_percent_releases_the_cache_before_the_device_runs_low) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 100 * MiB, "reserve_percent:20");
  void *x[4];
  for (int i = 0; i < 4; i++)
    x[i] = pc_must_malloc(p, 12 * MiB, NULL);
  pc_must_free(p, x[0]);
  pc_must_free(p, x[1]);
  /* 52 MiB free on the device; 52 - 14 = 38 >= 20: nothing released */
  pc_must_malloc(p, 14 * MiB, NULL);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_free, 0);
  cr_expect_eq(s.reserved_bytes[A].current, 62 * (int64_t)MiB);
  /* 38 MiB free; 38 - 22 = 16 < 20: both cached segments go first */
  pc_must_malloc(p, 22 * MiB, NULL);
  s = pc_stats(p);
  cr_expect_eq(s.num_device_free, 2);
  cr_expect_eq(s.num_alloc_retries, 0);
  cr_expect_eq(s.reserved_bytes[A].current, 60 * (int64_t)MiB);
  cr_expect_eq(s.free_blocks, 0);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_oom, empty_cache_returns_the_bytes_of_fully_free_segments) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *s512 = pc_must_malloc(p, 512, NULL);     /* keeps its 2 MiB segment */
  pc_must_free(p, pc_must_malloc(p, 512, NULL)); /* a free block in a used segment */
  void *x = pc_must_malloc(p, 12 * MiB, NULL);
  void *y = pc_must_malloc(p, 2 * MiB, NULL);
  pc_must_free(p, x); /* a free 12 MiB segment */
  pc_must_free(p, y); /* a free 20 MiB segment */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.reserved_bytes[A].current, 34 * (int64_t)MiB);
  cr_expect_eq(gpupool_empty_cache(p), 32 * MiB);
  s = pc_stats(p);
  cr_expect_eq(s.reserved_bytes[A].current, 2 * (int64_t)MiB);
  cr_expect_eq(s.segment[A].current, 1);
  cr_expect_eq(s.segment[GPUPOOL_STAT_LARGE].current, 0);
  cr_expect_eq(s.num_device_free, 2);
  cr_expect_eq(s.reserved_bytes[GPUPOOL_STAT_LARGE].freed, 32 * (int64_t)MiB);
  cr_expect_eq(s.allocation[A].current, 1);
  cr_expect_eq(s.reserved_bytes[A].peak, 34 * (int64_t)MiB, "peaks survive empty_cache");
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  cr_expect_eq(gpupool_empty_cache(p), 0, "nothing left to release");
  pc_must_free(p, s512);
  cr_expect_eq(gpupool_empty_cache(p), 2 * MiB);
  s = pc_stats(p);
  char msg[256];
  cr_expect_eq(pc_check_empty(&s, msg, sizeof msg), 0, "%s", msg);
  cr_expect_eq(gpupool_empty_cache(NULL), 0);
  gpupool_destroy(p);
}

Test(pool_oom, empty_cache_releases_every_cached_bucket_of_round_and_naive) {
  static const gpupool_strategy st[] = {GPUPOOL_STRATEGY_ROUND, GPUPOOL_STRATEGY_NAIVE};
  for (int k = 0; k < 2; k++) {
    gpupool *p = pc_pool(st[k], 0, NULL);
    void *keep = pc_must_malloc(p, 4096, NULL);
    pc_must_free(p, pc_must_malloc(p, 4096, NULL));
    pc_must_free(p, pc_must_malloc(p, 3 * MiB, NULL));
    gpupool_stats s = pc_stats(p);
    size_t cached = (size_t)(s.reserved_bytes[A].current - 4096);
    cr_expect_eq(gpupool_empty_cache(p), cached, "strategy %d", st[k]);
    s = pc_stats(p);
    cr_expect_eq(s.reserved_bytes[A].current, 4096);
    cr_expect_eq(s.free_blocks, 0);
    pc_must_free(p, keep);
    gpupool_destroy(p);
  }
}

Test(pool_oom, allocations_keep_working_after_many_ooms) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 32 * MiB, NULL);
  void *keep = pc_must_malloc(p, 10 * MiB, NULL);
  pc_pattern_fill(keep, 10 * MiB, 99);
  size_t n = pc_scaled(200);
  for (size_t i = 0; i < n; i++) {
    expect_oom(p, 24 * MiB);
    void *x = pc_must_malloc(p, 4 * MiB + i * 4096, NULL);
    pc_must_free(p, x);
  }
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_ooms, n);
  cr_expect_eq(pc_pattern_check(keep, 10 * MiB, 99), SIZE_MAX);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}
