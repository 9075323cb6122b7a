/* The public pool API: create/destroy, the malloc/free hot path, streams,
 * empty_cache and statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/errors.h"
#include "conf.h"
#include "oom_report.h"
#include "pool_blocks.h"
#include "pool_internal.h"
#include "pool_view.h"
#include "reclaim.h"
#include "registry.h"
#include "segment.h"
#include "shard.h"
#include "share.h"
#include "sizeclass.h"

static _Atomic uint32_t next_pool_id = 1;

/* fork() copies every pool into the child with the parent's device memory,
 * streams and locks: a lock another thread of the parent held at the fork
 * stays held in the child for good, and the parent's device pointers mean
 * nothing to a child, which cannot use the parent's CUDA context. So a pool
 * serves the process that created it: process_forks counts the forks this
 * process descends from, each pool keeps the count it was created under,
 * and a pool created before the latest fork refuses every call that would
 * take its locks (pool_check_not_inherited). */
static _Atomic unsigned process_forks;

static void count_fork_in_child(void) {
  atomic_fetch_add_explicit(&process_forks, 1, memory_order_relaxed);
  /* The forking thread's hint names a parent's pool. malloc, free and
   * record_stream ask whether a pool is inherited only where the hint
   * misses, so that their hot path pays nothing for it; the child's other
   * threads are new, with no hint. */
  pool_thread.pool = NULL;
}

static void register_fork_handler(void) {
  pthread_atfork(NULL, NULL, count_fork_in_child);
}

static inline int pool_inherited(const gpupool *p) {
  return __builtin_expect(p->forks != atomic_load_explicit(&process_forks, memory_order_relaxed),
                          0);
}

/* Out of line and cold: the hot path's callers keep no register for it. */
static __attribute__((noinline, cold)) gpupool_status refuse_inherited(const gpupool *p,
                                                                       const char *call) {
  return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                   "%s: pool '%s' was created before this process was forked, and a forked "
                   "child cannot use its parent's pools (their device memory, streams and locks "
                   "are the parent's): create a pool in the child",
                   call, p->cfg.name);
}

gpupool_status pool_check_not_inherited(const gpupool *p, const char *call) {
  return pool_inherited(p) ? refuse_inherited(p, call) : GPUPOOL_OK;
}

static gpupool_status create_backend(pool_config *c, backend **out) {
  gpupool_status st;
  switch (c->backend) {
  case GPUPOOL_BACKEND_HOST: {
    host_backend_config hc = {c->host_capacity, c->fault_every_n, c->fault_rate, c->fault_seed};
    st = backend_host_create(&hc, out);
    break;
  }
  case GPUPOOL_BACKEND_SIM:
    st = backend_sim_create(c->host_capacity, out);
    break;
  case GPUPOOL_BACKEND_CUDA:
    st = backend_cuda_create(c->device, out);
    break;
  default:
    st = backend_cuda_async_create(c->device, out);
    break;
  }
  if (st == GPUPOOL_ERR_UNSUPPORTED)
    return pool_fail(st,
                     "pool '%s': backend %s is not available (built without CUDA, or no "
                     "GPU %d on this machine)",
                     c->name, c->backend == GPUPOOL_BACKEND_CUDA ? "cuda" : "cuda_async",
                     c->device);
  if (st != GPUPOOL_OK)
    return pool_fail(st, "pool '%s': cannot start the backend on device %d", c->name, c->device);
  return GPUPOOL_OK;
}

gpupool_status gpupool_create(const gpupool_options *opt, gpupool **out) {
  if (!out)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_create: out is NULL");
  *out = NULL;
  pool_config cfg;
  gpupool_status st = pool_config_build(opt, &cfg);
  if (st != GPUPOOL_OK)
    return st;
  if (cfg.backend == GPUPOOL_BACKEND_DEFAULT)
    cfg.backend = backend_cuda_device_count() > 0 ? GPUPOOL_BACKEND_CUDA : GPUPOOL_BACKEND_HOST;
  if ((st = pool_config_check(&cfg)) != GPUPOOL_OK)
    return st;
  backend *be = NULL;
  if ((st = create_backend(&cfg, &be)) != GPUPOOL_OK)
    return st;
  if (cfg.expandable && (!be->ops->vmm || !be->page_size)) {
    const char *name = be->name;
    be->ops->destroy(be);
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "pool '%s': expandable_segments needs virtual memory management, which "
                     "backend %s does not have here (use backend cuda, host or sim)",
                     cfg.name, name);
  }
  gpupool *p = aligned_alloc(64, (sizeof *p + 63) / 64 * 64);
  if (!p) {
    be->ops->destroy(be);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_create: out of host memory");
  }
  memset(p, 0, sizeof *p);
  static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;
  pthread_once(&fork_handler_once, register_fork_handler);
  p->forks = atomic_load_explicit(&process_forks, memory_order_relaxed);
  p->cfg = cfg;
  p->be = be;
  p->id = atomic_fetch_add(&next_pool_id, 1);
  pthread_mutex_init(&p->shard_create_lock, NULL);
  pthread_mutex_init(&p->slow_lock, NULL);
  pthread_mutex_init(&p->peak_lock, NULL);
  if (!backend_is_sim(be)) /* a replay's pool: private to the advisor */
    registry_add(p);
  *out = p;
  return GPUPOOL_OK;
}

void gpupool_destroy(gpupool *p) {
  if (!p || pool_inherited(p)) /* the parent's: its locks may be held, its memory is not ours */
    return;
  share_pool_destroyed(p);
  if (!backend_is_sim(p->be))
    registry_remove(p);
  for (shard *sh = atomic_load(&p->shards), *next; sh; sh = next) {
    next = sh->next_shard;
    shard_destroy(p, sh, segment_free_memory);
  }
  p->be->ops->destroy(p->be);
  pthread_mutex_destroy(&p->shard_create_lock);
  pthread_mutex_destroy(&p->slow_lock);
  pthread_mutex_destroy(&p->peak_lock);
  free(p);
}

/* The shard this thread allocated from last (pool_thread, thread_state.h) is
 * a hint for where its frees will find their blocks. */
typedef pool_thread_state thread_hint;

static inline shard *hinted_shard(const thread_hint *h, const gpupool *p) {
  return h->pool == p && h->id == p->id ? h->sh : NULL;
}

/* Pool-wide peaks of a pool used on several streams are sums over shards.
 * While a single thread allocates from it (the common case of a compute and
 * a communication stream driven by one thread), they are kept exact by
 * summing the shards after each malloc, which is what raises the
 * allocation, allocated, requested and active peaks (a free can still raise
 * inactive_split: its pool-wide peak stays as observed). A second thread
 * turns this off for good, so that threads on different streams share
 * nothing; the peaks are then the largest sums gpupool_get_stats observes. */
/* Whether thread me tracks p's peaks (note_peaks below): it became the
 * owner when p had several shards, and no other thread has allocated. */
static inline int peaks_tracked_by(gpupool *p, const thread_hint *me) {
  return atomic_load_explicit(&p->owner, memory_order_relaxed) == me &&
         !atomic_load_explicit(&p->shared, memory_order_relaxed);
}

static void note_peaks(gpupool *p, const thread_hint *me, const shard *fresh) {
  if (atomic_load_explicit(&p->nshards, memory_order_relaxed) < 2 ||
      atomic_load_explicit(&p->shared, memory_order_relaxed))
    return;
  const void *owner = atomic_load_explicit(&p->owner, memory_order_relaxed);
  if (owner != me && (owner || !atomic_compare_exchange_strong(&p->owner, &owner, me))) {
    atomic_store(&p->shared, 1);
    return;
  }
  stats_note_peaks(p, fresh);
}

/* No cached block was ready: the slow path, under the slow lock. Its device
 * calls may fail and be recovered from (a retry after emptying the cache,
 * pages moved when none could be created): only a failure of the whole
 * request is the caller's, in gpupool_last_error() (errors.h). */
static gpupool_status malloc_slow(gpupool *p, shard *sh, size_t rounded, size_t size, block **out) {
  int to_device;
  pool_error_scope scope;
  pool_error_scope_enter(&scope);
  pthread_mutex_lock(&p->slow_lock);
  gpupool_status st = reclaim_malloc(p, sh, rounded, size, out, &to_device);
  pthread_mutex_unlock(&p->slow_lock);
  if (st == GPUPOOL_ERR_OOM)
    pool_oom_deliver(); /* the report, its observer and the explanation in last_error */
  if (to_device && !backend_is_sim(p->be)) /* segments or pages changed (also on failure) */
    registry_notify_segment_change(p);
  return pool_error_scope_leave(&scope, st);
}

/* gpupool_malloc and pool_malloc_block: the block serving a request of size
 * bytes on stream (the size checked). Inlined into both. */
static inline __attribute__((always_inline)) gpupool_status
malloc_block(gpupool *p, size_t size, void *stream, block **out) {
  size_t rounded = size_round(&p->cfg, size);
  thread_hint *h = &pool_thread; /* one TLS address lookup per call: hint and tag */
  shard *hinted = hinted_shard(h, p), *sh = hinted;
  if (!sh || sh->stream != stream) {
    if (pool_inherited(p))
      return refuse_inherited(p, "gpupool_malloc");
    gpupool_status st = shard_get(p, stream, &sh);
    if (st == GPUPOOL_ERR_UNSUPPORTED)
      return pool_fail(st,
                       "gpupool_malloc: pool '%s': stream %p would be its %dth: a pool serves at "
                       "most %d streams over its lifetime (create pools per set of streams)",
                       p->cfg.name, stream, SHARD_TABLE + 1, SHARD_TABLE);
    if (st != GPUPOOL_OK)
      return pool_fail(st, "gpupool_malloc: pool '%s': out of host memory for stream %p",
                       p->cfg.name, stream);
  }
  gp_assert_internal(!pool_inherited(p)); /* a hint never names an inherited pool */
  spin_lock(&sh->lock);
  if (sh->pending)
    shard_poll_pending(sh);
  int large = size_is_large(rounded);
  block *b = shard_place_ready(sh, large, rounded);
  int lost = b && shard_allocate(sh, b, rounded, size, 0, h->tag) != 0;
  const shard *fresh = NULL; /* read here: note_peaks need not take this lock again */
  if (b && !lost && peaks_tracked_by(p, h)) {
    stats_peaks_read(p, sh);
    fresh = sh;
  }
  spin_unlock(&sh->lock);
  if (lost)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_malloc: out of host memory");
  if (!b) {
    gpupool_status st = malloc_slow(p, sh, rounded, size, &b);
    if (st != GPUPOOL_OK)
      return st;
  }
  if (sh != hinted) {
    h->pool = p;
    h->id = p->id;
    h->sh = sh;
  }
  note_peaks(p, h, fresh);
  *out = b;
  return GPUPOOL_OK;
}

static gpupool_status bad_size(const gpupool *p, size_t size) {
  return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_malloc: pool '%s': size %zu is %s", p->cfg.name,
                   size, size ? "larger than 2^48 bytes" : "zero");
}

gpupool_status gpupool_malloc(gpupool *p, void **ptr, size_t size, void *stream) {
  if (!p || !ptr)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_malloc: %s is NULL", p ? "ptr" : "pool");
  if (size == 0 || size > GPUPOOL_MAX_REQUEST)
    return bad_size(p, size);
  block *b = NULL; /* set when malloc_block succeeds (some compilers cannot tell) */
  gpupool_status st = malloc_block(p, size, stream, &b);
  if (st != GPUPOOL_OK)
    return st;
  *ptr = (void *)b->addr;
  return GPUPOOL_OK;
}

void pool_serve_blocks(gpupool *p) {
  p->by_block = 1; /* before the first allocation: no shard yet */
}

gpupool_status pool_malloc_block(gpupool *p, size_t size, void *stream, block **out) {
  if (size == 0 || size > GPUPOOL_MAX_REQUEST)
    return bad_size(p, size);
  return malloc_block(p, size, stream, out);
}

/* Finds the live allocation at addr and returns its shard, locked, with its
 * map entry; NULL when no shard has it. Tries the hint first, so a thread
 * freeing what it allocated takes one lock. Where the hint misses and p is
 * inherited (a forked child's: pool_inherited, which the caller then asks),
 * NULL without a lock taken; a hint never names an inherited pool. */
static shard *lock_owner(gpupool *p, uintptr_t addr, addrmap_entry **out) {
  shard *first = hinted_shard(&pool_thread, p);
  if (first) {
    gp_assert_internal(!pool_inherited(p));
    spin_lock(&first->lock);
    if ((*out = addrmap_find(&first->live, addr)))
      return first;
    spin_unlock(&first->lock);
  } else if (pool_inherited(p)) {
    return NULL;
  }
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    if (sh == first)
      continue;
    spin_lock(&sh->lock);
    if ((*out = addrmap_find(&sh->live, addr)))
      return sh;
    spin_unlock(&sh->lock);
  }
  return NULL;
}

gpupool_status gpupool_free(gpupool *p, void *ptr) {
  if (!p)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_free: pool is NULL");
  if (!ptr)
    return GPUPOOL_OK;
  addrmap_entry *e;
  shard *sh = lock_owner(p, (uintptr_t)ptr, &e);
  if (!sh && pool_inherited(p))
    return refuse_inherited(p, "gpupool_free");
  gpupool_status st;
  if (!sh && share_claims(p, ptr, 1, NULL, &st)) /* exported: deferred */
    return st;
  if (!sh)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "gpupool_free: pool '%s': %p is not a live allocation of this pool (a foreign "
                     "or interior pointer, or a double free)",
                     p->cfg.name, ptr);
  block *b = e->val;
  addrmap_erase(&sh->live, e);
  shard_free(sh, b, b->nstreams && shard_defer_free(sh, b));
  spin_unlock(&sh->lock);
  return GPUPOOL_OK;
}

/* 0; -1 when the block holds 255 streams already; -2 out of host memory. */
static int add_stream_use(block *b, void *stream) {
  if (stream == b->seg->sh->stream)
    return 0;
  for (unsigned i = 0; i < b->nstreams; i++)
    if (b->streams[i] == stream)
      return 0;
  if (b->nstreams == b->cap_streams) {
    if (b->cap_streams == 255)
      return -1;
    unsigned cap = b->cap_streams ? b->cap_streams * 2u : 2u;
    cap = cap > 255 ? 255 : cap;
    void **s = realloc(b->streams, cap * sizeof *s);
    if (!s)
      return -2;
    b->streams = s;
    b->cap_streams = (uint8_t)cap;
  }
  b->streams[b->nstreams++] = stream;
  return 0;
}

static gpupool_status stream_use_status(int r) {
  if (r == -2)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_record_stream: out of host memory");
  if (r != 0)
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "gpupool_record_stream: a block is used on at most 255 streams");
  return GPUPOOL_OK;
}

gpupool_status gpupool_record_stream(gpupool *p, void *ptr, void *stream) {
  if (!p || !ptr)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_record_stream: %s is NULL", p ? "ptr" : "pool");
  addrmap_entry *e;
  shard *sh = lock_owner(p, (uintptr_t)ptr, &e);
  if (!sh && pool_inherited(p))
    return refuse_inherited(p, "gpupool_record_stream");
  gpupool_status st;
  if (!sh && share_claims(p, ptr, 0, stream, &st))
    return st;
  if (!sh)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "gpupool_record_stream: pool '%s': %p is not a live allocation of this pool",
                     p->cfg.name, ptr);
  int r = add_stream_use(e->val, stream);
  spin_unlock(&sh->lock);
  return stream_use_status(r);
}

void pool_free_block(gpupool *p, block *b) {
  shard *sh = b->seg->sh; /* blocks stay in their segment's shard */
  spin_lock(&sh->lock);
  shard_free(sh, b, b->nstreams && shard_defer_free(sh, b));
  spin_unlock(&sh->lock);
}

gpupool_status pool_record_stream_block(block *b, void *stream) {
  shard *sh = b->seg->sh;
  spin_lock(&sh->lock);
  int r = add_stream_use(b, stream);
  spin_unlock(&sh->lock);
  return stream_use_status(r);
}

size_t gpupool_empty_cache(gpupool *p) {
  if (!p) { /* no status to return: the reason replaces any older one */
    pool_fail(GPUPOOL_ERR_INVALID, "gpupool_empty_cache: pool is NULL");
    return 0;
  }
  if (pool_check_not_inherited(p, "gpupool_empty_cache") != GPUPOOL_OK)
    return 0;
  pthread_mutex_lock(&p->slow_lock);
  reclaim_poll_all(p);
  size_t released = reclaim_release_cached(p, 0);
  shard *sh = atomic_load(&p->shards); /* the event goes on the newest stream's track */
  if (sh) {
    pool_event ev = {.type = EV_EMPTY_CACHE,
                     .size = released,
                     .stream = (uint64_t)(uintptr_t)sh->stream,
                     .a = (uint64_t)stat_total(&p->c.reserved_bytes)};
    spin_lock(&sh->lock);
    ev.b = (uint64_t)stat_total(&sh->st.s[STAT_ALLOCATED_BYTES]);
    shard_emit(sh, &ev);
    spin_unlock(&sh->lock);
  }
  pthread_mutex_unlock(&p->slow_lock);
  if (released && !backend_is_sim(p->be))
    registry_notify_segment_change(p);
  return released;
}

gpupool_status gpupool_set_memory_fraction(gpupool *p, double fraction) {
  if (!p)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_set_memory_fraction: pool is NULL");
  if (!(fraction >= 0 && fraction <= 1)) /* NaN too */
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "gpupool_set_memory_fraction: %g is not a fraction from 0 to 1", fraction);
  gpupool_status st = pool_check_not_inherited(p, "gpupool_set_memory_fraction");
  if (st != GPUPOOL_OK)
    return st;
  fraction = fraction == 0 ? 0 : fraction; /* -0 is 0: read back and reported as "0" */
  pthread_mutex_lock(&p->slow_lock);       /* the slow path reads it once per allocation */
  __atomic_store(&p->cfg.memory_fraction, &fraction, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&p->slow_lock);
  return GPUPOOL_OK;
}

double gpupool_memory_fraction(const gpupool *p) {
  if (!p) {
    pool_fail(GPUPOOL_ERR_INVALID, "gpupool_memory_fraction: pool is NULL");
    return NAN;
  }
  double fraction;
  __atomic_load(&p->cfg.memory_fraction, &fraction, __ATOMIC_RELAXED);
  return fraction < 0 ? 1.0 : fraction;
}

size_t gpupool_max_split_size(const gpupool *p) {
  if (!p) {
    pool_fail(GPUPOOL_ERR_INVALID, "gpupool_max_split_size: pool is NULL");
    return 0;
  }
  return p->cfg.max_split_size;
}

gpupool_status gpupool_mem_get_info(gpupool *p, size_t *free_bytes, size_t *total_bytes) {
  if (!p || !free_bytes || !total_bytes)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_mem_get_info: %s is NULL",
                     !p ? "pool" : "an output");
  gpupool_status st = pool_check_not_inherited(p, "gpupool_mem_get_info");
  if (st != GPUPOOL_OK)
    return st;
  return p->be->ops->mem_info(p->be, free_bytes, total_bytes);
}

const char *gpupool_name(const gpupool *p) {
  return p ? p->cfg.name : NULL;
}

int gpupool_device(const gpupool *p) {
  return p ? p->cfg.device : -1;
}

const char *gpupool_backend_name(const gpupool *p) {
  return p ? p->be->name : NULL;
}

const char *gpupool_strategy_name(const gpupool *p) {
  if (!p)
    return NULL;
  switch (p->cfg.strategy) {
  case GPUPOOL_STRATEGY_ROUND:
    return "round";
  case GPUPOOL_STRATEGY_NAIVE:
    return "naive";
  default:
    return "bfc";
  }
}
