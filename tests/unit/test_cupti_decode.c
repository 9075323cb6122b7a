/* The CUPTI record decoder and owner attribution, on records built by hand
 * (no GPU, no CUPTI library needed: only the toolkit headers). */
#include <criterion/criterion.h>

#ifdef GPUPOOL_HAVE_CUDA
#include <string.h>

#include "agent/cupti.h"
#include "agent/cupti_decode.h"
#include "agent/segment_index.h"

/* Addresses in [POOL_LO, POOL_HI) belong to a gpupool segment in these tests. */
#define POOL_LO 0x7f0000000000ull
#define POOL_HI 0x7f0010000000ull

static int fake_pool_owns(uint64_t addr, uint64_t ts_ns) {
  (void)ts_ns;
  return addr >= POOL_LO && addr < POOL_HI;
}

static CUpti_ActivityMemory4 mem_record(int op, int kind, uint64_t addr, uint64_t bytes,
                                        uint32_t device) {
  CUpti_ActivityMemory4 m;
  memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = op;
  m.memoryKind = kind;
  m.address = addr;
  m.bytes = bytes;
  m.timestamp = 1000;
  m.deviceId = device;
  m.contextId = 1;
  m.streamId = CUPTI_INVALID_STREAM_ID;
  return m;
}

static void feed(cupti_decoder *d, const void *record) {
  const CUpti_Activity *r = record;
  cupti_decoder_records(d, &r, 1);
}

static void alloc(cupti_decoder *d, int kind, uint64_t addr, uint64_t bytes, uint32_t device) {
  CUpti_ActivityMemory4 m =
      mem_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, kind, addr, bytes, device);
  feed(d, &m);
}

static void release(cupti_decoder *d, int kind, uint64_t addr, uint64_t bytes, uint32_t device) {
  CUpti_ActivityMemory4 m =
      mem_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, kind, addr, bytes, device);
  feed(d, &m);
}

static cupti_metrics *read_metrics(cupti_decoder *d) {
  static cupti_metrics m;
  memset(&m, 0, sizeof m);
  cupti_decoder_read(d, &m);
  return &m;
}

/* The metrics of device dev (NULL when it has no slot). */
static const cupti_device_metrics *dev_of(const cupti_metrics *m, int dev) {
  for (size_t i = 0; i < m->ndevices; i++)
    if (m->devices[i].device == dev)
      return &m->devices[i];
  return NULL;
}

enum { POOL = 0, OTHER = 1 };

Test(cupti_decode, each_memory_kind_alloc_and_release) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  cr_assert_not_null(d);
  for (int kind = 1; kind < CUPTI_MEMORY_KINDS; kind++) {
    uint64_t addr = 0x100000ull * (uint64_t)kind;
    uint64_t bytes = 4096ull * (uint64_t)kind;
    alloc(d, kind, addr, bytes, 0);
    const cupti_device_metrics *dm = dev_of(read_metrics(d), 0);
    cr_assert_not_null(dm);
    cr_assert_eq(dm->live_bytes[kind][OTHER], bytes, "kind %d", kind);
    cr_assert_eq(dm->allocations[kind][OTHER], 1, "kind %d", kind);
    cr_assert_eq(dm->live_bytes[kind][POOL], 0);
  }
  cr_assert_eq(cupti_decoder_live_count(d), 7);
  for (int kind = 1; kind < CUPTI_MEMORY_KINDS; kind++)
    release(d, kind, 0x100000ull * (uint64_t)kind, 0, 0);
  cupti_metrics *m = read_metrics(d);
  const cupti_device_metrics *dm = dev_of(m, 0);
  for (int kind = 1; kind < CUPTI_MEMORY_KINDS; kind++) {
    cr_assert_eq(dm->live_bytes[kind][OTHER], 0, "kind %d", kind);
    cr_assert_eq(dm->releases[kind][OTHER], 1, "kind %d", kind);
  }
  cr_assert_eq(m->records_total, 14);
  cr_assert_eq(m->unknown_releases_total, 0);
  cr_assert_eq(cupti_decoder_live_count(d), 0);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, release_takes_size_and_kind_from_the_allocation) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0xA000, 1 << 20, 1);
  /* A release record with another size and kind still removes what was live. */
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN, 0xA000, 7, 1);
  const cupti_device_metrics *dm = dev_of(read_metrics(d), 1);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 0);
  cr_assert_eq(dm->releases[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 1);
  cr_assert_eq(dm->releases[CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN][OTHER], 0);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, unknown_release_is_counted_not_an_error) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0xB000, 512, 0);
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0xC000, 512, 0);
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0xB000, 512, 0);
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0xB000, 512, 0); /* twice */
  cupti_metrics *m = read_metrics(d);
  cr_assert_eq(m->unknown_releases_total, 2);
  const cupti_device_metrics *dm = dev_of(m, 0);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 0);
  cr_assert_eq(dm->releases[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 1);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, live_map_overflow_is_counted) {
  cupti_decoder *d = cupti_decoder_create(4, 64, fake_pool_owns);
  for (uint64_t i = 1; i <= 5; i++)
    alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, i << 20, 100, 0);
  cupti_metrics *m = read_metrics(d);
  cr_assert_eq(m->live_map_overflow_total, 1);
  const cupti_device_metrics *dm = dev_of(m, 0);
  cr_assert_eq(dm->allocations[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 5);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 400);
  /* The untracked one's release is unknown; a tracked release frees a slot. */
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 5ull << 20, 100, 0);
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 1ull << 20, 100, 0);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 6ull << 20, 50, 0);
  m = read_metrics(d);
  cr_assert_eq(m->unknown_releases_total, 1);
  cr_assert_eq(m->live_map_overflow_total, 1);
  cr_assert_eq(dev_of(m, 0)->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 350);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, allocation_at_a_live_address_replaces_it) {
  cupti_decoder *d = cupti_decoder_create(8, 64, fake_pool_owns);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0xD000, 1000, 0);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 0xD000, 30, 0); /* its release was dropped */
  const cupti_device_metrics *dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 0);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_PINNED][OTHER], 30);
  cr_assert_eq(cupti_decoder_live_count(d), 1);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, pool_owned_versus_other) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, POOL_LO, 2 << 20, 0);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, POOL_LO + (4 << 20), 20 << 20, 0);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, POOL_HI, 1 << 20, 0);
  const cupti_device_metrics *dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][POOL], 22 << 20);
  cr_assert_eq(dm->allocations[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][POOL], 2);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 1 << 20);
  /* The release keeps the owner decided at allocation. */
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, POOL_LO, 0, 0);
  dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->releases[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][POOL], 1);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][POOL], 20 << 20);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, attribution_through_the_segment_index) {
  cupti_decoder *d = cupti_decoder_create(64, 64, segment_index_contains);
  cupti_note_segment(0x200000000ull, 2 << 20, 0, 1);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x200000000ull, 2 << 20, 0);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x200200000ull, 2 << 20, 0); /* just past it */
  const cupti_device_metrics *dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][POOL], 2 << 20);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 2 << 20);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, claim_moves_live_bytes_to_the_pool) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  /* Decoded before the pool noted its segment: counted as other... */
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0xE00000, 2 << 20, 0);
  cupti_decoder_claim(d, 0xE00000); /* ...until the note arrives */
  cupti_decoder_claim(d, 0xF00000); /* nothing there: no effect */
  const cupti_device_metrics *dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][POOL], 2 << 20);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 0);
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0xE00000, 0, 0);
  dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][POOL], 0);
  cr_assert_eq(dm->releases[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][POOL], 1);
  cupti_decoder_destroy(d);
}

static CUpti_ActivityMemoryPool3 pool_record(int op, uint64_t addr, uint64_t size,
                                             uint64_t utilized, uint32_t device) {
  CUpti_ActivityMemoryPool3 p;
  memset(&p, 0, sizeof p);
  p.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
  p.memoryPoolOperationType = op;
  p.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  p.address = addr;
  p.size = size;
  p.utilizedSize = utilized;
  p.deviceId = device;
  return p;
}

Test(cupti_decode, mempool_created_destroyed_trimmed) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  CUpti_ActivityMemoryPool3 a =
      pool_record(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED, 0x1000, 32 << 20, 0, 0);
  CUpti_ActivityMemoryPool3 b =
      pool_record(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED, 0x2000, 64 << 20, 8 << 20, 0);
  feed(d, &a);
  feed(d, &b);
  const cupti_device_metrics *dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->mempools_created, 2);
  cr_assert_eq(dm->mempool_size_bytes, 96 << 20, "sum over the device's pools");
  cr_assert_eq(dm->mempool_utilized_bytes, 8 << 20);

  CUpti_ActivityMemoryPool3 t =
      pool_record(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED, 0x2000, 16 << 20, 8 << 20, 0);
  feed(d, &t);
  dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->mempools_trimmed, 1);
  cr_assert_eq(dm->mempool_size_bytes, 48 << 20);

  /* A stream-ordered allocation carries its pool's latest numbers. */
  CUpti_ActivityMemory4 m = mem_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
                                       CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x3000, 4096, 0);
  m.isAsync = 1;
  m.memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  m.memoryPoolConfig.address = 0x1000;
  m.memoryPoolConfig.pool.size = 34 << 20;
  m.memoryPoolConfig.utilizedSize = 4096;
  feed(d, &m);
  dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->mempool_size_bytes, 50 << 20);
  cr_assert_eq(dm->mempool_utilized_bytes, (8 << 20) + 4096);

  CUpti_ActivityMemoryPool3 x =
      pool_record(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED, 0x2000, 0, 0, 0);
  feed(d, &x);
  dm = dev_of(read_metrics(d), 0);
  cr_assert_eq(dm->mempools_destroyed, 1);
  cr_assert_eq(dm->mempool_size_bytes, 34 << 20);
  cr_assert_eq(dm->mempool_utilized_bytes, 4096);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, devices_are_sorted_and_invalid_ids_share_slot_minus_one) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x10000, 1, 3);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 0x20000, 2, 0xFFFFFFFFu);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x30000, 4, 1);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 0x40000, 8, 1000);
  cupti_metrics *m = read_metrics(d);
  cr_assert_eq(m->ndevices, 3);
  cr_assert_eq(m->devices[0].device, -1);
  cr_assert_eq(m->devices[1].device, 1);
  cr_assert_eq(m->devices[2].device, 3);
  cr_assert_eq(m->devices[0].live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_PINNED][OTHER], 10);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, other_record_kinds_are_counted_and_skipped) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  CUpti_ActivityMemory4 m = mem_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
                                       CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x5000, 64, 0);
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY; /* never enabled; must not be read as memory */
  feed(d, &m);
  cupti_metrics *m2 = read_metrics(d);
  cr_assert_eq(m2->records_total, 1);
  cr_assert_eq(m2->ndevices, 0);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, events_reach_the_ring) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  CUpti_ActivityMemory4 m = mem_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
                                       CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, POOL_LO, 2 << 20, 2);
  m.isAsync = 1;
  m.streamId = 7;
  m.timestamp = 123456789;
  feed(d, &m);
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, POOL_LO, 0, 2);
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, 0x9000, 77, 0xFFFFFFFFu);
  event_ring *r = cupti_decoder_ring(d);
  pool_event ev[4];
  uint64_t cursor = 0, skipped = 0;
  cr_assert_eq(event_ring_read(r, &cursor, ev, 4, &skipped), 3);
  cr_assert_eq(ev[0].type, EV_ALLOC);
  cr_assert_eq(ev[0].ts_ns, 123456789);
  cr_assert_eq(ev[0].addr, POOL_LO);
  cr_assert_eq(ev[0].size, 2 << 20);
  cr_assert_eq(ev[0].stream, 7);
  cr_assert_eq(ev[0].flags, CUPTI_EVF_POOL | CUPTI_EVF_ASYNC);
  cr_assert_eq(ev[0].a, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  cr_assert_eq(ev[0].b, 2);
  cr_assert_eq(ev[1].type, EV_FREE);
  cr_assert_eq(ev[1].size, 2 << 20, "size from the allocation");
  cr_assert_eq(ev[1].stream, 0, "synchronous: no stream");
  cr_assert_eq(ev[1].flags, CUPTI_EVF_POOL);
  cr_assert_eq(ev[2].flags, CUPTI_EVF_UNKNOWN);
  cr_assert_eq((int64_t)ev[2].b, -1);
  event_ring_unref(r);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, clear_live_keeps_counters) {
  cupti_decoder *d = cupti_decoder_create(64, 64, fake_pool_owns);
  alloc(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x6000, 64, 0);
  CUpti_ActivityMemoryPool3 a =
      pool_record(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED, 0x1000, 32 << 20, 0, 0);
  feed(d, &a);
  cupti_decoder_clear_live(d);
  cupti_metrics *m = read_metrics(d);
  const cupti_device_metrics *dm = dev_of(m, 0);
  cr_assert_eq(dm->live_bytes[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 0);
  cr_assert_eq(dm->allocations[CUPTI_ACTIVITY_MEMORY_KIND_DEVICE][OTHER], 1);
  cr_assert_eq(dm->mempool_size_bytes, 0);
  cr_assert_eq(dm->mempools_created, 1);
  cr_assert_eq(cupti_decoder_live_count(d), 0);
  /* The release of something allocated before the clear is now unknown. */
  release(d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x6000, 64, 0);
  cr_assert_eq(read_metrics(d)->unknown_releases_total, 1);
  cupti_decoder_destroy(d);
}

Test(cupti_decode, memory_kind_names) {
  cr_assert_str_eq(cupti_memory_kind_name(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE), "device");
  cr_assert_str_eq(cupti_memory_kind_name(CUPTI_ACTIVITY_MEMORY_KIND_PINNED), "pinned");
  cr_assert_str_eq(cupti_memory_kind_name(CUPTI_ACTIVITY_MEMORY_KIND_MANAGED), "managed");
  cr_assert_str_eq(cupti_memory_kind_name(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC),
                   "device_static");
  cr_assert_str_eq(cupti_memory_kind_name(99), "unknown");
  cr_assert_str_eq(cupti_memory_kind_name(-1), "unknown");
}

#else
Test(cupti_decode, needs_cuda_headers) {
  cr_skip("built without CUDA: the CUPTI decoder is not compiled");
}
#endif
