#include "metrics_devices.h"

void metrics_write_devices(prom_writer *w, const metrics_snapshot *s) {
  prom_family(w, "gpupool_device", PROM_INFO,
              "A device the pools live on: its name (host-simulated for the host backend).");
  for (size_t i = 0; i < s->ndevices; i++) {
    const metrics_device *d = &s->devices[i];
    prom_label name = {"name", d->name};
    prom_gauge_u64(w, metrics_labels(s, d->labels), &name, 1, 1);
  }
  prom_family(w, "gpupool_device_memory_total_bytes", PROM_GAUGE, "Device memory in total.");
  for (size_t i = 0; i < s->ndevices; i++) {
    const metrics_device *d = &s->devices[i];
    prom_gauge_u64(w, metrics_labels(s, d->labels), NULL, 0, d->total_bytes);
  }
  prom_family(w, "gpupool_device_memory_free_bytes", PROM_GAUGE,
              "Free device memory (cudaMemGetInfo at the last sample; only for devices the "
              "application has a context on).");
  for (size_t i = 0; i < s->ndevices; i++) {
    const metrics_device *d = &s->devices[i];
    if (d->free_known)
      prom_gauge_u64(w, metrics_labels(s, d->labels), NULL, 0, d->free_bytes);
  }
}
