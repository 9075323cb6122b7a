#include "segment_observers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "pool_internal.h"
#include "registry.h"

typedef struct observer {
  segment_observer fn;
  void *arg;
} observer;

/* observers[] changes under the write lock; reports read it under the read
 * lock, taken only while at least one observer is registered. */
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static observer observers[SEGMENT_OBSERVERS_MAX];
static _Atomic int nobservers;

static segment_change change_of(gpupool *p, uintptr_t addr, size_t size, int alive) {
  return (segment_change){.addr = addr,
                          .size = size,
                          .device = p->cfg.device,
                          .alive = alive,
                          .host_memory = backend_is_simulated(p->be)};
}

void segment_observers_note(gpupool *p, uintptr_t addr, size_t size, int alive) {
  if (atomic_load(&nobservers) == 0)
    return;
  segment_change c = change_of(p, addr, size, alive);
  pthread_rwlock_rdlock(&lock);
  for (int i = 0; i < SEGMENT_OBSERVERS_MAX; i++)
    if (observers[i].fn)
      observers[i].fn(observers[i].arg, &c);
  pthread_rwlock_unlock(&lock);
}

/* Reports p's segments to o. Segments join and leave the shards' lists only
 * under the slow lock, which is held here. */
static void replay_pool(gpupool *p, void *arg) {
  const observer *o = arg;
  pthread_mutex_lock(&p->slow_lock);
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard)
    for (segment *seg = sh->segments; seg; seg = seg->next) {
      segment_change c = change_of(p, seg->addr, seg->size, 1);
      o->fn(o->arg, &c);
    }
  pthread_mutex_unlock(&p->slow_lock);
}

/* fork(): the observers are the parent's (the agent's CUPTI side, which
 * records nothing in a child), and a thread of the parent may have held the
 * lock at the fork: the child starts with the lock anew and none. */
static void forget_observers_in_child(void) {
  pthread_rwlock_init(&lock, NULL);
  memset(observers, 0, sizeof observers);
  atomic_store(&nobservers, 0);
}

static void register_atfork(void) {
  pthread_atfork(NULL, NULL, forget_observers_in_child);
}

int segment_observers_add(segment_observer fn, void *arg) {
  static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
  pthread_once(&atfork_once, register_atfork);
  observer o = {fn, arg};
  int slot = -1;
  pthread_rwlock_wrlock(&lock);
  for (int i = 0; i < SEGMENT_OBSERVERS_MAX && slot < 0; i++)
    if (!observers[i].fn)
      slot = i;
  if (slot >= 0) {
    observers[slot] = o;
    atomic_fetch_add(&nobservers, 1);
  }
  pthread_rwlock_unlock(&lock);
  if (slot < 0)
    return -1;
  /* Registered first, replayed second: a segment made in between is
   * reported by its pool, and perhaps by the replay too. */
  registry_foreach(replay_pool, &o);
  return 0;
}

void segment_observers_remove(segment_observer fn, void *arg) {
  pthread_rwlock_wrlock(&lock);
  for (int i = 0; i < SEGMENT_OBSERVERS_MAX; i++)
    if (observers[i].fn == fn && observers[i].arg == arg) {
      observers[i] = (observer){0};
      atomic_fetch_sub(&nobservers, 1);
    }
  pthread_rwlock_unlock(&lock);
}
