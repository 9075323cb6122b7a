/* Allocation trace parser; see trace_file.h. Live ids are kept in a POSIX
 * binary search tree (tsearch), mapping id -> slot; tdestroy is a GNU
 * extension (the build defines _GNU_SOURCE). */
#include <errno.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_file.h"

#define MAX_STREAMS 65535

typedef struct live_id {
  uint64_t id;
  uint32_t slot;
} live_id;

static int cmp_live(const void *a, const void *b) {
  uint64_t x = ((const live_id *)a)->id, y = ((const live_id *)b)->id;
  return (x > y) - (x < y);
}

typedef struct parser {
  trace *t;
  size_t cap_ops, cap_slots;
  int cap_streams;
  void *live; /* tsearch root */
  uint64_t live_bytes;
} parser;

static int parse_u64(const char *s, uint64_t *out) {
  if (!s)
    return -1;
  if (!strcmp(s, "(nil)")) { /* glibc's %p of NULL */
    *out = 0;
    return 0;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end || *s == '-')
    return -1;
  *out = v;
  return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0;
  size_t n = *cap ? *cap * 2 : 4096;
  while (n < need)
    n *= 2;
  void *q = realloc(*p, n * elem);
  if (!q)
    return -1;
  *p = q;
  *cap = n;
  return 0;
}

static int push_op(parser *ps, uint32_t slot, uint8_t is_alloc) {
  trace *t = ps->t;
  if (grow((void **)&t->ops, &ps->cap_ops, t->n_ops + 1, sizeof *t->ops))
    return -1;
  t->ops[t->n_ops++] = (trace_op){slot, is_alloc};
  return 0;
}

/* Both per-slot arrays grow together, to the same capacity. */
static int grow_slots(parser *ps, size_t need) {
  trace *t = ps->t;
  size_t cap_size = ps->cap_slots;
  if (grow((void **)&t->slot_size, &cap_size, need, sizeof *t->slot_size))
    return -1;
  if (grow((void **)&t->slot_stream, &ps->cap_slots, need, sizeof *t->slot_stream))
    return -1;
  return 0;
}

static int stream_index(parser *ps, uint64_t stream) {
  trace *t = ps->t;
  for (int i = 0; i < t->n_streams; i++)
    if (t->streams[i] == stream)
      return i;
  if (t->n_streams == MAX_STREAMS)
    return -1;
  size_t cap = (size_t)ps->cap_streams;
  if (grow((void **)&t->streams, &cap, (size_t)t->n_streams + 1, sizeof *t->streams))
    return -1;
  ps->cap_streams = (int)cap;
  t->streams[t->n_streams] = stream;
  return t->n_streams++;
}

/* 0, or -1 with a reason. */
static int on_alloc(parser *ps, uint64_t id, uint64_t size, uint64_t stream, const char **why) {
  trace *t = ps->t;
  if (size == 0) {
    *why = "size 0";
    return -1;
  }
  live_id key = {id, 0};
  if (tfind(&key, &ps->live, cmp_live)) {
    *why = "allocation of an id that is already live";
    return -1;
  }
  int si = stream_index(ps, stream);
  if (si < 0) {
    *why = "too many streams";
    return -1;
  }
  size_t slot = t->n_allocs;
  if (slot >= UINT32_MAX) {
    *why = "too many allocations";
    return -1;
  }
  live_id *node = malloc(sizeof *node);
  if (!node || grow_slots(ps, slot + 1) || push_op(ps, (uint32_t)slot, 1)) {
    free(node);
    *why = "out of memory";
    return -1;
  }
  *node = (live_id){id, (uint32_t)slot};
  if (!tsearch(node, &ps->live, cmp_live)) {
    free(node);
    *why = "out of memory";
    return -1;
  }
  t->slot_size[slot] = size;
  t->slot_stream[slot] = (uint16_t)si;
  t->n_allocs++;
  t->total_requested += size;
  if (size > t->max_size)
    t->max_size = size;
  ps->live_bytes += size;
  if (ps->live_bytes > t->peak_requested)
    t->peak_requested = ps->live_bytes;
  return 0;
}

static int on_free(parser *ps, uint64_t id, const char **why) {
  trace *t = ps->t;
  live_id key = {id, 0};
  live_id **found = tfind(&key, &ps->live, cmp_live);
  if (!found) {
    t->n_unmatched_frees++;
    return 0;
  }
  live_id *node = *found;
  uint32_t slot = node->slot;
  tdelete(&key, &ps->live, cmp_live);
  free(node);
  if (push_op(ps, slot, 0)) {
    *why = "out of memory";
    return -1;
  }
  t->n_frees++;
  ps->live_bytes -= t->slot_size[slot];
  return 0;
}

int trace_load(const char *path, trace *t, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  parser ps = {.t = t};
  char line[512];
  size_t lineno = 0;
  int rc = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char *save = NULL;
    char *kind = strtok_r(line, " \t\r\n", &save);
    if (!kind || kind[0] == '#')
      continue;
    char *a1 = strtok_r(NULL, " \t\r\n", &save);
    char *a2 = strtok_r(NULL, " \t\r\n", &save);
    char *a3 = strtok_r(NULL, " \t\r\n", &save);
    char *extra = strtok_r(NULL, " \t\r\n", &save);
    const char *why = NULL;
    uint64_t id, size, stream;
    if (!strcmp(kind, "a") && !extra && !parse_u64(a1, &id) && !parse_u64(a2, &size) &&
        !parse_u64(a3, &stream)) {
      if (on_alloc(&ps, id, size, stream, &why) == 0)
        continue;
    } else if (!strcmp(kind, "f") && !a2 && !parse_u64(a1, &id)) {
      if (on_free(&ps, id, &why) == 0)
        continue;
    } else if (!strcmp(kind, "r") && !a3 && !parse_u64(a1, &id) && !parse_u64(a2, &stream)) {
      continue; /* record_stream: only the advisor replays it (streams are keys here) */
    } else {
      why = "expected \"a <id> <size> <stream>\" or \"f <id>\"";
    }
    snprintf(err, errlen, "%s:%zu: %s", path, lineno, why);
    rc = -1;
    break;
  }
  if (rc == 0 && ferror(f)) {
    snprintf(err, errlen, "%s: read error", path);
    rc = -1;
  }
  fclose(f);
  t->n_live_at_end = t->n_allocs - t->n_frees;
  tdestroy(ps.live, free);
  if (rc)
    trace_release(t);
  return rc;
}

void trace_release(trace *t) {
  free(t->ops);
  free(t->slot_size);
  free(t->slot_stream);
  free(t->streams);
  memset(t, 0, sizeof *t);
}
