/* Coexistence with another CUPTI client (PyTorch's profiler, Nsight): when
 * it holds CUPTI first, gpupool degrades to "other_subscriber" and makes no
 * activity call, so the other tool keeps its records; the hand-over lets the
 * other tool take CUPTI mid-run, and acquire takes it back. The "other tool"
 * here is this test, talking to libcupti directly. */
#include "cupti_gpu.h"

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct other_tool {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle);
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
  CUpti_SubscriberHandle sub;
} other_tool;

static other_tool g_other;
static atomic_int g_other_records;

static void CUPTIAPI other_api(void *u, CUpti_CallbackDomain d, CUpti_CallbackId id,
                               const void *data) {}

static void CUPTIAPI other_requested(uint8_t **buf, size_t *size, size_t *max) {
  *size = 1 << 20;
  *buf = aligned_alloc(8, *size);
  *max = 0;
}

static void CUPTIAPI other_completed(CUcontext c, uint32_t s, uint8_t *buf, size_t size,
                                     size_t valid) {
  CUpti_Activity *r = NULL;
  while (g_other.next_record(buf, valid, &r) == CUPTI_SUCCESS)
    if (r->kind == CUPTI_ACTIVITY_KIND_MEMORY2)
      atomic_fetch_add(&g_other_records, 1);
  free(buf);
}

static void other_open(void) {
  void *h = dlopen("libcupti.so.13", RTLD_NOW);
  if (!h)
    h = dlopen("libcupti.so", RTLD_NOW);
  cr_assert_not_null(h, "libcupti: %s", dlerror());
  *(void **)&g_other.subscribe = dlsym(h, "cuptiSubscribe");
  *(void **)&g_other.unsubscribe = dlsym(h, "cuptiUnsubscribe");
  *(void **)&g_other.register_callbacks = dlsym(h, "cuptiActivityRegisterCallbacks");
  *(void **)&g_other.enable = dlsym(h, "cuptiActivityEnable");
  *(void **)&g_other.disable = dlsym(h, "cuptiActivityDisable");
  *(void **)&g_other.flush_all = dlsym(h, "cuptiActivityFlushAll");
  *(void **)&g_other.next_record = dlsym(h, "cuptiActivityGetNextRecord");
}

/* The other tool subscribes and records MEMORY2 into its own buffers. */
static void other_start(void) {
  cr_assert_eq(g_other.subscribe(&g_other.sub, other_api, NULL), CUPTI_SUCCESS);
  cr_assert_eq(g_other.register_callbacks(other_requested, other_completed), CUPTI_SUCCESS);
  cr_assert_eq(g_other.enable(CUPTI_ACTIVITY_KIND_MEMORY2), CUPTI_SUCCESS);
}

static void other_stop(void) {
  g_other.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  g_other.disable(CUPTI_ACTIVITY_KIND_MEMORY2);
  g_other.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cr_assert_eq(g_other.unsubscribe(g_other.sub), CUPTI_SUCCESS);
}

static int other_records_after_malloc(void) {
  int before = atomic_load(&g_other_records);
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, 2 * MiB));
  CUDA_OK(cudaFree(p));
  g_other.flush_all(0);
  return atomic_load(&g_other_records) - before;
}

Test(cupti_handover, other_subscriber_first_keeps_its_records) {
  gpu_require("other subscriber first");
  CUDA_OK(cudaFree(0));
  other_open();
  other_start();
  cr_assert_eq(cupti_start(GPUPOOL_CUPTI_AUTO), GPUPOOL_OK, "AUTO degrades, never fails");
  cupti_metrics m;
  cupti_get_metrics(&m);
  cr_assert_eq(m.up, 0);
  cr_assert_str_eq(m.reason, "other_subscriber");
  cr_assert_neq(cupti_start(GPUPOOL_CUPTI_FORCE), GPUPOOL_OK);
  cr_assert(strstr(gpupool_last_error(), "other_subscriber"), "%s", gpupool_last_error());
  /* gpupool made no activity call: the other tool's callbacks still get
   * the records (an activity call would have replaced them). */
  cr_assert_geq(other_records_after_malloc(), 2, "alloc + release records to the other tool");
  other_stop();
}

Test(cupti_handover, release_then_other_tool_then_acquire) {
  cupti_require_recording("hand-over");
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, 2 * MiB));
  cupti_expect_alloc((uint64_t)p, 2 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  CUDA_OK(cudaDeviceSynchronize());
  cr_assert_eq(gpupool_agent_cupti_release(), GPUPOOL_OK);
  cupti_metrics m;
  cupti_get_metrics(&m);
  cr_assert_eq(m.up, 0);
  cr_assert_str_eq(m.reason, "released");

  other_open();
  other_start(); /* the profiler starts mid-run */
  cr_assert_geq(other_records_after_malloc(), 2, "the other tool records after the hand-over");
  cr_assert_neq(gpupool_agent_cupti_acquire(), GPUPOOL_OK, "the profiler still holds CUPTI");
  other_stop();

  cr_assert_eq(gpupool_agent_cupti_acquire(), GPUPOOL_OK, "%s", gpupool_last_error());
  cupti_get_metrics(&m);
  cr_assert_eq(m.up, 1);
  void *q = NULL;
  CUDA_OK(cudaMalloc(&q, 4 * MiB));
  cupti_expect_alloc((uint64_t)q, 4 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  CUDA_OK(cudaFree(q));
  CUDA_OK(cudaFree(p)); /* allocated before the hand-over: an unknown release now */
  cupti_flush();
  cupti_get_metrics(&m);
  cr_assert_geq(m.unknown_releases_total, 1);
}
