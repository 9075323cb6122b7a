/* /snapshot: segments and blocks of every pool; blocks tile their segments
 * and agree with the pool's statistics. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agent/endpoint.h"
#include "gpupool/host.h"
#include "helpers/http_json.h"
#include "helpers/pool_check.h"
#include "helpers/trace_check.h"
#include "pool/pool_view.h"

#define MiB ((size_t)1 << 20)

static gpupool *host_pool(const char *name, const char *strategy) {
  gpupool_options o = {.name = name,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = 256 * MiB,
                       .tunables = strategy,
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

static cJSON *snapshot(const char *const *pairs, size_t n, int expect_status) {
  test_args ta;
  endpoint_args a = test_args_make(&ta, pairs, n);
  endpoint_body out = {0};
  snapshot_endpoint(&a, &out);
  cr_assert_eq(out.status, expect_status, "status %d: %s", out.status,
               out.data ? out.data : "(no body)");
  cr_assert_not_null(out.data);
  cr_assert_eq(strlen(out.data), out.len);
  if (expect_status != 200) {
    cr_expect_eq(strchr(out.data, '\n'), out.data + out.len - 1, "one line: %s", out.data);
    free(out.data);
    return NULL;
  }
  cr_expect_str_eq(out.content_type, "application/json");
  cJSON *root = cJSON_Parse(out.data);
  cr_assert_not_null(root, "not JSON: %.200s", out.data);
  free(out.data);
  return root;
}

static uint64_t hex(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  cr_assert(cJSON_IsString(v) && strncmp(v->valuestring, "0x", 2) == 0, "%s is not hex", key);
  return strtoull(v->valuestring + 2, NULL, 16);
}

static const cJSON *find_pool(const cJSON *root, const char *name) {
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "pools")) {
    if (strcmp(cJSON_GetObjectItem(p, "name")->valuestring, name) == 0)
      return p;
  }
  return NULL;
}

/* Blocks tile each segment; states and sizes agree with the stats; what is
 * mapped adds up to reserved_bytes. */
static void check_pool_kind(const cJSON *pool, gpupool *p, int expandable) {
  gpupool_stats st;
  cr_assert_eq(gpupool_get_stats(p, &st), GPUPOOL_OK);
  const cJSON *stats = cJSON_GetObjectItem(pool, "stats");
  cr_expect_eq(json_number(stats, "allocated_bytes.all.current"),
               (double)st.allocated_bytes[0].current);
  cr_expect_eq(json_number(stats, "reserved_bytes.large_pool.peak"),
               (double)st.reserved_bytes[2].peak);
  cr_expect_eq(json_number(stats, "num_device_alloc"), (double)st.num_device_alloc);
  cr_expect_eq(json_number(stats, "pending_free_blocks"), (double)st.pending_free_blocks);
  cr_expect_eq(json_number(stats, "num_pages_moved"), (double)st.num_pages_moved);
  cr_expect_eq(json_number(stats, "num_device_syncs"), (double)st.num_device_syncs);
  cr_expect_eq(json_number(pool, "id"), (double)pool_id(p));

  double reserved = 0, alloc_n = 0, alloc_bytes = 0, free_n = 0, pending_n = 0, requested = 0;
  double active_bytes = 0;
  int segments = 0;
  const cJSON *seg;
  cJSON_ArrayForEach(seg, cJSON_GetObjectItem(pool, "segments")) {
    segments++;
    uint64_t addr = hex(seg, "address"), size = (uint64_t)json_number(seg, "size");
    double mapped = json_number(seg, "mapped"); /* = size, but in expandable pools */
    cr_expect_leq(mapped, (double)size);
    if (!expandable)
      cr_expect_eq(mapped, (double)size);
    reserved += mapped;
    hex(seg, "stream");
    const char *kind = cJSON_GetObjectItem(seg, "pool")->valuestring;
    cr_expect(strcmp(kind, "small") == 0 || strcmp(kind, "large") == 0);
    uint64_t next = addr, seg_alloc = 0, seg_active = 0, seg_req = 0;
    const cJSON *blk;
    cJSON_ArrayForEach(blk, cJSON_GetObjectItem(seg, "blocks")) {
      cr_expect_eq(hex(blk, "address"), next, "blocks are contiguous");
      uint64_t bsize = (uint64_t)json_number(blk, "size");
      cr_expect_gt(bsize, 0);
      next += bsize;
      hex(blk, "stream");
      const char *state = cJSON_GetObjectItem(blk, "state")->valuestring;
      if (strcmp(state, "active_allocated") == 0) {
        alloc_n++;
        alloc_bytes += (double)bsize;
        seg_alloc += bsize;
        seg_active += bsize;
        seg_req += (uint64_t)json_number(blk, "requested");
        cr_expect_leq(json_number(blk, "requested"), (double)bsize);
      } else if (strcmp(state, "active_pending_free") == 0) {
        pending_n++;
        seg_active += bsize;
        cr_expect_gt(json_number(blk, "requested"), 0,
                     "a pending block keeps what its allocation asked");
        cr_expect_leq(json_number(blk, "requested"), (double)bsize);
      } else {
        cr_expect_str_eq(state, "inactive");
        free_n++;
      }
    }
    cr_expect_eq(next, addr + size, "blocks cover the segment exactly");
    cr_expect_eq(json_number(seg, "allocated"), (double)seg_alloc);
    cr_expect_eq(json_number(seg, "active"), (double)seg_active);
    cr_expect_eq(json_number(seg, "requested"), (double)seg_req);
    requested += (double)seg_req;
    active_bytes += (double)seg_active;
  }
  cr_expect_eq(segments, st.segment[0].current);
  cr_expect_eq(reserved, (double)st.reserved_bytes[0].current);
  cr_expect_eq(alloc_n, (double)st.allocation[0].current);
  cr_expect_eq(alloc_bytes, (double)st.allocated_bytes[0].current);
  cr_expect_eq(requested, (double)st.requested_bytes[0].current);
  cr_expect_eq(active_bytes, (double)st.active_bytes[0].current);
  cr_expect_eq(free_n, (double)st.free_blocks);
  cr_expect_eq(pending_n, (double)st.pending_free_blocks);
}

static void check_pool(const cJSON *pool, gpupool *p) {
  check_pool_kind(pool, p, 0);
}

Test(snapshot, blocks_tile_segments_and_agree_with_the_stats) {
  gpupool *p = host_pool("snap", NULL);
  gpupool_host_stream *hs = gpupool_host_stream_create();
  void *ptr[40];
  for (int i = 0; i < 40; i++) /* small and large, on two streams */
    ptr[i] = pc_must_malloc(p, i % 4 == 0 ? 3 * MiB + (size_t)i : 1000 * (size_t)(i + 1),
                            i % 3 == 0 ? (void *)hs : NULL);
  for (int i = 0; i < 40; i += 3)
    if (i != 6)
      cr_assert_eq(gpupool_free(p, ptr[i]), GPUPOOL_OK);
  /* One block waits for another stream's work: active_pending_free. */
  cr_assert_eq(gpupool_record_stream(p, ptr[7], hs), GPUPOOL_OK);
  gpupool_host_stream_enqueue(hs);
  cr_assert_eq(gpupool_free(p, ptr[7]), GPUPOOL_OK);

  gpupool *q = host_pool("other", "strategy:round");
  pc_must_malloc(q, 5000, NULL);

  cJSON *root = snapshot(NULL, 0, 200);
  cr_expect(cJSON_IsString(cJSON_GetObjectItem(root, "version")));
  cr_expect(cJSON_IsString(cJSON_GetObjectItem(root, "hostname")));
  cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(root, "pid")));
  const cJSON *sp = find_pool(root, "snap"), *op = find_pool(root, "other");
  cr_assert(sp && op);
  cr_expect_str_eq(cJSON_GetObjectItem(sp, "backend")->valuestring, "host");
  cr_expect_str_eq(cJSON_GetObjectItem(op, "strategy")->valuestring, "round");
  check_pool(sp, p);
  check_pool(op, q);
  cr_expect_eq(json_number(cJSON_GetObjectItem(sp, "stats"), "pending_free_blocks"), 1);
  cJSON_Delete(root);

  const char *only[] = {"pool=other"};
  root = snapshot(only, 1, 200);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "pools")), 1);
  cr_assert_not_null(find_pool(root, "other"));
  check_pool(find_pool(root, "other"), q);
  cJSON_Delete(root);

  gpupool_host_stream_complete(hs);
  gpupool_empty_cache(p);
  root = snapshot(NULL, 0, 200);
  check_pool(find_pool(root, "snap"), p);
  cJSON_Delete(root);
  gpupool_destroy(p);
  gpupool_destroy(q);
  gpupool_host_stream_destroy(hs);
}

/* Expandable segments: a segment's blocks tile its address range, part of
 * which has no pages; "mapped" says how much has. */
Test(snapshot, expandable_segments_say_what_is_mapped) {
  gpupool *p = host_pool("exp", "expandable_segments:True");
  void *a = pc_must_malloc(p, 40 * MiB, NULL);
  void *keep = pc_must_malloc(p, 3 * MiB, NULL);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  pc_must_malloc(p, 50 * MiB, NULL); /* moves a's idle pages */
  cJSON *root = snapshot(NULL, 0, 200);
  const cJSON *ep = find_pool(root, "exp");
  cr_assert_not_null(ep);
  check_pool_kind(ep, p, 1);
  cr_expect_gt(json_number(cJSON_GetObjectItem(ep, "stats"), "num_pages_moved"), 0);
  double size = 0, mapped = 0;
  const cJSON *seg;
  cJSON_ArrayForEach(seg, cJSON_GetObjectItem(ep, "segments")) {
    size += json_number(seg, "size");
    mapped += json_number(seg, "mapped");
  }
  cr_expect_lt(mapped, size, "the moved pages left address space without memory behind it");
  cJSON_Delete(root);
  (void)keep;
  gpupool_destroy(p);
}

Test(snapshot, bad_parameters_are_refused) {
  gpupool *p = host_pool("known", NULL);
  const char *unknown[] = {"bogus=1"};
  snapshot(unknown, 1, 400);
  const char *repeated[] = {"pool=known", "pool=known"};
  snapshot(repeated, 2, 400);
  const char *empty[] = {"pool="};
  snapshot(empty, 1, 400);
  const char *missing[] = {"pool=nosuch"};
  snapshot(missing, 1, 400);
  gpupool_destroy(p);
}
