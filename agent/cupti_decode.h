/* The CUPTI record decoder: turns MEMORY2 (CUpti_ActivityMemory4) and
 * MEMORY_POOL (CUpti_ActivityMemoryPool3) records into the live-allocation
 * map, the per-device counters of cupti_metrics and the CUPTI event ring.
 * It makes no CUPTI or CUDA call and does no I/O, so it runs inside CUPTI's
 * buffer-completion callback and on records built by hand in tests.
 * Thread-safe: one short mutex, taken per batch of records and per read;
 * never held across a CUPTI call (the caller iterates the buffer first). */
#ifndef GPUPOOL_CUPTI_DECODE_H
#define GPUPOOL_CUPTI_DECODE_H

#ifdef GPUPOOL_HAVE_CUDA
#include <cupti_activity.h>

#include "cupti.h"
#include "pool/event_ring.h"

/* Nonzero when addr lies in a gpupool segment at ts_ns (segment_index.h's
 * segment_index_contains in production). Called with the decoder's lock held. */
typedef int (*cupti_pool_owns_fn)(uint64_t addr, uint64_t ts_ns);

typedef struct cupti_decoder cupti_decoder;

/* live_entries: allocations tracked at once (more are counted as overflow);
 * ring_events: capacity of the event ring. NULL when out of memory. */
cupti_decoder *cupti_decoder_create(size_t live_entries, size_t ring_events,
                                    cupti_pool_owns_fn pool_owns);
void cupti_decoder_destroy(cupti_decoder *d);

/* Decodes n records (kinds other than MEMORY2 and MEMORY_POOL are counted
 * and skipped). Records are read, never kept. */
void cupti_decoder_records(cupti_decoder *d, const CUpti_Activity *const *records, size_t n);

/* A gpupool segment now starts at addr: if an allocation decoded there was
 * counted as "other" (a flush between the pool's device call and its note),
 * its live bytes move to "pool". */
void cupti_decoder_claim(cupti_decoder *d, uint64_t addr);

/* Forgets every live allocation and mempool (at stop: releases are no longer
 * observed); the counters stay. */
void cupti_decoder_clear_live(cupti_decoder *d);

/* Fills records_total, unknown_releases_total, live_map_overflow_total,
 * ndevices and devices (ascending by device, -1 first); leaves the rest. */
void cupti_decoder_read(cupti_decoder *d, cupti_metrics *out);

/* Live allocations tracked now. */
size_t cupti_decoder_live_count(cupti_decoder *d);

/* The event ring (a new reference). */
event_ring *cupti_decoder_ring(cupti_decoder *d);

/* Fork: cupti.c's pthread_atfork handlers keep the lock consistent. */
void cupti_decoder_lock(cupti_decoder *d);
void cupti_decoder_unlock(cupti_decoder *d);
void cupti_decoder_reinit_lock(cupti_decoder *d);
#endif

#endif
