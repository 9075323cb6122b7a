/* The host backend through pool/backend.h: capacity, real memory, fault
 * injection, simulated streams and events, synchronize. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpupool/host.h"
#include "pool/backend.h"

#define MiB ((size_t)1 << 20)

static backend *make_host(size_t capacity, unsigned every_n, double rate, uint64_t seed) {
  host_backend_config cfg = {
      .capacity = capacity, .fail_every_n = every_n, .fail_rate = rate, .fail_seed = seed};
  backend *b = NULL;
  cr_assert_eq(backend_host_create(&cfg, &b), GPUPOOL_OK);
  cr_assert_not_null(b);
  return b;
}

static size_t free_bytes(backend *b) {
  size_t free_b = 0, total = 0;
  cr_assert_eq(b->ops->mem_info(b, &free_b, &total), GPUPOOL_OK);
  return free_b;
}

/* Allocate `size` and free it at once; returns the status of the allocation. */
static gpupool_status try_alloc(backend *b, size_t size) {
  void *p = NULL;
  gpupool_status st = b->ops->alloc(b, &p, size, NULL);
  if (st == GPUPOOL_OK)
    b->ops->free(b, p, size, NULL);
  return st;
}

Test(backend_host, identity) {
  backend *b = make_host(MiB, 0, 0, 0);
  cr_assert(backend_is_host(b));
  cr_assert_str_eq(b->name, "host");
  cr_assert_null(b->ops->mempool_attrs, "only cuda_async has memory-pool attributes");
  cr_assert_not(backend_is_host(NULL));
  b->ops->destroy(b);
}

Test(backend_host, create_rejects_bad_config) {
  backend *b = (backend *)0x1;
  host_backend_config cfg = {.capacity = 0};
  cr_assert_eq(backend_host_create(NULL, &b), GPUPOOL_ERR_INVALID);
  cr_assert_eq(backend_host_create(&cfg, &b), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "capacity"), "reason: %s", gpupool_last_error());
  const double bad_rates[] = {-0.1, 1.5, NAN};
  for (size_t i = 0; i < sizeof bad_rates / sizeof bad_rates[0]; i++) {
    cfg = (host_backend_config){.capacity = MiB, .fail_rate = bad_rates[i]};
    cr_assert_eq(backend_host_create(&cfg, &b), GPUPOOL_ERR_INVALID, "rate %g", bad_rates[i]);
  }
  cr_assert_eq(b, (backend *)0x1, "*out untouched on failure");
}

Test(backend_host, capacity_is_enforced) {
  backend *b = make_host(4 * MiB, 0, 0, 0);
  size_t free_b, total;
  void *a = NULL, *c = NULL, *d = NULL;
  cr_assert_eq(b->ops->alloc(b, &a, 3 * MiB, NULL), GPUPOOL_OK);
  cr_assert_eq(b->ops->mem_info(b, &free_b, &total), GPUPOOL_OK);
  cr_assert_eq(free_b, MiB);
  cr_assert_eq(total, 4 * MiB);

  cr_assert_eq(b->ops->alloc(b, &c, 2 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_assert(strstr(gpupool_last_error(), "full"), "reason: %s", gpupool_last_error());
  cr_assert_eq(free_bytes(b), MiB, "a failed allocation takes nothing");

  cr_assert_eq(b->ops->alloc(b, &c, MiB, NULL), GPUPOOL_OK, "exactly the remaining bytes fit");
  cr_assert_eq(free_bytes(b), 0);
  cr_assert_eq(b->ops->alloc(b, &d, 1, NULL), GPUPOOL_ERR_OOM);

  b->ops->free(b, a, 3 * MiB, NULL);
  cr_assert_eq(free_bytes(b), 3 * MiB);
  cr_assert_eq(b->ops->alloc(b, &d, 2 * MiB, NULL), GPUPOOL_OK);
  b->ops->free(b, c, MiB, NULL);
  b->ops->free(b, d, 2 * MiB, NULL);
  cr_assert_eq(free_bytes(b), 4 * MiB);
  b->ops->destroy(b);
}

static int overcommit_mode(void) {
  FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
  int mode = -1;
  if (f) {
    if (fscanf(f, "%d", &mode) != 1)
      mode = -1;
    fclose(f);
  }
  return mode;
}

Test(backend_host, capacity_larger_than_host_memory_is_lazy) {
  /* 1 TiB simulated: mappings are MAP_NORESERVE, pages only exist once touched. */
  if (overcommit_mode() == 2)
    cr_skip("vm.overcommit_memory=2: the kernel ignores MAP_NORESERVE");
  backend *b = make_host((size_t)1 << 40, 0, 0, 0);
  void *p = NULL;
  cr_assert_eq(b->ops->alloc(b, &p, (size_t)64 << 30, NULL), GPUPOOL_OK);
  ((char *)p)[0] = 1;
  ((char *)p)[((size_t)64 << 30) - 1] = 2;
  b->ops->free(b, p, (size_t)64 << 30, NULL);
  b->ops->destroy(b);
}

Test(backend_host, memory_is_real_and_writable) {
  backend *b = make_host(64 * MiB, 0, 0, 0);
  const size_t sizes[] = {5000, MiB + 3, 64 * 1024, 20 * MiB};
  enum { N = sizeof sizes / sizeof sizes[0] };
  unsigned char *p[N];
  for (int i = 0; i < N; i++) {
    cr_assert_eq(b->ops->alloc(b, (void **)&p[i], sizes[i], NULL), GPUPOOL_OK);
    cr_assert_eq((uintptr_t)p[i] % 512, 0, "segments are at least 512-byte aligned");
    memset(p[i], 0xA0 + i, sizes[i]);
  }
  for (int i = 0; i < N; i++)
    for (size_t j = 0; j < sizes[i]; j += 4093)
      cr_assert_eq(p[i][j], 0xA0 + i, "segment %d byte %zu overwritten", i, j);
  for (int i = 0; i < N; i++)
    cr_assert_eq(p[i][sizes[i] - 1], 0xA0 + i);
  for (int i = 0; i < N; i++)
    b->ops->free(b, p[i], sizes[i], NULL);
  b->ops->destroy(b);
}

Test(backend_host, fault_every_n) {
  backend *b = make_host(16 * MiB, 3, 0, 0);
  for (int k = 1; k <= 12; k++) {
    gpupool_status st = try_alloc(b, 4096);
    cr_assert_eq(st, k % 3 == 0 ? GPUPOOL_ERR_OOM : GPUPOOL_OK, "attempt %d", k);
    if (st != GPUPOOL_OK)
      cr_assert(strstr(gpupool_last_error(), "injected"), "reason: %s", gpupool_last_error());
  }
  cr_assert_eq(free_bytes(b), 16 * MiB);
  b->ops->destroy(b);
}

Test(backend_host, capacity_failures_count_as_attempts) {
  backend *b = make_host(MiB, 2, 0, 0);
  cr_assert_eq(try_alloc(b, 2 * MiB), GPUPOOL_ERR_OOM, "attempt 1: too big");
  cr_assert_eq(try_alloc(b, 4096), GPUPOOL_ERR_OOM, "attempt 2: injected");
  cr_assert_eq(try_alloc(b, 4096), GPUPOOL_OK, "attempt 3");
  b->ops->destroy(b);
}

enum { RUN = 500 };

static void outcomes(backend *b, unsigned char out[RUN]) {
  for (int k = 0; k < RUN; k++)
    out[k] = try_alloc(b, 4096) != GPUPOOL_OK;
}

static int count(const unsigned char v[RUN]) {
  int n = 0;
  for (int k = 0; k < RUN; k++)
    n += v[k];
  return n;
}

Test(backend_host, fault_rate_is_seeded_and_deterministic) {
  unsigned char a[RUN], b[RUN], c[RUN];
  backend *ba = make_host(16 * MiB, 0, 0.3, 42);
  backend *bb = make_host(16 * MiB, 0, 0.3, 42);
  backend *bc = make_host(16 * MiB, 0, 0.3, 43);
  outcomes(ba, a);
  outcomes(bb, b);
  outcomes(bc, c);
  cr_assert_arr_eq(a, b, RUN, "same seed, same failures");
  cr_assert_neq(memcmp(a, c, RUN), 0, "another seed, other failures");
  /* A fixed sequence: about 30% of 500 (the exact count is stable per seed). */
  cr_assert(count(a) > 100 && count(a) < 200, "failures: %d", count(a));
  cr_assert(count(c) > 100 && count(c) < 200, "failures: %d", count(c));
  ba->ops->destroy(ba);
  bb->ops->destroy(bb);
  bc->ops->destroy(bc);
}

Test(backend_host, fault_rate_bounds) {
  unsigned char v[RUN];
  backend *none = make_host(16 * MiB, 0, 0.0, 7);
  backend *all = make_host(16 * MiB, 0, 1.0, 7);
  outcomes(none, v);
  cr_assert_eq(count(v), 0);
  outcomes(all, v);
  cr_assert_eq(count(v), RUN);
  none->ops->destroy(none);
  all->ops->destroy(all);
}

Test(backend_host, set_faults_at_run_time) {
  backend *b = make_host(16 * MiB, 0, 0, 0);
  cr_assert_eq(try_alloc(b, 4096), GPUPOOL_OK);
  cr_assert_eq(try_alloc(b, 4096), GPUPOOL_OK);

  backend_host_set_faults(b, 2, 0, 0); /* the count restarts here */
  cr_assert_eq(try_alloc(b, 4096), GPUPOOL_OK);
  cr_assert_eq(try_alloc(b, 4096), GPUPOOL_ERR_OOM);
  cr_assert_eq(try_alloc(b, 4096), GPUPOOL_OK);

  unsigned char first[RUN], again[RUN];
  backend_host_set_faults(b, 0, 0.5, 9);
  outcomes(b, first);
  backend_host_set_faults(b, 0, 0.5, 9);
  outcomes(b, again);
  cr_assert_arr_eq(first, again, RUN, "setting the same seed replays the same sequence");
  cr_assert(count(first) > 0 && count(first) < RUN);

  backend_host_set_faults(b, 0, 0, 0);
  outcomes(b, first);
  cr_assert_eq(count(first), 0, "every_n 0 and rate 0 turn injection off");
  b->ops->destroy(b);
}

Test(backend_host, set_faults_ignores_bad_rate) {
  backend *b = make_host(16 * MiB, 0, 0, 0);
  unsigned char v[RUN];
  backend_host_set_faults(b, 0, NAN, 1);
  outcomes(b, v);
  cr_assert_eq(count(v), 0, "an invalid rate injects nothing");
  backend_host_set_faults(NULL, 1, 0, 0); /* no-op, no crash */
  b->ops->destroy(b);
}

static int query(backend *b, void *event) {
  return b->ops->event_query(b, event);
}

static void *record(backend *b, void *stream) {
  void *e = NULL;
  cr_assert_eq(b->ops->event_record(b, stream, &e), GPUPOOL_OK);
  cr_assert_not_null(e);
  return e;
}

Test(backend_host, default_and_unknown_streams_are_always_complete) {
  backend *b = make_host(MiB, 0, 0, 0);
  int not_a_stream = 0;
  void *e0 = record(b, NULL);
  void *e1 = record(b, &not_a_stream);
  cr_assert_eq(query(b, e0), 1);
  cr_assert_eq(query(b, e1), 1);
  b->ops->event_destroy(b, e0);
  b->ops->event_destroy(b, e1);
  gpupool_host_stream_enqueue(NULL); /* NULL stream: no-ops */
  gpupool_host_stream_complete(NULL);
  gpupool_host_stream_destroy(NULL);
  b->ops->destroy(b);
}

Test(backend_host, event_waits_for_work_enqueued_before_it) {
  backend *b = make_host(MiB, 0, 0, 0);
  gpupool_host_stream *s = gpupool_host_stream_create();
  cr_assert_not_null(s);

  void *idle = record(b, s);
  cr_assert_eq(query(b, idle), 1, "no work pending: complete at once");

  gpupool_host_stream_enqueue(s);
  void *e1 = record(b, s);
  gpupool_host_stream_enqueue(s);
  void *e2 = record(b, s);
  cr_assert_eq(query(b, e1), 0);
  cr_assert_eq(query(b, e2), 0);
  cr_assert_eq(query(b, e1), 0, "querying never completes anything");

  gpupool_host_stream_complete(s);
  cr_assert_eq(query(b, e1), 1);
  cr_assert_eq(query(b, e2), 1);

  void *after = record(b, s);
  cr_assert_eq(query(b, after), 1, "recorded after the work completed");
  gpupool_host_stream_enqueue(s);
  cr_assert_eq(query(b, after), 1, "work enqueued after the event does not delay it");

  void *e3 = record(b, s);
  cr_assert_eq(query(b, e3), 0);
  gpupool_host_stream_complete(s);
  cr_assert_eq(query(b, e3), 1);

  void *events[] = {idle, e1, e2, after, e3};
  for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
    b->ops->event_destroy(b, events[i]);
  gpupool_host_stream_destroy(s);
  b->ops->destroy(b);
}

Test(backend_host, streams_are_independent) {
  backend *b = make_host(MiB, 0, 0, 0);
  gpupool_host_stream *s1 = gpupool_host_stream_create();
  gpupool_host_stream *s2 = gpupool_host_stream_create();
  gpupool_host_stream_enqueue(s1);
  gpupool_host_stream_enqueue(s2);
  void *e1 = record(b, s1), *e2 = record(b, s2);
  gpupool_host_stream_complete(s1);
  cr_assert_eq(query(b, e1), 1);
  cr_assert_eq(query(b, e2), 0, "completing s1 leaves s2 pending");
  gpupool_host_stream_complete(s2);
  cr_assert_eq(query(b, e2), 1);
  b->ops->event_destroy(b, e1);
  b->ops->event_destroy(b, e2);
  gpupool_host_stream_destroy(s1);
  gpupool_host_stream_destroy(s2);
  b->ops->destroy(b);
}

Test(backend_host, destroying_a_stream_finishes_its_work) {
  backend *b = make_host(MiB, 0, 0, 0);
  gpupool_host_stream *s = gpupool_host_stream_create();
  gpupool_host_stream_enqueue(s);
  void *e = record(b, s);
  cr_assert_eq(query(b, e), 0);
  gpupool_host_stream_destroy(s);
  cr_assert_eq(query(b, e), 1, "the event outlives its stream and completes");
  b->ops->event_destroy(b, e);

  void *late = record(b, s); /* a destroyed stream is an unknown pointer now */
  cr_assert_eq(query(b, late), 1);
  b->ops->event_destroy(b, late);
  b->ops->destroy(b);
}

Test(backend_host, synchronize_completes_every_stream) {
  backend *b = make_host(MiB, 0, 0, 0);
  gpupool_host_stream *s1 = gpupool_host_stream_create();
  gpupool_host_stream *s2 = gpupool_host_stream_create();
  gpupool_host_stream_enqueue(s1);
  gpupool_host_stream_enqueue(s2);
  gpupool_host_stream_enqueue(s2);
  void *e1 = record(b, s1), *e2 = record(b, s2);
  cr_assert_eq(query(b, e1) + query(b, e2), 0);
  cr_assert_eq(b->ops->synchronize(b), GPUPOOL_OK);
  cr_assert_eq(query(b, e1), 1);
  cr_assert_eq(query(b, e2), 1);
  b->ops->event_destroy(b, e1);
  b->ops->event_destroy(b, e2);
  gpupool_host_stream_destroy(s1);
  gpupool_host_stream_destroy(s2);
  b->ops->destroy(b);
}

Test(backend_host, cuda_backends_unsupported_without_a_device) {
  if (backend_cuda_device_count() > 0)
    cr_skip("a CUDA device is visible; covered by tests/gpu");
  backend *b = (backend *)0x1;
  cr_assert_eq(backend_cuda_create(0, &b), GPUPOOL_ERR_UNSUPPORTED);
  cr_assert_eq(backend_cuda_async_create(0, &b), GPUPOOL_ERR_UNSUPPORTED);
  cr_assert_neq(gpupool_last_error()[0], '\0', "a reason is given");
  cr_assert_eq(b, (backend *)0x1);
}
