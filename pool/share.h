/* Sharing blocks with other processes (include/gpupool/share.h): what the
 * pool's own calls need to know about exported blocks. An exported block is
 * taken out of its shard's live map while it is exported, so gpupool_free
 * and gpupool_record_stream find it only here, off their fast paths. */
#ifndef GPUPOOL_SHARE_INTERNAL_H
#define GPUPOOL_SHARE_INTERNAL_H

#include "gpupool/gpupool.h"

/* For gpupool_free (freeing 1) and gpupool_record_stream (freeing 0, and
 * its stream), which did not find ptr live in p: whether ptr is a block of p exported to
 * another process, or one whose export ended while they looked. If so *st is
 * the outcome of the call: a free is counted now (shard_free_held) and the
 * block returns to the pool when the export ends (OK; a second free is
 * GPUPOOL_ERR_INVALID), recording a stream is refused
 * (GPUPOOL_ERR_INVALID); a block back from an export gets the call again. */
int share_claims(gpupool *p, void *ptr, int freeing, void *stream, gpupool_status *st);

/* p is being destroyed: its exports are orphaned (their wait ends them). */
void share_pool_destroyed(gpupool *p);

#endif
