/* Expandable segments when the host runs out of memory while pages are
 * mapped: each host allocation of an allocation that maps pages in chunks of
 * the segment's handle table not made yet (pool/pages.h: PAGE_CHUNK) fails
 * in turn, each time in a pool of the same history. Where the pool cannot
 * work around it, the call says GPUPOOL_ERR_HOST_OOM and leaves the pool as
 * it was (nothing allocated, nothing more reserved); the same allocation
 * then succeeds, writable over all its bytes. Allocations fail through
 * helpers/alloc_fail.h. */
#include <criterion/criterion.h>
#include <string.h>

#include "helpers/alloc_fail.h"
#include "helpers/pool_check.h"

#define MiB ((size_t)1 << 20)

Test(pool_expandable_host_oom, mapping_pages_fails_cleanly_at_each_allocation) {
  long failures = 0, n;
  for (n = 1; n < 100; n++) {
    gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 4096 * MiB, "expandable_segments:True");
    /* The first block makes the range and maps its pages, in the table's
     * first chunk (1 GiB); the second's lie mostly in the next one. */
    void *first = NULL, *x = NULL;
    cr_assert_eq(gpupool_malloc(p, &first, 900 * MiB, NULL), GPUPOOL_OK, "%s",
                 gpupool_last_error());
    gpupool_stats before = pc_stats(p);
    alloc_fail_arm(n);
    gpupool_status st = gpupool_malloc(p, &x, 700 * MiB, NULL);
    int failed_here = alloc_fail_disarm();
    if (st == GPUPOOL_OK) { /* past the last host allocation, or one the pool works around */
      if (!failed_here) {   /* once: the pages of both blocks hold their bytes */
        pc_pattern_fill(x, 700 * MiB, 1);
        pc_pattern_fill(first, 900 * MiB, 2);
        cr_assert_eq(pc_pattern_check(x, 700 * MiB, 1), SIZE_MAX);
        cr_assert_eq(pc_pattern_check(first, 900 * MiB, 2), SIZE_MAX);
      }
      /* a split not made for want of host memory gives a block larger than asked */
      int64_t allocated = pc_stats(p).allocated_bytes[GPUPOOL_STAT_ALL].current;
      if (failed_here)
        cr_assert_geq(allocated, (int64_t)(1600 * MiB), "allocation %ld", n);
      else
        cr_assert_eq(allocated, (int64_t)(1600 * MiB));
    } else {
      failures++;
      cr_assert(failed_here);
      cr_assert_eq(st, GPUPOOL_ERR_HOST_OOM, "allocation %ld failed: status %s (%s)", n,
                   gpupool_status_string(st), gpupool_last_error());
      cr_assert(strstr(gpupool_last_error(), "out of host memory"), "%s", gpupool_last_error());
      gpupool_stats now = pc_stats(p);
      cr_assert_eq(now.allocated_bytes[GPUPOOL_STAT_ALL].current,
                   before.allocated_bytes[GPUPOOL_STAT_ALL].current, "allocation %ld", n);
      cr_assert_eq(now.reserved_bytes[GPUPOOL_STAT_ALL].current,
                   before.reserved_bytes[GPUPOOL_STAT_ALL].current, "allocation %ld", n);
      cr_assert_eq(gpupool_malloc(p, &x, 700 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
      memset(x, 0x5a, MiB); /* its pages are there: the first and last */
      memset((char *)x + 699 * MiB, 0x5a, MiB);
    }
    cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
    cr_assert_eq(gpupool_free(p, first), GPUPOOL_OK, "%s", gpupool_last_error());
    gpupool_destroy(p);
    if (!failed_here)
      break;
  }
  cr_assert(n < 100, "the allocation makes more host allocations than expected");
  /* the handles' array and the chunk made for the second block */
  cr_assert_geq(failures, 2, "%ld host allocations failed the call", failures);
}
