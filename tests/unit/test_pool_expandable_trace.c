/* The page-placement policies of expandable segments against exact figures
 * on recorded training traces (tests/data: the first steps of
 * tests/gpu/torch_train.py's CNN, whose batch size changes every step, and
 * transformer LM, whose sequence length does), replayed on the simulated
 * device: peak reserved, device allocations (pages), pages moved and device
 * synchronizations. A policy change that moves these numbers must say so
 * here (and in bench/README.md and docs/pool.md). Plain bfc is checked
 * alongside. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpupool/advisor.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static gpupool_history *load(const char *name) {
  char path[1024];
  const char *src = getenv("GPUPOOL_SOURCE_DIR");
  snprintf(path, sizeof path, "%s/tests/data/%s", src ? src : ".", name);
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load(path, "record", NULL, &h), GPUPOOL_OK, "%s: %s", path,
               gpupool_last_error());
  return h;
}

typedef struct expected {
  const char *conf;
  uint64_t peak_reserved, peak_allocated, device_allocs, pages_moved, device_syncs;
} expected;

static void check_one(gpupool_history *h, const expected *e) {
  gpupool_replay_result r;
  cr_assert_eq(gpupool_replay(h, e->conf, 80 * GiB, &r), GPUPOOL_OK, "%s: %s", e->conf,
               gpupool_last_error());
  cr_expect_eq(r.ooms, 0, "%s", e->conf);
  cr_expect_eq(r.peak_allocated, e->peak_allocated, "%s: peak allocated %llu", e->conf,
               (unsigned long long)r.peak_allocated);
  cr_expect_eq(r.peak_reserved, e->peak_reserved, "%s: peak reserved %llu", e->conf,
               (unsigned long long)r.peak_reserved);
  cr_expect_eq(r.device_allocs, e->device_allocs, "%s: device allocs %llu", e->conf,
               (unsigned long long)r.device_allocs);
  cr_expect_eq(r.pages_moved, e->pages_moved, "%s: pages moved %llu", e->conf,
               (unsigned long long)r.pages_moved);
  cr_expect_eq(r.device_syncs, e->device_syncs, "%s: device syncs %llu", e->conf,
               (unsigned long long)r.device_syncs);
}

/* Replays the trace tests/data/<name> under each of e[0..n). */
static void check(const char *name, const expected *e, size_t n) {
  gpupool_history *h = load(name);
  for (size_t i = 0; i < n; i++)
    check_one(h, &e[i]);
  gpupool_history_free(h);
}

Test(pool_expandable_trace, cnn) {
  static const expected e[] = {
      {"strategy:bfc", 576 * MiB, 344509952, 15, 0, 0},
      /* 1.047 (the defaults: 5 % slack, no growth): small blocks' pages count
       * in the 5 %; small blocks take idle pages of the large range before
       * a small segment gets one, and the moves all fall in the first steps
       * (before that: 55, the 210 MiB workspace moving 2 pages in each step
       * of the largest batch) */
      {"expandable_segments:True", 344 * MiB, 344509952, 172, 28, 0},
      /* 1.051: the first steps move pages, then the slack has grown enough */
      {"expandable_segments:True,expandable_growth_moves:8", 346 * MiB, 345099776, 173, 21, 0},
      {"expandable_segments:True,expandable_slack_percent:0", 332 * MiB, 344509952, 166, 102, 0},
  };
  check("cnn_train_60steps.trace", e, sizeof e / sizeof e[0]);
}

Test(pool_expandable_trace, lm) {
  static const expected e[] = {
      {"strategy:bfc", 1486 * MiB, 1358535680, 66, 0, 0},
      {"expandable_segments:True", 1360 * MiB, 1358535680, 680, 99, 0},
      {"expandable_segments:True,expandable_growth_moves:8", 1374 * MiB, 1358535680, 687, 92, 0},
      {"expandable_segments:True,expandable_slack_percent:0", 1312 * MiB, 1358535680, 656, 158, 0},
  };
  check("lm_train_24steps.trace", e, sizeof e / sizeof e[0]);
}
