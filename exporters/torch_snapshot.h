/* PyTorch's memory snapshot (torch.cuda.memory._snapshot()) as a pickle, so
 * that torch.cuda._memory_viz and the memory_viz page open gpupool's data.
 * A pure renderer: captures in, bytes out; no globals, no I/O.
 *
 * The pickle is protocol 4 (memory_viz's JavaScript reader refuses 5): a dict
 * with `segments` (device, address, total_size, allocated_size, active_size,
 * requested_size, stream, segment_type 'large'|'small', segment_pool_id (0, 0),
 * is_expandable, frames [], blocks tiling the segment in address order: size,
 * requested_size, address, state, frames []) and `device_traces` (one list
 * per device up to the highest captured: action, addr, size, stream, time_us,
 * frames [], and device_free for 'oom'), built from the pools' event rings.
 * A capture that was truncated contributes its segments but no trace (its
 * events could fall in segments left out). Integers are clamped to int64. */
#ifndef GPUPOOL_TORCH_SNAPSHOT_H
#define GPUPOOL_TORCH_SNAPSHOT_H

#include <stddef.h>

#include "pool/pool_capture.h"

/* The pickle of n captures (several pools, any devices); malloc'd, *len
 * bytes; NULL when out of memory. */
char *torch_snapshot_pickle(const pool_capture *const *caps, size_t n, size_t *len);

#endif
