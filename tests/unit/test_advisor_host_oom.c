/* The advisor's histories when the host runs out of memory: each allocation
 * a record file's reader or the live rings' reader makes fails in turn, and
 * the call says GPUPOOL_ERR_HOST_OOM, "out of host memory" (not
 * GPUPOOL_ERR_INVALID, nor the device's GPUPOOL_ERR_OOM), until the one
 * past the last allocation goes through. Allocations fail through
 * helpers/alloc_fail.h: the executable is linked so that the library's
 * allocations, linked in statically, fail on demand. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/readers.h"
#include "gpupool/advisor.h"
#include "gpupool/gpupool.h"
#include "helpers/alloc_fail.h"
#include "pool/pool_view.h"

/* Events enough that the history's arrays and id map grow several times. */
#define PAIRS 3000

static void expect_host_oom(gpupool_status st, long n) {
  cr_assert_eq(st, GPUPOOL_ERR_HOST_OOM, "allocation %ld failed: status %s (%s)", n,
               gpupool_status_string(st), gpupool_last_error());
  cr_assert(strstr(gpupool_last_error(), "out of host memory"), "%s", gpupool_last_error());
}

Test(advisor_host_oom, record_file) {
  static char text[PAIRS * 48];
  size_t len = 0;
  for (int i = 0; i < PAIRS; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "a 0x%x 512 %d\nr 0x%x 9\n", i + 1,
                            i % 3, i + 1);
  for (int i = 0; i < PAIRS; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "f 0x%x\n", i + 1);
  long failures = 0;
  for (long n = 1;; n++) {
    FILE *f = fmemopen(text, len, "r");
    cr_assert_not_null(f);
    static char iobuf[BUFSIZ]; /* the stream allocates nothing while armed */
    cr_assert_eq(setvbuf(f, iobuf, _IOFBF, sizeof iobuf), 0);
    gpupool_history *h = NULL;
    alloc_fail_arm(n);
    gpupool_status st = read_record(f, "oom.record", &h);
    int failed_here = alloc_fail_disarm();
    fclose(f);
    if (!failed_here) {
      cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
      cr_expect_eq(gpupool_history_get_info(h)->events, 3 * PAIRS);
      gpupool_history_free(h);
      break;
    }
    failures++;
    expect_host_oom(st, n);
    cr_assert(n < 100, "the reader makes more allocations than expected");
  }
  cr_assert_geq(failures, 4, "the reader allocated too little: the test proves little");
}

Test(advisor_host_oom, live_rings) {
  pool_events_enable(4 * PAIRS);
  gpupool_options o = {.name = "live", .backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  static void *blocks[PAIRS];
  for (int i = 0; i < PAIRS; i++)
    cr_assert_eq(gpupool_malloc(p, &blocks[i], 512, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  for (int i = 0; i < PAIRS; i++)
    cr_assert_eq(gpupool_free(p, blocks[i]), GPUPOOL_OK, "%s", gpupool_last_error());
  long failures = 0;
  for (long n = 1;; n++) {
    gpupool_history *h = NULL;
    alloc_fail_arm(n);
    gpupool_status st = gpupool_history_from_pool(p, &h);
    if (!alloc_fail_disarm()) {
      cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
      cr_expect_eq(gpupool_history_get_info(h)->events, 2 * PAIRS);
      gpupool_history_free(h);
      break;
    }
    failures++;
    expect_host_oom(st, n);
    cr_assert(n < 100, "the reader makes more allocations than expected");
  }
  cr_assert_geq(failures, 4, "the reader allocated too little: the test proves little");
  gpupool_destroy(p);
  pool_events_disable();
}
