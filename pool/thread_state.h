/* What the pool keeps per thread, in one thread-local struct so that
 * gpupool_malloc looks up thread-local storage once: the shard the thread
 * allocated from last (a hint for where its frees find their blocks) and its
 * allocation tag (gpupool_tag_push). */
#ifndef GPUPOOL_THREAD_STATE_H
#define GPUPOOL_THREAD_STATE_H

#include <stdint.h>

#include "types.h"

/* The name of tag id (static storage), NULL for 0. */
const char *pool_tag_name(unsigned id);

extern _Thread_local pool_thread_state pool_thread __attribute__((visibility("hidden")));

#endif
