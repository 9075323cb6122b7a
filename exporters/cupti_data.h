/* What the agent's CUPTI side collects, as the renderers read it: the
 * per-device numbers of /metrics and the flags of CUPTI events in a trace
 * (agent/cupti.h fills them). */
#ifndef GPUPOOL_CUPTI_DATA_H
#define GPUPOOL_CUPTI_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "pool/event_ring.h"

#define CUPTI_MEMORY_KINDS 8 /* index = CUpti_ActivityMemoryKind (0 unknown .. 7) */
#define CUPTI_MAX_DEVICES  64

typedef struct cupti_device_metrics {
  int device; /* CUDA ordinal; -1 for records without a device */
  /* live bytes by memory kind and owner (0 = pool: inside a gpupool segment, 1 = other);
     what was allocated since CUPTI (re)started and not yet released; 0 after a stop */
  uint64_t live_bytes[CUPTI_MEMORY_KINDS][2];
  uint64_t allocations[CUPTI_MEMORY_KINDS][2]; /* ALLOCATION records seen */
  uint64_t releases[CUPTI_MEMORY_KINDS][2];    /* RELEASE records of tracked allocations
                                                  (others: unknown_releases_total) */
  /* cudaMallocAsync pools (MEMORY_POOL records) */
  uint64_t mempools_created, mempools_destroyed, mempools_trimmed;
  /* sum over the device's live mempools of their latest size / utilized size */
  uint64_t mempool_size_bytes, mempool_utilized_bytes;
} cupti_device_metrics;

typedef struct cupti_metrics {
  int up;                           /* 1 when subscribed and recording */
  const char *reason;               /* static: "ok", "off", "no_driver", "no_device", "no_cupti",
                                       "cupti_too_old", "other_subscriber", "error", "stopped",
                                       "released" (handed over), "forked_child" (a child of the
                                       process that recorded: it never calls CUPTI) */
  uint64_t records_total;           /* activity records decoded */
  uint64_t records_dropped_total;   /* CUPTI's dropped count, accumulated */
  uint64_t unknown_releases_total;  /* releases of addresses never seen allocated */
  uint64_t live_map_overflow_total; /* allocations not tracked: the live map was full */
  uint64_t buffers_exhausted_total; /* buffer requests refused: none was free */
  uint64_t flushes_total;
  size_t ndevices;
  cupti_device_metrics devices[CUPTI_MAX_DEVICES];
} cupti_metrics;

/* pool_event.flags of CUPTI events: bits above event_ring.h's EVF_* ones
 * (EVF_PAGES is 8), so that one event's flags never read as both. */
enum {
  CUPTI_EVF_POOL = 16,    /* inside a gpupool segment (owner "pool") */
  CUPTI_EVF_ASYNC = 32,   /* stream-ordered (cudaMallocAsync / cudaFreeAsync) */
  CUPTI_EVF_UNKNOWN = 64, /* a release of an address never seen allocated */
};
_Static_assert((int)CUPTI_EVF_POOL > (int)EVF_PAGES, "CUPTI flags above the pool's");

const char *cupti_memory_kind_name(int kind); /* "device", "pinned", "managed", ... */

#endif
