/* gpupool_last_error() is the reason for the last failure the caller saw,
 * as errno is: a call that succeeds leaves it as it was, also when it
 * recovered on its way from a failure of its own (a device allocation
 * retried after the cache was emptied, pages moved when none could be
 * created, a replay's OOMs). Failures are made with the host backend's
 * fault injection. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpupool/advisor.h"
#include "core/errors.h"
#include "gpupool/host.h"
#include "helpers/pool_check.h"
#include "pool/backend_host_testing.h"

#define MiB PC_MiB

/* A failure the caller sees: the reason every later success must keep. */
static const char *fail_on_purpose(gpupool *p) {
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 0, NULL), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "size 0 is zero"), "%s", gpupool_last_error());
  return "size 0 is zero";
}

static void expect_kept(const char *why, const char *after) {
  cr_expect(strstr(gpupool_last_error(), why), "after %s, gpupool_last_error() is \"%s\"", after,
            gpupool_last_error());
}

Test(pool_last_error, an_allocation_retried_after_emptying_the_cache_keeps_it) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * MiB, "fault_every_n:2");
  const char *why = fail_on_purpose(p);
  void *a = NULL, *b = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 12 * MiB, NULL), GPUPOOL_OK, "device attempt 1");
  cr_assert_eq(gpupool_malloc(p, &b, 14 * MiB, NULL), GPUPOOL_OK,
               "attempt 2 fails, the retry (attempt 3) succeeds: %s", gpupool_last_error());
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_alloc_retries, 1, "the injected fault was recovered from");
  cr_assert_eq(s.num_ooms, 0);
  expect_kept(why, "a recovered device failure");
  cr_expect_null(strstr(gpupool_last_error(), "injected"));
  pc_must_free(p, a);
  pc_must_free(p, b);
  gpupool_destroy(p);
}

/* On a thread that has seen no failure, the reason stays "". */
static void *recover_on_a_new_thread(void *arg) {
  gpupool *p = arg;
  void *b = NULL;
  gpupool_status st = gpupool_malloc(p, &b, 14 * MiB, NULL); /* attempt 2 fails, 3 succeeds */
  char *seen = strdup(gpupool_last_error());
  if (st == GPUPOOL_OK)
    gpupool_free(p, b);
  return seen;
}

Test(pool_last_error, a_thread_without_failures_keeps_an_empty_reason) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * MiB, "fault_every_n:2");
  void *a = pc_must_malloc(p, 12 * MiB, NULL); /* device attempt 1 */
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, recover_on_a_new_thread, p), 0);
  char *seen = NULL;
  cr_assert_eq(pthread_join(t, (void **)&seen), 0);
  cr_assert_eq(pc_stats(p).num_alloc_retries, 1, "the thread recovered from a device failure");
  cr_expect_str_eq(seen, "");
  free(seen);
  pc_must_free(p, a);
  gpupool_destroy(p);
}

/* The host backend fails its first device allocation after arm(), then
 * succeeds: the hook turns injection off at the second. */
static gpupool *armed_pool;
static int armed_calls;

static void fail_first_only(void *arg) {
  (void)arg;
  if (++armed_calls == 2)
    cr_assert_eq(gpupool_host_inject_faults(armed_pool, 0, 0, 0), GPUPOOL_OK);
}

static void arm(gpupool *p) {
  armed_pool = p;
  armed_calls = 0;
  cr_assert_eq(gpupool_host_inject_faults(p, 1, 0, 0), GPUPOOL_OK);
  backend_host_testing_set_alloc_hook(fail_first_only, NULL);
}

static void disarm(void) {
  backend_host_testing_set_alloc_hook(NULL, NULL);
}

/* Expandable segments: when new pages cannot be created, idle pages are
 * moved in their place, within the one attempt (no retry). */
Test(pool_last_error, pages_moved_when_none_could_be_created_keep_it) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * MiB, "expandable_segments:True");
  void *a = pc_must_malloc(p, 40 * MiB, NULL); /* [0, 40) MiB of the range: 20 pages */
  void *b = pc_must_malloc(p, 4 * MiB, NULL);  /* [40, 44) */
  pc_must_free(p, a);                          /* 20 idle pages */
  const char *why = fail_on_purpose(p);
  arm(p);
  /* 44 MiB fit only past b: 22 pages missing, 3 of them new (the 5 % slack
   * over what is allocated), 19 moved first; the creation fails, so one more
   * idle page moves and 2 are created. */
  void *c = NULL;
  gpupool_status st = gpupool_malloc(p, &c, 44 * MiB, NULL);
  disarm();
  cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(armed_calls, 2, "one failed page creation, one that succeeded");
  gpupool_stats s = pc_stats(p);
  cr_assert_eq(s.num_alloc_retries, 0, "recovered within the attempt");
  cr_assert_eq(s.num_pages_moved, 20);
  expect_kept(why, "a page creation recovered from by moving pages");
  pc_must_free(p, b);
  pc_must_free(p, c);
  gpupool_destroy(p);
}

Test(pool_last_error, creating_a_pool_keeps_it) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * MiB, NULL);
  const char *why = fail_on_purpose(p);
  gpupool *q = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * MiB, NULL);
  expect_kept(why, "gpupool_create");
  gpupool_destroy(q);
  gpupool_destroy(p);
}

/* A replay whose pool runs out of memory succeeds: its OOMs are its result. */
Test(pool_last_error, a_replay_with_ooms_keeps_it) {
  char path[] = "/tmp/gpupool_last_errorXXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fprintf(f, "a 0x1000 %zu 0x0\na 0x2000 %zu 0x0\nf 0x1000\nf 0x2000\n", 40 * MiB, 40 * MiB);
  fclose(f);
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load(path, "record", NULL, &h), GPUPOOL_OK, "%s",
               gpupool_last_error());
  unlink(path);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * MiB, NULL);
  const char *why = fail_on_purpose(p);
  gpupool_replay_result r;
  cr_assert_eq(gpupool_replay(h, NULL, 64 * MiB, &r), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(r.ooms, 1, "the second 40 MiB do not fit in 64");
  expect_kept(why, "gpupool_replay");
  gpupool_history_free(h);
  gpupool_destroy(p);
}

/* What a caller sees fail still says why. */
Test(pool_last_error, a_failure_after_a_recovery_is_reported) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 256 * MiB, "fault_every_n:2");
  void *a = NULL, *b = NULL, *c = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 12 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &b, 14 * MiB, NULL), GPUPOOL_OK, "recovered");
  cr_assert_eq(gpupool_malloc(p, &c, 300 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_expect_eq(strncmp(gpupool_last_error(), "CUDA out of memory.", 19), 0, "%s",
               gpupool_last_error());
  pc_must_free(p, a);
  pc_must_free(p, b);
  gpupool_destroy(p);
}

/* A reason may quote the one before it, as gpupool_share_import quotes why
 * backend cuda is not available. */
Test(pool_last_error, a_reason_may_quote_the_last_one) {
  pool_fail(GPUPOOL_ERR_UNSUPPORTED, "backend cuda: gpupool was built without CUDA");
  pool_fail(GPUPOOL_ERR_UNSUPPORTED, "import: backend cuda is not available here: %s",
            gpupool_last_error());
  cr_expect_str_eq(gpupool_last_error(), "import: backend cuda is not available here: backend "
                                         "cuda: gpupool was built without CUDA");
}

/* The reason is one line whatever it quotes: a path with a newline or an
 * escape sequence in it has its control characters written as '?' (before,
 * the newline split the line and the escape reached the terminal). */
Test(pool_last_error, control_characters_in_a_quoted_path_are_not_written) {
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load("/nonexistent/x\ny\x1b[31mz\x7f", NULL, NULL, &h),
               GPUPOOL_ERR_INVALID);
  const char *e = gpupool_last_error();
  cr_expect(strstr(e, "/nonexistent/x?y?[31mz?: cannot open"), "%s", e);
  for (const char *c = e; *c; c++)
    cr_expect((unsigned char)*c >= 0x20 && *c != 0x7f, "byte %d at %td of '%s'", *c, c - e, e);
}
