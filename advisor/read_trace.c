/* /trace documents (Chrome trace JSON, docs/trace.md): the allocation bars
 * ("b"/"e", cat "alloc", id = address), frees of allocations older than the
 * document ("i" "free"), and "empty_cache" instants, of one pool track
 * (tid 1000000 + 2 x pool id, named by its thread_name metadata). The
 * document is parsed whole with cJSON: traces from /trace are bounded by the
 * agent's rings (docs/trace.md), so they stay moderate. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "readers.h"

#define POOL_TID_BASE 1000000

typedef struct track {
  double pid, tid;
  char name[128];
  size_t allocs;
} track;

static uint64_t hex_arg(const cJSON *args, const char *key, int *ok) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
  if (cJSON_IsString(v)) {
    char *end;
    uint64_t x = strtoull(v->valuestring, &end, 0);
    if (end != v->valuestring && !*end)
      return x;
  } else if (cJSON_IsNumber(v) && v->valuedouble >= 0) {
    return (uint64_t)v->valuedouble;
  }
  *ok = 0;
  return 0;
}

static int is_pool_track(const cJSON *e, double *pid, double *tid) {
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "pid");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "tid");
  if (!cJSON_IsNumber(p) || !cJSON_IsNumber(t))
    return 0;
  *pid = p->valuedouble;
  *tid = t->valuedouble;
  return *tid >= POOL_TID_BASE && ((long long)*tid - POOL_TID_BASE) % 2 == 0;
}

static const char *str_item(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

gpupool_status read_trace(const char *buf, size_t len, const char *path, const char *pool,
                          gpupool_history **out) {
  const char *end = NULL;
  cJSON *doc = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
  if (!doc) {
    const char *at = cJSON_GetErrorPtr();
    size_t off = at && at >= buf && at <= buf + len ? (size_t)(at - buf) : len;
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: byte %zu: malformed or truncated JSON", path, off);
  }
  const cJSON *events =
      cJSON_IsArray(doc) ? doc : cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
  if (!cJSON_IsArray(events)) {
    cJSON_Delete(doc);
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: not a trace: no traceEvents array", path);
  }
  /* Pass 1: the pool tracks, their names and allocation counts. */
  track tracks[64];
  size_t nt = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    double pid, tid;
    if (!cJSON_IsObject(e) || !is_pool_track(e, &pid, &tid))
      continue;
    size_t i = 0;
    while (i < nt && !(tracks[i].pid == pid && tracks[i].tid == tid))
      i++;
    if (i == nt) {
      if (nt == sizeof tracks / sizeof *tracks)
        continue;
      tracks[nt++] = (track){pid, tid, "", 0};
    }
    const char *ph = str_item(e, "ph"), *name = str_item(e, "name");
    if (!strcmp(ph, "M") && !strcmp(name, "thread_name")) {
      /* "pool NAME (backend, strategy)" */
      const char *n = str_item(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
      if (!strncmp(n, "pool ", 5))
        n += 5;
      size_t l = strcspn(n, "(");
      while (l && n[l - 1] == ' ')
        l--;
      snprintf(tracks[i].name, sizeof tracks[i].name, "%.*s", (int)l, n);
    } else if (!strcmp(ph, "b") && !strcmp(str_item(e, "cat"), "alloc")) {
      tracks[i].allocs++;
    }
  }
  size_t pick = nt;
  for (size_t i = 0; i < nt; i++) {
    if (pool ? !strcmp(tracks[i].name, pool)
             : (pick == nt || tracks[i].allocs > tracks[pick].allocs))
      pick = i;
    if (pool && pick == i)
      break;
  }
  if (pick == nt || (!pool && tracks[pick].allocs == 0)) {
    cJSON_Delete(doc);
    return pool
               ? pool_fail(GPUPOOL_ERR_INVALID, "%s: no pool named '%s' in the trace", path, pool)
               : pool_fail(GPUPOOL_ERR_INVALID, "%s: no pool allocation events in the trace", path);
  }
  char src[320];
  snprintf(src, sizeof src, "%s (pool %s)", path, tracks[pick].name);
  gpupool_history *h = hist_new(src, "trace");
  if (!h) {
    cJSON_Delete(doc);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
  }
  gpupool_status st = GPUPOOL_OK;
  size_t index = 0;
  char err[160];
  cJSON_ArrayForEach(e, events) {
    index++;
    double pid, tid;
    if (!cJSON_IsObject(e) || !is_pool_track(e, &pid, &tid) || pid != tracks[pick].pid ||
        tid != tracks[pick].tid)
      continue;
    const char *ph = str_item(e, "ph"), *name = str_item(e, "name"), *cat = str_item(e, "cat");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
    int ok = 1, r = 0;
    const char *why = "out of host memory";
    if (!strcmp(cat, "alloc") && !strcmp(ph, "b")) {
      uint64_t id = hex_arg(e, "id", &ok), req = hex_arg(args, "requested", &ok);
      uint64_t stream = hex_arg(args, "stream", &ok);
      if (ok && req == 0)
        req = hex_arg(args, "size", &ok);
      if (ok && req) {
        r = hist_alloc(h, id, req, stream, err, sizeof err);
        why = err;
      } else {
        ok = 0;
      }
    } else if (!strcmp(cat, "alloc") && !strcmp(ph, "e")) {
      uint64_t id = hex_arg(e, "id", &ok);
      if (ok) {
        if (cJSON_GetObjectItemCaseSensitive(args, "deferred"))
          r = hist_record_stream(h, id, HIST_OTHER_STREAM) < 0;
        if (!r)
          r = hist_free(h, id) < 0;
      }
    } else if (!strcmp(cat, "alloc") && !strcmp(ph, "i") && !strcmp(name, "free")) {
      h->info.unmatched_frees++; /* allocated before the document's window */
      continue;
    } else if (!strcmp(ph, "i") && !strcmp(name, "empty_cache")) {
      r = hist_empty_cache(h);
    } else {
      continue;
    }
    if (!ok) {
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: traceEvents[%zu]: allocation event without a valid id, size or stream",
                     path, index - 1);
      break;
    }
    if (r) {
      st = pool_fail(GPUPOOL_ERR_INVALID, "%s: traceEvents[%zu]: %s", path, index - 1, why);
      break;
    }
    if (cJSON_IsNumber(ts))
      hist_note_time(h, ts->valuedouble * 1e-6);
  }
  cJSON_Delete(doc);
  if (st == GPUPOOL_OK && h->n_ops == 0)
    st = pool_fail(GPUPOOL_ERR_INVALID, "%s: no allocation events for pool %s", path,
                   tracks[pick].name);
  if (st != GPUPOOL_OK) {
    gpupool_history_free(h);
    return st;
  }
  hist_finish(h);
  *out = h;
  return GPUPOOL_OK;
}
