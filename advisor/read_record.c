/* GPUPOOL_RECORD files (torch/torch_allocator.c writes them; the format is
 * bench/trace_file.h's): one event a line,
 *   a <id> <size> <stream>   an allocation of <size> requested bytes
 *   f <id>                   its free
 *   r <id> <stream>          record_stream of the live allocation <id>
 * numbers decimal or 0x-hex ("(nil)" is 0, as glibc prints a NULL %p);
 * blank lines and lines starting with '#' are skipped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "readers.h"

static int parse_u64(const char *s, uint64_t *out) {
  if (!s)
    return -1;
  if (!strcmp(s, "(nil)")) {
    *out = 0;
    return 0;
  }
  char *end;
  errno = 0;
  if (*s == '-' || *s == '+')
    return -1;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end)
    return -1;
  *out = v;
  return 0;
}

gpupool_status read_record(FILE *f, const char *path, gpupool_history **out) {
  gpupool_history *h = hist_new(path, "record");
  if (!h)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
  char *line = NULL, err[160];
  size_t cap = 0, lineno = 0;
  ssize_t len;
  gpupool_status st = GPUPOOL_OK;
  while ((len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    if ((size_t)len != strlen(line)) {
      st = pool_fail(GPUPOOL_ERR_INVALID, "%s:%zu: a NUL byte in the line", path, lineno);
      break;
    }
    char *save, *tok[5] = {0};
    int n = 0;
    for (char *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save))
      if (n < 5)
        tok[n++] = t;
      else
        n++;
    if (n == 0 || tok[0][0] == '#')
      continue;
    uint64_t id, size, stream;
    int bad = 0;
    if (!strcmp(tok[0], "a")) {
      if (n != 4 || parse_u64(tok[1], &id) || parse_u64(tok[2], &size) ||
          parse_u64(tok[3], &stream) || size == 0)
        bad = 1;
      else if (hist_alloc(h, id, size, stream, err, sizeof err)) {
        st = pool_fail(GPUPOOL_ERR_INVALID, "%s:%zu: %s", path, lineno, err);
        break;
      }
    } else if (!strcmp(tok[0], "f")) {
      if (n != 2 || parse_u64(tok[1], &id))
        bad = 1;
      else if (hist_free(h, id) < 0)
        goto oom;
    } else if (!strcmp(tok[0], "r")) {
      if (n != 3 || parse_u64(tok[1], &id) || parse_u64(tok[2], &stream))
        bad = 1;
      else if (hist_record_stream(h, id, stream) < 0)
        goto oom;
    } else {
      bad = 1;
    }
    if (bad) {
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s:%zu: expected 'a <id> <size> <stream>', 'f <id>' or 'r <id> <stream>' "
                     "(size > 0, unsigned numbers)",
                     path, lineno);
      break;
    }
  }
  if (st == GPUPOOL_OK && ferror(f))
    st = pool_fail(GPUPOOL_ERR_INVALID, "%s:%zu: read error", path, lineno + 1);
  if (st == GPUPOOL_OK && h->n_ops == 0)
    st = pool_fail(GPUPOOL_ERR_INVALID, "%s: no allocation events", path);
  free(line);
  if (st != GPUPOOL_OK) {
    gpupool_history_free(h);
    return st;
  }
  hist_finish(h);
  *out = h;
  return GPUPOOL_OK;
oom:
  free(line);
  gpupool_history_free(h);
  return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s:%zu: out of host memory", path, lineno);
}
