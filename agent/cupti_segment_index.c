/* The gpupool segment index: see segment_index.h. Live segments never
 * overlap and sit in an array sorted by address (binary search); dead ones,
 * few and short-lived, in a small array scanned linearly. */
#include "segment_index.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/array_grow.h"
#include "core/clock.h"

typedef struct live_segment {
  uint64_t addr, size;
} live_segment;

typedef struct dead_segment {
  uint64_t addr, size, died_ns;
} dead_segment;

/* Segments freed within one flush period; beyond this the oldest is dropped
 * (its late records then count as "other"). */
#define DEAD_MAX 1024

static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER;
static live_segment *g_live;
static size_t g_nlive, g_cap;
static dead_segment g_dead[DEAD_MAX];
static size_t g_ndead;
static int g_retain;
static _Atomic(segment_index_listener) g_listener;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static atomic_int g_grow_failed;

static void fork_prepare(void) {
  pthread_rwlock_wrlock(&g_lock);
}
static void fork_parent(void) {
  pthread_rwlock_unlock(&g_lock);
}
/* The child's only thread held the lock through fork, under another thread
 * id: a fresh lock is the only state it can rely on. */
static void fork_child(void) {
  pthread_rwlock_init(&g_lock, NULL);
}
static void register_fork_handlers(void) {
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Index of the first live segment starting above addr. */
static size_t upper_bound(uint64_t addr) {
  size_t lo = 0, hi = g_nlive;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (g_live[mid].addr <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void add_dead(uint64_t addr, uint64_t size, uint64_t died_ns) {
  size_t slot = g_ndead;
  if (g_ndead == DEAD_MAX) {
    slot = 0;
    for (size_t i = 1; i < g_ndead; i++)
      if (g_dead[i].died_ns < g_dead[slot].died_ns)
        slot = i;
  } else {
    g_ndead++;
  }
  g_dead[slot] = (dead_segment){addr, size, died_ns};
}

/* Removes live segments overlapping [addr, end); moves them to the dead list
 * when retaining. */
static void remove_overlapping(uint64_t addr, uint64_t end, uint64_t now_ns) {
  size_t first = upper_bound(addr);
  if (first > 0 && g_live[first - 1].addr + g_live[first - 1].size > addr)
    first--;
  size_t last = first;
  while (last < g_nlive && g_live[last].addr < end)
    last++;
  if (last == first)
    return;
  if (g_retain)
    for (size_t i = first; i < last; i++)
      add_dead(g_live[i].addr, g_live[i].size, now_ns);
  memmove(&g_live[first], &g_live[last], (g_nlive - last) * sizeof *g_live);
  g_nlive -= last - first;
}

void cupti_note_segment(uint64_t addr, uint64_t size, int device, int alive) {
  (void)device; /* unified addressing: the address alone identifies memory */
  if (size == 0 || addr == 0)
    return;
  pthread_once(&g_fork_once, register_fork_handlers);
  uint64_t now = clock_realtime_ns();
  int added = 0;
  pthread_rwlock_wrlock(&g_lock);
  size_t at = upper_bound(addr);
  if (alive && at > 0 && g_live[at - 1].addr == addr && g_live[at - 1].size == size) {
    /* Reported again (segment_observers_add's replay): nothing changes. */
  } else if (alive) {
    /* An overlap means a free was never noted: the new segment wins. */
    remove_overlapping(addr, addr + size, now);
    if (array_grow((void **)&g_live, &g_cap, g_nlive + 1, sizeof *g_live, 256) == 0) {
      size_t pos = upper_bound(addr);
      memmove(&g_live[pos + 1], &g_live[pos], (g_nlive - pos) * sizeof *g_live);
      g_live[pos] = (live_segment){addr, size};
      g_nlive++;
      added = 1;
    }
  } else {
    remove_overlapping(addr, addr + 1, now);
  }
  pthread_rwlock_unlock(&g_lock);
  if (alive && !added && atomic_exchange(&g_grow_failed, 1) == 0)
    fprintf(stderr, "gpupool: segment index out of memory: CUPTI counts some pool memory "
                    "as \"other\"\n");
  segment_index_listener fn = atomic_load(&g_listener);
  if (added && fn)
    fn(addr, size);
}

int segment_index_contains(uint64_t addr, uint64_t ts_ns) {
  int found = 0;
  pthread_rwlock_rdlock(&g_lock);
  size_t pos = upper_bound(addr);
  if (pos > 0 && addr - g_live[pos - 1].addr < g_live[pos - 1].size)
    found = 1;
  for (size_t i = 0; !found && i < g_ndead; i++)
    if (addr - g_dead[i].addr < g_dead[i].size && ts_ns < g_dead[i].died_ns)
      found = 1;
  pthread_rwlock_unlock(&g_lock);
  return found;
}

void segment_index_retain_dead(int on) {
  pthread_rwlock_wrlock(&g_lock);
  g_retain = on;
  if (!on)
    g_ndead = 0;
  pthread_rwlock_unlock(&g_lock);
}

void segment_index_purge(uint64_t before_ns) {
  pthread_rwlock_wrlock(&g_lock);
  size_t kept = 0;
  for (size_t i = 0; i < g_ndead; i++)
    if (g_dead[i].died_ns >= before_ns)
      g_dead[kept++] = g_dead[i];
  g_ndead = kept;
  pthread_rwlock_unlock(&g_lock);
}

void segment_index_clear(void) {
  pthread_rwlock_wrlock(&g_lock);
  g_nlive = g_ndead = 0;
  pthread_rwlock_unlock(&g_lock);
}

void segment_index_observe(void *arg, const segment_change *c) {
  if (!c->host_memory) /* CUPTI sees device memory only */
    cupti_note_segment(c->addr, c->size, c->device, c->alive);
}

void segment_index_set_listener(segment_index_listener fn) {
  atomic_store(&g_listener, fn);
}

size_t segment_index_live_count(void) {
  pthread_rwlock_rdlock(&g_lock);
  size_t n = g_nlive;
  pthread_rwlock_unlock(&g_lock);
  return n;
}

size_t segment_index_dead_count(void) {
  pthread_rwlock_rdlock(&g_lock);
  size_t n = g_ndead;
  pthread_rwlock_unlock(&g_lock);
  return n;
}
