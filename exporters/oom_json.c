/* oom_json.h: OOM reports as JSON (cJSON). */
#include "oom_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/json_text.h"
#include "json_u64.h"
#include "stat_families.h"

/* cJSON reports failures through NULL returns: `ok` collects them. */
typedef struct jb {
  int ok;
} jb;

static void num(jb *j, cJSON *o, const char *k, double v) {
  if (!cJSON_AddNumberToObject(o, k, v))
    j->ok = 0;
}

/* A time since 1970 (ns or us) as its digits (json_u64.h). */
static void integer(jb *j, cJSON *o, const char *k, uint64_t v) {
  if (!json_add_u64(o, k, v))
    j->ok = 0;
}

static void text(jb *j, cJSON *o, const char *k, const char *v) {
  if (!json_add_text(o, k, v))
    j->ok = 0;
}

static void hex(jb *j, cJSON *o, const char *k, uint64_t v) {
  char s[24];
  snprintf(s, sizeof s, "0x%" PRIx64, v);
  text(j, o, k, s);
}

static void flag(jb *j, cJSON *o, const char *k, int v) {
  if (!cJSON_AddBoolToObject(o, k, v))
    j->ok = 0;
}

static cJSON *obj(jb *j, cJSON *parent, const char *k) {
  cJSON *o = cJSON_AddObjectToObject(parent, k);
  if (!o)
    j->ok = 0;
  return o;
}

static cJSON *arr(jb *j, cJSON *parent, const char *k) {
  cJSON *a = cJSON_AddArrayToObject(parent, k);
  if (!a)
    j->ok = 0;
  return a;
}

static cJSON *push(jb *j, cJSON *a) {
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddItemToArray(a, o)) {
    cJSON_Delete(o);
    j->ok = 0;
    return NULL;
  }
  return o;
}

static const char *answer(oom_answer a) {
  switch (a) {
  case OOM_YES:
    return "yes";
  case OOM_NO:
    return "no";
  case OOM_MAYBE:
    return "maybe";
  default:
    return "not_applicable";
  }
}

static void iso_time(uint64_t ns, char *out, size_t n) {
  time_t s = (time_t)(ns / 1000000000u);
  struct tm tm;
  gmtime_r(&s, &tm);
  char base[32];
  strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, n, "%s.%06" PRIu64 "Z", base, ns % 1000000000u / 1000u);
}

/* What the list shows of a report, and the head of the whole one. */
static void summary(jb *j, cJSON *o, const pool_oom_report *r) {
  char t[48], link[64];
  num(j, o, "id", (double)r->id);
  iso_time(r->time_ns, t, sizeof t);
  text(j, o, "time", t);
  integer(j, o, "time_unix_ns", r->time_ns);
  text(j, o, "pool", r->cap.name);
  num(j, o, "pool_id", r->cap.pool_id);
  num(j, o, "device", r->cap.device);
  num(j, o, "size", (double)r->size);
  num(j, o, "reserved_bytes", (double)r->stats.reserved_bytes[GPUPOOL_STAT_ALL].current);
  num(j, o, "allocated_bytes", (double)r->stats.allocated_bytes[GPUPOOL_STAT_ALL].current);
  flag(j, o, "larger_than_device", r->ex.larger_than_device);
  text(j, o, "message", r->message);
  snprintf(link, sizeof link, "/oom/%" PRIu64, r->id);
  text(j, o, "url", link);
}

static void explanation(jb *j, cJSON *root, const pool_oom_report *r) {
  const oom_explanation *e = &r->ex;
  cJSON *x = obj(j, root, "explanation");
  if (!x)
    return;
  num(j, x, "need_bytes", (double)e->need);
  num(j, x, "free_in_pool_bytes", (double)e->free_in_pool);
  num(j, x, "free_blocks", (double)e->free_blocks);
  num(j, x, "largest_free_block_bytes", (double)e->largest_free);
  num(j, x, "external_fragmentation", e->external_fragmentation);
  num(j, x, "inactive_split_bytes", (double)e->inactive_split_bytes);
  if (e->outside_known)
    num(j, x, "outside_pool_bytes", (double)e->outside_pool);
  else if (!cJSON_AddNullToObject(x, "outside_pool_bytes"))
    j->ok = 0;
  num(j, x, "shortfall_bytes", (double)e->shortfall);
  flag(j, x, "device_had_room", e->device_had_room);
  flag(j, x, "larger_than_device", e->larger_than_device);
  flag(j, x, "segment_larger_than_device", e->segment_larger_than_device);
  flag(j, x, "injected_fault", e->injected_fault);
  num(j, x, "largest_usable_free_block_bytes", (double)e->usable_largest);
  num(j, x, "other_streams_free_bytes", (double)e->other_stream_free);
  num(j, x, "other_streams_largest_free_block_bytes", (double)e->other_stream_largest);
  num(j, x, "other_size_pool_free_bytes", (double)e->other_pool_free);
  num(j, x, "other_size_pool_largest_free_block_bytes", (double)e->other_pool_largest);
  num(j, x, "strategy_refused_free_bytes", (double)e->rules_free);
  num(j, x, "strategy_refused_largest_free_block_bytes", (double)e->rules_largest);
  if (r->has_limit) {
    num(j, x, "limit_bytes", (double)r->limit);
    num(j, x, "memory_fraction", r->memory_fraction);
  } else if (!cJSON_AddNullToObject(x, "limit_bytes") ||
             !cJSON_AddNullToObject(x, "memory_fraction")) {
    j->ok = 0;
  }
  flag(j, x, "limit_refused", r->limit_refused);
  cJSON *rem = obj(j, x, "remedies");
  if (!rem)
    return;
  if (r->limit_refused) { /* the least fraction that allows it; null: none does */
    cJSON *mf = obj(j, rem, "memory_fraction");
    if (mf && e->fraction_needed > 0)
      num(j, mf, "at_least", e->fraction_needed);
    else if (mf && !cJSON_AddNullToObject(mf, "at_least"))
      j->ok = 0;
  }
  cJSON *ec = obj(j, rem, "empty_cache");
  if (ec) {
    num(j, ec, "frees_bytes", (double)e->empty_cache_frees);
    text(j, ec, "enough", answer(e->empty_cache_enough));
  }
  cJSON *xs = obj(j, rem, "expandable_segments");
  if (xs) {
    text(j, xs, "would_serve", answer(e->expandable));
    num(j, xs, "pool_bytes_low", (double)e->expandable_low);
    num(j, xs, "pool_bytes_high", (double)e->expandable_high);
    num(j, xs, "room_bytes", (double)e->expandable_room);
  }
  if (e->split_limit_mb) {
    cJSON *ms = obj(j, rem, "max_split_size_mb");
    if (ms) {
      num(j, ms, "value", (double)e->split_limit_mb);
      num(j, ms, "at_most_in_splits_bytes", (double)e->split_at_most);
      num(j, ms, "unstranded_bytes", (double)e->split_unstranded);
    }
  }
  num(j, rem, "free_outside_pool_bytes", (double)e->free_outside_to_fit);
  text(j, rem, "advice", "/advice");
}

static void stats(jb *j, cJSON *root, const gpupool_stats *st) {
  cJSON *o = obj(j, root, "stats");
  if (!o)
    return;
  stat_family v[STAT_FAMILIES];
  stat_families(st, v);
  char key[96];
  for (size_t i = 0; i < STAT_FAMILIES; i++)
    for (int t = 0; t < GPUPOOL_STAT_TYPES; t++) {
      snprintf(key, sizeof key, "%s.%s.current", v[i].name, stat_type_name(t));
      num(j, o, key, (double)v[i].s[t].current);
      snprintf(key, sizeof key, "%s.%s.peak", v[i].name, stat_type_name(t));
      num(j, o, key, (double)v[i].s[t].peak);
    }
  num(j, o, "num_alloc_retries", (double)st->num_alloc_retries);
  num(j, o, "num_ooms", (double)st->num_ooms);
  num(j, o, "num_device_alloc", (double)st->num_device_alloc);
  num(j, o, "num_device_free", (double)st->num_device_free);
  num(j, o, "largest_free_block", (double)st->largest_free_block);
  num(j, o, "free_blocks", (double)st->free_blocks);
  num(j, o, "pending_free_blocks", (double)st->pending_free_blocks);
}

static void segments(jb *j, cJSON *root, const pool_capture *c) {
  cJSON *a = arr(j, root, "segments");
  for (size_t i = 0; a && i < c->nsegs; i++) {
    const pool_capture_segment *s = &c->segs[i];
    cJSON *o = push(j, a);
    if (!o)
      return;
    hex(j, o, "address", s->info.addr);
    num(j, o, "size", (double)s->info.size);
    num(j, o, "mapped", (double)s->info.mapped);
    num(j, o, "allocated", (double)s->info.allocated);
    num(j, o, "active", (double)s->info.active);
    num(j, o, "requested", (double)s->info.requested);
    hex(j, o, "stream", s->info.stream);
    text(j, o, "pool", s->info.is_large ? "large" : "small");
    flag(j, o, "expandable", s->expandable);
    cJSON *bl = arr(j, o, "blocks");
    for (size_t k = 0; bl && k < s->info.nblocks; k++) {
      const pool_block_info *b = &c->blocks[s->first_block + k];
      cJSON *bo = push(j, bl);
      if (!bo)
        return;
      hex(j, bo, "address", b->addr);
      num(j, bo, "size", (double)b->size);
      num(j, bo, "requested", (double)b->requested);
      text(j, bo, "state", b->state);
      if (b->unmapped) /* as /snapshot: bytes of its pages not mapped (expandable segments) */
        num(j, bo, "unmapped", (double)b->unmapped);
    }
  }
}

static const char *event_name(int type) {
  static const char *const names[] = {
      "?",           "alloc", "free", "free_completed", "segment_alloc", "segment_free",
      "empty_cache", "gc",    "oom"};
  return type > 0 && type <= EV_OOM ? names[type] : "?";
}

static void events(jb *j, cJSON *root, const pool_capture *c) {
  cJSON *a = arr(j, root, "events");
  for (size_t i = 0; a && i < c->nevents; i++) {
    const pool_event *e = &c->events[i];
    cJSON *o = push(j, a);
    if (!o)
      return;
    integer(j, o, "time_us", e->ts_ns / 1000);
    text(j, o, "type", event_name(e->type));
    if (e->flags & EVF_PAGES)
      flag(j, o, "pages", 1);
    if (e->flags & EVF_DEFERRED)
      flag(j, o, "deferred", 1);
    if (e->type == EV_OOM) { /* no address: the pool's state (event_ring.h) */
      num(j, o, "size", (double)e->oom.requested_bytes);
      num(j, o, "device_free", (double)e->oom.device_free);
      continue;
    }
    hex(j, o, "addr", e->addr);
    num(j, o, "size", (double)e->size);
    if (e->type == EV_ALLOC || e->type == EV_FREE)
      num(j, o, "requested", (double)e->requested);
    hex(j, o, "stream", e->stream);
  }
  num(j, root, "events_lost", (double)c->events_lost);
}

static char *finish(cJSON *root, jb *j) {
  char *s = j->ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return s;
}

char *oom_json_report(const pool_oom_report *r) {
  jb j = {1};
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return NULL;
  summary(&j, root, r);
  cJSON *rq = obj(&j, root, "request");
  if (rq) {
    num(&j, rq, "size", (double)r->size);
    num(&j, rq, "rounded", (double)r->rounded);
    num(&j, rq, "segment_size", (double)r->segment_size);
    hex(&j, rq, "stream", r->stream);
  }
  cJSON *po = obj(&j, root, "pool_info");
  if (po) {
    text(&j, po, "name", r->cap.name);
    num(&j, po, "id", r->cap.pool_id);
    text(&j, po, "backend", r->cap.backend);
    text(&j, po, "strategy", r->cap.strategy);
    flag(&j, po, "expandable_segments", r->cap.expandable);
    if (r->cap.max_split_size != UINT64_MAX)
      num(&j, po, "max_split_size", (double)r->cap.max_split_size);
  }
  cJSON *dv = obj(&j, root, "device_memory");
  if (dv) {
    flag(&j, dv, "known", r->device_known);
    if (r->device_known) {
      num(&j, dv, "free_bytes", (double)r->device_free);
      num(&j, dv, "total_bytes", (double)r->device_total);
      num(&j, dv, "age_seconds", (double)r->device_age_ns / 1e9);
      text(&j, dv, "source", r->device_source);
    }
  }
  cJSON *ot = obj(&j, root, "other_cuda_memory");
  if (ot) {
    flag(&j, ot, "known", r->other_known);
    if (r->other_known) {
      num(&j, ot, "bytes", (double)r->other_bytes);
      text(&j, ot, "source", r->other_source);
    }
  }
  explanation(&j, root, r);
  stats(&j, root, &r->stats);
  flag(&j, root, "truncated", r->cap.truncated);
  num(&j, root, "segments_total", (double)r->cap.t.segments);
  num(&j, root, "blocks_total", (double)r->cap.t.blocks);
  segments(&j, root, &r->cap);
  events(&j, root, &r->cap);
  return finish(root, &j);
}

char *oom_json_list(const pool_oom_report *const *rs, size_t n) {
  jb j = {1};
  cJSON *root = cJSON_CreateArray();
  if (!root)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    cJSON *o = push(&j, root);
    if (o)
      summary(&j, o, rs[i]);
  }
  return finish(root, &j);
}
