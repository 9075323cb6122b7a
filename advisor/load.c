/* gpupool_history_load: picks the reader by name or by content, and
 * gpupool_history_from_pool: the live event rings of a pool. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef GPUPOOL_HAVE_ZLIB
#include <zlib.h>
#endif

#include "core/errors.h"
#include "pool/pool_view.h"
#include "live.h"
#include "readers.h"

#define MAX_DOCUMENT ((size_t)4 << 30) /* traces and snapshots are read whole */

/* The rest of f into *buf (NUL-terminated), after `spaces` spaces. */
static gpupool_status slurp(FILE *f, const char *path, size_t spaces, unsigned char **buf,
                            size_t *len) {
  size_t cap = 1 << 20, n = spaces;
  while (cap < spaces)
    cap *= 2;
  unsigned char *b = malloc(cap + 1);
  if (!b)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
  memset(b, ' ', spaces);
  for (;;) {
    if (n == cap) {
      if (cap >= MAX_DOCUMENT) {
        free(b);
        return pool_fail(GPUPOOL_ERR_INVALID, "%s: larger than %zu bytes", path, MAX_DOCUMENT);
      }
      unsigned char *q = realloc(b, 2 * cap + 1);
      if (!q) {
        free(b);
        return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
      }
      b = q;
      cap *= 2;
    }
    size_t r = fread(b + n, 1, cap - n, f);
    n += r;
    if (r == 0)
      break;
  }
  if (ferror(f)) {
    free(b);
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: read error at byte %zu", path, n);
  }
  b[n] = 0;
  *buf = b;
  *len = n;
  return GPUPOOL_OK;
}

/* Reads a UTF-8 byte-order mark (EF BB BF) at the start of f, where Windows
 * tools and some editors put one before a text: UTF8_BOM_LEN when f began
 * with one (read), 0 when it began with another byte (nothing read), -1
 * with the reason set when it began with EF but not EF BB BF: a broken mark
 * (no JSON document, record line or pickle begins with EF). */
static int skip_bom(FILE *f, const char *path) {
  const unsigned char *mark = (const unsigned char *)UTF8_BOM;
  int c = getc(f);
  if (c != mark[0]) {
    if (c != EOF)
      ungetc(c, f);
    return 0;
  }
  size_t at = 1;
  while (at < UTF8_BOM_LEN && (c = getc(f)) == mark[at])
    at++;
  if (at == UTF8_BOM_LEN)
    return UTF8_BOM_LEN;
  const char *read = at == 1 ? "EF" : "EF BB";
  if (c == EOF)
    pool_fail(GPUPOOL_ERR_INVALID,
              "%s: byte %zu: a broken UTF-8 byte-order mark: the file is %s and ends there (a "
              "mark is EF BB BF)",
              path, at, read);
  else
    pool_fail(GPUPOOL_ERR_INVALID,
              "%s: byte %zu: a broken UTF-8 byte-order mark: the file begins with %s %02X (a "
              "mark is EF BB BF)",
              path, at, read, (unsigned)c);
  return -1;
}

#ifdef GPUPOOL_HAVE_ZLIB
/* A history file read through zlib's gzread, which inflates a gzip'd file
 * (one member or several, as gzip and a gzip'd /trace download write them)
 * and reads any other as it is: wrapped in a FILE (fopencookie), every
 * reader takes either. The first inflate error (a corrupt or truncated
 * member) is kept, for gpupool_history_load to report over whatever the
 * reader made of the bytes before it. */
typedef struct gz_source {
  gzFile gz;
  int fd;            /* the descriptor zlib names the file by ("<fd:N>") */
  uint64_t inflated; /* bytes handed to the reader */
  int err;           /* zlib's code for why: Z_ERRNO, Z_MEM_ERROR or an inflate error */
  char why[160];     /* the first read or inflate error; empty while none */
} gz_source;

static ssize_t gz_source_read(void *cookie, char *buf, size_t size) {
  gz_source *s = cookie;
  int n = gzread(s->gz, buf, size > (1u << 30) ? 1u << 30 : (unsigned)size);
  int err;
  const char *msg = gzerror(s->gz, &err);
  /* a member cut short ends in 0 bytes and Z_BUF_ERROR, not -1 */
  if (n < 0 || (n == 0 && err != Z_OK)) {
    if (!s->why[0]) {
      char prefix[32]; /* zlib's messages begin "<fd:N>: " */
      size_t skip = (size_t)snprintf(prefix, sizeof prefix, "<fd:%d>: ", s->fd);
      snprintf(s->why, sizeof s->why, "%s", strncmp(msg, prefix, skip) == 0 ? msg + skip : msg);
      s->err = err;
    }
    return -1;
  }
  s->inflated += (uint64_t)n;
  return n;
}

static int gz_source_close(void *cookie) {
  gz_source *s = cookie;
  int rc = gzclose(s->gz); /* closes the descriptor */
  free(s);
  return rc == Z_OK ? 0 : EOF;
}

/* Opens path ("-": standard input, whose descriptor is duplicated so that
 * closing leaves it open) for the readers; NULL with errno set when it
 * cannot be opened. *src: the source whose error gpupool_history_load
 * checks. */
static FILE *open_history(const char *path, gz_source **src) {
  *src = NULL;
  int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : dup(STDIN_FILENO);
  if (fd < 0)
    return NULL;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    errno = EISDIR;
    return NULL;
  }
  gz_source *s = calloc(1, sizeof *s);
  gzFile gz = s ? gzdopen(fd, "rb") : NULL;
  if (!gz) {
    free(s);
    close(fd);
    errno = ENOMEM;
    return NULL;
  }
  s->gz = gz;
  s->fd = fd;
  FILE *f = fopencookie(s, "rb",
                        (cookie_io_functions_t){.read = gz_source_read, .close = gz_source_close});
  if (!f) {
    gz_source_close(s);
    errno = ENOMEM;
    return NULL;
  }
  *src = s;
  return f;
}

/* The inflate error of src, where there was one: the history the reader
 * made (of the bytes before it) is dropped and the error is the load's. A
 * reader that stopped at bytes that made no sense to it may have read what
 * a corrupt member inflated to: the rest of a gzip'd file is then read to
 * find its error (at the latest the member's check sum, at its end). */
static gpupool_status inflate_check(gz_source *src, const char *path, gpupool_status st,
                                    gpupool_history **out) {
  if (!src)
    return st;
  if (st != GPUPOOL_OK && !gzdirect(src->gz)) {
    char scratch[4096];
    while (!src->why[0] && src->inflated < MAX_DOCUMENT &&
           gz_source_read(src, scratch, sizeof scratch) > 0)
      ;
  }
  if (!src->why[0])
    return st;
  gpupool_history_free(*out);
  *out = NULL;
  if (src->err == Z_MEM_ERROR) /* zlib's buffers, allocated at the first read */
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory (inflating it)", path);
  if (src->err == Z_ERRNO)
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: read error after %llu bytes: %s", path,
                     (unsigned long long)src->inflated, src->why);
  return pool_fail(GPUPOOL_ERR_INVALID,
                   "%s: a gzip'd file cut short or corrupt (%s) after %llu bytes of its document",
                   path, src->why, (unsigned long long)src->inflated);
}
#else
typedef struct gz_source gz_source;

static FILE *open_history(const char *path, gz_source **src) {
  *src = NULL;
  return strcmp(path, "-") ? fopen(path, "rb") : stdin;
}

static gpupool_status inflate_check(gz_source *src, const char *path, gpupool_status st,
                                    gpupool_history **out) {
  (void)src;
  (void)path;
  (void)out;
  return st;
}
#endif

/* Reads f, whose format fmt is named ('e', 'r', 'o') or 0 (found from the
 * content), after a byte-order mark of `marked` bytes. */
static gpupool_status read_history(FILE *f, const char *path, char fmt, int marked,
                                   const char *pool, gpupool_history **out) {
  size_t skipped = 0, skipped_lines = 0; /* white space read to find the format */
  if (!fmt) {
    int c;
    while ((c = getc(f)) == ' ' || c == '\n' || c == '\r' || c == '\t') {
      skipped++;
      skipped_lines += c == '\n';
    }
    /* after a byte-order mark, text: JSON or a record file */
    fmt = c == 0x80 && !marked ? 'o' : (c == '{' || c == '[') ? 'r' : 'e';
    if (c != EOF)
      ungetc(c, f);
  }
  gpupool_status st;
  if (fmt == 'e') {
    st = read_record(f, path, skipped_lines, pool, out);
  } else {
    unsigned char *buf = NULL;
    size_t len = 0;
    /* a trace gets the byte-order mark and the white space read to find
     * the format back, as spaces, so that the "byte N" of an error is the
     * file's byte N */
    st = slurp(f, path, fmt == 'r' ? (size_t)marked + skipped : 0, &buf, &len);
    if (st == GPUPOOL_OK) {
      st = fmt == 'r' ? read_trace((const char *)buf, len, (size_t)marked, path, pool, out)
                      : read_torch(buf, len, path, pool, out);
      free(buf);
    }
  }
  return st;
}

gpupool_status gpupool_history_load(const char *path, const char *format, const char *pool,
                                    gpupool_history **out) {
  if (!path || !out)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_history_load: %s is NULL",
                     path ? "out" : "path");
  *out = NULL;
  if (format && *format && strcmp(format, "auto") && strcmp(format, "record") &&
      strcmp(format, "trace") && strcmp(format, "torch"))
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "unknown history format '%s' (auto, record, trace or torch)", format);
  gz_source *src;
  FILE *f = open_history(path, &src);
  if (!f)
    return errno == ENOMEM
               ? pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path)
               : pool_fail(GPUPOOL_ERR_INVALID, "%s: cannot open: %s", path, strerror(errno));
  char fmt = format && *format && strcmp(format, "auto") ? format[1] : 0; /* 'e', 'r', 'o' */
  /* The text formats (JSON, record files) may begin with a byte-order mark:
   * skipped, the document read as what follows it. A pickle is binary. */
  int marked = fmt == 'o' ? 0 : skip_bom(f, path);
  gpupool_status st =
      marked < 0 ? GPUPOOL_ERR_INVALID : read_history(f, path, fmt, marked, pool, out);
  st = inflate_check(src, path, st, out);
  if (f != stdin)
    fclose(f);
  return st;
}

/* Orders events by time, then by where they were read (ring by ring, each
 * in its order): a total order, so equal times (events within one tick of
 * the event clock) keep each ring's order, which qsort alone would not. */
static int by_time(const void *a, const void *b, void *arg) {
  const pool_event *ev = arg;
  size_t i = *(const size_t *)a, j = *(const size_t *)b;
  if (ev[i].ts_ns != ev[j].ts_ns)
    return ev[i].ts_ns > ev[j].ts_ns ? 1 : -1;
  return (i > j) - (i < j);
}

/* Merges the rings' events (ev[0, n), ring after ring) into time order,
 * keeping each ring's order. A ring's stamps can step back a little where
 * the event clock switches mode: they are raised to the one before first. */
static int merge_by_time(pool_event **ev, size_t n, const size_t *ring_start, size_t nr) {
  for (size_t r = 0; r < nr; r++) {
    size_t end = r + 1 < nr ? ring_start[r + 1] : n;
    for (size_t i = ring_start[r] + 1; i < end; i++)
      if ((*ev)[i].ts_ns < (*ev)[i - 1].ts_ns)
        (*ev)[i].ts_ns = (*ev)[i - 1].ts_ns;
  }
  size_t *order = malloc((n ? n : 1) * sizeof *order);
  pool_event *sorted = malloc((n ? n : 1) * sizeof *sorted);
  if (!order || !sorted) {
    free(order);
    free(sorted);
    return -1;
  }
  for (size_t i = 0; i < n; i++)
    order[i] = i;
  qsort_r(order, n, sizeof *order, by_time, *ev);
  for (size_t i = 0; i < n; i++)
    sorted[i] = (*ev)[order[i]];
  free(order);
  free(*ev);
  *ev = sorted;
  return 0;
}

#define MAX_RINGS 1024

gpupool_status gpupool_history_from_pool(gpupool *p, gpupool_history **out) {
  if (!p || !out)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_history_from_pool: %s is NULL",
                     p ? "out" : "pool");
  *out = NULL;
  gpupool_status st = pool_check_not_inherited(p, "gpupool_history_from_pool");
  if (st != GPUPOOL_OK)
    return st;
  event_ring **rings = malloc(MAX_RINGS * sizeof *rings);
  event_ring_end *ends = malloc(MAX_RINGS * sizeof *ends);
  if (!rings || !ends) {
    free(rings);
    free(ends);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_history_from_pool: out of host memory");
  }
  size_t nr = pool_event_rings_at(p, rings, ends, MAX_RINGS);
  st = history_from_rings(rings, ends, nr, gpupool_name(p), out);
  free(rings);
  free(ends);
  return st;
}

gpupool_status history_from_rings(event_ring **rings, const event_ring_end *ends, size_t nr,
                                  const char *name, gpupool_history **out) {
  size_t total = 0;
  for (size_t i = 0; i < nr; i++)
    total += event_ring_capacity(rings[i]);
  pool_event *ev = malloc((total ? total : 1) * sizeof *ev);
  char src[160];
  snprintf(src, sizeof src, "pool %s", name);
  gpupool_history *h = hist_new(src, "live");
  size_t n = 0;
  uint64_t dropped = 0;
  size_t *ring_start = malloc((nr ? nr : 1) * sizeof *ring_start);
  if (ev && h && ring_start) {
    for (size_t i = 0; i < nr; i++) {
      ring_start[i] = n;
      /* Up to the end taken with the ring: a ring still being written
       * keeps no more than its capacity, the others' room. */
      uint64_t head = ends[i].head, cap = event_ring_capacity(rings[i]);
      uint64_t cursor = head > cap ? head - cap : 0, skipped = cursor;
      size_t got;
      while (n < total &&
             (got = event_ring_read_to(rings[i], &cursor, ends[i], ev + n, total - n, &skipped)))
        n += got;
      dropped += skipped;
      /* At most twice the ring's capacity: what its records held before a
       * record could repeat lifetimes; the older ones count as dropped. */
      uint64_t events, left;
      n = ring_start[i] +
          event_ring_keep_newest(ev + ring_start[i], n - ring_start[i], 2 * cap, &events, &left);
      dropped += left;
    }
  }
  for (size_t i = 0; i < nr; i++)
    event_ring_unref(rings[i]);
  /* One ring per stream: merged in time order (each ring's order kept). */
  if (!ev || !h || !ring_start || (nr > 1 && merge_by_time(&ev, n, ring_start, nr) != 0)) {
    free(ev);
    free(ring_start);
    gpupool_history_free(h);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "history of pool %s: out of host memory", name);
  }
  free(ring_start);
  char err[160];
  gpupool_status st = GPUPOOL_OK;
  for (size_t i = 0; i < n && st == GPUPOOL_OK; i++) {
    const pool_event *e = &ev[i];
    int r = 0;
    switch (e->type) {
    case EV_ALLOC:
      if (hist_is_live(h, e->addr)) /* its free was overwritten while read */
        r = hist_free(h, e->addr);
      /* its repeated lifetimes, then itself (event_ring.h) */
      for (unsigned k = 0; k <= e->repeats && r >= 0; k++) {
        r = hist_alloc(h, e->addr, e->requested ? e->requested : e->size, e->stream, err,
                       sizeof err);
        if (r >= 0 && k < e->repeats)
          r = hist_free(h, e->addr);
      }
      if (r >= 0 && (e->flags & EVF_FREED)) /* its plain free, recorded in the same record */
        r = hist_free(h, e->addr);
      break;
    case EV_FREE:
      if ((e->flags & EVF_DEFERRED) && hist_is_live(h, e->addr))
        r = hist_record_stream(h, e->addr, HIST_OTHER_STREAM, err, sizeof err);
      if (r >= 0)
        r = hist_free(h, e->addr);
      break;
    case EV_EMPTY_CACHE:
      r = hist_empty_cache(h);
      break;
    default:
      continue;
    }
    hist_note_time(h, (double)e->ts_ns * 1e-9);
    if (r < 0)
      st = pool_fail(hist_status(r), "history of pool %s: %s", name,
                     r == HIST_HOST_OOM ? "out of host memory" : err);
  }
  free(ev);
  if (st != GPUPOOL_OK) {
    gpupool_history_free(h);
    return st;
  }
  h->info.dropped = dropped;
  hist_finish(h);
  *out = h;
  return GPUPOOL_OK;
}
