#include "metrics_cupti.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "cupti.h"

static const char *const owners[2] = {"pool", "other"};

/* device/UUID labels of a CUPTI device, into buf: records without a device
 * (host memory) carry only the process labels. */
static const char *device_labels(prom_buf *buf, const metrics_snapshot *s,
                                 const cupti_device_metrics *d) {
  buf->len = 0;
  if (d->device >= 0) {
    char ordinal[16];
    snprintf(ordinal, sizeof ordinal, "%d", d->device);
    prom_label l[2] = {{"device", ordinal}, {"UUID", metrics_device_uuid(s, d->device, 0)}};
    prom_render_labels(buf, l, 2);
    prom_buf_putc(buf, ',');
  }
  prom_buf_puts(buf, metrics_labels(s, s->process_labels));
  prom_buf_putc(buf, '\0');
  return buf->failed ? "" : buf->data;
}

typedef struct kind_family {
  const char *name;
  prom_type type;
  const char *help;
  size_t offset; /* of the [kind][owner] array in cupti_device_metrics */
} kind_family;

static const kind_family kind_families[] = {
    {"gpupool_cuda_memory_bytes", PROM_GAUGE,
     "Live CUDA memory seen by CUPTI, by memory kind and owner (pool: inside a gpupool segment).",
     offsetof(cupti_device_metrics, live_bytes)},
    {"gpupool_cuda_allocations", PROM_COUNTER, "CUDA allocations seen by CUPTI.",
     offsetof(cupti_device_metrics, allocations)},
    {"gpupool_cuda_releases", PROM_COUNTER, "CUDA releases seen by CUPTI.",
     offsetof(cupti_device_metrics, releases)},
};

static void write_per_kind(prom_writer *w, const metrics_snapshot *s, const cupti_metrics *c,
                           prom_buf *scratch, double created_s) {
  for (size_t f = 0; f < sizeof kind_families / sizeof kind_families[0]; f++) {
    const kind_family *kf = &kind_families[f];
    prom_family(w, kf->name, kf->type, kf->help);
    /* Declared without samples while CUPTI has seen nothing (or is off):
     * 0 would claim the process has no CUDA memory. */
    prom_family_declare(w);
    for (size_t i = 0; i < c->ndevices; i++) {
      const cupti_device_metrics *d = &c->devices[i];
      const char *labels = device_labels(scratch, s, d);
      const uint64_t(*v)[2] = (const uint64_t(*)[2])((const char *)d + kf->offset);
      for (int kind = 0; kind < CUPTI_MEMORY_KINDS; kind++) {
        for (int o = 0; o < 2; o++) {
          if (!d->allocations[kind][o] && !d->releases[kind][o])
            continue; /* never seen */
          prom_label l[2] = {{"kind", cupti_memory_kind_name(kind)}, {"owner", owners[o]}};
          if (kf->type == PROM_COUNTER)
            prom_counter(w, labels, l, 2, v[kind][o], created_s);
          else
            prom_gauge_u64(w, labels, l, 2, v[kind][o]);
        }
      }
    }
  }
}

typedef struct mempool_family {
  const char *name;
  prom_type type;
  const char *help;
  size_t offset;
} mempool_family;

static const mempool_family mempool_families[] = {
    {"gpupool_cuda_mempools_created", PROM_COUNTER, "cudaMemPool creations seen by CUPTI.",
     offsetof(cupti_device_metrics, mempools_created)},
    {"gpupool_cuda_mempools_destroyed", PROM_COUNTER, "cudaMemPool destructions seen by CUPTI.",
     offsetof(cupti_device_metrics, mempools_destroyed)},
    {"gpupool_cuda_mempools_trimmed", PROM_COUNTER, "cudaMemPool trims seen by CUPTI.",
     offsetof(cupti_device_metrics, mempools_trimmed)},
    {"gpupool_cuda_mempool_size_bytes", PROM_GAUGE,
     "Size of the cudaMemPool in the latest CUPTI memory-pool record.",
     offsetof(cupti_device_metrics, mempool_size_bytes)},
    {"gpupool_cuda_mempool_utilized_bytes", PROM_GAUGE,
     "Utilized size of the cudaMemPool in the latest CUPTI memory-pool record.",
     offsetof(cupti_device_metrics, mempool_utilized_bytes)},
};

static void write_mempools(prom_writer *w, const metrics_snapshot *s, const cupti_metrics *c,
                           prom_buf *scratch, double created_s) {
  for (size_t f = 0; f < sizeof mempool_families / sizeof mempool_families[0]; f++) {
    const mempool_family *mf = &mempool_families[f];
    prom_family(w, mf->name, mf->type, mf->help);
    for (size_t i = 0; i < c->ndevices; i++) {
      const cupti_device_metrics *d = &c->devices[i];
      if (!d->mempools_created && !d->mempool_size_bytes)
        continue; /* no mempool seen */
      uint64_t v = *(const uint64_t *)((const char *)d + mf->offset);
      const char *labels = device_labels(scratch, s, d);
      if (mf->type == PROM_COUNTER)
        prom_counter(w, labels, NULL, 0, v, created_s);
      else
        prom_gauge_u64(w, labels, NULL, 0, v);
    }
  }
}

void metrics_write_cupti(prom_writer *w, const metrics_snapshot *s, double created_s) {
  cupti_metrics *c = malloc(sizeof *c);
  if (!c)
    return;
  cupti_get_metrics(c);
  if (c->ndevices > CUPTI_MAX_DEVICES)
    c->ndevices = CUPTI_MAX_DEVICES;
  const char *labels = metrics_labels(s, s->process_labels);

  prom_family(w, "gpupool_cupti_up", PROM_GAUGE,
              "1 when the CUPTI subscriber records CUDA memory activity; reason says why not.");
  prom_label reason = {"reason", c->reason ? c->reason : "unknown"};
  prom_gauge_u64(w, labels, &reason, 1, c->up ? 1 : 0);

  const struct {
    const char *name, *help;
    uint64_t v;
  } counters[] = {
      {"gpupool_cupti_records", "CUPTI activity records decoded.", c->records_total},
      {"gpupool_cupti_records_dropped", "Records CUPTI dropped (no buffer was free).",
       c->records_dropped_total},
      {"gpupool_cupti_unknown_releases", "Releases of addresses never seen allocated.",
       c->unknown_releases_total},
      {"gpupool_cupti_live_map_overflow", "Allocations not tracked: the live map was full.",
       c->live_map_overflow_total},
      {"gpupool_cupti_buffers_exhausted", "Buffer requests refused: no buffer was free.",
       c->buffers_exhausted_total},
      {"gpupool_cupti_flushes", "Flushes of CUPTI's activity buffers.", c->flushes_total},
  };
  for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
    prom_family(w, counters[i].name, PROM_COUNTER, counters[i].help);
    prom_counter(w, labels, NULL, 0, counters[i].v, created_s);
  }

  prom_buf scratch;
  prom_buf_init(&scratch, 512);
  write_per_kind(w, s, c, &scratch, created_s);
  write_mempools(w, s, c, &scratch, created_s);
  prom_buf_free(&scratch);
  free(c);
}
