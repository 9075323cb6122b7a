/* The device-memory backends behind one small interface: whole segments are
 * allocated and freed here; the pool caches and splits them. Streams and
 * events are opaque handles (cudaStream_t / cudaEvent_t for the CUDA
 * backends, simulated ones for the host backend). */
#ifndef GPUPOOL_BACKEND_H
#define GPUPOOL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool/gpupool.h"

typedef struct backend backend;

/* Virtual memory management, for expandable segments (optional: a backend
 * without it has vmm NULL). Physical memory comes in pages of
 * backend.page_size bytes, one handle each, mapped into reserved address
 * ranges; the pool maps a page where a block needs memory and moves idle
 * pages (under free blocks) to where they are needed, so what it holds
 * follows what is allocated instead of what was ever split. */
typedef struct backend_vmm_ops {
  /* An address range of size bytes (a multiple of page_size), no memory. */
  gpupool_status (*reserve)(backend *b, size_t size, void **base);
  void (*unreserve)(backend *b, void *base, size_t size);
  /* n pages of physical memory into handles; all or none: GPUPOOL_ERR_OOM
   * when the device is full, GPUPOOL_ERR_BACKEND otherwise. */
  gpupool_status (*create)(backend *b, void **handles, size_t n);
  void (*release)(backend *b, void *const *handles, size_t n);
  /* Maps handles[i] at addr + i * page_size, readable and writable by the
   * device; all or none. */
  gpupool_status (*map)(backend *b, void *addr, void *const *handles, size_t n);
  /* Unmaps n pages mapped at addr (the handles stay valid). Every page is
   * tried; GPUPOOL_ERR_BACKEND with the reason where one failed. */
  gpupool_status (*unmap)(backend *b, void *addr, size_t n);
  /* Sharing with other processes (share.c). export_page: a new file
   * descriptor (the caller closes it) for the memory of page handle h, which
   * starts at *offset in that file (the caller checks b->shareable first;
   * GPUPOOL_ERR_UNSUPPORTED for a page created plain). map_shared: maps the page at offset of
   * such a descriptor, received from another process, at addr (readable and
   * writable by the device; unmap undoes it); fd stays the caller's. */
  gpupool_status (*export_page)(backend *b, void *h, int *fd, uint64_t *offset);
  gpupool_status (*map_shared)(backend *b, void *addr, int fd, uint64_t offset);
} backend_vmm_ops;

typedef struct backend_ops {
  /* GPUPOOL_ERR_OOM when the device is full, GPUPOOL_ERR_BACKEND otherwise. */
  gpupool_status (*alloc)(backend *b, void **ptr, size_t size, void *stream);
  void (*free)(backend *b, void *ptr, size_t size, void *stream);
  /* Record an event on stream; *event is released with event_destroy. */
  gpupool_status (*event_record)(backend *b, void *stream, void **event);
  /* 1: complete, 0: pending, -1: error (treated as complete by the pool). */
  int (*event_query)(backend *b, void *event);
  void (*event_destroy)(backend *b, void *event);
  /* Device memory as the driver sees it (or the simulated device). */
  gpupool_status (*mem_info)(backend *b, size_t *free_bytes, size_t *total_bytes);
  /* Wait for all device work (before releasing memory other streams may use). */
  gpupool_status (*synchronize)(backend *b);
  /* Optional (NULL when absent): cudaMemPool attributes of the cuda_async
   * backend: reserved current/high and used current/high, bytes. 0 on success. */
  int (*mempool_attrs)(backend *b, uint64_t out[4]);
  void (*destroy)(backend *b);
  const backend_vmm_ops *vmm; /* NULL: no expandable segments */
} backend_ops;

struct backend {
  const backend_ops *ops;
  const char *name; /* "cuda", "cuda_async", "host", "sim" */
  int device;
  size_t page_size; /* of vmm pages; 0 without vmm */
  /* vmm pages are created exportable (POSIX file descriptors); changed only
   * under the pool's slow lock (a driver refusing them turns it off). */
  int shareable;
};

typedef struct host_backend_config {
  size_t capacity; /* simulated device bytes */
  unsigned fail_every_n;
  double fail_rate;
  uint64_t fail_seed;
} host_backend_config;

gpupool_status backend_host_create(const host_backend_config *cfg, backend **out);
/* How the reason (gpupool_last_error) of an allocation failed by fault
 * injection begins: the OOM report tells such a failure by it. */
#define HOST_INJECTED_FAULT "host backend: injected fault"
/* Change fault injection on a host backend at run time. */
void backend_host_set_faults(backend *b, unsigned every_n, double rate, uint64_t seed);
int backend_is_host(const backend *b);
/* Host backend: set the bytes held by simulated other allocations
 * (GPUPOOL_ERR_OOM when they do not fit), and read them. */
gpupool_status backend_host_set_other(backend *b, size_t bytes);
size_t backend_host_other(backend *b);

/* The simulated backend (backend_sim.c), for replays: fake addresses that
 * must never be dereferenced, capacity accounting, vmm without mappings,
 * events complete at once; one thread at a time. Pools on it stay out of the
 * registry and record no events: the agent never sees them. */
gpupool_status backend_sim_create(size_t capacity, backend **out);
int backend_is_sim(const backend *b);
/* Host or sim: no device memory behind it (CUPTI never sees it). */
static inline int backend_is_simulated(const backend *b) {
  return backend_is_host(b) || backend_is_sim(b);
}

/* Both return GPUPOOL_ERR_UNSUPPORTED when built without CUDA or when no
 * device is present (never creating a CUDA context in that case). */
gpupool_status backend_cuda_create(int device, backend **out);
gpupool_status backend_cuda_async_create(int device, backend **out);
/* Number of CUDA devices visible (0 without a driver, a GPU or CUDA support). */
int backend_cuda_device_count(void);

#endif
