/* Segments: a device allocation (or, for a large segment of an expandable
 * pool, an address range whose pages pages.h maps) that a shard's blocks
 * tile. Creating and returning one, with the device call's timing, the
 * segment observers and the segment events. Callers hold p->slow_lock and
 * no shard lock. */
#ifndef GPUPOOL_SEGMENT_H
#define GPUPOOL_SEGMENT_H

#include "pool_internal.h"
#include "pool_view.h"

/* The device's memory, asked once (cached in p->device_total; 0 when the
 * backend cannot say). Not remembered as a device reading for OOM reports:
 * asked at the first slow path, it would be a stale one by then. */
size_t segment_device_total(gpupool *p);
/* The device's memory if the pool has asked already, else 0: no device
 * call, from any thread (the agent's advice sizes its replays with it). */
size_t segment_device_total_known(const gpupool *p);
/* memory_fraction's cap on the pool's reserved bytes (the fraction of
 * segment_device_total), SIZE_MAX when no fraction is set or the device's
 * size is unknown. Under the slow lock. */
size_t segment_reserved_limit(gpupool *p);
/* The same from the device's size the pool knows already (no device call,
 * any thread): SIZE_MAX also before the pool asked for it. */
size_t segment_reserved_limit_known(const gpupool *p);
/* A new segment of size bytes for shard sh, as one free block; not yet in
 * the shard (shard_add_segment). *unreserved: on GPUPOOL_ERR_OOM from an
 * expandable pool, the bytes of the address range that could not be
 * reserved (the address space ran out, not the device); else 0. */
gpupool_status segment_create(gpupool *p, shard *sh, size_t size, int large, segment **out,
                              size_t *unreserved);
/* Returns a segment's memory to the device and frees the struct (not its
 * blocks); for shard_destroy and segment_create's failure. No event. */
void segment_free_memory(gpupool *p, segment *seg);
/* Returns seg (fully free, already detached from its shard) to the device
 * with its event, and frees its block. still_held: the bytes of segments
 * detached with seg (so off the reserved statistic already) that are
 * destroyed after it: the event's reserved-after counts them. */
void segment_destroy(gpupool *p, segment *seg, size_t still_held);
/* When a segment event happened: its stamp and its number (pool_event.seq),
 * taken together. A segment free's is taken before its device call: once the
 * call returns, another pool (or stream) can take the address and write its
 * segment alloc first, and readers must still put the free first. */
typedef struct segment_event_mark {
  uint64_t stamp, seq;
} segment_event_mark;
segment_event_mark segment_event_mark_now(void);
/* A segment event (EV_SEGMENT_*) on sh's track, with the pool's reserved and
 * allocated bytes after it; takes sh's lock. mark: NULL, now. uncounted:
 * bytes held from the device after the event that the reserved statistic
 * does not count at that moment (a segment created, added to its shard
 * after the event; segments detached in one batch and not destroyed yet). */
void segment_emit_event(gpupool *p, shard *sh, int type, int flags, uintptr_t addr, size_t size,
                        uint64_t dur, const segment_event_mark *mark, size_t uncounted);
/* seg as readers see it (pool_view.h): its info, and its seg->nblocks
 * blocks in address order into blocks. A block's alloc_ns is still the raw
 * clock_stamp() (0: unknown), for the caller to convert with
 * clock_stamp_to_ns once it holds no spinlock. Under seg's shard lock. */
void segment_describe(const segment *seg, pool_segment_info *info, pool_block_info *blocks);

#endif
