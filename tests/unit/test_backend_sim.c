/* The sim backend (replays only): a device of any capacity with no memory
 * behind it, expandable segments that map nothing, and pools that the
 * registry (and so the agent) never sees. */
#include <criterion/criterion.h>

#include "gpupool/gpupool.h"

#define GiB ((size_t)1 << 30)

static gpupool *sim_pool(const char *tunables, size_t capacity) {
  gpupool_options o = {.name = "sim",
                       .backend = GPUPOOL_BACKEND_SIM,
                       .tunables = tunables,
                       .host_capacity = capacity,
                       .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

Test(backend_sim, an_80_gib_device_needs_no_memory) {
  for (int x = 0; x < 2; x++) {
    gpupool *p = sim_pool(x ? "expandable_segments:True" : "", 80 * GiB);
    cr_expect_str_eq(gpupool_backend_name(p), "sim");
    void *a, *b, *c;
    cr_assert_eq(gpupool_malloc(p, &a, 70 * GiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
    cr_assert_eq(gpupool_malloc(p, &b, 9 * GiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
    cr_expect_eq(gpupool_malloc(p, &c, 2 * GiB, NULL), GPUPOOL_ERR_OOM, "80 GiB is the limit");
    cr_expect_neq(a, b);
    gpupool_stats s;
    cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
    cr_expect_geq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, (int64_t)(79 * GiB));
    cr_expect_eq(s.num_ooms, 1);
    cr_expect_eq(gpupool_free(p, a), GPUPOOL_OK);
    cr_expect_eq(gpupool_malloc(p, &c, 2 * GiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
    cr_expect_eq(gpupool_free(p, b), GPUPOOL_OK);
    cr_expect_eq(gpupool_free(p, c), GPUPOOL_OK);
    cr_expect_gt(gpupool_empty_cache(p), 0);
    cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
    cr_expect_eq(s.reserved_bytes[GPUPOOL_STAT_ALL].current, 0);
    gpupool_destroy(p);
  }
}

Test(backend_sim, streams_complete_at_once) {
  gpupool *p = sim_pool("", GiB);
  void *a, *b;
  void *other = (void *)(uintptr_t)0x1234; /* any value: sim streams are keys */
  cr_assert_eq(gpupool_malloc(p, &a, 1 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_record_stream(p, a, other), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, a), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &b, 1 << 20, NULL), GPUPOOL_OK);
  cr_expect_eq(a, b, "the pending block came back at the next allocation");
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
  cr_expect_eq(s.num_sync_events, 1);
  cr_expect_eq(s.num_device_alloc, 1);
  gpupool_destroy(p);
}

Test(backend_sim, configuration) {
  gpupool_options o = {.backend = GPUPOOL_BACKEND_SIM,
                       .host_capacity = GiB,
                       .ignore_env = 1,
                       .tunables = "fault_rate:0.5"};
  gpupool *p;
  cr_expect_eq(gpupool_create(&o, &p), GPUPOOL_ERR_INVALID, "fault injection is host only");
  o.tunables = "backend:sim,host_capacity_mb:64";
  o.backend = GPUPOOL_BACKEND_DEFAULT;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  void *a;
  cr_expect_eq(gpupool_malloc(p, &a, 65 << 20, NULL), GPUPOOL_ERR_OOM);
  gpupool_destroy(p);
}

/* Streams of an expandable pool on a sim device of `device` bytes, each
 * allocating 1 GiB: a range each, no OOM. */
static void every_stream_has_a_range(size_t device, uintptr_t streams) {
  gpupool *p = sim_pool("expandable_segments:True", device);
  for (uintptr_t i = 0; i < streams; i++) {
    void *a;
    cr_assert_eq(gpupool_malloc(p, &a, GiB, (void *)i), GPUPOOL_OK, "stream %zu: %s", (size_t)i,
                 gpupool_last_error());
  }
  gpupool_stats s;
  cr_assert_eq(gpupool_get_stats(p, &s), GPUPOOL_OK);
  cr_expect_eq(s.num_ooms, 0);
  cr_expect_eq(s.num_alloc_retries, 0);
  cr_expect_eq(s.segment[GPUPOOL_STAT_LARGE].current, (int64_t)streams, "a range per stream");
  gpupool_destroy(p);
}

/* The advisor simulates devices up to 1 PiB, and an expandable pool
 * reserves per stream a range as large as the device: the simulated address
 * space holds more than the 1024 streams a pool serves times 1 PiB (2^60
 * bytes; a process's 128 TiB would not hold one such range), and a plain
 * pool's segment of 200 TiB. (1024 streams are tried on a 1 TiB device: a
 * range of a 1 PiB device costs the pool a 4 GiB table of its pages, slow
 * to allocate in sanitizer builds.) */
Test(backend_sim, a_petabyte_device_has_room_for_every_stream) {
  every_stream_has_a_range((size_t)1 << 50, 4);
  every_stream_has_a_range((size_t)1 << 40, 1024);
  gpupool *p = sim_pool("", (size_t)1 << 50);
  void *big;
  cr_expect_eq(gpupool_malloc(p, &big, (size_t)200 << 40, NULL), GPUPOOL_OK, "%s",
               gpupool_last_error());
  gpupool_destroy(p);
}
