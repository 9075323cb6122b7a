#include "metrics_pools.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

/* Families with one series per pool, read from the copied stats. */
typedef struct pool_family {
  const char *name;
  prom_type type; /* PROM_GAUGE or PROM_COUNTER */
  const char *help;
  uint64_t (*get)(const metrics_pool *m);
} pool_family;

#define ALL GPUPOOL_STAT_ALL
static uint64_t u(int64_t v) {
  return v > 0 ? (uint64_t)v : 0;
}
static uint64_t reserved(const metrics_pool *m) {
  return u(m->stats.reserved_bytes[ALL].current);
}
static uint64_t allocated(const metrics_pool *m) {
  return u(m->stats.allocated_bytes[ALL].current);
}
static uint64_t requested(const metrics_pool *m) {
  return u(m->stats.requested_bytes[ALL].current);
}
static uint64_t active(const metrics_pool *m) {
  return u(m->stats.active_bytes[ALL].current);
}
static uint64_t inactive_split(const metrics_pool *m) {
  return u(m->stats.inactive_split_bytes[ALL].current);
}
static uint64_t largest_free(const metrics_pool *m) {
  return m->stats.largest_free_block;
}
static uint64_t peak_reserved(const metrics_pool *m) {
  return u(m->stats.reserved_bytes[ALL].peak);
}
static uint64_t peak_allocated(const metrics_pool *m) {
  return u(m->stats.allocated_bytes[ALL].peak);
}
static uint64_t segments(const metrics_pool *m) {
  return u(m->stats.segment[ALL].current);
}
static uint64_t frees(const metrics_pool *m) {
  return m->stats.num_frees;
}
static uint64_t device_allocs(const metrics_pool *m) {
  return m->stats.num_device_alloc;
}
static uint64_t device_frees(const metrics_pool *m) {
  return m->stats.num_device_free;
}
static uint64_t retries(const metrics_pool *m) {
  return m->stats.num_alloc_retries;
}
static uint64_t ooms(const metrics_pool *m) {
  return m->stats.num_ooms;
}
static uint64_t gc_runs(const metrics_pool *m) {
  return m->stats.num_gc_runs;
}
static uint64_t sync_events(const metrics_pool *m) {
  return m->stats.num_sync_events;
}
static uint64_t pages_moved(const metrics_pool *m) {
  return m->stats.num_pages_moved;
}
static uint64_t device_syncs(const metrics_pool *m) {
  return m->stats.num_device_syncs;
}
static uint64_t events_total(const metrics_pool *m) {
  return m->events_total;
}
static uint64_t events_dropped(const metrics_pool *m) {
  return m->events_dropped;
}

static const pool_family families[] = {
    {"gpupool_reserved_bytes", PROM_GAUGE, "Bytes the pool holds from the device (segments).",
     reserved},
    {"gpupool_allocated_bytes", PROM_GAUGE, "Bytes in live allocations (block sizes).", allocated},
    {"gpupool_requested_bytes", PROM_GAUGE, "Bytes callers asked for in live allocations.",
     requested},
    {"gpupool_active_bytes", PROM_GAUGE,
     "Bytes in live allocations and in freed blocks still waiting on other streams.", active},
    {"gpupool_inactive_split_bytes", PROM_GAUGE,
     "Free bytes inside segments that are split into several blocks.", inactive_split},
    {"gpupool_largest_free_block_bytes", PROM_GAUGE, "Largest cached free block.", largest_free},
    {"gpupool_peak_reserved_bytes", PROM_GAUGE, "Highest reserved bytes since creation or reset.",
     peak_reserved},
    {"gpupool_peak_allocated_bytes", PROM_GAUGE, "Highest allocated bytes since creation or reset.",
     peak_allocated},
    {"gpupool_segments", PROM_GAUGE, "Device allocations (segments) the pool holds.", segments},
    {"gpupool_frees", PROM_COUNTER, "Successful gpupool_free calls.", frees},
    {"gpupool_device_allocs", PROM_COUNTER,
     "Segments allocated from the device (pages, with expandable segments).", device_allocs},
    {"gpupool_device_frees", PROM_COUNTER,
     "Segments returned to the device (pages, with expandable segments).", device_frees},
    {"gpupool_pages_moved", PROM_COUNTER,
     "Expandable segments: idle pages unmapped from free blocks and mapped under new ones.",
     pages_moved},
    {"gpupool_device_syncs", PROM_COUNTER,
     "Device synchronizations the pool made before unmapping pages.", device_syncs},
    {"gpupool_alloc_retries", PROM_COUNTER,
     "Device allocations retried after releasing cached segments.", retries},
    {"gpupool_ooms", PROM_COUNTER, "Allocations that failed out of memory.", ooms},
    {"gpupool_gc_runs", PROM_COUNTER, "Garbage-collection passes (garbage_collection_threshold).",
     gc_runs},
    {"gpupool_sync_events", PROM_COUNTER,
     "Cross-stream events recorded when freeing blocks used on other streams.", sync_events},
    {"gpupool_trace_events", PROM_COUNTER,
     "Event records written into the pool's trace rings: one per event, except that an "
     "allocation freed in the same tick of the event clock, with nothing recorded between, "
     "shares its record with its free.",
     events_total},
    {"gpupool_trace_events_dropped", PROM_COUNTER,
     "Event records overwritten in the bounded event rings before being read.", events_dropped},
};

static void write_simple(prom_writer *w, const metrics_snapshot *s) {
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
    const pool_family *pf = &families[f];
    prom_family(w, pf->name, pf->type, pf->help);
    for (size_t i = 0; i < s->npools; i++) {
      const metrics_pool *m = &s->pools[i];
      const char *labels = metrics_labels(s, m->labels);
      if (pf->type == PROM_COUNTER)
        prom_counter(w, labels, NULL, 0, pf->get(m), 0);
      else
        prom_gauge_u64(w, labels, NULL, 0, pf->get(m));
    }
  }
}

static void write_labelled(prom_writer *w, const metrics_snapshot *s) {
  prom_family(w, "gpupool_pool", PROM_INFO, "Pool identity: backend and strategy.");
  for (size_t i = 0; i < s->npools; i++) {
    const metrics_pool *m = &s->pools[i];
    prom_label l[2] = {{"backend", m->backend}, {"strategy", m->strategy}};
    prom_gauge_u64(w, metrics_labels(s, m->labels), l, 2, 1);
  }

  prom_family(w, "gpupool_allocations", PROM_COUNTER,
              "Allocations served from the pool's cache (source=cache) or needing a new device "
              "allocation (source=device).");
  for (size_t i = 0; i < s->npools; i++) {
    const metrics_pool *m = &s->pools[i];
    const char *labels = metrics_labels(s, m->labels);
    prom_label cache = {"source", "cache"}, device = {"source", "device"};
    prom_counter(w, labels, &cache, 1, m->stats.num_cache_hits, 0);
    prom_counter(w, labels, &device, 1, m->stats.num_device_sourced, 0);
  }

  prom_family(w, "gpupool_blocks", PROM_GAUGE,
              "Blocks by state: allocated, free (cached), pending_free (waiting on other "
              "streams).");
  for (size_t i = 0; i < s->npools; i++) {
    const metrics_pool *m = &s->pools[i];
    const char *labels = metrics_labels(s, m->labels);
    prom_label a = {"state", "allocated"}, f = {"state", "free"}, p = {"state", "pending_free"};
    prom_gauge_i64(w, labels, &a, 1, m->stats.allocation[ALL].current);
    prom_gauge_u64(w, labels, &f, 1, m->stats.free_blocks);
    prom_gauge_u64(w, labels, &p, 1, m->stats.pending_free_blocks);
  }

  prom_family(w, "gpupool_tag_allocated_bytes", PROM_GAUGE,
              "Bytes in live allocations made under each allocation tag (gpupool_tag_push); "
              "untagged bytes are gpupool_allocated_bytes less their sum.");
  for (size_t i = 0; i < s->npools; i++) {
    const metrics_pool *m = &s->pools[i];
    for (int t = 0; t < m->ntags; t++) {
      prom_label tag = {"tag", m->tags[t].tag};
      prom_gauge_i64(w, metrics_labels(s, m->labels), &tag, 1, m->tags[t].allocated_bytes);
    }
  }

  prom_family(w, "gpupool_device_call_seconds", PROM_SUMMARY,
              "Time spent in device allocation (op=alloc) and free (op=free) calls.");
  for (size_t i = 0; i < s->npools; i++) {
    const metrics_pool *m = &s->pools[i];
    const char *labels = metrics_labels(s, m->labels);
    prom_label a = {"op", "alloc"}, f = {"op", "free"};
    prom_summary(w, labels, &a, 1, (double)m->timing.alloc_ns_total / 1e9, m->timing.alloc_count,
                 0);
    prom_summary(w, labels, &f, 1, (double)m->timing.free_ns_total / 1e9, m->timing.free_count, 0);
  }
}

/* le of bucket i is 2^i; the pool's last bucket also holds larger sizes, so
 * it is folded into +Inf. The coarse buckets are every second one from
 * 2^COARSE_FIRST: the same cumulative counts at fewer le values. */
#define HIST_BOUNDS   (POOL_HIST_BUCKETS - 1)
#define COARSE_FIRST  9
#define COARSE_LAST   35
#define COARSE_STEP   2
#define COARSE_BOUNDS ((COARSE_LAST - COARSE_FIRST) / COARSE_STEP + 1)

static char bound_text[HIST_BOUNDS][24];
static const char *bounds[HIST_BOUNDS];
static const char *coarse_bounds[COARSE_BOUNDS];
static pthread_once_t bounds_once = PTHREAD_ONCE_INIT;
static atomic_int classic_buckets;

void metrics_pools_size_buckets(int classic) {
  atomic_store(&classic_buckets, classic != 0);
}

static void format_bounds(void) {
  for (int i = 0; i < HIST_BOUNDS; i++) {
    snprintf(bound_text[i], sizeof bound_text[i], "%llu", 1ULL << i);
    bounds[i] = bound_text[i];
  }
  for (int j = 0; j < COARSE_BOUNDS; j++)
    coarse_bounds[j] = bounds[COARSE_FIRST + COARSE_STEP * j];
}

static void write_histogram(prom_writer *w, const metrics_snapshot *s) {
  pthread_once(&bounds_once, format_bounds);
  int classic = atomic_load(&classic_buckets);
  prom_family(w, "gpupool_allocation_size_bytes", PROM_HISTOGRAM,
              classic ? "Requested allocation sizes, power-of-two buckets."
                      : "Requested allocation sizes, power-of-four buckets from 512 bytes.");
  for (size_t i = 0; i < s->npools; i++) {
    const metrics_pool *m = &s->pools[i];
    if (classic) {
      prom_histogram(w, metrics_labels(s, m->labels), bounds, m->hist.bucket, HIST_BOUNDS,
                     (double)m->hist.sum, 0);
      continue;
    }
    /* Bucket i holds sizes in (2^(i-1), 2^i]: coarse bucket j sums those
     * up to its le, the last one everything above the last le. */
    uint64_t counts[COARSE_BOUNDS + 1] = {0};
    for (int b = 0; b < POOL_HIST_BUCKETS; b++) {
      int j = b <= COARSE_FIRST ? 0 : (b - COARSE_FIRST + COARSE_STEP - 1) / COARSE_STEP;
      counts[j < COARSE_BOUNDS ? j : COARSE_BOUNDS] += m->hist.bucket[b];
    }
    prom_histogram(w, metrics_labels(s, m->labels), coarse_bounds, counts, COARSE_BOUNDS,
                   (double)m->hist.sum, 0);
  }
}

static void write_async_pools(prom_writer *w, const metrics_snapshot *s) {
  static const struct {
    const char *name, *help;
    size_t offset;
  } attrs[] = {
      {"gpupool_async_pool_reserved_bytes", "cudaMemPool reserved memory (cuda_async backend).",
       offsetof(pool_backend_info, reserved_current)},
      {"gpupool_async_pool_peak_reserved_bytes", "cudaMemPool reserved memory high-water mark.",
       offsetof(pool_backend_info, reserved_high)},
      {"gpupool_async_pool_used_bytes", "cudaMemPool memory in use (cuda_async backend).",
       offsetof(pool_backend_info, used_current)},
      {"gpupool_async_pool_peak_used_bytes", "cudaMemPool used memory high-water mark.",
       offsetof(pool_backend_info, used_high)},
  };
  for (size_t a = 0; a < sizeof attrs / sizeof attrs[0]; a++) {
    prom_family(w, attrs[a].name, PROM_GAUGE, attrs[a].help);
    for (size_t i = 0; i < s->npools; i++) {
      const metrics_pool *m = &s->pools[i];
      if (!m->backend_info.valid)
        continue;
      uint64_t v = *(const uint64_t *)((const char *)&m->backend_info + attrs[a].offset);
      prom_gauge_u64(w, metrics_labels(s, m->labels), NULL, 0, v);
    }
  }
}

/* One series per pool with a cap: the family is empty (HELP and TYPE only)
 * where no pool has one. */
static void write_limits(prom_writer *w, const metrics_snapshot *s) {
  prom_family(w, "gpupool_reserved_limit_bytes", PROM_GAUGE,
              "The pool's cap on reserved bytes (memory_fraction of device memory).");
  for (size_t i = 0; i < s->npools; i++) {
    const metrics_pool *m = &s->pools[i];
    if (m->reserved_limit != UINT64_MAX)
      prom_gauge_u64(w, metrics_labels(s, m->labels), NULL, 0, m->reserved_limit);
  }
}

void metrics_write_pools(prom_writer *w, const metrics_snapshot *s) {
  write_simple(w, s);
  write_labelled(w, s);
  write_histogram(w, s);
  write_async_pools(w, s);
  write_limits(w, s);
}
