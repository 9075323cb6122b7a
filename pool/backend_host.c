/* The host backend: a simulated device in host memory, for CI and demos.
 * Each segment is its own anonymous mapping (real, writable memory; pages are
 * only committed when touched), the device has a set capacity so that running
 * out of memory happens for real, and device allocations can be made to fail
 * on purpose (every Nth, or a seeded random fraction) to exercise the pool's
 * OOM path. Streams and events are the simulated ones of backend_host_stream. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend_host_internal.h"
#include "backend_host_stream.h"
#include "backend_host_testing.h"
#include "core/errors.h"

static const backend_ops host_ops;

static host_backend *as_host(backend *b) {
  return (host_backend *)b;
}

/* splitmix64: a well-mixed 64-bit value from a counter, so the fault decision
 * of attempt k depends only on (seed, k), whatever the thread interleaving. */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Whether attempt number k (1-based) is made to fail. Under h->lock. */
static int fault_fires(const host_backend *h, uint64_t k) {
  if (h->fail_every_n && k % h->fail_every_n == 0)
    return 1;
  if (h->fail_rate <= 0.0)
    return 0;
  double u = (double)(mix64(h->fail_seed ^ mix64(k)) >> 11) * 0x1p-53; /* [0, 1) */
  return u < h->fail_rate;
}

#ifdef GPUPOOL_TESTING
static void (*_Atomic alloc_hook)(void *arg);
static void *_Atomic alloc_hook_arg;

void backend_host_testing_set_alloc_hook(void (*fn)(void *arg), void *arg) {
  atomic_store(&alloc_hook_arg, arg);
  atomic_store(&alloc_hook, fn);
}

static void run_alloc_hook(void) {
  void (*fn)(void *) = atomic_load(&alloc_hook);
  if (fn)
    fn(atomic_load(&alloc_hook_arg));
}
#else
static void run_alloc_hook(void) {}
#endif

gpupool_status host_charge(host_backend *h, size_t size) {
  run_alloc_hook();
  pthread_mutex_lock(&h->lock);
  uint64_t attempt = ++h->attempts;
  int injected = fault_fires(h, attempt);
  size_t used = h->used;
  int full = !injected && size > h->capacity - used;
  if (!injected && !full)
    h->used += size;
  pthread_mutex_unlock(&h->lock);
  if (injected)
    return pool_fail(GPUPOOL_ERR_OOM, HOST_INJECTED_FAULT " on device allocation %llu",
                     (unsigned long long)attempt);
  if (full)
    return pool_fail(GPUPOOL_ERR_OOM,
                     "host backend: simulated device full: %zu bytes requested, %zu of %zu used",
                     size, used, h->capacity);
  return GPUPOOL_OK;
}

void host_uncharge(host_backend *h, size_t size) {
  pthread_mutex_lock(&h->lock);
  h->used -= size <= h->used ? size : h->used;
  pthread_mutex_unlock(&h->lock);
}

static gpupool_status host_alloc(backend *b, void **ptr, size_t size, void *stream) {
  host_backend *h = as_host(b);
  if (size == 0)
    return pool_fail(GPUPOOL_ERR_INVALID, "host backend: allocation of 0 bytes");
  gpupool_status st = host_charge(h, size); /* before mapping, outside the lock */
  if (st != GPUPOOL_OK)
    return st;
  void *p =
      mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    host_uncharge(h, size);
    return pool_fail(err == ENOMEM ? GPUPOOL_ERR_OOM : GPUPOOL_ERR_BACKEND,
                     "host backend: mmap of %zu bytes failed: %s", size, strerror(err));
  }
  *ptr = p;
  return GPUPOOL_OK;
}

static void host_free(backend *b, void *ptr, size_t size, void *stream) {
  host_backend *h = as_host(b);
  if (!ptr || size == 0)
    return;
  munmap(ptr, size);
  host_uncharge(h, size);
}

static gpupool_status host_event_record(backend *b, void *stream, void **event) {
  return host_stream_event_record(stream, event);
}

static int host_event_query(backend *b, void *event) {
  return host_stream_event_query(event);
}

static void host_event_destroy(backend *b, void *event) {
  host_stream_event_destroy(event);
}

static gpupool_status host_mem_info(backend *b, size_t *free_bytes, size_t *total_bytes) {
  host_backend *h = as_host(b);
  pthread_mutex_lock(&h->lock);
  *free_bytes = h->capacity - h->used;
  *total_bytes = h->capacity;
  pthread_mutex_unlock(&h->lock);
  return GPUPOOL_OK;
}

/* A device-wide synchronize waits for all work: here, all of it completes. */
static gpupool_status host_synchronize(backend *b) {
  host_stream_complete_all();
  return GPUPOOL_OK;
}

static void host_destroy(backend *b) {
  host_backend *h = as_host(b);
  host_vmm_destroy(h);
  pthread_mutex_destroy(&h->lock);
  free(h);
}

static const backend_ops host_ops = {
    .alloc = host_alloc,
    .free = host_free,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_destroy = host_event_destroy,
    .mem_info = host_mem_info,
    .synchronize = host_synchronize,
    .mempool_attrs = NULL,
    .destroy = host_destroy,
    .vmm = &host_vmm_ops,
};

static int valid_rate(double rate) {
  return rate >= 0.0 && rate <= 1.0; /* false for NaN too */
}

gpupool_status backend_host_create(const host_backend_config *cfg, backend **out) {
  if (!cfg || !out)
    return pool_fail(GPUPOOL_ERR_INVALID, "host backend: no configuration");
  if (cfg->capacity == 0)
    return pool_fail(GPUPOOL_ERR_INVALID, "host backend: capacity 0");
  if (!valid_rate(cfg->fail_rate))
    return pool_fail(GPUPOOL_ERR_INVALID, "host backend: fault rate %g outside [0, 1]",
                     cfg->fail_rate);
  host_backend *h = calloc(1, sizeof *h);
  if (!h)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "host backend: out of host memory");
  if (pthread_mutex_init(&h->lock, NULL) != 0) {
    free(h);
    return pool_fail(GPUPOOL_ERR_BACKEND, "host backend: pthread_mutex_init failed");
  }
  h->base.ops = &host_ops;
  h->base.name = "host";
  h->base.device = 0;
  h->capacity = cfg->capacity;
  h->fail_every_n = cfg->fail_every_n;
  h->fail_rate = cfg->fail_rate;
  h->fail_seed = cfg->fail_seed;
  h->base.page_size = HOST_PAGE_SIZE;
  h->base.shareable = 1;
  h->vmm_fd = -1;
  *out = &h->base;
  return GPUPOOL_OK;
}

void backend_host_set_faults(backend *b, unsigned every_n, double rate, uint64_t seed) {
  if (!backend_is_host(b))
    return;
  host_backend *h = as_host(b);
  pthread_mutex_lock(&h->lock);
  h->fail_every_n = every_n;
  h->fail_rate = valid_rate(rate) ? rate : 0.0;
  h->fail_seed = seed;
  h->attempts = 0; /* "every Nth" and the random sequence restart from here */
  pthread_mutex_unlock(&h->lock);
}

int backend_is_host(const backend *b) {
  return b && b->ops == &host_ops;
}

gpupool_status backend_host_set_other(backend *b, size_t bytes) {
  host_backend *h = as_host(b);
  pthread_mutex_lock(&h->lock);
  size_t others = h->used - h->other; /* the pool's segments and pages */
  int fits = bytes <= h->capacity - others;
  if (fits) {
    h->used = others + bytes;
    h->other = bytes;
  }
  size_t cap = h->capacity;
  pthread_mutex_unlock(&h->lock);
  if (!fits)
    return pool_fail(GPUPOOL_ERR_OOM,
                     "host backend: %zu bytes of other allocations do not fit: %zu of %zu used "
                     "by the pool",
                     bytes, others, cap);
  return GPUPOOL_OK;
}

size_t backend_host_other(backend *b) {
  if (!backend_is_host(b))
    return 0;
  host_backend *h = as_host(b);
  pthread_mutex_lock(&h->lock);
  size_t v = h->other;
  pthread_mutex_unlock(&h->lock);
  return v;
}
