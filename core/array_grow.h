/* Growth of arrays that double as they fill: the exporters' output buffers,
 * the snapshot's tables, the advisor's histories. */
#ifndef GPUPOOL_ARRAY_GROW_H
#define GPUPOOL_ARRAY_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Makes *v (room for *cap items of item bytes) hold at least need items,
 * doubling from first_cap. 0, or -1 with *v and *cap unchanged when memory
 * runs out or the size in bytes would not fit a size_t. */
static inline int array_grow(void **v, size_t *cap, size_t need, size_t item, size_t first_cap) {
  if (need <= *cap)
    return 0;
  size_t c = *cap ? *cap : first_cap;
  while (c < need) {
    if (c > SIZE_MAX / 2)
      return -1;
    c *= 2;
  }
  if (c > SIZE_MAX / item)
    return -1;
  void *nv = realloc(*v, c * item);
  if (!nv)
    return -1;
  *v = nv;
  *cap = c;
  return 0;
}

#endif
