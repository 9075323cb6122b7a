/* GET /snapshot?pool=LABEL: every pool's segments and blocks with its stats
 * (or the pools of that label, pool_label.h), as JSON built with cJSON. Stats use the flat dotted
 * keys of torch.cuda.memory_stats ("allocated_bytes.all.current", ...). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/array_grow.h"
#include "core/json_text.h"
#include "endpoint.h"
#include "exporters/json_u64.h"
#include "exporters/stat_families.h"
#include "metrics.h"
#include "pool_label.h"
#include "pool/pool_view.h"
#include "pool/registry.h"

/* What one /snapshot copies under the registry lock (pool_walk copies each
 * pool's segments under its own locks); the JSON is built after the lock
 * is released. */
typedef struct snap_pool {
  char name[128];
  char label[POOL_LABEL_MAX]; /* the pool label of /metrics: name, or name#2, ... */
  uint32_t id;
  int device;
  const char *backend, *strategy; /* static strings */
  gpupool_stats stats;
  size_t first_segment, nsegments;
} snap_pool;

typedef struct snap_segment {
  pool_segment_info info;
  size_t first_block, nblocks;
} snap_segment;

typedef struct collected {
  const char *pool; /* a pool label (pool_label.h); NULL: every pool */
  int device;       /* -1: every device */
  pool_labeler labeler;
  snap_pool *pools;
  size_t npools, cap_pools;
  snap_segment *segments;
  size_t nsegments, cap_segments;
  pool_block_info *blocks;
  size_t nblocks, cap_blocks;
  int failed;
} collected;

typedef struct build {
  int failed;
} build;

static void add_hex(cJSON *obj, const char *key, uint64_t v, build *b) {
  char hex[24];
  snprintf(hex, sizeof hex, "0x%" PRIx64, v);
  if (!cJSON_AddStringToObject(obj, key, hex))
    b->failed = 1;
}

static void add_num(cJSON *obj, const char *key, double v, build *b) {
  if (!cJSON_AddNumberToObject(obj, key, v))
    b->failed = 1;
}

/* Microseconds since 1970 as digits (json_u64.h). */
static void add_time_us(cJSON *obj, const char *key, uint64_t us, build *b) {
  if (!json_add_u64(obj, key, us))
    b->failed = 1;
}

static void add_stats(cJSON *obj, const gpupool_stats *st, build *b) {
  static const char *const parts[] = {"current", "peak", "allocated", "freed"};
  stat_family stats[STAT_FAMILIES];
  stat_families(st, stats);
  char key[96];
  for (size_t i = 0; i < STAT_FAMILIES; i++)
    for (int t = 0; t < GPUPOOL_STAT_TYPES; t++) {
      const gpupool_stat *s = &stats[i].s[t];
      const int64_t v[4] = {s->current, s->peak, s->allocated, s->freed};
      for (int k = 0; k < 4; k++) {
        snprintf(key, sizeof key, "%s.%s.%s", stats[i].name, stat_type_name(t), parts[k]);
        add_num(obj, key, (double)v[k], b);
      }
    }
  add_num(obj, "num_alloc_retries", (double)st->num_alloc_retries, b);
  add_num(obj, "num_ooms", (double)st->num_ooms, b);
  add_num(obj, "num_device_alloc", (double)st->num_device_alloc, b);
  add_num(obj, "num_device_free", (double)st->num_device_free, b);
  add_num(obj, "num_cache_hits", (double)st->num_cache_hits, b);
  add_num(obj, "num_device_sourced", (double)st->num_device_sourced, b);
  add_num(obj, "num_frees", (double)st->num_frees, b);
  add_num(obj, "num_gc_runs", (double)st->num_gc_runs, b);
  add_num(obj, "num_sync_events", (double)st->num_sync_events, b);
  add_num(obj, "largest_free_block", (double)st->largest_free_block, b);
  add_num(obj, "free_blocks", (double)st->free_blocks, b);
  add_num(obj, "pending_free_blocks", (double)st->pending_free_blocks, b);
  add_num(obj, "num_pages_moved", (double)st->num_pages_moved, b);
  add_num(obj, "num_device_syncs", (double)st->num_device_syncs, b);
  add_num(obj, "num_alloc_unmaps", (double)st->num_alloc_unmaps, b);
}

static void on_segment(void *arg, const pool_segment_info *s) {
  collected *c = arg;
  if (array_grow((void **)&c->segments, &c->cap_segments, c->nsegments + 1, sizeof *c->segments,
                 16) != 0) {
    c->failed = 1;
    return;
  }
  c->segments[c->nsegments++] = (snap_segment){*s, c->nblocks, 0};
  c->pools[c->npools - 1].nsegments++;
}

static void on_block(void *arg, const pool_block_info *bi) {
  collected *c = arg;
  if (c->failed || !c->nsegments)
    return;
  if (array_grow((void **)&c->blocks, &c->cap_blocks, c->nblocks + 1, sizeof *c->blocks, 16) != 0) {
    c->failed = 1;
    return;
  }
  c->blocks[c->nblocks++] = *bi; /* state: a static string */
  c->segments[c->nsegments - 1].nblocks++;
}

/* Runs under the registry lock: copies only. */
static void copy_pool(gpupool *p, void *arg) {
  collected *c = arg;
  const char *name = gpupool_name(p);
  char label[POOL_LABEL_MAX];
  if (pool_labeler_next(&c->labeler, p, label) != 0)
    c->failed = 1;
  if (c->failed || !pool_label_selects(c->pool, c->device, label, gpupool_device(p)))
    return;
  if (array_grow((void **)&c->pools, &c->cap_pools, c->npools + 1, sizeof *c->pools, 16) != 0) {
    c->failed = 1;
    return;
  }
  snap_pool *sp = &c->pools[c->npools++];
  memset(sp, 0, sizeof *sp);
  snprintf(sp->name, sizeof sp->name, "%s", name ? name : "");
  snprintf(sp->label, sizeof sp->label, "%s", label);
  sp->id = pool_id(p);
  sp->device = gpupool_device(p);
  sp->backend = gpupool_backend_name(p);
  sp->strategy = gpupool_strategy_name(p);
  if (gpupool_get_stats(p, &sp->stats) != GPUPOOL_OK)
    c->failed = 1;
  sp->first_segment = c->nsegments;
  pool_walker w = {on_segment, on_block, c};
  pool_walk(p, &w);
}

static void collected_free(collected *c) {
  pool_labeler_free(&c->labeler);
  free(c->pools);
  free(c->segments);
  free(c->blocks);
}

static void add_segment(cJSON *segments, const collected *c, const snap_segment *ss, build *b) {
  const pool_segment_info *s = &ss->info;
  cJSON *seg = cJSON_CreateObject();
  if (!seg || !cJSON_AddItemToArray(segments, seg)) {
    cJSON_Delete(seg);
    b->failed = 1;
    return;
  }
  add_hex(seg, "address", s->addr, b);
  add_num(seg, "size", (double)s->size, b);
  add_num(seg, "mapped", (double)s->mapped, b);
  add_num(seg, "allocated", (double)s->allocated, b);
  add_num(seg, "active", (double)s->active, b);
  add_num(seg, "requested", (double)s->requested, b);
  add_hex(seg, "stream", s->stream, b);
  if (!cJSON_AddStringToObject(seg, "pool", s->is_large ? "large" : "small"))
    b->failed = 1;
  cJSON *blocks = cJSON_AddArrayToObject(seg, "blocks");
  if (!blocks) {
    b->failed = 1;
    return;
  }
  for (size_t i = 0; i < ss->nblocks; i++) {
    const pool_block_info *bi = &c->blocks[ss->first_block + i];
    cJSON *blk = cJSON_CreateObject();
    if (!blk || !cJSON_AddItemToArray(blocks, blk)) {
      cJSON_Delete(blk);
      b->failed = 1;
      return;
    }
    add_hex(blk, "address", bi->addr, b);
    add_num(blk, "size", (double)bi->size, b);
    add_num(blk, "requested", (double)bi->requested, b);
    if (!cJSON_AddStringToObject(blk, "state", bi->state))
      b->failed = 1;
    add_hex(blk, "stream", bi->stream, b);
    if (bi->unmapped)
      add_num(blk, "unmapped", (double)bi->unmapped, b);
    if (bi->alloc_ns)
      add_time_us(blk, "alloc_time_us", bi->alloc_ns / 1000, b);
    if (bi->tag && !json_add_text(blk, "tag", bi->tag))
      b->failed = 1;
  }
}

/* After the registry lock: the JSON of one copied pool. */
static void add_pool(cJSON *pools, const collected *c, const snap_pool *sp, build *b) {
  cJSON *obj = cJSON_CreateObject();
  if (!obj || !cJSON_AddItemToArray(pools, obj)) {
    cJSON_Delete(obj);
    b->failed = 1;
    return;
  }
  if (!json_add_text(obj, "name", sp->name) || !json_add_text(obj, "label", sp->label))
    b->failed = 1;
  add_num(obj, "id", sp->id, b);
  add_num(obj, "device", sp->device, b);
  if (!cJSON_AddStringToObject(obj, "backend", sp->backend) ||
      !cJSON_AddStringToObject(obj, "strategy", sp->strategy))
    b->failed = 1;
  cJSON *stats = cJSON_AddObjectToObject(obj, "stats");
  if (stats)
    add_stats(stats, &sp->stats, b);
  else
    b->failed = 1;
  cJSON *segments = cJSON_AddArrayToObject(obj, "segments");
  if (!segments) {
    b->failed = 1;
    return;
  }
  for (size_t i = 0; i < sp->nsegments; i++)
    add_segment(segments, c, &c->segments[sp->first_segment + i], b);
}

int snapshot_selection(const endpoint_args *args, const char **pool, int *device,
                       endpoint_body *out) {
  /* format (json or torch) is checked by snapshot_route */
  static const char *const names[] = {"pool", "device", "format", NULL};
  endpoint_params pc;
  endpoint_count_params(args, names, &pc);
  if (pc.unknown) {
    char shown[80];
    endpoint_printable(shown, sizeof shown, pc.unknown);
    endpoint_bad_request(out, "unknown parameter '%s' (expected pool, device or format)", shown);
    return -1;
  }
  return endpoint_pool_selection(args, "", pool, device, out);
}

void snapshot_endpoint(const endpoint_args *args, endpoint_body *out) {
  collected c = {0};
  if (snapshot_selection(args, &c.pool, &c.device, out) != 0)
    return;
  registry_foreach(copy_pool, &c);
  if ((c.pool || c.device >= 0) && !c.npools && !c.failed) {
    collected_free(&c);
    endpoint_pool_unmatched(out, "", c.pool, c.device);
    return;
  }
  build b = {.failed = c.failed};
  cJSON *root = cJSON_CreateObject();
  cJSON *pools = NULL;
  char host[256];
  metrics_hostname(host, sizeof host); /* the hostname option, as /metrics */
  if (!root || !cJSON_AddStringToObject(root, "version", GPUPOOL_VERSION) ||
      !json_add_text(root, "hostname", host) ||
      !cJSON_AddNumberToObject(root, "pid", (double)getpid()) ||
      !(pools = cJSON_AddArrayToObject(root, "pools")))
    b.failed = 1;
  for (size_t i = 0; i < c.npools && !b.failed; i++)
    add_pool(pools, &c, &c.pools[i], &b);
  collected_free(&c);
  char *text = b.failed ? NULL : cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!text) {
    endpoint_out_of_memory(out, "building the snapshot");
    return;
  }
  out->status = 200;
  out->content_type = "application/json";
  out->data = text;
  out->len = strlen(text);
}
