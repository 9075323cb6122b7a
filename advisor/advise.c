/* The search (gpupool_advise): replays the history under every candidate
 * configuration on worker threads, prices the device calls, recommends, and
 * bisects the smallest device capacity that runs the history without an OOM
 * under the current and the recommended configuration. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/kvconf.h"
#include "pool/conf.h"
#include "replay.h"

#define GiB              ((uint64_t)1 << 30)
#define DEFAULT_CAPACITY (80 * GiB)
#define DEFAULT_STEP     ((uint64_t)2 << 20)
#define DEFAULT_BOUND_MS 100.0
#define MAX_CANDIDATES   512
#define MAX_THREADS      64
/* 1000 s a call (10^9 us): any count of calls prices to a finite time */
#define MAX_PRICE_US 1e9

/* docs/advisor.md: the price table and where each number comes from. */
static const gpupool_advice_prices default_prices = {.malloc_us = 33.6,
                                                     .free_us = 33.6,
                                                     .page_map_us = 40.0,
                                                     .page_unmap_us = 25.0,
                                                     .page_move_us = 55.0,
                                                     .sync_us = 10.0};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* kvconf_parse's callback: 0 for the keys PyTorch's PYTORCH_CUDA_ALLOC_CONF
 * also has, with the same meaning, and for strategy (bfc is PyTorch's; the
 * others are refused below); -1 for a key that PyTorch lacks. */
static int torch_key(void *ctx, const char *key, const char *value, char *err, size_t errlen) {
  static const char *const keys[] = {"max_split_size_mb",        "max_non_split_rounding_mb",
                                     "roundup_power2_divisions", "garbage_collection_threshold",
                                     "expandable_segments",      "strategy"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
    if (!strcmp(key, keys[i]))
      return 0;
  return -1;
}

/* The PYTORCH_CUDA_ALLOC_CONF line of c->conf: the settings, as the pool reads
 * them, that differ from the defaults both allocators share, in the spelling
 * PyTorch's parser takes (True, not true; no inf, and no 0 divisions, which
 * are its defaults). has_torch = 0 when a setting has no PyTorch equivalent:
 * a gpupool-only key (strategy round or naive, slack, reserve), or
 * max_non_split_rounding_mb below PyTorch's minimum of 20 where it matters
 * (with a max_split_size_mb; without one neither allocator uses it). */
static void torch_line(gpupool_advice_candidate *c) {
  char why[256], num[64];
  gpupool_options o = {.backend = GPUPOOL_BACKEND_SIM, .tunables = c->conf, .ignore_env = 1};
  pool_config cfg;
  c->has_torch = 0;
  c->torch_conf[0] = 0;
  if (kvconf_parse(c->conf, torch_key, NULL, why, sizeof why) ||
      pool_config_build(&o, &cfg) != GPUPOOL_OK || cfg.strategy != GPUPOOL_STRATEGY_BFC)
    return; /* a bad configuration has no line either: its replay fails */
  int split = cfg.max_split_size != SIZE_MAX;
  if (split && cfg.max_non_split_rounding < 20 * MiB)
    return;
  size_t n = 0, len = sizeof c->torch_conf;
  char *out = c->torch_conf;
#define ADD(...) n += (size_t)snprintf(out + n, n < len ? len - n : 0, __VA_ARGS__)
  if (split)
    ADD(",max_split_size_mb:%zu", cfg.max_split_size / MiB);
  if (split && cfg.max_non_split_rounding > 20 * MiB)
    ADD(",max_non_split_rounding_mb:%zu", cfg.max_non_split_rounding / MiB);
  if (cfg.roundup_power2_divisions > 1)
    ADD(",roundup_power2_divisions:%u", cfg.roundup_power2_divisions);
  if (cfg.gc_threshold > 0) {
    if (kvconf_format_double(cfg.gc_threshold, num, sizeof num))
      n = len;
    ADD(",garbage_collection_threshold:%s", num);
  }
  if (cfg.expandable)
    ADD(",expandable_segments:True");
#undef ADD
  if (n >= len) { /* not with 256 bytes: the five settings at their longest take 211 */
    out[0] = 0;
    return;
  }
  if (out[0] == ',')
    memmove(out, out + 1, n);
  c->has_torch = 1;
}

static int add_candidate(gpupool_advice *a, const char *conf) {
  for (size_t i = 0; i < a->n; i++)
    if (!strcmp(a->c[i].conf, conf))
      return (int)i;
  if (a->n == MAX_CANDIDATES || strlen(conf) >= sizeof a->c[0].conf)
    return -1;
  gpupool_advice_candidate *c = &a->c[a->n];
  memset(c, 0, sizeof *c);
  snprintf(c->conf, sizeof c->conf, "%s", conf);
  torch_line(c);
  return (int)a->n++;
}

/* The default grid: 54 configurations (48 of bfc, 2 more expandable, 3 round, naive). */
static void default_candidates(gpupool_advice *a) {
  static const unsigned split_mb[] = {0, 128, 512};
  static const unsigned rp2[] = {0, 2, 4, 8};
  static const char *const gc[] = {NULL, "0.7"};
  char s[256];
  for (int x = 0; x < 2; x++)
    for (size_t i = 0; i < sizeof split_mb / sizeof *split_mb; i++)
      for (size_t j = 0; j < sizeof rp2 / sizeof *rp2; j++)
        for (size_t k = 0; k < sizeof gc / sizeof *gc; k++) {
          int n = 0; /* bfc is the default strategy: "" is plain bfc */
          s[0] = 0;
          if (split_mb[i])
            n += snprintf(s + n, sizeof s - (size_t)n, ",max_split_size_mb:%u", split_mb[i]);
          if (rp2[j])
            n += snprintf(s + n, sizeof s - (size_t)n, ",roundup_power2_divisions:%u", rp2[j]);
          if (gc[k])
            n += snprintf(s + n, sizeof s - (size_t)n, ",garbage_collection_threshold:%s", gc[k]);
          if (x)
            snprintf(s + n, sizeof s - (size_t)n, ",expandable_segments:True");
          add_candidate(a, s[0] ? s + 1 : s);
        }
  add_candidate(a, "expandable_segments:True,expandable_slack_percent:0");
  add_candidate(a,
                "roundup_power2_divisions:4,expandable_segments:True,expandable_slack_percent:0");
  for (unsigned cut = 20; cut <= 28; cut += 4) {
    snprintf(s, sizeof s, "strategy:round,round_linear_cutoff:%u", cut);
    add_candidate(a, s);
  }
  add_candidate(a, "strategy:naive");
}

static double price(const gpupool_advice_prices *p, const gpupool_replay_result *r) {
  double us =
      r->expandable
          ? (double)r->device_allocs * p->page_map_us + (double)r->device_frees * p->page_unmap_us
          : (double)r->device_allocs * p->malloc_us + (double)r->device_frees * p->free_us;
  us += (double)r->pages_moved * p->page_move_us + (double)r->device_syncs * p->sync_us;
  return us / 1000.0;
}

typedef struct job {
  const gpupool_history *h;
  gpupool_advice *a;
  _Atomic size_t next;
  double deadline; /* absolute; 0 none */
  _Atomic int failed;
  char err[320];
  pthread_mutex_t lock;
  /* capacity phase */
  size_t cap_idx[2];
  uint64_t *cap_out[2];
} job;

static int past_deadline(const job *j) {
  return j->deadline > 0 && now_s() > j->deadline;
}

static void note_failure(job *j) {
  pthread_mutex_lock(&j->lock);
  if (!atomic_exchange(&j->failed, 1))
    snprintf(j->err, sizeof j->err, "%s", gpupool_last_error());
  pthread_mutex_unlock(&j->lock);
}

static void *replay_worker(void *arg) {
  job *j = arg;
  for (;;) {
    size_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->a->n || atomic_load(&j->failed))
      return NULL;
    if (past_deadline(j)) {
      j->a->truncated = 1;
      return NULL;
    }
    gpupool_advice_candidate *c = &j->a->c[i];
    if (replay_run(j->h, c->conf, j->a->capacity, 0, &c->r) != GPUPOOL_OK) {
      note_failure(j);
      return NULL;
    }
    c->device_ms = price(&j->a->prices, &c->r);
    c->done = 1;
  }
}

/* 1: the history runs without an OOM at k steps; 0: it does not; -1: error. */
static int fits(job *j, const char *conf, uint64_t k) {
  if (k == 0)
    return 0;
  gpupool_replay_result r;
  if (replay_run(j->h, conf, k * j->a->capacity_step, 1, &r) != GPUPOOL_OK)
    return -1;
  return r.ooms == 0;
}

/* Smallest k with fits (bisection between an OOM and a fit). */
static uint64_t min_capacity(job *j, size_t idx) {
  const gpupool_advice_candidate *c = &j->a->c[idx];
  uint64_t step = j->a->capacity_step, kmax = j->a->capacity / step;
  uint64_t lo = j->h->info.peak_requested ? (j->h->info.peak_requested - 1) / step : 0;
  uint64_t hi = (c->r.peak_reserved + step - 1) / step;
  if (hi <= lo)
    hi = lo + 1;
  if (hi > kmax) /* more is requested at once than the device holds: nothing fits */
    return UINT64_MAX;
  int f;
  while ((f = fits(j, c->conf, hi)) == 0) { /* GC thresholds scale with capacity */
    if (hi >= kmax)
      return UINT64_MAX;
    lo = hi;
    hi = hi * 2 > kmax ? kmax : hi * 2;
  }
  if (f < 0)
    return 0;
  while (hi - lo > 1) {
    if (past_deadline(j)) {
      j->a->truncated = 1;
      return 0;
    }
    uint64_t mid = lo + (hi - lo) / 2;
    if ((f = fits(j, c->conf, mid)) < 0)
      return 0;
    if (f)
      hi = mid;
    else
      lo = mid;
  }
  return hi * step;
}

typedef struct cap_arg {
  job *j;
  int which;
} cap_arg;

static void *capacity_worker(void *arg) {
  cap_arg *ca = arg;
  *ca->j->cap_out[ca->which] = min_capacity(ca->j, ca->j->cap_idx[ca->which]);
  return NULL;
}

static void recommend(gpupool_advice *a) {
  const gpupool_advice_candidate *cur = &a->c[a->current];
  size_t best = a->current;
  for (size_t i = 0; i < a->n; i++) {
    gpupool_advice_candidate *c = &a->c[i];
    if (!c->done)
      continue;
    /* to the nanosecond: the sums of prices differ by a rounding error
     * (2505 us of calls as 2.5050000000000026 ms), which must not put a
     * candidate that adds exactly max_added_ms over it */
    c->added_ms = cur->done ? round((c->device_ms - cur->device_ms) * 1e6) / 1e6 : 0;
    if (c->r.ooms || c->added_ms > a->max_added_ms)
      continue;
    const gpupool_advice_candidate *b = &a->c[best];
    if (!b->done || b->r.ooms || b->added_ms > a->max_added_ms ||
        c->r.peak_reserved < b->r.peak_reserved ||
        (c->r.peak_reserved == b->r.peak_reserved && c->device_ms < b->device_ms))
      best = i;
  }
  a->recommended = best;
}

/* The prices of in, the defaults where in has 0; GPUPOOL_ERR_INVALID when
 * one is out of range (negative, NaN, infinite or above MAX_PRICE_US). */
static gpupool_status fill_prices(gpupool_advice_prices *p, const gpupool_advice_prices *in) {
  static const char *const names[] = {"malloc_us",     "free_us",      "page_map_us",
                                      "page_unmap_us", "page_move_us", "sync_us"};
  const double given[] = {in->malloc_us,     in->free_us,      in->page_map_us,
                          in->page_unmap_us, in->page_move_us, in->sync_us};
  *p = default_prices;
  double *out[] = {&p->malloc_us,     &p->free_us,      &p->page_map_us,
                   &p->page_unmap_us, &p->page_move_us, &p->sync_us};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    if (!(given[i] >= 0 && given[i] <= MAX_PRICE_US))
      return pool_fail(GPUPOOL_ERR_INVALID,
                       "gpupool_advise: prices.%s %g is out of range (0: the default; up to "
                       "10^9 us)",
                       names[i], given[i]);
    if (given[i] > 0)
      *out[i] = given[i];
  }
  return GPUPOOL_OK;
}

/* The ranges of include/gpupool/advisor.h for the capacity, the step, the
 * bound and the deadline: GPUPOOL_ERR_INVALID, with the reason, outside. */
static gpupool_status check_options(const gpupool_advice_options *o, uint64_t cap, uint64_t step) {
  unsigned long long c = cap, s = step;
  if (step % ((uint64_t)1 << 20))
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "gpupool_advise: capacity_step %llu bytes is not a whole number of MiB", s);
  if (cap > REPLAY_MAX_CAPACITY)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "gpupool_advise: capacity %llu bytes is above 1 PiB (2^50 bytes)", c);
  if (cap < step)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_advise: capacity %llu below the step %llu", c,
                     s);
  if (isinf(o->max_added_ms) && o->max_added_ms > 0)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_advise: max_added_ms inf is not a time in ms "
                                          "(NaN or below 0: the default)");
  if (!(o->deadline_s >= 0))
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "gpupool_advise: deadline_s %g is not a time in seconds (0: none)",
                     o->deadline_s);
  return GPUPOOL_OK;
}

gpupool_status gpupool_advise(const gpupool_history *h, const gpupool_advice_options *opt,
                              gpupool_advice **out) {
  static const gpupool_advice_options none = {.max_added_ms = NAN}; /* every default */
  char err[320];
  if (!h || !out)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_advise: %s is NULL", h ? "out" : "history");
  *out = NULL;
  if (!opt)
    opt = &none;
  if (opt->n_extra && !opt->extra)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_advise: extra is NULL, n_extra %zu",
                     opt->n_extra);
  const char *current = opt->current ? opt->current : "";
  if (replay_conf_check(current, err, sizeof err))
    return pool_fail(GPUPOOL_ERR_INVALID, "current %s", err);
  for (size_t i = 0; i < opt->n_extra; i++)
    if (!opt->extra[i] || replay_conf_check(opt->extra[i], err, sizeof err))
      return pool_fail(GPUPOOL_ERR_INVALID, "%s", opt->extra[i] ? err : "a NULL configuration");
  uint64_t cap = opt->capacity ? opt->capacity : DEFAULT_CAPACITY;
  uint64_t step = opt->capacity_step ? opt->capacity_step : DEFAULT_STEP;
  gpupool_advice_prices prices;
  gpupool_status bad = check_options(opt, cap, step);
  if (bad == GPUPOOL_OK)
    bad = fill_prices(&prices, &opt->prices);
  if (bad != GPUPOOL_OK)
    return bad;
  gpupool_advice *a = calloc(1, sizeof *a);
  if (a)
    a->c = calloc(MAX_CANDIDATES, sizeof *a->c);
  if (!a || !a->c) {
    gpupool_advice_free(a);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_advise: out of host memory");
  }
  double t0 = now_s();
  a->input = h->info;
  a->capacity = cap - cap % step;
  a->capacity_step = step;
  if (opt->max_added_ms >= 0)
    a->max_added_ms = opt->max_added_ms;
  else /* below 0 or NaN */
    a->max_added_ms = fmax(DEFAULT_BOUND_MS, h->info.duration_s * 1000.0 * 0.01);
  a->prices = prices;
  int cur = add_candidate(a, current);
  if (cur < 0) { /* the first candidate: only its length can refuse it */
    gpupool_advice_free(a);
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "current configuration '%.60s...': too long (at most %zu bytes)", current,
                     sizeof a->c[0].conf - 1);
  }
  a->current = (size_t)cur;
  for (size_t i = 0; i < opt->n_extra; i++)
    if (add_candidate(a, opt->extra[i]) < 0) {
      gpupool_advice_free(a);
      return pool_fail(GPUPOOL_ERR_INVALID, "configuration '%s': too long, or more than %d",
                       opt->extra[i], MAX_CANDIDATES);
    }
  if (!opt->no_defaults)
    default_candidates(a);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned threads = opt->threads ? opt->threads : ncpu > 0 ? (unsigned)ncpu : 1;
  if (threads > MAX_THREADS)
    threads = MAX_THREADS;
  if (threads > a->n)
    threads = (unsigned)a->n;
  a->threads = threads;
  job j = {.h = h, .a = a, .deadline = opt->deadline_s > 0 ? t0 + opt->deadline_s : 0};
  pthread_mutex_init(&j.lock, NULL);
  pthread_t tid[MAX_THREADS];
  unsigned started = 0;
  for (unsigned i = 1; i < threads; i++)
    if (pthread_create(&tid[started], NULL, replay_worker, &j) == 0)
      started++;
  replay_worker(&j);
  for (unsigned i = 0; i < started; i++)
    pthread_join(tid[i], NULL);
  if (!atomic_load(&j.failed) && !a->c[a->current].done) {
    a->truncated = 1;
  }
  if (!atomic_load(&j.failed)) {
    recommend(a);
    if (!opt->no_capacity && !past_deadline(&j)) {
      j.cap_idx[0] = a->current;
      j.cap_idx[1] = a->recommended;
      j.cap_out[0] = &a->min_capacity_current;
      j.cap_out[1] = &a->min_capacity_recommended;
      cap_arg ca[2] = {{&j, 0}, {&j, 1}};
      pthread_t ct;
      int two = a->recommended != a->current && threads > 1 &&
                pthread_create(&ct, NULL, capacity_worker, &ca[1]) == 0;
      capacity_worker(&ca[0]);
      if (two)
        pthread_join(ct, NULL);
      else if (a->recommended != a->current)
        capacity_worker(&ca[1]);
      else
        a->min_capacity_recommended = a->min_capacity_current;
    }
  }
  pthread_mutex_destroy(&j.lock);
  if (atomic_load(&j.failed)) {
    gpupool_advice_free(a);
    return pool_fail(GPUPOOL_ERR_INVALID, "%s", j.err);
  }
  a->wall_s = now_s() - t0;
  gpupool_advice_candidate *fit = realloc(a->c, a->n * sizeof *a->c); /* give back the rest */
  if (fit)
    a->c = fit;
  *out = a;
  return GPUPOOL_OK;
}

void gpupool_advice_free(gpupool_advice *a) {
  if (!a)
    return;
  free(a->c);
  free(a);
}
