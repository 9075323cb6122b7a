/* bench_tags: what allocation tags cost the hot path. ns per malloc+free
 * pair (a cache hit after the warm-up), one thread, gpupool bfc on the host
 * backend, side by side in one process:
 *   - off:      a library without tags (--baseline PATH: e.g. main before
 *               tags landed, built the same way), when given;
 *   - none set: this library, no tag set on the thread (what every program
 *               that never calls gpupool_tag_push runs);
 *   - set:      this library inside gpupool_tag_push("bench") (the bytes
 *               are counted per tag on malloc and taken back on free).
 * Each library is loaded with dlopen (both pay the same PLT calls); the
 * variants take turns, one timed batch each per round, so that a slow phase
 * of a shared machine hits all alike; the median and the minimum over the
 * rounds are printed, and the differences to "none set".
 *
 *   bench_tags [--quick] [--lib PATH] [--baseline PATH]
 *
 * --lib defaults to this build's libgpupool.so. Exit status 1 when a
 * library cannot be used or an allocation failed. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/gpupool.h"
#include "pair_timer.h"

#ifndef BENCH_TAGS_LIB
#define BENCH_TAGS_LIB "libgpupool.so"
#endif

static const size_t sizes[] = {512, 65536, 1 << 20};
#define NSIZES   (sizeof sizes / sizeof sizes[0])
#define VARIANTS 3

typedef struct lib {
  gpupool_status (*create)(const gpupool_options *, gpupool **);
  void (*destroy)(gpupool *);
  gpupool_status (*malloc_)(gpupool *, void **, size_t, void *);
  gpupool_status (*free_)(gpupool *, void *);
  gpupool_status (*push)(const char *);
  gpupool_status (*pop)(void);
  gpupool *pool;
} lib;

static int load(const char *path, lib *l, int need_tags) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "bench_tags: %s\n", dlerror());
    return -1;
  }
  *(void **)&l->create = dlsym(h, "gpupool_create");
  *(void **)&l->destroy = dlsym(h, "gpupool_destroy");
  *(void **)&l->malloc_ = dlsym(h, "gpupool_malloc");
  *(void **)&l->free_ = dlsym(h, "gpupool_free");
  *(void **)&l->push = dlsym(h, "gpupool_tag_push");
  *(void **)&l->pop = dlsym(h, "gpupool_tag_pop");
  if (!l->create || !l->destroy || !l->malloc_ || !l->free_ || (need_tags && !l->push)) {
    fprintf(stderr, "bench_tags: %s lacks gpupool_%s\n", path,
            need_tags && !l->push ? "tag_push (a library without tags)" : "create/malloc/free");
    return -1;
  }
  gpupool_options o = {.name = "bench",
                       .backend = GPUPOOL_BACKEND_HOST,
                       .strategy = GPUPOOL_STRATEGY_BFC,
                       .host_capacity = (size_t)1 << 32,
                       .ignore_env = 1};
  if (l->create(&o, &l->pool) != GPUPOOL_OK) {
    fprintf(stderr, "bench_tags: %s: cannot create a host pool\n", path);
    return -1;
  }
  return 0;
}

/* ns per pair over n pairs; NAN when an allocation failed. */
static double batch(const lib *l, size_t size, long n) {
  uint64_t t0 = bench_clock_ns();
  for (long i = 0; i < n; i++) {
    void *p;
    if (l->malloc_(l->pool, &p, size, NULL) != GPUPOOL_OK)
      return NAN;
    l->free_(l->pool, p);
  }
  return (double)(bench_clock_ns() - t0) / (double)n;
}

static double timed(const lib *l, int variant, size_t size, long n) {
  if (variant == 2 && l->push("bench") != GPUPOOL_OK)
    return NAN;
  double ns = batch(l, size, n);
  if (variant == 2)
    l->pop();
  return ns;
}

static double minimum(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    m = v[i] < m ? v[i] : m;
  return m;
}

int main(int argc, char **argv) {
  int quick = 0;
  const char *path = BENCH_TAGS_LIB, *baseline = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--lib") && i + 1 < argc)
      path = argv[++i];
    else if (!strcmp(argv[i], "--baseline") && i + 1 < argc)
      baseline = argv[++i];
    else {
      fprintf(stderr, "usage: bench_tags [--quick] [--lib PATH] [--baseline PATH]\n");
      return 2;
    }
  }
  lib cur, base;
  if (load(path, &cur, 1) != 0 || (baseline && load(baseline, &base, 0) != 0))
    return 1;
  const lib *libs[VARIANTS] = {baseline ? &base : NULL, &cur, &cur};
  const char *names[VARIANTS] = {"off (no tags)", "none set", "set"};
  const long n = quick ? 20000 : 200000;
  const int rounds = quick ? 5 : 31;
  printf("## bench_tags: ns per malloc+free pair, gpupool bfc, host backend, one thread; "
         "%d rounds of %ld pairs per variant\n\nlibrary: %s\nbaseline: %s\n\n",
         rounds, n, path, baseline ? baseline : "(none: --baseline PATH adds it)");
  printf("| size | variant | median | min | median - none set | min - none set |\n"
         "|---:|---|---:|---:|---:|---:|\n");
  int failed = 0;
  for (size_t s = 0; s < NSIZES; s++) {
    double v[VARIANTS][64], med[VARIANTS], min[VARIANTS];
    for (int k = 0; k < VARIANTS; k++)
      if (libs[k])
        timed(libs[k], k, sizes[s], n); /* warm-up: fills the cache */
    for (int r = 0; r < rounds; r++)
      for (int k = 0; k < VARIANTS; k++)
        v[k][r] = libs[k] ? timed(libs[k], k, sizes[s], n) : NAN;
    for (int k = 0; k < VARIANTS; k++) {
      if (!libs[k])
        continue;
      min[k] = minimum(v[k], rounds);
      med[k] = bench_median(v[k], rounds);
      failed |= isnan(med[k]);
    }
    for (int k = 0; k < VARIANTS; k++)
      if (libs[k])
        printf("| %zu | %s | %.2f | %.2f | %+.2f | %+.2f |\n", sizes[s], names[k], med[k], min[k],
               med[k] - med[1], min[k] - min[1]);
  }
  cur.destroy(cur.pool);
  if (baseline)
    base.destroy(base.pool);
  return failed;
}
