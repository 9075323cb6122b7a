/* How each strategy rounds a request and sizes the device segment for it. */
#ifndef GPUPOOL_SIZECLASS_H
#define GPUPOOL_SIZECLASS_H

#include <stddef.h>

#include "conf.h"

#define SMALL_SIZE      ((size_t)1 << 20) /* requests up to 1 MiB use the small pool */
#define SMALL_SEGMENT   ((size_t)2 << 20)
#define LARGE_SEGMENT   ((size_t)20 << 20)
#define MIN_LARGE_ALLOC ((size_t)10 << 20)
#define ROUND_LARGE     ((size_t)2 << 20)
#define MIN_BLOCK       512
#define NAIVE_PAGE      4096

/* The block size a request of `size` bytes gets. */
size_t size_round(const pool_config *c, size_t size);
/* The device segment allocated when no cached block fits `rounded`. */
size_t size_segment(const pool_config *c, size_t rounded);
static inline int size_is_large(size_t rounded) {
  return rounded > SMALL_SIZE;
}

#endif
