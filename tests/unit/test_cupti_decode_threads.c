/* The decoder fed from several threads at once (CUPTI's thread and flush
 * callers), read by a scrape and claimed by pool threads: no torn counters,
 * every allocation balanced by its release. Run under ThreadSanitizer in CI. */
#include <criterion/criterion.h>

#ifdef GPUPOOL_HAVE_CUDA
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "agent/cupti_decode.h"

#define FEEDERS 3
#define ROUNDS  3000

static cupti_decoder *g_dec;
static atomic_int g_done;

static int owns_nothing(uint64_t addr, uint64_t ts) {
  return 0;
}

static void feed_one(int op, uint64_t addr) {
  CUpti_ActivityMemory4 m;
  memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = op;
  m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.address = addr;
  m.bytes = 4096;
  m.deviceId = 0;
  const CUpti_Activity *r = (const CUpti_Activity *)&m;
  cupti_decoder_records(g_dec, &r, 1);
}

static void *feeder(void *arg) {
  uint64_t base = (uint64_t)(uintptr_t)arg << 32;
  for (int i = 0; i < ROUNDS; i++) {
    uint64_t addr = base + (uint64_t)(i % 100 + 1) * 4096;
    feed_one(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, addr);
    cupti_decoder_claim(g_dec, addr); /* a pool noting a segment there */
    feed_one(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, addr);
  }
  return NULL;
}

static void *scraper(void *arg) {
  static cupti_metrics m;
  while (!atomic_load(&g_done)) {
    cupti_decoder_read(g_dec, &m);
    if (m.ndevices > 1)
      return (void *)1;
  }
  return NULL;
}

Test(cupti_decode_threads, concurrent_feeders_scrape_and_claims) {
  g_dec = cupti_decoder_create(1024, 1024, owns_nothing);
  pthread_t f[FEEDERS], s;
  pthread_create(&s, NULL, scraper, NULL);
  for (int i = 0; i < FEEDERS; i++)
    pthread_create(&f[i], NULL, feeder, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < FEEDERS; i++)
    pthread_join(f[i], NULL);
  atomic_store(&g_done, 1);
  void *bad;
  pthread_join(s, &bad);
  cr_assert_null(bad, "a scrape saw a device that never existed");
  static cupti_metrics m;
  cupti_decoder_read(g_dec, &m);
  cr_assert_eq(m.records_total, 2ull * FEEDERS * ROUNDS);
  cr_assert_eq(m.unknown_releases_total, 0);
  cr_assert_eq(m.ndevices, 1);
  uint64_t allocs = 0, releases = 0;
  for (int o = 0; o < 2; o++) {
    cr_assert_eq(m.devices[0].live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][o], 0);
    allocs += m.devices[0].allocations[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][o];
    releases += m.devices[0].releases[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][o];
  }
  cr_assert_eq(allocs, (uint64_t)FEEDERS * ROUNDS);
  cr_assert_eq(releases, (uint64_t)FEEDERS * ROUNDS);
  cr_assert_eq(cupti_decoder_live_count(g_dec), 0);
  cupti_decoder_destroy(g_dec);
}
#else
Test(cupti_decode_threads, needs_cuda_headers) {
  cr_skip("built without CUDA: the CUPTI decoder is not compiled");
}
#endif
