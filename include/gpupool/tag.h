/* Allocation tags: what memory is for (weights, activations, kv_cache, ...).
 *
 *   gpupool_tag_push("kv_cache");
 *   ... every gpupool_malloc on this thread is attributed to "kv_cache" ...
 *   gpupool_tag_pop();
 *
 * Tags are per thread and nest. Each pool counts the allocated bytes (block
 * sizes, as gpupool_stats.allocated_bytes) of every tag; the block keeps its
 * tag, so its free is subtracted from the tag it was allocated under, on
 * whichever thread frees it. Cardinality is bounded: the first
 * GPUPOOL_TAG_MAX - 1 distinct names of the process get their own counts,
 * every later name counts as "other". Untagged bytes are the pool's
 * allocated bytes less the sum over tags; pushing "untagged" is pushing no
 * tag (it takes none of the names' counts, and gpupool_tag_current() is
 * NULL under it). */
#ifndef GPUPOOL_TAG_H
#define GPUPOOL_TAG_H

#include "gpupool/gpupool.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPUPOOL_TAG_MAX      16 /* tags counted per process, "other" included */
#define GPUPOOL_TAG_NAME_MAX 63 /* bytes in a name: [A-Za-z0-9_.:/-] */
#define GPUPOOL_TAG_DEPTH    16 /* nesting per thread */

/* Makes tag the current tag of this thread until the matching pop. A bad
 * name (empty, too long, other characters) is GPUPOOL_ERR_INVALID and
 * nesting deeper than GPUPOOL_TAG_DEPTH is GPUPOOL_ERR_UNSUPPORTED; neither
 * changes the current tag. */
gpupool_status gpupool_tag_push(const char *tag);
/* Restores the tag before the last push; GPUPOOL_ERR_INVALID when this
 * thread has nothing pushed. */
gpupool_status gpupool_tag_pop(void);
/* This thread's current tag (as counted: "other" beyond the limit), or NULL
 * when none is set. */
const char *gpupool_tag_current(void);

typedef struct gpupool_tag_stat {
  const char *tag; /* static storage: valid for the life of the process */
  int64_t allocated_bytes;
} gpupool_tag_stat;

/* Fills out[0..max) with every tag the process has used (in the order they
 * were first pushed, then "other" once used) and p's allocated bytes under
 * each, exact at the moment of the call; returns how many were written
 * (at most GPUPOOL_TAG_MAX), or -1 with gpupool_last_error() when p or out
 * is NULL. */
int gpupool_get_tag_stats(gpupool *p, gpupool_tag_stat *out, int max);

#ifdef __cplusplus
}
#endif
#endif
