/* GPUPOOL_RECORD files (torch/torch_allocator.c writes them; the format is
 * bench/trace_file.h's): one event a line,
 *   a <id> <size> <stream>   an allocation of <size> requested bytes
 *   f <id>                   its free
 *   r <id> <stream>          record_stream of the live allocation <id>
 * numbers decimal or 0x-hex ("(nil)" is 0, as glibc prints a NULL %p; a
 * leading 0 is no octal: 010 is ten); blank lines and lines starting with
 * '#' are skipped. Writers end every line with a newline: a last line
 * without one is a file cut short, an error. A line is read into a
 * buffer of MAX_LINE bytes, never grown: an input that is no record file
 * (one without newlines, /dev/zero) is an error at its first line, not a
 * buffer as large as the input. */
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

gpupool_status read_record(FILE *f, const char *path, size_t first_line, gpupool_history **out) {
  gpupool_history *h = hist_new(path, "record");
  if (!h)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", path);
  char *line = malloc(MAX_LINE + 1), err[160];
  if (!line) {
    gpupool_history_free(h);
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
    int bad = 0, r = 0;
    if (!strcmp(tok[0], "a")) {
      if (n != 4 || parse_number(tok[1], &id) || parse_number(tok[2], &size) ||
          parse_number(tok[3], &stream) || size == 0)
        bad = 1;
      else
        r = hist_alloc(h, id, size, stream, err, sizeof err);
    } else if (!strcmp(tok[0], "f")) {
      if (n != 2 || parse_number(tok[1], &id))
        bad = 1;
      else
        r = hist_free(h, id);
    } else if (!strcmp(tok[0], "r")) {
      if (n != 3 || parse_number(tok[1], &id) || parse_number(tok[2], &stream))
        bad = 1;
      else
        r = hist_record_stream(h, id, stream, err, sizeof err);
    } else {
      bad = 1;
    }
    if (r < 0) {
      st = pool_fail(hist_status(r), "%s:%zu: %s", path, lineno,
                     r == HIST_HOST_OOM ? "out of host memory" : err);
      break;
    }
    if (bad) {
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s:%zu: expected 'a <id> <size> <stream>', 'f <id>' or 'r <id> <stream>' "
                     "(size > 0, unsigned numbers)",
                     path, lineno);
      break;
    }
  }
  funlockfile(f);
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
}
