/* Streams: a block is reused at once on its own stream, never on another;
 * record_stream defers reuse until the events recorded at free complete. Host
 * streams simulate pending work (gpupool/host.h). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/pool_check.h"

#define KiB PC_KiB
#define MiB PC_MiB
#define A   GPUPOOL_STAT_ALL

static const gpupool_strategy strategies[] = {GPUPOOL_STRATEGY_BFC, GPUPOOL_STRATEGY_ROUND,
                                              GPUPOOL_STRATEGY_NAIVE};
static const char *const strategy_names[] = {"bfc", "round", "naive"};

Test(pool_streams, same_stream_reuses_at_once) {
  gpupool_host_stream *a = gpupool_host_stream_create();
  for (int k = 0; k < 3; k++) {
    gpupool *p = pc_pool(strategies[k], 0, NULL);
    void *streams[] = {NULL, a};
    for (int i = 0; i < 2; i++) {
      void *x = pc_must_malloc(p, 4096, streams[i]);
      gpupool_host_stream_enqueue(a); /* pending work on the stream does not matter */
      pc_must_free(p, x);
      cr_expect_eq(pc_must_malloc(p, 4096, streams[i]), x, "%s, stream %d", strategy_names[k], i);
    }
    gpupool_stats s = pc_stats(p);
    cr_expect_eq(s.num_device_alloc, 2, "%s: one segment per stream", strategy_names[k]);
    cr_expect_eq(s.num_cache_hits, 2, "%s", strategy_names[k]);
    cr_expect_eq(s.num_sync_events, 0, "%s", strategy_names[k]);
    pc_expect_consistent(p, strategies[k]);
    gpupool_destroy(p);
  }
  gpupool_host_stream_destroy(a);
}

Test(pool_streams, different_streams_never_share_a_block) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  for (int k = 0; k < 3; k++) {
    gpupool *p = pc_pool(strategies[k], 0, NULL);
    void *x = pc_must_malloc(p, 4096, a);
    pc_must_free(p, x); /* a's segment is now entirely free */
    void *y = pc_must_malloc(p, 4096, b);
    cr_expect_neq(y, x, "%s: stream b got stream a's block", strategy_names[k]);
    void *z = pc_must_malloc(p, 4096, NULL);
    cr_expect(z != x && z != y, "%s: the default stream is a stream of its own", strategy_names[k]);
    gpupool_stats s = pc_stats(p);
    cr_expect_eq(s.num_device_alloc, 3, "%s: segments are never shared across streams",
                 strategy_names[k]);
    cr_expect_eq(pc_must_malloc(p, 4096, a), x, "%s", strategy_names[k]);
    pc_expect_consistent(p, strategies[k]);
    gpupool_destroy(p);
  }
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, bfc_large_segment_of_one_stream_is_not_split_for_another) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  pc_must_malloc(p, 2 * MiB, a); /* 18 MiB free on a */
  pc_must_malloc(p, 2 * MiB, b);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.segment[GPUPOOL_STAT_LARGE].current, 2);
  cr_expect_eq(s.reserved_bytes[A].current, 40 * (int64_t)MiB);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, record_stream_defers_reuse_until_the_stream_completes) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x = pc_must_malloc(p, 512, a);
  void *y = pc_must_malloc(p, 512, a);
  cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_host_stream_enqueue(b); /* x is in use by work queued on b */
  pc_must_free(p, x);

  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_sync_events, 1);
  cr_expect_eq(s.pending_free_blocks, 1);
  cr_expect_eq(s.allocation[A].current, 1, "x is no longer allocated");
  cr_expect_eq(s.allocated_bytes[A].current, 512);
  cr_expect_eq(s.requested_bytes[A].current, 512);
  cr_expect_eq(s.active[A].current, 2, "x is still active while b's work is pending");
  cr_expect_eq(s.active[GPUPOOL_STAT_SMALL].current, 2);
  cr_expect_eq(s.active_bytes[A].current, 1024);
  cr_expect_eq(s.num_frees, 1);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);

  void *z = pc_must_malloc(p, 512, a);
  cr_expect(z != x, "x was reused while b's work was pending");
  cr_expect_eq(pc_stats(p).pending_free_blocks, 1);

  gpupool_host_stream_complete(b);
  void *w = pc_must_malloc(p, 512, a);
  cr_expect_eq(w, x, "after b completes, x is the best fit again");
  s = pc_stats(p);
  cr_expect_eq(s.pending_free_blocks, 0);
  cr_expect_eq(s.active[A].current, 3);
  cr_expect_eq(s.allocation[A].current, 3);
  cr_expect_eq(s.active_bytes[A].current, s.allocated_bytes[A].current);
  cr_expect_eq(s.num_device_alloc, 1);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  (void)y;
  gpupool_destroy(p);
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, record_stream_waits_for_every_recorded_stream) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create(),
                      *c = gpupool_host_stream_create();
  for (int k = 0; k < 3; k++) {
    gpupool *p = pc_pool(strategies[k], 0, NULL);
    void *x = pc_must_malloc(p, 8192, a);
    cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK);
    cr_assert_eq(gpupool_record_stream(p, x, c), GPUPOOL_OK);
    cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK); /* twice: still one stream */
    gpupool_host_stream_enqueue(b);
    gpupool_host_stream_enqueue(c);
    pc_must_free(p, x);
    gpupool_stats s = pc_stats(p);
    cr_expect_eq(s.num_sync_events, 2, "%s: one event per other stream", strategy_names[k]);
    gpupool_host_stream_complete(b);
    void *y = pc_must_malloc(p, 8192, a);
    cr_expect_neq(y, x, "%s: c's work is still pending", strategy_names[k]);
    cr_expect_eq(pc_stats(p).pending_free_blocks, 1, "%s", strategy_names[k]);
    gpupool_host_stream_complete(c);
    cr_expect_eq(pc_must_malloc(p, 8192, a), x, "%s", strategy_names[k]);
    cr_expect_eq(pc_stats(p).pending_free_blocks, 0, "%s", strategy_names[k]);
    pc_expect_consistent(p, strategies[k]);
    gpupool_destroy(p);
  }
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
  gpupool_host_stream_destroy(c);
}

Test(pool_streams, record_stream_on_an_idle_stream_does_not_delay_reuse) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x = pc_must_malloc(p, 4096, a);
  pc_must_malloc(p, 512, a);
  cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK);    /* nothing enqueued on b */
  cr_assert_eq(gpupool_record_stream(p, x, NULL), GPUPOOL_OK); /* default: always complete */
  pc_must_free(p, x);
  cr_expect_eq(pc_must_malloc(p, 4096, a), x);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.pending_free_blocks, 0);
  cr_expect_eq(s.active[A].current, s.allocation[A].current);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, record_stream_on_the_own_stream_is_a_no_op) {
  gpupool_host_stream *a = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x = pc_must_malloc(p, 4096, a);
  pc_must_malloc(p, 512, a);
  cr_assert_eq(gpupool_record_stream(p, x, a), GPUPOOL_OK);
  gpupool_host_stream_enqueue(a);
  pc_must_free(p, x);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_sync_events, 0);
  cr_expect_eq(s.pending_free_blocks, 0);
  cr_expect_eq(pc_must_malloc(p, 4096, a), x);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(a);
}

Test(pool_streams, empty_cache_releases_pending_blocks_once_complete) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x = pc_must_malloc(p, 12 * MiB, a); /* a segment of its own */
  cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK);
  gpupool_host_stream_enqueue(b);
  pc_must_free(p, x);
  cr_expect_eq(gpupool_empty_cache(p), 0, "x's segment is still in use by b");
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.reserved_bytes[A].current, 12 * (int64_t)MiB);
  cr_expect_eq(s.pending_free_blocks, 1);
  cr_expect_eq(s.active_bytes[A].current, 12 * (int64_t)MiB);
  cr_expect_eq(s.allocated_bytes[A].current, 0);
  gpupool_host_stream_complete(b);
  cr_expect_eq(gpupool_empty_cache(p), 12 * MiB);
  s = pc_stats(p);
  char msg[256];
  cr_expect_eq(pc_check_empty(&s, msg, sizeof msg), 0, "%s", msg);
  cr_expect_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, 0, msg, sizeof msg), 0, "%s", msg);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, oom_path_waits_for_pending_blocks_and_retries) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 32 * MiB, NULL);
  void *x = pc_must_malloc(p, 20 * MiB, a);
  cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK);
  gpupool_host_stream_enqueue(b);
  pc_must_free(p, x);
  cr_expect_eq(gpupool_empty_cache(p), 0, "x waits on b");

  /* 20 + 20 > 32: the OOM path synchronizes the device, completes x's
   * events, releases its segment and retries (on another stream, too) */
  void *y = pc_must_malloc(p, 20 * MiB, NULL);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_ooms, 0);
  cr_expect_eq(s.num_alloc_retries, 1);
  cr_expect_eq(s.num_device_free, 1);
  cr_expect_eq(s.pending_free_blocks, 0);
  cr_expect_eq(s.reserved_bytes[A].current, 20 * (int64_t)MiB);
  pc_pattern_fill(y, 20 * MiB, 8);
  cr_expect_eq(pc_pattern_check(y, 20 * MiB, 8), SIZE_MAX);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);

  /* a live allocation on a busy stream is never touched: out of memory */
  cr_assert_eq(gpupool_record_stream(p, y, b), GPUPOOL_OK);
  gpupool_host_stream_enqueue(b);
  void *z = NULL;
  cr_expect_eq(gpupool_malloc(p, &z, 20 * MiB, a), GPUPOOL_ERR_OOM);
  cr_expect_eq(pc_pattern_check(y, 20 * MiB, 8), SIZE_MAX);
  s = pc_stats(p);
  cr_expect_eq(s.num_ooms, 1);
  cr_expect_eq(s.allocation[A].current, 1);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, round_and_naive_defer_reuse_too) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  for (int k = 1; k < 3; k++) {
    gpupool *p = pc_pool(strategies[k], 0, NULL);
    void *x = pc_must_malloc(p, 3 * MiB, a);
    cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK);
    gpupool_host_stream_enqueue(b);
    pc_must_free(p, x);
    gpupool_stats s = pc_stats(p);
    cr_expect_eq(s.active[GPUPOOL_STAT_LARGE].current, 1, "%s", strategy_names[k]);
    cr_expect_eq(s.allocation[GPUPOOL_STAT_LARGE].current, 0, "%s", strategy_names[k]);
    void *y = pc_must_malloc(p, 3 * MiB, a);
    cr_expect_neq(y, x, "%s", strategy_names[k]);
    gpupool_host_stream_complete(b);
    cr_expect_eq(pc_must_malloc(p, 3 * MiB, a), x, "%s", strategy_names[k]);
    pc_expect_consistent(p, strategies[k]);
    gpupool_destroy(p);
  }
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, destroy_with_pending_blocks_is_clean) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x = pc_must_malloc(p, 4096, a);
  pc_must_malloc(p, 4096, a); /* a live allocation left at destroy, too */
  cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK);
  gpupool_host_stream_enqueue(b);
  pc_must_free(p, x);
  gpupool_destroy(p); /* ASan reports anything leaked or touched after free */
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, record_stream_rejects_pointers_it_does_not_own) {
  gpupool_host_stream *b = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x = pc_must_malloc(p, 4096, NULL);
  void *freed = pc_must_malloc(p, 4096, NULL);
  pc_must_free(p, freed);
  void *foreign = malloc(64);
  gpupool_stats before = pc_stats(p);
  struct {
    const char *what;
    void *ptr;
  } bad[] = {
      {"a malloc'd pointer", foreign},
      {"an interior pointer", (char *)x + 512},
      {"one past the block", (char *)x + 4096},
      {"a freed block", freed},
      {"NULL", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_expect_eq(gpupool_record_stream(p, bad[i].ptr, b), GPUPOOL_ERR_INVALID, "%s", bad[i].what);
    cr_expect_neq(gpupool_last_error()[0], '\0', "%s: no reason given", bad[i].what);
  }
  cr_expect_eq(gpupool_record_stream(NULL, x, b), GPUPOOL_ERR_INVALID);
  gpupool_stats after = pc_stats(p);
  cr_expect_eq(memcmp(&before, &after, sizeof before), 0, "failed calls changed the stats");
  /* x itself is unaffected: freed at once, no event */
  pc_must_free(p, x);
  cr_expect_eq(pc_stats(p).num_sync_events, 0);
  free(foreign);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, a_pending_block_is_not_live) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x = pc_must_malloc(p, 4096, a);
  cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK);
  gpupool_host_stream_enqueue(b);
  pc_must_free(p, x);
  gpupool_stats before = pc_stats(p);
  cr_expect_eq(gpupool_free(p, x), GPUPOOL_ERR_INVALID, "a double free while pending");
  cr_expect_eq(gpupool_record_stream(p, x, b), GPUPOOL_ERR_INVALID);
  gpupool_stats after = pc_stats(p);
  cr_expect_eq(memcmp(&before, &after, sizeof after), 0, "refused calls changed the stats");
  gpupool_host_stream_complete(b);
  gpupool_empty_cache(p);
  after = pc_stats(p);
  char msg[256];
  cr_expect_eq(pc_check_empty(&after, msg, sizeof msg), 0, "%s", msg);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(a);
  gpupool_host_stream_destroy(b);
}

Test(pool_streams, destroying_the_recorded_stream_finishes_its_work) {
  gpupool_host_stream *b = gpupool_host_stream_create();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x = pc_must_malloc(p, 4096, NULL);
  pc_must_malloc(p, 512, NULL);
  cr_assert_eq(gpupool_record_stream(p, x, b), GPUPOOL_OK);
  gpupool_host_stream_enqueue(b);
  pc_must_free(p, x);
  cr_expect_neq(pc_must_malloc(p, 4096, NULL), x);
  gpupool_host_stream_destroy(b); /* like cudaStreamDestroy: queued work still completes */
  cr_expect_eq(pc_must_malloc(p, 4096, NULL), x);
  cr_expect_eq(pc_stats(p).pending_free_blocks, 0);
  gpupool_destroy(p);
}

Test(pool_streams, many_streams_fail_cleanly_or_work) {
  /* A pool keeps one shard per stream it has seen; past what it supports,
   * malloc must fail with a clear status, never corrupt anything. */
  enum { N = 1100 };
  static gpupool_host_stream *s[N];
  static void *ptr[N];
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  size_t ok = 0;
  for (int i = 0; i < N; i++) {
    s[i] = gpupool_host_stream_create();
    ptr[i] = NULL;
    gpupool_status st = gpupool_malloc(p, &ptr[i], 512, s[i]);
    cr_assert(st == GPUPOOL_OK || st == GPUPOOL_ERR_UNSUPPORTED, "stream %d: %s", i,
              gpupool_status_string(st));
    if (st == GPUPOOL_OK) {
      ok++;
      pc_pattern_fill(ptr[i], 512, (uint64_t)i);
    } else if ((size_t)i == ok) { /* the first refused: too many streams, not out of memory */
      const char *e = gpupool_last_error();
      cr_expect(strstr(e, "at most 1024 streams"), "stream %d: %s", i, e);
      cr_expect_null(strstr(e, "host memory"), "stream %d: %s", i, e);
    }
  }
  cr_expect_eq(ok, 1024, "1024 streams per pool");
  gpupool_stats st = pc_stats(p);
  cr_expect_eq(st.allocation[A].current, (int64_t)ok);
  cr_expect_eq(st.segment[A].current, (int64_t)ok, "one small segment per stream");
  char msg[256];
  cr_expect_eq(pc_check_invariants(&st, GPUPOOL_STRATEGY_BFC, 0, msg, sizeof msg), 0, "%s", msg);
  for (int i = 0; i < N; i++) {
    if (ptr[i]) {
      cr_expect_eq(pc_pattern_check(ptr[i], 512, (uint64_t)i), SIZE_MAX, "stream %d", i);
      pc_must_free(p, ptr[i]);
    }
    gpupool_host_stream_destroy(s[i]);
  }
  gpupool_empty_cache(p);
  st = pc_stats(p);
  cr_expect_eq(pc_check_empty(&st, msg, sizeof msg), 0, "%s", msg);
  cr_log_info("%zu of %d streams served", ok, N);
  gpupool_destroy(p);
}
