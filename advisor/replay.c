/* Replays a history on a pool of the simulated backend: the real pool code,
 * driven with the recorded requests in order, so a replay under the
 * configuration that recorded the history reproduces it exactly. The blocks
 * are kept by slot (pool/pool_blocks.h): no address is looked up. */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "core/kvconf.h"
#include "pool/pool_blocks.h"
#include "pool/shard.h"
#include "pool/pool_internal.h"

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* kvconf_parse's callback: refuses the keys that would leave the simulation
 * or change its device (memory_fraction caps it: /advice replays a capped
 * pool on a device of the cap's size instead).
 * The keys come from the parser the pool itself uses (trimmed, split at the
 * same ',' and ':'), so no spelling reaches the pool unchecked. */
static int refuse_key(void *ctx, const char *key, const char *value, char *err, size_t errlen) {
  static const char *const refused[] = {"backend",          "device",         "name",
                                        "host_capacity_mb", "fault_rate",     "fault_every_n",
                                        "fault_seed",       "memory_fraction"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
    if (!strcmp(key, refused[i])) {
      snprintf(err, errlen,
               "key %s is not a pool setting the advisor tries (the simulated device and its "
               "capacity are the advisor's own)",
               key);
      return -1;
    }
  return 0;
}

int replay_conf_check(const char *conf, char *err, size_t errlen) {
  char why[256];
  if (kvconf_parse(conf, refuse_key, NULL, why, sizeof why) == 0)
    return 0;
  snprintf(err, errlen, "configuration '%s': %s", conf, why);
  return -1;
}

/* Allocated bytes and the largest free block, summed over p's shards. */
static void pool_free_state(gpupool *p, uint64_t *allocated, uint64_t *largest) {
  *allocated = *largest = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    *allocated += (uint64_t)stat_total(&sh->st.s[STAT_ALLOCATED_BYTES]);
    size_t free_max = shard_largest_free(sh);
    if (free_max > *largest)
      *largest = free_max;
  }
}

/* replay_run once its arguments are checked. */
static gpupool_status replay(const gpupool_history *h, const char *conf, uint64_t capacity,
                             int stop_at_oom, gpupool_replay_result *out) {
  gpupool_options o = {.name = "replay",
                       .backend = GPUPOOL_BACKEND_SIM,
                       .tunables = conf,
                       .host_capacity = (size_t)capacity,
                       .ignore_env = 1};
  gpupool *p;
  gpupool_status st = gpupool_create(&o, &p);
  if (st != GPUPOOL_OK)
    return st;
  pool_serve_blocks(p); /* the blocks are kept here, by slot */
  block **live = calloc(h->n_slots ? h->n_slots : 1, sizeof *live);
  if (!live) {
    gpupool_destroy(p);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_replay: out of host memory");
  }
  out->expandable = p->cfg.expandable;
  double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  uint64_t ooms = 0, flushes = 0, peak_seen = 0;
  double frag = 0;
  const hist_op *op = h->ops, *end = h->ops + h->n_ops;
  const stat_counter *reserved = &p->c.reserved_bytes;
  for (; op < end; op++) {
    switch (op->kind) {
    case HOP_ALLOC: {
      if (pool_malloc_block(p, h->size[op->slot], (void *)(uintptr_t)h->streams[op->stream],
                            &live[op->slot]) != GPUPOOL_OK) {
        live[op->slot] = NULL;
        ooms++;
        if (stop_at_oom)
          goto done;
        break;
      }
      uint64_t res = (uint64_t)stat_total(reserved);
      if (res > peak_seen) { /* a new peak of reserved memory: its fragmentation */
        peak_seen = res;
        uint64_t alloc, largest;
        pool_free_state(p, &alloc, &largest);
        /* expandable segments: free blocks may span unmapped pages; clamp */
        frag = res > alloc ? 1.0 - (double)largest / (double)(res - alloc) : 0.0;
        frag = frag < 0 ? 0 : frag;
      }
      break;
    }
    case HOP_FREE:
      if (live[op->slot]) {
        pool_free_block(p, live[op->slot]);
        live[op->slot] = NULL;
      }
      break;
    case HOP_RECORD_STREAM:
      if (live[op->slot])
        pool_record_stream_block(live[op->slot], (void *)(uintptr_t)h->streams[op->stream]);
      break;
    default:
      gpupool_empty_cache(p);
      flushes++;
      break;
    }
  }
done:
  out->seconds = clock_s(CLOCK_MONOTONIC) - t0;
  out->cpu_seconds = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
  out->events = (uint64_t)(op - h->ops) + (op < end);
  gpupool_stats s;
  gpupool_get_stats(p, &s);
  out->peak_reserved = (uint64_t)s.reserved_bytes[GPUPOOL_STAT_ALL].peak;
  out->peak_allocated = (uint64_t)s.allocated_bytes[GPUPOOL_STAT_ALL].peak;
  out->peak_requested = (uint64_t)s.requested_bytes[GPUPOOL_STAT_ALL].peak;
  out->ratio = out->peak_allocated ? (double)out->peak_reserved / (double)out->peak_allocated : 0;
  out->device_allocs = s.num_device_alloc;
  out->device_frees = s.num_device_free;
  out->alloc_retries = s.num_alloc_retries;
  out->gc_runs = s.num_gc_runs;
  out->cache_flushes = s.num_alloc_retries + s.num_gc_runs + flushes;
  out->ooms = ooms;
  out->fragmentation_at_peak = frag;
  out->pages_moved = s.num_pages_moved;
  out->device_syncs = s.num_device_syncs + s.num_alloc_retries;
  out->sync_events = s.num_sync_events;
  free(live);
  gpupool_destroy(p);
  return GPUPOOL_OK;
}

gpupool_status replay_run(const gpupool_history *h, const char *conf, uint64_t capacity,
                          int stop_at_oom, gpupool_replay_result *out) {
  char err[320];
  memset(out, 0, sizeof *out);
  if (!h)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_replay: no history");
  if (capacity == 0)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_replay: capacity 0");
  if (capacity > REPLAY_MAX_CAPACITY)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "gpupool_replay: capacity %llu bytes is above 1 PiB (2^50 bytes)",
                     (unsigned long long)capacity);
  if (replay_conf_check(conf, err, sizeof err))
    return pool_fail(GPUPOOL_ERR_INVALID, "%s", err);
  /* The replay's OOMs are its results, not failures of the call. */
  pool_error_scope scope;
  pool_error_scope_enter(&scope);
  return pool_error_scope_leave(&scope, replay(h, conf, capacity, stop_at_oom, out));
}

gpupool_status gpupool_replay(const gpupool_history *h, const char *conf, uint64_t capacity,
                              gpupool_replay_result *out) {
  if (!out)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_replay: out is NULL");
  return replay_run(h, conf, capacity, 0, out);
}
