/* A free that comes while an export's pages are being sent (another thread
 * of the exporter, or a signal handler, frees the block mid-export). sendmsg
 * is wrapped at link time (tests/CMakeLists.txt: `_sendmsg_hook$`), so the
 * free lands exactly between the export's checks and its messages, with no
 * thread timing involved. The export has already promised the pages to the
 * importer: the free must be deferred until the importer releases them, as a
 * free of a block exported is, and never hand the pages to another block
 * while the importer maps them. */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpupool/share.h"
#include "helpers/pool_check.h"
#include "helpers/share_check.h"
#include "pool/types.h"

#define A       GPUPOOL_STAT_ALL
#define WAIT_MS 10000 /* a bound, never reached when things work */

ssize_t __real_sendmsg(int sock, const struct msghdr *msg, int flags);

/* Armed by a test: the first sendmsg frees hook_ptr of hook_pool. */
static gpupool *hook_pool;
static void *hook_ptr;
static gpupool_status hook_status = GPUPOOL_ERR_BACKEND; /* not called yet */

ssize_t __wrap_sendmsg(int sock, const struct msghdr *msg, int flags) {
  if (hook_ptr) {
    void *ptr = hook_ptr;
    hook_ptr = NULL;
    hook_status = gpupool_free(hook_pool, ptr);
  }
  return __real_sendmsg(sock, msg, flags);
}

Test(share_sendmsg_hook, free_during_the_export_is_deferred_until_the_release) {
  gpupool *p = share_pool();
  size_t size = 8 * MiB;
  void *x = share_take(p, size);
  memset(x, 0x5a, size);
  int sv[2];
  share_sockets(sv);

  hook_pool = p;
  hook_ptr = x;
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK,
               "an export whose block was freed while its pages went: %s", gpupool_last_error());
  cr_assert_null(hook_ptr, "the export sent no message");
  cr_assert_eq(hook_status, GPUPOOL_OK, "the free during the export failed: %s",
               gpupool_last_error());
  share_expect_fail(gpupool_free(p, x), GPUPOOL_ERR_INVALID, "double free");

  void *y = NULL;
  size_t got = 0;
  gpupool_import *im = NULL;
  cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &got, &im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  cr_assert_eq(got, size);
  cr_assert_eq(((unsigned char *)y)[size - 1], 0x5a, "the importer maps other memory");

  /* Counted as freed at the call, held until the importer lets go. */
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_frees, 1);
  cr_assert_eq(s.allocated_bytes[A].current, 0);
  cr_assert_eq(s.active_bytes[A].current, (int64_t)size, "the freed block left while imported");
  cr_assert_eq(s.pending_free_blocks, 1);
  void *z = share_take(p, size);
  cr_assert_neq(z, x, "the imported block was handed out again");
  memset(z, 0xee, size);
  cr_assert_eq(((unsigned char *)y)[0], 0x5a, "another block wrote over the imported pages");
  cr_assert_eq(gpupool_free(p, z), GPUPOOL_OK);

  int ended = 1;
  cr_assert_eq(gpupool_share_wait(ex, 0, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 0, "the export ended, but the importer still holds it");
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_share_wait(ex, WAIT_MS, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1);
  s = pc_stats(p);
  cr_assert_eq(s.active_bytes[A].current, 0, "the deferred free did not happen at the end");
  cr_assert_eq(s.pending_free_blocks, 0);
  share_expect_fail(gpupool_free(p, x), GPUPOOL_ERR_INVALID, "not a live allocation");
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

/* A failed send gives the block back to the caller, live, even when the map
 * of live blocks grew meanwhile (its room was kept). */
Test(share_sendmsg_hook, failed_export_leaves_the_block_live) {
  gpupool *p = share_pool();
  void *x = share_take(p, 8 * MiB);
  int sv[2];
  share_sockets(sv);
  close(sv[1]); /* the send fails: no peer */
  gpupool_export *ex = NULL;
  cr_assert_neq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK);
  cr_assert_null(ex);
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.allocated_bytes[A].current, 8 * (int64_t)MiB);
  cr_assert_eq(s.pending_free_blocks, 0);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "the block is not live after a failed export: %s",
               gpupool_last_error());
  close(sv[0]);
  gpupool_destroy(p);
}

/* The free inside a failed export: the block returns to the pool at once. */
Test(share_sendmsg_hook, free_during_a_failed_export_returns_the_block) {
  gpupool *p = share_pool();
  void *x = share_take(p, 8 * MiB);
  int sv[2];
  share_sockets(sv);
  close(sv[1]);
  hook_pool = p;
  hook_ptr = x;
  gpupool_export *ex = NULL;
  cr_assert_neq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK);
  cr_assert_eq(hook_status, GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.active_bytes[A].current, 0, "the freed block did not return after the failure");
  cr_assert_eq(s.pending_free_blocks, 0);
  cr_assert_eq(s.num_frees, 1);
  share_expect_fail(gpupool_free(p, x), GPUPOOL_ERR_INVALID, "not a live allocation");
  close(sv[0]);
  gpupool_destroy(p);
}
