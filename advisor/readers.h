/* The history readers, one per input format (history.h builds the result).
 * Each returns GPUPOOL_ERR_INVALID with gpupool_last_error() naming the path
 * and the line or byte offset of the first problem, or GPUPOOL_ERR_HOST_OOM
 * ("out of host memory") when an allocation fails, the parser's included. */
#ifndef GPUPOOL_ADVISOR_READERS_H
#define GPUPOOL_ADVISOR_READERS_H

#include <stdio.h>

#include "history.h"

/* The UTF-8 byte-order mark, which gpupool_history_load skips at the start
 * of a text input (a JSON document, a record file): anywhere else it is
 * malformed input. */
#define UTF8_BOM     "\xEF\xBB\xBF"
#define UTF8_BOM_LEN 3

/* first_line: the lines already read from f (a caller that skipped a
 * byte-order mark and blank lines to find the format), so that errors name
 * the file's own line; device: the device whose history to read (decimal), NULL: the busiest. */
gpupool_status read_record(FILE *f, const char *path, size_t first_line, const char *device,
                           gpupool_history **out);
/* buf holds the whole document (len bytes), its first `marked` bytes spaces
 * in place of a byte-order mark the file began with (0: none), so that an
 * error's "byte N" is the file's byte N, the mark counted. */
gpupool_status read_trace(const char *buf, size_t len, size_t marked, const char *path,
                          const char *pool, gpupool_history **out);
gpupool_status read_torch(const unsigned char *buf, size_t len, const char *path,
                          const char *device, gpupool_history **out);

#endif
