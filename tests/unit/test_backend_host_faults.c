/* Fault injection on the host backend through the public API:
 * gpupool_host_inject_faults and the fault_* keys of the tunables string. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "gpupool/host.h"

#define MiB ((size_t)1 << 20)

static gpupool *host_pool(const char *tunables) {
  gpupool_options opt = {.backend = GPUPOOL_BACKEND_HOST,
                         .host_capacity = 256 * MiB,
                         .tunables = tunables,
                         .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&opt, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

static gpupool_stats stats_of(gpupool *p) {
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
  return s;
}

Test(host_faults, rejects_bad_arguments) {
  cr_assert_eq(gpupool_host_inject_faults(NULL, 1, 0, 0), GPUPOOL_ERR_INVALID);
  gpupool *p = host_pool(NULL);
  const double bad[] = {-0.01, 1.01, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(gpupool_host_inject_faults(p, 0, bad[i], 0), GPUPOOL_ERR_INVALID, "rate %g",
                 bad[i]);
    cr_assert(strstr(gpupool_last_error(), "rate"), "reason: %s", gpupool_last_error());
  }
  cr_assert_eq(gpupool_host_inject_faults(p, 0, 0.0, 0), GPUPOOL_OK);
  cr_assert_eq(gpupool_host_inject_faults(p, 0, 1.0, 0), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(host_faults, every_allocation_failing_gives_oom_and_the_pool_recovers) {
  gpupool *p = host_pool(NULL);
  void *cached = NULL, *live = NULL, *x = (void *)0x1;
  cr_assert_eq(gpupool_malloc(p, &cached, 12 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, cached), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &live, 64 * 1024, NULL), GPUPOOL_OK);
  memset(live, 0x77, 64 * 1024);

  cr_assert_eq(gpupool_host_inject_faults(p, 1, 0, 0), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &x, 40 * MiB, NULL), GPUPOOL_ERR_OOM);
  gpupool_stats s = stats_of(p);
  cr_assert_eq(s.num_ooms, 1);
  cr_assert_eq(s.num_alloc_retries, 1);
  cr_assert_eq(s.allocation[GPUPOOL_STAT_ALL].current, 1, "the live allocation is untouched");
  for (size_t i = 0; i < 64 * 1024; i++)
    cr_assert_eq(((unsigned char *)live)[i], 0x77);

  cr_assert_eq(gpupool_host_inject_faults(p, 0, 0, 0), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &x, 40 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, live), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(host_faults, cache_hits_need_no_device_allocation) {
  gpupool *p = host_pool(NULL);
  void *a = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 12 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_host_inject_faults(p, 1, 1.0, 0), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &a, 12 * MiB, NULL), GPUPOOL_OK, "served from the cache");
  cr_assert_eq(stats_of(p).num_ooms, 0);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(host_faults, every_nth_from_the_tunables_string_triggers_one_retry) {
  gpupool *p = host_pool("fault_every_n:2");
  void *a = NULL, *b = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 12 * MiB, NULL), GPUPOOL_OK, "device attempt 1");
  cr_assert_eq(gpupool_malloc(p, &b, 14 * MiB, NULL), GPUPOOL_OK,
               "attempt 2 fails, the retry (attempt 3) succeeds");
  gpupool_stats s = stats_of(p);
  cr_assert_eq(s.num_alloc_retries, 1);
  cr_assert_eq(s.num_ooms, 0);
  cr_assert_eq(s.num_device_alloc, 2);
  gpupool_free(p, a);
  gpupool_free(p, b);
  gpupool_destroy(p);
}

/* The statuses of 40 allocations that each need a new segment. */
static void statuses(gpupool *p, gpupool_status out[40]) {
  void *ptr[40];
  for (int i = 0; i < 40; i++) {
    ptr[i] = NULL;
    out[i] = gpupool_malloc(p, &ptr[i], (size_t)(12 + i) * MiB, NULL);
  }
  for (int i = 0; i < 40; i++)
    if (out[i] == GPUPOOL_OK)
      gpupool_free(p, ptr[i]);
  gpupool_empty_cache(p);
}

Test(host_faults, seeded_rate_replays) {
  gpupool_status a[40], b[40], c[40];
  gpupool *p1 = host_pool("fault_rate:0.5,fault_seed:11");
  gpupool *p2 = host_pool(NULL);
  statuses(p1, a);
  cr_assert_eq(gpupool_host_inject_faults(p2, 0, 0.5, 11), GPUPOOL_OK);
  statuses(p2, b);
  cr_assert_arr_eq(a, b, sizeof a, "same seed from GPUPOOL_CONF keys and from the API");
  cr_assert_eq(gpupool_host_inject_faults(p2, 0, 0.5, 11), GPUPOOL_OK);
  statuses(p2, c);
  cr_assert_arr_eq(a, c, sizeof a, "setting it again replays the sequence");
  int ooms = 0;
  for (int i = 0; i < 40; i++)
    ooms += a[i] == GPUPOOL_ERR_OOM;
  cr_assert(ooms > 0 && ooms < 40, "some fail, some succeed: %d", ooms);
  gpupool_destroy(p1);
  gpupool_destroy(p2);
}
