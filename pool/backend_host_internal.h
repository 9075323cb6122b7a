/* The host backend's state, shared by its segment (backend_host.c) and
 * virtual-memory (backend_host_vmm.c) halves. */
#ifndef GPUPOOL_BACKEND_HOST_INTERNAL_H
#define GPUPOOL_BACKEND_HOST_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "backend.h"

#define HOST_PAGE_SIZE ((size_t)2 << 20) /* as a CUDA device's VMM granularity */

typedef struct host_backend {
  backend base;
  pthread_mutex_t lock; /* guards everything below; several shards allocate at once */
  size_t capacity;
  size_t used;  /* bytes of live segments (as requested), vmm pages and `other` */
  size_t other; /* held by "other CUDA allocations" (gpupool_host_hold_other) */
  unsigned fail_every_n;
  double fail_rate;
  uint64_t fail_seed;
  uint64_t attempts; /* allocation attempts since faults were last set */
  /* vmm: physical pages are page-sized slots of one memfd (-1 until first
   * used); released slots are reused, lowest first. */
  int vmm_fd;
  size_t vmm_slots; /* slots the file has room for */
  size_t *vmm_free; /* released slots (a stack) */
  size_t vmm_nfree, vmm_cap_free;
} host_backend;

/* Counts size bytes against the capacity, or fails as the device would:
 * GPUPOOL_ERR_OOM when full or when a fault is injected on this attempt. */
gpupool_status host_charge(host_backend *h, size_t size);
void host_uncharge(host_backend *h, size_t size);

extern const backend_vmm_ops host_vmm_ops;
void host_vmm_destroy(host_backend *h);

#endif
