/* CUPTI memory activity on a real GPU: each way of allocating is seen with
 * the right size, memory kind and owner, and its release balances it.
 * Run: ctest -L gpu -R cupti, or build/tests/gpu/gpu_cupti_memory --verbose. */
#include "cupti_gpu.h"

#include <time.h>

#include "agent/segment_index.h"
#include "pool/pool_view.h"

Test(cupti_memory, cudaMalloc_and_cudaFree) {
  cupti_require_recording("cudaMalloc");
  uint64_t before = cupti_live_bytes(0, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, 6 * MiB));
  pool_event ev =
      cupti_expect_alloc((uint64_t)p, 6 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  cr_assert_eq(ev.b, 0, "device %lld", (long long)ev.b);
  cr_assert_eq(ev.flags & CUPTI_EVF_ASYNC, 0);
  cr_assert_eq(cupti_live_bytes(0, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER),
               before + 6 * MiB);
  CUDA_OK(cudaFree(p));
  cupti_expect_release((uint64_t)p);
  cr_assert_eq(cupti_live_bytes(0, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER), before);
}

Test(cupti_memory, cuMemAlloc_and_cuMemFree) {
  cupti_require_recording("cuMemAlloc");
  DRIVER_FN(cuMemAlloc, mem_alloc);
  DRIVER_FN(cuMemFree, mem_free);
  CUdeviceptr p = 0;
  CU_OK(mem_alloc(&p, 10 * MiB));
  cupti_expect_alloc(p, 10 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  CU_OK(mem_free(p));
  cupti_expect_release(p);
}

Test(cupti_memory, cudaMallocAsync_default_pool) {
  cupti_require_recording("cudaMallocAsync (default pool)");
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  void *p = NULL;
  CUDA_OK(cudaMallocAsync(&p, 4 * MiB, s));
  CUDA_OK(cudaStreamSynchronize(s));
  pool_event ev =
      cupti_expect_alloc((uint64_t)p, 4 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  cr_assert_neq(ev.flags & CUPTI_EVF_ASYNC, 0, "stream-ordered");
  cr_assert_neq(ev.stream, 0, "a stream id");
  cupti_metrics m;
  cupti_get_metrics(&m);
  cr_assert_geq(m.ndevices, 1);
  uint64_t pool_size = 0;
  for (size_t i = 0; i < m.ndevices; i++)
    if (m.devices[i].device == 0)
      pool_size = m.devices[i].mempool_size_bytes;
  cr_assert_geq(pool_size, 4 * MiB, "the default pool's size from the record: %llu",
                (unsigned long long)pool_size);
  CUDA_OK(cudaFreeAsync(p, s));
  CUDA_OK(cudaStreamSynchronize(s));
  cupti_expect_release((uint64_t)p);
  CUDA_OK(cudaStreamDestroy(s));
}

Test(cupti_memory, cudaMallocAsync_own_pool_created_and_destroyed) {
  cupti_require_recording("cudaMallocAsync (own pool)");
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CUDA_OK(cudaMemPoolCreate(&pool, &props));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  void *p = NULL;
  CUDA_OK(cudaMallocFromPoolAsync(&p, 8 * MiB, pool, s));
  CUDA_OK(cudaStreamSynchronize(s));
  cupti_expect_alloc((uint64_t)p, 8 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  CUDA_OK(cudaFreeAsync(p, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaMemPoolDestroy(pool));
  cupti_flush();
  cupti_metrics m;
  cupti_get_metrics(&m);
  uint64_t created = 0, destroyed = 0;
  for (size_t i = 0; i < m.ndevices; i++) {
    created += m.devices[i].mempools_created;
    destroyed += m.devices[i].mempools_destroyed;
  }
  cr_assert_geq(created, 1, "a MEMORY_POOL CREATED record");
  cr_assert_geq(destroyed, 1, "a MEMORY_POOL DESTROYED record");
  CUDA_OK(cudaStreamDestroy(s));
}

Test(cupti_memory, cudaMallocManaged) {
  cupti_require_recording("cudaMallocManaged");
  void *p = NULL;
  CUDA_OK(cudaMallocManaged(&p, 2 * MiB, cudaMemAttachGlobal));
  cupti_expect_alloc((uint64_t)p, 2 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, OWNER_OTHER);
  CUDA_OK(cudaFree(p));
  cupti_expect_release((uint64_t)p);
}

Test(cupti_memory, cudaMallocHost) {
  cupti_require_recording("cudaMallocHost");
  void *p = NULL;
  CUDA_OK(cudaMallocHost(&p, 2 * MiB));
  cupti_expect_alloc((uint64_t)p, 2 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, OWNER_OTHER);
  CUDA_OK(cudaFreeHost(p));
  cupti_expect_release((uint64_t)p);
}

/* VMM: no record at cuMemCreate or cuMemMap; the allocation shows at
 * cuMemSetAccess and the release at cuMemUnmap. */
Test(cupti_memory, vmm_create_map_set_access) {
  cupti_require_recording("VMM");
  DRIVER_FN(cuMemGetAllocationGranularity, granularity_of);
  DRIVER_FN(cuMemCreate, mem_create);
  DRIVER_FN(cuMemAddressReserve, address_reserve);
  DRIVER_FN(cuMemMap, mem_map);
  DRIVER_FN(cuMemSetAccess, set_access);
  DRIVER_FN(cuMemUnmap, mem_unmap);
  DRIVER_FN(cuMemRelease, mem_release);
  DRIVER_FN(cuMemAddressFree, address_free);
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CU_OK(granularity_of(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size_t size = ((8 * MiB + gran - 1) / gran) * gran;
  CUmemGenericAllocationHandle h;
  CU_OK(mem_create(&h, size, &prop, 0));
  CUdeviceptr va = 0;
  CU_OK(address_reserve(&va, size, 0, 0, 0));
  CU_OK(mem_map(va, size, 0, h, 0));
  pool_event ev;
  cr_assert_not(cupti_find_event(EV_ALLOC, va, &ev), "no record before cuMemSetAccess");
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CU_OK(set_access(va, size, &access, 1));
  cupti_expect_alloc(va, size, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  CU_OK(mem_unmap(va, size));
  cupti_expect_release(va);
  CU_OK(mem_release(h));
  CU_OK(address_free(va, size));
}

static gpupool *make_pool(gpupool_backend backend) {
  gpupool_options opt = {.name = "cupti_gpu", .backend = backend, .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&opt, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

typedef struct first_segment {
  uint64_t addr, size;
} first_segment;

static void on_segment(void *arg, const pool_segment_info *s) {
  first_segment *f = arg;
  if (!f->addr) {
    f->addr = s->addr;
    f->size = s->size;
  }
}

/* A pool's segments are its device allocations: CUPTI sees them and the
 * segment index attributes them to the pool; memory beside it is "other". */
static void check_pool_segments_are_owned(gpupool_backend backend, const char *name) {
  cupti_require_recording(name);
  gpupool *pool = make_pool(backend);
  uint64_t pool_before = cupti_live_bytes(0, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_POOL);
  void *block = NULL;
  cr_assert_eq(gpupool_malloc(pool, &block, MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  void *outside = NULL;
  CUDA_OK(cudaMalloc(&outside, 4 * MiB));
  first_segment seg = {0};
  pool_walker w = {.segment = on_segment, .arg = &seg};
  cr_assert_eq(pool_walk(pool, &w), 1);
  cr_assert(segment_index_contains((uint64_t)block, 0),
            "the pool did not note its segment (cupti_note_segment)");
  cupti_expect_alloc(seg.addr, seg.size, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_POOL);
  cupti_expect_alloc((uint64_t)outside, 4 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  cr_assert_eq(cupti_live_bytes(0, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_POOL),
               pool_before + seg.size);
  cr_assert_eq(gpupool_free(pool, block), GPUPOOL_OK);
  cr_assert_eq(gpupool_empty_cache(pool), seg.size);
  cupti_expect_release(seg.addr);
  cr_assert_eq(cupti_live_bytes(0, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_POOL), pool_before);
  CUDA_OK(cudaFree(outside));
  gpupool_destroy(pool);
}

Test(cupti_memory, cuda_backend_segments_are_owned_by_the_pool) {
  check_pool_segments_are_owned(GPUPOOL_BACKEND_CUDA, "pool segments (cuda backend)");
}

Test(cupti_memory, cuda_async_backend_segments_are_owned_by_the_pool) {
  check_pool_segments_are_owned(GPUPOOL_BACKEND_CUDA_ASYNC, "pool segments (cuda_async backend)");
}

/* A segment allocated and freed between two flushes is still the pool's. */
Test(cupti_memory, short_lived_segment_is_still_owned_by_the_pool) {
  cupti_require_recording("short-lived pool segment");
  gpupool *pool = make_pool(GPUPOOL_BACKEND_CUDA);
  void *block = NULL;
  cr_assert_eq(gpupool_malloc(pool, &block, 30 * MiB, NULL), GPUPOOL_OK, "%s",
               gpupool_last_error());
  first_segment seg = {0};
  pool_walker w = {.segment = on_segment, .arg = &seg};
  pool_walk(pool, &w);
  cr_assert_eq(gpupool_free(pool, block), GPUPOOL_OK);
  cr_assert_eq(gpupool_empty_cache(pool), seg.size);
  /* Only now are the records decoded. */
  cupti_expect_alloc(seg.addr, seg.size, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_POOL);
  cupti_expect_release(seg.addr);
  gpupool_destroy(pool);
}

Test(cupti_memory, records_flow_without_explicit_flushes) {
  cupti_require_recording("flush thread");
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, 2 * MiB));
  cupti_metrics m;
  /* The flush thread runs every 250 ms: wait up to 5 s, no timing asserted. */
  for (int i = 0; i < 50; i++) {
    cupti_get_metrics(&m);
    if (m.records_total > 0)
      break;
    struct timespec t = {0, 100000000};
    nanosleep(&t, NULL);
  }
  cr_assert_gt(m.records_total, 0, "the flush thread delivered nothing in 5 s");
  cr_assert_gt(m.flushes_total, 0);
  cr_assert_eq(m.records_dropped_total, 0);
  CUDA_OK(cudaFree(p));
}

/* The stop delivers what CUPTI holds; the ring keeps it for a trace written
 * after the stop (the agent writes its trace file then). */
Test(cupti_memory, stop_flushes_and_the_ring_keeps_the_records) {
  cupti_require_recording("stop");
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, 2 * MiB));
  cupti_stop();
  cupti_metrics m;
  cupti_get_metrics(&m);
  cr_assert_eq(m.up, 0);
  cr_assert_str_eq(m.reason, "stopped");
  pool_event ev;
  cr_assert(cupti_find_event(EV_ALLOC, (uint64_t)p, &ev), "the stop's forced flush lost a record");
  cr_assert_eq(cupti_live_bytes(-2, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER), 0,
               "live bytes are cleared at stop");
  CUDA_OK(cudaFree(p));
  cr_assert_eq(cupti_start(GPUPOOL_CUPTI_FORCE), GPUPOOL_OK, "restart: %s", gpupool_last_error());
  void *q = NULL;
  CUDA_OK(cudaMalloc(&q, 4 * MiB));
  cupti_expect_alloc((uint64_t)q, 4 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  CUDA_OK(cudaFree(q));
}
