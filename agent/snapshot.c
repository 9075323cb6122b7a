/* GET /snapshot?pool=NAME: every pool's segments and blocks with its stats,
 * as JSON built with cJSON. Stats use the flat dotted keys of
 * torch.cuda.memory_stats ("allocated_bytes.all.current", ...). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "endpoint.h"
#include "pool/pool_view.h"
#include "pool/registry.h"

typedef struct build {
  const char *pool; /* NULL: every pool */
  cJSON *pools;
  cJSON *segments; /* of the pool being walked */
  cJSON *blocks;   /* of the segment being walked */
  int matched, failed;
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

static void add_stats(cJSON *obj, const gpupool_stats *st, build *b) {
  static const char *const types[GPUPOOL_STAT_TYPES] = {"all", "small_pool", "large_pool"};
  static const char *const parts[] = {"current", "peak", "allocated", "freed"};
  struct {
    const char *name;
    const gpupool_stat *s;
  } stats[] = {
      {"allocation", st->allocation},
      {"segment", st->segment},
      {"active", st->active},
      {"inactive_split", st->inactive_split},
      {"allocated_bytes", st->allocated_bytes},
      {"reserved_bytes", st->reserved_bytes},
      {"active_bytes", st->active_bytes},
      {"inactive_split_bytes", st->inactive_split_bytes},
      {"requested_bytes", st->requested_bytes},
  };
  char key[96];
  for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++)
    for (int t = 0; t < GPUPOOL_STAT_TYPES; t++) {
      const gpupool_stat *s = &stats[i].s[t];
      const int64_t v[4] = {s->current, s->peak, s->allocated, s->freed};
      for (int k = 0; k < 4; k++) {
        snprintf(key, sizeof key, "%s.%s.%s", stats[i].name, types[t], parts[k]);
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
}

static void on_segment(void *arg, const pool_segment_info *s) {
  build *b = arg;
  cJSON *seg = cJSON_CreateObject();
  if (!seg || !cJSON_AddItemToArray(b->segments, seg)) {
    cJSON_Delete(seg);
    b->failed = 1;
    b->blocks = NULL;
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
  b->blocks = cJSON_AddArrayToObject(seg, "blocks");
  if (!b->blocks)
    b->failed = 1;
}

static void on_block(void *arg, const pool_block_info *bi) {
  build *b = arg;
  if (!b->blocks)
    return;
  cJSON *blk = cJSON_CreateObject();
  if (!blk || !cJSON_AddItemToArray(b->blocks, blk)) {
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
}

/* Runs under the registry lock: only copies (the walk copies under the pool's
 * locks and then calls back without them) and builds JSON in memory. */
static void add_pool(gpupool *p, void *arg) {
  build *b = arg;
  const char *name = gpupool_name(p);
  if (b->pool && strcmp(b->pool, name ? name : "") != 0)
    return;
  b->matched++;
  cJSON *obj = cJSON_CreateObject();
  if (!obj || !cJSON_AddItemToArray(b->pools, obj)) {
    cJSON_Delete(obj);
    b->failed = 1;
    return;
  }
  if (!cJSON_AddStringToObject(obj, "name", name ? name : ""))
    b->failed = 1;
  add_num(obj, "id", pool_id(p), b);
  add_num(obj, "device", gpupool_device(p), b);
  if (!cJSON_AddStringToObject(obj, "backend", gpupool_backend_name(p)) ||
      !cJSON_AddStringToObject(obj, "strategy", gpupool_strategy_name(p)))
    b->failed = 1;
  gpupool_stats st;
  cJSON *stats = cJSON_AddObjectToObject(obj, "stats");
  if (stats && gpupool_get_stats(p, &st) == GPUPOOL_OK)
    add_stats(stats, &st, b);
  else
    b->failed = 1;
  b->segments = cJSON_AddArrayToObject(obj, "segments");
  if (!b->segments) {
    b->failed = 1;
    return;
  }
  pool_walker w = {on_segment, on_block, b};
  pool_walk(p, &w);
}

typedef struct param_check {
  const char *unknown;
  int pools;
} param_check;

static void check_param(void *arg, const char *key, const char *value) {
  param_check *c = arg;
  if (strcmp(key, "pool") == 0)
    c->pools++;
  else if (!c->unknown)
    c->unknown = key;
}

/* A value as it can be quoted in a one-line reason. */
static void printable(char *dst, size_t size, const char *v) {
  size_t n = 0;
  for (; *v && n + 1 < size; v++)
    dst[n++] = (*v >= 0x20 && *v < 0x7f) ? *v : '?';
  dst[n] = '\0';
}

static void server_error(endpoint_body *out) {
  static const char msg[] = "out of memory building the snapshot\n";
  out->status = 503;
  out->content_type = "text/plain; charset=utf-8";
  out->data = strdup(msg);
  out->len = out->data ? strlen(msg) : 0;
}

void snapshot_endpoint(const endpoint_args *args, endpoint_body *out) {
  char shown[80];
  param_check pc = {0};
  if (args->each)
    args->each(args->ctx, check_param, &pc);
  if (pc.unknown) {
    printable(shown, sizeof shown, pc.unknown);
    endpoint_bad_request(out, "unknown parameter '%s' (expected pool)", shown);
    return;
  }
  if (pc.pools > 1) {
    endpoint_bad_request(out, "parameter 'pool' given more than once");
    return;
  }
  build b = {.pool = args->get(args->ctx, "pool")};
  if (b.pool && !*b.pool) {
    endpoint_bad_request(out, "bad pool '': expected a pool name");
    return;
  }
  cJSON *root = cJSON_CreateObject();
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0)
    host[0] = '\0';
  if (!root || !cJSON_AddStringToObject(root, "version", GPUPOOL_VERSION) ||
      !cJSON_AddStringToObject(root, "hostname", host) ||
      !cJSON_AddNumberToObject(root, "pid", (double)getpid()) ||
      !(b.pools = cJSON_AddArrayToObject(root, "pools"))) {
    cJSON_Delete(root);
    server_error(out);
    return;
  }
  registry_foreach(add_pool, &b);
  if (b.pool && !b.matched) {
    cJSON_Delete(root);
    printable(shown, sizeof shown, b.pool);
    endpoint_bad_request(out, "bad pool '%s': no live pool has this name", shown);
    return;
  }
  char *text = b.failed ? NULL : cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!text) {
    server_error(out);
    return;
  }
  out->status = 200;
  out->content_type = "application/json";
  out->data = text;
  out->len = strlen(text);
}
