/* The cuda backend: segments from cudaMalloc/cudaFree on one device. */
#include "backend.h"
#include "core/errors.h"

#ifdef GPUPOOL_HAVE_CUDA
#include <stdlib.h>

#include "backend_cuda_common.h"

static gpupool_status cuda_alloc(backend *b, void **ptr, size_t size, void *stream) {
  cuda_device_guard g;
  cudaError_t err = cuda_guard_enter(&g, b->device);
  if (err == cudaSuccess)
    err = cudaMalloc(ptr, size);
  cuda_guard_leave(&g);
  return cuda_status(err, "cudaMalloc", b->device, size);
}

static void cuda_free(backend *b, void *ptr, size_t size, void *stream) {
  cuda_device_guard g;
  cudaError_t err = cuda_guard_enter(&g, b->device);
  if (err == cudaSuccess)
    err = cudaFree(ptr);
  cuda_guard_leave(&g);
  cuda_report_free_error("cudaFree", b->device, err);
}

/* Each backend holds its own copy of the ops: vmm is set per device. */
typedef struct cuda_backend {
  backend base;
  backend_ops ops;
} cuda_backend;

static void cuda_destroy(backend *b) {
  free((cuda_backend *)b);
}

static const backend_ops cuda_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_destroy = cuda_event_destroy,
    .mem_info = cuda_mem_info,
    .synchronize = cuda_synchronize,
    .mempool_attrs = NULL,
    .destroy = cuda_destroy,
    .vmm = NULL, /* set by backend_cuda_create where the device has it */
};

gpupool_status backend_cuda_create(int device, backend **out) {
  gpupool_status st = cuda_check_device("cuda", device);
  if (st != GPUPOOL_OK)
    return st;
  cuda_backend *c = calloc(1, sizeof *c);
  if (!c)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "backend cuda: out of host memory");
  c->ops = cuda_ops;
  /* NULL, page_size 0: no vmm */
  c->ops.vmm = cuda_vmm_ops(device, &c->base.page_size, &c->base.shareable);
  c->base.ops = &c->ops;
  c->base.name = "cuda";
  c->base.device = device;
  *out = &c->base;
  return GPUPOOL_OK;
}

#else

gpupool_status backend_cuda_create(int device, backend **out) {
  return pool_fail(GPUPOOL_ERR_UNSUPPORTED, "backend cuda: gpupool was built without CUDA");
}

#endif
