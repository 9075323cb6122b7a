/* Allocation by block, for a pool private to one thread that keeps the
 * blocks it is handed (the advisor's replay): the same path as
 * gpupool_malloc, gpupool_free and gpupool_record_stream, without the map
 * from addresses to live blocks that the pointer API looks them up in. */
#ifndef GPUPOOL_POOL_BLOCKS_H
#define GPUPOOL_POOL_BLOCKS_H

#include "pool_internal.h"

/* From now on p keeps no map of live addresses: its allocations are made
 * and freed only through the calls below. Call before the first one. */
void pool_serve_blocks(gpupool *p);
/* gpupool_malloc, giving the block (its addr is the pointer). */
gpupool_status pool_malloc_block(gpupool *p, size_t size, void *stream, block **out);
/* gpupool_free of a block pool_malloc_block gave. */
void pool_free_block(gpupool *p, block *b);
/* gpupool_record_stream of such a block. */
gpupool_status pool_record_stream_block(block *b, void *stream);

#endif
