/* Sharing a block of an expandable pool with another process
 * (gpupool/share.h) on the host backend, whose pages are slots of a memfd:
 * the descriptors really cross a Unix socket, and the importer maps the same
 * memory. A forked child writes through its imported pointer and the parent
 * reads the values in its own block; the lifetime rules (a free while
 * exported is deferred, the pages stay put) and every bad path. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpupool/share.h"
#include "helpers/pool_check.h"
#include "helpers/share_check.h"
#include "pool/pool_internal.h"

#define A       GPUPOOL_STAT_ALL
#define WAIT_MS 10000 /* a bound, never reached when things work */

/* Exports x over a new socket pair (sv) and imports it at the other end:
 * the importer's address. */
static void *export_import(gpupool *p, void *x, int sv[2], gpupool_export **ex,
                           gpupool_import **im) {
  share_sockets(sv);
  *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], ex), GPUPOOL_OK, "%s", gpupool_last_error());
  void *y = NULL;
  size_t got = 0;
  *im = NULL;
  cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &got, im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  return y;
}

static uint32_t word(size_t i, uint32_t seed) {
  return (uint32_t)(i * 2654435761u) ^ seed;
}

static void fill(void *p, size_t bytes, uint32_t seed) {
  uint32_t *w = p;
  for (size_t i = 0; i < bytes / 4; i++)
    w[i] = word(i, seed);
}

/* The index of the first word that differs, or SIZE_MAX. */
static size_t check(const void *p, size_t bytes, uint32_t seed) {
  const uint32_t *w = p;
  for (size_t i = 0; i < bytes / 4; i++)
    if (w[i] != word(i, seed))
      return i;
  return SIZE_MAX;
}

/* Waits for the export to end; the block is the caller's again. */
static void wait_ended(gpupool_export *ex) {
  int ended = 0;
  cr_assert_eq(gpupool_share_wait(ex, WAIT_MS, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1, "the export did not end within %d ms", WAIT_MS);
}

static void still_exported(gpupool_export *ex) {
  int ended = 1;
  cr_assert_eq(gpupool_share_wait(ex, 0, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 0, "the export ended, but the importer still holds it");
}

/* The end of a test that exported x of p and imported it in this process:
 * release, the export ends, x is freed, the sockets close, p goes. */
static void release_free_destroy(gpupool *p, void *x, int sv[2], gpupool_export *ex,
                                 gpupool_import *im) {
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  wait_ended(ex);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

/* The child's side of the fork tests: imports, checks, writes `seed` over
 * the block, releases unless told not to. Exit status: 0, or the step that
 * failed (the parent reports it). */
static int child_import(int sock, void *parent_ptr, size_t want_size, uint32_t seed, int release) {
  void *ptr = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  if (gpupool_share_import(sock, 0, &ptr, &size, &im) != GPUPOOL_OK) {
    fprintf(stderr, "child: import failed: %s\n", gpupool_last_error());
    return 10;
  }
  if (size != want_size)
    return 11;
  if (ptr == parent_ptr) /* its own mapping, not the inherited one */
    return 12;
  if (check(ptr, size, 0x5eed) != SIZE_MAX) /* what the parent wrote */
    return 13;
  fill(ptr, size, seed);
  if (release && gpupool_share_release(im) != GPUPOOL_OK)
    return 14;
  return 0;
}

/* A new socket pair and a fork: the child (0 returned) keeps sv[1], the
 * parent (the child's pid returned) sv[0]; each closes the other's end. */
static pid_t fork_over_sockets(int sv[2]) {
  share_sockets(sv);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  close(sv[pid == 0 ? 0 : 1]);
  return pid;
}

static void expect_child(pid_t pid) {
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status), "the child did not exit normally");
  cr_assert_eq(WEXITSTATUS(status), 0, "the child failed at step %d", WEXITSTATUS(status));
}

/* fork() while a block is exported: in the child the export is an orphan
 * (its pool and block are the parent's, which the child cannot use), so
 * waiting on it ends it at once and touches neither; the parent's export
 * goes on, and its importer gets the block as usual. Before, the child's
 * wait looked at the socket and found the export still running. */
Test(share, a_forked_child_sees_the_parents_export_as_an_orphan) {
  gpupool *p = share_pool();
  size_t size = 4 * MiB;
  void *x = share_take(p, size);
  fill(x, size, 0xf0f0);
  int sv[2];
  share_sockets(sv);
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    alarm(10);
    int ended = 0;
    if (gpupool_share_wait(ex, 0, &ended) != GPUPOOL_OK)
      _exit(1);
    _exit(ended ? 0 : 2);
  }
  expect_child(pid);
  still_exported(ex);
  void *y = NULL;
  size_t got = 0;
  gpupool_import *im = NULL;
  cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &got, &im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  cr_expect_eq(check(y, size, 0xf0f0), SIZE_MAX, "the importer sees the exporter's values");
  release_free_destroy(p, x, sv, ex, im);
}

Test(share, forked_child_writes_parent_reads) {
  gpupool *p = share_pool();
  size_t size = 10 * MiB + 4096; /* 6 pages of 2 MiB */
  void *x = share_take(p, size);
  fill(x, size, 0x5eed);
  int sv[2];
  pid_t pid = fork_over_sockets(sv);
  if (pid == 0) {
    _exit(child_import(sv[1], x, size, 0xc0ffee, 1));
  }
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  wait_ended(ex);
  expect_child(pid);
  cr_assert_eq(check(x, size, 0xc0ffee), SIZE_MAX, "the parent does not see the child's writes");
  fprintf(stderr,
          "[share] a forked child wrote %zu bytes through its import; the parent read "
          "them in its block\n",
          size);
  /* The block is an ordinary allocation again. */
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(pc_stats(p).allocated_bytes[A].current, 0);
  close(sv[0]);
  gpupool_destroy(p);
}

Test(share, importer_exit_without_release_ends_the_export) {
  gpupool *p = share_pool();
  size_t size = 4 * MiB;
  void *x = share_take(p, size);
  fill(x, size, 0x5eed);
  int sv[2];
  pid_t pid = fork_over_sockets(sv);
  if (pid == 0) {
    _exit(child_import(sv[1], x, size, 0xfeed, 0)); /* exits holding it */
  }
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  wait_ended(ex); /* the socket closed with the child */
  expect_child(pid);
  cr_assert_eq(check(x, size, 0xfeed), SIZE_MAX);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  close(sv[0]);
  gpupool_destroy(p);
}

/* More pages than one message carries (64): the export spans three
 * (over a seqpacket socket, the other kind that works). */
Test(share, large_block_in_several_messages) {
  gpupool *p = share_pool();
  size_t size = 150 * 2 * MiB;
  char *x = share_take(p, size);
  int sv[2];
  share_sockets_of(SOCK_SEQPACKET, sv);
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  char *y = NULL;
  size_t got = 0;
  gpupool_import *im = NULL;
  cr_assert_eq(gpupool_share_import(sv[1], 0, (void **)&y, &got, &im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  cr_assert_eq(got, size);
  for (size_t page = 0; page < 150; page++)
    y[page * 2 * MiB + page] = (char)(page + 1);
  for (size_t page = 0; page < 150; page++)
    cr_assert_eq(x[page * 2 * MiB + page], (char)(page + 1), "page %zu is not shared", page);
  release_free_destroy(p, x, sv, ex, im);
}

/* A free while exported succeeds and is deferred: the block stays active
 * and its pages stay under it, whatever else the pool does, until the
 * importer releases it; then it is back in the pool. */
Test(share, free_while_exported_is_deferred) {
  gpupool *p = share_pool();
  size_t size = 8 * MiB;
  void *x = share_take(p, size);
  int sv[2];
  gpupool_export *ex;
  gpupool_import *im;
  void *y = export_import(p, x, sv, &ex, &im);
  fill(y, size, 0xabc);

  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  share_expect_fail(gpupool_free(p, x), GPUPOOL_ERR_INVALID, "double free");
  share_expect_fail(gpupool_record_stream(p, x, (void *)0x10), GPUPOOL_ERR_INVALID, "exported");
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.active_bytes[A].current, (int64_t)size, "the exported block must stay");
  cr_assert_eq(s.num_frees, 1);

  /* Pressure: with no slack every idle page moves before a new one is made;
   * the exported block's pages are not idle. */
  void *z[4];
  for (int i = 0; i < 4; i++) {
    z[i] = share_take(p, 6 * MiB);
    memset(z[i], 0xff, 6 * MiB);
    cr_assert_eq(gpupool_free(p, z[i]), GPUPOOL_OK);
  }
  z[0] = share_take(p, 30 * MiB);
  memset(z[0], 0xee, 30 * MiB);
  cr_assert_eq(check(y, size, 0xabc), SIZE_MAX, "the exported pages moved");
  cr_assert_eq(gpupool_empty_cache(p) % (2 * MiB), 0);
  cr_assert_eq(check(y, size, 0xabc), SIZE_MAX, "empty_cache released the exported pages");
  still_exported(ex);

  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  wait_ended(ex);
  s = pc_stats(p);
  cr_assert_eq(s.allocated_bytes[A].current, 30 * (int64_t)MiB, "the deferred free did not happen");
  cr_assert_eq(s.num_frees, 5);
  share_expect_fail(gpupool_free(p, x), GPUPOOL_ERR_INVALID, "not a live allocation");
  cr_assert_eq(gpupool_free(p, z[0]), GPUPOOL_OK);
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

/* A free while exported counts as a free when it is called, as one
 * deferred by record_stream does (and as PyTorch counts frees): num_frees,
 * allocation and allocated bytes drop at once, and the block stays active,
 * a pending free, until the export ends, which counts nothing again. */
Test(share, free_while_exported_counts_when_called) {
  gpupool *p = share_pool();
  size_t size = 8 * MiB;
  void *x = share_take(p, size);
  int sv[2];
  gpupool_export *ex;
  gpupool_import *im;
  export_import(p, x, sv, &ex, &im);

  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_frees, 1, "a successful gpupool_free is counted when called");
  cr_expect_eq(s.allocation[A].current, 0);
  cr_expect_eq(s.allocated_bytes[A].current, 0);
  cr_expect_eq(s.requested_bytes[A].current, 0);
  cr_expect_eq(s.active[A].current, 1, "the importer still uses it");
  cr_expect_eq(s.active_bytes[A].current, (int64_t)size);
  cr_expect_eq(s.pending_free_blocks, 1);
  char msg[256];
  cr_expect_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, PC_EXPANDABLE, msg, sizeof msg), 0,
               "%s", msg);

  /* After a reset the end of the export adds no free. */
  gpupool_reset_accumulated_stats(p);
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  wait_ended(ex);
  s = pc_stats(p);
  cr_expect_eq(s.num_frees, 0, "the end of the export counted the free again");
  cr_expect_eq(s.active[A].current, 0);
  cr_expect_eq(s.active_bytes[A].current, 0);
  cr_expect_eq(s.pending_free_blocks, 0);
  cr_expect_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, PC_EXPANDABLE | PC_ACCUMULATED_RESET,
                                   msg, sizeof msg),
               0, "%s", msg);
  void *again = share_take(p, size);
  cr_expect_eq(again, x, "the block is back in the pool");
  cr_assert_eq(gpupool_free(p, again), GPUPOOL_OK);
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

/* Streams recorded before the export still hold the block freed while
 * exported: after the export ends it waits for their work, as any free after
 * record_stream does, and counts as a free once. */
Test(share, streams_recorded_before_the_export_hold_the_freed_block) {
  gpupool *p = share_pool();
  size_t size = 4 * MiB;
  void *x = share_take(p, size);
  gpupool_host_stream *other = gpupool_host_stream_create();
  cr_assert_eq(gpupool_record_stream(p, x, other), GPUPOOL_OK, "%s", gpupool_last_error());
  int sv[2];
  gpupool_export *ex;
  gpupool_import *im;
  export_import(p, x, sv, &ex, &im);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_host_stream_enqueue(other); /* work queued after the free: waited for too */
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  wait_ended(ex);

  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_frees, 1);
  cr_expect_eq(s.pending_free_blocks, 1, "the other stream's work is not done");
  cr_expect_eq(s.active_bytes[A].current, (int64_t)size);
  cr_expect_eq(s.num_sync_events, 1);
  void *z = share_take(p, size);
  cr_expect_neq(z, x, "the block was reused before its stream's work completed");
  cr_assert_eq(gpupool_free(p, z), GPUPOOL_OK);
  gpupool_host_stream_complete(other);
  z = share_take(p, size); /* polls the pending block */
  s = pc_stats(p);
  cr_expect_eq(s.pending_free_blocks, 0);
  cr_expect_eq(s.num_frees, 2);
  cr_assert_eq(gpupool_free(p, z), GPUPOOL_OK);
  char msg[256];
  s = pc_stats(p);
  cr_expect_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, PC_EXPANDABLE, msg, sizeof msg), 0,
               "%s", msg);
  gpupool_host_stream_destroy(other);
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

/* Destroying the pool orphans its exports: their wait ends them at once. */
Test(share, destroy_orphans_the_export) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  int sv[2];
  gpupool_export *ex;
  gpupool_import *im;
  export_import(p, x, sv, &ex, &im);
  gpupool_destroy(p);
  int ended = 0;
  cr_assert_eq(gpupool_share_wait(ex, 0, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1, "an orphaned export must end at once");
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  close(sv[0]);
  close(sv[1]);
}

Test(share, bad_exports_change_nothing) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  int sv[2];
  share_sockets(sv);
  gpupool_export *ex = NULL;

  share_expect_fail(gpupool_share_export(NULL, x, sv[0], &ex), GPUPOOL_ERR_INVALID, "NULL");
  share_expect_fail(gpupool_share_export(p, x, sv[0], NULL), GPUPOOL_ERR_INVALID, "NULL");
  int foreign;
  share_expect_fail(gpupool_share_export(p, &foreign, sv[0], &ex), GPUPOOL_ERR_INVALID,
                    "not a live allocation");
  void *freed = share_take(p, 4 * MiB);
  cr_assert_eq(gpupool_free(p, freed), GPUPOOL_OK);
  share_expect_fail(gpupool_share_export(p, freed, sv[0], &ex), GPUPOOL_ERR_INVALID,
                    "not a live allocation");
  void *small = share_take(p, 4096);
  share_expect_fail(gpupool_share_export(p, small, sv[0], &ex), GPUPOOL_ERR_INVALID, "small block");
  int pipefd[2];
  cr_assert_eq(pipe(pipefd), 0);
  share_expect_fail(gpupool_share_export(p, x, pipefd[0], &ex), GPUPOOL_ERR_INVALID,
                    "not a socket");
  share_expect_fail(gpupool_share_export(p, x, 987, &ex), GPUPOOL_ERR_INVALID,
                    "not an open descriptor");
  int dgram[2];
  share_sockets_of(SOCK_DGRAM, dgram);
  share_expect_fail(gpupool_share_export(p, x, dgram[0], &ex), GPUPOOL_ERR_INVALID,
                    "not a Unix stream or seqpacket socket");
  close(dgram[0]);
  close(dgram[1]);
  int udp = socket(AF_INET, SOCK_DGRAM, 0);
  cr_assert_geq(udp, 0);
  share_expect_fail(gpupool_share_export(p, x, udp, &ex), GPUPOOL_ERR_INVALID, "AF_UNIX");
  close(udp);
  cr_assert_null(ex);

  /* Nothing was sent, and x is an ordinary allocation still. */
  struct pollfd pfd = {sv[1], POLLIN, 0};
  cr_assert_eq(poll(&pfd, 1, 0), 0, "a failed export wrote to the socket");
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_free(p, small), GPUPOOL_OK);
  close(pipefd[0]);
  close(pipefd[1]);
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

Test(share, not_an_expandable_pool) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * MiB, NULL);
  void *x = share_take(p, 4 * MiB);
  int sv[2];
  share_sockets(sv);
  gpupool_export *ex = NULL;
  share_expect_fail(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_ERR_INVALID, "expandable");
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

/* A device whose pages cannot be exported (no POSIX file descriptor
 * support, or a driver that refused shareable pages) says so. */
Test(share, unsupported_device) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  int sv[2];
  share_sockets(sv);
  gpupool_export *ex = NULL;
  pthread_mutex_lock(&p->slow_lock);
  p->be->shareable = 0; /* as backend_cuda_vmm.c leaves it on such a device */
  pthread_mutex_unlock(&p->slow_lock);
  share_expect_fail(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_ERR_UNSUPPORTED,
                    "cannot export memory as POSIX file descriptors");
  cr_assert_null(ex);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

Test(share, closed_socket) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  int sv[2];
  share_sockets(sv);
  close(sv[1]);
  gpupool_export *ex = NULL;
  share_expect_fail(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_ERR_INVALID, "peer closed");
  cr_assert_null(ex);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "a failed export kept the block: %s",
               gpupool_last_error());
  close(sv[0]);

  /* The importer's side: the exporter closed its end, nothing was sent. */
  share_sockets(sv);
  close(sv[0]);
  void *y = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
                    "was closed");
  cr_assert_null(im);
  close(sv[1]);
  gpupool_destroy(p);
}

/* A Unix socket that was never connected is not one whose peer closed it. */
Test(share, unconnected_socket) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  static const int types[] = {SOCK_STREAM, SOCK_SEQPACKET};
  for (int i = 0; i < 2; i++) {
    int s = socket(AF_UNIX, types[i], 0);
    cr_assert_geq(s, 0);
    gpupool_export *ex = NULL;
    share_expect_fail(gpupool_share_export(p, x, s, &ex), GPUPOOL_ERR_INVALID, "is not connected");
    cr_expect_null(strstr(gpupool_last_error(), "peer closed"), "%s", gpupool_last_error());
    cr_assert_null(ex);
    void *y = NULL;
    size_t size = 0;
    gpupool_import *im = NULL;
    share_expect_fail(gpupool_share_import(s, 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
                      "is not connected");
    cr_assert_null(im);
    close(s);
  }
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "a failed export kept the block: %s",
               gpupool_last_error());
  gpupool_destroy(p);
}

Test(share, second_export_and_second_import_are_refused) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB), *w = share_take(p, 4 * MiB);
  int sv[2], other[2];
  share_sockets(sv);
  share_sockets(other);
  gpupool_export *ex = NULL, *ex2 = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  share_expect_fail(gpupool_share_export(p, x, other[0], &ex2), GPUPOOL_ERR_INVALID,
                    "exported already");
  share_expect_fail(gpupool_share_export(p, w, sv[0], &ex2), GPUPOOL_ERR_INVALID,
                    "carries another export");
  cr_assert_null(ex2);

  void *y = NULL, *y2 = NULL;
  size_t size = 0;
  gpupool_import *im = NULL, *im2 = NULL;
  cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  share_expect_fail(gpupool_share_import(sv[1], 0, &y2, &size, &im2), GPUPOOL_ERR_INVALID,
                    "carries an imported block already");
  cr_assert_null(im2);
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  wait_ended(ex);

  /* Once ended, the block can be exported again, on the same socket. */
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  wait_ended(ex);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, w), GPUPOOL_OK);
  close(sv[0]);
  close(sv[1]);
  close(other[0]);
  close(other[1]);
  gpupool_destroy(p);
}

/* Relays one message from `from` to `to` (SOCK_SEQPACKET records) with its
 * descriptors and `extra` more (each a new descriptor of /dev/null); with
 * swap_first, /dev/null takes the first descriptor's place. */
static void relay_message(int from, int to, int extra, int swap_first) {
  char body[4096];
  union {
    char buf[CMSG_SPACE(80 * sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {body, sizeof body};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  ssize_t n = recvmsg(from, &mh, 0);
  cr_assert_gt(n, 0);
  int fds[80], nfds = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
    for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
      memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
  for (int i = 0; i < extra; i++)
    cr_assert_geq(fds[nfds++] = open("/dev/null", O_RDONLY), 0);
  if (swap_first) {
    cr_assert_gt(nfds, 0);
    close(fds[0]);
    cr_assert_geq(fds[0] = open("/dev/null", O_RDONLY), 0);
  }
  iov.iov_len = (size_t)n;
  mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
  memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
  cr_assert_eq(sendmsg(to, &mh, 0), n);
  for (int i = 0; i < nfds; i++)
    close(fds[i]);
}

/* Exports x, relays the export's first message over another socket pair
 * (relay_message; extra < 0: the message alone, without its descriptors)
 * and imports it there: the import fails, GPUPOOL_ERR_INVALID saying text,
 * and sends the release the export waits for. The export ends once its
 * importer's end closes. */
static void relayed_import_fails(gpupool *p, void *x, int extra, int swap_first, const char *text) {
  int sv[2], relay[2];
  share_sockets_of(SOCK_SEQPACKET, sv);
  share_sockets_of(SOCK_SEQPACKET, relay);
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  if (extra >= 0) {
    relay_message(sv[1], relay[0], extra, swap_first);
  } else {
    char body[4096];
    ssize_t n = read(sv[1], body, sizeof body);
    cr_assert_gt(n, 0);
    cr_assert_eq(write(relay[0], body, (size_t)n), n);
  }
  void *y = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  share_expect_fail(gpupool_share_import(relay[1], 0, &y, &size, &im), GPUPOOL_ERR_INVALID, text);
  cr_assert_null(im);
  struct pollfd pf = {relay[0], POLLIN, 0};
  cr_assert_eq(poll(&pf, 1, WAIT_MS), 1, "the importer sent the release");
  char release[4096];
  cr_assert_gt(read(relay[0], release, sizeof release), 0);
  close(sv[1]);
  int ended = 0;
  cr_assert_eq(gpupool_share_wait(ex, WAIT_MS, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert(ended);
  close(sv[0]);
  close(relay[0]);
  close(relay[1]);
}

/* An export's first message that comes with more descriptors than it names
 * (or fewer) is refused for that reason. */
Test(share, first_message_with_the_wrong_descriptor_count) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  relayed_import_fails(p, x, 1, 0, "first message came with 3 file descriptors where it names 2");
  relayed_import_fails(p, x, -1, 0, "first message came with 0 file descriptors where it names 2");
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  gpupool_destroy(p);
}

/* A failure the backend words (here the host backend's check that a
 * descriptor holds the page) reaches gpupool_last_error() under the share
 * call's name, as the call's own failures do. */
Test(share, a_backend_failure_is_named_by_the_call) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  relayed_import_fails(p, x, 0, 1, "gpupool_share_import: host backend: descriptor");
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(share, garbage_on_the_socket) {
  void *y = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  int sv[2];

  /* Bytes that are no message at all. */
  share_sockets(sv);
  cr_assert_eq(write(sv[0], "GET / HTTP/1.1\r\n\r\n", 18), 18);
  share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
                    "not a gpupool share message");
  close(sv[0]);
  close(sv[1]);

  /* A message of the right size and magic, but no export; then a
   * truncated one. */
  share_sockets(sv);
  unsigned char msg[1024];
  memset(msg, 0x7f, sizeof msg);
  memcpy(msg, "GPSH", 4);
  cr_assert_eq(write(sv[0], msg, sizeof msg), (ssize_t)sizeof msg);
  share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
                    "not the start of an export");
  close(sv[0]);
  close(sv[1]);
  share_sockets(sv);
  cr_assert_eq(write(sv[0], msg, 40), 40);
  close(sv[0]);
  share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
                    "in the middle of a message");
  cr_assert_null(im);
  close(sv[1]);

  /* The exporter's side: garbage where the release should come (one record
   * each on a seqpacket socket: too long, then of the right size but no
   * release); the export goes on until the importer's end closes. */
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  share_sockets_of(SOCK_SEQPACKET, sv);
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  char exported[1024];
  ssize_t msg_size = read(sv[1], exported, sizeof exported); /* the export's one message */
  cr_assert_gt(msg_size, 40);
  cr_assert_eq(write(sv[1], msg, sizeof msg), (ssize_t)sizeof msg);
  int ended = 1;
  share_expect_fail(gpupool_share_wait(ex, WAIT_MS, &ended), GPUPOOL_ERR_INVALID, "wrong size");
  cr_assert_eq(ended, 0);
  cr_assert_eq(write(sv[1], msg, (size_t)msg_size), msg_size);
  share_expect_fail(gpupool_share_wait(ex, WAIT_MS, &ended), GPUPOOL_ERR_INVALID,
                    "not the release of this export");
  cr_assert_eq(ended, 0);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK); /* deferred: active until the end */
  cr_assert_eq(pc_stats(p).active_bytes[A].current, 4 * (int64_t)MiB);
  close(sv[1]);
  wait_ended(ex);
  cr_assert_eq(pc_stats(p).active_bytes[A].current, 0);
  close(sv[0]);
  gpupool_destroy(p);
}

Test(share, bad_import_arguments) {
  int sv[2];
  share_sockets(sv);
  void *y = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  share_expect_fail(gpupool_share_import(sv[1], 0, NULL, &size, &im), GPUPOOL_ERR_INVALID, "NULL");
  share_expect_fail(gpupool_share_import(-1, 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
                    "not an open descriptor");
  share_expect_fail(gpupool_share_release(NULL), GPUPOOL_ERR_INVALID, "NULL");
  int ended = 5;
  share_expect_fail(gpupool_share_wait(NULL, 0, &ended), GPUPOOL_ERR_INVALID, "NULL");
  cr_expect_eq(ended, 0, "a failed wait says 0");
  close(sv[0]);
  close(sv[1]);
}

/* A timeout below -1 is no timeout the header defines: refused, not
 * taken as "forever". */
Test(share, wait_refuses_a_timeout_below_minus_one) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  int sv[2];
  gpupool_export *ex = NULL;
  gpupool_import *im = NULL;
  export_import(p, x, sv, &ex, &im);
  int ended = 5;
  share_expect_fail(gpupool_share_wait(ex, -2, &ended), GPUPOOL_ERR_INVALID, "timeout_ms -2");
  cr_expect_eq(ended, 0);
  still_exported(ex);
  release_free_destroy(p, x, sv, ex, im);
}

/* An importer at its open-file limit: the kernel drops descriptors of the
 * first message. The import fails with the reason (the limit, not the
 * exporter), and sends the release a failed import owes, so the export
 * ends at once. The importer is a child, which may lower its own limit. */
Test(share, importer_at_its_file_limit_fails_and_releases) {
  gpupool *p = share_pool();
  size_t size = 131 * 2 * MiB; /* 64 descriptors in the first message */
  void *x = share_take(p, size);
  int sv[2];
  pid_t pid = fork_over_sockets(sv);
  if (pid == 0) {
    int highest = sv[1];
    struct rlimit lim = {(rlim_t)highest + 20, (rlim_t)highest + 20};
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
      _exit(20);
    void *y = NULL;
    size_t got = 0;
    gpupool_import *im = NULL;
    gpupool_status st = gpupool_share_import(sv[1], 0, &y, &got, &im);
    if (st != GPUPOOL_ERR_BACKEND)
      _exit(21);
    if (!strstr(gpupool_last_error(), "RLIMIT_NOFILE"))
      _exit(22);
    if (im || y)
      _exit(23);
    pause(); /* holds the socket open: only the release can end the export */
    _exit(0);
  }
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  int ended = 0;
  gpupool_status st = gpupool_share_wait(ex, WAIT_MS, &ended);
  int status = 0;
  pid_t done = waitpid(pid, &status, WNOHANG);
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  cr_assert_eq(done, 0, "the child exited with status %d before the export ended",
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1, "no release came from the failed import");
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  close(sv[0]);
  gpupool_destroy(p);
}
