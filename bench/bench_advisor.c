/* bench_advisor: how fast the advisor replays (events/s per configuration,
 * one thread) and how long its default search takes over a 300-step
 * training-like history and over 10^7 events, with one worker and with one
 * per core. The history is generated here, shaped like bench/make_trace.py's
 * transformer (parameters and optimizer state for the whole run; per step
 * activations sized by a varying sequence length, freed in reverse with
 * short-lived gradients; the next batch copied on a second stream).
 *
 *   bench_advisor [--quick] [--big-events N] [--threads N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "advisor/history.h"
#include "gpupool/advisor.h"

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

static void per_config(const gpupool_history *h, int quick) {
  static const char *const confs[] = {
      "",
      "roundup_power2_divisions:4",
      "max_split_size_mb:128",
      "garbage_collection_threshold:0.7",
      "expandable_segments:True",
      "expandable_segments:True,expandable_slack_percent:0",
      "strategy:round",
      "strategy:naive",
  };
  printf("\n| configuration | events | best of %d, wall (s) | CPU (s) | M events/s (CPU) |\n"
         "|---|---:|---:|---:|---:|\n",
         quick ? 1 : 5);
  for (size_t i = 0; i < sizeof confs / sizeof *confs; i++) {
    double best = 1e30, best_cpu = 1e30;
    gpupool_replay_result r;
    for (int k = 0; k < (quick ? 1 : 5); k++) {
      if (gpupool_replay(h, confs[i], (uint64_t)80 << 30, &r) != GPUPOOL_OK) {
        fprintf(stderr, "bench_advisor: %s\n", gpupool_last_error());
        exit(1);
      }
      if (r.seconds < best)
        best = r.seconds;
      if (r.cpu_seconds < best_cpu)
        best_cpu = r.cpu_seconds;
    }
    printf("| %s | %llu | %.4f | %.4f | %.1f |\n", *confs[i] ? confs[i] : "(defaults: bfc)",
           (unsigned long long)r.events, best, best_cpu, (double)r.events / best_cpu / 1e6);
  }
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

int main(int argc, char **argv) {
  int quick = 0;
  size_t big = 10000000;
  unsigned threads = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1, big = 1000000;
    else if (!strcmp(argv[i], "--big-events") && i + 1 < argc)
      big = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = (unsigned)atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_advisor [--quick] [--big-events N] [--threads N]\n");
      return 2;
    }
  }
  if (threads < 1)
    threads = 1;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  printf("bench_advisor: host %s, %ld online cores\n", host, sysconf(_SC_NPROCESSORS_ONLN));
  gpupool_history *h300 = make_history(300, 0);
  printf("history: 300 steps, %llu events, peak requested %.1f MiB\n",
         (unsigned long long)h300->info.events, (double)h300->info.peak_requested / (1 << 20));
  per_config(h300, quick);
  printf("\n| search (default grid + capacity bisection) | events | configurations | workers | "
         "wall (s) | CPU (s), all workers | M events/s per CPU-second in replays |\n"
         "|---|---:|---:|---:|---:|---:|---:|\n");
  search("300 steps", h300, 1);
  if (threads > 1)
    search("300 steps", h300, threads);
  gpupool_history_free(h300);
  gpupool_history *hb = make_history(0, big);
  search("big", hb, threads);
  gpupool_history_free(hb);
  return 0;
}
