/* The cuda_async backend: segments from cudaMallocFromPoolAsync/cudaFreeAsync
 * on a cudaMemPool of its own (not the device's default pool, which the
 * application and other libraries share), ordered on the segment's stream. */
#include "backend.h"
#include "core/errors.h"

#ifdef GPUPOOL_HAVE_CUDA
#include <stdint.h>
#include <stdlib.h>

#include "backend_cuda_common.h"

typedef struct cuda_async_backend {
  backend base;
  cudaMemPool_t mempool;
} cuda_async_backend;

static cudaMemPool_t mempool_of(backend *b) {
  return ((cuda_async_backend *)b)->mempool;
}

static gpupool_status async_alloc(backend *b, void **ptr, size_t size, void *stream) {
  cuda_device_guard g; /* the NULL stream means this device's default stream */
  cudaError_t err = cuda_guard_enter(&g, b->device);
  if (err == cudaSuccess)
    err = cudaMallocFromPoolAsync(ptr, size, mempool_of(b), stream);
  cuda_guard_leave(&g);
  return cuda_status(err, "cudaMallocFromPoolAsync", b->device, size);
}

static void async_free(backend *b, void *ptr, size_t size, void *stream) {
  cuda_device_guard g;
  cudaError_t err = cuda_guard_enter(&g, b->device);
  if (err == cudaSuccess)
    err = cudaFreeAsync(ptr, stream);
  cuda_guard_leave(&g);
  cuda_report_free_error("cudaFreeAsync", b->device, err);
}

static int async_mempool_attrs(backend *b, uint64_t out[4]) {
  static const enum cudaMemPoolAttr attrs[4] = {
      cudaMemPoolAttrReservedMemCurrent, cudaMemPoolAttrReservedMemHigh,
      cudaMemPoolAttrUsedMemCurrent, cudaMemPoolAttrUsedMemHigh};
  for (int i = 0; i < 4; i++) {
    uint64_t v = 0;
    cudaError_t err = cudaMemPoolGetAttribute(mempool_of(b), attrs[i], &v);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    out[i] = v;
  }
  return 0;
}

static void async_destroy(backend *b) {
  /* Allocations still outstanding keep the pool alive until they are freed. */
  cuda_report_free_error("cudaMemPoolDestroy", b->device, cudaMemPoolDestroy(mempool_of(b)));
  free(b);
}

static const backend_ops cuda_async_ops = {
    .alloc = async_alloc,
    .free = async_free,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_destroy = cuda_event_destroy,
    .mem_info = cuda_mem_info,
    .synchronize = cuda_synchronize,
    .mempool_attrs = async_mempool_attrs,
    .destroy = async_destroy,
};

static cudaError_t create_mempool(int device, cudaMemPool_t *out) {
  struct cudaMemPoolProps props = {0};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaError_t err = cudaMemPoolCreate(out, &props);
  if (err != cudaSuccess)
    return err;
  /* Release threshold 0 (trim to nothing at each synchronize). gpupool is the
   * cache: it keeps freed blocks in its own segments and calls cudaFreeAsync
   * only when it means to give memory back (empty_cache, garbage collection,
   * the OOM path). A high threshold would make the cudaMemPool a second,
   * hidden cache under it: memory "released" by empty_cache would stay
   * reserved, out of reach of cudaMalloc, other pools and other processes,
   * and the driver's numbers would drift from gpupool's reserved_bytes. The
   * cost, a slower cudaMallocAsync after a trim, falls on the device path that
   * the pool already keeps off its hot path. */
  uint64_t threshold = 0;
  err = cudaMemPoolSetAttribute(*out, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (err != cudaSuccess)
    cudaMemPoolDestroy(*out);
  return err;
}

gpupool_status backend_cuda_async_create(int device, backend **out) {
  gpupool_status st = cuda_check_device("cuda_async", device);
  if (st != GPUPOOL_OK)
    return st;
  int supported = 0;
  cudaError_t err = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device);
  if (err != cudaSuccess)
    return cuda_status(err, "cudaDeviceGetAttribute", device, 0);
  if (!supported)
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "backend cuda_async: device %d does not support memory pools", device);

  cuda_async_backend *a = calloc(1, sizeof *a);
  if (!a)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "backend cuda_async: out of host memory");
  err = create_mempool(device, &a->mempool);
  if (err != cudaSuccess) {
    free(a);
    return cuda_status(err, "cudaMemPoolCreate", device, 0);
  }
  a->base.ops = &cuda_async_ops;
  a->base.name = "cuda_async";
  a->base.device = device;
  *out = &a->base;
  return GPUPOOL_OK;
}

#else

gpupool_status backend_cuda_async_create(int device, backend **out) {
  return pool_fail(GPUPOOL_ERR_UNSUPPORTED, "backend cuda_async: gpupool was built without CUDA");
}

#endif
