/* GPUPOOL_RECORD files (torch/torch_allocator.c writes them; the format is
 * bench/trace_file.h's): one event a line,
 *   a <id> <size> <stream> [<device>]  an allocation of <size> requested
 *                                      bytes on <device> (absent: 0)
 *   f <id>                   its free
 *   r <id> <stream>          record_stream of the live allocation <id>
 * A process that used several devices wrote one file for all: their ids
 * (device addresses) never collide, so a free or record_stream belongs to
 * the device where its id is live. One device's history is read: the one
 * asked for, else the busiest (most allocations), as for a snapshot.
 * numbers decimal or 0x-hex ("(nil)" is 0, as glibc prints a NULL %p; a
 * leading 0 is no octal: 010 is ten); blank lines and lines starting with
 * '#' are skipped (a byte-order mark at the start of the file is skipped
 * by the caller; one anywhere else is an error). Writers end every line
 * with a newline: a last line without one is a file cut short, an error.
 * A line is read into a buffer of MAX_LINE bytes, never grown: an input
 * that is no record file (one without newlines, /dev/zero) is an error at
 * its first line, not a buffer as large as the input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "parse_u64.h"
#include "readers.h"

/* The longest line kept, whitespace runs counted as one byte. A data line
 * holds at most four fields of a 64-bit number each ("a 0x... <size>
 * 0x..." is under 64 bytes): this is a thousand times that. A comment may
 * be longer: it is read to its end and not kept. */
#define MAX_LINE 65536

enum { LINE_OK, LINE_EOF, LINE_NUL, LINE_LONG, LINE_CUT };

static int is_space(int c) {
  return c == ' ' || c == '\t' || c == '\r'; /* the tokenizer's separators, less '\n' */
}

/* Reads the next line of f (its lock held) into buf (MAX_LINE + 1 bytes) without
 * its newline, NUL-terminated, a run of separators kept as one. A NUL byte
 * or a line over MAX_LINE that is no comment stops at once; a line the end
 * of the file cuts (no newline) is LINE_CUT. */
static int next_line(FILE *f, char *buf) {
  size_t n = 0;
  int c, any = 0;
  while ((c = getc_unlocked(f)) != EOF && c != '\n') {
    any = 1;
    if (c == 0)
      return LINE_NUL;
    if (is_space(c) && (n == 0 || is_space((unsigned char)buf[n - 1])))
      continue;
    if (n == MAX_LINE) {
      if (buf[0] != '#') /* leading separators are not kept */
        return LINE_LONG;
      while ((c = getc_unlocked(f)) != EOF && c != '\n') /* the rest of a long comment */
        if (c == 0)
          return LINE_NUL;
      break;
    }
    buf[n++] = (char)c;
  }
  buf[n] = 0;
  if (c == EOF && (!any || ferror(f)))
    return LINE_EOF; /* ferror: read_record says so */
  return c == EOF ? LINE_CUT : LINE_OK;
}

/* A number as the writers print one: decimal, or hex after "0x" (what %p
 * and PRIxPTR give), or "(nil)" (glibc's %p of NULL); -1 for anything else. */
static int parse_number(const char *s, uint64_t *out) {
  if (!strcmp(s, "(nil)")) {
    *out = 0;
    return 0;
  }
  return parse_u64(s, U64_DECIMAL | U64_HEX, out);
}

/* Device ordinals a file may name, as the agent takes them (docs/trace.md). */
#define MAX_DEVICE 4095

/* The history of each device the file names, in order of appearance, and
 * the frees and record_streams of ids live on none of them. */
typedef struct record_devices {
  uint64_t device[MAX_DEVICE + 1];
  gpupool_history *h[MAX_DEVICE + 1];
  size_t n;
  uint64_t unmatched_frees, unmatched_record_streams;
} record_devices;

/* The history of device d, created at its first allocation; NULL out of
 * host memory. */
static gpupool_history *device_history(record_devices *rd, const char *path, uint64_t d) {
  for (size_t i = 0; i < rd->n; i++)
    if (rd->device[i] == d)
      return rd->h[i];
  gpupool_history *h = hist_new(path, "record");
  if (h) {
    rd->device[rd->n] = d;
    rd->h[rd->n++] = h;
  }
  return h;
}

/* The history in which id is live, else NULL. */
static gpupool_history *live_in(record_devices *rd, uint64_t id) {
  for (size_t i = 0; i < rd->n; i++)
    if (hist_is_live(rd->h[i], id))
      return rd->h[i];
  return NULL;
}

/* The history to replay: device `want` (decimal, NULL: the busiest), named
 * "path (device N)" where the file names a device other than 0; the others
 * freed. NULL with the reason set. */
static gpupool_history *pick_device(record_devices *rd, const char *path, const char *want) {
  size_t pick = rd->n;
  if (want) {
    uint64_t d;
    if (parse_u64(want, U64_DECIMAL, &d) == 0)
      for (size_t i = 0; i < rd->n; i++)
        if (rd->device[i] == d)
          pick = i;
    if (pick == rd->n) {
      char list[128] = "";
      for (size_t i = 0, len = 0; i < rd->n && len < sizeof list - 24; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%llu", i ? ", " : "",
                                (unsigned long long)rd->device[i]);
      pool_fail(GPUPOOL_ERR_INVALID, "%s: no allocations on device '%s' (devices in the file: %s)",
                path, want, rd->n ? list : "none");
      return NULL;
    }
  } else {
    for (size_t i = 0; i < rd->n; i++)
      if (pick == rd->n || rd->h[i]->info.allocations > rd->h[pick]->info.allocations)
        pick = i;
    if (pick == rd->n) {
      pool_fail(GPUPOOL_ERR_INVALID, "%s: no allocation events", path);
      return NULL;
    }
  }
  gpupool_history *h = rd->h[pick];
  rd->h[pick] = NULL;
  if (rd->n > 1 || rd->device[pick] != 0)
    snprintf(h->info.source, sizeof h->info.source, "%s (device %llu)", path,
             (unsigned long long)rd->device[pick]);
  h->info.unmatched_frees += rd->unmatched_frees;
  h->info.unmatched_record_streams += rd->unmatched_record_streams;
  return h;
}

gpupool_status read_record(FILE *f, const char *path, size_t first_line, const char *device,
                           gpupool_history **out) {
  record_devices *rd = calloc(1, sizeof *rd);
  char *line = malloc(MAX_LINE + 1), err[160];
  if (!rd || !line) {
    free(rd);
    free(line);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
  }
  size_t lineno = first_line;
  int got;
  gpupool_status st = GPUPOOL_OK;
  flockfile(f);
  while ((got = next_line(f, line)) != LINE_EOF) {
    lineno++;
    if (got == LINE_NUL) {
      st = pool_fail(GPUPOOL_ERR_INVALID, "%s:%zu: a NUL byte in the line", path, lineno);
      break;
    }
    if (got == LINE_CUT) {
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s:%zu: the file ends inside this line (no newline after it): truncated "
                     "input (delete the line to read the rest)",
                     path, lineno);
      break;
    }
    if (got == LINE_LONG) {
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s:%zu: a line longer than %d bytes: not a GPUPOOL_RECORD line", path, lineno,
                     MAX_LINE);
      break;
    }
    /* a byte-order mark is skipped only as the file's first bytes (by the
     * caller): one in a line that is no comment is a file pasted onto
     * another, or a stray one, and the error says so */
    int marked = strstr(line, UTF8_BOM) != NULL;
    char *save, *tok[5] = {0};
    int n = 0;
    for (char *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save))
      if (n < 5)
        tok[n++] = t;
      else
        n++;
    if (n == 0 || tok[0][0] == '#')
      continue;
    uint64_t id, size, stream, dev = 0;
    int bad = 0, r = 0;
    gpupool_history *h;
    if (!strcmp(tok[0], "a")) {
      if ((n != 4 && n != 5) || parse_number(tok[1], &id) || parse_number(tok[2], &size) ||
          parse_number(tok[3], &stream) || size == 0 ||
          (n == 5 && (parse_u64(tok[4], U64_DECIMAL, &dev) || dev > MAX_DEVICE)))
        bad = 1;
      else if ((h = live_in(rd, id)) != NULL) /* an id live on one device is on all */
        r = hist_alloc(h, id, size, stream, err, sizeof err);
      else if ((h = device_history(rd, path, dev)) == NULL)
        r = HIST_HOST_OOM;
      else
        r = hist_alloc(h, id, size, stream, err, sizeof err);
    } else if (!strcmp(tok[0], "f")) {
      if (n != 2 || parse_number(tok[1], &id))
        bad = 1;
      else if ((h = live_in(rd, id)) != NULL)
        r = hist_free(h, id);
      else
        rd->unmatched_frees++; /* allocated before the file began */
    } else if (!strcmp(tok[0], "r")) {
      if (n != 3 || parse_number(tok[1], &id) || parse_number(tok[2], &stream))
        bad = 1;
      else if ((h = live_in(rd, id)) != NULL)
        r = hist_record_stream(h, id, stream, err, sizeof err);
      else
        rd->unmatched_record_streams++;
    } else {
      bad = 1;
    }
    if (r < 0) {
      st = pool_fail(hist_status(r), "%s:%zu: %s", path, lineno,
                     r == HIST_HOST_OOM ? "out of host memory" : err);
      break;
    }
    if (bad && marked) {
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s:%zu: a UTF-8 byte-order mark inside the file (only its first bytes may "
                     "be one): not a GPUPOOL_RECORD line",
                     path, lineno);
      break;
    }
    if (bad) {
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s:%zu: expected 'a <id> <size> <stream> [<device>]', 'f <id>' or 'r <id> "
                     "<stream>' (size > 0, unsigned numbers, the device decimal, 0 to %d)",
                     path, lineno, MAX_DEVICE);
      break;
    }
  }
  funlockfile(f);
  if (st == GPUPOOL_OK && ferror(f))
    st = pool_fail(GPUPOOL_ERR_INVALID, "%s:%zu: read error", path, lineno + 1);
  free(line);
  gpupool_history *h = st == GPUPOOL_OK ? pick_device(rd, path, device) : NULL;
  for (size_t i = 0; i < rd->n; i++)
    gpupool_history_free(rd->h[i]); /* the others; NULL in pick's place */
  free(rd);
  if (!h)
    return st == GPUPOOL_OK ? GPUPOOL_ERR_INVALID : st; /* pick_device said why */
  hist_finish(h);
  *out = h;
  return GPUPOOL_OK;
}
