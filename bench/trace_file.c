/* Allocation traces for the replay benchmark (trace_file.h), read by the
 * library's GPUPOOL_RECORD reader (gpupool_history_load, advisor/): the
 * advisor's history, less its record_stream operations, as slots in order
 * of allocation with the stream each was allocated on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/history.h"
#include "trace_file.h"

/* The history's ops as the trace's, streams numbered by their first
 * allocation (a stream only named by record_stream is not one here). */
static int convert(const gpupool_history *h, trace *t) {
  const gpupool_history_info *in = gpupool_history_get_info(h);
  int map[HIST_MAX_STREAMS];
  memset(map, -1, sizeof map);
  t->ops = malloc((h->n_ops ? h->n_ops : 1) * sizeof *t->ops);
  t->slot_size = malloc((h->n_slots ? h->n_slots : 1) * sizeof *t->slot_size);
  t->slot_stream = malloc((h->n_slots ? h->n_slots : 1) * sizeof *t->slot_stream);
  t->streams = malloc((h->n_streams ? h->n_streams : 1) * sizeof *t->streams);
  if (!t->ops || !t->slot_size || !t->slot_stream || !t->streams)
    return -1;
  for (size_t i = 0; i < h->n_ops; i++) {
    const hist_op *op = &h->ops[i];
    if (op->kind == HOP_ALLOC) {
      if (map[op->stream] < 0) {
        map[op->stream] = t->n_streams;
        t->streams[t->n_streams++] = h->streams[op->stream];
      }
      t->slot_size[op->slot] = h->size[op->slot];
      t->slot_stream[op->slot] = (uint16_t)map[op->stream];
    }
    if (op->kind == HOP_ALLOC || op->kind == HOP_FREE)
      t->ops[t->n_ops++] = (trace_op){op->slot, op->kind == HOP_ALLOC};
  }
  t->n_allocs = in->allocations;
  t->n_frees = in->frees;
  t->n_unmatched_frees = in->unmatched_frees;
  t->n_live_at_end = in->live_at_end;
  t->peak_requested = in->peak_requested;
  t->total_requested = in->requested_bytes;
  t->max_size = in->largest_request;
  return 0;
}

int trace_load(const char *path, trace *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  gpupool_history *h;
  if (gpupool_history_load(path, "record", NULL, &h) != GPUPOOL_OK) {
    snprintf(err, errlen, "%s", gpupool_last_error());
    return -1;
  }
  int rc = convert(h, t);
  gpupool_history_free(h);
  if (rc) {
    snprintf(err, errlen, "%s: out of memory", path);
    trace_release(t);
  }
  return rc;
}

void trace_release(trace *t) {
  free(t->ops);
  free(t->slot_size);
  free(t->slot_stream);
  free(t->streams);
  memset(t, 0, sizeof *t);
}
