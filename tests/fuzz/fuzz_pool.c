/* libFuzzer target: the pool's public API as a program. The first byte
 * chooses the pool (strategy, expandable segments, roundup divisions, a
 * garbage-collection threshold, device faults) and whether allocation events
 * are recorded; every further 4 bytes are one operation on a 64 MiB
 * host-backend device with two host streams: malloc (sizes from 1 B to 16
 * MiB, on either stream or the default one), free, record_stream, stream
 * work enqueued and completed, empty_cache, a double free, an interior or a
 * foreign pointer (each must be GPUPOOL_ERR_INVALID), a look at the
 * statistics, and with events: events off and on, a new tick of the event
 * clock or exact stamps, and a look at the events. The oracle, independent
 * of the pool: live blocks never overlap, each keeps the byte pattern
 * written into it until its free, the statistics agree with what the
 * program holds (allocation count, requested bytes, allocated <= reserved),
 * and each stream's ring gives exactly the allocations and frees the
 * program made on it while events were on, in order (a free in its
 * allocation's tick has no record of its own: pool/event_ring.h). At the
 * end everything is freed, the streams complete and empty_cache gives every
 * byte back. */
#include <gpupool/gpupool.h>
#include <gpupool/host.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "pool/event_clock.h"
#include "pool/event_ring.h"
#include "pool/pool_view.h"

#define MAX_LIVE 64
#define MAX_LOG  1024 /* block events a stream can log: 4 bytes an operation, 1024 at most */
#define RING_CAP 4096 /* records a stream's ring keeps: none is overwritten */
#define MiB      ((size_t)1 << 20)

typedef struct live {
  unsigned char *ptr;
  size_t size;
  unsigned char fill;
} live;

/* A block event the program made while events were on: EV_ALLOC, EV_FREE. */
typedef struct logged {
  uint8_t type;
  uintptr_t addr;
} logged;

typedef struct prog {
  gpupool *pool;
  gpupool_host_stream *streams[2];
  live lv[MAX_LIVE];
  unsigned lv_stream[MAX_LIVE]; /* the stream (0: default, 1, 2) each live block came from */
  size_t nlive;
  int events;    /* this program records events */
  int recording; /* events are on now */
  logged log[3][MAX_LOG];
  size_t nlog[3];
  unsigned char mallocs; /* allocations so far: each block's pattern starts apart */
  void *freed[8];        /* pointers freed and not handed out again */
} prog;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_pool: " __VA_ARGS__);                                                  \
      fprintf(stderr, " (%s)\n", gpupool_last_error());                                            \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static int overlaps(const prog *g, const unsigned char *p, size_t size) {
  for (size_t i = 0; i < g->nlive; i++)
    if (p < g->lv[i].ptr + g->lv[i].size && g->lv[i].ptr < p + size)
      return 1;
  return 0;
}

/* The bytes of a block that carry its pattern: its first and last 256, and
 * one in every 64 KiB between (touching every page of a 16 MiB block, a
 * fresh mapping in each run, would set the run time). */
static int patterned(size_t i, size_t size) {
  return i < 256 || size - i <= 256 || i % 65536 == 0;
}

/* The patterned byte after byte i of a block of size bytes. */
static size_t next_patterned(size_t i, size_t size) {
  if (patterned(++i, size))
    return i;
  size_t page = (i + 65535) & ~(size_t)65535, tail = size - 256;
  return page < tail ? page : tail;
}

static void write_pattern(const live *l) {
  for (size_t i = 0; i < l->size; i = next_patterned(i, l->size))
    l->ptr[i] = (unsigned char)(l->fill + i);
}

static void check_pattern(const live *l) {
  for (size_t i = 0; i < l->size; i = next_patterned(i, l->size))
    CHECK(l->ptr[i] == (unsigned char)(l->fill + i), "block %p lost its pattern at byte %zu",
          (void *)l->ptr, i);
}

static void forget_freed(prog *g, const void *p) {
  for (size_t i = 0; i < sizeof g->freed / sizeof g->freed[0]; i++)
    if (g->freed[i] == p)
      g->freed[i] = NULL;
}

static void *stream_of(prog *g, unsigned k) {
  return k % 3 == 0 ? NULL : g->streams[k % 3 - 1];
}

static void log_event(prog *g, unsigned stream, uint8_t type, const void *addr) {
  if (!g->recording)
    return;
  CHECK(g->nlog[stream] < MAX_LOG, "the log of stream %u is full", stream);
  g->log[stream][g->nlog[stream]++] = (logged){type, (uintptr_t)addr};
}

static void op_malloc(prog *g, const uint8_t *a) {
  if (g->nlive == MAX_LIVE)
    return;
  size_t size = ((size_t)1 << (a[1] % 25)) + (size_t)a[2] * ((size_t)1 << (a[1] % 25) >> 8);
  if (size > 16 * MiB)
    size = 16 * MiB;
  void *p = NULL;
  gpupool_status st = gpupool_malloc(g->pool, &p, size, stream_of(g, a[3]));
  if (st != GPUPOOL_OK) {
    CHECK(st == GPUPOOL_ERR_OOM, "malloc(%zu): %s", size, gpupool_status_string(st));
    return;
  }
  CHECK(p && !overlaps(g, p, size), "malloc(%zu) = %p overlaps a live block", size, p);
  g->lv_stream[g->nlive] = a[3] % 3;
  log_event(g, a[3] % 3, EV_ALLOC, p);
  live *l = &g->lv[g->nlive++];
  *l = (live){p, size, (unsigned char)(g->mallocs++ * 37)};
  write_pattern(l);
  forget_freed(g, p);
}

static void op_free(prog *g, const uint8_t *a, int record) {
  if (g->nlive == 0)
    return;
  size_t i = a[1] % g->nlive;
  live l = g->lv[i];
  check_pattern(&l);
  if (record) {
    gpupool_host_stream *s = g->streams[a[2] % 2];
    gpupool_host_stream_enqueue(s);
    CHECK(gpupool_record_stream(g->pool, l.ptr, s) == GPUPOOL_OK, "record_stream(%p)",
          (void *)l.ptr);
  }
  CHECK(gpupool_free(g->pool, l.ptr) == GPUPOOL_OK, "free(%p)", (void *)l.ptr);
  log_event(g, g->lv_stream[i], EV_FREE, l.ptr);
  g->lv_stream[i] = g->lv_stream[g->nlive - 1];
  g->lv[i] = g->lv[--g->nlive];
  g->freed[a[3] % (sizeof g->freed / sizeof g->freed[0])] = l.ptr;
}

static void op_bad_free(prog *g, const uint8_t *a) {
  void *p = g->freed[a[1] % (sizeof g->freed / sizeof g->freed[0])];
  unsigned char local;
  if (a[2] & 1)
    p = &local; /* a foreign pointer: on the stack */
  if (!p)
    return;
  /* p is no live block's start (forget_freed): a double free, or a pointer
   * inside a block handed out since, which is no allocation either */
  CHECK(gpupool_free(g->pool, p) == GPUPOOL_ERR_INVALID, "a bad free of %p was accepted", p);
}

static void check_stats(prog *g) {
  gpupool_stats s;
  CHECK(gpupool_get_stats(g->pool, &s) == GPUPOOL_OK, "get_stats");
  int64_t requested = 0;
  for (size_t i = 0; i < g->nlive; i++)
    requested += (int64_t)g->lv[i].size;
  CHECK(s.allocation[GPUPOOL_STAT_ALL].current == (int64_t)g->nlive,
        "%lld allocations counted, %zu live", (long long)s.allocation[GPUPOOL_STAT_ALL].current,
        g->nlive);
  CHECK(s.requested_bytes[GPUPOOL_STAT_ALL].current == requested,
        "%lld requested bytes counted, %lld live",
        (long long)s.requested_bytes[GPUPOOL_STAT_ALL].current, (long long)requested);
  CHECK(s.allocated_bytes[GPUPOOL_STAT_ALL].current >= requested &&
            s.reserved_bytes[GPUPOOL_STAT_ALL].current >=
                s.allocated_bytes[GPUPOOL_STAT_ALL].current,
        "requested %lld, allocated %lld, reserved %lld", (long long)requested,
        (long long)s.allocated_bytes[GPUPOOL_STAT_ALL].current,
        (long long)s.reserved_bytes[GPUPOOL_STAT_ALL].current);
}

/* Each stream's ring, read to the end taken with it, against the log. */
static void check_events(prog *g) {
  event_ring *rings[4];
  event_ring_end ends[4];
  size_t nr = pool_event_rings_at(g->pool, rings, ends, 4);
  static pool_event rec[RING_CAP];
  size_t seen[3] = {0, 0, 0};
  for (size_t i = 0; i < nr; i++) {
    unsigned stream = 0;
    for (unsigned k = 1; k < 3; k++)
      if (rings[i]->stream == (uint64_t)(uintptr_t)g->streams[k - 1])
        stream = k;
    uint64_t cursor = 0, skipped = 0;
    size_t n = event_ring_read_to(rings[i], &cursor, ends[i], rec, RING_CAP, &skipped), events = 0;
    CHECK(skipped == 0 && cursor == ends[i].head, "stream %u: events lost", stream);
    for (size_t j = 0; j < n; j++) /* records with repeats stand for up to 256 events */
      events += event_count(&rec[j]);
    pool_event *ev = malloc((events ? events : 1) * sizeof *ev);
    CHECK(ev, "out of memory");
    memcpy(ev, rec, n * sizeof *ev);
    n = event_ring_expand(ev, n);
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
      if (ev[j].type != EV_ALLOC && ev[j].type != EV_FREE)
        continue;
      CHECK(k < g->nlog[stream] && ev[j].type == g->log[stream][k].type &&
                ev[j].addr == g->log[stream][k].addr,
            "stream %u: block event %zu (type %u at %#llx) is not the program's", stream, k,
            ev[j].type, (unsigned long long)ev[j].addr);
      k++;
    }
    free(ev);
    seen[stream] = k;
    event_ring_unref(rings[i]);
  }
  for (unsigned k = 0; k < 3; k++)
    CHECK(seen[k] == g->nlog[k], "stream %u: %zu block events read, %zu made", k, seen[k],
          g->nlog[k]);
}

/* Events off or on, a new tick or exact stamps, a look at the events, or
 * (a program without events) the statistics. */
static void op_events(prog *g, const uint8_t *a) {
  switch (g->events ? a[1] % 4 : 0) {
  case 0:
    check_stats(g);
    break;
  case 1:
    g->recording = !g->recording; /* as the agent stops and starts */
    if (g->recording)
      pool_events_enable(RING_CAP);
    else
      pool_events_disable();
    break;
  case 2:
    event_clock_publish(a[2] % 4 ? clock_stamp() : 0);
    break;
  default:
    check_events(g);
    break;
  }
}

static int make_pool(prog *g, uint8_t kind) {
  static const char *const tunables[] = {
      "strategy:bfc",
      "strategy:bfc,expandable_segments:True",
      "strategy:bfc,roundup_power2_divisions:4,max_split_size_mb:32",
      "strategy:bfc,expandable_segments:True,garbage_collection_threshold:0.5",
      "strategy:round",
      "strategy:naive",
      "strategy:bfc,fault_every_n:7",
      "strategy:bfc,expandable_segments:True,fault_every_n:5",
  };
  gpupool_options o = {.name = "fuzz",
                       .backend = GPUPOOL_BACKEND_HOST,
                       .tunables = tunables[kind % (sizeof tunables / sizeof tunables[0])],
                       .host_capacity = 64 * MiB,
                       .ignore_env = 1};
  return gpupool_create(&o, &g->pool) == GPUPOOL_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  static prog g;
  memset(&g, 0, sizeof g);
  g.events = g.recording = (data[0] >> 3) & 1;
  if (g.events) { /* ticked: a free in its allocation's tick writes no record */
    pool_events_enable(RING_CAP);
    event_clock_publish(clock_stamp());
  }
  CHECK(make_pool(&g, data[0]), "gpupool_create");
  g.streams[0] = gpupool_host_stream_create();
  g.streams[1] = gpupool_host_stream_create();
  for (size_t off = 1; off + 4 <= size; off += 4) {
    const uint8_t *a = data + off;
    switch (a[0] % 10) {
    case 0:
    case 1:
    case 2:
      op_malloc(&g, a);
      break;
    case 3:
    case 4:
      op_free(&g, a, 0);
      break;
    case 5:
      op_free(&g, a, 1);
      break;
    case 6:
      gpupool_host_stream_complete(g.streams[a[1] % 2]);
      break;
    case 7:
      (void)gpupool_empty_cache(g.pool);
      break;
    case 8:
      op_bad_free(&g, a);
      break;
    default:
      op_events(&g, a);
      break;
    }
  }
  check_stats(&g);
  if (g.events)
    check_events(&g);
  while (g.nlive)
    op_free(&g, (const uint8_t[4]){0, 0, 0, 0}, 0);
  gpupool_host_stream_complete(g.streams[0]);
  gpupool_host_stream_complete(g.streams[1]);
  (void)gpupool_empty_cache(g.pool);
  gpupool_stats s;
  CHECK(gpupool_get_stats(g.pool, &s) == GPUPOOL_OK, "get_stats");
  CHECK(s.reserved_bytes[GPUPOOL_STAT_ALL].current == 0,
        "%lld bytes reserved after everything was freed and the cache emptied",
        (long long)s.reserved_bytes[GPUPOOL_STAT_ALL].current);
  if (g.events)
    check_events(&g);
  gpupool_destroy(g.pool);
  if (g.events) {
    pool_events_disable();
    event_clock_publish(0);
  }
  gpupool_host_stream_destroy(g.streams[0]);
  gpupool_host_stream_destroy(g.streams[1]);
  return 0;
}
