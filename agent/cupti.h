/* CUPTI memory activity: every CUDA allocation in the process, not only the
 * pools'. CUPTI and the driver are opened with dlopen, so everything here
 * degrades (up = 0, with a reason) on machines without them. */
#ifndef GPUPOOL_CUPTI_H
#define GPUPOOL_CUPTI_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool/agent.h"
#include "pool/event_ring.h"

/* Starts the subscriber per mode. Returns GPUPOOL_OK also when it degrades in
 * AUTO mode (see cupti_get_metrics: up = 0 and reason); in FORCE mode a
 * failure is returned. Never aborts, never creates a CUDA context. */
gpupool_status cupti_start(gpupool_cupti_mode mode);
/* Forced flush, disable, unsubscribe (the hand-over to another profiler). */
void cupti_stop(void);
/* cupti_stop, then cuptiFinalize, so that another tool (PyTorch's profiler)
 * starts from a clean CUPTI; reason "released". Call it where no other thread
 * is inside a CUDA call (see docs/cupti.md). cupti_start takes CUPTI back. */
void cupti_handover(void);
/* Decode what CUPTI holds now (cuptiActivityFlushAll(0) on the caller's
 * thread; no lock held across it). A no-op when not recording. */
void cupti_flush(void);

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

/* Copy of the current numbers; safe from any thread (the scrape). */
void cupti_get_metrics(cupti_metrics *out);

/* CUPTI-observed allocations for the trace: a ring of pool_event (EV_ALLOC /
 * EV_FREE with addr, size, stream (CUPTI's stream id, 0 for synchronous
 * calls), flags; a = memory kind, b = device (-1 as uint64 when none)).
 * Takes a reference; NULL when CUPTI never recorded in this process. After
 * cupti_stop the ring keeps what was recorded (the stop's forced flush
 * included), so a trace written after the stop still has it. */
event_ring *cupti_event_ring(void);
/* pool_event.flags of CUPTI events, beside event_ring.h's EVF_* bits. */
enum {
  CUPTI_EVF_POOL = 8,     /* inside a gpupool segment (owner "pool") */
  CUPTI_EVF_ASYNC = 16,   /* stream-ordered (cudaMallocAsync / cudaFreeAsync) */
  CUPTI_EVF_UNKNOWN = 32, /* a release of an address never seen allocated */
};

const char *cupti_memory_kind_name(int kind); /* "device", "pinned", "managed", ... */

#endif
