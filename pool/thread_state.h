/* What the pool keeps per thread, in one thread-local struct so that
 * gpupool_malloc looks up thread-local storage once: the shard the thread
 * allocated from last (a hint for where its frees find their blocks) and its
 * allocation tag (gpupool_tag_push). */
#ifndef GPUPOOL_THREAD_STATE_H
#define GPUPOOL_THREAD_STATE_H

#include <stdint.h>

#include "gpupool/tag.h"

struct gpupool;
struct shard;

/* Tag ids: 0 is "no tag", 1 .. GPUPOOL_TAG_MAX - 1 the named tags in the
 * order the process first used them, GPUPOOL_TAG_MAX "other". */
#define POOL_TAG_SLOTS (GPUPOOL_TAG_MAX + 1)
#define POOL_TAG_OTHER GPUPOOL_TAG_MAX

typedef struct pool_thread_state {
  const struct gpupool *pool;
  uint32_t id; /* a pool created where a destroyed one was is another pool */
  struct shard *sh;
  uint8_t tag;   /* current tag id */
  uint8_t depth; /* pushed tags */
  uint8_t stack[GPUPOOL_TAG_DEPTH];
} pool_thread_state;

/* The name of tag id (static storage), NULL for 0. */
const char *pool_tag_name(unsigned id);

extern _Thread_local pool_thread_state pool_thread __attribute__((visibility("hidden")));

#endif
