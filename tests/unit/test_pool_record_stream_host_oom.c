/* gpupool_record_stream's two refusals, told apart: a block already used on
 * its most streams (GPUPOOL_ERR_UNSUPPORTED, the limit named) and host memory
 * running out while its list of streams grows (GPUPOOL_ERR_HOST_OOM, as in
 * every other call). Either leaves the block as it was: its free still
 * waits for the streams recorded before. Host allocations fail through
 * helpers/alloc_fail.h. */
#include <criterion/criterion.h>
#include <string.h>

#include "gpupool/host.h"
#include "helpers/alloc_fail.h"
#include "helpers/pool_check.h"

#define NSTREAMS 256

Test(pool_record_stream_host_oom, growing_the_stream_list_out_of_host_memory_is_host_oom) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * PC_MiB, NULL);
  gpupool_host_stream *s = gpupool_host_stream_create();
  void *x = pc_must_malloc(p, PC_MiB, NULL);
  alloc_fail_arm(1); /* the block's first list of streams */
  gpupool_status st = gpupool_record_stream(p, x, s);
  cr_assert(alloc_fail_disarm(), "record_stream allocated nothing");
  cr_expect_eq(st, GPUPOOL_ERR_HOST_OOM, "status %d: %s", st, gpupool_last_error());
  cr_expect(strstr(gpupool_last_error(), "out of host memory"), "\"%s\"", gpupool_last_error());
  /* Nothing changed: the same call succeeds once memory is back. */
  cr_expect_eq(gpupool_record_stream(p, x, s), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_destroy(p);
  gpupool_host_stream_destroy(s);
}

Test(pool_record_stream_host_oom, the_256th_stream_of_a_block_is_unsupported_and_says_the_limit) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * PC_MiB, NULL);
  gpupool_host_stream *s[NSTREAMS];
  for (int i = 0; i < NSTREAMS; i++)
    s[i] = gpupool_host_stream_create();
  void *x = pc_must_malloc(p, PC_MiB, NULL);
  for (int i = 0; i < 255; i++)
    cr_assert_eq(gpupool_record_stream(p, x, s[i]), GPUPOOL_OK, "stream %d: %s", i,
                 gpupool_last_error());
  /* A stream recorded already is no new one. */
  cr_expect_eq(gpupool_record_stream(p, x, s[7]), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_status st = gpupool_record_stream(p, x, s[255]);
  cr_expect_eq(st, GPUPOOL_ERR_UNSUPPORTED, "status %d: %s", st, gpupool_last_error());
  cr_expect(strstr(gpupool_last_error(), "at most 255 streams"), "\"%s\"", gpupool_last_error());
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_destroy(p);
  for (int i = 0; i < NSTREAMS; i++)
    gpupool_host_stream_destroy(s[i]);
}
