/* PyTorch memory snapshots (torch.cuda.memory._dump_snapshot(): a pickled
 * dict whose "device_traces" holds, per device, the allocator's trace
 * entries: dicts with "action", "addr", "size", "stream", "time_us" and
 * "frames"). "alloc" carries the requested size. A "free_requested" whose
 * "free_completed" is not the next entry waited on other streams' events
 * (record_stream): it is replayed as a record_stream and a free. Segment,
 * OOM and snapshot entries are the allocator's own doing, not the job's
 * requests, and are skipped. An entry's fields are read in one pass over
 * its keys, and an entry of more than MAX_ENTRY_KEYS keys is refused: the
 * memo lets a document name one entry millions of times, 2 bytes each, so
 * the work per entry must not grow with the entry. */
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "parse_u64.h"
#include "pickle.h"
#include "readers.h"

/* A trace entry holds about ten keys (action, addr, size, stream, time_us,
 * frames, and a few optional ones). */
#define MAX_ENTRY_KEYS 64

/* The fields of a trace entry the reader uses; NULL where absent. */
typedef struct entry {
  const pv *action, *addr, *size, *stream, *time_us;
} entry;

/* The fields of e, read in one pass; of a key given twice, the last (as
 * Python keeps it). -1: e is no dict of at most MAX_ENTRY_KEYS keys. */
static int read_entry(const pv *e, entry *out) {
  *out = (entry){0};
  if (!e || e->type != PV_DICT || e->len > MAX_ENTRY_KEYS)
    return -1;
  for (uint32_t i = 0; i < e->len; i++) {
    const pv *k = e->items[2 * i], *v = e->items[2 * i + 1];
    if (pv_is_str(k, "action"))
      out->action = v;
    else if (pv_is_str(k, "addr"))
      out->addr = v;
    else if (pv_is_str(k, "size"))
      out->size = v;
    else if (pv_is_str(k, "stream"))
      out->stream = v;
    else if (pv_is_str(k, "time_us"))
      out->time_us = v;
  }
  return 0;
}

static int int_of(const pv *v, uint64_t *out) {
  if (!v || v->type != PV_INT || v->big || v->i < 0)
    return -1;
  *out = (uint64_t)v->i;
  return 0;
}

gpupool_status read_torch(const unsigned char *buf, size_t len, const char *path,
                          const char *device, gpupool_history **out) {
  char err[200];
  pickle_doc *doc;
  int loaded = pickle_load(buf, len, &doc, err, sizeof err);
  if (loaded != 0)
    return pool_fail(loaded == PICKLE_HOST_OOM ? GPUPOOL_ERR_HOST_OOM : GPUPOOL_ERR_INVALID,
                     "%s: %s", path, err);
  const pv *root = pickle_root(doc);
  const pv *traces = pv_get(root, "device_traces");
  gpupool_status st = GPUPOOL_OK;
  gpupool_history *h = NULL;
  if (!traces || traces->type != PV_LIST) {
    st = pool_fail(GPUPOOL_ERR_INVALID,
                   "%s: not a PyTorch memory snapshot: no device_traces list (byte %llu)", path,
                   (unsigned long long)(root ? root->offset : 0));
    goto out;
  }
  size_t pick = traces->len;
  if (device) {
    uint64_t d;
    if (parse_u64(device, U64_DECIMAL, &d) || d >= traces->len) {
      st = pool_fail(GPUPOOL_ERR_INVALID, "%s: no device '%s' in device_traces (%u devices)", path,
                     device, traces->len);
      goto out;
    }
    pick = (size_t)d;
  } else {
    for (size_t i = 0; i < traces->len; i++)
      if (traces->items[i]->type == PV_LIST &&
          (pick == traces->len || traces->items[i]->len > traces->items[pick]->len))
        pick = i;
  }
  const pv *tr = pick < traces->len ? traces->items[pick] : NULL;
  if (!tr || tr->type != PV_LIST) {
    st = pool_fail(GPUPOOL_ERR_INVALID, "%s: device_traces holds no trace list", path);
    goto out;
  }
  char src[320];
  snprintf(src, sizeof src, "%s (device %zu)", path, pick);
  if (!(h = hist_new(src, "torch"))) {
    st = pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
    goto out;
  }
  for (uint32_t i = 0; i < tr->len; i++) {
    const pv *e = tr->items[i];
    entry f;
    if (read_entry(e, &f) || !f.action || f.action->type != PV_STR) {
      char why[64] = "no action";
      if (e->type == PV_DICT && e->len > MAX_ENTRY_KEYS)
        snprintf(why, sizeof why, "%u keys, more than %d", e->len, MAX_ENTRY_KEYS);
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: byte %llu: device_traces[%zu][%u] is not a trace entry (%s)", path,
                     (unsigned long long)e->offset, pick, i, why);
      goto out;
    }
    const pv *action = f.action;
    int is_alloc = pv_is_str(action, "alloc"), is_free = pv_is_str(action, "free_requested");
    if (!is_alloc && !is_free)
      continue; /* free_completed, segment_*, oom, snapshot, ... */
    uint64_t addr, size = 0, stream = 0, t;
    const pv *sv = f.stream;
    if (int_of(f.addr, &addr) || (is_alloc && int_of(f.size, &size)) || (is_alloc && size == 0) ||
        (sv && sv->type != PV_NONE && int_of(sv, &stream))) {
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: byte %llu: device_traces[%zu][%u] (%.*s): addr, size or stream is not "
                     "a non-negative integer",
                     path, (unsigned long long)e->offset, pick, i, (int)action->len, action->s);
      goto out;
    }
    int r = 0;
    if (is_alloc) {
      r = hist_alloc(h, addr, size, stream, err, sizeof err);
    } else {
      entry next;
      uint64_t next_addr;
      int completed_now = i + 1 < tr->len && !read_entry(tr->items[i + 1], &next) &&
                          pv_is_str(next.action, "free_completed") &&
                          !int_of(next.addr, &next_addr) && next_addr == addr;
      if (!completed_now && i + 1 < tr->len &&
          hist_is_live(h, addr)) /* waited on another stream's work */
        r = hist_record_stream(h, addr, HIST_OTHER_STREAM, err, sizeof err);
      if (r >= 0)
        r = hist_free(h, addr);
    }
    if (r < 0) {
      st = pool_fail(hist_status(r), "%s: byte %llu: device_traces[%zu][%u]: %s", path,
                     (unsigned long long)e->offset, pick, i,
                     r == HIST_HOST_OOM ? "out of host memory" : err);
      goto out;
    }
    if (!int_of(f.time_us, &t))
      hist_note_time(h, (double)t * 1e-6);
  }
  if (h->n_ops == 0)
    st = pool_fail(GPUPOOL_ERR_INVALID,
                   "%s: the trace of device %zu has no allocations (was "
                   "_record_memory_history on?)",
                   path, pick);
out:
  pickle_free(doc);
  if (st != GPUPOOL_OK) {
    gpupool_history_free(h);
    return st;
  }
  hist_finish(h);
  *out = h;
  return GPUPOOL_OK;
}
