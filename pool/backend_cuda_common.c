/* Shared code of the cuda and cuda_async backends (see backend_cuda_common.h),
 * and backend_cuda_device_count, which exists with or without CUDA. */
#include "backend_cuda_common.h"

#include "backend.h"

#ifdef GPUPOOL_HAVE_CUDA
#include <stdatomic.h>
#include <stdio.h>

#include "core/errors.h"

cudaError_t cuda_guard_enter(cuda_device_guard *g, int device) {
  g->switched = 0;
  cudaError_t err = cudaGetDevice(&g->previous);
  if (err != cudaSuccess)
    return err;
  if (g->previous == device)
    return cudaSuccess;
  err = cudaSetDevice(device);
  if (err == cudaSuccess)
    g->switched = 1;
  return err;
}

void cuda_guard_leave(const cuda_device_guard *g) {
  if (g->switched)
    cudaSetDevice(g->previous);
}

gpupool_status cuda_status(cudaError_t err, const char *call, int device, size_t bytes) {
  if (err == cudaSuccess)
    return GPUPOOL_OK;
  (void)cudaGetLastError();
  gpupool_status s = err == cudaErrorMemoryAllocation ? GPUPOOL_ERR_OOM : GPUPOOL_ERR_BACKEND;
  if (bytes)
    return pool_fail(s, "%s of %zu bytes on device %d: %s (%s)", call, bytes, device,
                     cudaGetErrorString(err), cudaGetErrorName(err));
  return pool_fail(s, "%s on device %d: %s (%s)", call, device, cudaGetErrorString(err),
                   cudaGetErrorName(err));
}

gpupool_status cuda_report_free_error(const char *what, int device, cudaError_t err) {
  if (err == cudaSuccess)
    return GPUPOOL_OK;
  (void)cudaGetLastError();
  /* At exit the runtime may be torn down before the last pool: expected. */
  if (err == cudaErrorCudartUnloading)
    return GPUPOOL_OK;
  /* pool/ prints nothing: the reason is the freeing thread's last error. */
  return pool_fail(GPUPOOL_ERR_BACKEND, "%s on device %d failed: %s", what, device,
                   cudaGetErrorString(err));
}

gpupool_status cuda_check_device(const char *backend_name, int device) {
  int count = backend_cuda_device_count();
  if (count == 0)
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "backend %s: no CUDA device visible (no GPU, or no driver)", backend_name);
  if (device < 0 || device >= count)
    return pool_fail(GPUPOOL_ERR_INVALID, "backend %s: device %d out of range (%d visible)",
                     backend_name, device, count);
  return GPUPOOL_OK;
}

gpupool_status cuda_event_record(backend *b, void *stream, void **event) {
  cuda_device_guard g;
  cudaEvent_t e = NULL;
  cudaError_t err = cuda_guard_enter(&g, b->device);
  if (err == cudaSuccess)
    err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (err == cudaSuccess) {
    err = cudaEventRecord(e, (cudaStream_t)stream);
    if (err != cudaSuccess)
      cudaEventDestroy(e);
  }
  cuda_guard_leave(&g);
  if (err == cudaSuccess)
    *event = e;
  return cuda_status(err, "cudaEventRecord", b->device, 0);
}

int cuda_event_query(backend *b, void *event) {
  cudaError_t err = cudaEventQuery((cudaEvent_t)event);
  if (err == cudaSuccess)
    return 1;
  (void)cudaGetLastError();
  return err == cudaErrorNotReady ? 0 : -1;
}

void cuda_event_destroy(backend *b, void *event) {
  cudaError_t err = cudaEventDestroy((cudaEvent_t)event);
  if (err != cudaSuccess)
    (void)cudaGetLastError();
}

gpupool_status cuda_mem_info(backend *b, size_t *free_bytes, size_t *total_bytes) {
  cuda_device_guard g;
  cudaError_t err = cuda_guard_enter(&g, b->device);
  if (err == cudaSuccess)
    err = cudaMemGetInfo(free_bytes, total_bytes);
  cuda_guard_leave(&g);
  return cuda_status(err, "cudaMemGetInfo", b->device, 0);
}

gpupool_status cuda_synchronize(backend *b) {
  cuda_device_guard g;
  cudaError_t err = cuda_guard_enter(&g, b->device);
  if (err == cudaSuccess)
    err = cudaDeviceSynchronize();
  cuda_guard_leave(&g);
  return cuda_status(err, "cudaDeviceSynchronize", b->device, 0);
}

/* No driver, no GPU or a driver too old for this runtime: 0, never an abort. */
int backend_cuda_device_count(void) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

#else

int backend_cuda_device_count(void) {
  return 0;
}

#endif
