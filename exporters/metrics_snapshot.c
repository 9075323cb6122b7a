/* The pure accessors of a collected metrics_snapshot (agent/metrics_collect.c
 * fills it). */
#include "metrics_snapshot.h"

#include <stdlib.h>

const char *metrics_device_uuid(const metrics_snapshot *s, int ordinal, int simulated) {
  for (size_t i = 0; i < s->ndevices; i++)
    if (s->devices[i].ordinal == ordinal && s->devices[i].simulated == simulated)
      return s->devices[i].uuid;
  return "";
}

const char *metrics_labels(const metrics_snapshot *s, size_t off) {
  return s->label_text.data ? s->label_text.data + off : "";
}

void metrics_snapshot_free(metrics_snapshot *s) {
  free(s->pools);
  s->pools = NULL;
  s->npools = s->pools_cap = 0;
  prom_buf_free(&s->label_text);
}
