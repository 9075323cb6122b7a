/* The page crew (pool/page_crew.h) against a recording backend, its own
 * oracle: every page of a run is mapped (or unmapped) exactly once, long
 * runs are shared with the helpers, a failed share leaves nothing mapped and
 * its reason reaches the asking thread, and runs asked for by several
 * threads at once (the crew serves one, the others map alone) all complete.
 * Then a pool: expandable segments with and without helpers replay the same
 * sequence to the same pages moved and the same bytes. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/errors.h"
#include "gpupool/host.h"
#include "helpers/pool_check.h"
#include "pool/backend.h"
#include "pool/page_crew.h"

#define PAGES   256
#define PAGE_SZ 4096

/* The recording backend: page i of a fake address range starting at BASE is
 * mapped to handle h when state[i] == h; calls[i] counts the calls that
 * touched it; thread[i] is the thread that mapped it last. fail_at: the page
 * whose map fails, unmap_fail_at: the page whose unmap reports a failure,
 * after unmapping it as the real backends try every page (SIZE_MAX: none). */
#define BASE ((char *)(uintptr_t)0x100000000ull)
static _Atomic uintptr_t state[PAGES];
static atomic_int calls[PAGES];
static pthread_t thread[PAGES];
static size_t fail_at = SIZE_MAX, unmap_fail_at = SIZE_MAX;
/* maps made on a thread other than the test's, and those of them made on a
 * thread that does not block SIGINT (helpers block every signal) */
static pthread_t test_thread;
static atomic_int helper_maps, helper_maps_unblocked;

static size_t page_index(void *addr) {
  return (size_t)((char *)addr - BASE) / PAGE_SZ;
}

static gpupool_status rec_unmap(backend *b, void *addr, size_t n) {
  (void)b;
  gpupool_status st = GPUPOOL_OK;
  for (size_t i = page_index(addr); i < page_index(addr) + n; i++) {
    cr_assert_neq(atomic_exchange(&state[i], 0), 0, "page %zu unmapped but not mapped", i);
    atomic_fetch_add(&calls[i], 1);
    if (i == unmap_fail_at)
      st = pool_fail(GPUPOOL_ERR_BACKEND, "recording backend: unmap of page %zu failed", i);
  }
  return st;
}

static gpupool_status rec_map(backend *b, void *addr, void *const *handles, size_t n) {
  size_t first = page_index(addr);
  for (size_t i = 0; i < n; i++) {
    if (first + i == fail_at) { /* all or none, as a backend's map */
      for (size_t j = 0; j < i; j++)
        atomic_store(&state[first + j], 0);
      return pool_fail(GPUPOOL_ERR_BACKEND, "recording backend: page %zu refused", first + i);
    }
    uintptr_t was = 0;
    cr_assert(atomic_compare_exchange_strong(&state[first + i], &was, (uintptr_t)handles[i]),
              "page %zu mapped twice", first + i);
    atomic_fetch_add(&calls[first + i], 1);
    thread[first + i] = pthread_self();
  }
  if (!pthread_equal(pthread_self(), test_thread)) {
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    atomic_fetch_add(&helper_maps, 1);
    if (!sigismember(&mask, SIGINT))
      atomic_fetch_add(&helper_maps_unblocked, 1);
  }
  (void)b;
  return GPUPOOL_OK;
}

static const backend_vmm_ops rec_vmm = {.map = rec_map, .unmap = rec_unmap};
static const backend_ops rec_ops = {.vmm = &rec_vmm};
static backend rec = {.ops = &rec_ops, .name = "recording", .page_size = PAGE_SZ};

static void *handles[PAGES];

static void reset(void) {
  for (size_t i = 0; i < PAGES; i++) {
    atomic_store(&state[i], 0);
    atomic_store(&calls[i], 0);
    handles[i] = (void *)(uintptr_t)(i + 1);
  }
  fail_at = SIZE_MAX;
  unmap_fail_at = SIZE_MAX;
  test_thread = pthread_self();
  atomic_store(&helper_maps, 0);
  atomic_store(&helper_maps_unblocked, 0);
}

/* How many threads mapped pages [first, first + n): distinct values of thread[]. */
static size_t mappers(size_t first, size_t n) {
  pthread_t seen[PAGE_CREW_MAX + 1];
  size_t k = 0;
  for (size_t i = first; i < first + n; i++) {
    size_t j = 0;
    while (j < k && !pthread_equal(seen[j], thread[i]))
      j++;
    if (j == k) {
      cr_assert_lt(k, PAGE_CREW_MAX + 1);
      seen[k++] = thread[i];
    }
  }
  return k;
}

Test(page_crew, long_run_is_shared_and_mapped_once) {
  reset();
  page_crew *c;
  cr_assert_eq(page_crew_create(3, &c), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(page_crew_size(c), 3);
  cr_assert_eq(page_crew_map(c, &rec, BASE, handles, 37), GPUPOOL_OK);
  for (size_t i = 0; i < 37; i++) {
    cr_assert_eq(atomic_load(&state[i]), (uintptr_t)handles[i], "page %zu", i);
    cr_assert_eq(atomic_load(&calls[i]), 1, "page %zu", i);
  }
  cr_assert_eq(atomic_load(&state[37]), 0, "past the run");
  cr_assert_eq(mappers(0, 37), 4, "the caller and three helpers");
  cr_assert_eq(atomic_load(&helper_maps), 3);
  cr_assert_eq(atomic_load(&helper_maps_unblocked), 0, "a helper takes the program's signals");
  cr_assert_eq(page_crew_unmap(c, &rec, BASE, 37), GPUPOOL_OK);
  for (size_t i = 0; i < 37; i++) {
    cr_assert_eq(atomic_load(&state[i]), 0, "page %zu", i);
    cr_assert_eq(atomic_load(&calls[i]), 2, "page %zu", i);
  }
  page_crew_destroy(c);
}

Test(page_crew, short_runs_and_no_crew_stay_on_the_caller) {
  reset();
  page_crew *c;
  cr_assert_eq(page_crew_create(3, &c), GPUPOOL_OK);
  cr_assert_eq(page_crew_map(c, &rec, BASE, handles, 2 * PAGE_CREW_SHARE_MIN - 1), GPUPOOL_OK);
  for (size_t i = 0; i < 2 * PAGE_CREW_SHARE_MIN - 1; i++)
    cr_assert(pthread_equal(thread[i], pthread_self()), "page %zu", i);
  /* a run of 2 shares uses one helper only */
  cr_assert_eq(page_crew_map(c, &rec, BASE + 64 * PAGE_SZ, handles + 64, 2 * PAGE_CREW_SHARE_MIN),
               GPUPOOL_OK);
  cr_assert_eq(mappers(64, 2 * PAGE_CREW_SHARE_MIN), 2);
  page_crew_destroy(c);

  page_crew *none = (page_crew *)1;
  cr_assert_eq(page_crew_create(0, &none), GPUPOOL_OK);
  cr_assert_null(none);
  cr_assert_eq(page_crew_size(none), 0);
  cr_assert_eq(page_crew_map(NULL, &rec, BASE + 128 * PAGE_SZ, handles + 128, 64), GPUPOOL_OK);
  cr_assert_eq(mappers(128, 64), 1);
  cr_assert(pthread_equal(thread[128], pthread_self()));
  cr_assert_eq(page_crew_unmap(NULL, &rec, BASE + 128 * PAGE_SZ, 64), GPUPOOL_OK);
  cr_assert_eq(atomic_load(&state[191]), 0);
  page_crew_destroy(NULL);
}

Test(page_crew, a_failed_share_leaves_nothing_mapped) {
  page_crew *c;
  cr_assert_eq(page_crew_create(3, &c), GPUPOOL_OK);
  /* 40 pages in 4 shares of 10: the failure in the third share (a helper's),
   * then in the first (the caller's own) */
  size_t fails[] = {25, 3};
  for (size_t f = 0; f < 2; f++) {
    reset();
    fail_at = fails[f];
    cr_assert_eq(page_crew_map(c, &rec, BASE, handles, 40), GPUPOOL_ERR_BACKEND);
    char want[64];
    snprintf(want, sizeof want, "recording backend: page %zu refused", fails[f]);
    cr_assert_eq(strcmp(gpupool_last_error(), want), 0, "%s", gpupool_last_error());
    for (size_t i = 0; i < 40; i++)
      cr_assert_eq(atomic_load(&state[i]), 0, "page %zu stayed mapped (failure at %zu)", i,
                   fails[f]);
  }
  /* and the crew still serves */
  reset();
  cr_assert_eq(page_crew_map(c, &rec, BASE, handles, 40), GPUPOOL_OK);
  cr_assert_eq(mappers(0, 40), 4);
  page_crew_destroy(c);
}

/* An unmap failure on a helper reaches the asking thread, each time it
 * happens: the same reason twice in a row is two failures. */
Test(page_crew, a_failed_unmap_is_reported_every_time) {
  page_crew *c;
  cr_assert_eq(page_crew_create(3, &c), GPUPOOL_OK);
  reset();
  unmap_fail_at = 33; /* 40 pages in 4 shares of 10: the last share, a helper's */
  for (int round = 0; round < 2; round++) {
    cr_assert_eq(page_crew_map(c, &rec, BASE, handles, 40), GPUPOOL_OK);
    pool_fail(GPUPOOL_ERR_INVALID, "before round %d", round);
    cr_assert_eq(page_crew_unmap(c, &rec, BASE, 40), GPUPOOL_ERR_BACKEND, "round %d", round);
    cr_assert_str_eq(gpupool_last_error(), "recording backend: unmap of page 33 failed");
    for (size_t i = 0; i < 40; i++) /* every page was still unmapped */
      cr_assert_eq(atomic_load(&state[i]), 0, "page %zu stayed mapped", i);
  }
  cr_assert_eq(mappers(0, 40), 4);
  /* without the failure: GPUPOOL_OK */
  unmap_fail_at = SIZE_MAX;
  cr_assert_eq(page_crew_map(c, &rec, BASE, handles, 40), GPUPOOL_OK);
  cr_assert_eq(page_crew_unmap(c, &rec, BASE, 40), GPUPOOL_OK);
  page_crew_destroy(c);
}

typedef struct runner {
  page_crew *c;
  size_t first;
  int rounds;
} runner;

static void *map_unmap(void *arg) {
  runner *r = arg;
  for (int i = 0; i < r->rounds; i++) {
    if (page_crew_map(r->c, &rec, BASE + r->first * PAGE_SZ, handles + r->first, 32) != GPUPOOL_OK)
      return (void *)1;
    if (page_crew_unmap(r->c, &rec, BASE + r->first * PAGE_SZ, 32) != GPUPOOL_OK)
      return (void *)1;
  }
  return NULL;
}

Test(page_crew, runs_of_several_threads_at_once) {
  reset();
  page_crew *c;
  cr_assert_eq(page_crew_create(2, &c), GPUPOOL_OK);
  enum { T = 4 };
  pthread_t t[T];
  runner r[T];
  int rounds = (int)pc_scaled(200);
  for (size_t i = 0; i < T; i++) {
    r[i] = (runner){c, i * 32, rounds};
    cr_assert_eq(pthread_create(&t[i], NULL, map_unmap, &r[i]), 0);
  }
  for (size_t i = 0; i < T; i++) {
    void *ret;
    pthread_join(t[i], &ret);
    cr_assert_null(ret, "thread %zu", i);
  }
  for (size_t i = 0; i < T * 32; i++) {
    cr_assert_eq(atomic_load(&state[i]), 0, "page %zu", i);
    cr_assert_eq(atomic_load(&calls[i]), 2 * rounds, "page %zu", i);
  }
  page_crew_destroy(c);
}

Test(page_crew, a_forked_child_maps_alone) {
  reset();
  page_crew *c;
  cr_assert_eq(page_crew_create(3, &c), GPUPOOL_OK);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) { /* the helpers are not here: the run is the child's own */
    int ok = page_crew_map(c, &rec, BASE, handles, 64) == GPUPOOL_OK && mappers(0, 64) == 1 &&
             pthread_equal(thread[63], pthread_self());
    page_crew_destroy(c); /* the parent's: a no-op here */
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
  cr_assert_eq(atomic_load(&state[0]), 0, "the child's maps are its own");
  page_crew_destroy(c);
}

/* A pool that moves long runs of idle pages: 8 blocks of 16 MiB (8 pages
 * each), every other one freed, then blocks of 32 MiB that, with no slack,
 * take the idle pages (a run of 16 to map each). Returns the stats; every
 * block's data is checked before it is freed. */
static gpupool_stats moving_run(const char *tunables) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, (size_t)1 << 30, tunables);
  cr_assert_not_null(p, "%s", gpupool_last_error());
  enum { N = 8, SMALL = 16 << 20, BIG = 32 << 20 };
  void *x[N], *y[N / 2];
  for (uint64_t i = 0; i < N; i++) {
    cr_assert_eq(gpupool_malloc(p, &x[i], SMALL, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
    pc_pattern_fill(x[i], SMALL, i);
  }
  for (uint64_t i = 0; i < N; i += 2) {
    cr_assert_eq(pc_pattern_check(x[i], SMALL, i), SIZE_MAX);
    cr_assert_eq(gpupool_free(p, x[i]), GPUPOOL_OK);
  }
  for (uint64_t i = 0; i < N / 2; i++) {
    cr_assert_eq(gpupool_malloc(p, &y[i], BIG, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
    pc_pattern_fill(y[i], BIG, 100 + i);
  }
  for (uint64_t i = 1; i < N; i += 2)
    cr_assert_eq(pc_pattern_check(x[i], SMALL, i), SIZE_MAX, "block %llu", (unsigned long long)i);
  for (uint64_t i = 0; i < N / 2; i++)
    cr_assert_eq(pc_pattern_check(y[i], BIG, 100 + i), SIZE_MAX, "block %llu",
                 (unsigned long long)i);
  gpupool_stats s = pc_stats(p);
  gpupool_destroy(p);
  return s;
}

Test(page_crew, a_pool_moves_the_same_pages_with_helpers) {
  gpupool_stats alone =
      moving_run("expandable_segments:True,expandable_slack_percent:0,expandable_map_threads:0");
  gpupool_stats shared =
      moving_run("expandable_segments:True,expandable_slack_percent:0,expandable_map_threads:3");
  cr_assert_gt(alone.num_pages_moved, 0, "the sequence moves pages");
  cr_assert_eq(shared.num_pages_moved, alone.num_pages_moved);
  cr_assert_eq(shared.num_device_alloc, alone.num_device_alloc);
  cr_assert_eq(shared.num_alloc_unmaps, alone.num_alloc_unmaps);
  cr_assert_eq(shared.reserved_bytes[GPUPOOL_STAT_ALL].peak,
               alone.reserved_bytes[GPUPOOL_STAT_ALL].peak);
  cr_assert_eq(shared.reserved_bytes[GPUPOOL_STAT_ALL].current,
               alone.reserved_bytes[GPUPOOL_STAT_ALL].current);
}
