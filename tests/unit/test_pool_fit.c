/* Which cached block a request gets: exact best fit on one stream, split and
 * coalesce, max_split_size_mb, the large pool's split rule, and the exact-size
 * buckets of round and naive. Observed by pointer identity and by stats. */
#include <criterion/criterion.h>

#include "helpers/pool_check.h"

#define KiB PC_KiB
#define MiB PC_MiB

static void *must_malloc(gpupool *p, size_t size) {
  void *ptr = NULL;
  gpupool_status st = gpupool_malloc(p, &ptr, size, NULL);
  cr_assert_eq(st, GPUPOOL_OK, "malloc(%zu): %s", size, gpupool_last_error());
  cr_assert_not_null(ptr);
  return ptr;
}

static void must_free(gpupool *p, void *ptr) {
  gpupool_status st = gpupool_free(p, ptr);
  cr_assert_eq(st, GPUPOOL_OK, "free(%p): %s", ptr, gpupool_last_error());
}

static void expect_consistent(gpupool *p, gpupool_strategy strategy) {
  gpupool_stats s = pc_stats(p);
  char msg[256];
  cr_expect_eq(pc_check_invariants(&s, strategy, 0, msg, sizeof msg), 0, "%s", msg);
}

static int within(const void *ptr, const void *block, size_t block_size) {
  return (const char *)ptr >= (const char *)block &&
         (const char *)ptr < (const char *)block + block_size;
}

static uint64_t device_allocs(gpupool *p) {
  return pc_stats(p).num_device_alloc;
}

Test(pool_fit, bfc_best_fit_takes_the_smallest_block_that_fits) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  /* free blocks of 4 KiB, 8 KiB and 2 KiB, each fenced by a live 512 B block */
  void *a = must_malloc(p, 4 * KiB);
  void *fa = must_malloc(p, 512);
  void *c = must_malloc(p, 8 * KiB);
  void *fc = must_malloc(p, 512);
  void *e = must_malloc(p, 2 * KiB);
  void *fe = must_malloc(p, 512);
  must_free(p, a);
  must_free(p, c);
  must_free(p, e);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 4, "three holes and the segment's tail");
  cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 4);

  void *x = must_malloc(p, 2 * KiB);
  cr_expect_eq(x, e, "2 KiB should take the 2 KiB hole");
  void *y = must_malloc(p, 3 * KiB);
  cr_expect(within(y, a, 4 * KiB), "3 KiB should come out of the 4 KiB hole");
  void *z = must_malloc(p, 6 * KiB);
  cr_expect(within(z, c, 8 * KiB), "6 KiB should come out of the 8 KiB hole");
  cr_expect_eq(device_allocs(p), 1, "all served from the first segment");
  expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  (void)fa, (void)fc, (void)fe;
  gpupool_destroy(p);
}

Test(pool_fit, bfc_best_fit_is_exact_not_first_fit) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  /* holes of 5120, 4608 and 4096 bytes: close sizes, in both address orders */
  void *h5120 = must_malloc(p, 5120);
  must_malloc(p, 512);
  void *h4608 = must_malloc(p, 4608);
  must_malloc(p, 512);
  void *h4096 = must_malloc(p, 4096);
  must_malloc(p, 512);
  must_free(p, h5120);
  must_free(p, h4608);
  must_free(p, h4096);
  cr_expect_eq(must_malloc(p, 4096), h4096);
  cr_expect_eq(must_malloc(p, 4500), h4608, "4500 B rounds to 4608 B: the 4608 hole fits exactly");
  cr_expect(within(must_malloc(p, 4097), h5120, 5120),
            "4097 B rounds to 4608 B: only the 5120 hole is left");
  cr_expect_eq(device_allocs(p), 1);
  expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_ties_go_to_the_lowest_address) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *h[4];
  for (int i = 0; i < 4; i++) {
    h[i] = must_malloc(p, 4096);
    must_malloc(p, 512);
  }
  for (int i = 3; i >= 0; i--)
    must_free(p, h[i]);
  void *lo = h[0];
  for (int i = 1; i < 4; i++)
    if ((char *)h[i] < (char *)lo)
      lo = h[i];
  cr_expect_eq(must_malloc(p, 4096), lo, "four equal holes: the lowest address wins");
  gpupool_destroy(p);
}

Test(pool_fit, bfc_adjacent_frees_coalesce) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a = must_malloc(p, 4096);
  void *b = must_malloc(p, 4096);
  void *c = must_malloc(p, 512);
  must_free(p, a);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 2);
  must_free(p, b);
  s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 2, "a and b merged into one hole");
  cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 2);
  cr_expect_eq(s.inactive_split_bytes[GPUPOOL_STAT_ALL].current, 2 * MiB - 512);

  void *ab = must_malloc(p, 8192);
  cr_expect_eq(ab, (char *)a < (char *)b ? a : b, "8 KiB takes the merged hole, at its start");
  cr_expect_eq(device_allocs(p), 1, "without a new segment");
  must_free(p, ab);
  must_free(p, c);
  s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 1, "everything merged back into the whole segment");
  cr_expect_eq(s.largest_free_block, 2 * MiB);
  cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 0, "an unsplit segment is not split");
  cr_expect_eq(s.inactive_split_bytes[GPUPOOL_STAT_ALL].current, 0);
  cr_expect_eq(s.segment[GPUPOOL_STAT_ALL].current, 1, "free does not release segments");
  expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_middle_free_merges_both_neighbours) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *blk[4];
  for (int i = 0; i < 4; i++)
    blk[i] = must_malloc(p, 16 * KiB);
  void *fence = must_malloc(p, 512);
  must_free(p, blk[0]);
  must_free(p, blk[2]);
  cr_expect_eq(pc_stats(p).free_blocks, 3);
  must_free(p, blk[1]); /* joins 0, 1 and 2 */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 2);
  void *lo = blk[0];
  for (int i = 1; i < 3; i++)
    if ((char *)blk[i] < (char *)lo)
      lo = blk[i];
  cr_expect_eq(must_malloc(p, 48 * KiB), lo, "48 KiB fits the three merged 16 KiB blocks");
  cr_expect_eq(device_allocs(p), 1);
  (void)fence;
  gpupool_destroy(p);
}

Test(pool_fit, bfc_small_pool_splits_down_to_512_bytes) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  must_malloc(p, 1 * MiB);
  must_malloc(p, 1 * MiB - 512);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 1, "a 512 B remainder is split off");
  cr_expect_eq(s.largest_free_block, 512);
  must_malloc(p, 1);
  s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 0);
  cr_expect_eq(s.num_device_alloc, 1);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 2 * MiB);
  cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 0);
  expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_large_pool_splits_only_above_1_mib) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  must_malloc(p, 2 * MiB); /* a 20 MiB segment; 18 MiB stay free */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 1);
  cr_expect_eq(s.largest_free_block, 18 * MiB);

  /* 17.5 MiB leaves 0.5 MiB and 17 MiB leaves exactly 1 MiB: the whole block is used */
  static const size_t whole[] = {17 * MiB + 512 * KiB, 17 * MiB};
  for (int i = 0; i < 2; i++) {
    void *x = must_malloc(p, whole[i]);
    s = pc_stats(p);
    cr_expect_eq(s.num_device_alloc, 1, "%zu B comes from the cached 18 MiB block", whole[i]);
    cr_expect_eq(s.free_blocks, 0, "%zu B: a remainder <= 1 MiB is not split off", whole[i]);
    cr_expect_eq(s.largest_free_block, 0);
    int64_t a = s.allocated_bytes[GPUPOOL_STAT_LARGE].current - 2 * MiB;
    cr_expect(a >= (int64_t)whole[i] && a <= 18 * (int64_t)MiB, "allocated %lld for %zu",
              (long long)a, whole[i]);
    cr_expect_eq(s.requested_bytes[GPUPOOL_STAT_ALL].current, (int64_t)(2 * MiB + whole[i]));
    cr_expect_eq(s.active_bytes[GPUPOOL_STAT_ALL].current, 20 * (int64_t)MiB,
                 "the whole 18 MiB block is active");
    expect_consistent(p, GPUPOOL_STRATEGY_BFC);
    must_free(p, x);
  }

  void *y = must_malloc(p, 16 * MiB); /* leaves 2 MiB: split */
  s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 1);
  cr_expect_eq(s.largest_free_block, 2 * MiB);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 18 * (int64_t)MiB);
  cr_expect_eq(s.num_device_alloc, 1);
  must_free(p, y);
  expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_best_fit_in_the_large_pool) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a = must_malloc(p, 3 * MiB);
  must_malloc(p, 2 * MiB);
  void *b = must_malloc(p, 2 * MiB + 512 * KiB);
  must_malloc(p, 2 * MiB);
  /* holes: 3 MiB, 2.5 MiB, and the 10.5 MiB tail */
  must_free(p, a);
  must_free(p, b);
  cr_expect_eq(must_malloc(p, 2200 * KiB), b, "2.2 MiB takes the 2.5 MiB hole");
  cr_expect_eq(must_malloc(p, 2800 * KiB), a, "2.8 MiB takes the 3 MiB hole");
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 1);
  cr_expect_eq(s.free_blocks, 1);
  cr_expect_eq(s.largest_free_block, 10 * MiB + 512 * KiB);
  expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_small_and_large_pools_do_not_mix) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  must_malloc(p, 2 * MiB); /* 18 MiB of the large segment stay free */
  must_malloc(p, 512);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 2, "a small request never carves a large block");
  cr_expect_eq(s.segment[GPUPOOL_STAT_SMALL].current, 1);
  cr_expect_eq(s.segment[GPUPOOL_STAT_LARGE].current, 1);
  /* and a large request never takes small blocks, even with 2 MiB - 512 free there */
  must_malloc(p, 1 * MiB + 512);
  cr_expect_eq(pc_stats(p).segment[GPUPOOL_STAT_SMALL].current, 1);
  cr_expect_eq(pc_stats(p).allocated_bytes[GPUPOOL_STAT_SMALL].current, 512);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_max_split_size_keeps_small_requests_off_big_blocks) {
  /* default (no limit): 2 MiB is carved out of a cached 40 MiB block */
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  must_free(p, must_malloc(p, 40 * MiB));
  must_malloc(p, 2 * MiB);
  cr_expect_eq(device_allocs(p), 1);
  gpupool_destroy(p);

  p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "max_split_size_mb:32");
  void *big = must_malloc(p, 40 * MiB);
  must_free(p, big);
  must_malloc(p, 2 * MiB);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 2, "2 MiB < 32 MiB never takes the 40 MiB block");
  cr_expect_eq(s.largest_free_block, 40 * MiB);
  /* 36 MiB >= 32 MiB may take it (40 < 36 + 20), whole: blocks >= 32 MiB are not split */
  void *x = must_malloc(p, 36 * MiB);
  cr_expect_eq(x, big);
  s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 2);
  cr_expect_eq(s.largest_free_block, 18 * MiB, "only the 20 MiB segment's tail is free");
  cr_expect_eq(s.active_bytes[GPUPOOL_STAT_ALL].current, 42 * (int64_t)MiB);
  expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_oversize_requests_take_blocks_within_max_non_split_rounding) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "max_split_size_mb:32");
  void *big = must_malloc(p, 60 * MiB);
  must_free(p, big);
  /* 60 MiB is not < 40 + 20: a new 40 MiB segment */
  void *x = must_malloc(p, 40 * MiB);
  cr_expect_neq(x, big);
  cr_expect_eq(device_allocs(p), 2);
  /* 60 < 41 + 20: the cached block is used */
  void *y = must_malloc(p, 41 * MiB);
  cr_expect_eq(y, big);
  cr_expect_eq(device_allocs(p), 2);
  expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);

  p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "max_split_size_mb:32,max_non_split_rounding_mb:30");
  big = must_malloc(p, 60 * MiB);
  must_free(p, big);
  cr_expect_eq(must_malloc(p, 40 * MiB), big, "60 < 40 + 30");
  cr_expect_eq(device_allocs(p), 1);
  gpupool_destroy(p);
}

Test(pool_fit, round_reuses_only_the_same_bucket) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_ROUND, 0, NULL);
  void *a = must_malloc(p, 3000); /* 4096 */
  void *b = must_malloc(p, 5000); /* 8192 */
  must_free(p, a);
  must_free(p, b);
  cr_expect_eq(must_malloc(p, 4096), a, "same 4096 bucket");
  void *c = must_malloc(p, 2000); /* 2048: does not split the 8192 block */
  cr_expect_neq(c, b);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 3);
  cr_expect_eq(s.free_blocks, 1);
  cr_expect_eq(s.largest_free_block, 8192);
  cr_expect_eq(must_malloc(p, 6000), b, "6000 B is in the 8192 bucket");
  void *d = must_malloc(p, 20 * MiB); /* bucket 32 MiB */
  must_free(p, d);
  cr_expect_eq(must_malloc(p, 17 * MiB), d, "17 MiB is in the same 32 MiB bucket");
  must_free(p, must_malloc(p, 16 * MiB));
  s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 5, "16 MiB is its own bucket");
  cr_expect_eq(s.num_cache_hits, 3);
  expect_consistent(p, GPUPOOL_STRATEGY_ROUND);
  gpupool_destroy(p);
}

Test(pool_fit, round_never_merges_neighbours) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_ROUND, 0, NULL);
  void *a = must_malloc(p, 4096);
  void *b = must_malloc(p, 4096);
  must_free(p, a);
  must_free(p, b);
  void *c = must_malloc(p, 8192);
  cr_expect(c != a && c != b);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 2);
  cr_expect_eq(s.num_device_alloc, 3);
  cr_expect_eq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, 16384);
  expect_consistent(p, GPUPOOL_STRATEGY_ROUND);
  gpupool_destroy(p);
}

Test(pool_fit, naive_reuses_only_the_exact_page_size) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_NAIVE, 0, NULL);
  void *a = must_malloc(p, 4000);
  must_free(p, a);
  cr_expect_eq(must_malloc(p, 4096), a, "4000 and 4096 are both one page");
  void *b = must_malloc(p, 8192);
  must_free(p, a);
  must_free(p, b);
  cr_expect_eq(must_malloc(p, 4096), a, "the exact size, not the 8192 block");
  void *c = must_malloc(p, 4096);
  cr_expect(c != a && c != b, "4096 does not split the cached 8192 block");
  void *d = must_malloc(p, 12288);
  cr_expect(d != b, "12288 does not take the smaller 8192 block");
  cr_expect_eq(must_malloc(p, 5000), b, "5000 B is two pages");
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 4);
  cr_expect_eq(s.free_blocks, 0);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 4096 * 2 + 12288 + 8192);
  cr_expect_eq(s.requested_bytes[GPUPOOL_STAT_ALL].current, 4096 * 2 + 12288 + 5000);
  expect_consistent(p, GPUPOOL_STRATEGY_NAIVE);
  gpupool_destroy(p);
}
