/* What the cuda and cuda_async backends share: error mapping, the current-
 * device guard, and the event, mem_info and synchronize operations (the same
 * for both, since both run on plain CUDA streams). Only with CUDA. */
#ifndef GPUPOOL_BACKEND_CUDA_COMMON_H
#define GPUPOOL_BACKEND_CUDA_COMMON_H

#ifdef GPUPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend.h"

/* Makes `device` current for the duration of a call and puts the caller's
 * device back afterwards, so the pool never changes the application's device. */
typedef struct cuda_device_guard {
  int previous;
  int switched;
} cuda_device_guard;
cudaError_t cuda_guard_enter(cuda_device_guard *g, int device);
void cuda_guard_leave(const cuda_device_guard *g);

/* cudaSuccess -> OK, cudaErrorMemoryAllocation -> OOM, anything else ->
 * BACKEND, with the reason ("<call> of <bytes> bytes on device <n>: <error>";
 * bytes 0 leaves the size out) recorded for gpupool_last_error(). Clears the
 * error the call left behind (cudaGetLastError), so a failed allocation does
 * not show up in the application's next error check. */
gpupool_status cuda_status(cudaError_t err, const char *call, int device, size_t bytes);

/* For the free paths: clears the runtime's error and keeps the reason as
 * the thread's gpupool_last_error() (pool/ prints nothing), returning
 * GPUPOOL_ERR_BACKEND; GPUPOOL_OK for success, and silent during process
 * exit. */
gpupool_status cuda_report_free_error(const char *what, int device, cudaError_t err);

/* UNSUPPORTED when no device is visible (no driver, no GPU), INVALID when
 * device is not a valid ordinal, OK otherwise; the reason names the backend. */
gpupool_status cuda_check_device(const char *backend_name, int device);

gpupool_status cuda_event_record(backend *b, void *stream, void **event);
int cuda_event_query(backend *b, void *event);
void cuda_event_destroy(backend *b, void *event);
gpupool_status cuda_mem_info(backend *b, size_t *free_bytes, size_t *total_bytes);
gpupool_status cuda_synchronize(backend *b);

/* The cuda backend's virtual memory operations (backend_cuda_vmm.c), with the
 * driver entry points resolved through the runtime (libcuda is never linked).
 * NULL, with *page_size 0, when they are unavailable: no driver entry points,
 * or `device` without virtual memory management; else the ops, with
 * *page_size the recommended granularity of pinned memory on `device`
 * (2 MiB on current GPUs), and *shareable 1 where the device can export
 * pages as POSIX file descriptors (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_
 * FILE_DESCRIPTOR_SUPPORTED): pages are then created exportable. Creates no
 * context unless the driver needs one to report the granularity. Thread-safe. */
const backend_vmm_ops *cuda_vmm_ops(int device, size_t *page_size, int *shareable);
/* Why the last cuda_vmm_ops call on this thread returned NULL ("" if it did not). */
const char *cuda_vmm_unavailable_reason(void);
#endif

#endif
