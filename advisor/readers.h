/* The history readers, one per input format (history.h builds the result).
 * Each returns GPUPOOL_ERR_INVALID with gpupool_last_error() naming the path
 * and the line or byte offset of the first problem, or GPUPOOL_ERR_HOST_OOM
 * ("out of host memory") when an allocation fails, the parser's included. */
#ifndef GPUPOOL_ADVISOR_READERS_H
#define GPUPOOL_ADVISOR_READERS_H

#include <stdio.h>

#include "history.h"

/* first_line: the lines already read from f (a caller that skipped blank
 * lines to find the format), so that errors name the file's own line;
 * device: the device whose history to read (decimal), NULL: the busiest. */
gpupool_status read_record(FILE *f, const char *path, size_t first_line, const char *device,
                           gpupool_history **out);
/* buf holds the whole document (len bytes). */
gpupool_status read_trace(const char *buf, size_t len, const char *path, const char *pool,
                          gpupool_history **out);
gpupool_status read_torch(const unsigned char *buf, size_t len, const char *path,
                          const char *device, gpupool_history **out);

#endif
