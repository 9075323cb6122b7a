/* The history readers, one per input format (history.h builds the result).
 * Each returns GPUPOOL_ERR_INVALID with gpupool_last_error() naming the path
 * and the line or byte offset of the first problem, or GPUPOOL_ERR_HOST_OOM
 * ("out of host memory") when an allocation fails, the parser's included. */
#ifndef GPUPOOL_ADVISOR_READERS_H
#define GPUPOOL_ADVISOR_READERS_H

#include <stdio.h>

#include "history.h"

gpupool_status read_record(FILE *f, const char *path, gpupool_history **out);
/* buf holds the whole document (len bytes). */
gpupool_status read_trace(const char *buf, size_t len, const char *path, const char *pool,
                          gpupool_history **out);
gpupool_status read_torch(const unsigned char *buf, size_t len, const char *path,
                          const char *device, gpupool_history **out);

#endif
