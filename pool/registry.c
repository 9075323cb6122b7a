#include "registry.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gpupool **pools;
static int npools, cap;
static void (*_Atomic segment_listener)(gpupool *p);

/* A child forked while another thread walked the registry (the agent's
 * sampler, a scrape) would wait for that thread's unlock forever: its copy
 * of the lock is made anew. The pools listed are the parent's, which the
 * child cannot use (pool.c, process_forks): the child's list starts empty,
 * so that no walk (a snapshot, a trace written by the child) takes their
 * locks. The segment listener is the parent's agent's, whose sampler does
 * not run in the child (waking it would take a lock that thread may have
 * held at the fork). */
static void forget_parent_pools_in_child(void) {
  pthread_mutex_init(&lock, NULL);
  npools = 0;
  atomic_store(&segment_listener, NULL);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) {
  pthread_atfork(NULL, NULL, forget_parent_pools_in_child);
}

void registry_add(gpupool *p) {
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&lock);
  if (npools == cap) {
    int ncap = cap ? 2 * cap : 16;
    gpupool **n = realloc(pools, (size_t)ncap * sizeof *n);
    if (!n) { /* unregistered pools still work; the agent just cannot see them */
      pthread_mutex_unlock(&lock);
      return;
    }
    pools = n;
    cap = ncap;
  }
  pools[npools++] = p;
  pthread_mutex_unlock(&lock);
}

void registry_remove(gpupool *p) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < npools; i++) {
    if (pools[i] == p) {
      for (int j = i + 1; j < npools; j++)
        pools[j - 1] = pools[j];
      npools--;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

int registry_foreach_then(void (*fn)(gpupool *p, void *arg), void (*done)(void *arg), void *arg) {
  pthread_mutex_lock(&lock);
  int n = npools;
  for (int i = 0; i < n; i++)
    fn(pools[i], arg);
  if (done)
    done(arg);
  pthread_mutex_unlock(&lock);
  return n;
}

int registry_foreach(void (*fn)(gpupool *p, void *arg), void *arg) {
  return registry_foreach_then(fn, NULL, arg);
}

void registry_set_segment_listener(void (*fn)(gpupool *p)) {
  pthread_once(&atfork_once, register_atfork);
  atomic_store(&segment_listener, fn);
}

void registry_notify_segment_change(gpupool *p) {
  void (*fn)(gpupool *) = atomic_load(&segment_listener);
  if (fn)
    fn(p);
}
