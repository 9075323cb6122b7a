/* Virtual memory on the host backend, shaped like CUDA's: an address range
 * is reserved without memory (PROT_NONE), a physical page is a page-sized
 * slot of one memfd, and mapping a page is mmap of its slot at a fixed
 * address (MAP_SHARED, so the same slot mapped elsewhere later shows the
 * same memory, as a CUDA handle does). A handle is slot + 1. Sharing a page
 * with another process passes a duplicate of the memfd and the slot's
 * offset: mapped there, it is the same memory. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend_host_internal.h"
#include "core/errors.h"

static host_backend *as_host(backend *b) {
  return (host_backend *)b;
}

static gpupool_status vmm_reserve(backend *b, size_t size, void **base) {
  void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return pool_fail(errno == ENOMEM ? GPUPOOL_ERR_OOM : GPUPOOL_ERR_BACKEND,
                     "host backend: reserving %zu bytes of address space failed: %s", size,
                     strerror(errno));
  *base = p;
  return GPUPOOL_OK;
}

static void vmm_unreserve(backend *b, void *base, size_t size) {
  munmap(base, size);
}

/* A free slot; under h->lock. (size_t)-1 when the file cannot grow. */
static size_t take_slot(host_backend *h) {
  if (h->vmm_nfree) {
    /* lowest slot first keeps the file short */
    size_t best = 0;
    for (size_t i = 1; i < h->vmm_nfree; i++)
      if (h->vmm_free[i] < h->vmm_free[best])
        best = i;
    size_t slot = h->vmm_free[best];
    h->vmm_free[best] = h->vmm_free[--h->vmm_nfree];
    return slot;
  }
  if (h->vmm_fd < 0 && (h->vmm_fd = memfd_create("gpupool-host-vmm", MFD_CLOEXEC)) < 0)
    return (size_t)-1;
  if (ftruncate(h->vmm_fd, (off_t)((h->vmm_slots + 1) * HOST_PAGE_SIZE)) != 0)
    return (size_t)-1;
  return h->vmm_slots++;
}

/* Returns slot to the free stack, its memory to the system; under h->lock. */
static void put_slot(host_backend *h, size_t slot) {
  fallocate(h->vmm_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(slot * HOST_PAGE_SIZE),
            (off_t)HOST_PAGE_SIZE);
  if (h->vmm_nfree == h->vmm_cap_free) {
    size_t cap = h->vmm_cap_free ? 2 * h->vmm_cap_free : 64;
    size_t *f = realloc(h->vmm_free, cap * sizeof *f);
    if (!f)
      return; /* the slot is lost to reuse, not its memory (punched above) */
    h->vmm_free = f;
    h->vmm_cap_free = cap;
  }
  h->vmm_free[h->vmm_nfree++] = slot;
}

static void vmm_release(backend *b, void *const *handles, size_t n) {
  host_backend *h = as_host(b);
  pthread_mutex_lock(&h->lock);
  for (size_t i = 0; i < n; i++)
    put_slot(h, (size_t)(uintptr_t)handles[i] - 1);
  pthread_mutex_unlock(&h->lock);
  host_uncharge(h, n * HOST_PAGE_SIZE);
}

static gpupool_status vmm_create(backend *b, void **handles, size_t n) {
  host_backend *h = as_host(b);
  gpupool_status st = host_charge(h, n * HOST_PAGE_SIZE);
  if (st != GPUPOOL_OK)
    return st;
  pthread_mutex_lock(&h->lock);
  size_t i = 0;
  for (; i < n; i++) {
    size_t slot = take_slot(h);
    if (slot == (size_t)-1)
      break;
    handles[i] = (void *)(uintptr_t)(slot + 1);
  }
  int err = errno;
  pthread_mutex_unlock(&h->lock);
  if (i == n)
    return GPUPOOL_OK;
  vmm_release(b, handles, i);
  host_uncharge(h, (n - i) * HOST_PAGE_SIZE);
  return pool_fail(GPUPOOL_ERR_BACKEND, "host backend: cannot create %zu pages of memory: %s", n,
                   strerror(err));
}

static gpupool_status vmm_unmap(backend *b, void *addr, size_t n) {
  (void)b;
  /* back to reserved address space, not memory */
  if (n && mmap(addr, n * HOST_PAGE_SIZE, PROT_NONE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
    return pool_fail(GPUPOOL_ERR_BACKEND, "host backend: unmapping %zu pages at %p failed: %s", n,
                     addr, strerror(errno));
  return GPUPOOL_OK;
}

static gpupool_status vmm_map(backend *b, void *addr, void *const *handles, size_t n) {
  host_backend *h = as_host(b);
  for (size_t i = 0; i < n; i++) {
    size_t slot = (size_t)(uintptr_t)handles[i] - 1;
    char *at = (char *)addr + i * HOST_PAGE_SIZE;
    if (mmap(at, HOST_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->vmm_fd,
             (off_t)(slot * HOST_PAGE_SIZE)) == MAP_FAILED) {
      int err = errno;
      vmm_unmap(b, addr, i);
      return pool_fail(err == ENOMEM ? GPUPOOL_ERR_OOM : GPUPOOL_ERR_BACKEND,
                       "host backend: mapping a page at %p failed: %s", (void *)at, strerror(err));
    }
  }
  return GPUPOOL_OK;
}

static gpupool_status vmm_export_page(backend *b, void *handle, int *fd, uint64_t *offset) {
  host_backend *h = as_host(b);
  pthread_mutex_lock(&h->lock);
  int out = h->vmm_fd >= 0 ? fcntl(h->vmm_fd, F_DUPFD_CLOEXEC, 0) : -1;
  int err = h->vmm_fd >= 0 ? errno : EBADF;
  pthread_mutex_unlock(&h->lock);
  if (out < 0)
    return pool_fail(GPUPOOL_ERR_BACKEND, "host backend: duplicating the page file failed: %s",
                     strerror(err));
  *fd = out;
  *offset = ((size_t)(uintptr_t)handle - 1) * HOST_PAGE_SIZE;
  return GPUPOOL_OK;
}

static gpupool_status vmm_map_shared(backend *b, void *addr, int fd, uint64_t offset) {
  if (offset % HOST_PAGE_SIZE || offset > (uint64_t)INT64_MAX - HOST_PAGE_SIZE)
    return pool_fail(GPUPOOL_ERR_INVALID, "host backend: %llu is not a page offset",
                     (unsigned long long)offset);
  struct stat st; /* a page past the end of the file would fault when touched */
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < offset + HOST_PAGE_SIZE)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "host backend: descriptor %d holds no page at offset %llu", fd,
                     (unsigned long long)offset);
  if (mmap(addr, HOST_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
           (off_t)offset) == MAP_FAILED)
    return pool_fail(errno == ENOMEM ? GPUPOOL_ERR_OOM : GPUPOOL_ERR_BACKEND,
                     "host backend: mapping a shared page at %p failed: %s", addr, strerror(errno));
  return GPUPOOL_OK;
}

const backend_vmm_ops host_vmm_ops = {
    .reserve = vmm_reserve,
    .unreserve = vmm_unreserve,
    .create = vmm_create,
    .release = vmm_release,
    .map = vmm_map,
    .unmap = vmm_unmap,
    .export_page = vmm_export_page,
    .map_shared = vmm_map_shared,
};

void host_vmm_destroy(host_backend *h) {
  if (h->vmm_fd >= 0)
    close(h->vmm_fd);
  free(h->vmm_free);
}
