/* fork(): a child cannot use its parent's pools (their locks may be held by
 * a thread that does not exist in the child, their device memory is the
 * parent's), so each call that would take their locks is refused with a
 * reason, never waited on; pools the child creates work, and the parent
 * goes on as before. Each child reports the first check that failed in its
 * exit status; a child still alive after 10 s is killed by its alarm (a
 * hang, the failure this guards against). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
#include "pool/oom_report.h"
#include "pool/pool_internal.h"
#include "pool/registry.h"
#include "pool/segment_observers.h"

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

/* fork() with the output flushed first (so that no line is written twice);
 * the child gets an alarm of `seconds`: a hang ends it with SIGALRM. */
static pid_t fork_with_alarm(unsigned seconds) {
  fflush(NULL);
  pid_t child = fork();
  if (child == 0)
    alarm(seconds);
  return child;
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
  pid_t child = fork_with_alarm(10);
  if (child == 0) {
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
  pid_t child = fork_with_alarm(10);
  if (child == 0) {
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
  pid_t child = fork_with_alarm(20);
  if (child == 0) {
    gpupool *c = named_pool("forked");
    void *q = NULL;
    CHILD_CHECK(1, gpupool_malloc(c, &q, 512, NULL) == GPUPOOL_OK);
    pid_t grandchild = fork_with_alarm(10);
    if (grandchild == 0) {
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

/* What the parent's agent hooks into the pool: each call counted. */
static _Atomic int listener_calls, observer_calls, delivered;

static void count_listener(gpupool *p) {
  (void)p;
  atomic_fetch_add(&listener_calls, 1);
}

static void count_observer(void *arg, const segment_change *c) {
  (void)arg;
  (void)c;
  atomic_fetch_add(&observer_calls, 1);
}

static void count_delivery(pool_oom_report *r, void *arg) {
  (void)arg;
  atomic_fetch_add(&delivered, 1);
  pool_oom_report_free(r);
}

/* In the child: a pool of its own gains a segment and runs out of memory,
 * with none of the parent's hooks called, and says why in the last error. */
static void child_pool_ooms_unobserved(int first_check) {
  gpupool_options o = {
      .name = "child", .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 32 << 20, .ignore_env = 1};
  gpupool *c;
  CHILD_CHECK(first_check, gpupool_create(&o, &c) == GPUPOOL_OK);
  void *a = NULL, *b = NULL;
  CHILD_CHECK(first_check + 1, gpupool_malloc(c, &a, 4 << 20, NULL) == GPUPOOL_OK);
  CHILD_CHECK(first_check + 2, gpupool_malloc(c, &b, 24 << 20, NULL) == GPUPOOL_ERR_OOM);
  CHILD_CHECK(first_check + 3, strstr(gpupool_last_error(), "out of memory") &&
                                   !strstr(gpupool_last_error(), "/oom/")); /* no agent's report */
  CHILD_CHECK(first_check + 4, atomic_load(&listener_calls) == 0 &&
                                   atomic_load(&observer_calls) == 0 &&
                                   atomic_load(&delivered) == 0);
  CHILD_CHECK(first_check + 5, gpupool_free(c, a) == GPUPOOL_OK);
  gpupool_destroy(c);
}

/* The agent's segment listener, CUPTI's segment observers and the OOM
 * observer are the parent's: the child's own pools call none of them (they
 * would wake a sampler that does not run there, or file a report with an
 * agent that serves nothing). */
Test(pool_fork, the_parents_hooks_are_not_called_in_the_child) {
  registry_set_segment_listener(count_listener);
  cr_assert_eq(segment_observers_add(count_observer, NULL), 0);
  pool_oom_observer obs = {NULL, count_delivery, NULL};
  pool_oom_set_observer(&obs);
  pid_t child = fork_with_alarm(10);
  if (child == 0) {
    child_pool_ooms_unobserved(1);
    _exit(0);
  }
  wait_child(child);
  /* the parent's hooks still hear the parent's pools */
  gpupool *p = named_pool("parent");
  void *a = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 4 << 20, NULL), GPUPOOL_OK);
  cr_expect_gt(atomic_load(&listener_calls), 0);
  cr_expect_gt(atomic_load(&observer_calls), 0);
  cr_expect_eq(gpupool_free(p, a), GPUPOOL_OK);
  gpupool_destroy(p);
  pool_oom_set_observer(NULL);
  segment_observers_remove(count_observer, NULL);
  registry_set_segment_listener(NULL);
}

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int delivering;

/* A delivery that holds on until the gate opens: the OOM report's lock is
 * held meanwhile. */
static void slow_delivery(pool_oom_report *r, void *arg) {
  (void)arg;
  atomic_store(&delivering, 1);
  pthread_mutex_lock(&gate);
  pthread_mutex_unlock(&gate);
  pool_oom_report_free(r);
}

static void *oom_in_thread(void *arg) {
  gpupool *p = arg;
  void *a = NULL;
  gpupool_malloc(p, &a, 1 << 30, NULL); /* more than the pool's 64 MiB: delivered slowly */
  return NULL;
}

/* fork() while another thread delivers an OOM report (the report's lock
 * held): the child's own OOM does not wait for that lock. Before, it hung. */
Test(pool_fork, an_oom_report_in_flight_at_the_fork_is_not_waited_on) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  cr_skip("a child forked from a threaded process can wait on the sanitizer's own allocator lock");
#endif
  pool_oom_observer obs = {NULL, slow_delivery, NULL};
  pool_oom_set_observer(&obs);
  gpupool *p = named_pool("parent");
  pthread_mutex_lock(&gate);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, oom_in_thread, p), 0);
  while (!atomic_load(&delivering))
    sched_yield();
  pid_t child = fork_with_alarm(10);
  if (child == 0) {
    child_pool_ooms_unobserved(1);
    _exit(0);
  }
  pthread_mutex_unlock(&gate);
  pthread_join(t, NULL);
  wait_child(child);
  pool_oom_set_observer(NULL);
  gpupool_destroy(p);
}

static _Atomic int stop_busy;

/* Creates and destroys host streams without pause: the live-stream list's
 * lock is held much of the time. */
static void *busy_streams(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_busy))
    gpupool_host_stream_destroy(gpupool_host_stream_create());
  return NULL;
}

/* Pushes tags the full table has no room for: each takes the lock that
 * adds names. */
static void *busy_tags(void *arg) {
  (void)arg;
  char name[32];
  for (unsigned i = 0; !atomic_load(&stop_busy); i++) {
    snprintf(name, sizeof name, "busy_%u", i % 64);
    if (gpupool_tag_push(name) == GPUPOOL_OK)
      gpupool_tag_pop();
  }
  return NULL;
}

/* fork() while other threads create host streams and tags (process-wide
 * lists, each under a lock): the child creates its own without waiting for
 * a lock the parent's threads held. Before, a child hung now and then; 200
 * forks made it all but certain. */
Test(pool_fork, stream_and_tag_locks_held_at_the_fork_are_not_waited_on) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  cr_skip("a child forked from a threaded process can wait on the sanitizer's own allocator lock");
#endif
  pthread_t streams, tags;
  cr_assert_eq(pthread_create(&streams, NULL, busy_streams, NULL), 0);
  cr_assert_eq(pthread_create(&tags, NULL, busy_tags, NULL), 0);
  int hung = 0, failed = 0;
  for (int i = 0; i < 200 && !hung && !failed; i++) {
    pid_t child = fork_with_alarm(5);
    if (child == 0) {
      gpupool_host_stream *st = gpupool_host_stream_create();
      char name[32];
      snprintf(name, sizeof name, "child_%d", i);
      int ok = st && gpupool_tag_push(name) == GPUPOOL_OK && gpupool_tag_pop() == GPUPOOL_OK;
      gpupool_host_stream_destroy(st);
      _exit(ok ? 0 : 1);
    }
    int status;
    cr_assert_eq(waitpid(child, &status, 0), child);
    hung = WIFSIGNALED(status);
    failed = WIFEXITED(status) && WEXITSTATUS(status) != 0;
  }
  atomic_store(&stop_busy, 1);
  pthread_join(streams, NULL);
  pthread_join(tags, NULL);
  cr_expect(!hung, "a child hung (killed by its alarm)");
  cr_expect(!failed, "a child could not create a stream or a tag");
}
