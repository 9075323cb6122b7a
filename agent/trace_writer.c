#include "trace_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cupti.h"
#include "http_gzip_stream.h"
#include "metrics.h"
#include "pool_label.h"
#include "trace_counters.h"
#include "gpupool/agent.h"
#include "core/array_grow.h"
#include "core/clock.h"
#include "core/errors.h"
#include "pool/event_clock.h"
#include "pool/pool_view.h"
#include "pool/registry.h"
#include "writable_dir.h"
#include "exporters/trace_format.h"
#include "exporters/trace_merge.h"

#define NS_PER_S      1000000000ull
#define TRACE_TMP_MAX 4096 /* the temporary file's name, and so trace_file's */

enum { ST_EVENTS, ST_DONE };

struct trace_stream {
  trace_query q;
  trace_merge *merge;
  trace_pool *pools;
  size_t npools;
  trace_format fmt;
  json_buf out;
  int state;
  uint64_t records;
};

/* ---- gathering the pools and their rings -------------------------------- */

typedef struct ring_ref {
  event_ring *ring;
  event_ring_end end; /* taken with the ring, under its pool's lock */
  uint32_t pool_id;
} ring_ref;

typedef struct gather {
  const trace_query *q;
  trace_pool *pools;
  size_t npools, cap;
  ring_ref *rings;
  size_t nrings, caprings;
  pool_labeler labeler;
  int failed;
} gather;

static int selected(const trace_query *q, const char *label, int device) {
  return pool_label_selects(q->pool[0] ? q->pool : NULL, q->device, label, device);
}

static void copy_str(char *dst, size_t size, const char *src) {
  snprintf(dst, size, "%s", src ? src : "");
}

/* A pool for the trace, with its /metrics label (a gone pool's at its last
 * sample). */
static trace_pool *add_pool(gather *g, const trace_pool_info *info, const char *label, int live) {
  if (array_grow((void **)&g->pools, &g->cap, g->npools + 1, sizeof *g->pools, 16) != 0) {
    g->failed = 1;
    return NULL;
  }
  trace_pool *p = &g->pools[g->npools++];
  memset(p, 0, sizeof *p);
  p->info = *info;
  copy_str(p->metrics_label, sizeof p->metrics_label, label);
  p->live = live;
  return p;
}

/* All rings of p: pool_event_rings_at fills at most `cap`, so ask again with
 * more room until it leaves some unused. */
static void take_rings(gather *g, gpupool *p, uint32_t id) {
  size_t cap = 64;
  for (;;) {
    event_ring **rs = malloc(cap * sizeof *rs);
    event_ring_end *ends = malloc(cap * sizeof *ends);
    if (!rs || !ends) {
      free(rs);
      free(ends);
      g->failed = 1;
      return;
    }
    size_t n = pool_event_rings_at(p, rs, ends, cap);
    if (n == cap && cap < 65536) {
      for (size_t i = 0; i < n; i++)
        event_ring_unref(rs[i]);
      free(rs);
      free(ends);
      cap *= 4;
      continue;
    }
    for (size_t i = 0; i < n; i++) {
      if (array_grow((void **)&g->rings, &g->caprings, g->nrings + 1, sizeof *g->rings, 64) != 0) {
        g->failed = 1;
        event_ring_unref(rs[i]);
        continue;
      }
      g->rings[g->nrings++] = (ring_ref){rs[i], ends[i], id};
    }
    free(rs);
    free(ends);
    return;
  }
}

static void gather_live(gpupool *p, void *arg) {
  gather *g = arg;
  char label[POOL_LABEL_MAX];
  if (pool_labeler_next(&g->labeler, p, label) != 0) {
    g->failed = 1;
    return;
  }
  trace_pool_info info = {.id = pool_id(p), .device = gpupool_device(p)};
  copy_str(info.name, sizeof info.name, gpupool_name(p));
  if (!selected(g->q, label, info.device))
    return;
  copy_str(info.backend, sizeof info.backend, gpupool_backend_name(p));
  copy_str(info.strategy, sizeof info.strategy, gpupool_strategy_name(p));
  if (add_pool(g, &info, label, 1))
    take_rings(g, p, info.id);
}

static int by_id(const void *a, const void *b) {
  uint32_t x = ((const trace_pool *)a)->info.id, y = ((const trace_pool *)b)->info.id;
  return x < y ? -1 : x > y;
}

/* Live pools (with their rings) and, for their counter samples, the pools
 * the counter module remembers that are gone now. */
static int gather_pools(trace_stream *s, gather *g) {
  trace_known_pool *known = malloc(TRACE_POOL_TABLE_SIZE * sizeof *known);
  if (!known)
    return -1;
  /* The table is copied before walking the registry: the sampler takes the
   * two locks in the order registry, table. */
  size_t nknown = trace_counters_pools(known, TRACE_POOL_TABLE_SIZE);
  registry_foreach(gather_live, g);
  /* A pool gone since is selected by the label of its last sample; a live
   * one's there may be older. */
  for (size_t i = 0; i < nknown && !g->failed; i++)
    if (!pool_labeler_saw(&g->labeler, known[i].info.id) &&
        selected(&s->q, known[i].label, known[i].info.device))
      add_pool(g, &known[i].info, known[i].label, 0);
  pool_labeler_free(&g->labeler);
  free(known);
  if (g->npools)
    qsort(g->pools, g->npools, sizeof *g->pools, by_id);
  trace_format_label_pools(g->pools, g->npools);
  return g->failed ? -1 : 0;
}

/* ---- filtering ---------------------------------------------------------- */

static int accept_record(void *ctx, const trace_record *r) {
  trace_stream *s = ctx;
  switch (r->kind) {
  case TRACE_SRC_COUNTERS:
    return trace_format_find_pool(&s->fmt, r->u.cs.pool_id) != NULL;
  case TRACE_SRC_CUPTI:
    return s->q.device < 0 || (int64_t)r->u.ev.b == s->q.device;
  default:
    return 1; /* the rings of selected pools only were taken */
  }
}

/* ---- opening ------------------------------------------------------------ */

static int build_merge(trace_stream *s, gather *g) {
  s->merge = trace_merge_create();
  if (!s->merge)
    return -1;
  int rc = 0;
  for (size_t i = 0; i < g->nrings; i++) {
    trace_pool *p = trace_format_find_pool(&s->fmt, g->rings[i].pool_id);
    uint32_t tag = (uint32_t)(p - s->pools);
    if (trace_merge_add_ring_to(s->merge, g->rings[i].ring, g->rings[i].end, TRACE_SRC_POOL, tag) !=
        0)
      rc = -1;
    g->rings[i].ring = NULL; /* the merge owns the reference now */
  }
  if (trace_merge_add_counters(s->merge, &trace_counters_ring) != 0)
    rc = -1;
  if (!s->q.pool[0]) { /* CUPTI records belong to no pool */
    event_ring *cr = cupti_event_ring();
    if (cr && trace_merge_add_ring(s->merge, cr, TRACE_SRC_CUPTI, 0) != 0)
      rc = -1;
  }
  return rc;
}

static void write_header(trace_stream *s) {
  uint64_t first_ts;
  uint64_t t = trace_merge_peek_ts(s->merge, &first_ts) ? first_ts : clock_realtime_ns();
  /* Times are written relative to a whole second: as µs with 3 decimals they
   * keep nanoseconds in a double, which absolute epoch µs would not. */
  s->fmt.base_ns = t - t % NS_PER_S;
  json_puts(&s->out, "{\"traceEvents\":[");
  trace_format_metadata(&s->fmt, t);
}

trace_stream *trace_stream_open(const trace_query *q) {
  trace_stream *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  if (q)
    s->q = *q;
  else
    trace_query_init(&s->q);
  json_buf_init(&s->out);
  gather g = {.q = &s->q};
  int rc = gather_pools(s, &g);
  s->pools = g.pools;
  s->npools = g.npools;
  if (rc == 0)
    rc = trace_format_init(&s->fmt, &s->out, s->pools, s->npools, 0);
  if (rc == 0)
    rc = build_merge(s, &g);
  for (size_t i = 0; i < g.nrings; i++)
    event_ring_unref(g.rings[i].ring);
  free(g.rings);
  if (rc == 0)
    rc = trace_merge_begin(s->merge, s->q.since_ns, s->q.until_ns, s->q.limit, accept_record, s);
  if (rc != 0) {
    trace_stream_close(s);
    return NULL;
  }
  write_header(s);
  return s;
}

/* ---- the end of the document ---------------------------------------------- */

static void write_query(json_buf *o, const trace_query *q) {
  json_puts(o, ",\"query\":{");
  int n = 0;
  if (q->since_ns) {
    json_puts(o, "\"since_us\":\"");
    json_ns_as_us(o, (int64_t)q->since_ns);
    json_putc(o, '"');
    n++;
  }
  if (q->until_ns != UINT64_MAX) {
    json_puts(o, n++ ? ",\"until_us\":\"" : "\"until_us\":\"");
    json_ns_as_us(o, (int64_t)q->until_ns);
    json_putc(o, '"');
  }
  if (q->pool[0]) {
    json_puts(o, n++ ? ",\"pool\":" : "\"pool\":");
    json_string(o, q->pool);
  }
  if (q->device >= 0) {
    json_puts(o, n++ ? ",\"device\":" : "\"device\":");
    json_i64(o, q->device);
  }
  if (q->limit) {
    json_puts(o, n++ ? ",\"limit\":" : "\"limit\":");
    json_u64(o, q->limit);
  }
  json_putc(o, '}');
}

/* How pools stamp events (pool/event_clock.h): the source, the ticker's tick
 * when it runs (0: every stamp exact) and the resolution now (the tick while
 * events are frequent enough to be ticked, else 0: exact). */
static void write_clock(json_buf *o) {
  clock_stamp_init();
  json_puts(o, ",\"clock_source\":");
  json_puts(o, clock_use_tsc ? "\"tsc\"" : "\"clock_gettime\"");
  json_puts(o, ",\"clock_tick_us\":");
  json_u64(o, event_clock_tick_us());
  json_puts(o, ",\"clock_resolution_us\":");
  json_u64(o, event_clock_resolution_us());
}

static void write_footer(trace_stream *s) {
  json_buf *o = &s->out;
  char host[256];
  metrics_hostname(host, sizeof host); /* the hostname option, as /metrics */
  json_puts(o, "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"version\":");
  json_string(o, GPUPOOL_VERSION);
  json_puts(o, ",\"hostname\":");
  json_string(o, host);
  json_puts(o, ",\"pid\":");
  json_i64(o, (int64_t)getpid());
  json_puts(o, ",\"clock\":\"CLOCK_REALTIME\"");
  write_clock(o);
  json_puts(o, ",\"baseTimeNanoseconds\":");
  json_u64(o, s->fmt.base_ns);
  json_puts(o, ",\"events_recording\":");
  json_puts(o, pool_events_enabled() ? "true" : "false");
  json_puts(o, ",\"events_written\":");
  json_u64(o, s->records);
  json_puts(o, ",\"events_dropped\":");
  json_u64(o, trace_merge_dropped(s->merge, TRACE_SRC_POOL));
  json_puts(o, ",\"cupti_events_dropped\":");
  json_u64(o, trace_merge_dropped(s->merge, TRACE_SRC_CUPTI));
  json_puts(o, ",\"samples_dropped\":");
  json_u64(o, trace_merge_dropped(s->merge, TRACE_SRC_COUNTERS));
  json_puts(o, ",\"events_skipped_while_streaming\":");
  json_u64(o, trace_merge_skipped(s->merge));
  json_puts(o, ",\"limit_reached\":");
  json_puts(o, trace_merge_limited(s->merge) ? "true" : "false");
  write_query(o, &s->q);
  json_puts(o, "}}\n");
}

ssize_t trace_stream_read(trace_stream *s, char *buf, size_t max) {
  while (json_buf_pending(&s->out) < max && s->state != ST_DONE && !s->out.failed) {
    trace_record r;
    if (trace_merge_next(s->merge, &r)) {
      s->records += trace_record_events(&r);
      trace_format_record(&s->fmt, &r);
    } else {
      write_footer(s);
      s->state = ST_DONE;
    }
  }
  if (s->out.failed)
    return -1;
  return (ssize_t)json_buf_drain(&s->out, buf, max);
}

void trace_stream_close(trace_stream *s) {
  if (!s)
    return;
  trace_merge_destroy(s->merge);
  trace_format_free(&s->fmt);
  json_buf_free(&s->out);
  free(s->pools);
  free(s);
}

/* ---- to a file ---------------------------------------------------------- */

/* The temporary file the trace is written to before the rename: 0, or -1
 * when the name does not fit in tmp. */
static int tmp_name(const char *path, char *tmp, size_t tmplen) {
  return (size_t)snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid()) < tmplen ? 0 : -1;
}

/* The directory of file path, into dir. */
static void dir_of(const char *path, char *dir, size_t dirlen) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, dirlen, ".");
  else
    snprintf(dir, dirlen, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

static ssize_t body_read(void *stream, char *buf, size_t max) {
  return trace_stream_read(stream, buf, max);
}

static void body_close(void *stream) {
  trace_stream_close(stream);
}

int trace_stream_body(const trace_query *q, endpoint_body *out) {
  trace_stream *s = trace_stream_open(q);
  if (!s)
    return -1;
  out->stream = s;
  out->read = body_read;
  out->close = body_close;
  return 0;
}

#define FILE_CHUNK 65536

gpupool_status trace_write_whole(FILE *f, int gzip) {
  endpoint_body body = {0};
  char *buf = malloc(FILE_CHUNK);
  int opened = buf && trace_stream_body(NULL, &body) == 0;
  if (!opened || (gzip && http_gzip_wrap_stream(&body) != 0)) {
    if (opened)
      body.close(body.stream);
    free(buf);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_trace_write: out of host memory");
  }
  gpupool_status st = GPUPOOL_OK;
  ssize_t n;
  while ((n = body.read(body.stream, buf, FILE_CHUNK)) > 0) {
    if (fwrite(buf, 1, (size_t)n, f) != (size_t)n)
      break;
  }
  /* n > 0: the loop stopped at a failed write. Otherwise the end of the
   * document (all of a small one) may still sit in f's buffer, and a full
   * disk shows only when it is flushed: written means flushed. */
  if (n > 0 || fflush(f) != 0)
    st = pool_fail(GPUPOOL_ERR_BACKEND, "gpupool_trace_write: write failed: %s", strerror(errno));
  else if (n < 0)
    st = pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_trace_write: out of host memory (trace cut)");
  body.close(body.stream);
  free(buf);
  return st;
}

/* Whether trace_file names a gzip'd file: it ends in ".gz". */
static int gzip_named(const char *path) {
  size_t n = strlen(path);
  return n > 3 && strcmp(path + n - 3, ".gz") == 0;
}

int trace_file_check(const char *path, char *err, size_t errlen) {
  char tmp[TRACE_TMP_MAX], dir[TRACE_TMP_MAX];
  const char *slash = strrchr(path, '/');
  struct stat st;
  if (tmp_name(path, tmp, sizeof tmp) != 0) {
    snprintf(err, errlen, "trace_file '%.200s...': path too long", path);
    return -1;
  }
  if ((slash && !slash[1]) || (stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
    snprintf(err, errlen, "trace_file '%.400s' is a directory (give a file name)", path);
    return -1;
  }
#ifndef GPUPOOL_HAVE_ZLIB
  if (gzip_named(path)) {
    snprintf(err, errlen, "trace_file '%.400s': a .gz name needs a build with zlib", path);
    return -1;
  }
#endif
  dir_of(path, dir, sizeof dir);
  int why = writable_dir_errno(dir);
  if (why) {
    snprintf(err, errlen, "trace_file '%.400s': its directory '%.400s' is not writable: %s", path,
             dir, strerror(why));
    return -1;
  }
  return 0;
}

int trace_write_file(const char *path) {
  char tmp[TRACE_TMP_MAX];
  if (!path || !*path || tmp_name(path, tmp, sizeof tmp) != 0) {
    pool_fail(GPUPOOL_ERR_INVALID, "trace_file: bad path");
    fprintf(stderr, "gpupool: trace_file: bad path\n");
    return -1;
  }
  FILE *f = fopen(tmp, "w");
  if (!f) {
    pool_fail(GPUPOOL_ERR_BACKEND, "trace_file: cannot create %s: %s", tmp, strerror(errno));
    fprintf(stderr, "gpupool: trace_file: cannot create %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  gpupool_status st = trace_write_whole(f, gzip_named(path)); /* flushes f */
  int err = st == GPUPOOL_OK && fsync(fileno(f)) != 0 ? errno : 0;
  if (fclose(f) != 0 && st == GPUPOOL_OK && !err)
    err = errno;
  if (st == GPUPOOL_OK && !err && rename(tmp, path) != 0)
    err = errno;
  if (st == GPUPOOL_OK && !err) { /* the name too must survive a crash */
    char dir[TRACE_TMP_MAX];
    dir_of(path, dir, sizeof dir);
    err = writable_dir_sync(dir);
  }
  if (st != GPUPOOL_OK || err) {
    char reason[512];
    snprintf(reason, sizeof reason, "%s", err ? strerror(err) : gpupool_last_error());
    unlink(tmp);
    pool_fail(GPUPOOL_ERR_BACKEND, "trace_file: cannot write %s: %s", path, reason);
    fprintf(stderr, "gpupool: trace_file: cannot write %s: %s\n", path, reason);
    return -1;
  }
  return 0;
}
