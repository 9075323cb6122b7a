/* The cuda and cuda_async backends on a real GPU, through the public API:
 * memory that holds data, record_stream across two real streams, OOM and
 * recovery, statistics, empty_cache. Each test prints the device it ran on;
 * without a visible device each test is skipped with the reason. */
#include <criterion/criterion.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_check.h"
#include "gpupool/gpupool.h"
#include "gpupool/host.h"
#include "pool/backend.h"
#include "pool/backend_cuda_common.h"
#include "pool/pool_view.h"

#define MiB ((size_t)1 << 20)

/* Skips the test when no device is visible; prints the device otherwise. */
static void require_gpu(const char *backend_name) {
  char what[64];
  snprintf(what, sizeof what, "backend %s", backend_name);
  gpu_require(what);
}

/* A pool named name on device with tunables conf (NULL: none). */
static gpupool *make_pool_with(gpupool_backend backend, int device, const char *name,
                               const char *conf) {
  gpupool_options opt = {
      .name = name, .backend = backend, .device = device, .tunables = conf, .ignore_env = 1};
  gpupool *p = NULL;
  gpupool_status st = gpupool_create(&opt, &p);
  cr_assert_eq(st, GPUPOOL_OK, "gpupool_create: %s: %s", gpupool_status_string(st),
               gpupool_last_error());
  return p;
}

static gpupool *make_pool(gpupool_backend backend, int device) {
  return make_pool_with(backend, device, "gpu_test", NULL);
}

static gpupool_stats stats_of(gpupool *p) {
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
  return s;
}

/* Every byte of the device range [ptr, ptr + size) equals value. */
static void expect_bytes(const void *ptr, size_t size, unsigned char value) {
  unsigned char *host = malloc(size);
  cr_assert_not_null(host);
  CUDA_OK(cudaMemcpy(host, ptr, size, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < size; i++)
    if (host[i] != value)
      cr_assert_fail("byte %zu of %zu is %u, want %u", i, size, host[i], value);
  free(host);
}

static void check_memory_holds_data(gpupool_backend backend, const char *name) {
  require_gpu(name);
  gpupool *p = make_pool(backend, 0);
  cr_assert_str_eq(gpupool_backend_name(p), name);
  const size_t sizes[] = {512, 1000, MiB, 3 * MiB, 12 * MiB, 40 * MiB};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *ptr[N];
  for (int i = 0; i < N; i++) {
    cr_assert_eq(gpupool_malloc(p, &ptr[i], sizes[i], NULL), GPUPOOL_OK, "%zu bytes: %s", sizes[i],
                 gpupool_last_error());
    struct cudaPointerAttributes attr;
    CUDA_OK(cudaPointerGetAttributes(&attr, ptr[i]));
    cr_assert_eq(attr.type, cudaMemoryTypeDevice);
    cr_assert_eq(attr.device, 0);
    CUDA_OK(cudaMemset(ptr[i], i + 1, sizes[i]));
  }
  /* Each allocation still holds its own byte: none overlaps another. */
  for (int i = 0; i < N; i++)
    expect_bytes(ptr[i], sizes[i], (unsigned char)(i + 1));

  /* A pattern through the largest pointer and back. */
  size_t n = sizes[N - 1];
  unsigned char *out = malloc(n), *in = malloc(n);
  cr_assert(out && in);
  for (size_t i = 0; i < n; i++)
    out[i] = (unsigned char)(i * 131 + 7);
  CUDA_OK(cudaMemcpy(ptr[N - 1], out, n, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(in, ptr[N - 1], n, cudaMemcpyDeviceToHost));
  cr_assert_eq(memcmp(in, out, n), 0);
  free(out);
  free(in);

  for (int i = 0; i < N; i++)
    cr_assert_eq(gpupool_free(p, ptr[i]), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(gpu_cuda, memory_holds_data) {
  check_memory_holds_data(GPUPOOL_BACKEND_CUDA, "cuda");
}
Test(gpu_cuda_async, memory_holds_data) {
  check_memory_holds_data(GPUPOOL_BACKEND_CUDA_ASYNC, "cuda_async");
}

/* A host function that keeps its stream busy until the test opens the gate:
 * no kernel and no timing involved. Bounded (10 s) so that a failed test
 * never leaves the stream blocked. */
static void CUDART_CB wait_for_gate(void *arg) {
  atomic_int *open = arg;
  for (int i = 0; i < 10000 && !atomic_load(open); i++)
    usleep(1000);
}

static void check_record_stream_defers_reuse(gpupool_backend backend, const char *name) {
  require_gpu(name);
  cudaStream_t s1, s2;
  CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  gpupool *p = make_pool(backend, 0);
  const size_t size = 12 * MiB; /* >= 10 MiB: a segment of exactly this size */

  void *p1 = NULL, *p2 = NULL, *p3 = NULL;
  cr_assert_eq(gpupool_malloc(p, &p1, size, s1), GPUPOOL_OK, "%s", gpupool_last_error());
  CUDA_OK(cudaStreamSynchronize(s1)); /* cuda_async: the allocation is ordered on s1 */

  atomic_int gate = 0;
  CUDA_OK(cudaLaunchHostFunc(s2, wait_for_gate, &gate));
  CUDA_OK(cudaMemsetAsync(p1, 0x5A, size, s2)); /* s2 uses the block, after the gate */
  cr_assert_eq(gpupool_record_stream(p, p1, s2), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, p1), GPUPOOL_OK);

  gpupool_stats s = stats_of(p);
  cr_assert_eq(s.pending_free_blocks, 1, "the block waits for s2");
  cr_assert_eq(s.num_sync_events, 1);
  cr_assert_eq(s.allocated_bytes[GPUPOOL_STAT_ALL].current, 0);
  cr_assert_geq(s.active_bytes[GPUPOOL_STAT_ALL].current, (int64_t)size);

  cr_assert_eq(gpupool_malloc(p, &p2, size, s1), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_neq(p2, p1, "reused while s2 still has work queued on it");
  s = stats_of(p);
  cr_assert_eq(s.pending_free_blocks, 1, "s2 is still blocked by the gate");
  cr_assert_eq(s.num_device_alloc, 2);

  atomic_store(&gate, 1);
  CUDA_OK(cudaStreamSynchronize(s2));
  cr_assert_eq(gpupool_free(p, p2), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &p3, size, s1), GPUPOOL_OK, "%s", gpupool_last_error());
  s = stats_of(p);
  cr_assert_eq(s.pending_free_blocks, 0, "s2's event completed: the block came back");
  cr_assert(p3 == p1 || p3 == p2);
  cr_assert_eq(s.num_device_alloc, 2, "served from the cache");
  cr_assert_eq(gpupool_free(p, p3), GPUPOOL_OK);

  gpupool_destroy(p); /* before the streams: cuda_async frees on them */
  CUDA_OK(cudaStreamDestroy(s1));
  CUDA_OK(cudaStreamDestroy(s2));
}

Test(gpu_cuda, record_stream_defers_reuse) {
  check_record_stream_defers_reuse(GPUPOOL_BACKEND_CUDA, "cuda");
}
Test(gpu_cuda_async, record_stream_defers_reuse) {
  check_record_stream_defers_reuse(GPUPOOL_BACKEND_CUDA_ASYNC, "cuda_async");
}

static void check_oom_leaves_pool_usable(gpupool_backend backend, const char *name) {
  require_gpu(name);
  gpupool *p = make_pool(backend, 0);
  void *live = NULL, *huge = (void *)0x1, *after = NULL;
  cr_assert_eq(gpupool_malloc(p, &live, 3 * MiB, NULL), GPUPOOL_OK);
  CUDA_OK(cudaMemset(live, 0x3C, 3 * MiB));

  gpupool_status st = gpupool_malloc(p, &huge, (size_t)4 << 40, NULL); /* 4 TiB */
  cr_assert_eq(st, GPUPOOL_ERR_OOM, "got %s: %s", gpupool_status_string(st), gpupool_last_error());
  cr_assert_neq(gpupool_last_error()[0], '\0');
  fprintf(stderr, "[gpu] %s OOM reason: %s\n", name, gpupool_last_error());
  CUDA_OK(cudaGetLastError()); /* the failed allocation left no sticky error */

  cr_assert(strstr(gpupool_last_error(), "larger than the device"), "%s", gpupool_last_error());

  gpupool_stats s = stats_of(p);
  cr_assert_eq(s.num_ooms, 1);
  cr_assert_eq(s.num_alloc_retries, 0, "a request larger than the device is not retried");
  cr_assert_eq(s.allocation[GPUPOOL_STAT_ALL].current, 1, "the live allocation is untouched");
  expect_bytes(live, 3 * MiB, 0x3C);

  cr_assert_eq(gpupool_malloc(p, &after, 12 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  CUDA_OK(cudaMemset(after, 0x11, 12 * MiB));
  expect_bytes(after, 12 * MiB, 0x11);
  cr_assert_eq(gpupool_free(p, after), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, live), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(gpu_cuda, oom_leaves_pool_usable) {
  check_oom_leaves_pool_usable(GPUPOOL_BACKEND_CUDA, "cuda");
}
Test(gpu_cuda_async, oom_leaves_pool_usable) {
  check_oom_leaves_pool_usable(GPUPOOL_BACKEND_CUDA_ASYNC, "cuda_async");
}

/* memory_fraction on a real device: a fraction of about 64 MiB takes a
 * 40 MiB block and refuses a second one (the device has room), naming the
 * cap; raised, the pool grows; the memory holds data. */
static void check_memory_fraction(gpupool_backend backend, const char *name, const char *conf) {
  require_gpu(name);
  size_t free_b, total_b;
  CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  gpupool *p = make_pool_with(backend, 0, "gpu_cap", conf);
  double fraction = (double)(64 * MiB) / (double)total_b;
  cr_assert_eq(gpupool_set_memory_fraction(p, fraction), GPUPOOL_OK);
  void *a = NULL, *b = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 40 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  CUDA_OK(cudaMemset(a, 0x5a, 40 * MiB));
  gpupool_status st = gpupool_malloc(p, &b, 40 * MiB, NULL);
  cr_assert_eq(st, GPUPOOL_ERR_OOM, "%s", gpupool_status_string(st));
  fprintf(stderr, "[gpu] %s (%s) capped OOM: %s\n", name, conf ? conf : "plain",
          gpupool_last_error());
  cr_assert(strstr(gpupool_last_error(), "limit refused it, not the device"), "%s",
            gpupool_last_error());
  CUDA_OK(cudaGetLastError());
  gpupool_stats s = stats_of(p);
  cr_assert_leq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, (int64_t)(64 * MiB));
  cr_assert_eq(gpupool_set_memory_fraction(p, 1.0), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &b, 40 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  CUDA_OK(cudaMemset(b, 0x11, 40 * MiB));
  expect_bytes(a, 40 * MiB, 0x5a);
  expect_bytes(b, 40 * MiB, 0x11);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, b), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(gpu_cuda, memory_fraction_caps_the_pool) {
  check_memory_fraction(GPUPOOL_BACKEND_CUDA, "cuda", NULL);
}
Test(gpu_cuda, memory_fraction_caps_an_expandable_pool) {
  check_memory_fraction(GPUPOOL_BACKEND_CUDA, "cuda", "expandable_segments:True");
}
Test(gpu_cuda_async, memory_fraction_caps_the_pool) {
  check_memory_fraction(GPUPOOL_BACKEND_CUDA_ASYNC, "cuda_async", NULL);
}

static void check_stats_and_empty_cache(gpupool_backend backend, const char *name) {
  require_gpu(name);
  gpupool *p = make_pool(backend, 0);
  void *a = NULL, *b = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &a, MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &b, 12 * MiB, NULL), GPUPOOL_OK);
  gpupool_stats s = stats_of(p);
  cr_assert_eq(s.num_device_alloc, 2, "one small and one large segment");
  cr_assert_eq(s.num_cache_hits, 1, "the second 1 MiB came from the cache");
  cr_assert_eq(s.num_device_sourced, 2);
  cr_assert_eq(s.allocation[GPUPOOL_STAT_ALL].allocated, 3);

  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, b), GPUPOOL_OK);
  s = stats_of(p);
  int64_t reserved = s.reserved_bytes[GPUPOOL_STAT_ALL].current;
  cr_assert_geq(reserved, (int64_t)(13 * MiB));

  size_t released = gpupool_empty_cache(p);
  cr_assert_eq(released, (size_t)reserved, "empty_cache returns what was reserved");
  s = stats_of(p);
  cr_assert_eq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, 0);
  cr_assert_eq(s.segment[GPUPOOL_STAT_ALL].current, 0);
  cr_assert_eq(s.num_device_free, s.num_device_alloc);
  gpupool_destroy(p);
}

Test(gpu_cuda, stats_and_empty_cache) {
  check_stats_and_empty_cache(GPUPOOL_BACKEND_CUDA, "cuda");
}
Test(gpu_cuda_async, stats_and_empty_cache) {
  check_stats_and_empty_cache(GPUPOOL_BACKEND_CUDA_ASYNC, "cuda_async");
}

/* fork() with a pool of device memory (a DataLoader's workers): the child
 * is refused the parent's pool with the reason and makes no CUDA call (it
 * cannot use the parent's context); the parent's memory keeps its data. */
static void check_forked_child_is_refused(gpupool_backend backend, const char *name,
                                          const char *conf) {
  require_gpu(name);
  gpupool *p = make_pool_with(backend, 0, "gpu_fork", conf);
  void *a = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 3 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  CUDA_OK(cudaMemset(a, 0x3c, 3 * MiB));
  CUDA_OK(cudaDeviceSynchronize());
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK); /* cached: a hit would hand it out again */
  fflush(NULL);
  pid_t child = fork();
  cr_assert_neq(child, -1);
  if (child == 0) {
    alarm(10);
    void *b = NULL;
    gpupool_stats s;
    const char *e;
    int ok = gpupool_malloc(p, &b, 3 * MiB, NULL) == GPUPOOL_ERR_UNSUPPORTED && !b &&
             (e = gpupool_last_error()) && strstr(e, "forked") && strstr(e, "gpu_fork") &&
             gpupool_get_stats(p, &s) == GPUPOOL_ERR_UNSUPPORTED && gpupool_empty_cache(p) == 0;
    gpupool_destroy(p);
    _exit(ok ? 0 : 3);
  }
  int status;
  cr_assert_eq(waitpid(child, &status, 0), child);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "child: status %#x (exit 3: a call was not refused; signal 14: a hang)", status);
  void *again = NULL;
  cr_assert_eq(gpupool_malloc(p, &again, 3 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(again, a, "the cached block serves the parent again");
  expect_bytes(again, 3 * MiB, 0x3c);
  cr_assert_eq(gpupool_free(p, again), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(gpu_cuda, a_forked_child_is_refused_the_pool) {
  check_forked_child_is_refused(GPUPOOL_BACKEND_CUDA, "cuda", NULL);
}
Test(gpu_cuda, a_forked_child_is_refused_an_expandable_pool) {
  check_forked_child_is_refused(GPUPOOL_BACKEND_CUDA, "cuda", "expandable_segments:True");
}
Test(gpu_cuda_async, a_forked_child_is_refused_the_pool) {
  check_forked_child_is_refused(GPUPOOL_BACKEND_CUDA_ASYNC, "cuda_async", NULL);
}

Test(gpu_cuda_async, mempool_attributes_follow_the_pool) {
  require_gpu("cuda_async");
  gpupool *p = make_pool(GPUPOOL_BACKEND_CUDA_ASYNC, 0);
  void *a = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 12 * MiB, NULL), GPUPOOL_OK);
  pool_backend_info info;
  pool_get_backend_info(p, &info);
  cr_assert(info.valid, "cudaMemPoolGetAttribute read");
  cr_assert_geq(info.used_current, 12 * MiB);
  cr_assert_geq(info.reserved_current, info.used_current);

  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_gt(gpupool_empty_cache(p), 0);
  CUDA_OK(cudaDeviceSynchronize()); /* release threshold 0: trimmed at a sync */
  pool_get_backend_info(p, &info);
  cr_assert_eq(info.used_current, 0);
  cr_assert_eq(info.reserved_current, 0, "memory went back to the device, not into a hidden cache");
  cr_assert_geq(info.reserved_high, 12 * MiB);
  gpupool_destroy(p);
}

Test(gpu_cuda, pool_keeps_the_callers_device) {
  require_gpu("cuda");
  int count = 0;
  CUDA_OK(cudaGetDeviceCount(&count));
  if (count < 2)
    cr_skip("needs two devices, %d visible", count);
  CUDA_OK(cudaSetDevice(0));
  gpupool *p = make_pool(GPUPOOL_BACKEND_CUDA, 1);
  void *a = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, 12 * MiB, NULL), GPUPOOL_OK);
  struct cudaPointerAttributes attr;
  CUDA_OK(cudaPointerGetAttributes(&attr, a));
  cr_assert_eq(attr.device, 1, "allocated on the pool's device");
  int current = -1;
  CUDA_OK(cudaGetDevice(&current));
  cr_assert_eq(current, 0, "the caller's current device is unchanged");
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(gpu_cuda, host_fault_injection_is_unsupported) {
  require_gpu("cuda");
  gpupool *p = make_pool(GPUPOOL_BACKEND_CUDA, 0);
  cr_assert_eq(gpupool_host_inject_faults(p, 1, 0, 0), GPUPOOL_ERR_UNSUPPORTED);
  cr_assert(strstr(gpupool_last_error(), "cuda"), "reason: %s", gpupool_last_error());
  gpupool_destroy(p);
}

/* Where a GPU is present the default backend is cuda: fault keys, which only
 * the host backend honours, are refused rather than ignored. */
Test(gpu_cuda, fault_keys_on_the_default_backend_are_refused) {
  require_gpu("cuda");
  setenv("GPUPOOL_CONF", "fault_every_n:2", 1);
  gpupool *p = NULL;
  gpupool_status st = gpupool_create(NULL, &p);
  unsetenv("GPUPOOL_CONF");
  cr_expect_eq(st, GPUPOOL_ERR_INVALID, "status %s", gpupool_status_string(st));
  cr_expect_null(p);
  cr_expect(strstr(gpupool_last_error(), "fault"), "reason: %s", gpupool_last_error());
  if (p)
    gpupool_destroy(p);
}

/* The cuda backend's VMM operations (expandable segments), driven directly. */

/* A driver function, looked up as the backend does (NULL if absent). */
static void *driver_entry_point(const char *symbol) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

/* Whether the driver says device 0 supports virtual memory management, asked
 * independently of the backend: 1, 0, or -1 when the driver cannot be asked. */
static int driver_says_vmm(void) {
  PFN_cuDeviceGet_v2000 device_get;
  PFN_cuDeviceGetAttribute_v2000 get_attribute;
  *(void **)&device_get = driver_entry_point("cuDeviceGet");
  *(void **)&get_attribute = driver_entry_point("cuDeviceGetAttribute");
  CUdevice dev = 0;
  int supported = 0;
  if (!device_get || !get_attribute || device_get(&dev, 0) != CUDA_SUCCESS ||
      get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
          CUDA_SUCCESS)
    return -1;
  return supported != 0;
}

/* A cuda backend on device 0 with vmm ops; skips where the device has none. */
static backend *vmm_backend(void) {
  require_gpu("cuda (vmm)");
  backend *b = NULL;
  gpupool_status st = backend_cuda_create(0, &b);
  cr_assert_eq(st, GPUPOOL_OK, "backend_cuda_create: %s: %s", gpupool_status_string(st),
               gpupool_last_error());
  if (!b->ops->vmm) {
    const char *why = cuda_vmm_unavailable_reason();
    int driver = driver_says_vmm();
    b->ops->destroy(b);
    cr_assert_neq(driver, 1, "the driver supports VMM on device 0 but the backend has none: %s",
                  why);
    cr_skip("device 0 without VMM: %s", why);
  }
  cr_assert_gt(b->page_size, 0);
  cr_assert_eq(b->page_size & (b->page_size - 1), 0, "page size %zu: a power of two", b->page_size);
  fprintf(stderr, "[gpu] cuda vmm page size: %zu bytes\n", b->page_size);
  return b;
}

/* Every byte of the device range [ptr, ptr + size) equals want[0..size). */
static void expect_pattern(const void *ptr, const unsigned char *want, size_t size,
                           const char *what) {
  unsigned char *host = malloc(size);
  cr_assert_not_null(host);
  CUDA_OK(cudaMemcpy(host, ptr, size, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < size; i++)
    if (host[i] != want[i])
      cr_assert_fail("%s: byte %zu of %zu is %u, want %u", what, i, size, host[i], want[i]);
  free(host);
}

Test(gpu_cuda, vmm_pages_hold_data_and_move) {
  backend *b = vmm_backend();
  const backend_vmm_ops *vmm = b->ops->vmm;
  const size_t page = b->page_size, size = 4 * page;

  void *base = NULL;
  cr_assert_eq(vmm->reserve(b, size, &base), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_not_null(base);
  cr_assert_eq((uintptr_t)base % page, 0, "the range is aligned to the page size");
  char *at = base;

  void *h[4] = {0};
  cr_assert_eq(vmm->create(b, h, 4), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(vmm->map(b, base, h, 4), GPUPOOL_OK, "%s", gpupool_last_error());
  int current = -1;
  CUDA_OK(cudaGetDevice(&current));
  cr_assert_eq(current, 0);

  struct cudaPointerAttributes attr;
  CUDA_OK(cudaPointerGetAttributes(&attr, base));
  cr_expect_eq(attr.type, cudaMemoryTypeDevice);
  cr_expect_eq(attr.device, 0);

  /* One memset and one copy through all four mappings. */
  unsigned char *out = malloc(size);
  cr_assert_not_null(out);
  for (size_t i = 0; i < size; i++)
    out[i] = (unsigned char)(i * 131 + 7 + i / page);
  CUDA_OK(cudaMemset(base, 0x77, size));
  expect_bytes(base, size, 0x77);
  CUDA_OK(cudaMemcpy(base, out, size, cudaMemcpyHostToDevice));
  expect_pattern(base, out, size, "all four pages");

  /* Unmap pages 1 and 2; map a fresh page at 1 and page 1's old memory at 2,
   * as the pool does when it moves an idle page. */
  cr_assert_eq(vmm->unmap(b, at + page, 2), GPUPOOL_OK, "%s", gpupool_last_error());
  vmm->release(b, &h[2], 1);
  void *fresh = NULL;
  cr_assert_eq(vmm->create(b, &fresh, 1), GPUPOOL_OK, "%s", gpupool_last_error());
  void *const again[2] = {fresh, h[1]};
  cr_assert_eq(vmm->map(b, at + page, again, 2), GPUPOOL_OK, "%s", gpupool_last_error());
  h[2] = h[1];
  h[1] = fresh;
  expect_pattern(at, out, page, "page 0, untouched");
  expect_pattern(at + 3 * page, out + 3 * page, page, "page 3, untouched");
  expect_pattern(at + 2 * page, out + page, page, "page 1's memory, now at 2");
  CUDA_OK(cudaMemset(at + page, 0xA5, page));
  expect_bytes(at + page, page, 0xA5);
  expect_pattern(at + 2 * page, out + page, page, "page 2, after a write to page 1");
  CUDA_OK(cudaMemcpy(base, out, size, cudaMemcpyHostToDevice));
  expect_pattern(base, out, size, "all four pages, remapped");

  cr_assert_eq(vmm->unmap(b, base, 4), GPUPOOL_OK, "%s", gpupool_last_error());
  vmm->release(b, h, 4);
  vmm->unreserve(b, base, size);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
  free(out);
  b->ops->destroy(b);
}

Test(gpu_cuda, vmm_map_is_all_or_none) {
  backend *b = vmm_backend();
  const backend_vmm_ops *vmm = b->ops->vmm;
  const size_t page = b->page_size;
  void *base = NULL, *h[3] = {0};
  cr_assert_eq(vmm->reserve(b, 2 * page, &base), GPUPOOL_OK, "%s", gpupool_last_error());
  char *at = base;
  cr_assert_eq(vmm->create(b, h, 3), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(vmm->map(b, at + page, &h[2], 1), GPUPOOL_OK, "%s", gpupool_last_error());

  /* Page 0 maps, page 1 is taken: the call fails and leaves page 0 unmapped. */
  gpupool_status st = vmm->map(b, base, h, 2);
  cr_assert_neq(st, GPUPOOL_OK, "mapped over a mapped page");
  cr_expect_eq(st, GPUPOOL_ERR_BACKEND, "got %s", gpupool_status_string(st));
  cr_expect(strstr(gpupool_last_error(), "cuMemMap"), "reason: %s", gpupool_last_error());
  fprintf(stderr, "[gpu] map over a mapped page: %s\n", gpupool_last_error());
  cr_assert_eq(vmm->map(b, base, h, 1), GPUPOOL_OK, "page 0 was left mapped: %s",
               gpupool_last_error());
  CUDA_OK(cudaMemset(base, 0x5C, 2 * page));
  expect_bytes(base, 2 * page, 0x5C);

  cr_assert_eq(vmm->unmap(b, base, 1), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(vmm->unmap(b, at + page, 1), GPUPOOL_OK, "%s", gpupool_last_error());
  vmm->release(b, h, 3);
  vmm->unreserve(b, base, 2 * page);
  CUDA_OK(cudaGetLastError());
  b->ops->destroy(b);
}

Test(gpu_cuda, vmm_empty_and_invalid_requests) {
  backend *b = vmm_backend();
  const backend_vmm_ops *vmm = b->ops->vmm;
  const size_t page = b->page_size;
  void *base = NULL, *h = (void *)0x1;
  cr_assert_eq(vmm->reserve(b, page, &base), GPUPOOL_OK, "%s", gpupool_last_error());
  /* n == 0: nothing to do, nothing done (h is not touched). */
  cr_assert_eq(vmm->create(b, &h, 0), GPUPOOL_OK);
  cr_assert_eq(h, (void *)0x1);
  cr_assert_eq(vmm->map(b, base, NULL, 0), GPUPOOL_OK);
  cr_assert_eq(vmm->unmap(b, base, 0), GPUPOOL_OK, "%s", gpupool_last_error());
  vmm->release(b, NULL, 0);
  /* Sizes that are not whole pages are refused before the driver sees them. */
  void *other = NULL;
  cr_assert_eq(vmm->reserve(b, page + 1, &other), GPUPOOL_ERR_INVALID);
  cr_assert_eq(vmm->reserve(b, 0, &other), GPUPOOL_ERR_INVALID);
  cr_assert_null(other);
  vmm->unreserve(b, base, page);
  CUDA_OK(cudaGetLastError());
  b->ops->destroy(b);
}

Test(gpu_cuda_async, has_no_vmm) {
  require_gpu("cuda_async");
  backend *b = NULL;
  cr_assert_eq(backend_cuda_async_create(0, &b), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_null(b->ops->vmm);
  cr_assert_eq(b->page_size, 0);
  b->ops->destroy(b);
}
