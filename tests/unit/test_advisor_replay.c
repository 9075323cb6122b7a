/* The advisor's replay reproduces the live pool exactly: a workload runs on
 * a host-backend pool with the event rings on; its history (from the rings,
 * and from a GPUPOOL_RECORD file written alongside) replayed on the
 * simulated device under the same configuration gives the same peaks and
 * the same device calls, for each strategy, with and without expandable
 * segments, and on the OOM-retry path. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpupool/advisor.h"
#include "gpupool/gpupool.h"
#include "gpupool/host.h"
#include "pool/pool_view.h"

#define MiB ((size_t)1 << 20)

static uint64_t rng(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Training-like steps: per step a batch of sizes that varies (sequence
 * length), activations kept to the end of the step, small temporaries
 * freed at once, a persistent set of weights; and empty_cache once. */
static void workload(gpupool *p, FILE *rec, uint64_t seed, int steps, void *stream2) {
  void *keep[400];
  size_t nkeep = 0;
  uint64_t s = seed;
  void *w[8];
  for (int i = 0; i < 8; i++) {
    size_t sz = (size_t)(1 + rng(&s) % 24) * MiB + (size_t)(rng(&s) % 4096);
    cr_assert_eq(gpupool_malloc(p, &w[i], sz, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
    fprintf(rec, "a %p %zu 0x0\n", w[i], sz);
  }
  for (int step = 0; step < steps; step++) {
    size_t seq = 16 + rng(&s) % 112;
    for (int l = 0; l < 24; l++) {
      size_t act = seq * (size_t)(4096 + rng(&s) % 8192);
      size_t tmp = (size_t)(1 + rng(&s) % 300000);
      void *a, *t;
      cr_assert_eq(gpupool_malloc(p, &a, act, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
      fprintf(rec, "a %p %zu 0x0\n", a, act);
      cr_assert_eq(gpupool_malloc(p, &t, tmp, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
      fprintf(rec, "a %p %zu 0x0\n", t, tmp);
      if (stream2 && l % 5 == 0) {
        cr_assert_eq(gpupool_record_stream(p, t, stream2), GPUPOOL_OK);
        fprintf(rec, "r %p %p\n", t, stream2);
      }
      cr_assert_eq(gpupool_free(p, t), GPUPOOL_OK);
      fprintf(rec, "f %p\n", t);
      keep[nkeep++] = a;
    }
    while (nkeep) {
      void *a = keep[--nkeep];
      cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
      fprintf(rec, "f %p\n", a);
    }
  }
  for (int i = 0; i < 8; i++) {
    cr_assert_eq(gpupool_free(p, w[i]), GPUPOOL_OK);
    fprintf(rec, "f %p\n", w[i]);
  }
}

static gpupool_stats check_exact(const char *conf, size_t capacity, int streams) {
  pool_events_enable(1 << 16);
  gpupool_options o = {.name = "live",
                       .backend = GPUPOOL_BACKEND_HOST,
                       .tunables = conf,
                       .host_capacity = capacity,
                       .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  char path[] = "/tmp/gpupool_advisor_recXXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *rec = fdopen(fd, "w");
  gpupool_host_stream *s2 = streams ? gpupool_host_stream_create() : NULL;
  workload(p, rec, 0x9e3779b97f4a7c15ULL ^ (uint64_t)strlen(conf), 60, s2);
  fclose(rec);
  gpupool_stats live;
  cr_assert_eq(gpupool_get_stats(p, &live), GPUPOOL_OK);
  gpupool_history *hr, *hf;
  cr_assert_eq(gpupool_history_from_pool(p, &hr), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_history_load(path, NULL, NULL, &hf), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_destroy(p);
  pool_events_disable();
  gpupool_host_stream_destroy(s2);
  unlink(path);
  cr_assert_eq(gpupool_history_get_info(hr)->dropped, 0, "the ring lost events: enlarge it");
  cr_assert_eq(gpupool_history_get_info(hr)->events, gpupool_history_get_info(hf)->events);
  gpupool_history *hs[2] = {hr, hf};
  for (int k = 0; k < 2; k++) {
    gpupool_replay_result r;
    cr_assert_eq(gpupool_replay(hs[k], conf, capacity, &r), GPUPOOL_OK, "%s", gpupool_last_error());
    const char *src = k ? "record file" : "event rings";
    cr_expect_eq(r.peak_reserved, (uint64_t)live.reserved_bytes[GPUPOOL_STAT_ALL].peak,
                 "%s, %s: peak reserved %llu, live %lld", conf, src,
                 (unsigned long long)r.peak_reserved,
                 (long long)live.reserved_bytes[GPUPOOL_STAT_ALL].peak);
    cr_expect_eq(r.peak_allocated, (uint64_t)live.allocated_bytes[GPUPOOL_STAT_ALL].peak,
                 "%s, %s: peak allocated", conf, src);
    cr_expect_eq(r.device_allocs, live.num_device_alloc, "%s, %s: device allocs %llu, live %llu",
                 conf, src, (unsigned long long)r.device_allocs,
                 (unsigned long long)live.num_device_alloc);
    cr_expect_eq(r.device_frees, live.num_device_free, "%s, %s: device frees", conf, src);
    cr_expect_eq(r.alloc_retries, live.num_alloc_retries, "%s, %s: retries", conf, src);
    cr_expect_eq(r.gc_runs, live.num_gc_runs, "%s, %s: gc runs", conf, src);
    cr_expect_eq(r.pages_moved, live.num_pages_moved, "%s, %s: pages moved", conf, src);
    cr_expect_eq(r.device_syncs, live.num_device_syncs + live.num_alloc_retries, "%s, %s: syncs",
                 conf, src);
    cr_expect_eq(r.sync_events, live.num_sync_events, "%s, %s: sync events", conf, src);
    cr_expect_eq(r.ooms, 0);
  }
  gpupool_history_free(hr);
  gpupool_history_free(hf);
  return live;
}

#define BIG ((size_t)8 << 30)

Test(advisor_replay, bfc_exact) {
  check_exact("", BIG, 0);
  check_exact("roundup_power2_divisions:4,max_split_size_mb:64", BIG, 0);
}
Test(advisor_replay, bfc_expandable_exact) {
  check_exact("expandable_segments:True", BIG, 0);
  check_exact("expandable_segments:True,expandable_slack_percent:0", BIG, 0);
}
Test(advisor_replay, round_exact) {
  check_exact("strategy:round", BIG, 0);
}
Test(advisor_replay, naive_exact) {
  check_exact("strategy:naive", BIG, 0);
}
Test(advisor_replay, record_stream_exact) {
  cr_expect_gt(check_exact("", BIG, 1).num_sync_events, 0, "no record_stream free here");
  check_exact("expandable_segments:True", BIG, 1);
}
/* A device small enough that the pool frees its cache and retries, and a
 * GC threshold that trims it: both paths replay exactly too. */
Test(advisor_replay, retry_and_gc_exact) {
  cr_expect_gt(check_exact("", 176 * MiB, 0).num_alloc_retries, 0, "no retry path here");
  cr_expect_gt(check_exact("garbage_collection_threshold:0.5", 240 * MiB, 0).num_gc_runs, 0,
               "no GC pass here");
  check_exact("expandable_segments:True,expandable_slack_percent:0", 132 * MiB, 0);
}
