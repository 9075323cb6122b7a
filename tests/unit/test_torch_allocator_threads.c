/* gpupool_torch_malloc/free from many threads at once, on the host backend:
 * the first calls race to create the device's pool, and exactly one pool
 * must come out of it. Runs under ThreadSanitizer in CI. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/torch.h"

#define THREADS    8
#define PER_THREAD 200

typedef struct worker {
  pthread_barrier_t *start;
  int device;
  void *ptrs[PER_THREAD];
  gpupool *seen;
} worker;

static void *run(void *arg) {
  worker *w = arg;
  pthread_barrier_wait(w->start);
  for (int i = 0; i < PER_THREAD; i++) {
    size_t size = 512 + (size_t)(i % 7) * 4096;
    w->ptrs[i] = gpupool_torch_malloc(size, w->device, NULL);
    if (w->ptrs[i])
      memset(w->ptrs[i], i & 0xff, size);
  }
  w->seen = gpupool_torch_pool(w->device);
  return NULL;
}

Test(torch_allocator_threads, first_use_races_make_one_pool_per_device) {
  setenv("GPUPOOL_CONF", "backend:host,host_capacity_mb:256", 1);
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_RECORD");
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, THREADS);
  static worker w[THREADS];
  pthread_t tid[THREADS];
  for (int t = 0; t < THREADS; t++) {
    w[t] = (worker){.start = &start, .device = t % 2};
    cr_assert_eq(pthread_create(&tid[t], NULL, run, &w[t]), 0);
  }
  for (int t = 0; t < THREADS; t++)
    pthread_join(tid[t], NULL);
  pthread_barrier_destroy(&start);

  for (int d = 0; d < 2; d++) {
    gpupool *p = gpupool_torch_pool(d);
    cr_assert_not_null(p);
    gpupool_stats s;
    cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
    cr_assert_eq(s.allocation[GPUPOOL_STAT_ALL].current, THREADS / 2 * PER_THREAD,
                 "device %d holds every allocation made on it", d);
  }
  for (int t = 0; t < THREADS; t++) {
    cr_assert_eq(w[t].seen, gpupool_torch_pool(w[t].device));
    for (int i = 0; i < PER_THREAD; i++) {
      cr_assert_not_null(w[t].ptrs[i]);
      gpupool_torch_free(w[t].ptrs[i], 0, w[t].device, NULL);
    }
  }
  for (int d = 0; d < 2; d++) {
    gpupool_stats s;
    cr_assert_eq(gpupool_get_stats(gpupool_torch_pool(d), &s), GPUPOOL_OK);
    cr_assert_eq(s.allocation[GPUPOOL_STAT_ALL].current, 0);
  }
}
