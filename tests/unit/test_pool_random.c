/* Long seeded random sequences for each strategy: allocations of 1 B to
 * 64 MiB on several host streams, frees in random order, record_stream,
 * stream work enqueued and completed, empty_cache now and then, OOMs on small
 * devices. Every allocation carries a pattern over its whole length, checked
 * at free; live blocks are kept in a sorted interval set so that an overlap
 * is caught when it is handed out; the stats are checked against the
 * invariants and against what the test holds, every few operations. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/pool_check.h"
#include "pool/pool_view.h"

#define KiB              PC_KiB
#define MiB              PC_MiB
#define A                GPUPOOL_STAT_ALL
#define MAX_STREAMS      8
#define CHECK_EVERY      8     /* operations between stats checks */
#define CHECKPOINT_EVERY 16384 /* operations between drains (streams complete, empty_cache) */

typedef struct run_cfg {
  gpupool_strategy strategy;
  size_t capacity;       /* 0: the 8 GiB default */
  unsigned divisions;    /* bfc roundup_power2_divisions */
  unsigned max_split_mb; /* bfc max_split_size_mb; 0: no limit */
  unsigned cutoff;       /* round_linear_cutoff; 0: 24 */
  double fault_rate;
  const char *extra; /* more tunables */
  int expandable;    /* expandable_segments:True */
  int nstreams;      /* host streams besides the default one; 0: the default only (exact peaks) */
  size_t ops;
  size_t max_live;
  uint64_t seed;
} run_cfg;

typedef struct live {
  unsigned char *ptr;
  size_t size, rounded, slack;
  uint64_t id;
  int large;
} live;

typedef struct interval {
  uintptr_t lo, hi;
} interval;

typedef struct run {
  const run_cfg *cfg;
  gpupool *pool;
  gpupool_host_stream *streams[MAX_STREAMS];
  uint64_t rng;
  live *lv;
  size_t nlive;
  interval *iv; /* sorted by lo, disjoint */
  size_t niv;
  pc_model model;
  uint64_t next_id, mallocs, frees, ooms;
  int64_t requested_total, rounded_total;
  int64_t max_count[GPUPOOL_STAT_TYPES], max_requested[GPUPOOL_STAT_TYPES],
      max_rounded[GPUPOOL_STAT_TYPES];
  size_t op;
} run;

static uint64_t next_rand(run *r) {
  uint64_t x = r->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->rng = x;
  return x * 0x2545f4914f6cdd1dull;
}

static size_t rand_below(run *r, size_t n) {
  return (size_t)(next_rand(r) % n);
}

/* Roughly log-uniform in [lo, hi]. */
static size_t rand_log(run *r, size_t lo, size_t hi) {
  unsigned lo_bits = 64 - __builtin_clzll(lo), hi_bits = 64 - __builtin_clzll(hi);
  unsigned bits = lo_bits + (unsigned)rand_below(r, hi_bits - lo_bits + 1);
  size_t base = (size_t)1 << (bits - 1);
  size_t s = base + rand_below(r, base);
  return s < lo ? lo : s > hi ? hi : s;
}

static const size_t small_edges[] = {1,    511,  512,   513,         4095,    4096,
                                     4097, 8191, 65536, 1 * MiB - 1, 1 * MiB, 1 * MiB + 1};
static const size_t large_edges[] = {2 * MiB,  10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 16 * MiB - 1,
                                     16 * MiB, 16 * MiB + 1, 20 * MiB, 32 * MiB,     64 * MiB};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Mostly small, as real workloads are; rarely up to 64 MiB (each byte is
 * written and checked, so the large ones set the run time). */
static size_t pick_size(run *r) {
  size_t u = rand_below(r, 100000);
  if (u < 1500)
    return small_edges[rand_below(r, COUNT(small_edges))];
  if (u < 1530)
    return large_edges[rand_below(r, COUNT(large_edges))];
  if (u < 90000)
    return rand_log(r, 1, 4096);
  if (u < 99650)
    return rand_log(r, 4097, 256 * KiB);
  if (u < 99980)
    return rand_log(r, 256 * KiB + 1, 8 * MiB);
  return rand_log(r, 8 * MiB + 1, 64 * MiB);
}

static void *pick_stream(run *r) {
  size_t k = rand_below(r, (size_t)r->cfg->nstreams + 1);
  return k == 0 ? NULL : r->streams[k - 1];
}

/* The block size expected for a request, and by how much more a pool may
 * hand out whole (an unsplit cached block, or an unsplit new segment). */
static size_t expected_round(const run_cfg *c, size_t size, size_t *slack) {
  *slack = 0;
  switch (c->strategy) {
  case GPUPOOL_STRATEGY_ROUND:
    return pc_round_bucket(size, c->cutoff ? c->cutoff : 24);
  case GPUPOOL_STRATEGY_NAIVE:
    return pc_naive_round(size);
  default: {
    size_t rounded = pc_bfc_round(size, c->divisions);
    if (!pc_is_large(rounded))
      return rounded;
    size_t m = c->max_split_mb ? c->max_split_mb * MiB : SIZE_MAX;
    size_t seg = pc_bfc_segment(rounded);
    if (rounded >= m)
      *slack = 20 * MiB; /* blocks < request + max_non_split_rounding (20 MiB) */
    else
      *slack = seg >= m && seg - rounded > MiB ? seg - rounded : MiB;
    return rounded;
  }
  }
}

/* Index of the first interval with lo >= key. */
static size_t iv_lower(const run *r, uintptr_t key) {
  size_t lo = 0, hi = r->niv;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r->iv[mid].lo < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void iv_insert(run *r, uintptr_t lo, uintptr_t hi) {
  size_t i = iv_lower(r, lo);
  if (i > 0)
    cr_assert(r->iv[i - 1].hi <= lo,
              "op %zu: new block [%#lx, %#lx) overlaps live block [%#lx, %#lx)", r->op,
              (unsigned long)lo, (unsigned long)hi, (unsigned long)r->iv[i - 1].lo,
              (unsigned long)r->iv[i - 1].hi);
  if (i < r->niv)
    cr_assert(hi <= r->iv[i].lo, "op %zu: new block [%#lx, %#lx) overlaps live block [%#lx, %#lx)",
              r->op, (unsigned long)lo, (unsigned long)hi, (unsigned long)r->iv[i].lo,
              (unsigned long)r->iv[i].hi);
  memmove(&r->iv[i + 1], &r->iv[i], (r->niv - i) * sizeof *r->iv);
  r->iv[i] = (interval){lo, hi};
  r->niv++;
}

static void iv_remove(run *r, uintptr_t lo) {
  size_t i = iv_lower(r, lo);
  cr_assert(i < r->niv && r->iv[i].lo == lo, "op %zu: interval set lost %#lx", r->op,
            (unsigned long)lo);
  memmove(&r->iv[i], &r->iv[i + 1], (r->niv - i - 1) * sizeof *r->iv);
  r->niv--;
}

static void track_peaks(run *r) {
  for (int i = 0; i < GPUPOOL_STAT_TYPES; i++) {
    if (r->model.count[i] > r->max_count[i])
      r->max_count[i] = r->model.count[i];
    if (r->model.requested[i] > r->max_requested[i])
      r->max_requested[i] = r->model.requested[i];
    if (r->model.rounded[i] > r->max_rounded[i])
      r->max_rounded[i] = r->model.rounded[i];
  }
}

typedef struct segment_search {
  uintptr_t addr;
  int large;
} segment_search;

static void note_kind(void *arg, const pool_segment_info *s) {
  segment_search *q = arg;
  if (q->addr >= s->addr && q->addr < s->addr + s->size)
    q->large = s->is_large;
}

/* The size kind the statistics count a new block under: its segment's. With
 * expandable segments a small request may be served in the large range
 * (docs/pool.md), and counts as large there. */
static int counted_large(run *r, void *ptr, size_t rounded) {
  if (!r->cfg->expandable || pc_is_large(rounded))
    return pc_is_large(rounded);
  segment_search q = {(uintptr_t)ptr, -1};
  pool_walker w = {.segment = note_kind, .arg = &q};
  pool_walk(r->pool, &w);
  cr_assert_neq(q.large, -1, "op %zu: %p is in no segment of the pool", r->op, ptr);
  return q.large;
}

static void do_malloc(run *r) {
  size_t size = pick_size(r), slack;
  size_t rounded = expected_round(r->cfg, size, &slack);
  void *ptr = (void *)0x1;
  gpupool_status st = gpupool_malloc(r->pool, &ptr, size, pick_stream(r));
  if (st == GPUPOOL_ERR_OOM) {
    r->ooms++;
    return;
  }
  cr_assert_eq(st, GPUPOOL_OK, "op %zu: malloc(%zu): %s: %s", r->op, size,
               gpupool_status_string(st), gpupool_last_error());
  cr_assert((uintptr_t)ptr % 512 == 0, "op %zu: malloc(%zu) = %p is not 512 B aligned", r->op, size,
            ptr);
  iv_insert(r, (uintptr_t)ptr, (uintptr_t)ptr + rounded);
  live *l = &r->lv[r->nlive++];
  *l = (live){ptr, size, rounded, slack, r->next_id++, counted_large(r, ptr, rounded)};
  pc_pattern_fill(l->ptr, l->size, l->id);
  pc_model_update(&r->model, l->large, size, rounded, slack, +1);
  r->mallocs++;
  r->requested_total += (int64_t)size;
  r->rounded_total += (int64_t)rounded;
  track_peaks(r);
}

static void check_pattern(run *r, const live *l) {
  size_t bad = pc_pattern_check(l->ptr, l->size, l->id);
  cr_assert_eq(bad, SIZE_MAX,
               "op %zu: allocation %p (%zu B, id %llu) corrupted at offset %zu: another "
               "allocation overlaps it",
               r->op, (void *)l->ptr, l->size, (unsigned long long)l->id, bad);
}

static void do_free(run *r) {
  size_t k = rand_below(r, r->nlive);
  live l = r->lv[k];
  check_pattern(r, &l);
  gpupool_status st = gpupool_free(r->pool, l.ptr);
  cr_assert_eq(st, GPUPOOL_OK, "op %zu: free(%p): %s", r->op, (void *)l.ptr, gpupool_last_error());
  r->lv[k] = r->lv[--r->nlive];
  iv_remove(r, (uintptr_t)l.ptr);
  pc_model_update(&r->model, l.large, l.size, l.rounded, l.slack, -1);
  r->frees++;
}

static void check_stats(run *r) {
  gpupool_stats s = pc_stats(r->pool);
  char msg[512];
  int bad = pc_check_invariants(&s, r->cfg->strategy, r->cfg->expandable ? PC_EXPANDABLE : 0, msg,
                                sizeof msg);
  cr_assert_eq(bad, 0, "op %zu: %s", r->op, msg);
  bad = pc_check_model(&s, &r->model, msg, sizeof msg);
  cr_assert_eq(bad, 0, "op %zu: %s", r->op, msg);
  cr_assert_eq(s.num_ooms, r->ooms, "op %zu: num_ooms %llu, seen %llu", r->op,
               (unsigned long long)s.num_ooms, (unsigned long long)r->ooms);
  cr_assert_eq(s.allocation[A].allocated, (int64_t)r->mallocs, "op %zu", r->op);
  cr_assert_eq(s.num_frees, r->frees, "op %zu", r->op);
  cr_assert_eq(s.requested_bytes[A].allocated, r->requested_total, "op %zu", r->op);
  if (r->cfg->strategy != GPUPOOL_STRATEGY_BFC)
    cr_assert_eq(s.allocated_bytes[A].allocated, r->rounded_total, "op %zu", r->op);
  for (int i = 0; i < GPUPOOL_STAT_TYPES; i++) {
    if (r->cfg->nstreams == 0) { /* one stream: peaks are exact */
      cr_assert_eq(s.allocation[i].peak, r->max_count[i], "op %zu: allocation[%d].peak", r->op, i);
      cr_assert_eq(s.requested_bytes[i].peak, r->max_requested[i],
                   "op %zu: requested_bytes[%d].peak", r->op, i);
      if (r->cfg->strategy != GPUPOOL_STRATEGY_BFC || i == GPUPOOL_STAT_SMALL)
        cr_assert_eq(s.allocated_bytes[i].peak, r->max_rounded[i],
                     "op %zu: allocated_bytes[%d].peak", r->op, i);
    } else { /* several: never above the true peak */
      cr_assert(s.allocation[i].peak <= r->max_count[i], "op %zu: allocation[%d].peak %lld > %lld",
                r->op, i, (long long)s.allocation[i].peak, (long long)r->max_count[i]);
      cr_assert(s.requested_bytes[i].peak <= r->max_requested[i], "op %zu", r->op);
    }
  }
}

/* Streams complete, the cache is emptied: nothing may stay pending, and for
 * round and naive nothing may stay cached. */
static void checkpoint(run *r) {
  for (int k = 0; k < r->cfg->nstreams; k++)
    gpupool_host_stream_complete(r->streams[k]);
  gpupool_stats before = pc_stats(r->pool);
  size_t released = gpupool_empty_cache(r->pool);
  gpupool_stats s = pc_stats(r->pool);
  cr_assert_eq((int64_t)released, before.reserved_bytes[A].current - s.reserved_bytes[A].current,
               "op %zu: empty_cache returned %zu, reserved went %lld -> %lld", r->op, released,
               (long long)before.reserved_bytes[A].current, (long long)s.reserved_bytes[A].current);
  cr_assert_eq(s.pending_free_blocks, 0, "op %zu: blocks pending after every stream completed",
               r->op);
  for (int i = 0; i < GPUPOOL_STAT_TYPES; i++) {
    cr_assert_eq(s.active[i].current, s.allocation[i].current, "op %zu", r->op);
    cr_assert_eq(s.active_bytes[i].current, s.allocated_bytes[i].current, "op %zu", r->op);
  }
  if (r->cfg->strategy == GPUPOOL_STRATEGY_BFC) {
    cr_assert(s.segment[A].current <= s.allocation[A].current,
              "op %zu: %lld segments left for %lld live allocations", r->op,
              (long long)s.segment[A].current, (long long)s.allocation[A].current);
  } else {
    cr_assert_eq(s.free_blocks, 0, "op %zu", r->op);
    cr_assert_eq(s.segment[A].current, s.allocation[A].current, "op %zu", r->op);
    cr_assert_eq(s.reserved_bytes[A].current, s.allocated_bytes[A].current, "op %zu", r->op);
  }
  check_stats(r);
  /* a reset of the peaks restarts them from the current values */
  gpupool_reset_peak_stats(r->pool);
  for (int i = 0; i < GPUPOOL_STAT_TYPES; i++) {
    r->max_count[i] = r->model.count[i];
    r->max_requested[i] = r->model.requested[i];
    r->max_rounded[i] = r->model.rounded[i];
  }
  check_stats(r);
}

static void run_sequence(const run_cfg *cfg) {
  char tunables[256];
  int n =
      snprintf(tunables, sizeof tunables, "fault_seed:%llu", (unsigned long long)(cfg->seed + 1));
  if (cfg->divisions)
    n +=
        snprintf(tunables + n, sizeof tunables - n, ",roundup_power2_divisions:%u", cfg->divisions);
  if (cfg->max_split_mb)
    n += snprintf(tunables + n, sizeof tunables - n, ",max_split_size_mb:%u", cfg->max_split_mb);
  if (cfg->cutoff)
    n += snprintf(tunables + n, sizeof tunables - n, ",round_linear_cutoff:%u", cfg->cutoff);
  if (cfg->fault_rate > 0)
    n += snprintf(tunables + n, sizeof tunables - n, ",fault_rate:%g", cfg->fault_rate);
  if (cfg->expandable)
    n += snprintf(tunables + n, sizeof tunables - n, ",expandable_segments:True");
  if (cfg->extra)
    snprintf(tunables + n, sizeof tunables - n, ",%s", cfg->extra);

  run r = {.cfg = cfg, .rng = cfg->seed * 0x9e3779b97f4a7c15ull + 1};
  r.pool = pc_pool(cfg->strategy, cfg->capacity, tunables);
  for (int k = 0; k < cfg->nstreams; k++)
    r.streams[k] = gpupool_host_stream_create();
  r.lv = calloc(cfg->max_live + 1, sizeof *r.lv);
  r.iv = calloc(cfg->max_live + 1, sizeof *r.iv);
  cr_assert(r.lv && r.iv);

  size_t ops = pc_scaled(cfg->ops);
  for (r.op = 0; r.op < ops; r.op++) {
    size_t u = rand_below(&r, 1000);
    if (u < 480) {
      if (r.nlive < cfg->max_live)
        do_malloc(&r);
      else
        do_free(&r);
    } else if (u < 940) {
      if (r.nlive)
        do_free(&r);
      else
        do_malloc(&r);
    } else if (u < 960) {
      if (r.nlive && cfg->nstreams) {
        live *l = &r.lv[rand_below(&r, r.nlive)];
        gpupool_status st = gpupool_record_stream(r.pool, l->ptr, pick_stream(&r));
        cr_assert_eq(st, GPUPOOL_OK, "op %zu: record_stream: %s", r.op, gpupool_last_error());
      }
    } else if (u < 975) {
      if (cfg->nstreams)
        gpupool_host_stream_enqueue(r.streams[rand_below(&r, cfg->nstreams)]);
    } else if (u < 995) {
      if (cfg->nstreams)
        gpupool_host_stream_complete(r.streams[rand_below(&r, cfg->nstreams)]);
    } else if (u < 998) {
      if (r.nlive)
        check_pattern(&r, &r.lv[rand_below(&r, r.nlive)]);
    } else if (rand_below(&r, 4) == 0) {
      gpupool_stats before = pc_stats(r.pool);
      size_t released = gpupool_empty_cache(r.pool);
      gpupool_stats after = pc_stats(r.pool);
      cr_assert_eq((int64_t)released,
                   before.reserved_bytes[A].current - after.reserved_bytes[A].current, "op %zu",
                   r.op);
    }
    if (r.op % CHECK_EVERY == 0)
      check_stats(&r);
    if (r.op % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1)
      checkpoint(&r);
  }

  while (r.nlive)
    do_free(&r);
  checkpoint(&r);
  gpupool_stats s = pc_stats(r.pool);
  char msg[512];
  cr_expect_eq(pc_check_empty(&s, msg, sizeof msg), 0, "at the end: %s", msg);
  if (cfg->fault_rate > 0)
    cr_expect(r.ooms > 0, "injected faults never reached the caller");
  cr_log_info("%zu ops, %llu mallocs, %llu ooms, %llu retries, %llu device allocs, %llu cache "
              "hits, %llu sync events, %llu gc runs",
              ops, (unsigned long long)r.mallocs, (unsigned long long)r.ooms,
              (unsigned long long)s.num_alloc_retries, (unsigned long long)s.num_device_alloc,
              (unsigned long long)s.num_cache_hits, (unsigned long long)s.num_sync_events,
              (unsigned long long)s.num_gc_runs);
  if (cfg->extra && strstr(cfg->extra, "garbage_collection_threshold"))
    cr_expect(s.num_gc_runs > 0, "the garbage collector never ran");
  if (cfg->nstreams)
    cr_expect(s.num_sync_events > 0, "record_stream never deferred a free");
  if (cfg->expandable)
    cr_expect(s.num_pages_moved > 0, "no page was ever moved to another block");
  for (int k = 0; k < cfg->nstreams; k++)
    gpupool_host_stream_destroy(r.streams[k]);
  gpupool_destroy(r.pool);
  free(r.lv);
  free(r.iv);
}

Test(pool_random, bfc_several_streams) {
  run_sequence(&(run_cfg){
      .strategy = GPUPOOL_STRATEGY_BFC, .nstreams = 4, .ops = 120000, .max_live = 1500, .seed = 1});
}

Test(pool_random, bfc_one_stream_exact_peaks_with_tunables) {
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_BFC,
                          .divisions = 4,
                          .max_split_mb = 32,
                          .ops = 120000,
                          .max_live = 1500,
                          .seed = 2});
}

Test(pool_random, bfc_small_device_with_faults) {
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_BFC,
                          .capacity = 48 * MiB,
                          .fault_rate = 0.2,
                          .nstreams = 2,
                          .ops = 80000,
                          .max_live = 800,
                          .seed = 3});
}

Test(pool_random, bfc_small_device_with_gc_and_reserve) {
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_BFC,
                          .capacity = 96 * MiB,
                          .extra = "garbage_collection_threshold:0.3,reserve_percent:10",
                          .nstreams = 3,
                          .ops = 60000,
                          .max_live = 600,
                          .seed = 9});
}

/* Pages move between blocks all the time here: the pattern written through
 * every allocation catches a page mapped twice or taken from under a block. */
Test(pool_random, bfc_expandable_several_streams) {
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_BFC,
                          .expandable = 1,
                          .nstreams = 3,
                          .ops = 80000,
                          .max_live = 1200,
                          .seed = 10});
}

Test(pool_random, bfc_expandable_small_device_with_faults) {
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_BFC,
                          .expandable = 1,
                          .capacity = 48 * MiB,
                          .fault_rate = 0.2,
                          .extra = "garbage_collection_threshold:0.5",
                          .nstreams = 2,
                          .ops = 60000,
                          .max_live = 800,
                          .seed = 11});
}

Test(pool_random, round_several_streams) {
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_ROUND,
                          .nstreams = 4,
                          .ops = 100000,
                          .max_live = 1500,
                          .seed = 4});
}

Test(pool_random, round_one_stream_cutoff_20_exact_peaks) {
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_ROUND,
                          .cutoff = 20,
                          .ops = 100000,
                          .max_live = 1500,
                          .seed = 5});
}

Test(pool_random, naive_several_streams) {
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_NAIVE,
                          .nstreams = 3,
                          .ops = 100000,
                          .max_live = 1500,
                          .seed = 6});
}

Test(pool_random, round_and_naive_small_device) {
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_ROUND,
                          .capacity = 40 * MiB,
                          .fault_rate = 0.2,
                          .nstreams = 2,
                          .ops = 50000,
                          .max_live = 600,
                          .seed = 7});
  run_sequence(&(run_cfg){.strategy = GPUPOOL_STRATEGY_NAIVE,
                          .capacity = 40 * MiB,
                          .ops = 50000,
                          .max_live = 600,
                          .seed = 8});
}
