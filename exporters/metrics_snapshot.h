/* What one scrape reads, copied first and written after: every pool's stats,
 * histogram, device timing and event-ring counts, the devices (the
 * sampler's last reading, plus the simulated devices of host pools) and the
 * rendered label sets. agent/metrics_collect.c fills it (no CUDA call); the
 * renderers of exporters/ read it and nothing else. */
#ifndef GPUPOOL_METRICS_SNAPSHOT_H
#define GPUPOOL_METRICS_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool/gpupool.h"
#include "gpupool/tag.h"
#include "pool/pool_view.h"
#include "prom_buf.h"

#define METRICS_NAME_MAX   128
#define METRICS_DEVICE_MAX 64         /* agent/device_info.h's DEVICE_INFO_MAX */
#define METRICS_UUID_MAX   (48 + 280) /* a driver's UUID, or the fake one of a simulated device */

typedef struct metrics_pool {
  uint32_t id;
  int device;
  int simulated;               /* host backend */
  char name[METRICS_NAME_MAX]; /* the pool label: UTF-8, unique per device */
  char backend[16];
  char strategy[16];
  gpupool_stats stats;
  pool_histogram hist;
  pool_device_timing timing;
  pool_backend_info backend_info; /* valid only for cuda_async pools the sampler read */
  uint64_t events_total, events_dropped;
  gpupool_tag_stat tags[GPUPOOL_TAG_MAX]; /* allocated bytes per tag */
  int ntags;
  uint64_t sim_total, sim_free; /* host backend: the simulated device's capacity and free */
  uint64_t reserved_limit;      /* memory_fraction's cap in bytes; UINT64_MAX: none (known) */
  size_t labels; /* offset in label_text: device, UUID, pool, hostname, constant labels */
} metrics_pool;

typedef struct metrics_device {
  int ordinal;
  int simulated;
  char uuid[METRICS_UUID_MAX];
  char name[96];
  uint64_t total_bytes, free_bytes;
  int free_known;
  size_t labels; /* offset in label_text: device, UUID, hostname, constant labels */
} metrics_device;

typedef struct metrics_snapshot {
  metrics_pool *pools;
  size_t npools, pools_cap;
  metrics_device devices[2 * METRICS_DEVICE_MAX]; /* real ones, then simulated ones */
  size_t ndevices;
  prom_buf label_text;   /* NUL-separated label runs */
  size_t process_labels; /* offset: hostname and constant labels */
  char hostname[256];
} metrics_snapshot;

void metrics_snapshot_free(metrics_snapshot *s);

/* The label run at offset off. */
const char *metrics_labels(const metrics_snapshot *s, size_t off);
/* The UUID label of a (device, simulated) pair: the driver's, a stable fake
 * one for host-simulated devices, "" when unknown. */
const char *metrics_device_uuid(const metrics_snapshot *s, int ordinal, int simulated);

#endif
