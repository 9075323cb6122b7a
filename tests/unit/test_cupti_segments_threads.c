/* The segment index under concurrent notes (pool threads) and lookups (the
 * CUPTI decoder): run under ThreadSanitizer in CI. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>

#include "agent/segment_index.h"

#define MiB     (1ull << 20)
#define THREADS 4
#define ROUNDS  2000

static void *writer(void *arg) {
  uint64_t base = (uint64_t)(uintptr_t)arg;
  for (int r = 0; r < ROUNDS; r++) {
    uint64_t addr = base + (uint64_t)(r % 64) * 4 * MiB;
    cupti_note_segment(addr, 2 * MiB, 0, 1);
    cupti_note_segment(addr, 2 * MiB, 0, 0);
  }
  return NULL;
}

static void *reader(void *arg) {
  /* A segment noted before the threads start and never freed stays visible. */
  for (int r = 0; r < ROUNDS * 4; r++)
    if (!segment_index_contains(1 * MiB + 512, 0))
      return (void *)1;
  return NULL;
}

Test(cupti_segments_threads, concurrent_notes_and_lookups) {
  segment_index_retain_dead(1);
  cupti_note_segment(1 * MiB, 2 * MiB, 0, 1);
  pthread_t w[THREADS], rd[2];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&w[i], NULL, writer, (void *)(uintptr_t)((uint64_t)(i + 1) << 40));
  for (int i = 0; i < 2; i++)
    pthread_create(&rd[i], NULL, reader, NULL);
  for (int i = 0; i < THREADS; i++)
    pthread_join(w[i], NULL);
  for (int i = 0; i < 2; i++) {
    void *failed;
    pthread_join(rd[i], &failed);
    cr_assert_null(failed, "the permanent segment went missing during concurrent notes");
  }
  cr_assert_eq(segment_index_live_count(), 1);
  cr_assert_leq(segment_index_dead_count(), 1024, "dead segments are bounded");
  segment_index_purge(UINT64_MAX);
  cr_assert_eq(segment_index_dead_count(), 0);
}
