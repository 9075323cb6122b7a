/* Tags under concurrency (also run under TSan): threads on their own streams
 * and on a shared one allocate and free under their own tags while a reader
 * sums the tags; at the end every tag is back to zero and, while they ran,
 * no tag ever read negative or more than its thread can hold. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpupool/tag.h"

#define THREADS 4
#define ROUNDS  2000
#define LIVE    8
#define SIZE    4096

typedef struct worker {
  gpupool *p;
  int index;
} worker;

static _Atomic int running;

static void *work(void *arg) {
  worker *w = arg;
  char name[16];
  snprintf(name, sizeof name, "w%d", w->index);
  void *stream = (void *)(uintptr_t)(w->index % 2 ? 0x1000 + w->index : 0); /* some share */
  void *live[LIVE] = {0};
  cr_assert_eq(gpupool_tag_push(name), GPUPOOL_OK, "%s", gpupool_last_error());
  for (int r = 0; r < ROUNDS; r++) {
    int i = r % LIVE;
    if (live[i])
      cr_assert_eq(gpupool_free(w->p, live[i]), GPUPOOL_OK, "%s", gpupool_last_error());
    cr_assert_eq(gpupool_malloc(w->p, &live[i], SIZE, stream), GPUPOOL_OK, "%s",
                 gpupool_last_error());
  }
  for (int i = 0; i < LIVE; i++)
    cr_assert_eq(gpupool_free(w->p, live[i]), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK, "%s", gpupool_last_error());
  atomic_fetch_sub(&running, 1);
  return NULL;
}

Test(tags_threads, concurrent_counts) {
  gpupool_options o = {
      .name = "tt", .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64u << 20, .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  pthread_t t[THREADS];
  worker w[THREADS];
  atomic_store(&running, THREADS);
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){p, i};
    cr_assert_eq(pthread_create(&t[i], NULL, work, &w[i]), 0, "pthread_create");
  }
  gpupool_tag_stat st[GPUPOOL_TAG_MAX];
  while (atomic_load(&running) > 0) {
    int n = gpupool_get_tag_stats(p, st, GPUPOOL_TAG_MAX);
    for (int i = 0; i < n; i++)
      cr_assert(st[i].allocated_bytes >= 0 && st[i].allocated_bytes <= LIVE * SIZE, "%s: %lld",
                st[i].tag, (long long)st[i].allocated_bytes);
  }
  for (int i = 0; i < THREADS; i++)
    cr_assert_eq(pthread_join(t[i], NULL), 0, "pthread_join");
  int n = gpupool_get_tag_stats(p, st, GPUPOOL_TAG_MAX);
  cr_assert_eq(n, THREADS, "%d tags listed", n);
  for (int i = 0; i < n; i++)
    cr_assert_eq(st[i].allocated_bytes, 0, "%s", st[i].tag);
  gpupool_destroy(p);
}
