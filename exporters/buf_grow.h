/* Growth of the exporters' output buffers (prom_buf, json_buf). */
#ifndef GPUPOOL_BUF_GROW_H
#define GPUPOOL_BUF_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Makes *data (capacity *cap) hold at least need bytes, doubling from
 * first_cap. 0, or -1 with *data and *cap unchanged when memory runs out. */
static inline int buf_grow(char **data, size_t *cap, size_t need, size_t first_cap) {
  size_t c = *cap ? *cap : first_cap;
  while (c < need) {
    if (c > SIZE_MAX / 2)
      return -1;
    c *= 2;
  }
  char *d = realloc(*data, c);
  if (!d)
    return -1;
  *data = d;
  *cap = c;
  return 0;
}

#endif
