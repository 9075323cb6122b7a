/* gpupool_last_error() after a free whose stream event could not be
 * recorded for want of host memory: the free succeeds (the stream is taken
 * as done), so the reason of before stays (test_pool_last_error.c has the
 * other recovered failures). Host allocations fail through
 * helpers/alloc_fail.h. */
#include <criterion/criterion.h>
#include <string.h>

#include "gpupool/host.h"
#include "helpers/alloc_fail.h"
#include "helpers/pool_check.h"

Test(pool_last_error_host_oom, a_free_whose_event_cannot_be_recorded_keeps_it) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * PC_MiB, NULL);
  gpupool_host_stream *s = gpupool_host_stream_create();
  void *x = pc_must_malloc(p, PC_MiB, NULL);
  cr_assert_eq(gpupool_record_stream(p, x, s), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_host_stream_enqueue(s); /* work on s: the free must wait for an event */
  void *y = NULL;
  cr_assert_eq(gpupool_malloc(p, &y, 0, NULL), GPUPOOL_ERR_INVALID);
  alloc_fail_arm(1); /* the event's */
  gpupool_status st = gpupool_free(p, x);
  cr_assert(alloc_fail_disarm(), "the free recorded no event");
  cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect(strstr(gpupool_last_error(), "size 0 is zero"), "after the free: \"%s\"",
            gpupool_last_error());
  gpupool_stats stats = pc_stats(p);
  cr_expect_eq(stats.num_sync_events, 0, "no event: the stream was taken as done");
  cr_expect_eq(stats.pending_free_blocks, 0);
  gpupool_host_stream_complete(s);
  gpupool_host_stream_destroy(s);
  gpupool_destroy(p);
}
