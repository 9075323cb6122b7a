/* A free of an exported block racing with the end of its export (the
 * importer's release read by gpupool_share_wait on another thread): whatever
 * the order, the free succeeds exactly once and the block returns to the
 * pool. Runs under TSan as well. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpupool/share.h"
#include "helpers/pool_check.h"

typedef struct freer {
  gpupool *p;
  void *x;
  gpupool_status st;
  char error[256];
} freer;

static void *free_it(void *arg) {
  freer *f = arg;
  f->st = gpupool_free(f->p, f->x);
  snprintf(f->error, sizeof f->error, "%s", gpupool_last_error());
  return NULL;
}

Test(share_threads, free_races_with_the_end_of_the_export) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * PC_MiB, "expandable_segments:True");
  size_t rounds = pc_scaled(200);
  for (size_t round = 0; round < rounds; round++) {
    freer f = {.p = p};
    cr_assert_eq(gpupool_malloc(p, &f.x, 4 * PC_MiB, NULL), GPUPOOL_OK);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    gpupool_export *ex = NULL;
    cr_assert_eq(gpupool_share_export(p, f.x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
    void *y = NULL;
    size_t size = 0;
    gpupool_import *im = NULL;
    cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_OK, "%s",
                 gpupool_last_error());
    cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, free_it, &f), 0);
    int ended = 0;
    gpupool_status st = gpupool_share_wait(ex, 10000, &ended);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(st, GPUPOOL_OK, "round %zu: %s", round, gpupool_last_error());
    cr_assert_eq(ended, 1, "round %zu: the export did not end", round);
    cr_assert_eq(f.st, GPUPOOL_OK, "round %zu: the free failed: %s", round, f.error);
    gpupool_stats s = pc_stats(p);
    cr_assert_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 0, "round %zu", round);
    cr_assert_eq(s.active_bytes[GPUPOOL_STAT_ALL].current, 0, "round %zu: not back", round);
    cr_assert_eq(s.num_frees, round + 1, "round %zu: one free, counted once", round);
    close(sv[0]);
    close(sv[1]);
  }
  gpupool_destroy(p);
}
