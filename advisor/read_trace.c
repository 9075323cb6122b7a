/* /trace documents (Chrome trace JSON, docs/trace.md): the allocation bars
 * ("b"/"e", cat "alloc", id = address), frees of allocations older than the
 * document ("i" "free"), and "empty_cache" instants, of one pool track
 * (tid 1000000 + 2 x pool id, named by its thread_name metadata, on the
 * process of its device: pid = device ordinal + 1; pool names repeat across
 * devices, so NAME@DEVICE names one pool of a multi-device trace). The
 * document is parsed whole with cJSON: traces from /trace are bounded by the
 * agent's rings (docs/trace.md), so they stay moderate. JSON numbers are
 * doubles: each is range-checked before it is converted to an integer. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/array_grow.h"
#include "core/errors.h"
#include "json_syntax.h"
#include "parse_u64.h"
#include "readers.h"

#define POOL_TID_BASE 1000000
#define HOST_PID      65536 /* docs/trace.md: records of no device */

typedef struct track {
  int64_t pid, tid;
  char name[128];
  size_t allocs;
} track;

/* An id, size or stream: a string of "0x" and hex digits (as the agent
 * writes ids and streams; docs/advisor.md) or a JSON number that is an
 * integer in [0, 2^64). Else 0, and *bad, when still NULL, names the field
 * (field: key as the error shows it). */
static uint64_t u64_arg(const cJSON *obj, const char *key, const char *field, const char **bad) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  uint64_t x;
  if (cJSON_IsString(v) && parse_u64(v->valuestring, U64_HEX, &x) == 0)
    return x;
  if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 0x1p64 &&
      v->valuedouble == (double)(uint64_t)v->valuedouble)
    return (uint64_t)v->valuedouble;
  if (!*bad)
    *bad = field;
  return 0;
}

/* The integer JSON number v holds, where it is one of at most 2^53 in
 * magnitude (which a double holds exactly). */
static int exact_integer(const cJSON *v, int64_t *out) {
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= -0x1p53 && v->valuedouble <= 0x1p53) ||
      v->valuedouble != (double)(int64_t)v->valuedouble)
    return 0;
  *out = (int64_t)v->valuedouble;
  return 1;
}

/* Whether e is on a pool track (tid POOL_TID_BASE + 2 x pool id), and
 * which. A pid or tid that is no integer names no track the agent writes. */
static int is_pool_track(const cJSON *e, int64_t *pid, int64_t *tid) {
  return exact_integer(cJSON_GetObjectItemCaseSensitive(e, "pid"), pid) &&
         exact_integer(cJSON_GetObjectItemCaseSensitive(e, "tid"), tid) && *tid >= POOL_TID_BASE &&
         (*tid - POOL_TID_BASE) % 2 == 0;
}

/* The device of a track's process as --pool writes it: the ordinal (pid - 1),
 * or "host" for the process of no device. */
static void device_of(int64_t pid, char *out, size_t n) {
  if (pid == HOST_PID)
    snprintf(out, n, "host");
  else
    snprintf(out, n, "%lld", (long long)pid - 1);
}

/* Whether track t is the one sel names: "NAME@DEVICE" (the pool NAME on
 * that device) when split is set, else "NAME" on any device. */
static int selects(const track *t, const char *sel, int split) {
  if (!split)
    return !strcmp(t->name, sel);
  const char *at = strrchr(sel, '@');
  char dev[32];
  device_of(t->pid, dev, sizeof dev);
  return strlen(t->name) == (size_t)(at - sel) && !strncmp(t->name, sel, (size_t)(at - sel)) &&
         !strcmp(at + 1, dev);
}

/* How many tracks sel selects (selects), the first in *first. */
static size_t select_tracks(const track *tracks, size_t nt, const char *sel, int split,
                            size_t *first) {
  size_t n = 0;
  for (size_t i = 0; i < nt; i++)
    if (selects(&tracks[i], sel, split) && n++ == 0)
      *first = i;
  return n;
}

/* "NAME@DEVICE (N allocations), ..." of the tracks sel selects (all: sel NULL). */
static void list_tracks(const track *tracks, size_t nt, const char *sel, int split, char *list,
                        size_t n) {
  size_t o = 0, shown = 0;
  list[0] = 0;
  for (size_t i = 0; i < nt && o < n; i++) {
    if (sel && !selects(&tracks[i], sel, split))
      continue;
    char dev[32];
    device_of(tracks[i].pid, dev, sizeof dev);
    if (shown++ == 8) {
      snprintf(list + o, n - o, ", ...");
      break;
    }
    o += (size_t)snprintf(list + o, n - o, "%s%s@%s (%zu allocation%s)", shown > 1 ? ", " : "",
                          tracks[i].name, dev, tracks[i].allocs, tracks[i].allocs == 1 ? "" : "s");
  }
}

/* The pool tracks in the order the document first names them, and an index
 * of them by (pid, tid), open addressing over track number + 1 (0: empty),
 * its size a power of two over twice the tracks: an agent of 1024 pools on
 * each of several devices writes thousands, and each event looks its up. */
typedef struct track_set {
  track *tracks;
  size_t n, cap;
  size_t *index;
  size_t index_cap;
} track_set;

static size_t track_hash(int64_t pid, int64_t tid) {
  uint64_t x = (uint64_t)pid * 0x9e3779b97f4a7c15ULL ^ (uint64_t)tid;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

static void index_track(track_set *s, size_t t) {
  size_t mask = s->index_cap - 1, i = track_hash(s->tracks[t].pid, s->tracks[t].tid) & mask;
  while (s->index[i])
    i = (i + 1) & mask;
  s->index[i] = t + 1;
}

/* The track (pid, tid), added (unnamed, no allocations) if new; NULL when
 * the host is out of memory. */
static track *track_of(track_set *s, int64_t pid, int64_t tid) {
  if (s->index_cap)
    for (size_t mask = s->index_cap - 1, i = track_hash(pid, tid) & mask; s->index[i];
         i = (i + 1) & mask) {
      track *t = &s->tracks[s->index[i] - 1];
      if (t->pid == pid && t->tid == tid)
        return t;
    }
  if (array_grow((void **)&s->tracks, &s->cap, s->n + 1, sizeof *s->tracks, 16) != 0)
    return NULL;
  if (2 * (s->n + 1) > s->index_cap) {
    size_t cap = s->index_cap ? 2 * s->index_cap : 64;
    size_t *index = calloc(cap, sizeof *index);
    if (!index)
      return NULL;
    free(s->index);
    s->index = index;
    s->index_cap = cap;
    for (size_t t = 0; t < s->n; t++)
      index_track(s, t);
  }
  s->tracks[s->n] = (track){pid, tid, "", 0};
  index_track(s, s->n);
  return &s->tracks[s->n++];
}

/* An "e" event's args.deferred, as the trace writer gives it: absent or 0
 * (a free), 1 (a free that waited on other streams); true and false are
 * taken too. -1 for anything else. */
static int deferred_arg(const cJSON *args) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, "deferred");
  if (!v || cJSON_IsFalse(v))
    return 0;
  if (cJSON_IsTrue(v))
    return 1;
  if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1))
    return v->valuedouble == 1;
  return -1;
}

static const char *str_item(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

gpupool_status read_trace(const char *buf, size_t len, size_t marked, const char *path,
                          const char *pool, gpupool_history **out) {
  size_t off;
  if (!json_document_ok(buf, len, &off)) {
    /* offsets count from the file's first byte: a skipped byte-order mark
     * (spaces here) counts, which an editor that hides it does not show */
    const char *counted =
        marked ? " (from the start of the file, its byte-order mark counted)" : "";
    if (len - off >= UTF8_BOM_LEN && !memcmp(buf + off, UTF8_BOM, UTF8_BOM_LEN))
      return pool_fail(GPUPOOL_ERR_INVALID,
                       "%s: byte %zu%s: a UTF-8 byte-order mark inside the document (only the "
                       "file's first bytes may be one): malformed JSON",
                       path, off, counted);
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: byte %zu%s: %s", path, off, counted,
                     off == len ? "truncated JSON" : "malformed JSON");
  }
  cJSON *doc = cJSON_ParseWithLength(buf, len);
  if (!doc) /* well-formed (above): cJSON ran out of memory */
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory parsing the JSON", path);
  const cJSON *events =
      cJSON_IsArray(doc) ? doc : cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
  if (!cJSON_IsArray(events)) {
    cJSON_Delete(doc);
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: not a trace: no traceEvents array", path);
  }
  /* Pass 1: the pool tracks, their names and allocation counts. */
  track_set set = {0};
  gpupool_status st = GPUPOOL_OK;
  gpupool_history *h = NULL;
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    int64_t pid, tid;
    if (!cJSON_IsObject(e) || !is_pool_track(e, &pid, &tid))
      continue;
    track *t = track_of(&set, pid, tid);
    if (!t) {
      st = pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
      goto done;
    }
    const char *ph = str_item(e, "ph"), *name = str_item(e, "name");
    if (!strcmp(ph, "M") && !strcmp(name, "thread_name")) {
      /* "pool NAME (backend, strategy)" */
      const char *n = str_item(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
      if (!strncmp(n, "pool ", 5))
        n += 5;
      size_t l = strlen(n); /* up to the last " (": names may hold parentheses */
      for (const char *q = n; (q = strstr(q, " (")); q++)
        l = (size_t)(q - n);
      while (l && n[l - 1] == ' ')
        l--;
      snprintf(t->name, sizeof t->name, "%.*s", (int)l, n);
    } else if (!strcmp(ph, "b") && !strcmp(str_item(e, "cat"), "alloc")) {
      t->allocs++;
    }
  }
  const track *tracks = set.tracks;
  size_t nt = set.n, pick = nt, matches = 0;
  int split = pool && strrchr(pool, '@');
  if (pool) {
    /* NAME@DEVICE first, then the whole selector as a name (which may
     * itself hold an '@'): a name on several devices must be chosen. */
    matches = select_tracks(tracks, nt, pool, split, &pick);
    if (!matches && split)
      matches = select_tracks(tracks, nt, pool, split = 0, &pick);
  } else {
    for (size_t i = 0; i < nt; i++)
      if (pick == nt || tracks[i].allocs > tracks[pick].allocs)
        pick = i;
  }
  if (matches > 1) {
    char list[640], dev[32];
    list_tracks(tracks, nt, pool, split, list, sizeof list);
    device_of(tracks[pick].pid, dev, sizeof dev);
    st = pool_fail(GPUPOOL_ERR_INVALID,
                   "%s: %zu pools match '%s': %s; choose one as NAME@DEVICE (gpupool-advise "
                   "--pool %s@%s)",
                   path, matches, pool, list, tracks[pick].name, dev);
    goto done;
  }
  if (pick == nt || (!pool && tracks[pick].allocs == 0)) {
    char list[640];
    list_tracks(tracks, nt, NULL, 0, list, sizeof list);
    st = pool ? pool_fail(GPUPOOL_ERR_INVALID, "%s: no pool named '%s' in the trace (pools: %s)",
                          path, pool, nt ? list : "none")
              : pool_fail(GPUPOOL_ERR_INVALID, "%s: no pool allocation events in the trace", path);
    goto done;
  }
  int devices = 0; /* pools of more than one device: the source names the device */
  for (size_t i = 0; i < nt; i++)
    devices |= tracks[i].pid != tracks[pick].pid;
  char src[320], dev[32];
  device_of(tracks[pick].pid, dev, sizeof dev);
  if (devices)
    snprintf(src, sizeof src, "%s (pool %s@%s)", path, tracks[pick].name, dev);
  else
    snprintf(src, sizeof src, "%s (pool %s)", path, tracks[pick].name);
  if (!(h = hist_new(src, "trace"))) {
    st = pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
    goto done;
  }
  size_t index = 0;
  char err[160];
  cJSON_ArrayForEach(e, events) {
    index++;
    int64_t pid, tid;
    if (!cJSON_IsObject(e) || !is_pool_track(e, &pid, &tid) || pid != tracks[pick].pid ||
        tid != tracks[pick].tid)
      continue;
    const char *ph = str_item(e, "ph"), *name = str_item(e, "name"), *cat = str_item(e, "cat");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
    const char *bad = NULL; /* the first field that is no number of the kind */
    int r = 0;
    if (!strcmp(cat, "alloc") && !strcmp(ph, "b")) {
      uint64_t id = u64_arg(e, "id", "id", &bad);
      uint64_t req = u64_arg(args, "requested", "args.requested", &bad);
      uint64_t stream = u64_arg(args, "stream", "args.stream", &bad);
      if (!bad && req == 0)
        req = u64_arg(args, "size", "args.size", &bad);
      if (!bad && req == 0)
        bad = "args.requested and args.size are 0";
      if (!bad)
        r = hist_alloc(h, id, req, stream, err, sizeof err);
    } else if (!strcmp(cat, "alloc") && !strcmp(ph, "e")) {
      uint64_t id = u64_arg(e, "id", "id", &bad);
      int deferred = deferred_arg(args);
      if (!bad && deferred < 0) {
        st = pool_fail(GPUPOOL_ERR_INVALID,
                       "%s: traceEvents[%zu]: args.deferred is not 0, 1, false or true", path,
                       index - 1);
        break;
      }
      if (!bad && deferred && hist_is_live(h, id))
        r = hist_record_stream(h, id, HIST_OTHER_STREAM, err, sizeof err);
      if (!bad && r >= 0)
        r = hist_free(h, id);
    } else if (!strcmp(cat, "alloc") && !strcmp(ph, "i") && !strcmp(name, "free")) {
      h->info.unmatched_frees++; /* allocated before the document's window */
      continue;
    } else if (!strcmp(ph, "i") && !strcmp(name, "empty_cache")) {
      r = hist_empty_cache(h);
    } else {
      continue;
    }
    if (bad) {
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: traceEvents[%zu]: allocation event without a valid id, size or stream: "
                     "%s (each a string of 0x and hex digits or an integer in [0, 2^64), the "
                     "size above 0)",
                     path, index - 1, bad);
      break;
    }
    if (r < 0) {
      st = pool_fail(hist_status(r), "%s: traceEvents[%zu]: %s", path, index - 1,
                     r == HIST_HOST_OOM ? "out of host memory" : err);
      break;
    }
    if (cJSON_IsNumber(ts))
      hist_note_time(h, ts->valuedouble * 1e-6);
  }
  if (st == GPUPOOL_OK && h->n_ops == 0)
    st = pool_fail(GPUPOOL_ERR_INVALID, "%s: no allocation events for pool %s", path,
                   tracks[pick].name);
done:
  cJSON_Delete(doc);
  free(set.tracks);
  free(set.index);
  if (st != GPUPOOL_OK) {
    gpupool_history_free(h);
    return st;
  }
  hist_finish(h);
  *out = h;
  return GPUPOOL_OK;
}
