/* CUPTI record decoder: see cupti_decode.h. */
#include "cupti_decode.h"

#ifdef GPUPOOL_HAVE_CUDA
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_live.h"

enum { OWNER_POOL = 0, OWNER_OTHER = 1 };

/* Device ordinals 0..NO_DEVICE_SLOT-1 get a slot each; records without a
 * valid device (or beyond) share the slot of device -1. */
#define DEVICE_IDS (CUPTI_MAX_DEVICES - 1)

/* cudaMallocAsync pools tracked for their size and utilized size. */
#define MEMPOOLS_MAX 64
typedef struct mempool_entry {
  uint64_t address; /* 0: free slot */
  int device;
  uint64_t size, utilized;
} mempool_entry;

struct cupti_decoder {
  pthread_mutex_t lock;
  cupti_pool_owns_fn pool_owns;
  cupti_live *live;
  event_ring *ring;
  uint64_t records_total, unknown_releases, live_overflow;
  int slot_of_id[DEVICE_IDS]; /* -1: no slot yet */
  int slot_of_none;
  size_t ndevices;
  cupti_device_metrics dev[CUPTI_MAX_DEVICES];
  mempool_entry mempools[MEMPOOLS_MAX];
};

cupti_decoder *cupti_decoder_create(size_t live_entries, size_t ring_events,
                                    cupti_pool_owns_fn pool_owns) {
  cupti_decoder *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  d->live = cupti_live_create(live_entries);
  d->ring = event_ring_create(ring_events);
  if (!d->live || !d->ring) {
    cupti_live_destroy(d->live);
    if (d->ring)
      event_ring_unref(d->ring);
    free(d);
    return NULL;
  }
  pthread_mutex_init(&d->lock, NULL);
  d->pool_owns = pool_owns;
  for (int i = 0; i < DEVICE_IDS; i++)
    d->slot_of_id[i] = -1;
  d->slot_of_none = -1;
  return d;
}

void cupti_decoder_destroy(cupti_decoder *d) {
  if (!d)
    return;
  cupti_live_destroy(d->live);
  event_ring_unref(d->ring);
  pthread_mutex_destroy(&d->lock);
  free(d);
}

static int device_of(uint32_t device_id) {
  return device_id < DEVICE_IDS ? (int)device_id : -1;
}

static cupti_device_metrics *slot_for(cupti_decoder *d, int device) {
  int *slot = device < 0 ? &d->slot_of_none : &d->slot_of_id[device];
  if (*slot < 0) {
    *slot = (int)d->ndevices++; /* at most DEVICE_IDS + 1 == CUPTI_MAX_DEVICES */
    d->dev[*slot].device = device;
  }
  return &d->dev[*slot];
}

static int kind_of(uint32_t memory_kind) {
  return memory_kind < CUPTI_MEMORY_KINDS ? (int)memory_kind : 0;
}

static void mempool_update(cupti_decoder *d, uint64_t address, int device, uint64_t size,
                           uint64_t utilized) {
  mempool_entry *free_slot = NULL;
  for (size_t i = 0; i < MEMPOOLS_MAX; i++) {
    mempool_entry *m = &d->mempools[i];
    if (m->address == address) {
      m->size = size;
      m->utilized = utilized;
      return;
    }
    if (!m->address && !free_slot)
      free_slot = m;
  }
  if (free_slot)
    *free_slot = (mempool_entry){address, device, size, utilized};
}

static void mempool_remove(cupti_decoder *d, uint64_t address) {
  for (size_t i = 0; i < MEMPOOLS_MAX; i++)
    if (d->mempools[i].address == address)
      d->mempools[i] = (mempool_entry){0};
}

static void push_event(cupti_decoder *d, uint8_t type, uint8_t flags, uint64_t ts, uint64_t addr,
                       uint64_t bytes, uint32_t stream_id, int kind, int device) {
  pool_event ev = {0};
  ev.ts_ns = ts;
  ev.type = type;
  ev.flags = flags;
  ev.addr = addr;
  ev.size = bytes;
  ev.requested = bytes;
  ev.stream = stream_id == CUPTI_INVALID_STREAM_ID ? 0 : stream_id;
  ev.a = (uint64_t)kind;
  ev.b = (uint64_t)(int64_t)device;
  event_ring_push(d->ring, &ev);
}

static void on_allocation(cupti_decoder *d, const CUpti_ActivityMemory4 *m, int kind, int device,
                          uint8_t flags) {
  int owner = d->pool_owns && d->pool_owns(m->address, m->timestamp) ? OWNER_POOL : OWNER_OTHER;
  cupti_device_metrics *dm = slot_for(d, device);
  dm->allocations[kind][owner]++;
  cupti_live_entry e = {.addr = m->address,
                        .bytes = m->bytes,
                        .device = device,
                        .kind = (uint8_t)kind,
                        .owner = (uint8_t)owner};
  cupti_live_entry old;
  switch (cupti_live_insert(d->live, &e, &old)) {
  case CUPTI_LIVE_REPLACED: /* its release was missed (dropped records) */
    slot_for(d, old.device)->live_bytes[old.kind][old.owner] -= old.bytes;
    dm->live_bytes[kind][owner] += m->bytes;
    break;
  case CUPTI_LIVE_INSERTED:
    dm->live_bytes[kind][owner] += m->bytes;
    break;
  case CUPTI_LIVE_FULL:
    d->live_overflow++;
    break;
  case CUPTI_LIVE_BAD_ADDR:
    break;
  }
  if (owner == OWNER_POOL)
    flags |= CUPTI_EVF_POOL;
  push_event(d, EV_ALLOC, flags, m->timestamp, m->address, m->bytes, m->streamId, kind, device);
}

static void on_release(cupti_decoder *d, const CUpti_ActivityMemory4 *m, int kind, int device,
                       uint8_t flags) {
  cupti_live_entry e;
  if (!cupti_live_remove(d->live, m->address, &e)) {
    d->unknown_releases++;
    push_event(d, EV_FREE, flags | CUPTI_EVF_UNKNOWN, m->timestamp, m->address, m->bytes,
               m->streamId, kind, device);
    return;
  }
  cupti_device_metrics *dm = slot_for(d, e.device);
  dm->releases[e.kind][e.owner]++;
  dm->live_bytes[e.kind][e.owner] -= e.bytes;
  if (e.owner == OWNER_POOL)
    flags |= CUPTI_EVF_POOL;
  push_event(d, EV_FREE, flags, m->timestamp, m->address, e.bytes, m->streamId, e.kind, e.device);
}

static void on_memory(cupti_decoder *d, const CUpti_ActivityMemory4 *m) {
  int kind = kind_of(m->memoryKind);
  int device = device_of(m->deviceId);
  uint8_t flags = m->isAsync ? CUPTI_EVF_ASYNC : 0;
  /* Stream-ordered calls carry their pool's latest numbers. */
  if (m->memoryPoolConfig.memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL &&
      m->memoryPoolConfig.address)
    mempool_update(d, m->memoryPoolConfig.address, device, m->memoryPoolConfig.pool.size,
                   m->memoryPoolConfig.utilizedSize);
  if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION)
    on_allocation(d, m, kind, device, flags);
  else if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE)
    on_release(d, m, kind, device, flags);
}

static void on_mempool(cupti_decoder *d, const CUpti_ActivityMemoryPool3 *p) {
  int device = device_of(p->deviceId);
  cupti_device_metrics *dm = slot_for(d, device);
  int local = p->memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  switch (p->memoryPoolOperationType) {
  case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED:
    dm->mempools_created++;
    if (local)
      mempool_update(d, p->address, device, p->size, p->utilizedSize);
    break;
  case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED:
    dm->mempools_destroyed++;
    mempool_remove(d, p->address);
    break;
  case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED:
    dm->mempools_trimmed++;
    if (local)
      mempool_update(d, p->address, device, p->size, p->utilizedSize);
    break;
  default:
    break;
  }
}

void cupti_decoder_records(cupti_decoder *d, const CUpti_Activity *const *records, size_t n) {
  pthread_mutex_lock(&d->lock);
  for (size_t i = 0; i < n; i++) {
    const CUpti_Activity *r = records[i];
    d->records_total++;
    if (r->kind == CUPTI_ACTIVITY_KIND_MEMORY2)
      on_memory(d, (const CUpti_ActivityMemory4 *)r);
    else if (r->kind == CUPTI_ACTIVITY_KIND_MEMORY_POOL)
      on_mempool(d, (const CUpti_ActivityMemoryPool3 *)r);
  }
  pthread_mutex_unlock(&d->lock);
}

void cupti_decoder_claim(cupti_decoder *d, uint64_t addr) {
  pthread_mutex_lock(&d->lock);
  cupti_live_entry *e = cupti_live_find(d->live, addr);
  if (e && e->owner == OWNER_OTHER) {
    cupti_device_metrics *dm = slot_for(d, e->device);
    dm->live_bytes[e->kind][OWNER_OTHER] -= e->bytes;
    dm->live_bytes[e->kind][OWNER_POOL] += e->bytes;
    e->owner = OWNER_POOL;
  }
  pthread_mutex_unlock(&d->lock);
}

void cupti_decoder_clear_live(cupti_decoder *d) {
  pthread_mutex_lock(&d->lock);
  cupti_live_clear(d->live);
  memset(d->mempools, 0, sizeof d->mempools);
  for (size_t i = 0; i < d->ndevices; i++)
    memset(d->dev[i].live_bytes, 0, sizeof d->dev[i].live_bytes);
  pthread_mutex_unlock(&d->lock);
}

void cupti_decoder_read(cupti_decoder *d, cupti_metrics *out) {
  pthread_mutex_lock(&d->lock);
  out->records_total = d->records_total;
  out->unknown_releases_total = d->unknown_releases;
  out->live_map_overflow_total = d->live_overflow;
  out->ndevices = d->ndevices;
  memcpy(out->devices, d->dev, d->ndevices * sizeof d->dev[0]);
  for (size_t i = 0; i < d->ndevices; i++) {
    cupti_device_metrics *dm = &out->devices[i];
    dm->mempool_size_bytes = dm->mempool_utilized_bytes = 0;
    for (size_t j = 0; j < MEMPOOLS_MAX; j++)
      if (d->mempools[j].address && d->mempools[j].device == dm->device) {
        dm->mempool_size_bytes += d->mempools[j].size;
        dm->mempool_utilized_bytes += d->mempools[j].utilized;
      }
  }
  pthread_mutex_unlock(&d->lock);
  /* Insertion sort by device: at most CUPTI_MAX_DEVICES entries. */
  for (size_t i = 1; i < out->ndevices; i++) {
    cupti_device_metrics tmp = out->devices[i];
    size_t j = i;
    for (; j > 0 && out->devices[j - 1].device > tmp.device; j--)
      out->devices[j] = out->devices[j - 1];
    out->devices[j] = tmp;
  }
}

size_t cupti_decoder_live_count(cupti_decoder *d) {
  pthread_mutex_lock(&d->lock);
  size_t n = cupti_live_count(d->live);
  pthread_mutex_unlock(&d->lock);
  return n;
}

event_ring *cupti_decoder_ring(cupti_decoder *d) {
  event_ring_ref(d->ring);
  return d->ring;
}

void cupti_decoder_lock(cupti_decoder *d) {
  pthread_mutex_lock(&d->lock);
}

void cupti_decoder_unlock(cupti_decoder *d) {
  pthread_mutex_unlock(&d->lock);
}

void cupti_decoder_reinit_lock(cupti_decoder *d) {
  pthread_mutex_init(&d->lock, NULL);
}
#endif
