/* Many threads at once (CI runs this file under ThreadSanitizer): threads on
 * streams of their own and threads sharing one stream allocate and free with
 * patterns, hand allocations to each other to be freed on another thread,
 * record them on a side stream, while a monitor reads the stats, checks
 * their invariants, empties the cache and resets the peaks. At the end every
 * stat reconciles with what the threads did. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "helpers/pool_check.h"

#define KiB        PC_KiB
#define MiB        PC_MiB
#define A          GPUPOOL_STAT_ALL
#define NTHREADS   8
#define LOCAL_LIVE 64
#define HANDOFF    256

typedef struct item {
  unsigned char *ptr;
  size_t size;
  uint64_t id;
} item;

typedef struct shared {
  gpupool *pool;
  gpupool_host_stream *side; /* record_stream target, completed by the monitor */
  pthread_mutex_t lock;      /* guards the handoff ring */
  item ring[HANDOFF];
  size_t head, count;
  _Atomic uint64_t mallocs, frees, cross_frees, requested;
  _Atomic int workers_done;
  _Atomic int failed;
  int flags; /* pc_check_invariants flags of the pool's configuration */
  char why[512];
} shared;

typedef struct worker {
  shared *sh;
  void *stream;
  uint64_t rng;
  int index;
  size_t ops;
} worker;

/* The first failure is kept; Criterion asserts only on the main thread. */
static void fail(shared *sh, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(shared *sh, const char *fmt, ...) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&sh->failed, &expected, 1))
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sh->why, sizeof sh->why, fmt, ap);
  va_end(ap);
}

static uint64_t next_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dull;
}

static size_t pick_size(uint64_t *rng) {
  uint64_t u = next_rand(rng) % 1000;
  if (u < 900)
    return 1 + next_rand(rng) % 4096;
  if (u < 995)
    return 4097 + next_rand(rng) % (128 * KiB);
  return 1 * MiB + next_rand(rng) % (3 * MiB);
}

static int check_and_free(shared *sh, const item *it) {
  size_t bad = pc_pattern_check(it->ptr, it->size, it->id);
  if (bad != SIZE_MAX) {
    fail(sh, "allocation %p (%zu B, id %llx) corrupted at offset %zu", (void *)it->ptr, it->size,
         (unsigned long long)it->id, bad);
    return -1;
  }
  gpupool_status st = gpupool_free(sh->pool, it->ptr);
  if (st != GPUPOOL_OK) {
    fail(sh, "free(%p): %s", (void *)it->ptr, gpupool_last_error());
    return -1;
  }
  atomic_fetch_add(&sh->frees, 1);
  return 0;
}

static int handoff_push(shared *sh, const item *it) {
  pthread_mutex_lock(&sh->lock);
  int ok = sh->count < HANDOFF;
  if (ok)
    sh->ring[(sh->head + sh->count++) % HANDOFF] = *it;
  pthread_mutex_unlock(&sh->lock);
  return ok;
}

static int handoff_pop(shared *sh, item *it) {
  pthread_mutex_lock(&sh->lock);
  int ok = sh->count > 0;
  if (ok) {
    *it = sh->ring[sh->head];
    sh->head = (sh->head + 1) % HANDOFF;
    sh->count--;
  }
  pthread_mutex_unlock(&sh->lock);
  return ok;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  item live[LOCAL_LIVE];
  size_t nlive = 0;
  uint64_t serial = 0;
  for (size_t op = 0; op < w->ops && !atomic_load(&sh->failed); op++) {
    uint64_t u = next_rand(&w->rng) % 100;
    if (u < 50 && nlive < LOCAL_LIVE) {
      item it = {.size = pick_size(&w->rng), .id = ((uint64_t)w->index << 48) | serial++};
      void *ptr = NULL;
      gpupool_status st = gpupool_malloc(sh->pool, &ptr, it.size, w->stream);
      if (st != GPUPOOL_OK) {
        fail(sh, "thread %d: malloc(%zu): %s", w->index, it.size, gpupool_last_error());
        break;
      }
      it.ptr = ptr;
      pc_pattern_fill(it.ptr, it.size, it.id);
      live[nlive++] = it;
      atomic_fetch_add(&sh->mallocs, 1);
      atomic_fetch_add(&sh->requested, it.size);
    } else if (u < 90 && nlive) {
      size_t k = next_rand(&w->rng) % nlive;
      item it = live[k];
      live[k] = live[--nlive];
      /* one in eight goes to another thread to be freed there */
      if (next_rand(&w->rng) % 8 == 0 && handoff_push(sh, &it))
        continue;
      if (check_and_free(sh, &it))
        break;
    } else if (u < 96) {
      item it;
      if (handoff_pop(sh, &it)) {
        if (check_and_free(sh, &it))
          break;
        atomic_fetch_add(&sh->cross_frees, 1);
      }
    } else if (u < 98 && nlive) {
      gpupool_status st =
          gpupool_record_stream(sh->pool, live[next_rand(&w->rng) % nlive].ptr, sh->side);
      if (st != GPUPOOL_OK)
        fail(sh, "record_stream: %s", gpupool_last_error());
    } else {
      gpupool_stats s;
      if (gpupool_get_stats(sh->pool, &s) != GPUPOOL_OK)
        fail(sh, "get_stats failed");
    }
  }
  for (size_t k = 0; k < nlive; k++)
    check_and_free(sh, &live[k]);
  atomic_fetch_add(&sh->workers_done, 1);
  return NULL;
}

/* Reads and checks the stats while the workers run. */
static void *monitor_main(void *arg) {
  shared *sh = arg;
  char msg[512];
  for (unsigned i = 0; atomic_load(&sh->workers_done) < NTHREADS && !atomic_load(&sh->failed);
       i++) {
    gpupool_stats s;
    if (gpupool_get_stats(sh->pool, &s) != GPUPOOL_OK) {
      fail(sh, "monitor: get_stats failed");
      break;
    }
    if (pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, PC_CONCURRENT | sh->flags, msg, sizeof msg)) {
      fail(sh, "monitor, read %u: %s", i, msg);
      break;
    }
    gpupool_host_stream_enqueue(sh->side);
    if (i % 4 == 0)
      gpupool_host_stream_complete(sh->side);
    if (i % 64 == 0)
      gpupool_empty_cache(sh->pool);
    if (i % 128 == 0)
      gpupool_reset_peak_stats(sh->pool);
    sched_yield();
  }
  return NULL;
}

static void run_threads(int shared_stream, int expandable) {
  static shared sh; /* the ring is large: not on the stack */
  memset(&sh, 0, sizeof sh);
  pthread_mutex_init(&sh.lock, NULL);
  sh.flags = expandable ? PC_EXPANDABLE : 0;
  sh.pool = pc_pool(GPUPOOL_STRATEGY_BFC, 0, expandable ? "expandable_segments:True" : NULL);
  sh.side = gpupool_host_stream_create();
  gpupool_host_stream *streams[NTHREADS], *common = gpupool_host_stream_create();
  worker w[NTHREADS];
  pthread_t tid[NTHREADS], mon;
  size_t ops = pc_scaled(20000);
  for (int i = 0; i < NTHREADS; i++) {
    streams[i] = gpupool_host_stream_create();
    w[i] = (worker){&sh, shared_stream ? common : streams[i], 0x1234567ull * (i + 1), i, ops};
  }
  cr_assert_eq(pthread_create(&mon, NULL, monitor_main, &sh), 0);
  for (int i = 0; i < NTHREADS; i++)
    cr_assert_eq(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < NTHREADS; i++)
    pthread_join(tid[i], NULL);
  pthread_join(mon, NULL);
  cr_assert_eq(atomic_load(&sh.failed), 0, "%s", sh.why);

  item it;
  while (handoff_pop(&sh, &it))
    cr_assert_eq(check_and_free(&sh, &it), 0, "%s", sh.why);
  gpupool_host_stream_complete(sh.side);
  gpupool_empty_cache(sh.pool);

  gpupool_stats s = pc_stats(sh.pool);
  char msg[512];
  cr_expect_eq(pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, sh.flags, msg, sizeof msg), 0, "%s",
               msg);
  cr_expect_eq(pc_check_empty(&s, msg, sizeof msg), 0, "%s", msg);
  if (expandable)
    cr_expect(s.num_pages_moved > 0, "no page moved between threads' blocks");
  uint64_t mallocs = atomic_load(&sh.mallocs), frees = atomic_load(&sh.frees);
  cr_expect_eq(mallocs, frees, "every allocation was freed");
  cr_expect_eq(s.allocation[A].allocated, (int64_t)mallocs);
  cr_expect_eq(s.num_frees, frees);
  cr_expect_eq(s.requested_bytes[A].allocated, (int64_t)atomic_load(&sh.requested));
  cr_expect(atomic_load(&sh.cross_frees) > 0, "no allocation was freed on another thread");
  cr_expect(s.num_sync_events > 0, "record_stream never deferred a free");
  cr_log_info("%s stream: %llu mallocs, %llu freed on another thread, %llu device allocs, %llu "
              "sync events",
              shared_stream ? "one" : "own", (unsigned long long)mallocs,
              (unsigned long long)atomic_load(&sh.cross_frees),
              (unsigned long long)s.num_device_alloc, (unsigned long long)s.num_sync_events);

  gpupool_destroy(sh.pool);
  for (int i = 0; i < NTHREADS; i++)
    gpupool_host_stream_destroy(streams[i]);
  gpupool_host_stream_destroy(common);
  gpupool_host_stream_destroy(sh.side);
  pthread_mutex_destroy(&sh.lock);
}

Test(pool_threads, eight_threads_on_their_own_streams) {
  run_threads(0, 0);
}

Test(pool_threads, eight_threads_sharing_one_stream) {
  run_threads(1, 0);
}

/* Pages move between shards under the slow lock while other threads
 * allocate: nested shard locks, unmapping under free blocks. */
Test(pool_threads, eight_threads_with_expandable_segments) {
  run_threads(0, 1);
}

Test(pool_threads, threads_on_separate_pools_do_not_interfere) {
  /* the per-thread free hint must never send a free to another pool */
  enum { N = 4 };
  static shared sh[N];
  pthread_t tid[N];
  worker w[N];
  for (int i = 0; i < N; i++) {
    memset(&sh[i], 0, sizeof sh[i]);
    pthread_mutex_init(&sh[i].lock, NULL);
    sh[i].pool = pc_pool(i % 2 ? GPUPOOL_STRATEGY_ROUND : GPUPOOL_STRATEGY_BFC, 0, NULL);
    sh[i].side = gpupool_host_stream_create();
    w[i] = (worker){&sh[i], NULL, 77ull * (i + 1), i, pc_scaled(10000)};
    cr_assert_eq(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < N; i++)
    pthread_join(tid[i], NULL);
  for (int i = 0; i < N; i++) {
    cr_expect_eq(atomic_load(&sh[i].failed), 0, "pool %d: %s", i, sh[i].why);
    item it;
    while (handoff_pop(&sh[i], &it))
      check_and_free(&sh[i], &it);
    gpupool_host_stream_complete(sh[i].side);
    gpupool_empty_cache(sh[i].pool);
    gpupool_stats s = pc_stats(sh[i].pool);
    char msg[512];
    cr_expect_eq(pc_check_empty(&s, msg, sizeof msg), 0, "pool %d: %s", i, msg);
    cr_expect_eq(s.allocation[A].allocated, (int64_t)atomic_load(&sh[i].mallocs), "pool %d", i);
    gpupool_destroy(sh[i].pool);
    gpupool_host_stream_destroy(sh[i].side);
    pthread_mutex_destroy(&sh[i].lock);
  }
}

/* A reader must never see a snapshot that no moment had: here, one thread
 * allocates and frees a block that fills its own segment, another empties the
 * cache (the segment comes and goes), and the reader checks every invariant,
 * e.g. allocated_bytes <= reserved_bytes. */
typedef struct churn {
  gpupool *pool;
  _Atomic int stop;
  _Atomic int failed;
  char why[512];
} churn;

static void *churn_alloc(void *arg) {
  churn *c = arg;
  while (!atomic_load(&c->stop)) {
    void *x = NULL;
    if (gpupool_malloc(c->pool, &x, 12 * MiB, NULL) != GPUPOOL_OK) {
      atomic_store(&c->failed, 1);
      snprintf(c->why, sizeof c->why, "churn malloc: %s", gpupool_last_error());
      break;
    }
    gpupool_free(c->pool, x);
  }
  return NULL;
}

static void *churn_empty(void *arg) {
  churn *c = arg;
  while (!atomic_load(&c->stop))
    gpupool_empty_cache(c->pool);
  return NULL;
}

Test(pool_threads, stats_snapshot_is_consistent_while_segments_come_and_go) {
  static churn c;
  memset(&c, 0, sizeof c);
  c.pool = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  pthread_t ta, te;
  cr_assert_eq(pthread_create(&ta, NULL, churn_alloc, &c), 0);
  cr_assert_eq(pthread_create(&te, NULL, churn_empty, &c), 0);
  char msg[512] = "";
  size_t reads = pc_scaled(50000), bad_at = SIZE_MAX;
  for (size_t i = 0; i < reads && !atomic_load(&c.failed); i++) {
    gpupool_stats s;
    cr_assert_eq(gpupool_get_stats(c.pool, &s), GPUPOOL_OK);
    if (pc_check_invariants(&s, GPUPOOL_STRATEGY_BFC, 0, msg, sizeof msg)) {
      bad_at = i;
      break;
    }
  }
  atomic_store(&c.stop, 1);
  pthread_join(ta, NULL);
  pthread_join(te, NULL);
  cr_expect_eq(atomic_load(&c.failed), 0, "%s", c.why);
  cr_expect_eq(bad_at, SIZE_MAX, "read %zu of %zu: %s", bad_at, reads, msg);
  gpupool_destroy(c.pool);
}
