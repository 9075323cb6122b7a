/* Shared helpers of the CUPTI GPU tests (tests/gpu/cupti_*.c): start the
 * subscriber, flush, and look for the records of one allocation in the
 * CUPTI event ring and the metrics. Static functions only: each test file
 * is its own executable. */
#ifndef GPUPOOL_TESTS_CUPTI_GPU_H
#define GPUPOOL_TESTS_CUPTI_GPU_H

#include <criterion/criterion.h>
#include <cuda.h>
#include <cupti_activity.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "agent/cupti.h"
#include "gpu_check.h"
#include "gpupool/gpupool.h"

#define MiB ((size_t)1 << 20)
enum { OWNER_POOL = 0, OWNER_OTHER = 1 };

#define CU_OK(call)                                                                                \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    cr_assert_eq(r_, CUDA_SUCCESS, "%s: CUresult %d", #call, (int)r_);                             \
  } while (0)

/* A driver API function without linking libcuda (the test binary must load
 * on a machine without a driver, to skip there). */
#define DRIVER_FN(name, var)                                                                       \
  __typeof__(name) *var = NULL;                                                                    \
  do {                                                                                             \
    enum cudaDriverEntryPointQueryResult q_;                                                       \
    CUDA_OK(                                                                                       \
        cudaGetDriverEntryPointByVersion(#name, (void **)&var, 12000, cudaEnableDefault, &q_));    \
    cr_assert_eq(q_, cudaDriverEntryPointSuccess, "driver entry point %s", #name);                 \
  } while (0)

/* Device present and CUPTI recording (FORCE: a failure says why). */
static inline void cupti_require_recording(const char *test) {
  gpu_require(test);
  gpupool_status s = cupti_start(GPUPOOL_CUPTI_FORCE);
  cr_assert_eq(s, GPUPOOL_OK, "cupti_start: %s", gpupool_last_error());
  cupti_metrics m;
  cupti_get_metrics(&m);
  cr_assert_eq(m.up, 1, "reason %s", m.reason);
  CUDA_OK(cudaFree(0)); /* the primary context, so that later calls only allocate */
}

/* After a flush, the last event of `type` at addr in the CUPTI ring; 1 when
 * there is one. */
static inline int cupti_find_event(uint8_t type, uint64_t addr, pool_event *out) {
  cupti_flush();
  event_ring *r = cupti_event_ring();
  cr_assert_not_null(r, "CUPTI is not recording");
  static pool_event ev[4096];
  uint64_t cursor = 0, skipped = 0;
  int found = 0;
  size_t n;
  while ((n = event_ring_read(r, &cursor, ev, 4096, &skipped)) > 0)
    for (size_t i = 0; i < n; i++)
      if (ev[i].type == type && ev[i].addr == addr) {
        *out = ev[i];
        found = 1;
      }
  event_ring_unref(r);
  return found;
}

/* The allocation event of addr, checked for size, kind and owner. */
static inline pool_event cupti_expect_alloc(uint64_t addr, uint64_t size, int kind, int owner) {
  pool_event ev = {0};
  cr_assert(cupti_find_event(EV_ALLOC, addr, &ev), "no CUPTI allocation record at %#llx",
            (unsigned long long)addr);
  cr_assert_eq(ev.size, size, "size %llu, want %llu", (unsigned long long)ev.size,
               (unsigned long long)size);
  cr_assert_eq(ev.a, (uint64_t)kind, "memory kind %s, want %s", cupti_memory_kind_name((int)ev.a),
               cupti_memory_kind_name(kind));
  int ev_owner = ev.flags & CUPTI_EVF_POOL ? OWNER_POOL : OWNER_OTHER;
  cr_assert_eq(ev_owner, owner, "owner %s, want %s", ev_owner == OWNER_POOL ? "pool" : "other",
               owner == OWNER_POOL ? "pool" : "other");
  return ev;
}

static inline void cupti_expect_release(uint64_t addr) {
  pool_event ev;
  cr_assert(cupti_find_event(EV_FREE, addr, &ev), "no CUPTI release record at %#llx",
            (unsigned long long)addr);
  cr_assert_eq(ev.flags & CUPTI_EVF_UNKNOWN, 0, "the release did not match the allocation");
}

/* Live bytes CUPTI sees on device (any device when device < -1) for kind
 * and owner. */
static inline uint64_t cupti_live_bytes(int device, int kind, int owner) {
  static cupti_metrics m;
  cupti_get_metrics(&m);
  uint64_t sum = 0;
  for (size_t i = 0; i < m.ndevices; i++)
    if (device < -1 || m.devices[i].device == device)
      sum += m.devices[i].live_bytes[kind][owner];
  return sum;
}

#endif
