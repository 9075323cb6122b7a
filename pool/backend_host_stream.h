/* The host backend's simulated streams and events. A stream counts work
 * enqueued and work completed; an event captures the enqueued count when it
 * is recorded and is complete once the completed count reaches it. The
 * public side (gpupool_host_stream_*) is declared in gpupool/host.h. */
#ifndef GPUPOOL_BACKEND_HOST_STREAM_H
#define GPUPOOL_BACKEND_HOST_STREAM_H

#include "gpupool/gpupool.h"

/* Records an event on stream. NULL, or a pointer that is not a live host
 * stream (a real cudaStream_t, a destroyed stream), gives an event that is
 * always complete. GPUPOOL_ERR_BACKEND only when memory runs out. */
gpupool_status host_stream_event_record(void *stream, void **event);
/* 1 when complete, 0 when pending; never blocks. */
int host_stream_event_query(void *event);
void host_stream_event_destroy(void *event);
/* Completes all work enqueued so far on every live host stream. */
void host_stream_complete_all(void);

#endif
