/* Sharing blocks with other processes (include/gpupool/share.h): what the
 * pool's own calls need to know about exported blocks. An exported block is
 * taken out of its shard's live map while it is exported, so gpupool_free
 * and gpupool_record_stream find it only here, off their fast paths. */
#ifndef GPUPOOL_SHARE_INTERNAL_H
#define GPUPOOL_SHARE_INTERNAL_H

#include "gpupool/gpupool.h"

/* Whether ptr is a block of p exported to another process; if so *st is the
 * outcome of the call (`call`: "gpupool_free" or "gpupool_record_stream"):
 * a free is deferred to the end of the export (OK; a second one is
 * GPUPOOL_ERR_INVALID), recording a stream is refused (GPUPOOL_ERR_INVALID). */
int share_claims(gpupool *p, void *ptr, const char *call, gpupool_status *st);

/* p is being destroyed: its exports are orphaned (their wait ends them). */
void share_pool_destroyed(gpupool *p);

#endif
