/* Rounding and bucket tables of each strategy, observed through the stats of
 * one allocation in a fresh pool: allocated_bytes is the rounded size,
 * reserved_bytes the device segment it needed. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "helpers/pool_check.h"

#define KiB PC_KiB
#define MiB PC_MiB

typedef struct row {
  size_t size;
  size_t rounded;
  size_t segment;
  int exact; /* the block is split off its segment, so allocated_bytes == rounded */
} row;

/* One allocation of r->size in a fresh pool; checks what it costs. */
static void check_row(gpupool_strategy strategy, const char *tunables, const row *r) {
  gpupool *p = pc_pool(strategy, 0, tunables);
  void *ptr = NULL;
  gpupool_status st = gpupool_malloc(p, &ptr, r->size, NULL);
  cr_assert_eq(st, GPUPOOL_OK, "malloc(%zu) [%s]: %s", r->size, tunables ? tunables : "",
               gpupool_last_error());
  gpupool_stats s = pc_stats(p);
  int kind = pc_is_large(r->rounded) ? GPUPOOL_STAT_LARGE : GPUPOOL_STAT_SMALL;
  int other = kind == GPUPOOL_STAT_LARGE ? GPUPOOL_STAT_SMALL : GPUPOOL_STAT_LARGE;
  const char *t = tunables ? tunables : "";
  int64_t alloc = s.allocated_bytes[GPUPOOL_STAT_ALL].current;
  if (r->exact)
    cr_expect_eq(alloc, (int64_t)r->rounded, "size %zu [%s]: allocated_bytes %lld, expected %zu",
                 r->size, t, (long long)alloc, r->rounded);
  else
    cr_expect(alloc >= (int64_t)r->rounded && alloc <= (int64_t)r->segment,
              "size %zu [%s]: allocated_bytes %lld, expected %zu (or the whole %zu block)", r->size,
              t, (long long)alloc, r->rounded, r->segment);
  cr_expect_eq(s.allocated_bytes[kind].current, alloc, "size %zu [%s]: counted in the wrong pool",
               r->size, t);
  cr_expect_eq(s.allocation[kind].current, 1, "size %zu [%s]: allocation[%s] = %lld", r->size, t,
               kind == GPUPOOL_STAT_LARGE ? "large" : "small",
               (long long)s.allocation[kind].current);
  cr_expect_eq(s.allocation[other].current, 0, "size %zu [%s]", r->size, t);
  cr_expect_eq(s.requested_bytes[GPUPOOL_STAT_ALL].current, (int64_t)r->size, "size %zu [%s]",
               r->size, t);
  cr_expect_eq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, (int64_t)r->segment,
               "size %zu [%s]: reserved %lld, expected a segment of %zu", r->size, t,
               (long long)s.reserved_bytes[GPUPOOL_STAT_ALL].current, r->segment);
  cr_expect_eq(s.reserved_bytes[kind].current, (int64_t)r->segment, "size %zu [%s]", r->size, t);
  cr_expect_eq(s.segment[kind].current, 1, "size %zu [%s]: %lld segments", r->size, t,
               (long long)s.segment[kind].current);
  cr_expect_eq(s.num_device_alloc, 1, "size %zu [%s]", r->size, t);
  cr_expect_eq(s.num_device_sourced, 1, "size %zu [%s]", r->size, t);
  cr_expect_eq(s.num_cache_hits, 0, "size %zu [%s]", r->size, t);
  if (r->exact && r->segment > r->rounded) {
    /* the remainder is one free block of the split segment */
    cr_expect_eq(s.free_blocks, 1, "size %zu [%s]: free_blocks %llu", r->size, t,
                 (unsigned long long)s.free_blocks);
    cr_expect_eq(s.largest_free_block, r->segment - r->rounded,
                 "size %zu [%s]: largest_free_block %llu, expected %zu", r->size, t,
                 (unsigned long long)s.largest_free_block, r->segment - r->rounded);
    cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 1, "size %zu [%s]", r->size, t);
    cr_expect_eq(s.inactive_split_bytes[GPUPOOL_STAT_ALL].current,
                 (int64_t)(r->segment - r->rounded), "size %zu [%s]", r->size, t);
  } else {
    cr_expect_eq(s.free_blocks, 0, "size %zu [%s]: free_blocks %llu (no remainder expected)",
                 r->size, t, (unsigned long long)s.free_blocks);
    cr_expect_eq(s.inactive_split[GPUPOOL_STAT_ALL].current, 0, "size %zu [%s]", r->size, t);
  }
  char msg[256];
  cr_expect_eq(pc_check_invariants(&s, strategy, 0, msg, sizeof msg), 0, "size %zu [%s]: %s",
               r->size, t, msg);

  /* the memory is real and writable: both ends of the request */
  size_t head = r->size < MiB ? r->size : MiB;
  unsigned char *tail = (unsigned char *)ptr + r->size - head;
  pc_pattern_fill(ptr, head, 1);
  pc_pattern_fill(tail, head, 2);
  cr_expect_eq(pc_pattern_check(tail, head, 2), SIZE_MAX);
  if (tail >= (unsigned char *)ptr + head)
    cr_expect_eq(pc_pattern_check(ptr, head, 1), SIZE_MAX);
  cr_assert_eq(gpupool_free(p, ptr), GPUPOOL_OK);
  s = pc_stats(p);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 0);
  cr_expect_eq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, (int64_t)r->segment,
               "size %zu [%s]: the segment stays cached after free", r->size, t);
  cr_expect_eq(s.free_blocks, 1, "size %zu [%s]: free_blocks %llu after free (one whole segment)",
               r->size, t, (unsigned long long)s.free_blocks);
  cr_expect_eq(s.largest_free_block, r->segment, "size %zu [%s]", r->size, t);
  cr_expect_eq(gpupool_empty_cache(p), r->segment, "size %zu [%s]", r->size, t);
  gpupool_destroy(p);
}

static void check_table(gpupool_strategy strategy, const char *tunables, const row *rows,
                        size_t n) {
  for (size_t i = 0; i < n; i++)
    check_row(strategy, tunables, &rows[i]);
}

Test(pool_rounding, bfc_512_byte_rounding_and_segment_sizes) {
  static const row rows[] = {
      {1, 512, 2 * MiB, 1},
      {511, 512, 2 * MiB, 1},
      {512, 512, 2 * MiB, 1},
      {513, 1024, 2 * MiB, 1},
      {1000, 1024, 2 * MiB, 1},
      {4096, 4096, 2 * MiB, 1},
      {1 * MiB - 1, 1 * MiB, 2 * MiB, 1},
      {1 * MiB, 1 * MiB, 2 * MiB, 1},            /* the largest small request */
      {1 * MiB + 1, 1 * MiB + 512, 20 * MiB, 1}, /* the smallest large one */
      {5 * MiB, 5 * MiB, 20 * MiB, 1},
      {10 * MiB - 512, 10 * MiB - 512, 20 * MiB, 1},
      {10 * MiB - 1, 10 * MiB, 10 * MiB, 1},
      {10 * MiB, 10 * MiB, 10 * MiB, 1},
      {10 * MiB + 1, 10 * MiB + 512, 12 * MiB, 1},
      {11 * MiB, 11 * MiB, 12 * MiB, 0}, /* remainder 1 MiB: not split */
      {20 * MiB + 512 * KiB + 1, 20 * MiB + 512 * KiB + 512, 22 * MiB, 1},
      {21 * MiB, 21 * MiB, 22 * MiB, 0},
      {64 * MiB, 64 * MiB, 64 * MiB, 1},
      {100 * MiB + 3, 100 * MiB + 512, 102 * MiB, 1},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    cr_expect_eq(pc_bfc_round(rows[i].size, 0), rows[i].rounded, "helper rounding of %zu",
                 rows[i].size);
  check_table(GPUPOOL_STRATEGY_BFC, NULL, rows, sizeof rows / sizeof rows[0]);
}

Test(pool_rounding, bfc_default_strategy_is_bfc) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_DEFAULT, 0, NULL);
  cr_expect_str_eq(gpupool_strategy_name(p), "bfc");
  cr_expect_str_eq(gpupool_backend_name(p), "host");
  gpupool_destroy(p);
  check_row(GPUPOOL_STRATEGY_DEFAULT, NULL, &(row){1000, 1024, 2 * MiB, 1});
}

typedef struct div_row {
  unsigned divisions;
  row r;
} div_row;

Test(pool_rounding, bfc_roundup_power2_divisions) {
  static const div_row rows[] = {
      {4, {1000000, 1 * MiB, 2 * MiB, 1}},              /* 512 KiB/4 steps: up to 1 MiB */
      {4, {1100000, 1 * MiB + 256 * KiB, 20 * MiB, 1}}, /* 1 MiB/4 steps */
      {1, {1100000, 1100288, 20 * MiB, 1}},             /* 1 = off */
      {0, {1100000, 1100288, 20 * MiB, 1}},             /* 0 = off */
      {4, {5 * MiB + 1, 6 * MiB, 20 * MiB, 1}},
      {8, {5 * MiB + 1, 5 * MiB + 512 * KiB, 20 * MiB, 1}},
      {2, {3 * MiB + 1, 4 * MiB, 20 * MiB, 1}},
      {4, {4 * MiB, 4 * MiB, 20 * MiB, 1}}, /* a power of two stays itself */
      {4, {3000, 3072, 2 * MiB, 1}},
      {4, {2000, 2048, 2 * MiB, 1}}, /* <= 512 * D: plain 512 B rounding */
      {4, {2049, 2560, 2 * MiB, 1}},
      {16, {40000, 40960, 2 * MiB, 1}}, /* plain rounding would give 40448 */
      {64, {65 * MiB + 1, 66 * MiB, 66 * MiB, 1}},
      {64, {20000, 20480, 2 * MiB, 1}}, /* 20000 <= 512 * 64 */
      {2, {12 * MiB + 1, 16 * MiB, 16 * MiB, 1}},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char tun[64];
    snprintf(tun, sizeof tun, "roundup_power2_divisions:%u", rows[i].divisions);
    cr_expect_eq(pc_bfc_round(rows[i].r.size, rows[i].divisions), rows[i].r.rounded,
                 "helper rounding of %zu with %s", rows[i].r.size, tun);
    check_row(GPUPOOL_STRATEGY_BFC, tun, &rows[i].r);
  }
}

Test(pool_rounding, bfc_rounding_decides_cache_reuse) {
  /* 600 B and 1000 B both round to 1024 B: the freed block serves the second. */
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a, *b, *c;
  cr_assert_eq(gpupool_malloc(p, &a, 600, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &c, 512, NULL), GPUPOOL_OK); /* keeps a's block apart */
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &b, 1000, NULL), GPUPOOL_OK);
  cr_expect_eq(b, a, "a 1000 B request should take the freed 1024 B block");
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_cache_hits, 2);
  cr_expect_eq(s.num_device_alloc, 1);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 1024 + 512);
  cr_expect_eq(s.requested_bytes[GPUPOOL_STAT_ALL].current, 1000 + 512);
  gpupool_destroy(p);
}

Test(pool_rounding, round_power_of_two_buckets_below_cutoff) {
  static const row rows[] = {
      {1, 512, 512, 1}, /* the device alignment is the smallest bucket */
      {511, 512, 512, 1},
      {512, 512, 512, 1},
      {513, 1024, 1024, 1},
      {3000, 4096, 4096, 1},
      {600000, 1 * MiB, 1 * MiB, 1},
      {1 * MiB, 1 * MiB, 1 * MiB, 1},
      {1 * MiB + 1, 2 * MiB, 2 * MiB, 1},
      {5 * MiB + 1, 8 * MiB, 8 * MiB, 1},
      {16 * MiB - 1, 16 * MiB, 16 * MiB, 1},
      {16 * MiB, 16 * MiB, 16 * MiB, 1}, /* 2^24: a multiple of the cutoff */
      {16 * MiB + 1, 32 * MiB, 32 * MiB, 1},
      {40 * MiB, 48 * MiB, 48 * MiB, 1},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    cr_expect_eq(pc_round_bucket(rows[i].size, 24), rows[i].rounded, "helper bucket of %zu",
                 rows[i].size);
  check_table(GPUPOOL_STRATEGY_ROUND, NULL, rows, sizeof rows / sizeof rows[0]);
}

Test(pool_rounding, round_linear_cutoff_moves_the_linear_range) {
  static const row c20[] = {
      {600000, 1 * MiB, 1 * MiB, 1},      {1536 * KiB, 2 * MiB, 2 * MiB, 1},
      {3 * MiB + 1, 4 * MiB, 4 * MiB, 1}, {5 * MiB, 5 * MiB, 5 * MiB, 1},
      {5 * MiB + 1, 6 * MiB, 6 * MiB, 1}, /* cutoff 24 gives 8 MiB */
  };
  static const row c12[] = {
      {4095, 4096, 4096, 1},
      {4096, 4096, 4096, 1},
      {4097, 8192, 8192, 1},
      {9000, 12288, 12288, 1},
      {1 * MiB + 1, 1 * MiB + 4096, 1 * MiB + 4096, 1},
  };
  static const row c30[] = {
      {40 * MiB, 64 * MiB, 64 * MiB, 1},
      {200 * MiB, 256 * MiB, 256 * MiB, 1},
  };
  for (size_t i = 0; i < 5; i++) {
    cr_expect_eq(pc_round_bucket(c20[i].size, 20), c20[i].rounded);
    cr_expect_eq(pc_round_bucket(c12[i].size, 12), c12[i].rounded);
  }
  check_table(GPUPOOL_STRATEGY_ROUND, "round_linear_cutoff:20", c20, 5);
  check_table(GPUPOOL_STRATEGY_ROUND, "round_linear_cutoff:12", c12, 5);
  check_table(GPUPOOL_STRATEGY_ROUND, "round_linear_cutoff:30", c30, 2);
}

Test(pool_rounding, naive_page_rounding) {
  static const row rows[] = {
      {1, 4096, 4096, 1},
      {4096, 4096, 4096, 1},
      {4097, 8192, 8192, 1},
      {100000, 102400, 102400, 1},
      {1 * MiB, 1 * MiB, 1 * MiB, 1},
      {1 * MiB + 1, 1 * MiB + 4096, 1 * MiB + 4096, 1},
      {10 * MiB + 100, 10 * MiB + 4096, 10 * MiB + 4096, 1},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    cr_expect_eq(pc_naive_round(rows[i].size), rows[i].rounded);
  check_table(GPUPOOL_STRATEGY_NAIVE, NULL, rows, sizeof rows / sizeof rows[0]);
}

Test(pool_rounding, bfc_small_requests_share_one_segment) {
  /* 2 MiB / 64 KiB = 32 requests fill exactly one small segment. */
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *ptr[33];
  for (int i = 0; i < 32; i++)
    cr_assert_eq(gpupool_malloc(p, &ptr[i], 64 * KiB, NULL), GPUPOOL_OK);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.segment[GPUPOOL_STAT_SMALL].current, 1);
  cr_expect_eq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, 2 * MiB);
  cr_expect_eq(s.free_blocks, 0, "the segment is exactly full");
  cr_expect_eq(s.num_cache_hits, 31);
  cr_assert_eq(gpupool_malloc(p, &ptr[32], 64 * KiB, NULL), GPUPOOL_OK);
  s = pc_stats(p);
  cr_expect_eq(s.segment[GPUPOOL_STAT_SMALL].current, 2, "the 33rd request needs a new segment");
  cr_expect_eq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, 4 * MiB);
  for (int i = 0; i < 33; i++)
    cr_assert_eq(gpupool_free(p, ptr[i]), GPUPOOL_OK);
  cr_expect_eq(gpupool_empty_cache(p), 4 * MiB);
  gpupool_destroy(p);
}

Test(pool_rounding, bfc_large_requests_share_a_20_mib_segment) {
  /* 1-10 MiB requests carve a 20 MiB segment; remainders above 1 MiB stay free. */
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *a, *b, *c;
  cr_assert_eq(gpupool_malloc(p, &a, 8 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &b, 8 * MiB, NULL), GPUPOOL_OK);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.segment[GPUPOOL_STAT_LARGE].current, 1);
  cr_expect_eq(s.largest_free_block, 4 * MiB);
  cr_assert_eq(gpupool_malloc(p, &c, 5 * MiB, NULL), GPUPOOL_OK);
  s = pc_stats(p);
  cr_expect_eq(s.segment[GPUPOOL_STAT_LARGE].current, 2, "5 MiB does not fit in the 4 MiB left");
  cr_expect_eq(s.reserved_bytes[GPUPOOL_STAT_LARGE].current, 40 * MiB);
  gpupool_destroy(p);
}
