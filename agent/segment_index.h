/* Where gpupool's segments lie in the device address space, so that the CUPTI
 * decoder can tell memory held by a pool (owner "pool") from memory anyone
 * else allocated (owner "other").
 *
 * While CUPTI records, the pool reports to segment_index_observe (a segment
 * observer) on its slow path, right after a device allocation succeeded
 * (alive = 1) and right before it frees one (alive = 0); registering the
 * observer reports the segments the pools already hold.
 * The call takes a write lock on a sorted array for a binary search and a
 * memmove, never calls CUDA and never blocks on I/O; it is safe with the
 * pool's own locks held (this module takes no pool lock). Fork-safe: the
 * lock is held across fork() (pthread_atfork), so a child finds it usable.
 *
 * Ordering: the pool's cudaMalloc produces a CUPTI record before the pool can
 * note the segment, but records are decoded later (at the next flush), by
 * which time the segment is known. The corner cases:
 * - a flush lands between the device call and the note: the decoder has
 *   already counted the allocation as "other"; the note moves its live bytes
 *   to "pool" (the listener below), the allocation counter stays where it was;
 * - a segment freed before its allocation record is decoded: while CUPTI
 *   records, a freed segment is kept as "dead" with the time it died, and a
 *   record stamped before that time still counts as the pool's; dead entries
 *   are dropped once a flush that began after their death has completed;
 * - an allocation of another allocator that was made and freed at an address
 *   a pool segment took later, all within one flush period, is counted as the
 *   pool's at its allocation (its release balances the live bytes again). */
#ifndef GPUPOOL_SEGMENT_INDEX_H
#define GPUPOOL_SEGMENT_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "pool/segment_observers.h"

/* [addr, addr + size) became a gpupool segment (alive = 1) or stops being one
 * (alive = 0). device is the CUDA ordinal (unified addressing makes the
 * address alone decide; device is accepted for the record of the caller). */
void cupti_note_segment(uint64_t addr, uint64_t size, int device, int alive);

/* 1 when addr lies in a live gpupool segment, or in one that died after
 * ts_ns (a CLOCK_REALTIME nanosecond timestamp, as CUPTI's). */
int segment_index_contains(uint64_t addr, uint64_t ts_ns);

/* While on (CUPTI records), freed segments are kept as dead until purged;
 * turning it off drops every dead segment. */
void segment_index_retain_dead(int on);
/* Drops dead segments that died before before_ns. */
void segment_index_purge(uint64_t before_ns);

/* Called (outside the index lock) after each new segment is noted. */
typedef void (*segment_index_listener)(uint64_t addr, uint64_t size);
void segment_index_set_listener(segment_index_listener fn);

/* Drops every segment (the pools stopped reporting to the index). */
void segment_index_clear(void);

/* The pool's segment observer (pool/segment_observers.h) that keeps the
 * index: registered while CUPTI records, so that without CUPTI a segment
 * change costs the pool nothing. */
void segment_index_observe(void *arg, const segment_change *c);

/* Live and dead segments held (for tests and diagnostics). */
size_t segment_index_live_count(void);
size_t segment_index_dead_count(void);

#endif
