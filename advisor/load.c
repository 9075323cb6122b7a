/* gpupool_history_load: picks the reader by name or by content, and
 * gpupool_history_from_pool: the live event rings of a pool. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "pool/pool_view.h"
#include "live.h"
#include "readers.h"

#define MAX_DOCUMENT ((size_t)4 << 30) /* traces and snapshots are read whole */

static gpupool_status slurp(FILE *f, const char *path, unsigned char **buf, size_t *len) {
  size_t cap = 1 << 20, n = 0;
  unsigned char *b = malloc(cap + 1);
  if (!b)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
  for (;;) {
    if (n == cap) {
      if (cap >= MAX_DOCUMENT) {
        free(b);
        return pool_fail(GPUPOOL_ERR_INVALID, "%s: larger than %zu bytes", path, MAX_DOCUMENT);
      }
      unsigned char *q = realloc(b, 2 * cap + 1);
      if (!q) {
        free(b);
        return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
      }
      b = q;
      cap *= 2;
    }
    size_t r = fread(b + n, 1, cap - n, f);
    n += r;
    if (r == 0)
      break;
  }
  if (ferror(f)) {
    free(b);
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: read error at byte %zu", path, n);
  }
  b[n] = 0;
  *buf = b;
  *len = n;
  return GPUPOOL_OK;
}

gpupool_status gpupool_history_load(const char *path, const char *format, const char *pool,
                                    gpupool_history **out) {
  if (!path || !out)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_history_load: %s is NULL",
                     path ? "out" : "path");
  *out = NULL;
  if (format && *format && strcmp(format, "auto") && strcmp(format, "record") &&
      strcmp(format, "trace") && strcmp(format, "torch"))
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "unknown history format '%s' (auto, record, trace or torch)", format);
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f)
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: cannot open: %s", path, strerror(errno));
  char fmt = format && *format && strcmp(format, "auto") ? format[1] : 0; /* 'e', 'r', 'o' */
  if (!fmt) {
    int c;
    while ((c = getc(f)) == ' ' || c == '\n' || c == '\r' || c == '\t') {
    }
    fmt = c == 0x80 ? 'o' : (c == '{' || c == '[') ? 'r' : 'e';
    if (c != EOF)
      ungetc(c, f);
  }
  gpupool_status st;
  if (fmt == 'e') {
    st = read_record(f, path, out);
  } else {
    unsigned char *buf = NULL; /* set by slurp when it succeeds */
    size_t len = 0;
    st = slurp(f, path, &buf, &len);
    if (st == GPUPOOL_OK) {
      st = fmt == 'r' ? read_trace((const char *)buf, len, path, pool, out)
                      : read_torch(buf, len, path, pool, out);
      free(buf);
    }
  }
  if (f != stdin)
    fclose(f);
  return st;
}

static int by_time(const void *a, const void *b) {
  const pool_event *x = a, *y = b;
  return (x->ts_ns > y->ts_ns) - (x->ts_ns < y->ts_ns);
}

#define MAX_RINGS 1024

gpupool_status gpupool_history_from_pool(gpupool *p, gpupool_history **out) {
  if (!p || !out)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_history_from_pool: %s is NULL",
                     p ? "out" : "pool");
  *out = NULL;
  event_ring **rings = malloc(MAX_RINGS * sizeof *rings);
  if (!rings)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_history_from_pool: out of host memory");
  size_t nr = pool_event_rings(p, rings, MAX_RINGS);
  gpupool_status st = history_from_rings(rings, nr, gpupool_name(p), out);
  free(rings);
  return st;
}

gpupool_status history_from_rings(event_ring **rings, size_t nr, const char *name,
                                  gpupool_history **out) {
  size_t total = 0;
  for (size_t i = 0; i < nr; i++)
    total += event_ring_capacity(rings[i]);
  pool_event *ev = malloc((total ? total : 1) * sizeof *ev);
  char src[160];
  snprintf(src, sizeof src, "pool %s", name);
  gpupool_history *h = hist_new(src, "live");
  size_t n = 0;
  uint64_t dropped = 0;
  if (ev && h) {
    for (size_t i = 0; i < nr; i++) {
      uint64_t cursor = 0, skipped = 0;
      size_t got;
      while (n < total && (got = event_ring_read(rings[i], &cursor, ev + n, total - n, &skipped)))
        n += got;
      dropped += skipped;
    }
  }
  for (size_t i = 0; i < nr; i++)
    event_ring_unref(rings[i]);
  if (!ev || !h) {
    free(ev);
    gpupool_history_free(h);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "history of pool %s: out of host memory", name);
  }
  /* One ring per stream: merged in time order (stable within a ring). */
  if (nr > 1)
    qsort(ev, n, sizeof *ev, by_time);
  char err[160];
  gpupool_status st = GPUPOOL_OK;
  for (size_t i = 0; i < n && st == GPUPOOL_OK; i++) {
    const pool_event *e = &ev[i];
    int r = 0;
    const char *why = "out of host memory";
    switch (e->type) {
    case EV_ALLOC:
      if (hist_is_live(h, e->addr)) /* its free was overwritten while read */
        hist_free(h, e->addr);
      r = hist_alloc(h, e->addr, e->requested ? e->requested : e->size, e->stream, err, sizeof err);
      why = err;
      break;
    case EV_FREE:
      if (e->flags & EVF_DEFERRED)
        r = hist_record_stream(h, e->addr, HIST_OTHER_STREAM) < 0;
      if (!r)
        r = hist_free(h, e->addr) < 0;
      break;
    case EV_EMPTY_CACHE:
      r = hist_empty_cache(h);
      break;
    default:
      continue;
    }
    hist_note_time(h, (double)e->ts_ns * 1e-9);
    if (r)
      st = pool_fail(GPUPOOL_ERR_OOM, "history of pool %s: %s", name, why);
  }
  free(ev);
  if (st != GPUPOOL_OK) {
    gpupool_history_free(h);
    return st;
  }
  h->info.dropped = dropped;
  hist_finish(h);
  *out = h;
  return GPUPOOL_OK;
}
