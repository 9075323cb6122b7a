/* /advice (advice.h). */
#include "advice.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_label.h"
#include "advisor/live.h"
#include "core/array_grow.h"
#include "core/assert.h"
#include "core/clock.h"
#include "core/json_text.h"
#include "pool/pool_view.h"
#include "pool/registry.h"
#include "pool/segment.h"
#include "core/c_numeric.h"

#define DEFAULT_MAX_AGE_S   60.0
#define DEADLINE_S          5.0 /* the whole request: all pools */
#define DEFAULT_CAPACITY_GB 80.0
#define MAX_RINGS           1024

typedef struct taken_pool {
  char name[128]; /* the pool's label (pool_label.h) */
  uint32_t id;    /* pool_id: the gauges follow the pool, whatever its label later */
  int device;
  char conf[256];
  uint64_t device_bytes; /* the pool's device (or its memory_fraction cap), 0: not asked */
  event_ring **rings;
  event_ring_end *ends; /* taken with the rings, under the pool's locks */
  size_t nrings;
} taken_pool;

typedef struct cached_pool {
  char name[128];
  uint32_t id;
  int device;
  gpupool_advice *advice; /* NULL: failed, error says why */
  char error[256];
} cached_pool;
_Static_assert(sizeof((taken_pool *)0)->name == sizeof((cached_pool *)0)->name,
               "pool names are copied whole between these");

/* One computation's answer: every pool's, or one pool's (pool: n entries,
 * malloc'd; NULL when n is 0). */
typedef struct advice_result {
  cached_pool *pool;
  size_t n;
  double computed_at, compute_s, capacity_gib;
} advice_result;

static pthread_mutex_t g_compute = PTHREAD_MUTEX_INITIALIZER; /* one computation at a time */
static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
/* Every pool's answer, shared by all unfiltered requests and the metrics; a
 * request for one pool computes its own and leaves this alone. */
static advice_result g_cache;
/* Each computation's result as it is made, under g_compute (too large for
 * an HTTP thread's stack). */
static advice_result g_fresh;
static uint64_t g_runs;
static int g_valid;

static double now_s(void) {
  return (double)clock_realtime_ns() / 1e9;
}

typedef struct take_ctx {
  taken_pool *t; /* cap entries, n of them taken */
  size_t n, cap;
  const char *only; /* a pool label (pool_label.h) or NULL */
  int device;       /* a device ordinal, -1: every device */
  pool_labeler labeler;
  size_t named; /* pools of that label, with events or not */
} take_ctx;

/* Under the registry lock: copies only (names, the conf line, ring refs). */
static void take_pool(gpupool *p, void *arg) {
  take_ctx *c = arg;
  char label[POOL_LABEL_MAX];
  int labelled = pool_labeler_next(&c->labeler, p, label) == 0;
  /* after its label: the labeler numbers the pools of a name on each device */
  if (!pool_label_selects(c->only, c->device, labelled ? label : NULL, gpupool_device(p)))
    return;
  c->named++;
  if (!labelled)
    return; /* out of host memory: left out, as a pool whose rings cannot be held */
  if (array_grow((void **)&c->t, &c->cap, c->n + 1, sizeof *c->t, 16) != 0)
    return; /* out of host memory: left out, as below */
  taken_pool *t = &c->t[c->n];
  t->rings = malloc(MAX_RINGS * sizeof *t->rings);
  t->ends = malloc(MAX_RINGS * sizeof *t->ends);
  t->nrings = t->rings && t->ends ? pool_event_rings_at(p, t->rings, t->ends, MAX_RINGS) : 0;
  if (!t->nrings) {
    free(t->rings);
    free(t->ends);
    return;
  }
  snprintf(t->name, sizeof t->name, "%s", label); /* as /metrics: the gauges' pool label */
  t->id = pool_id(p);
  t->device = gpupool_device(p);
  t->device_bytes = segment_device_total_known(p);
  size_t limit = segment_reserved_limit_known(p); /* memory_fraction: what the pool may use */
  if (limit < t->device_bytes)
    t->device_bytes = limit;
  advisor_conf_of_pool(p, t->conf, sizeof t->conf);
  c->n++;
}

static void result_clear(advice_result *r) {
  for (size_t i = 0; i < r->n; i++)
    gpupool_advice_free(r->pool[i].advice);
  free(r->pool);
  r->pool = NULL;
  r->n = 0;
}

/* The advice of the pools of label only (NULL: every pool) on device
 * (-1: every device) into r; returns how many live pools are such (0: none,
 * whatever their events). Replays
 * simulate a device of capacity_gib, or with 0 each pool's own device (80 GiB
 * where the pool has not asked its size yet). */
static size_t compute(advice_result *r, double capacity_gib, const char *only, int device) {
  gp_assert_internal(r->n == 0 && !r->pool);
  take_ctx c = {.only = only, .device = device};
  registry_foreach(take_pool, &c);
  pool_labeler_free(&c.labeler);
  taken_pool *taken = c.t;
  double t0 = now_s();
  cached_pool *fresh = c.n ? calloc(c.n, sizeof *fresh) : NULL;
  if (c.n && !fresh) { /* nothing can hold the answers: every pool left out */
    for (size_t i = 0; i < c.n; i++) {
      for (size_t k = 0; k < taken[i].nrings; k++)
        event_ring_unref(taken[i].rings[k]);
      free(taken[i].rings);
      free(taken[i].ends);
    }
    c.n = 0;
  }
  for (size_t i = 0; i < c.n; i++) {
    cached_pool *f = &fresh[i];
    memset(f, 0, sizeof *f);
    memcpy(f->name, taken[i].name, sizeof f->name); /* same size, NUL-terminated */
    f->id = taken[i].id;
    f->device = taken[i].device;
    gpupool_history *h;
    gpupool_status st =
        history_from_rings(taken[i].rings, taken[i].ends, taken[i].nrings, taken[i].name, &h);
    free(taken[i].rings);
    free(taken[i].ends);
    if (st == GPUPOOL_OK) {
      double left = DEADLINE_S - (now_s() - t0);
      uint64_t own = taken[i].device_bytes ? taken[i].device_bytes
                                           : (uint64_t)(DEFAULT_CAPACITY_GB * (1 << 30));
      gpupool_advice_options o = {.capacity =
                                      capacity_gib > 0 ? (uint64_t)(capacity_gib * (1 << 30)) : own,
                                  .current = taken[i].conf,
                                  .threads = 1, /* leave the job's cores alone */
                                  .max_added_ms = NAN,
                                  .deadline_s = left > 0.05 ? left : 0.05};
      st = gpupool_advise(h, &o, &f->advice);
      gpupool_history_free(h);
    }
    if (st != GPUPOOL_OK)
      snprintf(f->error, sizeof f->error, "%s", gpupool_last_error());
  }
  free(taken);
  r->pool = fresh;
  r->n = c.n;
  r->computed_at = now_s();
  r->compute_s = r->computed_at - t0;
  r->capacity_gib = capacity_gib;
  return c.named;
}

/* Every pool's advice into the shared cache. Under g_compute. */
static void compute_shared(void) {
  compute(&g_fresh, 0, NULL, -1);
  pthread_mutex_lock(&g_cache_lock);
  result_clear(&g_cache);
  g_cache = g_fresh;
  g_fresh.pool = NULL; /* the advice moved to g_cache */
  g_fresh.n = 0;
  g_runs++;
  g_valid = 1;
  pthread_mutex_unlock(&g_cache_lock);
}

/* Whether s is a plain decimal: digits, optionally '.' and more digits. No
 * sign, space, exponent, hex float, inf or nan, all of which strtod takes
 * ("0x10" as 16, " 1" as 1); /trace reads its numbers as strictly. */
static int plain_decimal(const char *s) {
  const char *p = s;
  while (*p >= '0' && *p <= '9')
    p++;
  if (p == s)
    return 0;
  if (*p == '.') {
    const char *fraction = ++p;
    while (*p >= '0' && *p <= '9')
      p++;
    if (p == fraction)
      return 0;
  }
  return *p == '\0';
}

static int number_arg(const endpoint_args *args, const char *key, double lo, double hi, double def,
                      double *out, endpoint_body *body) {
  const char *v = args->get(args->ctx, key);
  *out = def;
  if (!v)
    return 0;
  double d = plain_decimal(v) ? c_strtod(v, NULL) : NAN;
  if (!(d >= lo && d <= hi)) {
    char shown[80];
    endpoint_printable(shown, sizeof shown, v);
    endpoint_bad_request(body, "/advice: %s '%s' is not a number from %.15g to %.15g", key, shown,
                         lo, hi);
    return -1;
  }
  *out = d;
  return 0;
}

/* r's document; the caller keeps r from changing meanwhile. */
static char *render(const advice_result *r, int json) {
  double age = now_s() - r->computed_at;
  if (json) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "computed_at", r->computed_at);
    cJSON_AddNumberToObject(root, "age_s", age);
    cJSON_AddNumberToObject(root, "compute_s", r->compute_s);
    cJSON_AddNumberToObject(root, "deadline_s", DEADLINE_S);
    if (r->capacity_gib > 0)
      cJSON_AddNumberToObject(root, "capacity_gib", r->capacity_gib);
    else /* each pool's own: its capacity_bytes */
      cJSON_AddNullToObject(root, "capacity_gib");
    cJSON *pools = cJSON_AddArrayToObject(root, "pools");
    for (size_t i = 0; i < r->n; i++) {
      const cached_pool *c = &r->pool[i];
      char *s = c->advice ? gpupool_advice_render(c->advice, "json") : NULL;
      cJSON *o = s ? cJSON_Parse(s) : cJSON_CreateObject();
      free(s);
      if (!o)
        continue;
      json_add_text(o, "pool", c->name);
      cJSON_AddNumberToObject(o, "device", c->device);
      if (!c->advice)
        json_add_text(o, "error", c->error);
      cJSON_AddItemToArray(pools, o);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s)
      return NULL;
    char *out = malloc(strlen(s) + 2);
    if (out)
      sprintf(out, "%s\n", s);
    cJSON_free(s);
    return out;
  }
  size_t cap = 4096, n = 0;
  char *out = malloc(cap);
  for (size_t i = 0; out && i <= r->n; i++) {
    char *s = NULL, head[512];
    if (i == r->n) {
      snprintf(head, sizeof head, "%s", r->n ? "" : "no pool has recorded events yet\n");
    } else {
      const cached_pool *c = &r->pool[i];
      /* the precisions: each field's own size (GCC 13 cannot see it through r->pool[i]) */
      locale_t old = c_numeric_enter();
      snprintf(head, sizeof head,
               "== pool %.127s (device %d), computed %.1f s ago in %.3f s%s%.255s\n", c->name,
               c->device, age, r->compute_s, c->advice ? "" : ": ", c->error);
      c_numeric_leave(old);
      s = c->advice ? gpupool_advice_render(c->advice, "table") : NULL;
    }
    size_t need = n + strlen(head) + (s ? strlen(s) : 0) + 2;
    if (need > cap) {
      char *q = realloc(out, cap = need * 2);
      if (!q) {
        free(out);
        out = NULL;
        free(s);
        break;
      }
      out = q;
    }
    n += (size_t)sprintf(out + n, "%s%s%s", head, s ? s : "", s ? "\n" : "");
    free(s);
  }
  return out;
}

void advice_endpoint(const endpoint_args *args, endpoint_body *out) {
  static const char *const known[] = {"format", "max_age", "capacity_gib", "pool", "device", NULL};
  endpoint_params p;
  endpoint_count_params(args, known, &p);
  char shown[80];
  if (p.unknown || p.repeated) {
    endpoint_printable(shown, sizeof shown, p.unknown ? p.unknown : p.repeated);
    endpoint_bad_request(out,
                         p.unknown ? "/advice: unknown parameter '%s' (format, max_age, "
                                     "capacity_gib, pool, device)"
                                   : "/advice: parameter '%s' given more than once",
                         shown);
    return;
  }
  const char *format = args->get(args->ctx, "format");
  if (format && strcmp(format, "json") && strcmp(format, "table")) {
    endpoint_printable(shown, sizeof shown, format);
    endpoint_bad_request(out, "/advice: format '%s' is not json or table", shown);
    return;
  }
  double max_age, cap;
  if (number_arg(args, "max_age", 0, 1e9, DEFAULT_MAX_AGE_S, &max_age, out) ||
      number_arg(args, "capacity_gib", 0.01, 1 << 20, 0 /* each pool's device */, &cap, out))
    return;
  const char *only;
  int device;
  if (endpoint_pool_selection(args, "/advice: ", &only, &device, out) != 0)
    return;
  int json = !format || !strcmp(format, "json");
  char *body = NULL;
  int valid;
  /* One computation at a time; a request that finds one running serves the
   * cache instead of holding a second HTTP thread, or, before the first
   * result, waits for that computation (bounded by its deadline) and serves
   * its answer: a page loaded again while the first one runs gets it, not a
   * 503. A request for one pool or device, or for another device size (a
   * what-if), computes its own answer (the cache, every pool's on its own
   * device, which /ui and the gauges show, stays as it is) and waits for no
   * one: 503 while another computation runs. */
  if (only || device >= 0 || cap > 0) {
    if (pthread_mutex_trylock(&g_compute) != 0) {
      endpoint_text(out, 503, "/advice is being computed by another request: retry\n");
      return;
    }
    int selected = only || device >= 0;
    size_t named = compute(&g_fresh, cap, only, device);
    body = named || !selected ? render(&g_fresh, json) : NULL;
    result_clear(&g_fresh);
    pthread_mutex_unlock(&g_compute);
    if (selected && !named) {
      endpoint_pool_unmatched(out, "/advice: ", only, device);
      return;
    }
    valid = 1;
  } else {
    pthread_mutex_lock(&g_cache_lock);
    int have = g_valid;
    pthread_mutex_unlock(&g_cache_lock);
    if ((have ? pthread_mutex_trylock(&g_compute) : pthread_mutex_lock(&g_compute)) == 0) {
      pthread_mutex_lock(&g_cache_lock);
      int stale = !g_valid || now_s() - g_cache.computed_at > max_age;
      pthread_mutex_unlock(&g_cache_lock);
      if (stale)
        compute_shared();
      pthread_mutex_unlock(&g_compute);
    }
    pthread_mutex_lock(&g_cache_lock);
    body = g_valid ? render(&g_cache, json) : NULL;
    valid = g_valid;
    pthread_mutex_unlock(&g_cache_lock);
  }
  if (!body) {
    if (valid)
      endpoint_out_of_memory(out, "rendering /advice");
    else
      endpoint_text(out, 503, "/advice is being computed by another request: retry\n");
    return;
  }
  out->status = 200;
  out->content_type = json ? "application/json" : "text/plain; charset=utf-8";
  out->data = body;
  out->len = strlen(body);
}

void advice_summary_get(advice_summary *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&g_cache_lock);
  out->valid = g_valid;
  out->computed_at_s = g_cache.computed_at;
  out->compute_s = g_cache.compute_s;
  out->runs = g_runs;
  /* without host memory for the pools' part, the gauges of the computation alone */
  out->pool = g_cache.n ? malloc(g_cache.n * sizeof *out->pool) : NULL;
  for (size_t i = 0; out->pool && i < g_cache.n; i++) {
    const gpupool_advice *a = g_cache.pool[i].advice;
    if (!a)
      continue;
    advice_pool_summary *s = &out->pool[out->npools++];
    s->pool_id = g_cache.pool[i].id;
    s->events = a->input.events;
    s->current_peak_reserved = a->c[a->current].r.peak_reserved;
    s->recommended_peak_reserved = a->c[a->recommended].r.peak_reserved;
    s->min_capacity_current = a->min_capacity_current == UINT64_MAX ? 0 : a->min_capacity_current;
    s->min_capacity_recommended =
        a->min_capacity_recommended == UINT64_MAX ? 0 : a->min_capacity_recommended;
  }
  pthread_mutex_unlock(&g_cache_lock);
}

void advice_summary_free(advice_summary *s) {
  free(s->pool);
  s->pool = NULL;
  s->npools = 0;
}

void advice_reset(void) {
  pthread_mutex_lock(&g_compute);
  pthread_mutex_lock(&g_cache_lock);
  result_clear(&g_cache);
  g_valid = 0;
  pthread_mutex_unlock(&g_cache_lock);
  pthread_mutex_unlock(&g_compute);
}
