/* bench_tags: what allocation tags cost the hot path. ns per malloc+free
 * pair (a cache hit after the warm-up) on the host backend, one thread, on
 * the same pool side by side: with no tag set on the thread (what every
 * program that never calls gpupool_tag_push runs), with a tag set (each
 * allocation adds its bytes to the tag's count and the free takes them
 * back), and with none set again after a push and a pop. The states
 * alternate over several rounds and the medians are compared. The cost of
 * the tag code itself when no tag is set is the "none" column against the
 * same program built on a library without tags (bench/README.md).
 *
 *   bench_tags [--quick]
 *
 * Exit status 1 when a measurement failed. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_alloc.h"
#include "gpupool/tag.h"
#include "pair_timer.h"

static const size_t sizes[] = {512, 65536, 1 << 20, 16 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define ROUNDS 7

enum { NONE, SET, POPPED, STATES };
static const char *const state_name[STATES] = {"no tag", "tag set", "after pop"};

static double measure(const bench_alloc *a, size_t size, int state, const pair_plan *plan) {
  if (state == SET && gpupool_tag_push("bench") != GPUPOOL_OK)
    return NAN;
  double ns = pair_ns_one_thread(a, size, NULL, plan);
  if (state == SET)
    gpupool_tag_pop();
  return ns;
}

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  if (argc > 2 || (argc == 2 && !quick)) {
    fprintf(stderr, "usage: bench_tags [--quick]\n");
    return 2;
  }
  pair_plan plan = {.warmup_ns = quick ? 2000000 : 20000000,
                    .batch_ns = quick ? 2000000 : 20000000,
                    .reps = quick ? 3 : 9};
  bench_alloc a;
  char why[128];
  if (bench_alloc_gpupool(&a, "bfc", GPUPOOL_BACKEND_HOST, GPUPOOL_STRATEGY_BFC, NULL, 1ull << 32,
                          why, sizeof why) != 0) {
    fprintf(stderr, "bench_tags: %s\n", why);
    return 1;
  }
  printf("bench_tags: ns per malloc+free pair, gpupool bfc on the host backend, one thread, "
         "median of %d rounds\n\n",
         ROUNDS);
  printf(
      "| size | %s | %s | %s | set - none | after pop - none |\n|---:|---:|---:|---:|---:|---:|\n",
      state_name[NONE], state_name[SET], state_name[POPPED]);
  int failed = 0;
  for (size_t s = 0; s < NSIZES; s++) {
    double v[STATES][ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
      for (int st = 0; st < STATES; st++)
        v[st][r] = measure(&a, sizes[s], (st + r) % STATES, &plan); /* rotate the order */
    double med[STATES];
    for (int r = 0; r < ROUNDS; r++) { /* undo the rotation */
      double tmp[STATES];
      for (int st = 0; st < STATES; st++)
        tmp[(st + r) % STATES] = v[st][r];
      for (int st = 0; st < STATES; st++)
        v[st][r] = tmp[st];
    }
    for (int st = 0; st < STATES; st++) {
      med[st] = bench_median(v[st], ROUNDS);
      failed |= isnan(med[st]);
    }
    printf("| %zu | %.2f | %.2f | %.2f | %+.2f | %+.2f |\n", sizes[s], med[NONE], med[SET],
           med[POPPED], med[SET] - med[NONE], med[POPPED] - med[NONE]);
  }
  bench_alloc_destroy(&a);
  return failed;
}
