/* pool/segment_observers: what registers hears of every segment a pool
 * gains or loses, starting with those the pools already hold; nothing after
 * it unregisters. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/gpupool.h"
#include "pool/segment_observers.h"

#define MiB ((size_t)1 << 20)

typedef struct seen {
  segment_change c[64];
  int n;
} seen;

static void record(void *arg, const segment_change *c) {
  seen *s = arg;
  if (s->n < 64)
    s->c[s->n++] = *c;
}

static gpupool *host_pool(void) {
  gpupool_options o = {.name = "observed", .backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

Test(segment_observers, replay_then_every_change_then_nothing) {
  gpupool *p = host_pool();
  void *a = NULL, *b = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, MiB, NULL), GPUPOOL_OK);
  static seen s;
  memset(&s, 0, sizeof s);
  cr_assert_eq(segment_observers_add(record, &s), 0);
  cr_assert_eq(s.n, 1, "the segment the pool held was replayed");
  cr_expect_eq(s.c[0].alive, 1);
  cr_expect_eq(s.c[0].host_memory, 1);
  cr_expect_eq(s.c[0].size, 2 * MiB, "a small segment");
  cr_expect((uintptr_t)a >= s.c[0].addr && (uintptr_t)a < s.c[0].addr + s.c[0].size);

  cr_assert_eq(gpupool_malloc(p, &b, 30 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(s.n, 2, "a new segment is reported");
  cr_expect_eq(s.c[1].alive, 1);
  cr_expect_eq(s.c[1].addr, (uintptr_t)b);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, b), GPUPOOL_OK);
  cr_expect_eq(s.n, 2, "a free that keeps the segment cached reports nothing");
  gpupool_empty_cache(p);
  cr_assert_eq(s.n, 4, "both segments leave");
  cr_expect_eq(s.c[2].alive + s.c[3].alive, 0);

  segment_observers_remove(record, &s);
  cr_assert_eq(gpupool_malloc(p, &a, MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  gpupool_destroy(p);
  cr_expect_eq(s.n, 4, "nothing reaches an observer that unregistered");
}

Test(segment_observers, the_table_has_a_bound) {
  static seen s[SEGMENT_OBSERVERS_MAX + 1];
  for (int i = 0; i < SEGMENT_OBSERVERS_MAX; i++)
    cr_assert_eq(segment_observers_add(record, &s[i]), 0);
  cr_expect_eq(segment_observers_add(record, &s[SEGMENT_OBSERVERS_MAX]), -1);
  gpupool *p = host_pool();
  void *a = NULL;
  cr_assert_eq(gpupool_malloc(p, &a, MiB, NULL), GPUPOOL_OK);
  for (int i = 0; i < SEGMENT_OBSERVERS_MAX; i++) {
    cr_expect_eq(s[i].n, 1, "observer %d", i);
    segment_observers_remove(record, &s[i]);
  }
  cr_expect_eq(s[SEGMENT_OBSERVERS_MAX].n, 0);
  gpupool_destroy(p);
}
