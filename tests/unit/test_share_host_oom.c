/* Sharing (gpupool/share.h) when the host runs out of memory: each
 * allocation an export or an import makes fails in turn, and the call says
 * GPUPOOL_ERR_HOST_OOM (not the device's GPUPOOL_ERR_OOM), sends nothing,
 * and leaves the pool as it was: the block is still the caller's, and the
 * same export then succeeds. Allocations fail through
 * helpers/alloc_fail.h: the executable is linked so that the library's
 * allocations, linked in statically, fail on demand. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpupool/share.h"
#include "helpers/pool_check.h"
#include "helpers/share_check.h"
#include "helpers/alloc_fail.h"
#include "pool/pool_internal.h"

static int readable(int fd) {
  struct pollfd q = {.fd = fd, .events = POLLIN};
  return poll(&q, 1, 0) == 1;
}

Test(share_host_oom, export_fails_cleanly_at_each_allocation) {
  gpupool *p = share_pool();
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 6 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  long failures = 0;
  for (long n = 1;; n++) {
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0, "%s", strerror(errno));
    gpupool_export *ex = NULL;
    alloc_fail_arm(n);
    gpupool_status st = gpupool_share_export(p, x, sv[0], &ex);
    int failed_here = alloc_fail_disarm();
    if (!failed_here) { /* past the export's last allocation: it went through */
      cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
      gpupool_import *im = NULL;
      void *y = NULL;
      size_t size = 0;
      cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_OK, "%s",
                   gpupool_last_error());
      cr_assert_eq(size, 6 * MiB);
      cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK, "%s", gpupool_last_error());
      int ended = 0;
      cr_assert_eq(gpupool_share_wait(ex, 10000, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
      cr_assert_eq(ended, 1);
      close(sv[0]);
      close(sv[1]);
      break;
    }
    failures++;
    cr_assert_eq(st, GPUPOOL_ERR_HOST_OOM, "allocation %ld failed: status %s (%s)", n,
                 gpupool_status_string(st), gpupool_last_error());
    cr_assert(strstr(gpupool_last_error(), "out of host memory"), "%s", gpupool_last_error());
    cr_assert_null(ex);
    cr_assert_not(readable(sv[1]), "a failed export left a message on the socket");
    close(sv[0]);
    close(sv[1]);
    cr_assert(n < 100, "the export makes more allocations than expected");
  }
  cr_assert_geq(failures, 1, "the export allocated nothing: the test proves nothing");
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
  cr_assert_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 0);
  gpupool_destroy(p);
}

Test(share_host_oom, import_fails_cleanly_at_each_allocation) {
  gpupool *p = share_pool();
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 6 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  long failures = 0;
  for (long n = 1;; n++) {
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0, "%s", strerror(errno));
    gpupool_export *ex = NULL;
    cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
    gpupool_import *im = NULL;
    void *y = NULL;
    size_t size = 0;
    alloc_fail_arm(n);
    gpupool_status st = gpupool_share_import(sv[1], 0, &y, &size, &im);
    int failed_here = alloc_fail_disarm();
    if (!failed_here) {
      cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
      cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK, "%s", gpupool_last_error());
    } else {
      failures++;
      cr_assert_eq(st, GPUPOOL_ERR_HOST_OOM, "allocation %ld failed: status %s (%s)", n,
                   gpupool_status_string(st), gpupool_last_error());
      cr_assert(strstr(gpupool_last_error(), "out of host memory"), "%s", gpupool_last_error());
      cr_assert_null(im);
      close(sv[1]); /* the importer gives up: the export ends with its socket */
      sv[1] = -1;
    }
    int ended = 0;
    cr_assert_eq(gpupool_share_wait(ex, 10000, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
    cr_assert_eq(ended, 1, "the export did not end after a failed import");
    close(sv[0]);
    if (sv[1] >= 0)
      close(sv[1]);
    if (!failed_here)
      break;
    cr_assert(n < 100, "the import makes more allocations than expected");
  }
  cr_assert_geq(failures, 1, "the import allocated nothing: the test proves nothing");
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "the block is still the caller's: %s",
               gpupool_last_error());
  gpupool_destroy(p);
}
