/* The advisor's histories when the host runs out of memory: each allocation
 * a reader makes (of a record file, a /trace document, a PyTorch snapshot,
 * the live rings) fails in turn, and the call says GPUPOOL_ERR_HOST_OOM,
 * "out of host memory" (not GPUPOOL_ERR_INVALID, nor the device's
 * GPUPOOL_ERR_OOM), until the one past the last allocation goes through.
 * Allocations fail through helpers/alloc_fail.h: the executable is linked
 * so that the library's allocations, linked in statically, fail on demand;
 * cJSON, a shared library, is handed the wrapped malloc as its hooks. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "advisor/readers.h"
#include "gpupool/advisor.h"
#include "gpupool/gpupool.h"
#include "helpers/alloc_fail.h"
#include "pool/pool_view.h"

/* Events enough that the history's arrays and id map grow several times. */
#define PAIRS 3000

static void expect_host_oom(gpupool_status st, long n) {
  cr_assert_eq(st, GPUPOOL_ERR_HOST_OOM, "allocation %ld failed: status %s (%s)", n,
               gpupool_status_string(st), gpupool_last_error());
  cr_assert(strstr(gpupool_last_error(), "out of host memory"), "%s", gpupool_last_error());
}

Test(advisor_host_oom, record_file) {
  static char text[PAIRS * 48];
  size_t len = 0;
  for (int i = 0; i < PAIRS; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "a 0x%x 512 %d\nr 0x%x 9\n", i + 1,
                            i % 3, i + 1);
  for (int i = 0; i < PAIRS; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "f 0x%x\n", i + 1);
  long failures = 0;
  for (long n = 1;; n++) {
    FILE *f = fmemopen(text, len, "r");
    cr_assert_not_null(f);
    static char iobuf[BUFSIZ]; /* the stream allocates nothing while armed */
    cr_assert_eq(setvbuf(f, iobuf, _IOFBF, sizeof iobuf), 0);
    gpupool_history *h = NULL;
    alloc_fail_arm(n);
    gpupool_status st = read_record(f, "oom.record", 0, NULL, &h);
    int failed_here = alloc_fail_disarm();
    fclose(f);
    if (!failed_here) {
      cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
      cr_expect_eq(gpupool_history_get_info(h)->events, 3 * PAIRS);
      gpupool_history_free(h);
      break;
    }
    failures++;
    expect_host_oom(st, n);
    cr_assert(n < 100, "the reader makes more allocations than expected");
  }
  cr_assert_geq(failures, 4, "the reader allocated too little: the test proves little");
}

Test(advisor_host_oom, live_rings) {
  pool_events_enable(4 * PAIRS);
  gpupool_options o = {.name = "live", .backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  static void *blocks[PAIRS];
  for (int i = 0; i < PAIRS; i++)
    cr_assert_eq(gpupool_malloc(p, &blocks[i], 512, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  for (int i = 0; i < PAIRS; i++)
    cr_assert_eq(gpupool_free(p, blocks[i]), GPUPOOL_OK, "%s", gpupool_last_error());
  long failures = 0;
  for (long n = 1;; n++) {
    gpupool_history *h = NULL;
    alloc_fail_arm(n);
    gpupool_status st = gpupool_history_from_pool(p, &h);
    if (!alloc_fail_disarm()) {
      cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
      cr_expect_eq(gpupool_history_get_info(h)->events, 2 * PAIRS);
      gpupool_history_free(h);
      break;
    }
    failures++;
    expect_host_oom(st, n);
    cr_assert(n < 100, "the reader makes more allocations than expected");
  }
  cr_assert_geq(failures, 4, "the reader allocated too little: the test proves little");
  gpupool_destroy(p);
  pool_events_disable();
}

/* Loads path (gpupool_history_load, as gpupool-advise does) with each of
 * its allocations failing in turn; returns how many failed. */
static long load_failing_each_allocation(const char *path, uint64_t want_events) {
  long failures = 0;
  for (long n = 1;; n++) {
    gpupool_history *h = NULL;
    alloc_fail_arm(n);
    gpupool_status st = gpupool_history_load(path, NULL, NULL, &h);
    if (!alloc_fail_disarm()) {
      cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
      cr_expect_eq(gpupool_history_get_info(h)->events, want_events);
      gpupool_history_free(h);
      return failures;
    }
    failures++;
    expect_host_oom(st, n);
    cr_assert_null(h);
    cr_assert(n < 10000, "the reader makes more allocations than expected");
  }
}

static void write_temp(char *path, const void *data, size_t len) {
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, data, len), (ssize_t)len);
  cr_assert_eq(close(fd), 0);
}

/* cJSON answers NULL both for a malformed document and when an allocation
 * fails: the old reader called every such failure malformed input. */
Test(advisor_host_oom, trace_document) {
  static char doc[16384];
  size_t len = (size_t)snprintf(doc, sizeof doc,
                                "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"thread_name\","
                                "\"pid\":1,\"tid\":1000002,\"args\":{\"name\":\"pool p (host, "
                                "bfc)\"}}");
  for (int i = 0; i < 20; i++)
    len += (size_t)snprintf(doc + len, sizeof doc - len,
                            ",{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,"
                            "\"ts\":%d,\"id\":\"0x%x\",\"args\":{\"requested\":4096,"
                            "\"stream\":\"0x0\"}},{\"ph\":\"e\",\"cat\":\"alloc\","
                            "\"pid\":1,\"tid\":1000002,\"ts\":%d,\"id\":\"0x%x\",\"args\":{}}",
                            2 * i, 0x1000 + i, 2 * i + 1, 0x1000 + i);
  len += (size_t)snprintf(doc + len, sizeof doc - len, "]}\n");
  cr_assert_lt(len, sizeof doc);
  char path[] = "/tmp/gpupool_oom_traceXXXXXX";
  write_temp(path, doc, len);
  cJSON_InitHooks(&(cJSON_Hooks){.malloc_fn = malloc, .free_fn = free}); /* the wrapped malloc */
  long failures = load_failing_each_allocation(path, 40);
  cJSON_InitHooks(NULL);
  unlink(path);
  cr_assert_geq(failures, 200, "cJSON's allocations did not fail: the test proves little");
}

static void put(unsigned char *buf, size_t *len, const void *s, size_t n) {
  memcpy(buf + *len, s, n);
  *len += n;
}

static void put_str(unsigned char *buf, size_t *len, const char *s) { /* SHORT_BINUNICODE */
  unsigned char head[2] = {0x8c, (unsigned char)strlen(s)};
  put(buf, len, head, 2);
  put(buf, len, s, strlen(s));
}

/* The unpickler's allocations (its nodes, stack, marks, memo, containers)
 * failed as malformed input in the old reader. */
Test(advisor_host_oom, torch_snapshot) {
  static unsigned char pk[16384];
  size_t len = 0;
  put(pk, &len, "\x80\x04}", 3);
  put_str(pk, &len, "device_traces");
  put(pk, &len, "]](", 3);
  for (int i = 0; i < 100; i++) { /* alloc and free_requested + free_completed of i + 1 */
    static const char *const actions[] = {"alloc", "free_requested", "free_completed"};
    for (int a = 0; a < 3; a++) {
      put(pk, &len, "}(", 2);
      put_str(pk, &len, "action");
      put_str(pk, &len, actions[a]);
      put_str(pk, &len, "addr");
      unsigned char addr[2] = {'K', (unsigned char)(i + 1)};
      put(pk, &len, addr, 2);
      put_str(pk, &len, "size");
      put(pk, &len, "M\x00\x02u", 4); /* 512 */
    }
  }
  put(pk, &len, "eas.", 4);
  cr_assert_lt(len, sizeof pk);
  char path[] = "/tmp/gpupool_oom_pickleXXXXXX";
  write_temp(path, pk, len);
  long failures = load_failing_each_allocation(path, 200);
  unlink(path);
  cr_assert_geq(failures, 8, "the reader allocated too little: the test proves little");
}
