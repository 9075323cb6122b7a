#include "trace_counters.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "pool/event_ring.h"
#include "pool/pool_view.h"
#include "pool/registry.h"

/* The samples live in an event_ring of their own (pool/event_ring.h: one
 * writer at a time, lock-free readers): a counter sample fits in one 64-byte
 * event slot. Created at the first sample, never freed; it keeps
 * TRACE_COUNTERS_CAPACITY samples (one fewer than its slots). */
_Static_assert(sizeof(counter_sample) <= sizeof(pool_event), "a sample fits in one event slot");
static event_ring *_Atomic ring;
static _Atomic uint64_t start; /* head at the last reset: older samples are gone */

/* writer_lock serialises writers (sample, reset); table_lock guards the pool
 * table and is taken last (inside the registry's lock while sampling). */
static pthread_mutex_t writer_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct table_entry {
  trace_pool_info info;
  char label[POOL_LABEL_MAX];       /* the pool's label at its last sample */
  uint64_t last_seen;               /* sampling round, for eviction */
  uint64_t from_cache, from_device; /* its cumulative counts at its last sample */
  int used;
  int ended; /* gone: its closing sample (nothing allocated or reserved) is written */
} table_entry;
static table_entry table[TRACE_POOL_TABLE_SIZE];
static uint64_t round_no;

static void push(const counter_sample *cs) {
  pool_event ev = {0};
  memcpy(&ev, cs, sizeof *cs);
  event_ring_push(atomic_load_explicit(&ring, memory_order_relaxed), &ev);
}

static void copy_str(char *dst, size_t size, const char *src) {
  snprintf(dst, size, "%s", src ? src : "");
}

/* Remembers (or refreshes) pool p and its label; when the table is full,
 * the pool seen least recently is forgotten. */
static void remember(gpupool *p, uint32_t id, const char *label, const counter_sample *cs) {
  pthread_mutex_lock(&table_lock);
  table_entry *slot_for = NULL, *oldest = NULL;
  for (size_t i = 0; i < TRACE_POOL_TABLE_SIZE; i++) {
    table_entry *e = &table[i];
    if (e->used && e->info.id == id) {
      slot_for = e;
      break;
    }
    if (!oldest || !e->used || (oldest->used && e->last_seen < oldest->last_seen))
      oldest = e;
  }
  if (!slot_for) {
    slot_for = oldest;
    memset(slot_for, 0, sizeof *slot_for);
    slot_for->used = 1;
    slot_for->info.id = id;
    slot_for->info.device = gpupool_device(p);
    copy_str(slot_for->info.name, sizeof slot_for->info.name, gpupool_name(p));
    copy_str(slot_for->info.backend, sizeof slot_for->info.backend, gpupool_backend_name(p));
    copy_str(slot_for->info.strategy, sizeof slot_for->info.strategy, gpupool_strategy_name(p));
  }
  if (label) /* labels change as pools of the name come and go */
    memcpy(slot_for->label, label, sizeof slot_for->label);
  slot_for->last_seen = round_no;
  slot_for->from_cache = cs->from_cache;
  slot_for->from_device = cs->from_device;
  pthread_mutex_unlock(&table_lock);
}

typedef struct sample_ctx {
  uint64_t now;
  pool_labeler labeler;
} sample_ctx;

static void sample_pool(gpupool *p, void *arg) {
  sample_ctx *c = arg;
  char label[POOL_LABEL_MAX];
  int labelled = pool_labeler_next(&c->labeler, p, label) == 0;
  gpupool_stats st;
  if (gpupool_get_stats(p, &st) != GPUPOOL_OK)
    return;
  uint32_t id = pool_id(p);
  counter_sample cs = {
      .ts_ns = c->now,
      .pool_id = id,
      .device = gpupool_device(p),
      .allocated = (uint64_t)st.allocated_bytes[GPUPOOL_STAT_ALL].current,
      .reserved = (uint64_t)st.reserved_bytes[GPUPOOL_STAT_ALL].current,
      .requested = (uint64_t)st.requested_bytes[GPUPOOL_STAT_ALL].current,
      .from_cache = st.num_cache_hits,
      .from_device = st.num_device_sourced,
  };
  remember(p, id, labelled ? label : NULL, &cs);
  push(&cs);
}

void trace_counters_sample(void) {
  pthread_mutex_lock(&writer_lock);
  if (!atomic_load_explicit(&ring, memory_order_relaxed)) {
    event_ring *r = event_ring_create(TRACE_COUNTERS_CAPACITY);
    if (!r) { /* out of host memory: no samples this round */
      pthread_mutex_unlock(&writer_lock);
      return;
    }
    atomic_store_explicit(&ring, r, memory_order_release);
  }
  pthread_mutex_lock(&table_lock);
  round_no++;
  pthread_mutex_unlock(&table_lock);
  /* One timestamp per round: the samples of all pools line up in the trace,
   * and the ring stays ordered by time. */
  sample_ctx c = {.now = clock_realtime_ns()};
  registry_foreach(sample_pool, &c);
  /* A pool remembered but not in the registry any more was destroyed since
   * the last round: one closing sample at zero, so that its counter tracks do
   * not show its last bytes to the end of every later trace. */
  pthread_mutex_lock(&table_lock);
  for (size_t i = 0; i < TRACE_POOL_TABLE_SIZE; i++) {
    table_entry *e = &table[i];
    if (!e->used || e->ended || pool_labeler_saw(&c.labeler, e->info.id))
      continue;
    counter_sample cs = {.ts_ns = c.now,
                         .pool_id = e->info.id,
                         .device = e->info.device,
                         .from_cache = e->from_cache,
                         .from_device = e->from_device};
    push(&cs);
    e->ended = 1;
  }
  pthread_mutex_unlock(&table_lock);
  pool_labeler_free(&c.labeler);
  pthread_mutex_unlock(&writer_lock);
}

void trace_counters_reset(void) {
  pthread_mutex_lock(&writer_lock);
  atomic_store_explicit(&start, trace_counters_head(), memory_order_release);
  pthread_mutex_lock(&table_lock);
  memset(table, 0, sizeof table);
  round_no = 0;
  pthread_mutex_unlock(&table_lock);
  pthread_mutex_unlock(&writer_lock);
}

size_t trace_counters_read(uint64_t *cursor, counter_sample *out, size_t max, uint64_t *skipped) {
  event_ring *r = atomic_load_explicit(&ring, memory_order_acquire);
  if (!r)
    return 0;
  uint64_t first = atomic_load_explicit(&start, memory_order_acquire);
  if (*cursor < first)
    *cursor = first; /* before a reset: not lost, forgotten on purpose */
  size_t got = 0;
  pool_event buf[64];
  while (got < max) {
    size_t want = max - got < 64 ? max - got : 64;
    size_t n = event_ring_read(r, cursor, buf, want, skipped);
    if (!n)
      break;
    for (size_t i = 0; i < n; i++)
      memcpy(&out[got++], &buf[i], sizeof *out);
  }
  return got;
}

uint64_t trace_counters_head(void) {
  event_ring *r = atomic_load_explicit(&ring, memory_order_acquire);
  return r ? event_ring_head(r) : 0;
}

uint64_t trace_counters_dropped(void) {
  uint64_t kept = trace_counters_head() - atomic_load_explicit(&start, memory_order_acquire);
  return kept > TRACE_COUNTERS_CAPACITY ? kept - TRACE_COUNTERS_CAPACITY : 0;
}

size_t trace_counters_capacity(void) {
  return TRACE_COUNTERS_CAPACITY;
}

size_t trace_counters_pools(trace_known_pool *out, size_t max) {
  size_t n = 0;
  pthread_mutex_lock(&table_lock);
  for (size_t i = 0; i < TRACE_POOL_TABLE_SIZE && n < max; i++)
    if (table[i].used) {
      out[n].info = table[i].info;
      memcpy(out[n++].label, table[i].label, sizeof out->label);
    }
  pthread_mutex_unlock(&table_lock);
  return n;
}

int trace_counters_knows_label(const char *label, const pool_labeler *live) {
  int found = 0;
  pthread_mutex_lock(&table_lock);
  for (size_t i = 0; i < TRACE_POOL_TABLE_SIZE && !found; i++)
    found = table[i].used && strcmp(table[i].label, label) == 0 &&
            !pool_labeler_saw(live, table[i].info.id);
  pthread_mutex_unlock(&table_lock);
  return found;
}

const counter_ring_ops trace_counters_ring = {
    .read = trace_counters_read,
    .head = trace_counters_head,
    .dropped = trace_counters_dropped,
    .capacity = trace_counters_capacity,
};
