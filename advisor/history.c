/* Building an allocation history (history.h). */
#include "history.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/array_grow.h"

#define MAP_EMPTY   UINT32_MAX
#define MAP_DELETED (UINT32_MAX - 1)

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

gpupool_history *hist_new(const char *source, const char *format) {
  gpupool_history *h = calloc(1, sizeof *h);
  if (!h)
    return NULL;
  snprintf(h->info.source, sizeof h->info.source, "%s", source ? source : "");
  snprintf(h->info.format, sizeof h->info.format, "%s", format ? format : "");
  return h;
}

void gpupool_history_free(gpupool_history *h) {
  if (!h)
    return;
  free(h->ops);
  free(h->size);
  free(h->map_key);
  free(h->map_slot);
  free(h);
}

gpupool_status hist_status(int r) {
  return r == HIST_HOST_OOM ? GPUPOOL_ERR_HOST_OOM : GPUPOOL_ERR_INVALID;
}

static int push(gpupool_history *h, hist_op op) {
  if (array_grow((void **)&h->ops, &h->cap_ops, h->n_ops + 1, sizeof op, 1024))
    return -1;
  h->ops[h->n_ops++] = op;
  return 0;
}

/* Index of stream value s, added if new; -1 when the table is full (err
 * says so). */
static int stream_index(gpupool_history *h, uint64_t s, char *err, size_t errlen) {
  for (unsigned i = 0; i < h->n_streams; i++)
    if (h->streams[i] == s)
      return (int)i;
  if (h->n_streams == HIST_MAX_STREAMS) {
    snprintf(err, errlen, "more than %d streams", HIST_MAX_STREAMS);
    return -1;
  }
  h->streams[h->n_streams] = s;
  return (int)h->n_streams++;
}

/* The map slot of id, or of where it would go (the first deleted or empty). */
static size_t map_find(const gpupool_history *h, uint64_t id, int *found) {
  size_t m = h->map_cap - 1, i = mix(id) & m, tomb = SIZE_MAX;
  for (;; i = (i + 1) & m) {
    uint32_t v = h->map_slot[i];
    if (v == MAP_EMPTY) {
      *found = 0;
      return tomb != SIZE_MAX ? tomb : i;
    }
    if (v == MAP_DELETED) {
      if (tomb == SIZE_MAX)
        tomb = i;
    } else if (h->map_key[i] == id) {
      *found = 1;
      return i;
    }
  }
}

static int map_rehash(gpupool_history *h, size_t cap) {
  uint64_t *ok = h->map_key;
  uint32_t *os = h->map_slot;
  size_t ocap = h->map_cap;
  h->map_key = malloc(cap * sizeof *h->map_key);
  h->map_slot = malloc(cap * sizeof *h->map_slot);
  if (!h->map_key || !h->map_slot) {
    free(h->map_key);
    free(h->map_slot);
    h->map_key = ok;
    h->map_slot = os;
    return -1;
  }
  memset(h->map_slot, 0xff, cap * sizeof *h->map_slot);
  h->map_cap = cap;
  h->map_used = 0;
  for (size_t i = 0; i < ocap; i++) {
    if (os[i] >= MAP_DELETED)
      continue;
    int found;
    size_t j = map_find(h, ok[i], &found);
    h->map_key[j] = ok[i];
    h->map_slot[j] = os[i];
    h->map_used++;
  }
  free(ok);
  free(os);
  return 0;
}

int hist_alloc(gpupool_history *h, uint64_t id, uint64_t size, uint64_t stream, char *err,
               size_t errlen) {
  if ((h->map_used + 1) * 2 > h->map_cap && map_rehash(h, h->map_cap ? h->map_cap * 2 : 4096) != 0)
    goto oom;
  int found;
  size_t i = map_find(h, id, &found);
  if (found) {
    snprintf(err, errlen, "allocation 0x%llx is already live (allocated twice without a free)",
             (unsigned long long)id);
    return HIST_REFUSED;
  }
  if (size > GPUPOOL_MAX_REQUEST) { /* no pool accepts it: no run can have recorded it */
    snprintf(err, errlen,
             "allocation 0x%llx of %llu bytes is larger than 2^48, which no pool accepts",
             (unsigned long long)id, (unsigned long long)size);
    return HIST_REFUSED;
  }
  if (h->n_slots >= UINT32_MAX - 2) {
    snprintf(err, errlen, "more than %u allocations", UINT32_MAX - 2);
    return HIST_REFUSED;
  }
  int si = stream_index(h, stream, err, errlen);
  if (si < 0)
    return HIST_REFUSED;
  if (array_grow((void **)&h->size, &h->cap_slots, h->n_slots + 1, sizeof *h->size, 1024))
    goto oom;
  uint32_t slot = (uint32_t)h->n_slots;
  if (push(h, (hist_op){slot, (uint16_t)si, HOP_ALLOC, 0}))
    goto oom;
  h->size[h->n_slots++] = size;
  if (h->map_slot[i] == MAP_EMPTY)
    h->map_used++;
  h->map_key[i] = id;
  h->map_slot[i] = slot;
  h->info.allocations++;
  h->info.requested_bytes += size;
  h->live_bytes += size;
  if (h->live_bytes > h->info.peak_requested)
    h->info.peak_requested = h->live_bytes;
  if (size > h->info.largest_request)
    h->info.largest_request = size;
  return 0;
oom:
  snprintf(err, errlen, "out of host memory");
  return HIST_HOST_OOM;
}

static uint32_t lookup(gpupool_history *h, uint64_t id, size_t *where) {
  if (!h->map_cap)
    return MAP_EMPTY;
  int found;
  size_t i = map_find(h, id, &found);
  *where = i;
  return found ? h->map_slot[i] : MAP_EMPTY;
}

int hist_free(gpupool_history *h, uint64_t id) {
  size_t i;
  uint32_t slot = lookup(h, id, &i);
  if (slot == MAP_EMPTY) {
    h->info.unmatched_frees++;
    return 1;
  }
  if (push(h, (hist_op){slot, 0, HOP_FREE, 0}))
    return HIST_HOST_OOM;
  h->map_slot[i] = MAP_DELETED;
  h->live_bytes -= h->size[slot];
  h->info.frees++;
  return 0;
}

int hist_record_stream(gpupool_history *h, uint64_t id, uint64_t stream, char *err, size_t errlen) {
  size_t i;
  uint32_t slot = lookup(h, id, &i);
  if (slot == MAP_EMPTY) {
    h->info.unmatched_record_streams++;
    return 1;
  }
  int si = stream_index(h, stream, err, errlen);
  if (si < 0)
    return HIST_REFUSED;
  if (push(h, (hist_op){slot, (uint16_t)si, HOP_RECORD_STREAM, 0})) {
    snprintf(err, errlen, "out of host memory");
    return HIST_HOST_OOM;
  }
  h->info.record_streams++;
  return 0;
}

int hist_is_live(gpupool_history *h, uint64_t id) {
  size_t i;
  return lookup(h, id, &i) != MAP_EMPTY;
}

void hist_note_time(gpupool_history *h, double t) {
  if (!h->has_time || t < h->t_first)
    h->t_first = t;
  if (!h->has_time || t > h->t_last)
    h->t_last = t;
  h->has_time = 1;
}

int hist_empty_cache(gpupool_history *h) {
  if (push(h, (hist_op){0, 0, HOP_EMPTY_CACHE, 0}))
    return HIST_HOST_OOM;
  h->info.empty_caches++;
  return 0;
}

void hist_finish(gpupool_history *h) {
  free(h->map_key);
  free(h->map_slot);
  h->map_key = NULL;
  h->map_slot = NULL;
  h->map_cap = h->map_used = 0;
  h->info.events = h->n_ops;
  h->info.live_at_end = h->info.allocations - h->info.frees;
  h->info.streams = h->n_streams;
  h->info.duration_s = h->has_time ? h->t_last - h->t_first : 0;
}

const gpupool_history_info *gpupool_history_get_info(const gpupool_history *h) {
  return h ? &h->info : NULL;
}
