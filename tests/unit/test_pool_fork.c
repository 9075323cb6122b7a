/* fork(): a child cannot use its parent's pools (their locks may be held by
 * a thread that does not exist in the child, their device memory is the
 * parent's), so each call that would take their locks is refused with a
 * reason, never waited on; pools the child creates work, and the parent
 * goes on as before. Each child reports the first check that failed in its
 * exit status; a child still alive after 10 s is killed by its alarm (a
 * hang, the failure this guards against). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpupool/advisor.h"
#include "gpupool/agent.h"
#include "gpupool/gpupool.h"
#include "gpupool/host.h"
#include "gpupool/tag.h"
#include "helpers/pool_check.h"
#include "pool/pool_internal.h"

/* In a child: exit with status `check` unless cond holds. */
#define CHILD_CHECK(check, cond)                                                                   \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "child check %d failed: %s (last error: %s)\n", check, #cond,                \
              gpupool_last_error());                                                               \
      _exit(check);                                                                                \
    }                                                                                              \
  } while (0)

static gpupool *named_pool(const char *name) {
  gpupool_options o = {
      .name = name, .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64 << 20, .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

/* Whether the last error says a call on pool `name` was refused for the fork. */
static int refused_for_fork(const char *call, const char *name) {
  const char *e = gpupool_last_error();
  char pool[64];
  snprintf(pool, sizeof pool, "pool '%s' was created before this process was forked", name);
  return e && strstr(e, call) == e && strstr(e, pool) && strstr(e, "create a pool in the child");
}

static void wait_child(pid_t child) {
  int status;
  cr_assert_eq(waitpid(child, &status, 0), child);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "child: %s %d (a status is the check that failed; signal 14 is its alarm: a hang)",
            WIFEXITED(status) ? "status" : "signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* Every call of the public API that takes a pool's locks, on a pool of the
 * parent: refused with the reason, nothing changed. */
static void child_is_refused(gpupool *p, void *ptr, void *stream) {
  void *q = NULL;
  CHILD_CHECK(1, gpupool_malloc(p, &q, 512, stream) == GPUPOOL_ERR_UNSUPPORTED && !q);
  CHILD_CHECK(2, refused_for_fork("gpupool_malloc", "forked"));
  CHILD_CHECK(3, gpupool_malloc(p, &q, 4096, NULL) == GPUPOOL_ERR_UNSUPPORTED);
  CHILD_CHECK(4, gpupool_free(p, ptr) == GPUPOOL_ERR_UNSUPPORTED);
  CHILD_CHECK(5, refused_for_fork("gpupool_free", "forked"));
  CHILD_CHECK(6, gpupool_record_stream(p, ptr, NULL) == GPUPOOL_ERR_UNSUPPORTED);
  gpupool_stats s;
  CHILD_CHECK(7, gpupool_get_stats(p, &s) == GPUPOOL_ERR_UNSUPPORTED);
  CHILD_CHECK(8, refused_for_fork("gpupool_get_stats", "forked"));
  CHILD_CHECK(9, gpupool_empty_cache(p) == 0 && refused_for_fork("gpupool_empty_cache", "forked"));
  gpupool_reset_peak_stats(p);
  CHILD_CHECK(10, refused_for_fork("gpupool_reset_peak_stats", "forked"));
  gpupool_reset_accumulated_stats(p);
  CHILD_CHECK(11, refused_for_fork("gpupool_reset_accumulated_stats", "forked"));
  gpupool_tag_stat t[4];
  CHILD_CHECK(12, gpupool_get_tag_stats(p, t, 4) == -1);
  gpupool_history *h = NULL;
  CHILD_CHECK(13, gpupool_history_from_pool(p, &h) == GPUPOOL_ERR_UNSUPPORTED && !h);
  uint64_t recorded, dropped;
  CHILD_CHECK(14, gpupool_trace_event_counts(p, &recorded, &dropped) == GPUPOOL_ERR_UNSUPPORTED);
  CHILD_CHECK(15, gpupool_host_hold_other(p, 4096) == GPUPOOL_ERR_UNSUPPORTED);
  CHILD_CHECK(16, gpupool_host_inject_faults(p, 0, 0.0, 1) == GPUPOOL_ERR_UNSUPPORTED);
  /* what reads only the configuration still answers */
  CHILD_CHECK(17, !strcmp(gpupool_name(p), "forked") && gpupool_device(p) == 0);
  /* the agent's walks no longer list the parent's pools */
  FILE *null = fopen("/dev/null", "w");
  CHILD_CHECK(18, null && gpupool_snapshot_write_torch(null, "forked") == GPUPOOL_ERR_INVALID);
  fclose(null);
  gpupool_destroy(p); /* releases nothing, takes no lock */
}

/* A pool created in the child serves it as any pool would. */
static void child_pool_works(int first_check) {
  gpupool *c = named_pool("child");
  void *q = NULL;
  CHILD_CHECK(first_check, gpupool_malloc(c, &q, 1 << 20, NULL) == GPUPOOL_OK && q);
  memset(q, 0x5a, 1 << 20);
  gpupool_stats s;
  CHILD_CHECK(first_check + 1, gpupool_get_stats(c, &s) == GPUPOOL_OK &&
                                   s.allocated_bytes[GPUPOOL_STAT_ALL].current == 1 << 20);
  CHILD_CHECK(first_check + 2, gpupool_free(c, q) == GPUPOOL_OK);
  gpupool_destroy(c);
}

Test(pool_fork, a_child_is_refused_the_parents_pool_and_creates_its_own) {
  gpupool *p = named_pool("forked");
  void *stream = gpupool_host_stream_create();
  void *ptr = NULL;
  cr_assert_eq(gpupool_malloc(p, &ptr, 512, stream), GPUPOOL_OK); /* the thread's hint: p */
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    alarm(10);
    child_is_refused(p, ptr, stream);
    child_pool_works(20);
    _exit(0);
  }
  wait_child(child);
  /* the parent's pool is as it was: the child changed nothing */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 512);
  cr_expect_eq(gpupool_free(p, ptr), GPUPOOL_OK, "%s", gpupool_last_error());
  void *q;
  cr_expect_eq(gpupool_malloc(p, &q, 512, stream), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(q, ptr, "the cached block serves again");
  cr_expect_eq(gpupool_free(p, q), GPUPOOL_OK);
  FILE *null = fopen("/dev/null", "w");
  cr_assert_not_null(null);
  cr_expect_eq(gpupool_snapshot_write_torch(null, "forked"), GPUPOOL_OK, "%s",
               gpupool_last_error());
  fclose(null);
  gpupool_destroy(p);
  gpupool_host_stream_destroy(stream);
}

/* A lock of the pool held at the fork (another thread of the parent in the
 * middle of a malloc, here this thread itself) is never waited on by the
 * child: before, its gpupool_malloc spun on the shard's lock for good. */
Test(pool_fork, a_lock_held_at_the_fork_is_not_waited_on) {
  gpupool *p = named_pool("forked");
  void *ptr = NULL;
  cr_assert_eq(gpupool_malloc(p, &ptr, 512, NULL), GPUPOOL_OK);
  shard *sh = atomic_load(&p->shards);
  cr_assert_not_null(sh);
  spin_lock(&sh->lock);
  pthread_mutex_lock(&p->slow_lock);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    alarm(10);
    void *q = NULL;
    CHILD_CHECK(1, gpupool_malloc(p, &q, 512, NULL) == GPUPOOL_ERR_UNSUPPORTED);
    CHILD_CHECK(2, gpupool_free(p, ptr) == GPUPOOL_ERR_UNSUPPORTED);
    gpupool_stats s;
    CHILD_CHECK(3, gpupool_get_stats(p, &s) == GPUPOOL_ERR_UNSUPPORTED);
    CHILD_CHECK(4, gpupool_empty_cache(p) == 0);
    gpupool_destroy(p);
    child_pool_works(5);
    _exit(0);
  }
  pthread_mutex_unlock(&p->slow_lock);
  spin_unlock(&sh->lock);
  wait_child(child);
  cr_expect_eq(gpupool_free(p, ptr), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_destroy(p);
}

/* A pool the child created is the grandchild's parent's: refused there too,
 * while the child goes on using it. */
Test(pool_fork, a_grandchild_is_refused_the_childs_pool) {
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    alarm(20);
    gpupool *c = named_pool("forked");
    void *q = NULL;
    CHILD_CHECK(1, gpupool_malloc(c, &q, 512, NULL) == GPUPOOL_OK);
    fflush(NULL);
    pid_t grandchild = fork();
    if (grandchild == 0) {
      alarm(10);
      child_is_refused(c, q, NULL);
      _exit(0);
    }
    int status;
    CHILD_CHECK(2, waitpid(grandchild, &status, 0) == grandchild);
    CHILD_CHECK(3, WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHILD_CHECK(4, gpupool_free(c, q) == GPUPOOL_OK);
    gpupool_destroy(c);
    _exit(0);
  }
  wait_child(child);
}
