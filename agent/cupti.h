/* CUPTI memory activity: every CUDA allocation in the process, not only the
 * pools'. CUPTI and the driver are opened with dlopen, so everything here
 * degrades (up = 0, with a reason) on machines without them. */
#ifndef GPUPOOL_CUPTI_H
#define GPUPOOL_CUPTI_H

#include <stddef.h>
#include <stdint.h>

#include "exporters/cupti_data.h"
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

/* Copy of the current numbers; safe from any thread (the scrape). */
void cupti_get_metrics(cupti_metrics *out);

/* CUPTI-observed allocations for the trace: a ring of pool_event (EV_ALLOC /
 * EV_FREE with addr, size, stream (CUPTI's stream id, 0 for synchronous
 * calls), flags; a = memory kind, b = device (-1 as uint64 when none)).
 * Takes a reference; NULL when CUPTI never recorded in this process. After
 * cupti_stop the ring keeps what was recorded (the stop's forced flush
 * included), so a trace written after the stop still has it. */
event_ring *cupti_event_ring(void);

#endif
