/* Allocation tags: per-thread push/pop, bytes per tag per pool (exact after
 * every call, freed from the tag the block was allocated under), the bound
 * on distinct tags, bad input, /metrics and /snapshot. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "agent/endpoint.h"
#include "agent/metrics.h"
#include "gpupool/tag.h"
#include "helpers/metrics_text.h"
#include "helpers/trace_check.h"

#define MiB ((size_t)1 << 20)

static gpupool *host_pool(const char *name) {
  gpupool_options o = {
      .name = name, .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64 * MiB, .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

/* p's bytes under tag (-1 when the tag is not listed). */
static int64_t tag_bytes(gpupool *p, const char *tag) {
  gpupool_tag_stat st[GPUPOOL_TAG_MAX];
  int n = gpupool_get_tag_stats(p, st, GPUPOOL_TAG_MAX);
  cr_assert_geq(n, 0, "%s", gpupool_last_error());
  for (int i = 0; i < n; i++)
    if (strcmp(st[i].tag, tag) == 0)
      return st[i].allocated_bytes;
  return -1;
}

static int64_t allocated(gpupool *p) {
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
  return s.allocated_bytes[GPUPOOL_STAT_ALL].current;
}

Test(tags, push_pop_nest) {
  cr_assert_null(gpupool_tag_current());
  cr_assert_eq(gpupool_tag_push("weights"), GPUPOOL_OK);
  cr_assert_str_eq(gpupool_tag_current(), "weights");
  cr_assert_eq(gpupool_tag_push("kv_cache"), GPUPOOL_OK);
  cr_assert_str_eq(gpupool_tag_current(), "kv_cache");
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  cr_assert_str_eq(gpupool_tag_current(), "weights");
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  cr_assert_null(gpupool_tag_current());
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "no tag pushed"), "%s", gpupool_last_error());
}

Test(tags, bad_input_changes_nothing) {
  char longname[GPUPOOL_TAG_NAME_MAX + 2];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  const char *bad[] = {NULL, "", "with space", "quote\"", "back\\slash", "nl\n", longname};
  cr_assert_eq(gpupool_tag_push("ok"), GPUPOOL_OK);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(gpupool_tag_push(bad[i]), GPUPOOL_ERR_INVALID, "case %zu", i);
    cr_assert(strstr(gpupool_last_error(), "gpupool_tag_push"), "%s", gpupool_last_error());
    cr_assert_str_eq(gpupool_tag_current(), "ok");
  }
  longname[GPUPOOL_TAG_NAME_MAX] = '\0'; /* the longest allowed */
  cr_assert_eq(gpupool_tag_push(longname), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  /* Nesting is bounded: one more than the depth fails and changes nothing. */
  for (int i = 1; i < GPUPOOL_TAG_DEPTH; i++)
    cr_assert_eq(gpupool_tag_push(i % 2 ? "a" : "b"), GPUPOOL_OK, "depth %d", i);
  cr_assert_str_eq(gpupool_tag_current(), "a");
  cr_assert_eq(gpupool_tag_push("c"), GPUPOOL_ERR_UNSUPPORTED);
  cr_assert_str_eq(gpupool_tag_current(), "a");
  cr_assert_eq(gpupool_get_tag_stats(NULL, NULL, 0), -1);
  gpupool *p = host_pool("t");
  cr_assert_eq(gpupool_get_tag_stats(p, NULL, 4), -1);
  cr_assert_eq(gpupool_get_tag_stats(p, NULL, 0), 0);
  gpupool_destroy(p);
}

Test(tags, bytes_follow_blocks) {
  gpupool *p = host_pool("t");
  void *untagged = NULL, *w = NULL, *k = NULL, *k2 = NULL;
  cr_assert_eq(gpupool_malloc(p, &untagged, 1000, NULL), GPUPOOL_OK);
  cr_assert_eq(tag_bytes(p, "weights"), -1); /* not used yet in this process */
  cr_assert_eq(gpupool_tag_push("weights"), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &w, 3 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_push("kv_cache"), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &k, 1000, NULL), GPUPOOL_OK); /* rounded to 1024 */
  cr_assert_eq(gpupool_malloc(p, &k2, 25 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  cr_assert_eq(tag_bytes(p, "weights"), (int64_t)(3 * MiB));
  cr_assert_eq(tag_bytes(p, "kv_cache"), (int64_t)(1024 + 26 * MiB)); /* 2 MiB rounding */
  cr_assert_eq(allocated(p) - tag_bytes(p, "weights") - tag_bytes(p, "kv_cache"), 1024);
  /* A free under another tag subtracts from the block's own tag. */
  cr_assert_eq(gpupool_tag_push("weights"), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, k), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, untagged), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  cr_assert_eq(tag_bytes(p, "kv_cache"), (int64_t)(26 * MiB));
  cr_assert_eq(tag_bytes(p, "weights"), (int64_t)(3 * MiB));
  /* A reused block takes the tag of its new allocation (here: none). */
  cr_assert_eq(gpupool_free(p, k2), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &k2, 25 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(tag_bytes(p, "kv_cache"), 0);
  cr_assert_eq(gpupool_free(p, k2), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, w), GPUPOOL_OK);
  cr_assert_eq(tag_bytes(p, "weights"), 0);
  cr_assert_eq(allocated(p), 0);
  /* Another pool has its own counts. */
  gpupool *q = host_pool("u");
  cr_assert_eq(gpupool_tag_push("weights"), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(q, &w, 4096, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  cr_assert_eq(tag_bytes(q, "weights"), 4096);
  cr_assert_eq(tag_bytes(p, "weights"), 0);
  cr_assert_eq(gpupool_free(q, w), GPUPOOL_OK);
  gpupool_destroy(q);
  gpupool_destroy(p);
}

/* n allocations of 512 bytes into ptr, each under a name of its own
 * (prefix and its number), checking which names the table still counts
 * apart: the first GPUPOOL_TAG_MAX - 1 of the process, "other" after. */
static void alloc_under_new_names(gpupool *p, const char *prefix, void **ptr, int n) {
  char name[32];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "%s%d", prefix, i);
    cr_assert_eq(gpupool_tag_push(name), GPUPOOL_OK);
    cr_assert_eq(gpupool_malloc(p, &ptr[i], 512, NULL), GPUPOOL_OK);
    cr_assert_str_eq(gpupool_tag_current(), i < GPUPOOL_TAG_MAX - 1 ? name : "other");
    cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  }
}

Test(tags, bounded_with_other) {
  gpupool *p = host_pool("t");
  void *ptr[GPUPOOL_TAG_MAX + 4];
  alloc_under_new_names(p, "t", ptr, GPUPOOL_TAG_MAX + 4);
  gpupool_tag_stat st[GPUPOOL_TAG_MAX + 2];
  cr_assert_eq(gpupool_get_tag_stats(p, st, GPUPOOL_TAG_MAX + 2), GPUPOOL_TAG_MAX);
  cr_assert_str_eq(st[0].tag, "t0");
  cr_assert_eq(st[0].allocated_bytes, 512);
  cr_assert_str_eq(st[GPUPOOL_TAG_MAX - 1].tag, "other");
  cr_assert_eq(st[GPUPOOL_TAG_MAX - 1].allocated_bytes, 5 * 512);
  cr_assert_eq(gpupool_get_tag_stats(p, st, 3), 3); /* max is respected */
  for (int i = 0; i < GPUPOOL_TAG_MAX + 4; i++)
    cr_assert_eq(gpupool_free(p, ptr[i]), GPUPOOL_OK);
  cr_assert_eq(tag_bytes(p, "other"), 0);
  gpupool_destroy(p);
}

/* "untagged" is the name of no tag: pushed first it takes none of the
 * names' counts (the 15 that follow still get theirs), and pushed once the
 * table is full its bytes are untagged, not "other" (before, it was a name
 * like any other: a slot, or "other"). */
Test(tags, untagged_is_no_tag) {
  gpupool *p = host_pool("u");
  void *ptr[GPUPOOL_TAG_MAX + 1], *u[2];
  cr_assert_eq(gpupool_tag_push("untagged"), GPUPOOL_OK);
  cr_expect_null(gpupool_tag_current());
  cr_assert_eq(gpupool_malloc(p, &u[0], 4096, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  alloc_under_new_names(p, "n", ptr, GPUPOOL_TAG_MAX + 1); /* 15 counted apart: the table full */
  cr_assert_eq(gpupool_tag_push("untagged"), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &u[1], 8192, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  gpupool_tag_stat st[GPUPOOL_TAG_MAX + 2];
  int n = gpupool_get_tag_stats(p, st, GPUPOOL_TAG_MAX + 2);
  cr_assert_eq(n, GPUPOOL_TAG_MAX);
  int64_t tagged = 0;
  for (int i = 0; i < n; i++) {
    cr_expect_str_neq(st[i].tag, "untagged");
    tagged += st[i].allocated_bytes;
  }
  cr_expect_str_eq(st[GPUPOOL_TAG_MAX - 2].tag, "n14", "15 names counted apart");
  cr_expect_eq(tag_bytes(p, "other"), 2 * 512, "n15 and n16 only");
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
  cr_expect_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current - tagged, 4096 + 8192);
  for (int i = 0; i < GPUPOOL_TAG_MAX + 1; i++)
    cr_assert_eq(gpupool_free(p, ptr[i]), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, u[0]), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, u[1]), GPUPOOL_OK);
  gpupool_destroy(p);
}

static void *alloc_tagged(void *arg) {
  gpupool *p = arg;
  void *ptr = NULL;
  cr_assert_null(gpupool_tag_current()); /* tags are per thread */
  cr_assert_eq(gpupool_tag_push("thread"), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &ptr, 8192, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  return ptr;
}

Test(tags, per_thread_and_freed_elsewhere) {
  gpupool *p = host_pool("t");
  cr_assert_eq(gpupool_tag_push("main"), GPUPOOL_OK);
  pthread_t t;
  void *ptr = NULL;
  cr_assert_eq(pthread_create(&t, NULL, alloc_tagged, p), 0);
  cr_assert_eq(pthread_join(t, &ptr), 0);
  cr_assert_str_eq(gpupool_tag_current(), "main");
  cr_assert_eq(tag_bytes(p, "thread"), 8192);
  cr_assert_eq(tag_bytes(p, "main"), 0);
  cr_assert_eq(gpupool_free(p, ptr), GPUPOOL_OK); /* freed on the main thread */
  cr_assert_eq(tag_bytes(p, "thread"), 0);
  gpupool_destroy(p);
}

/* promtool check metrics on text: "" when clean (or no promtool), else its complaint. */
static void promtool_clean(const char *text) {
  if (system("command -v promtool >/dev/null 2>&1") != 0)
    return;
  char path[] = "/tmp/gpupool-tags-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  size_t len = strlen(text);
  cr_assert_eq(write(fd, text, len), (ssize_t)len);
  close(fd);
  char cmd[128], out[4096];
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  unlink(path);
  cr_assert(status == 0 && n == 0, "promtool: %s", out);
}

Test(tags, metrics_and_snapshot) {
  gpupool *p = host_pool("tagged");
  void *a = NULL, *b = NULL;
  cr_assert_eq(gpupool_tag_push("kv_cache"), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &a, 5000, NULL), GPUPOOL_OK); /* 5120 */
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &b, 512, NULL), GPUPOOL_OK);

  prom_buf buf;
  prom_buf_init(&buf, 1 << 16);
  cr_assert_eq(metrics_render(&buf, PROM_FORMAT_TEXT), 0);
  prom_buf_putc(&buf, '\0');
  cr_assert(!buf.failed);
  double v = 0;
  const char *labels[] = {"pool=\"tagged\"", "tag=\"kv_cache\"", NULL};
  cr_assert_eq(metrics_value(buf.data, "gpupool_tag_allocated_bytes", labels, &v), 0);
  cr_assert_eq(v, 5120);
  cr_assert(strstr(buf.data, "# TYPE gpupool_tag_allocated_bytes gauge"));
  promtool_clean(buf.data);
  prom_buf_free(&buf);

  test_args ta;
  endpoint_args args = test_args_make(&ta, NULL, 0);
  endpoint_body out = {0};
  snapshot_endpoint(&args, &out);
  cr_assert_eq(out.status, 200);
  cJSON *root = cJSON_Parse(out.data);
  free(out.data);
  cr_assert_not_null(root);
  int tagged = 0, untagged = 0;
  const cJSON *pool, *seg, *blk;
  cJSON_ArrayForEach(pool, cJSON_GetObjectItem(root, "pools")) {
    cJSON_ArrayForEach(seg, cJSON_GetObjectItem(pool, "segments")) {
      cJSON_ArrayForEach(blk, cJSON_GetObjectItem(seg, "blocks")) {
        const cJSON *tag = cJSON_GetObjectItem(blk, "tag");
        const char *state = cJSON_GetObjectItem(blk, "state")->valuestring;
        uint64_t addr = strtoull(cJSON_GetObjectItem(blk, "address")->valuestring + 2, NULL, 16);
        if (addr == (uintptr_t)a) {
          cr_assert(cJSON_IsString(tag) && strcmp(tag->valuestring, "kv_cache") == 0);
          tagged++;
        } else {
          cr_assert_null(tag, "block %s in state %s has a tag", cJSON_PrintUnformatted(blk), state);
          untagged += addr == (uintptr_t)b;
        }
      }
    }
  }
  cr_assert_eq(tagged, 1);
  cr_assert_eq(untagged, 1);
  cJSON_Delete(root);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, b), GPUPOOL_OK);
  gpupool_destroy(p);
}
