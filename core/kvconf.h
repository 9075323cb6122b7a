/* The "key:value,key:value" grammar of PYTORCH_CUDA_ALLOC_CONF, shared by
 * GPUPOOL_CONF and GPUPOOL_AGENT_CONF. Parsing never aborts: each error comes
 * back with a one-line reason. */
#ifndef GPUPOOL_KVCONF_H
#define GPUPOOL_KVCONF_H

#include <stddef.h>
#include <stdint.h>

/* Called once per pair, in order; returns 0 to go on or -1 after writing a
 * reason into err (errlen bytes). key and value are NUL-terminated copies
 * with surrounding white space removed. */
typedef int (*kvconf_fn)(void *ctx, const char *key, const char *value, char *err, size_t errlen);

/* 0 on success; -1 with a reason ("GPUPOOL_CONF: ..." is the caller's prefix)
 * on a malformed string (empty key, missing ':', empty value, an empty entry:
 * a leading ',' or ",,") or when fn refuses a pair. An empty or NULL string
 * is valid and has no pairs; one trailing ',' is allowed, as PyTorch's parser
 * allows it. Values may contain ':' (only the first ':' separates). */
int kvconf_parse(const char *text, kvconf_fn fn, void *ctx, char *err, size_t errlen);

/* Strict value parsers: the whole string must be consumed; 0 ok, -1 bad. */
int kvconf_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int kvconf_double(const char *s, double min, double max, double *out);

/* v written as kvconf_double reads it (no exponent, '.' whatever the locale):
 * with the fewest decimals that read back as exactly v, else with 17 past its
 * leading zeros. 0, or -1 (out "") when v is not finite or the text does not
 * fit in len bytes. */
int kvconf_format_double(double v, char *out, size_t len);

/* Option tables: one row per key, so that parsing, range checks and the
 * wording of every error live here once. A row's kind says how its value is
 * read; the generic code checks it and hands the typed value to set(). */
typedef enum {
  KVOPT_U64,    /* whole number in [umin, umax]; choices name special values (e.g. inf) */
  KVOPT_DOUBLE, /* decimal number in [dmin, dmax] (exclusive ends with open_min/open_max) */
  KVOPT_CHOICE, /* one of choices (case-sensitive unless nocase) */
  KVOPT_BOOL,   /* True/true/1 or False/false/0 */
  KVOPT_STRING, /* any text; set() validates it */
} kvopt_kind;

typedef struct kvopt_choice {
  const char *name;
  uint64_t value;
} kvopt_choice;

typedef union kvopt_value {
  uint64_t u; /* U64, CHOICE (the choice's value), BOOL (0 or 1) */
  double d;
  const char *s;
} kvopt_value;

typedef struct kvopt kvopt;
struct kvopt {
  const char *key;
  kvopt_kind kind;
  uint64_t umin, umax;
  double dmin, dmax;
  unsigned open_min : 1, open_max : 1, nocase : 1;
  const kvopt_choice *choices; /* NULL-name terminated */
  const char *range;           /* how the valid values read in a message; NULL: from the bounds */
  /* Stores the value into ctx; 0, or -1 after writing a reason (which should
   * name the key) into err. */
  int (*set)(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen);
};

/* Applies one pair through the table of n rows: an unknown key, a value out
 * of range, or an unknown choice gets a one-line reason that names the key,
 * states the valid range or values, and suggests the nearest key or choice
 * when one is a likely typo ("did you mean strategy?"). 0 or -1. */
int kvopt_apply(const kvopt *table, size_t n, void *ctx, const char *key, const char *value,
                char *err, size_t errlen);

/* kvconf_parse with each pair applied through the table. */
int kvopt_parse(const char *text, const kvopt *table, size_t n, void *ctx, char *err,
                size_t errlen);

/* The entry of names[0..n) nearest to word when it is a likely typo of it
 * (edit distance at most 2 and at most half of word), else NULL. */
const char *kvconf_suggest(const char *word, const char *const *names, size_t n);

#endif
