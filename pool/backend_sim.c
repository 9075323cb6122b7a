/* The simulated backend, for replays only (the advisor): a device of any
 * capacity that holds no memory. Segments and vmm ranges get fake addresses
 * that must never be dereferenced; physical pages are counted, not made;
 * events are complete as soon as they are recorded. Addresses are laid out
 * as Linux lays out anonymous mappings (top-down: the highest gap that fits,
 * at its top, in 4 KiB pages), so that a replay of a history recorded on the
 * host backend ties best-fit choices between equal sizes exactly as the live
 * pool did: only their order matters there, so the layout may start higher
 * than a process's (below). One thread uses a backend at a time (a replay),
 * so no lock. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "core/errors.h"

#define SIM_PAGE_SIZE ((size_t)2 << 20) /* as the host backend and a CUDA device */
#define SIM_MAP_ALIGN ((uint64_t)4096)
/* 2^63 - 1 TiB of address space: an expandable pool reserves per stream a
 * range as large as the device, and a process's 128 TiB (2^47) would run
 * out below the largest device the advisor simulates times the streams a
 * pool serves (1 PiB x 1024 = 2^60), giving OOMs the device would not. */
#define SIM_TOP    ((uint64_t)1 << 63)
#define SIM_BOTTOM ((uint64_t)1 << 40)

typedef struct sim_range {
  uint64_t lo, hi;
} sim_range;

typedef struct sim_backend {
  backend base;
  size_t capacity, used;
  sim_range *r; /* mapped ranges, ascending */
  size_t n, cap;
} sim_backend;

static const backend_ops sim_ops;
static char sim_event; /* every event: complete */

static sim_backend *as_sim(backend *b) {
  return (sim_backend *)b;
}

/* The highest gap of at least size bytes, below SIM_TOP; its range is
 * inserted in order. */
static gpupool_status take_range(sim_backend *s, size_t size, void **out) {
  uint64_t len = (size + SIM_MAP_ALIGN - 1) & ~(SIM_MAP_ALIGN - 1);
  if (len == 0 || len > SIM_TOP - SIM_BOTTOM)
    return pool_fail(GPUPOOL_ERR_OOM, "sim backend: no address range of %zu bytes", size);
  size_t i = s->n; /* the gap below r[i] (or SIM_TOP when i == n) */
  for (;; i--) {
    uint64_t hi = i == s->n ? SIM_TOP : s->r[i].lo;
    uint64_t lo = i == 0 ? SIM_BOTTOM : s->r[i - 1].hi;
    if (hi - lo >= len)
      break;
    if (i == 0)
      return pool_fail(GPUPOOL_ERR_OOM, "sim backend: address space full");
  }
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    sim_range *r = realloc(s->r, cap * sizeof *r);
    if (!r)
      return pool_fail(GPUPOOL_ERR_HOST_OOM, "sim backend: out of host memory");
    s->r = r;
    s->cap = cap;
  }
  uint64_t hi = i == s->n ? SIM_TOP : s->r[i].lo;
  memmove(&s->r[i + 1], &s->r[i], (s->n - i) * sizeof *s->r);
  s->r[i] = (sim_range){hi - len, hi};
  s->n++;
  *out = (void *)(uintptr_t)(hi - len);
  return GPUPOOL_OK;
}

static void put_range(sim_backend *s, void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->r[mid].lo < a)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < s->n && s->r[lo].lo == a) {
    memmove(&s->r[lo], &s->r[lo + 1], (s->n - lo - 1) * sizeof *s->r);
    s->n--;
  }
}

static gpupool_status charge(sim_backend *s, size_t size) {
  if (size > s->capacity - s->used)
    return pool_fail(GPUPOOL_ERR_OOM,
                     "sim backend: simulated device full: %zu bytes requested, %zu of %zu used",
                     size, s->used, s->capacity);
  s->used += size;
  return GPUPOOL_OK;
}

static void uncharge(sim_backend *s, size_t size) {
  s->used -= size <= s->used ? size : s->used;
}

static gpupool_status sim_alloc(backend *b, void **ptr, size_t size, void *stream) {
  sim_backend *s = as_sim(b);
  if (size == 0)
    return pool_fail(GPUPOOL_ERR_INVALID, "sim backend: allocation of 0 bytes");
  gpupool_status st = charge(s, size);
  if (st != GPUPOOL_OK)
    return st;
  if ((st = take_range(s, size, ptr)) != GPUPOOL_OK)
    uncharge(s, size);
  return st;
}

static void sim_free(backend *b, void *ptr, size_t size, void *stream) {
  if (!ptr || size == 0)
    return;
  put_range(as_sim(b), ptr);
  uncharge(as_sim(b), size);
}

static gpupool_status sim_event_record(backend *b, void *stream, void **event) {
  *event = &sim_event;
  return GPUPOOL_OK;
}

static int sim_event_query(backend *b, void *event) {
  return 1;
}

static void sim_event_destroy(backend *b, void *event) {}

static gpupool_status sim_mem_info(backend *b, size_t *free_bytes, size_t *total_bytes) {
  sim_backend *s = as_sim(b);
  *free_bytes = s->capacity - s->used;
  *total_bytes = s->capacity;
  return GPUPOOL_OK;
}

static gpupool_status sim_synchronize(backend *b) {
  return GPUPOOL_OK;
}

static void sim_destroy(backend *b) {
  sim_backend *s = as_sim(b);
  free(s->r);
  free(s);
}

static gpupool_status vmm_reserve(backend *b, size_t size, void **base) {
  return take_range(as_sim(b), size, base);
}

static void vmm_unreserve(backend *b, void *base, size_t size) {
  put_range(as_sim(b), base);
}

static gpupool_status vmm_create(backend *b, void **handles, size_t n) {
  gpupool_status st = charge(as_sim(b), n * SIM_PAGE_SIZE);
  if (st != GPUPOOL_OK)
    return st;
  for (size_t i = 0; i < n; i++)
    handles[i] = &sim_event; /* any non-NULL handle: no memory behind it */
  return GPUPOOL_OK;
}

static void vmm_release(backend *b, void *const *handles, size_t n) {
  uncharge(as_sim(b), n * SIM_PAGE_SIZE);
}

static gpupool_status vmm_map(backend *b, void *addr, void *const *handles, size_t n) {
  return GPUPOOL_OK;
}

static gpupool_status vmm_unmap(backend *b, void *addr, size_t n) {
  return GPUPOOL_OK;
}

static const backend_vmm_ops sim_vmm_ops = {
    .reserve = vmm_reserve,
    .unreserve = vmm_unreserve,
    .create = vmm_create,
    .release = vmm_release,
    .map = vmm_map,
    .unmap = vmm_unmap,
};

static const backend_ops sim_ops = {
    .alloc = sim_alloc,
    .free = sim_free,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_destroy = sim_event_destroy,
    .mem_info = sim_mem_info,
    .synchronize = sim_synchronize,
    .mempool_attrs = NULL,
    .destroy = sim_destroy,
    .vmm = &sim_vmm_ops,
};

gpupool_status backend_sim_create(size_t capacity, backend **out) {
  if (!out)
    return pool_fail(GPUPOOL_ERR_INVALID, "sim backend: no output");
  if (capacity == 0)
    return pool_fail(GPUPOOL_ERR_INVALID, "sim backend: capacity 0");
  sim_backend *s = calloc(1, sizeof *s);
  if (!s)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "sim backend: out of host memory");
  s->base.ops = &sim_ops;
  s->base.name = "sim";
  s->base.device = 0;
  s->base.page_size = SIM_PAGE_SIZE;
  s->capacity = capacity;
  *out = &s->base;
  return GPUPOOL_OK;
}

int backend_is_sim(const backend *b) {
  return b && b->ops == &sim_ops;
}
