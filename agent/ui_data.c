/* The data /ui polls (docs/ui.md): /ui/state.json?window=S, every pool's
 * numbers now and their history over the last S seconds (the sampler's
 * counter samples, thinned to at most UI_POINTS points per pool), CUPTI's
 * view per device and which optional endpoints exist; /ui/blocks.json?pool=ID,
 * one pool's segments and blocks in a compact form (six numbers per block,
 * and a tag index per block where a segment has tagged blocks) from one
 * consistent copy of the pool (pool/pool_capture.h), with the block that is
 * its largest free block, written directly rather than through cJSON because
 * a pool may have 10^5 blocks. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cupti.h"
#include "exporters/prom_buf.h"
#include "trace_counters.h"
#include "metrics.h"
#include "trace_query.h"
#include "gpupool/tag.h"
#include "http.h"
#include "pool_label.h"
#include "core/clock.h"
#include "core/kvconf.h"
#include "core/utf8.h"
#include "pool/pool_capture.h"
#include "pool/pool_view.h"
#include "pool/registry.h"
#include "pool/segment.h"
#include "ui.h"
#include "ui_history.h"

#define UI_POINTS         600  /* points per series at most */
#define UI_WINDOW_DEFAULT 300  /* s */
#define UI_WINDOW_MAX     3600 /* s */
#define UI_POOLS_MAX      TRACE_POOL_TABLE_SIZE

/* s as a JSON string. Each byte that begins no UTF-8 character is U+FFFD,
 * as in every JSON output (core/utf8.h; exporters/json_stream.h writes the
 * same escape), and '<', '>' and '&' are escaped too. */
static void json_str(prom_buf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  size_t n = strlen((const char *)p);
  prom_buf_putc(b, '"');
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    size_t len = utf8_char_len(p + i, n - i);
    if (len == 0) {
      prom_buf_puts(b, "\\ufffd");
    } else if (len > 1) {
      prom_buf_put(b, (const char *)p + i, len);
    } else if (c == '"' || c == '\\') {
      prom_buf_putc(b, '\\');
      prom_buf_putc(b, (char)c);
    } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
      char esc[8];
      snprintf(esc, sizeof esc, "\\u%04x", c);
      prom_buf_puts(b, esc);
    } else {
      prom_buf_putc(b, (char)c);
    }
    i += len ? len : 1;
  }
  prom_buf_putc(b, '"');
}

static void key(prom_buf *b, const char *k) {
  prom_buf_putc(b, '"');
  prom_buf_puts(b, k);
  prom_buf_puts(b, "\":");
}

static void kv_u64(prom_buf *b, const char *k, uint64_t v) {
  key(b, k);
  prom_buf_u64(b, v);
  prom_buf_putc(b, ',');
}

static void kv_hex(prom_buf *b, const char *k, uint64_t v) {
  char hex[24];
  snprintf(hex, sizeof hex, "0x%" PRIx64, v);
  key(b, k);
  json_str(b, hex);
  prom_buf_putc(b, ',');
}

/* Ends an object or array whose last member left a trailing comma. */
static void close_with(prom_buf *b, char c) {
  if (b->len && b->data[b->len - 1] == ',')
    b->len--;
  prom_buf_putc(b, c);
}

static void take_json(prom_buf *b, endpoint_body *out) {
  size_t len;
  char *data = prom_buf_take(b, &len);
  if (!data) {
    endpoint_out_of_memory(out, "building the answer");
    return;
  }
  out->status = 200;
  out->content_type = "application/json";
  out->data = data;
  out->len = len;
}

/* Refuses unknown and repeated parameters (only `allowed` is known). */
static int check_params(const endpoint_args *args, const char *allowed, endpoint_body *out) {
  enum { WINDOW, POOL };
  static const char *const names[] = {[WINDOW] = "window", [POOL] = "pool", NULL};
  endpoint_params p;
  endpoint_count_params(args, names, &p);
  const char *bad = p.unknown;
  if (!bad && strcmp(allowed, "window") == 0 && p.count[POOL])
    bad = "pool";
  if (!bad && strcmp(allowed, "pool") == 0 && p.count[WINDOW])
    bad = "window";
  if (bad) {
    char shown[64];
    endpoint_printable(shown, sizeof shown, bad);
    endpoint_bad_request(out, "unknown parameter '%s' (expected %s)", shown, allowed);
    return -1;
  }
  if (p.repeated) {
    endpoint_bad_request(out, "parameter '%s' given more than once", p.repeated);
    return -1;
  }
  return 0;
}

/* A decimal in [min, max] (leading zeros read, as every query number,
 * docs/metrics.md: kvconf_u64); -1 when it is not one. */
static long parse_range(const char *s, long min, long max) {
  uint64_t v;
  return kvconf_u64(s, (uint64_t)min, (uint64_t)max, &v) == 0 ? (long)v : -1;
}

/* ---- /ui/state.json ---- */

typedef struct pool_now {
  uint32_t id;
  int device;
  char name[TRACE_LABEL_MAX], label[POOL_LABEL_MAX], backend[16], strategy[16];
  gpupool_stats st;
  uint64_t limit; /* memory_fraction's cap in bytes; UINT64_MAX: none (known) */
  int live;
} pool_now;

typedef struct state_ctx {
  pool_now *pools;
  size_t n;
  pool_labeler labeler;
} state_ctx;

static void copy_name(char *dst, size_t size, const char *src) {
  snprintf(dst, size, "%s", src ? src : "");
}

static void note_live(gpupool *p, void *arg) {
  state_ctx *c = arg;
  if (c->n >= UI_POOLS_MAX)
    return;
  pool_now *pn = &c->pools[c->n];
  if (pool_labeler_next(&c->labeler, p, pn->label) != 0 ||
      gpupool_get_stats(p, &pn->st) != GPUPOOL_OK)
    return;
  pn->id = pool_id(p);
  pn->device = gpupool_device(p);
  copy_name(pn->name, sizeof pn->name, gpupool_name(p));
  copy_name(pn->backend, sizeof pn->backend, gpupool_backend_name(p));
  copy_name(pn->strategy, sizeof pn->strategy, gpupool_strategy_name(p));
  size_t limit = segment_reserved_limit_known(p);
  pn->limit = limit == SIZE_MAX ? UINT64_MAX : limit;
  pn->live = 1;
  c->n++;
}

/* The pool's last sample before the window and its first in it (NULL when
 * the samples read hold none). */
static void window_edge(const counter_sample *s, size_t ns, uint32_t id, uint64_t since,
                        const counter_sample **before, const counter_sample **first) {
  *before = *first = NULL;
  for (size_t i = 0; i < ns && !*first; i++)
    if (s[i].pool_id == id)
      *(s[i].ts_ns < since ? before : first) = &s[i];
}

/* The samples of one pool in the window, at most one per UI_POINTS-th of it
 * (the last sample of each slice), and the cumulative counters before the
 * first point (which stands for its whole slice), so that its increments
 * count too: those of the pool's last sample before the window; 0 when it
 * has none and its first sample ever is among those read (`complete`,
 * pool_complete: counting from its creation); else its first sample in the
 * window's own (that sample's increments unknown). */
static void pool_series(prom_buf *b, const counter_sample *s, size_t ns, uint32_t id,
                        uint64_t since, uint64_t slice, int complete) {
  static const char *const names[] = {"t",         "allocated",   "reserved",
                                      "requested", "from_device", "from_cache"};
  key(b, "series");
  prom_buf_putc(b, '{');
  for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
    key(b, names[f]);
    prom_buf_putc(b, '[');
    const counter_sample *prev = NULL;
    for (size_t i = 0; i <= ns; i++) {
      const counter_sample *x = NULL;
      if (i < ns) {
        if (s[i].pool_id != id || s[i].ts_ns < since)
          continue;
        x = &s[i];
      }
      /* prev is the last of its slice when x starts another (or at the end). */
      if (prev && (!x || (x->ts_ns - since) / slice != (prev->ts_ns - since) / slice)) {
        const uint64_t v[] = {prev->ts_ns / 1000000, prev->allocated,   prev->reserved,
                              prev->requested,       prev->from_device, prev->from_cache};
        prom_buf_u64(b, v[f]);
        prom_buf_putc(b, ',');
      }
      prev = x;
    }
    close_with(b, ']');
    prom_buf_putc(b, ',');
  }
  const counter_sample *before, *first;
  window_edge(s, ns, id, since, &before, &first);
  if (!before && !complete)
    before = first;
  key(b, "before");
  prom_buf_putc(b, '{');
  kv_u64(b, "from_device", before ? before->from_device : 0);
  kv_u64(b, "from_cache", before ? before->from_cache : 0);
  close_with(b, '}');
  prom_buf_putc(b, '}');
  prom_buf_putc(b, ',');
}

/* Where the samples read may lack some of a pool's: all are there when none
 * was overwritten (`all_kept`). Otherwise the oldest round read (every
 * round's samples share one timestamp) may have lost its first samples,
 * while every later round is whole: [0, full_end) are the samples up to the
 * end of the first whole round (full_end 0: no whole round read). */
typedef struct sample_span {
  int all_kept;
  size_t full_end;
} sample_span;

static sample_span span_of(const counter_sample *s, size_t ns, int all_kept) {
  sample_span sp = {.all_kept = all_kept, .full_end = 0};
  if (all_kept || ns == 0)
    return sp;
  size_t i = 1;
  while (i < ns && s[i].ts_ns == s[0].ts_ns)
    i++; /* the rest of the oldest round, perhaps cut at its start */
  if (i == ns)
    return sp;
  size_t j = i + 1;
  while (j < ns && s[j].ts_ns == s[i].ts_ns)
    j++; /* the first whole round */
  sp.full_end = j;
  return sp;
}

/* Whether the samples read hold pool id's first sample ever: every sample
 * was kept, or the pool has none in the first whole round read (nor before
 * it), so it did not exist then and came after, all its samples kept. */
static int pool_complete(const counter_sample *s, const sample_span *sp, uint32_t id) {
  if (sp->all_kept)
    return 1;
  if (!sp->full_end)
    return 0;
  for (size_t i = 0; i < sp->full_end; i++)
    if (s[i].pool_id == id)
      return 0;
  return 1;
}

static void write_pool(prom_buf *b, const pool_now *p, const counter_sample *s, size_t ns,
                       uint64_t since, uint64_t slice, int complete) {
  prom_buf_putc(b, '{');
  kv_u64(b, "id", p->id);
  key(b, "device");
  prom_buf_i64(b, p->device);
  prom_buf_putc(b, ',');
  key(b, "name");
  json_str(b, p->name);
  prom_buf_putc(b, ',');
  key(b, "label");
  json_str(b, p->label);
  prom_buf_putc(b, ',');
  key(b, "backend");
  json_str(b, p->backend);
  prom_buf_putc(b, ',');
  key(b, "strategy");
  json_str(b, p->strategy);
  prom_buf_putc(b, ',');
  key(b, "live");
  prom_buf_puts(b, p->live ? "true," : "false,");
  if (p->live) {
    const gpupool_stats *st = &p->st;
    kv_u64(b, "allocated", (uint64_t)st->allocated_bytes[GPUPOOL_STAT_ALL].current);
    kv_u64(b, "reserved", (uint64_t)st->reserved_bytes[GPUPOOL_STAT_ALL].current);
    if (p->limit != UINT64_MAX) {
      kv_u64(b, "limit", p->limit);
    } else {
      key(b, "limit");
      prom_buf_puts(b, "null,");
    }
    kv_u64(b, "requested", (uint64_t)st->requested_bytes[GPUPOOL_STAT_ALL].current);
    kv_u64(b, "largest_free", st->largest_free_block);
    kv_u64(b, "segments", (uint64_t)st->segment[GPUPOOL_STAT_ALL].current);
    kv_u64(b, "allocations", (uint64_t)st->allocation[GPUPOOL_STAT_ALL].current);
    kv_u64(b, "free_blocks", st->free_blocks);
    kv_u64(b, "pending_free_blocks", st->pending_free_blocks);
    kv_u64(b, "from_device", st->num_device_sourced);
    kv_u64(b, "from_cache", st->num_cache_hits);
    kv_u64(b, "ooms", st->num_ooms);
    kv_u64(b, "alloc_retries", st->num_alloc_retries);
  }
  pool_series(b, s, ns, p->id, since, slice, complete);
  close_with(b, '}');
  prom_buf_putc(b, ',');
}

static void write_cupti(prom_buf *b, uint64_t since, uint64_t slice) {
  cupti_metrics *m = malloc(sizeof *m);
  ui_history_sample *h = malloc(UI_HISTORY_CAPACITY * sizeof *h);
  key(b, "cupti");
  prom_buf_putc(b, '{');
  if (!m || !h) {
    b->failed = 1;
    free(m);
    free(h);
    prom_buf_putc(b, '}');
    return;
  }
  cupti_get_metrics(m);
  key(b, "up");
  prom_buf_puts(b, m->up ? "true," : "false,");
  key(b, "reason");
  json_str(b, m->reason);
  prom_buf_putc(b, ',');
  size_t n = ui_history_read(since, h, UI_HISTORY_CAPACITY);
  key(b, "devices");
  prom_buf_putc(b, '[');
  int done[CUPTI_MAX_DEVICES] = {0};
  for (size_t i = 0; i < n; i++) {
    int dev = h[i].device;
    if (dev < 0 || dev >= CUPTI_MAX_DEVICES || done[dev])
      continue;
    done[dev] = 1;
    static const char *const names[] = {"t", "pool", "other"};
    prom_buf_putc(b, '{');
    key(b, "device");
    prom_buf_i64(b, dev);
    prom_buf_putc(b, ',');
    for (int f = 0; f < 3; f++) {
      key(b, names[f]);
      prom_buf_putc(b, '[');
      const ui_history_sample *prev = NULL;
      for (size_t j = i; j <= n; j++) {
        const ui_history_sample *x = j < n && h[j].device == dev ? &h[j] : NULL;
        if (j < n && !x)
          continue;
        if (prev && (!x || (x->ts_ns - since) / slice != (prev->ts_ns - since) / slice)) {
          const uint64_t v[] = {prev->ts_ns / 1000000, prev->pool_bytes, prev->other_bytes};
          prom_buf_u64(b, v[f]);
          prom_buf_putc(b, ',');
        }
        prev = x;
      }
      close_with(b, ']');
      prom_buf_putc(b, ',');
    }
    close_with(b, '}');
    prom_buf_putc(b, ',');
  }
  close_with(b, ']');
  prom_buf_putc(b, '}');
  free(m);
  free(h);
}

/* Whether /snapshot answers ?format=torch in this build: asked once, of the
 * handler itself, with a pool name no pool has (so nothing is built). A
 * handler that does not know `format` names it in its refusal. */
static const char *probe_get(void *ctx, const char *k) {
  (void)ctx;
  return strcmp(k, "format") == 0 ? "torch" : strcmp(k, "pool") == 0 ? "\x01ui-probe" : NULL;
}
static void probe_each(void *ctx, void (*fn)(void *, const char *, const char *), void *arg) {
  (void)ctx;
  fn(arg, "format", "torch");
  fn(arg, "pool", "\x01ui-probe");
}
static int torch_snapshot_answers(void) {
  static atomic_int known = -1; /* two first requests may both ask: same answer */
  int k = atomic_load(&known);
  if (k >= 0)
    return k;
  endpoint_args a = {.get = probe_get, .each = probe_each, .path = "/snapshot"};
  endpoint_body o = {0};
  snapshot_route(&a, &o); /* as http.c routes /snapshot: its format is read there */
  int yes = o.status == 200 || (o.data && !strstr(o.data, "format"));
  if (o.read && o.close)
    o.close(o.stream);
  free(o.data);
  atomic_store(&known, yes);
  return yes;
}

/* Sixteen hex digits drawn once per process: with the pid, they tell the
 * page that the agent it polls is another process (restarted on the same
 * port, perhaps with the same pid, as in a container), whose pool ids and
 * OOM report ids mean other things. */
static char instance[17];
static pthread_once_t instance_once = PTHREAD_ONCE_INIT;

static void make_instance(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
    v = 0; /* no entropy yet: the clock and the pid still differ */
  v ^= clock_realtime_ns() ^ ((uint64_t)getpid() << 40);
  snprintf(instance, sizeof instance, "%016" PRIx64, v);
}

static const char *process_instance(void) {
  pthread_once(&instance_once, make_instance);
  return instance;
}

void ui_state_json(const endpoint_args *args, endpoint_body *out) {
  if (check_params(args, "window", out) != 0)
    return;
  const char *w = args->get(args->ctx, "window");
  long window = w ? parse_range(w, 10, UI_WINDOW_MAX) : UI_WINDOW_DEFAULT;
  if (window < 0) {
    char shown[64];
    endpoint_printable(shown, sizeof shown, w);
    endpoint_bad_request(out, "bad window '%s': expected seconds from 10 to %d", shown,
                         UI_WINDOW_MAX);
    return;
  }
  state_ctx c = {.pools = calloc(UI_POOLS_MAX, sizeof *c.pools)};
  trace_known_pool *known = calloc(TRACE_POOL_TABLE_SIZE, sizeof *known);
  counter_sample *s = malloc(TRACE_COUNTERS_CAPACITY * sizeof *s);
  prom_buf b;
  prom_buf_init(&b, 1 << 16);
  if (!c.pools || !known || !s) {
    b.failed = 1;
    goto done;
  }
  uint64_t now = clock_realtime_ns();
  uint64_t since = now - (uint64_t)window * 1000000000ull;
  uint64_t slice = (uint64_t)window * 1000000000ull / UI_POINTS;
  /* Samples first, then the pools: every live pool is then in the table. */
  uint64_t head = trace_counters_head(), skipped = 0;
  uint64_t cursor = head > TRACE_COUNTERS_CAPACITY ? head - TRACE_COUNTERS_CAPACITY : 0;
  size_t ns = trace_counters_read(&cursor, s, TRACE_COUNTERS_CAPACITY, &skipped);
  /* Which pools' samples are all here (a pool without an earlier one had none). */
  sample_span span = span_of(s, ns, skipped == 0 && trace_counters_dropped() == 0);
  registry_foreach(note_live, &c);
  pool_labeler_free(&c.labeler);
  /* Pools gone since, whose samples are still in the window. */
  size_t nk = trace_counters_pools(known, TRACE_POOL_TABLE_SIZE);
  for (size_t i = 0; i < nk && c.n < UI_POOLS_MAX; i++) {
    const trace_pool_info *k = &known[i].info;
    int live = 0, recent = 0;
    for (size_t j = 0; j < c.n && !live; j++)
      live = c.pools[j].id == k->id;
    for (size_t j = 0; j < ns && !live && !recent; j++)
      recent = s[j].pool_id == k->id && s[j].ts_ns >= since;
    if (!recent)
      continue;
    pool_now *pn = &c.pools[c.n++];
    memset(pn, 0, sizeof *pn);
    pn->id = k->id;
    pn->device = k->device;
    copy_name(pn->name, sizeof pn->name, k->name);
    copy_name(pn->label, sizeof pn->label, known[i].label);
    copy_name(pn->backend, sizeof pn->backend, k->backend);
    copy_name(pn->strategy, sizeof pn->strategy, k->strategy);
  }
  char host[256];
  metrics_hostname(host, sizeof host); /* the hostname option, as /metrics */
  prom_buf_putc(&b, '{');
  kv_u64(&b, "now_ms", now / 1000000);
  kv_u64(&b, "window_s", (uint64_t)window);
  kv_u64(&b, "pid", (uint64_t)getpid());
  key(&b, "instance");
  json_str(&b, process_instance());
  prom_buf_putc(&b, ',');
  key(&b, "hostname");
  json_str(&b, host);
  prom_buf_putc(&b, ',');
  key(&b, "version");
  json_str(&b, GPUPOOL_VERSION);
  prom_buf_putc(&b, ',');
  key(&b, "links");
  prom_buf_putc(&b, '{');
  key(&b, "oom");
  prom_buf_puts(&b, http_has_route("/oom") ? "true," : "false,");
  key(&b, "advice");
  prom_buf_puts(&b, http_has_route("/advice") ? "true," : "false,");
  key(&b, "torch");
  prom_buf_puts(&b, torch_snapshot_answers() ? "true}," : "false},");
  key(&b, "samples_dropped");
  prom_buf_u64(&b, skipped);
  prom_buf_putc(&b, ',');
  key(&b, "pools");
  prom_buf_putc(&b, '[');
  for (size_t i = 0; i < c.n; i++)
    write_pool(&b, &c.pools[i], s, ns, since, slice ? slice : 1,
               pool_complete(s, &span, c.pools[i].id));
  close_with(&b, ']');
  prom_buf_putc(&b, ',');
  write_cupti(&b, since, slice ? slice : 1);
  prom_buf_putc(&b, '}');
done:
  free(c.pools);
  free(known);
  free(s);
  take_json(&b, out);
}

/* ---- /ui/blocks.json ---- */

#define UI_TAGS_MAX      (2 * GPUPOOL_TAG_MAX) /* the process has at most GPUPOOL_TAG_MAX */
#define UI_CAPTURE_TRIES 4

/* What is read of the pool under the registry lock (it cannot be destroyed
 * meanwhile); the answer is written from it afterwards. */
typedef struct blocks_ctx {
  uint32_t id;
  int found, failed;    /* failed: out of host memory */
  pool_labeler labeler; /* every pool up to the one shown: labels as /metrics gives them */
  char label[POOL_LABEL_MAX];
  int have_stats;
  gpupool_stats st;
  /* The pool's bytes per tag before the copy (their order: the process's
   * tags) and after it (every tag a block had is known by then). */
  gpupool_tag_stat tags_before[GPUPOOL_TAG_MAX], tags_after[GPUPOOL_TAG_MAX];
  int ntags_before, ntags_after;
  pool_capture cap;
  int captured;
} blocks_ctx;

static void blocks_of(gpupool *p, void *arg) {
  blocks_ctx *c = arg;
  if (c->found)
    return;
  char label[POOL_LABEL_MAX] = "";
  if (pool_labeler_next(&c->labeler, p, label) != 0)
    c->failed = 1; /* out of host memory: the labels after it would be wrong */
  if (pool_id(p) != c->id)
    return;
  c->found = 1;
  memcpy(c->label, label, sizeof label);
  c->have_stats = gpupool_get_stats(p, &c->st) == GPUPOOL_OK;
  c->ntags_before = gpupool_get_tag_stats(p, c->tags_before, GPUPOOL_TAG_MAX);
  /* One consistent copy of the segments, their blocks and the mapped pages
   * of expandable segments (pool/pool_capture.h; no events). Blocks split
   * while it is taken: a copy that outgrew the room counted at its start
   * leaves segments out, and is taken again. */
  for (int tries = 0; tries < UI_CAPTURE_TRIES; tries++) {
    if (c->captured)
      pool_capture_free(&c->cap);
    c->captured = pool_capture_take(p, 0, SIZE_MAX, 0, 0, &c->cap) == 0;
    if (!c->captured || !c->cap.truncated)
      break;
  }
  if (!c->captured)
    c->failed = 1;
  c->ntags_after = gpupool_get_tag_stats(p, c->tags_after, GPUPOOL_TAG_MAX);
}

/* The pool's tag table: the process's tags in their order, then any met in
 * the blocks that were not known yet. */
typedef struct tag_table {
  const char *tags[UI_TAGS_MAX];
  int n;
} tag_table;

/* The index of a block's tag in the table, added when new; -1 for none. */
static int tag_index(tag_table *t, const char *tag) {
  if (!tag)
    return -1;
  for (int i = 0; i < t->n; i++) /* names are static: the pointer mostly matches */
    if (t->tags[i] == tag || strcmp(t->tags[i], tag) == 0)
      return i;
  if (t->n == UI_TAGS_MAX)
    return -1;
  t->tags[t->n] = tag;
  return t->n++;
}

/* One segment: its numbers, six per block (offset in the segment, size,
 * requested, state: 0 free, 1 allocated, 2 pending on another stream, age
 * in ms or -1, bytes of unmapped pages), then the blocks' tag indexes when
 * one of them has a tag. *largest: the index of the block the capture found
 * to be the pool's largest free block (largest_free_addr), if it is here
 * (-1 else). */
static void write_segment(prom_buf *b, const pool_capture *c, const pool_capture_segment *s,
                          tag_table *tags, signed char *seg_tags, uint64_t now_ns, long *largest) {
  const pool_segment_info *si = &s->info;
  prom_buf_putc(b, '{');
  kv_hex(b, "address", si->addr);
  kv_u64(b, "size", si->size);
  kv_u64(b, "mapped", si->mapped);
  kv_u64(b, "allocated", si->allocated);
  kv_u64(b, "requested", si->requested);
  kv_hex(b, "stream", si->stream);
  key(b, "large");
  prom_buf_puts(b, si->is_large ? "true," : "false,");
  key(b, "blocks");
  prom_buf_putc(b, '[');
  int tagged = 0;
  *largest = -1;
  for (size_t j = 0; j < si->nblocks; j++) {
    const pool_block_info *bi = &c->blocks[s->first_block + j];
    if (prom_buf_reserve(b, 6 * 21))
      return;
    int state = strcmp(bi->state, "active_allocated") == 0      ? 1
                : strcmp(bi->state, "active_pending_free") == 0 ? 2
                                                                : 0;
    int tag = tag_index(tags, bi->tag);
    seg_tags[j] = (signed char)tag;
    tagged |= tag >= 0;
    if (state == 0 && c->t.largest_free && bi->addr == c->t.largest_free_addr)
      *largest = (long)j;
    prom_buf_u64(b, bi->addr - si->addr);
    prom_buf_putc(b, ',');
    prom_buf_u64(b, bi->size);
    prom_buf_putc(b, ',');
    prom_buf_u64(b, bi->requested);
    prom_buf_putc(b, ',');
    prom_buf_i64(b, state);
    prom_buf_putc(b, ',');
    if (bi->alloc_ns && bi->alloc_ns <= now_ns)
      prom_buf_u64(b, (now_ns - bi->alloc_ns) / 1000000);
    else
      prom_buf_puts(b, "-1");
    prom_buf_putc(b, ',');
    prom_buf_u64(b, bi->unmapped);
    prom_buf_putc(b, ',');
  }
  close_with(b, ']');
  if (tagged) {
    prom_buf_putc(b, ',');
    key(b, "block_tags");
    prom_buf_putc(b, '[');
    for (size_t j = 0; j < si->nblocks; j++) {
      prom_buf_i64(b, seg_tags[j]);
      prom_buf_putc(b, ',');
    }
    close_with(b, ']');
  }
  prom_buf_putc(b, '}');
}

static void write_blocks(prom_buf *b, const blocks_ctx *c, uint64_t now_ns) {
  const pool_capture *cap = &c->cap;
  tag_table tags = {.n = 0};
  for (int i = 0; i < c->ntags_before; i++)
    tag_index(&tags, c->tags_before[i].tag);
  size_t most = 1;
  for (size_t k = 0; k < cap->nsegs; k++)
    most = cap->segs[k].info.nblocks > most ? cap->segs[k].info.nblocks : most;
  signed char *seg_tags = malloc(most);
  if (!seg_tags) {
    b->failed = 1;
    return;
  }
  key(b, "pool");
  prom_buf_putc(b, '{');
  kv_u64(b, "id", c->id);
  key(b, "name");
  json_str(b, cap->name);
  prom_buf_putc(b, ',');
  key(b, "label");
  json_str(b, c->label);
  prom_buf_putc(b, ',');
  key(b, "device");
  prom_buf_i64(b, cap->device);
  prom_buf_putc(b, ',');
  if (c->have_stats) {
    kv_u64(b, "allocated", (uint64_t)c->st.allocated_bytes[GPUPOOL_STAT_ALL].current);
    kv_u64(b, "reserved", (uint64_t)c->st.reserved_bytes[GPUPOOL_STAT_ALL].current);
  }
  /* The copy's own: the segments below hold it. */
  kv_u64(b, "largest_free", cap->t.largest_free);
  if (cap->truncated) {
    key(b, "truncated");
    prom_buf_puts(b, "true,");
  }
  key(b, "segments");
  prom_buf_putc(b, '[');
  long at_seg = -1, at_block = -1;
  for (size_t k = 0; k < cap->nsegs; k++) {
    long largest;
    write_segment(b, cap, &cap->segs[k], &tags, seg_tags, now_ns, &largest);
    prom_buf_putc(b, ',');
    if (largest >= 0 && at_seg < 0) {
      at_seg = (long)k;
      at_block = largest;
    }
  }
  close_with(b, ']');
  prom_buf_putc(b, ',');
  free(seg_tags);
  key(b, "largest_free_block");
  if (at_seg >= 0) {
    prom_buf_putc(b, '{');
    kv_u64(b, "segment", (uint64_t)at_seg);
    kv_u64(b, "block", (uint64_t)at_block);
    close_with(b, '}');
    prom_buf_putc(b, ',');
  } else {
    prom_buf_puts(b, "null,");
  }
  key(b, "tags");
  prom_buf_putc(b, '[');
  for (int i = 0; i < tags.n; i++) {
    int64_t bytes = 0;
    for (int k = 0; k < c->ntags_after; k++)
      if (c->tags_after[k].tag == tags.tags[i] || strcmp(c->tags_after[k].tag, tags.tags[i]) == 0)
        bytes = c->tags_after[k].allocated_bytes;
    prom_buf_putc(b, '{');
    key(b, "name");
    json_str(b, tags.tags[i]);
    prom_buf_putc(b, ',');
    key(b, "allocated");
    prom_buf_i64(b, bytes);
    prom_buf_puts(b, "},");
  }
  close_with(b, ']');
  prom_buf_putc(b, '}');
}

void ui_blocks_json(const endpoint_args *args, endpoint_body *out) {
  if (check_params(args, "pool", out) != 0)
    return;
  long id = parse_range(args->get(args->ctx, "pool"), 0, 999999999);
  if (id < 0) {
    endpoint_bad_request(out, "bad or missing pool: expected a pool id from /ui/state.json");
    return;
  }
  blocks_ctx *c = calloc(1, sizeof *c);
  prom_buf b;
  prom_buf_init(&b, 1 << 16);
  if (!c) {
    b.failed = 1;
    take_json(&b, out);
    return;
  }
  c->id = (uint32_t)id;
  uint64_t now_ns = clock_realtime_ns();
  registry_foreach(blocks_of, c);
  pool_labeler_free(&c->labeler);
  if (c->failed)
    b.failed = 1;
  prom_buf_putc(&b, '{');
  kv_u64(&b, "now_ms", now_ns / 1000000);
  if (!c->found) /* gone: an answer, not an error, so that the page just says so */
    prom_buf_puts(&b, "\"pool\":null");
  else if (!b.failed)
    write_blocks(&b, c, now_ns);
  prom_buf_putc(&b, '}');
  if (c->captured)
    pool_capture_free(&c->cap);
  free(c);
  take_json(&b, out);
}
