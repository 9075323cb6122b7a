/* memory_fraction, PyTorch's per-process memory fraction for one pool: the
 * cap on reserved bytes, on a host-backend device of 256 MiB. The cap
 * refuses growth the device would allow, the OOM retry returns cached
 * segments before it refuses, an expandable pool moves idle pages under it,
 * garbage_collection_threshold counts from it, bad values change nothing,
 * and the OOM report's remedy (the least fraction that allows the request)
 * is checked by applying it, and one step less. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exporters/oom_json.h"
#include "helpers/pool_check.h"
#include "pool/oom_report.h"
#include "pool/pool_view.h"

#define MiB PC_MiB
#define DEV (256 * MiB)
#define A   GPUPOOL_STAT_ALL

static gpupool_status try_malloc(gpupool *p, size_t size, void **out) {
  *out = NULL;
  return gpupool_malloc(p, out, size, NULL);
}

Test(memory_fraction, caps_reserved_bytes_where_the_device_has_room) {
  const char *confs[] = {NULL, "memory_fraction:0.25"};
  for (int capped = 0; capped < 2; capped++) {
    gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, DEV, confs[capped]);
    void *a = pc_must_malloc(p, 20 * MiB, NULL), *b = pc_must_malloc(p, 20 * MiB, NULL),
         *c = pc_must_malloc(p, 20 * MiB, NULL), *d;
    gpupool_status st = try_malloc(p, 20 * MiB, &d); /* 80 MiB: over 64, under 256 */
    gpupool_stats s = pc_stats(p);
    if (capped) {
      cr_expect_eq(st, GPUPOOL_ERR_OOM, "%s", gpupool_status_string(st));
      cr_expect_eq(s.num_ooms, 1);
      cr_expect_eq(s.reserved_bytes[A].current, 60 * (int64_t)MiB, "nothing grew past the cap");
      cr_expect(strstr(gpupool_last_error(), "CUDA out of memory.") == gpupool_last_error(), "%s",
                gpupool_last_error());
      cr_expect(strstr(gpupool_last_error(), "memory_fraction 0.25"), "%s", gpupool_last_error());
      cr_expect(strstr(gpupool_last_error(), "limit refused it, not the device"), "%s",
                gpupool_last_error());
    } else {
      cr_expect_eq(st, GPUPOOL_OK, "without the cap the device serves it");
      pc_must_free(p, d);
    }
    cr_expect_eq(gpupool_memory_fraction(p), capped ? 0.25 : 1.0);
    pc_must_free(p, a);
    pc_must_free(p, b);
    pc_must_free(p, c);
    gpupool_destroy(p);
  }
}

Test(memory_fraction, the_retry_returns_cached_segments_before_refusing) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, DEV, "memory_fraction:0.25");
  pc_must_free(p, pc_must_malloc(p, 30 * MiB, NULL));
  void *b = pc_must_malloc(p, 40 * MiB, NULL); /* 30 cached + 40 > 64: release, retry */
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.num_alloc_retries, 1);
  cr_expect_eq(s.num_ooms, 0);
  cr_expect_eq(s.num_device_free, 1, "the cached segment went back first");
  cr_expect_eq(s.reserved_bytes[A].current, 40 * (int64_t)MiB);
  pc_expect_consistent(p, GPUPOOL_STRATEGY_BFC);
  pc_must_free(p, b);
  gpupool_destroy(p);
}

Test(memory_fraction, set_at_run_time_refuses_growth_only) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, DEV, NULL);
  void *a = pc_must_malloc(p, 40 * MiB, NULL);
  pc_must_free(p, pc_must_malloc(p, 30 * MiB, NULL));              /* 30 MiB cached, 70 reserved */
  cr_assert_eq(gpupool_set_memory_fraction(p, 0.125), GPUPOOL_OK); /* 32 MiB: below */
  cr_expect_eq(gpupool_memory_fraction(p), 0.125);
  gpupool_stats s = pc_stats(p);
  cr_expect_eq(s.reserved_bytes[A].current, 70 * (int64_t)MiB, "lowering releases nothing");
  void *b = pc_must_malloc(p, 30 * MiB, NULL); /* the cached block still serves */
  s = pc_stats(p);
  cr_expect_eq(s.num_device_alloc, 2, "from the cache");
  void *c;
  cr_expect_eq(try_malloc(p, 4 * MiB, &c), GPUPOOL_ERR_OOM, "growth past the cap is refused");
  cr_assert_eq(gpupool_set_memory_fraction(p, 1.0), GPUPOOL_OK);
  cr_expect_eq(try_malloc(p, 4 * MiB, &c), GPUPOOL_OK, "raised, it grows again");
  pc_must_free(p, c);
  pc_must_free(p, b);
  pc_must_free(p, a);
  cr_assert_eq(gpupool_set_memory_fraction(p, 0), GPUPOOL_OK); /* PyTorch allows 0 */
  gpupool_empty_cache(p);
  cr_expect_eq(try_malloc(p, 512, &c), GPUPOOL_ERR_OOM, "fraction 0: nothing can be reserved");
  gpupool_destroy(p);
}

Test(memory_fraction, bad_values_are_refused_and_change_nothing) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, DEV, "memory_fraction:0.5");
  const double bad[] = {NAN, -0.01, 1.01, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    cr_expect_eq(gpupool_set_memory_fraction(p, bad[i]), GPUPOOL_ERR_INVALID, "%g", bad[i]);
    cr_expect(strstr(gpupool_last_error(), "not a fraction from 0 to 1"), "%s",
              gpupool_last_error());
    cr_expect_eq(gpupool_memory_fraction(p), 0.5, "unchanged after %g", bad[i]);
  }
  cr_expect_eq(gpupool_set_memory_fraction(NULL, 0.5), GPUPOOL_ERR_INVALID);
  cr_expect(isnan(gpupool_memory_fraction(NULL)));
  cr_expect(strstr(gpupool_last_error(), "pool is NULL"), "%s", gpupool_last_error());
  const char *confs[] = {"memory_fraction:1.5", "memory_fraction:-1", "memory_fraction:half",
                         "memory_fraction:"};
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST};
  for (size_t i = 0; i < sizeof confs / sizeof *confs; i++) {
    cr_expect_eq(gpupool_conf_check(&o, confs[i]), GPUPOOL_ERR_INVALID, "%s", confs[i]);
    cr_expect(strstr(gpupool_last_error(), "memory_fraction"), "%s: %s", confs[i],
              gpupool_last_error());
  }
  cr_expect_eq(gpupool_conf_check(&o, "memory_fraction:0"), GPUPOOL_OK);
  cr_expect_eq(gpupool_conf_check(&o, "memory_fraction:1"), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(memory_fraction, minus_zero_is_zero) {
  /* As the configuration's parser takes "-0": read back (and in an OOM's
   * report) as 0, never "-0". */
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, DEV, NULL);
  cr_assert_eq(gpupool_set_memory_fraction(p, -0.0), GPUPOOL_OK, "%s", gpupool_last_error());
  double f = gpupool_memory_fraction(p);
  cr_expect(f == 0 && !signbit(f), "read back as %g", f);
  void *x = NULL;
  cr_expect_eq(gpupool_malloc(p, &x, MiB, NULL), GPUPOOL_ERR_OOM);
  cr_expect(strstr(gpupool_last_error(), "memory_fraction 0)"), "%s", gpupool_last_error());
  cr_expect(!strstr(gpupool_last_error(), "-0"), "%s", gpupool_last_error());
  gpupool_destroy(p);
}

Test(memory_fraction, an_expandable_pool_moves_idle_pages_rather_than_passing_the_cap) {
  /* A slack of 100 % would create every page the new block needs (the
   * reserved bytes reach 92 MiB without the cap); under it, idle pages move. */
  for (int capped = 0; capped < 2; capped++) {
    gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, DEV,
                         capped ? "expandable_segments:True,expandable_slack_percent:100,"
                                  "memory_fraction:0.25"
                                : "expandable_segments:True,expandable_slack_percent:100");
    void *a = pc_must_malloc(p, 40 * MiB, NULL), *keep = pc_must_malloc(p, 4 * MiB, NULL);
    pc_must_free(p, a);                          /* 40 MiB of idle pages before keep */
    void *b = pc_must_malloc(p, 48 * MiB, NULL); /* past keep: on pages not mapped yet */
    gpupool_stats s = pc_stats(p);
    cr_expect_eq(s.num_ooms, 0);
    if (!capped) {
      cr_expect_eq(s.reserved_bytes[A].current, 92 * (int64_t)MiB, "the control creates them");
    } else {
      cr_expect_leq(s.reserved_bytes[A].current, 64 * (int64_t)MiB, "%lld",
                    (long long)s.reserved_bytes[A].current);
      cr_expect_geq(s.num_pages_moved, 1, "idle pages moved under the cap");
      void *c;
      cr_expect_eq(try_malloc(p, 20 * MiB, &c), GPUPOOL_ERR_OOM, "52 live + 20 > 64");
      cr_expect(strstr(gpupool_last_error(), "limit refused it"), "%s", gpupool_last_error());
      cr_expect_eq(try_malloc(p, 10 * MiB, &c), GPUPOOL_OK, "52 + 10 fits under 64");
      s = pc_stats(p);
      cr_expect_leq(s.reserved_bytes[A].current, 64 * (int64_t)MiB);
      pc_must_free(p, c);
    }
    pc_must_free(p, b);
    pc_must_free(p, keep);
    gpupool_destroy(p);
  }
}

Test(memory_fraction, garbage_collection_counts_from_the_cap) {
  for (int capped = 0; capped < 2; capped++) {
    gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, DEV,
                         capped ? "garbage_collection_threshold:0.5,memory_fraction:0.25"
                                : "garbage_collection_threshold:0.5");
    void *a = pc_must_malloc(p, 20 * MiB, NULL), *b = pc_must_malloc(p, 16 * MiB, NULL);
    pc_must_free(p, a);                          /* 20 cached, 36 reserved */
    void *c = pc_must_malloc(p, 24 * MiB, NULL); /* a new segment: GC first */
    gpupool_stats s = pc_stats(p);
    /* Over half the cap (32 MiB) the cached segment goes; under half the
     * device (128 MiB) it stays. */
    cr_expect_eq(s.num_device_free, capped ? 1u : 0u, "capped %d", capped);
    cr_expect_eq(s.num_alloc_retries, 0, "capped %d", capped);
    cr_expect_eq(s.reserved_bytes[A].current, (capped ? 40 : 60) * (int64_t)MiB);
    pc_must_free(p, b);
    pc_must_free(p, c);
    gpupool_destroy(p);
  }
}

/* The newest report (the agent's part: an observer, and rings). */
static pool_oom_report *last;

static void keep(pool_oom_report *r, void *arg) {
  (void)arg;
  pool_oom_report_free(last);
  last = r;
}

Test(memory_fraction, the_report_names_the_cap_and_its_fraction_suffices_where_less_does_not) {
  pool_events_enable(4096);
  pool_oom_observer o = {NULL, keep, NULL};
  pool_oom_set_observer(&o);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, DEV, "memory_fraction:0.2");
  void *a = pc_must_malloc(p, 30 * MiB, NULL), *b;
  cr_assert_eq(try_malloc(p, 26 * MiB, &b), GPUPOOL_ERR_OOM); /* 56 MiB > 51.2 */
  cr_assert_not_null(last);
  const oom_explanation *e = &last->ex;
  cr_expect(last->has_limit && last->limit_refused);
  cr_expect_eq(last->limit, (uint64_t)(0.2 * (double)DEV));
  cr_expect_eq(e->need, 26 * MiB);
  cr_expect_eq(e->shortfall, 56 * MiB - last->limit, "the bytes past the cap");
  cr_expect_not(e->device_had_room, "the device was not asked");
  cr_expect_eq(e->empty_cache_enough, OOM_NO, "the retry emptied the cache already");
  cr_expect_eq(e->free_outside_to_fit, 0, "freeing outside the pool does not lift a cap");
  double exact = 56.0 / 256.0;
  cr_expect(e->fraction_needed >= exact && e->fraction_needed - 0.001 < exact, "%g",
            e->fraction_needed);
  cr_expect(strstr(last->message, "limit 51.20 MiB (memory_fraction 0.2)"), "%s", last->message);
  cr_expect(strstr(last->message, "memory_fraction 0.219 would allow it"), "%s", last->message);
  char *json = oom_json_report(last);
  cr_assert_not_null(json);
  cr_expect(strstr(json, "\"limit_refused\":true"), "%s", json);
  cr_expect(strstr(json, "\"memory_fraction\":0.2"), "%s", json);
  cr_expect(strstr(json, "\"at_least\":0.219"), "%s", json);
  free(json);
  double needed = e->fraction_needed;

  /* The remedy, applied: one step less still fails, the fraction given fits. */
  cr_assert_eq(gpupool_set_memory_fraction(p, needed - 0.001), GPUPOOL_OK);
  cr_expect_eq(try_malloc(p, 26 * MiB, &b), GPUPOOL_ERR_OOM, "%g", needed - 0.001);
  cr_assert_eq(gpupool_set_memory_fraction(p, needed), GPUPOOL_OK);
  cr_expect_eq(try_malloc(p, 26 * MiB, &b), GPUPOOL_OK, "%g", needed);
  pc_must_free(p, b);
  pc_must_free(p, a);

  /* An OOM the device refuses names the cap but not as the cause. */
  cr_assert_eq(gpupool_set_memory_fraction(p, 1.0), GPUPOOL_OK);
  cr_expect_eq(try_malloc(p, 300 * MiB, &b), GPUPOOL_ERR_OOM);
  cr_assert_not_null(last);
  cr_expect(last->has_limit && !last->limit_refused);
  cr_expect_not(strstr(last->message, "limit refused"), "%s", last->message);
  gpupool_destroy(p);
  pool_oom_set_observer(NULL);
  pool_oom_report_free(last);
  last = NULL;
}
