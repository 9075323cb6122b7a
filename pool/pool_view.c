/* pool_view.h: what the agent and exporters read of a pool. */
#include "pool_view.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "pool_internal.h"
#include "registry.h"
#include "segment.h"
#include "shard.h"

uint32_t pool_id(const gpupool *p) {
  return p->id;
}

struct backend *pool_get_backend(gpupool *p) {
  return p->be;
}

void pool_get_histogram(gpupool *p, pool_histogram *out) {
  memset(out, 0, sizeof *out);
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    for (int i = 0; i < POOL_HIST_BUCKETS; i++) {
      out->bucket[i] += sh->st.hist_bucket[i];
      out->count += sh->st.hist_bucket[i];
    }
    out->sum += sh->st.hist_sum;
    spin_unlock(&sh->lock);
  }
}

void pool_get_device_timing(gpupool *p, pool_device_timing *out) {
  spin_lock(&p->counters_lock);
  *out = p->c.timing;
  spin_unlock(&p->counters_lock);
}

void pool_get_backend_info(gpupool *p, pool_backend_info *out) {
  memset(out, 0, sizeof *out);
  uint64_t v[4];
  if (p->be->ops->mempool_attrs && p->be->ops->mempool_attrs(p->be, v) == 0) {
    out->reserved_current = v[0];
    out->reserved_high = v[1];
    out->used_current = v[2];
    out->used_high = v[3];
    out->valid = 1;
  }
}

/* One shard's segments and blocks, copied under its lock. */
typedef struct shard_copy {
  pool_segment_info *segs;
  pool_block_info *blocks;
  size_t nsegs, nblocks;
} shard_copy;

static int copy_shard(shard *sh, shard_copy *c) {
  spin_lock(&sh->lock);
  size_t nsegs = 0, nblocks = 0;
  for (segment *seg = sh->segments; seg; seg = seg->next) {
    nsegs++;
    nblocks += seg->nblocks;
  }
  c->segs = malloc((nsegs + 1) * sizeof *c->segs);
  c->blocks = malloc((nblocks + 1) * sizeof *c->blocks);
  if (!c->segs || !c->blocks) {
    spin_unlock(&sh->lock);
    return -1;
  }
  size_t bi = 0, si = 0;
  for (segment *seg = sh->segments; seg; seg = seg->next, si++) {
    segment_describe(seg, &c->segs[si], &c->blocks[bi]); /* pool_walk converts the stamps */
    bi += seg->nblocks;
  }
  c->nsegs = si;
  c->nblocks = bi;
  spin_unlock(&sh->lock);
  return 0;
}

size_t pool_walk(gpupool *p, const pool_walker *w) {
  size_t total = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    shard_copy c = {0};
    if (copy_shard(sh, &c) == 0) {
      size_t bi = 0;
      for (size_t i = 0; i < c.nsegs; i++) {
        if (w->segment)
          w->segment(w->arg, &c.segs[i]);
        for (size_t j = 0; j < c.segs[i].nblocks; j++, bi++) {
          pool_block_info *b = &c.blocks[bi];
          if (b->alloc_ns)
            b->alloc_ns = clock_stamp_to_ns(b->alloc_ns);
          if (w->block)
            w->block(w->arg, b);
        }
      }
      total += c.nsegs;
    }
    free(c.segs);
    free(c.blocks);
  }
  return total;
}

/* Serialises turning events on and off: sh->ring changes (give_rings) only
 * while no switch_recording reads it. */
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;

static void give_rings(gpupool *p, void *arg) {
  size_t cap = *(size_t *)arg;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    event_ring *r = event_ring_create_pool(cap, (uint64_t)(uintptr_t)sh->stream);
    spin_lock(&sh->lock);
    event_ring *old = sh->ring;
    if (!old || event_ring_capacity(old) != event_ring_capacity(r)) {
      if (old)
        shard_settle_events(sh, old, 1);
      __atomic_store_n(&sh->ring, r, __ATOMIC_RELAXED); /* add_lifetime_events reads it unlocked */
      r = old;
    }
    atomic_store_explicit(&sh->recording, sh->ring, memory_order_relaxed);
    spin_unlock(&sh->lock);
    event_ring_unref(r); /* the one not installed */
  }
}

/* What p's rings have written, summed over its streams. */
typedef struct ring_counts {
  uint64_t recorded; /* records pushed */
  uint64_t dropped;  /* of those, overwritten */
} ring_counts;

static ring_counts ring_counts_of(gpupool *p) {
  ring_counts c = {0};
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock); /* a ring replaced meanwhile is released after the swap */
    if (sh->ring) {
      c.recorded += event_ring_head(sh->ring);
      c.dropped += event_ring_dropped(sh->ring);
    }
    spin_unlock(&sh->lock);
  }
  return c;
}

static void add_recorded(gpupool *p, void *arg) {
  *(uint64_t *)arg += ring_counts_of(p).recorded;
}

uint64_t pool_events_recorded_total(void) {
  uint64_t total = 0;
  registry_foreach(add_recorded, &total);
  return total;
}

/* Without the shards' locks: the ticker that counts would otherwise wait
 * for any thread preempted while it held one, a time slice or more where
 * busy threads outnumber cores, and a count that slow widens the bounds of
 * the rate the meter judges (event_clock.c, measure); under the old rule,
 * which judged no such period, the clock never went ticked there
 * (bench_events, 8 threads on 2 cores). The shard list only grows, and the
 * ring pointer and histogram are stored atomically by their writers. */
static void add_lifetime_events(gpupool *p, void *arg) {
  uint64_t allocations = 0;
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    if (!__atomic_load_n(&sh->ring, __ATOMIC_RELAXED))
      continue;
    for (int i = 0; i < POOL_HIST_BUCKETS; i++)
      allocations += __atomic_load_n(&sh->st.hist_bucket[i], __ATOMIC_RELAXED);
  }
  *(uint64_t *)arg += 2 * allocations;
}

uint64_t pool_events_lifetimes_total(void) {
  uint64_t total = 0;
  registry_foreach(add_lifetime_events, &total);
  return total;
}

void pool_events_enable(size_t capacity) {
  if (!capacity)
    return pool_events_disable();
  pthread_mutex_lock(&events_lock);
  shard_set_events_capacity(capacity);
  registry_foreach(give_rings, &capacity);
  pthread_mutex_unlock(&events_lock);
  event_clock_set_event_source(pool_events_lifetimes_total);
}

/* Points each shard of p at its ring (*arg, the capacity, > 0) or at none.
 * Under shard_create_lock: a shard created meanwhile read the capacity
 * already stored (shard_get), so none is left recording after an off. Under
 * each shard's lock, which a thread allocating in a loop lets go between
 * its calls: the ring's newest record is settled first, and its block
 * forgotten, since frees while events are off record nothing (events_lock
 * keeps give_rings from changing sh->ring meanwhile). */
static void switch_recording(gpupool *p, void *arg) {
  int on = *(size_t *)arg != 0;
  pthread_mutex_lock(&p->shard_create_lock);
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    if (sh->ring)
      shard_settle_events(sh, sh->ring, 1);
    atomic_store_explicit(&sh->recording, on ? sh->ring : NULL, memory_order_relaxed);
    spin_unlock(&sh->lock);
  }
  pthread_mutex_unlock(&p->shard_create_lock);
}

void pool_events_switch(size_t capacity) {
  pthread_mutex_lock(&events_lock);
  shard_set_events_capacity(capacity);
  registry_foreach(switch_recording, &capacity);
  pthread_mutex_unlock(&events_lock);
}

void pool_events_disable(void) {
  pool_events_switch(0);
}

int pool_events_enabled(void) {
  return shard_events_capacity() != 0;
}

void pool_event_counts(gpupool *p, uint64_t *recorded, uint64_t *dropped) {
  ring_counts c = ring_counts_of(p);
  *recorded = c.recorded;
  *dropped = c.dropped;
}

size_t pool_event_rings_at(gpupool *p, event_ring **out, event_ring_end *ends, size_t max) {
  size_t n = 0;
  for (shard *sh = atomic_load(&p->shards); sh && n < max; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    if (sh->ring) {
      event_ring_end end = shard_events_end(sh);
      event_ring_ref(sh->ring);
      if (ends)
        ends[n] = end;
      out[n++] = sh->ring;
    }
    spin_unlock(&sh->lock);
  }
  return n;
}
