#include "metrics_collect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_info.h"
#include "exporters/prom_writer.h"
#include "pool_label.h"
#include "sampler_backend.h"
#include "core/array_grow.h"
#include "pool/backend.h"
#include "pool/registry.h"
#include "pool/segment.h"

_Static_assert(METRICS_DEVICE_MAX == DEVICE_INFO_MAX, "a snapshot holds every device");
_Static_assert(METRICS_UUID_MAX >= DEVICE_UUID_MAX, "a snapshot holds every UUID");
_Static_assert(METRICS_NAME_MAX == POOL_LABEL_MAX, "a snapshot holds the pool label whole");

static void copy_name(char *dst, size_t n, const char *src) {
  size_t len = 0;
  while (src && len + 1 < n && src[len])
    len++;
  memcpy(dst, src ? src : "", len);
  dst[len] = '\0';
}

typedef struct collect_ctx {
  metrics_snapshot *s;
  pool_labeler labeler;
} collect_ctx;

/* Under the registry lock: copies only. */
static void copy_pool(gpupool *p, void *arg) {
  collect_ctx *c = arg;
  metrics_snapshot *s = c->s;
  char label[POOL_LABEL_MAX];
  if (pool_labeler_next(&c->labeler, p, label) != 0)
    return; /* the pool is left out of this scrape */
  if (array_grow((void **)&s->pools, &s->pools_cap, s->npools + 1, sizeof *s->pools, 16) != 0)
    return; /* the pool is left out of this scrape */
  metrics_pool *m = &s->pools[s->npools];
  memset(m, 0, sizeof *m);
  m->id = pool_id(p);
  m->device = gpupool_device(p);
  backend *be = pool_get_backend(p);
  m->simulated = backend_is_host(be);
  memcpy(m->name, label, sizeof m->name);
  copy_name(m->backend, sizeof m->backend, gpupool_backend_name(p));
  copy_name(m->strategy, sizeof m->strategy, gpupool_strategy_name(p));
  if (gpupool_get_stats(p, &m->stats) != GPUPOOL_OK)
    memset(&m->stats, 0, sizeof m->stats);
  pool_get_histogram(p, &m->hist);
  pool_get_device_timing(p, &m->timing);
  m->ntags = gpupool_get_tag_stats(p, m->tags, GPUPOOL_TAG_MAX);
  if (m->ntags < 0)
    m->ntags = 0;

  pool_event_counts(p, &m->events_total, &m->events_dropped);
  size_t limit = segment_reserved_limit_known(p);
  m->reserved_limit = limit == SIZE_MAX ? UINT64_MAX : limit;

  size_t free_bytes, total_bytes;
  if (m->simulated && be->ops->mem_info(be, &free_bytes, &total_bytes) == GPUPOOL_OK) {
    m->sim_total = total_bytes;
    m->sim_free = free_bytes;
  }
  s->npools++;
}

static metrics_device *find_device(metrics_snapshot *s, int ordinal, int simulated) {
  for (size_t i = 0; i < s->ndevices; i++)
    if (s->devices[i].ordinal == ordinal && s->devices[i].simulated == simulated)
      return &s->devices[i];
  return NULL;
}

static void collect_devices(metrics_snapshot *s) {
  device_entry real[DEVICE_INFO_MAX];
  size_t n = device_info_copy(real, DEVICE_INFO_MAX);
  s->ndevices = 0;
  for (size_t i = 0; i < n; i++) {
    metrics_device *d = &s->devices[s->ndevices++];
    d->ordinal = real[i].ordinal;
    d->simulated = 0;
    copy_name(d->uuid, sizeof d->uuid, real[i].uuid);
    copy_name(d->name, sizeof d->name, real[i].name);
    d->total_bytes = real[i].total_bytes;
    d->free_bytes = real[i].free_bytes;
    d->free_known = real[i].free_known;
  }
  /* A simulated device is the sum of the host pools on its ordinal. */
  for (size_t i = 0; i < s->npools; i++) {
    const metrics_pool *m = &s->pools[i];
    if (!m->simulated)
      continue;
    metrics_device *d = find_device(s, m->device, 1);
    if (!d) {
      if (s->ndevices == sizeof s->devices / sizeof s->devices[0])
        continue;
      d = &s->devices[s->ndevices++];
      memset(d, 0, sizeof *d);
      d->ordinal = m->device;
      d->simulated = 1;
      d->free_known = 1;
      snprintf(d->uuid, sizeof d->uuid, "GPU-host-%s-%d", s->hostname, m->device);
      copy_name(d->name, sizeof d->name, "host-simulated");
    }
    d->total_bytes += m->sim_total;
    d->free_bytes += m->sim_free;
  }
}

/* Appends one NUL-terminated run of labels: the given pairs, then
 * hostname and the constant labels. Returns its offset. */
static size_t add_run(metrics_snapshot *s, const prom_label *pairs, size_t n,
                      const char *const_labels) {
  size_t off = s->label_text.len;
  prom_label all[4];
  if (n)
    memcpy(all, pairs, n * sizeof pairs[0]);
  all[n].name = "hostname";
  all[n].value = s->hostname;
  prom_render_labels(&s->label_text, all, n + 1);
  if (*const_labels) {
    prom_buf_putc(&s->label_text, ',');
    prom_buf_puts(&s->label_text, const_labels);
  }
  prom_buf_putc(&s->label_text, '\0');
  return off;
}

static void format_ordinal(char out[16], int ordinal) {
  if (ordinal < 0)
    *out++ = '-';
  *prom_u64_text(out, ordinal < 0 ? 0 - (uint64_t)ordinal : (uint64_t)ordinal) = '\0';
}

static void render_labels(metrics_snapshot *s, const char *const_labels) {
  char ordinal[16];
  s->process_labels = add_run(s, NULL, 0, const_labels);
  for (size_t i = 0; i < s->ndevices; i++) {
    metrics_device *d = &s->devices[i];
    format_ordinal(ordinal, d->ordinal);
    prom_label l[2] = {{"device", ordinal}, {"UUID", d->uuid}};
    d->labels = add_run(s, l, 2, const_labels);
  }
  for (size_t i = 0; i < s->npools; i++) {
    metrics_pool *m = &s->pools[i];
    format_ordinal(ordinal, m->device);
    prom_label l[3] = {{"device", ordinal},
                       {"UUID", metrics_device_uuid(s, m->device, m->simulated)},
                       {"pool", m->name}};
    m->labels = add_run(s, l, 3, const_labels);
  }
}

int metrics_snapshot_take(metrics_snapshot *s, const char *hostname, const char *const_labels) {
  s->npools = 0;
  s->ndevices = 0;
  s->label_text.len = 0;
  s->label_text.failed = 0;
  copy_name(s->hostname, sizeof s->hostname, hostname);
  collect_ctx c = {.s = s};
  registry_foreach(copy_pool, &c);
  pool_labeler_free(&c.labeler);
  for (size_t i = 0; i < s->npools; i++) /* the sampler's reading, outside the registry lock */
    sampler_backend_get(s->pools[i].id, &s->pools[i].backend_info);
  collect_devices(s);
  render_labels(s, const_labels ? const_labels : "");
  return s->label_text.failed ? -1 : 0;
}
