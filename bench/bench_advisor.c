/* bench_advisor: how fast the advisor replays (events/s per configuration,
 * one thread) and how long its default search takes over a 300-step
 * training-like history and over 10^7 events, with one worker and with one
 * per core. The history is generated here, shaped like bench/make_trace.py's
 * transformer (parameters and optimizer state for the whole run; per step
 * activations sized by a varying sequence length, freed in reverse with
 * short-lived gradients; the next batch copied on a second stream).
 *
 * --baseline PATH adds a side-by-side table: the same 300-step history
 * (written as a GPUPOOL_RECORD file and loaded by each library) replayed by
 * a baseline libgpupool.so (e.g. main before a change, built the same way)
 * and by this build's (--lib PATH), both through dlopen, taking turns round
 * by round so that a slow phase of a shared machine hits both alike; medians
 * of the replaying thread's CPU time, their ratio, and whether the two gave
 * the same figures (peaks, device calls, flushes, OOMs, fragmentation).
 *
 * --trace PATH (repeatable; GPUPOOL_RECORD files such as bench/README.md's
 * training traces) prints only the replay speed of expandable segments
 * against plain bfc on each: ms per replay (the replaying thread's CPU time,
 * best of the rounds, the two taking turns), the ratio of the bests, the
 * median and quartiles of each round's ratio, and the figures both gave. Without --trace that table
 * is printed for the 300-step history.
 * --rounds N: rounds of that table (default 7, 3 with --quick).
 *
 *   bench_advisor [--quick] [--big-events N] [--threads N] [--lib PATH] [--baseline PATH]
 *                 [--trace PATH]... [--rounds N] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "advisor/history.h"
#include "gpupool/advisor.h"
#include "pair_timer.h"

#ifndef BENCH_ADVISOR_LIB
#define BENCH_ADVISOR_LIB "libgpupool.so"
#endif

static uint64_t rng_state = 1;
static uint64_t rnd(uint64_t n) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (rng_state >> 33) % n;
}

typedef struct gen {
  gpupool_history *h;
  uint64_t next;
  uint64_t *size; /* by id, to free gradients of the same shape */
  size_t cap;
} gen;

static uint64_t galloc(gen *g, uint64_t size, uint64_t stream) {
  char err[160];
  uint64_t id = g->next++;
  if (id >= g->cap) {
    g->cap = g->cap ? 2 * g->cap : 1 << 16;
    g->size = realloc(g->size, g->cap * sizeof *g->size);
    if (!g->size)
      exit(1);
  }
  g->size[id] = size;
  if (hist_alloc(g->h, id, size, stream, err, sizeof err)) {
    fprintf(stderr, "bench_advisor: %s\n", err);
    exit(1);
  }
  return id;
}

static void gfree(gen *g, uint64_t id) {
  if (hist_free(g->h, id) != 0) {
    fprintf(stderr, "bench_advisor: bad free\n");
    exit(1);
  }
}

/* Stops adding steps once the history holds max_events (0: steps only). */
static gpupool_history *make_history(int steps, size_t max_events) {
  const uint64_t layers = 6, h = 512, batch = 16, vocab = 8192, f4 = 4, copy = 0x5000;
  gen g = {.h = hist_new("synthetic transformer", "record"), .next = 1};
  rng_state = 1;
  uint64_t psize[1 + 10 * 6], np = 0;
  psize[np++] = vocab * h * f4;
  for (uint64_t l = 0; l < layers; l++) {
    uint64_t s[10] = {3 * h * h * f4, 3 * h * f4,     h * h * f4, h * f4, 4 * h * h * f4,
                      4 * h * f4,     4 * h * h * f4, h * f4,     h * f4, h * f4};
    memcpy(&psize[np], s, sizeof s);
    np += 10;
  }
  uint64_t params[64], state[128];
  for (uint64_t i = 0; i < np; i++)
    params[i] = galloc(&g, psize[i], 0);
  for (uint64_t i = 0; i < 2 * np; i++)
    state[i] = galloc(&g, psize[i / 2], 0);
  uint64_t batch_next = galloc(&g, batch * 512 * 8, copy);
  static const uint64_t seqs[] = {64, 96, 128, 192, 256, 384, 512};
  static const uint64_t bseq[] = {64, 128, 256, 512};
  for (int step = 0; steps ? step < steps : g.h->n_ops < max_events; step++) {
    uint64_t seq = seqs[rnd(7)], tokens = batch * seq;
    uint64_t cur = batch_next;
    batch_next = galloc(&g, batch * bseq[rnd(4)] * 8, copy);
    uint64_t saved[64], ns = 0, grads[64];
    saved[ns++] = galloc(&g, tokens * h * f4, 0);
    for (uint64_t l = 0; l < layers; l++) {
      saved[ns++] = galloc(&g, tokens * 3 * h * f4, 0);
      saved[ns++] = galloc(&g, batch * 8 * seq * seq * f4, 0);
      saved[ns++] = galloc(&g, tokens * h * f4, 0);
      uint64_t tmp = galloc(&g, tokens * h * f4, 0);
      saved[ns++] = galloc(&g, tokens * 4 * h * f4, 0);
      saved[ns++] = galloc(&g, tokens * h * f4, 0);
      gfree(&g, tmp);
    }
    uint64_t logits = galloc(&g, tokens * vocab * f4, 0), loss = galloc(&g, 512, 0);
    uint64_t glog = galloc(&g, tokens * vocab * f4, 0);
    gfree(&g, logits);
    while (ns) {
      uint64_t s = saved[--ns], gr = galloc(&g, g.size[s], 0);
      gfree(&g, s);
      gfree(&g, gr);
    }
    for (uint64_t i = 0; i < np; i++)
      grads[i] = galloc(&g, psize[i], 0);
    gfree(&g, glog);
    gfree(&g, loss);
    for (uint64_t i = 0; i < np; i++) {
      uint64_t tmp = galloc(&g, 512 + rnd(4) * 512, 0);
      gfree(&g, tmp);
      gfree(&g, grads[i]);
    }
    gfree(&g, cur);
  }
  gfree(&g, batch_next);
  for (uint64_t i = 0; i < 2 * np; i++)
    gfree(&g, state[i]);
  for (uint64_t i = 0; i < np; i++)
    gfree(&g, params[i]);
  free(g.size);
  hist_finish(g.h);
  return g.h;
}

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The configurations replayed one by one; `baseline`: also in the
 * side-by-side run against another library (one built before
 * expandable_slack_percent existed refuses that key). */
static const struct {
  const char *conf;
  int baseline;
} configs[] = {
    {"", 1},
    {"roundup_power2_divisions:4", 1},
    {"max_split_size_mb:128", 1},
    {"garbage_collection_threshold:0.7", 1},
    {"expandable_segments:True", 1},
    {"expandable_segments:True,expandable_slack_percent:0", 0},
    {"strategy:round", 1},
    {"strategy:naive", 1},
};
#define NCONFIGS (sizeof configs / sizeof *configs)

static const char *config_name(const char *conf) {
  return *conf ? conf : "(defaults: bfc)";
}

static void per_config(const gpupool_history *h, int quick) {
  printf("\n| configuration | events | best of %d, wall (s) | CPU (s) | M events/s (CPU) |\n"
         "|---|---:|---:|---:|---:|\n",
         quick ? 1 : 5);
  for (size_t i = 0; i < NCONFIGS; i++) {
    double best = 1e30, best_cpu = 1e30;
    gpupool_replay_result r;
    for (int k = 0; k < (quick ? 1 : 5); k++) {
      if (gpupool_replay(h, configs[i].conf, (uint64_t)80 << 30, &r) != GPUPOOL_OK) {
        fprintf(stderr, "bench_advisor: %s\n", gpupool_last_error());
        exit(1);
      }
      if (r.seconds < best)
        best = r.seconds;
      if (r.cpu_seconds < best_cpu)
        best_cpu = r.cpu_seconds;
    }
    printf("| %s | %llu | %.4f | %.4f | %.1f |\n", config_name(configs[i].conf),
           (unsigned long long)r.events, best, best_cpu, (double)r.events / best_cpu / 1e6);
  }
}

/* The q-quantile (0..1) of v[0..n), sorted ascending, by linear interpolation. */
static double sorted_quantile(const double *v, int n, double q) {
  double at = q * (n - 1);
  int i = (int)at;
  return i + 1 < n ? v[i] + (at - i) * (v[i + 1] - v[i]) : v[n - 1];
}

/* Expandable segments against plain bfc on history h, as the advisor
 * replays them, `rounds` rounds of one replay each, the order within a round
 * alternating: the best of each, their ratio, and the median and quartiles of
 * the rounds' own ratios (a slow stretch of a shared host hits both replays
 * of a round alike, where it can hit one side's best and not the other's). */
static void expandable_speed(const char *what, const gpupool_history *h, int rounds) {
  static const char *conf[2] = {"", "expandable_segments:True"};
  double best[2] = {1e30, 1e30};
  double *ratio = malloc((size_t)rounds * sizeof *ratio);
  if (!ratio) {
    fprintf(stderr, "bench_advisor: out of memory\n");
    exit(1);
  }
  gpupool_replay_result r[2];
  for (int k = 0; k < rounds; k++) {
    for (int i = 0; i < 2; i++) {
      int j = i ^ (k & 1);
      if (gpupool_replay(h, conf[j], (uint64_t)80 << 30, &r[j]) != GPUPOOL_OK) {
        fprintf(stderr, "bench_advisor: %s: %s\n", what, gpupool_last_error());
        exit(1);
      }
      if (r[j].cpu_seconds < best[j])
        best[j] = r[j].cpu_seconds;
    }
    ratio[k] = r[1].cpu_seconds / r[0].cpu_seconds;
  }
  double median = bench_median(ratio, rounds); /* sorts ratio */
  printf("| %s | %llu | %.3f | %.3f | %.2f | %.3f (%.3f-%.3f) | %.3f, %.3f | %llu |\n", what,
         (unsigned long long)r[0].events, best[0] * 1e3, best[1] * 1e3, best[1] / best[0], median,
         sorted_quantile(ratio, rounds, 0.25), sorted_quantile(ratio, rounds, 0.75), r[0].ratio,
         r[1].ratio, (unsigned long long)r[1].pages_moved);
  free(ratio);
}

static void expandable_header(int rounds) {
  printf("\n| replay speed, %d rounds (CPU) | events | bfc ms (best) | expandable ms (best) | "
         "expandable / bfc (best) | expandable / bfc per round: median (q25-q75) | "
         "reserved / allocated (bfc, expandable) | pages moved |\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|\n",
         rounds);
}

static void search(const char *what, const gpupool_history *h, unsigned threads) {
  gpupool_advice_options o = {.threads = threads, .max_added_ms = -1};
  double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
  gpupool_advice *a;
  if (gpupool_advise(h, &o, &a) != GPUPOOL_OK) {
    fprintf(stderr, "bench_advisor: %s\n", gpupool_last_error());
    exit(1);
  }
  double wall = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
  double replayed = 0, replay_s = 0;
  for (size_t i = 0; i < a->n; i++) {
    replayed += (double)a->c[i].r.events;
    replay_s += a->c[i].r.cpu_seconds;
  }
  printf("| %s | %llu | %zu | %u | %.3f | %.3f | %.1f |\n", what,
         (unsigned long long)h->info.events, a->n, threads, wall, cpu, replayed / replay_s / 1e6);
  gpupool_advice_free(a);
}

/* The advisor's entry points of one libgpupool.so, loaded with dlopen. */
typedef struct lib {
  const char *path;
  gpupool_status (*load)(const char *, const char *, const char *, gpupool_history **);
  void (*history_free)(gpupool_history *);
  gpupool_status (*replay)(const gpupool_history *, const char *, uint64_t,
                           gpupool_replay_result *);
  gpupool_status (*advise)(const gpupool_history *, const gpupool_advice_options *,
                           gpupool_advice **);
  void (*advice_free)(gpupool_advice *);
  const char *(*last_error)(void);
  gpupool_history *h;
} lib;

static int lib_open(lib *l, const char *path, const char *record) {
  void *d = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!d) {
    fprintf(stderr, "bench_advisor: %s\n", dlerror());
    return -1;
  }
  l->path = path;
  *(void **)&l->load = dlsym(d, "gpupool_history_load");
  *(void **)&l->history_free = dlsym(d, "gpupool_history_free");
  *(void **)&l->replay = dlsym(d, "gpupool_replay");
  *(void **)&l->advise = dlsym(d, "gpupool_advise");
  *(void **)&l->advice_free = dlsym(d, "gpupool_advice_free");
  *(void **)&l->last_error = dlsym(d, "gpupool_last_error");
  if (!l->load || !l->history_free || !l->replay || !l->advise || !l->advice_free ||
      !l->last_error) {
    fprintf(stderr, "bench_advisor: %s lacks the advisor (gpupool_history_load ...)\n", path);
    return -1;
  }
  if (l->load(record, "record", NULL, &l->h) != GPUPOOL_OK) {
    fprintf(stderr, "bench_advisor: %s: %s\n", path, l->last_error());
    return -1;
  }
  return 0;
}

/* h as a GPUPOOL_RECORD file (slots as ids); 0, or -1 with errno's reason. */
static int write_record(const gpupool_history *h, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  for (size_t i = 0; i < h->n_ops; i++) {
    const hist_op *op = &h->ops[i];
    unsigned long long stream = (unsigned long long)h->streams[op->stream];
    if (op->kind == HOP_ALLOC)
      fprintf(f, "a %u %llu 0x%llx\n", op->slot, (unsigned long long)h->size[op->slot], stream);
    else if (op->kind == HOP_FREE)
      fprintf(f, "f %u\n", op->slot);
    else if (op->kind == HOP_RECORD_STREAM)
      fprintf(f, "r %u 0x%llx\n", op->slot, stream);
  }
  return fclose(f);
}

/* Whether two replays gave the same figures (not their times). */
static int same_result(const gpupool_replay_result *a, const gpupool_replay_result *b) {
  return a->peak_reserved == b->peak_reserved && a->peak_allocated == b->peak_allocated &&
         a->peak_requested == b->peak_requested && a->device_allocs == b->device_allocs &&
         a->device_frees == b->device_frees && a->cache_flushes == b->cache_flushes &&
         a->ooms == b->ooms && a->pages_moved == b->pages_moved &&
         a->device_syncs == b->device_syncs && a->sync_events == b->sync_events &&
         a->fragmentation_at_peak == b->fragmentation_at_peak && a->events == b->events;
}

static int side_by_side(const gpupool_history *h300, const char *path, const char *baseline,
                        int quick) {
  char record[] = "/tmp/bench_advisor_XXXXXX";
  int fd = mkstemp(record);
  if (fd < 0 || (close(fd), write_record(h300, record)) != 0) {
    perror("bench_advisor: the history's record file");
    return 1;
  }
  lib libs[2]; /* [0] baseline, [1] this build */
  int bad = lib_open(&libs[0], baseline, record) || lib_open(&libs[1], path, record);
  unlink(record);
  if (bad)
    return 1;
  const int rounds = quick ? 3 : 11;
  printf("\n## side by side: %d rounds, turns taken; median of the replaying thread's CPU time\n\n"
         "baseline: %s\nthis:     %s\n\n"
         "| configuration | events | baseline M events/s | this M events/s | this / baseline | "
         "same figures |\n|---|---:|---:|---:|---:|---|\n",
         rounds, baseline, path);
  for (size_t i = 0; i < NCONFIGS; i++) {
    if (!configs[i].baseline)
      continue;
    double cpu[2][32];
    gpupool_replay_result r[2];
    for (int k = 0; k < rounds; k++)
      for (int j = 0; j < 2; j++) {
        if (libs[j].replay(libs[j].h, configs[i].conf, (uint64_t)80 << 30, &r[j]) != GPUPOOL_OK) {
          fprintf(stderr, "bench_advisor: %s: %s\n", libs[j].path, libs[j].last_error());
          return 1;
        }
        cpu[j][k] = r[j].cpu_seconds;
      }
    double ev = (double)r[1].events, base = ev / bench_median(cpu[0], rounds) / 1e6,
           cur = ev / bench_median(cpu[1], rounds) / 1e6;
    int same = same_result(&r[0], &r[1]);
    bad |= !same;
    printf("| %s | %llu | %.1f | %.1f | %.2f | %s |\n", config_name(configs[i].conf),
           (unsigned long long)r[1].events, base, cur, cur / base, same ? "yes" : "NO");
  }
  printf(
      "\n| search (default grid + capacity bisection), 1 worker | baseline wall (s) | "
      "this wall (s) | this / baseline (time) | same recommendation |\n|---|---:|---:|---:|---|\n");
  double wall[2][32];
  size_t rec[2] = {0, 0};
  uint64_t minc[2] = {0, 0};
  for (int k = 0; k < rounds; k++)
    for (int j = 0; j < 2; j++) {
      gpupool_advice_options o = {.threads = 1, .max_added_ms = -1};
      gpupool_advice *a;
      if (libs[j].advise(libs[j].h, &o, &a) != GPUPOOL_OK) {
        fprintf(stderr, "bench_advisor: %s: %s\n", libs[j].path, libs[j].last_error());
        return 1;
      }
      wall[j][k] = a->wall_s;
      rec[j] = a->recommended;
      minc[j] = a->min_capacity_recommended;
      libs[j].advice_free(a);
    }
  double wb = bench_median(wall[0], rounds), wc = bench_median(wall[1], rounds);
  int same = rec[0] == rec[1] && minc[0] == minc[1];
  bad |= !same;
  printf("| 300 steps, %llu events | %.3f | %.3f | %.2f | %s |\n",
         (unsigned long long)h300->info.events, wb, wc, wc / wb, same ? "yes" : "NO");
  for (int j = 0; j < 2; j++)
    libs[j].history_free(libs[j].h);
  return bad;
}

int main(int argc, char **argv) {
  int quick = 0;
  size_t big = 10000000;
  unsigned threads = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
  const char *path = BENCH_ADVISOR_LIB, *baseline = NULL, *traces[16];
  int ntraces = 0, rounds = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1, big = 1000000;
    else if (!strcmp(argv[i], "--big-events") && i + 1 < argc)
      big = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lib") && i + 1 < argc)
      path = argv[++i];
    else if (!strcmp(argv[i], "--baseline") && i + 1 < argc)
      baseline = argv[++i];
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--trace") && i + 1 < argc && ntraces < 16)
      traces[ntraces++] = argv[++i];
    else {
      fprintf(stderr, "usage: bench_advisor [--quick] [--big-events N] [--threads N] [--lib PATH] "
                      "[--baseline PATH] [--trace PATH]... (at most 16) [--rounds N]\n");
      return 2;
    }
  }
  if (threads < 1)
    threads = 1;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  printf("bench_advisor: host %s, %ld online cores\n", host, sysconf(_SC_NPROCESSORS_ONLN));
  if (rounds < 1)
    rounds = quick ? 3 : 7;
  if (ntraces) {
    expandable_header(rounds);
    for (int i = 0; i < ntraces; i++) {
      gpupool_history *h;
      if (gpupool_history_load(traces[i], NULL, NULL, &h) != GPUPOOL_OK) {
        fprintf(stderr, "bench_advisor: %s\n", gpupool_last_error());
        return 1;
      }
      const char *base = strrchr(traces[i], '/');
      expandable_speed(base ? base + 1 : traces[i], h, rounds);
      gpupool_history_free(h);
    }
    return 0;
  }
  gpupool_history *h300 = make_history(300, 0);
  printf("history: 300 steps, %llu events, peak requested %.1f MiB\n",
         (unsigned long long)h300->info.events, (double)h300->info.peak_requested / (1 << 20));
  per_config(h300, quick);
  expandable_header(rounds);
  expandable_speed("300 steps", h300, rounds);
  printf("\n| search (default grid + capacity bisection) | events | configurations | workers | "
         "wall (s) | CPU (s), all workers | M events/s per CPU-second in replays |\n"
         "|---|---:|---:|---:|---:|---:|---:|\n");
  search("300 steps", h300, 1);
  if (threads > 1)
    search("300 steps", h300, threads);
  gpupool_history *hb = make_history(0, big);
  search("big", hb, threads);
  gpupool_history_free(hb);
  int failed = baseline ? side_by_side(h300, path, baseline, quick) : 0;
  gpupool_history_free(h300);
  return failed;
}
