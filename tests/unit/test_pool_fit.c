/* Which cached block a request gets: exact best fit on one stream, split and
 * coalesce, max_split_size_mb, the large pool's split rule, and the exact-size
 * buckets of round and naive. Observed by pointer identity and by stats. */
#include <criterion/criterion.h>

#include "helpers/pool_check.h"

#define KiB PC_KiB
#define MiB PC_MiB

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
  void *a = pc_must_malloc(p, 4 * KiB, NULL);
  void *fa = pc_must_malloc(p, 512, NULL);
  void *c = pc_must_malloc(p, 8 * KiB, NULL);
  void *fc = pc_must_malloc(p, 512, NULL);
  void *e = pc_must_malloc(p, 2 * KiB, NULL);
  void *fe = pc_must_malloc(p, 512, NULL);
  pc_must_free(p, a);
  pc_must_free(p, c);
  pc_must_free(p, e);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 4, "three holes and the segment's tail");
  cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 4);

  void *x = pc_must_malloc(p, 2 * KiB, NULL);
  cr_expect_eq(x, e, "2 KiB should take the 2 KiB hole");
  void *y = pc_must_malloc(p, 3 * KiB, NULL);
  cr_expect(within(y, a, 4 * KiB), "3 KiB should come out of the 4 KiB hole");
  void *z = pc_must_malloc(p, 6 * KiB, NULL);
  cr_expect(within(z, c, 8 * KiB), "6 KiB should come out of the 8 KiB hole");
  cr_expect_eq(device_allocs(p), 1, "all served from the first segment");
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  (void)fa, (void)fc, (void)fe;
  gpupool_destroy(p);
}

Test(pool_fit, bfc_best_fit_is_exact_not_first_fit) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  /* holes of 5120, 4608 and 4096 bytes: close sizes, in both address orders */
  void *h5120 = pc_must_malloc(p, 5120, NULL);
  pc_must_malloc(p, 512, NULL);
  void *h4608 = pc_must_malloc(p, 4608, NULL);
  pc_must_malloc(p, 512, NULL);
  void *h4096 = pc_must_malloc(p, 4096, NULL);
  pc_must_malloc(p, 512, NULL);
  pc_must_free(p, h5120);
  pc_must_free(p, h4608);
  pc_must_free(p, h4096);
  cr_expect_eq(pc_must_malloc(p, 4096, NULL), h4096);
  cr_expect_eq(pc_must_malloc(p, 4500, NULL), h4608,
               "4500 B rounds to 4608 B: the 4608 hole fits exactly");
  cr_expect(within(pc_must_malloc(p, 4097, NULL), h5120, 5120),
            "4097 B rounds to 4608 B: only the 5120 hole is left");
  cr_expect_eq(device_allocs(p), 1);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_ties_go_to_the_lowest_address) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *h[4];
  for (int i = 0; i < 4; i++) {
    h[i] = pc_must_malloc(p, 4096, NULL);
    pc_must_malloc(p, 512, NULL);
  }
  for (int i = 3; i >= 0; i--)
    pc_must_free(p, h[i]);
  void *lo = h[0];
  for (int i = 1; i < 4; i++)
    if ((char *)h[i] < (char *)lo)
      lo = h[i];
  cr_expect_eq(pc_must_malloc(p, 4096, NULL), lo, "four equal holes: the lowest address wins");
  gpupool_destroy(p);
}

Test(pool_fit, bfc_adjacent_frees_coalesce) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a = pc_must_malloc(p, 4096, NULL);
  void *b = pc_must_malloc(p, 4096, NULL);
  void *c = pc_must_malloc(p, 512, NULL);
  pc_must_free(p, a);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 2);
  pc_must_free(p, b);
  s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 2, "a and b merged into one hole");
  cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 2);
  cr_expect_eq(s.inactive_split_bytes[GPUPOOL_STAT_ALL].current, 2 * MiB - 512);

  void *ab = pc_must_malloc(p, 8192, NULL);
  cr_expect_eq(ab, (char *)a < (char *)b ? a : b, "8 KiB takes the merged hole, at its start");
  cr_expect_eq(device_allocs(p), 1, "without a new segment");
  pc_must_free(p, ab);
  pc_must_free(p, c);
  s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 1, "everything merged back into the whole segment");
  cr_expect_eq(s.largest_free_block, 2 * MiB);
  cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 0, "an unsplit segment is not split");
  cr_expect_eq(s.inactive_split_bytes[GPUPOOL_STAT_ALL].current, 0);
  cr_expect_eq(s.segment[GPUPOOL_STAT_ALL].current, 1, "free does not release segments");
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_middle_free_merges_both_neighbours) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *blk[4];
  for (int i = 0; i < 4; i++)
    blk[i] = pc_must_malloc(p, 16 * KiB, NULL);
  void *fence = pc_must_malloc(p, 512, NULL);
  pc_must_free(p, blk[0]);
  pc_must_free(p, blk[2]);
  cr_expect_eq(pc_stats(p).free_blocks, 3);
  pc_must_free(p, blk[1]); /* joins 0, 1 and 2 */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 2);
  void *lo = blk[0];
  for (int i = 1; i < 3; i++)
    if ((char *)blk[i] < (char *)lo)
      lo = blk[i];
  cr_expect_eq(pc_must_malloc(p, 48 * KiB, NULL), lo, "48 KiB fits the three merged 16 KiB blocks");
  cr_expect_eq(device_allocs(p), 1);
  (void)fence;
  gpupool_destroy(p);
}

Test(pool_fit, bfc_small_pool_splits_down_to_512_bytes) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  pc_must_malloc(p, 1 * MiB, NULL);
  pc_must_malloc(p, 1 * MiB - 512, NULL);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 1, "a 512 B remainder is split off");
  cr_expect_eq(s.largest_free_block, 512);
  pc_must_malloc(p, 1, NULL);
  s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 0);
  cr_expect_eq(s.num_device_alloc, 1);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 2 * MiB);
  cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 0);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_large_pool_splits_only_above_1_mib) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  pc_must_malloc(p, 2 * MiB, NULL); /* a 20 MiB segment; 18 MiB stay free */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 1);
  cr_expect_eq(s.largest_free_block, 18 * MiB);

  /* 17.5 MiB leaves 0.5 MiB and 17 MiB leaves exactly 1 MiB: the whole block is used */
  static const size_t whole[] = {17 * MiB + 512 * KiB, 17 * MiB};
  for (int i = 0; i < 2; i++) {
    void *x = pc_must_malloc(p, whole[i], NULL);
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
    pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
    pc_must_free(p, x);
  }

  void *y = pc_must_malloc(p, 16 * MiB, NULL); /* leaves 2 MiB: split */
  s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 1);
  cr_expect_eq(s.largest_free_block, 2 * MiB);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 18 * (int64_t)MiB);
  cr_expect_eq(s.num_device_alloc, 1);
  pc_must_free(p, y);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_best_fit_in_the_large_pool) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a = pc_must_malloc(p, 3 * MiB, NULL);
  pc_must_malloc(p, 2 * MiB, NULL);
  void *b = pc_must_malloc(p, 2 * MiB + 512 * KiB, NULL);
  pc_must_malloc(p, 2 * MiB, NULL);
  /* holes: 3 MiB, 2.5 MiB, and the 10.5 MiB tail */
  pc_must_free(p, a);
  pc_must_free(p, b);
  cr_expect_eq(pc_must_malloc(p, 2200 * KiB, NULL), b, "2.2 MiB takes the 2.5 MiB hole");
  cr_expect_eq(pc_must_malloc(p, 2800 * KiB, NULL), a, "2.8 MiB takes the 3 MiB hole");
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 1);
  cr_expect_eq(s.free_blocks, 1);
  cr_expect_eq(s.largest_free_block, 10 * MiB + 512 * KiB);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_small_and_large_pools_do_not_mix) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  pc_must_malloc(p, 2 * MiB, NULL); /* 18 MiB of the large segment stay free */
  pc_must_malloc(p, 512, NULL);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 2, "a small request never carves a large block");
  cr_expect_eq(s.segment[GPUPOOL_STAT_SMALL].current, 1);
  cr_expect_eq(s.segment[GPUPOOL_STAT_LARGE].current, 1);
  /* and a large request never takes small blocks, even with 2 MiB - 512 free there */
  pc_must_malloc(p, 1 * MiB + 512, NULL);
  cr_expect_eq(pc_stats(p).segment[GPUPOOL_STAT_SMALL].current, 1);
  cr_expect_eq(pc_stats(p).allocated_bytes[GPUPOOL_STAT_SMALL].current, 512);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_max_split_size_keeps_small_requests_off_big_blocks) {
  /* default (no limit): 2 MiB is carved out of a cached 40 MiB block */
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  cr_expect_eq(gpupool_max_split_size(p), SIZE_MAX, "unlimited");
  pc_must_free(p, pc_must_malloc(p, 40 * MiB, NULL));
  pc_must_malloc(p, 2 * MiB, NULL);
  cr_expect_eq(device_allocs(p), 1);
  gpupool_destroy(p);

  p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "max_split_size_mb:32");
  cr_expect_eq(gpupool_max_split_size(p), 32 * MiB);
  void *big = pc_must_malloc(p, 40 * MiB, NULL);
  pc_must_free(p, big);
  pc_must_malloc(p, 2 * MiB, NULL);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 2, "2 MiB < 32 MiB never takes the 40 MiB block");
  cr_expect_eq(s.largest_free_block, 40 * MiB);
  /* 36 MiB >= 32 MiB may take it (40 < 36 + 20), whole: blocks >= 32 MiB are not split */
  void *x = pc_must_malloc(p, 36 * MiB, NULL);
  cr_expect_eq(x, big);
  s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 2);
  cr_expect_eq(s.largest_free_block, 18 * MiB, "only the 20 MiB segment's tail is free");
  cr_expect_eq(s.active_bytes[GPUPOOL_STAT_ALL].current, 42 * (int64_t)MiB);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
}

Test(pool_fit, bfc_oversize_requests_take_blocks_within_max_non_split_rounding) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "max_split_size_mb:32");
  void *big = pc_must_malloc(p, 60 * MiB, NULL);
  pc_must_free(p, big);
  /* 60 MiB is not < 40 + 20: a new 40 MiB segment */
  void *x = pc_must_malloc(p, 40 * MiB, NULL);
  cr_expect_neq(x, big);
  cr_expect_eq(device_allocs(p), 2);
  /* 60 < 41 + 20: the cached block is used */
  void *y = pc_must_malloc(p, 41 * MiB, NULL);
  cr_expect_eq(y, big);
  cr_expect_eq(device_allocs(p), 2);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);

  p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, "max_split_size_mb:32,max_non_split_rounding_mb:30");
  big = pc_must_malloc(p, 60 * MiB, NULL);
  pc_must_free(p, big);
  cr_expect_eq(pc_must_malloc(p, 40 * MiB, NULL), big, "60 < 40 + 30");
  cr_expect_eq(device_allocs(p), 1);
  gpupool_destroy(p);
}

Test(pool_fit, round_reuses_only_the_same_bucket) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_ROUND, 0, NULL);
  void *a = pc_must_malloc(p, 3000, NULL); /* 4096 */
  void *b = pc_must_malloc(p, 5000, NULL); /* 8192 */
  pc_must_free(p, a);
  pc_must_free(p, b);
  cr_expect_eq(pc_must_malloc(p, 4096, NULL), a, "same 4096 bucket");
  void *c = pc_must_malloc(p, 2000, NULL); /* 2048: does not split the 8192 block */
  cr_expect_neq(c, b);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 3);
  cr_expect_eq(s.free_blocks, 1);
  cr_expect_eq(s.largest_free_block, 8192);
  cr_expect_eq(pc_must_malloc(p, 6000, NULL), b, "6000 B is in the 8192 bucket");
  void *d = pc_must_malloc(p, 20 * MiB, NULL); /* bucket 32 MiB */
  pc_must_free(p, d);
  cr_expect_eq(pc_must_malloc(p, 17 * MiB, NULL), d, "17 MiB is in the same 32 MiB bucket");
  pc_must_free(p, pc_must_malloc(p, 16 * MiB, NULL));
  s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 5, "16 MiB is its own bucket");
  cr_expect_eq(s.num_cache_hits, 3);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_ROUND);
  gpupool_destroy(p);
}

Test(pool_fit, round_never_merges_neighbours) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_ROUND, 0, NULL);
  void *a = pc_must_malloc(p, 4096, NULL);
  void *b = pc_must_malloc(p, 4096, NULL);
  pc_must_free(p, a);
  pc_must_free(p, b);
  void *c = pc_must_malloc(p, 8192, NULL);
  cr_expect(c != a && c != b);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.free_blocks, 2);
  cr_expect_eq(s.num_device_alloc, 3);
  cr_expect_eq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, 16384);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_ROUND);
  gpupool_destroy(p);
}

Test(pool_fit, naive_reuses_only_the_exact_page_size) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_NAIVE, 0, NULL);
  void *a = pc_must_malloc(p, 4000, NULL);
  pc_must_free(p, a);
  cr_expect_eq(pc_must_malloc(p, 4096, NULL), a, "4000 and 4096 are both one page");
  void *b = pc_must_malloc(p, 8192, NULL);
  pc_must_free(p, a);
  pc_must_free(p, b);
  cr_expect_eq(pc_must_malloc(p, 4096, NULL), a, "the exact size, not the 8192 block");
  void *c = pc_must_malloc(p, 4096, NULL);
  cr_expect(c != a && c != b, "4096 does not split the cached 8192 block");
  void *d = pc_must_malloc(p, 12288, NULL);
  cr_expect(d != b, "12288 does not take the smaller 8192 block");
  cr_expect_eq(pc_must_malloc(p, 5000, NULL), b, "5000 B is two pages");
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 4);
  cr_expect_eq(s.free_blocks, 0);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 4096 * 2 + 12288 + 8192);
  cr_expect_eq(s.requested_bytes[GPUPOOL_STAT_ALL].current, 4096 * 2 + 12288 + 5000);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_NAIVE);
  gpupool_destroy(p);
}

Test(pool_fit, max_split_size_of_no_pool_is_an_error) {
  cr_expect_eq(gpupool_max_split_size(NULL), 0);
  cr_expect(strstr(gpupool_last_error(), "gpupool_max_split_size: pool is NULL") != NULL, "%s",
            gpupool_last_error());
}
