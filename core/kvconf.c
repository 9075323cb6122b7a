#include "kvconf.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/c_numeric.h"

/* Copies [b, e) into out (size outlen) without surrounding white space. */
static int copy_trimmed(const char *b, const char *e, char *out, size_t outlen) {
  while (b < e && isspace((unsigned char)*b))
    b++;
  while (e > b && isspace((unsigned char)e[-1]))
    e--;
  size_t n = (size_t)(e - b);
  if (n >= outlen)
    return -1;
  memcpy(out, b, n);
  out[n] = '\0';
  return 0;
}

/* How much of an entry (n bytes at p) an error message quotes: at most
 * QUOTE_MAX bytes, cut at a UTF-8 character boundary, so that the reason
 * after the quote always fits in the message; *more is set when cut. */
#define QUOTE_MAX 64
static int quoted_len(const char *p, size_t n, const char **more) {
  *more = "";
  if (n <= QUOTE_MAX)
    return (int)n;
  n = QUOTE_MAX;
  while (n && ((unsigned char)p[n] & 0xC0) == 0x80)
    n--;
  *more = "...";
  return (int)n;
}

int kvconf_parse(const char *text, kvconf_fn fn, void *ctx, char *err, size_t errlen) {
  if (!text)
    return 0;
  const char *p = text;
  while (isspace((unsigned char)*p))
    p++;
  if (*p == '\0')
    return 0;
  char key[128], value[1024];
  for (;;) {
    const char *end = strchr(p, ',');
    if (!end)
      end = p + strlen(p);
    const char *colon = memchr(p, ':', (size_t)(end - p));
    const char *more;
    int shown = quoted_len(p, (size_t)(end - p), &more);
    if (copy_trimmed(p, end, key, sizeof key) == 0 && key[0] == '\0') {
      shown = quoted_len(text, strlen(text), &more);
      snprintf(err, errlen, "empty entry (a stray ',') in '%.*s%s'", shown, text, more);
      return -1;
    }
    if (!colon) {
      snprintf(err, errlen, "'%.*s%s' is not key:value", shown, p, more);
      return -1;
    }
    if (copy_trimmed(p, colon, key, sizeof key) != 0 ||
        copy_trimmed(colon + 1, end, value, sizeof value) != 0) {
      snprintf(err, errlen, "'%.*s%s' is too long (keys up to %zu bytes, values up to %zu)", shown,
               p, more, sizeof key - 1, sizeof value - 1);
      return -1;
    }
    if (key[0] == '\0') {
      snprintf(err, errlen, "empty key in '%.*s%s'", shown, p, more);
      return -1;
    }
    if (value[0] == '\0') {
      snprintf(err, errlen, "%s: empty value", key);
      return -1;
    }
    if (fn(ctx, key, value, err, errlen) != 0)
      return -1;
    if (*end == '\0')
      return 0;
    p = end + 1;
    const char *rest = p;
    while (isspace((unsigned char)*rest))
      rest++;
    if (*rest == '\0') /* one trailing ',': PyTorch's parser takes it too */
      return 0;
  }
}

int kvconf_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  if (!s || !isdigit((unsigned char)s[0]))
    return -1;
  int caller_errno = errno; /* a library never sets errno to 0 for its caller */
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  int overflow = errno != 0;
  errno = caller_errno;
  if (overflow || *end != '\0' || v < min || v > max)
    return -1;
  *out = v;
  return 0;
}

int kvconf_double(const char *s, double min, double max, double *out) {
  /* A decimal number, as PyTorch's stod reads one: a sign, digits with a
   * point or not, an exponent ("1e-3"); no inf, nan or hex, which stod also
   * takes but no setting means. The value is c_strtod's (strtod follows
   * LC_NUMERIC; configuration is always written with '.'). */
  if (!s)
    return -1;
  const char *p = s + (*s == '-' || *s == '+');
  int digits = 0;
  for (; isdigit((unsigned char)*p); p++)
    digits++;
  if (*p == '.')
    for (p++; isdigit((unsigned char)*p); p++)
      digits++;
  if (!digits)
    return -1;
  if (*p == 'e' || *p == 'E') {
    p += 1 + (p[1] == '-' || p[1] == '+');
    if (!isdigit((unsigned char)*p))
      return -1;
    while (isdigit((unsigned char)*p))
      p++;
  }
  char *end;
  double v = c_strtod(s, &end);
  if (*p != '\0' || end != p || !isfinite(v) || v < min || v > max)
    return -1;
  *out = v == 0 ? 0 : v; /* "-0" is 0: a configuration written back says "0" */
  return 0;
}

int kvconf_format_double(double v, char *out, size_t len) {
  if (!isfinite(v) || len == 0)
    return -1;
  int lead = 0; /* zeros after the point before the first digit of a v below 0.1 */
  for (double t = fabs(v); t > 0 && t < 0.1 && lead < 400; t *= 10)
    lead++;
  locale_t old = c_numeric_enter();
  int n = 0;
  /* %g could write an exponent (a configuration reads better without), or round 0.9999999 to 1 */
  for (int p = 0; p <= lead + 17; p++) {
    double back;
    n = snprintf(out, len, "%.*f", p, v);
    if (n < 0 || (size_t)n >= len)
      break;
    if (kvconf_double(out, -HUGE_VAL, HUGE_VAL, &back) == 0 && back == v)
      break;
  }
  c_numeric_leave(old);
  if (n < 0 || (size_t)n >= len) {
    out[0] = '\0';
    return -1;
  }
  return 0;
}

/* Levenshtein distance, case-insensitive, of two short words (capped). */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63)
    return SIZE_MAX;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      size_t best = diag + cost;
      if (up + 1 < best)
        best = up + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

const char *kvconf_suggest(const char *word, const char *const *names, size_t n) {
  const char *best = NULL;
  size_t best_d = SIZE_MAX, len = strlen(word);
  for (size_t i = 0; i < n; i++) {
    size_t d = edit_distance(word, names[i]);
    if (d < best_d) {
      best_d = d;
      best = names[i];
    }
  }
  return best && best_d <= 2 && best_d * 2 <= len ? best : NULL;
}

/* Appends to err (already holding a reason) with snprintf semantics. */
static void append(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *err, size_t errlen, const char *fmt, ...) {
  size_t used = strnlen(err, errlen);
  if (used + 1 >= errlen)
    return;
  va_list ap;
  va_start(ap, fmt);
  locale_t old = c_numeric_enter();
  vsnprintf(err + used, errlen - used, fmt, ap);
  c_numeric_leave(old);
  va_end(ap);
}

/* ": did you mean X?" when word is near one of names. */
static void append_suggestion(char *err, size_t errlen, const char *word, const char *const *names,
                              size_t n) {
  const char *s = kvconf_suggest(word, names, n);
  if (s)
    append(err, errlen, ": did you mean %s?", s);
}

static size_t count_choices(const kvopt_choice *c) {
  size_t n = 0;
  while (c && c[n].name)
    n++;
  return n;
}

static void append_choices(char *err, size_t errlen, const kvopt_choice *c) {
  for (size_t i = 0; c && c[i].name; i++)
    append(err, errlen, "%s%s", i ? ", " : "", c[i].name);
}

static void append_range(char *err, size_t errlen, const kvopt *o) {
  if (o->range)
    append(err, errlen, "%s", o->range);
  else if (o->kind == KVOPT_U64)
    append(err, errlen, "%llu to %llu", (unsigned long long)o->umin, (unsigned long long)o->umax);
  else
    append(err, errlen, "%g %s x %s %g", o->dmin,
           o->open_min ? "<" : "<=", o->open_max ? "<" : "<=", o->dmax);
}

static const kvopt_choice *find_choice(const kvopt *o, const char *value) {
  for (size_t i = 0; o->choices && o->choices[i].name; i++)
    if ((o->nocase ? strcasecmp : strcmp)(value, o->choices[i].name) == 0)
      return &o->choices[i];
  return NULL;
}

static int bad_choice(const kvopt *o, const char *value, char *err, size_t errlen) {
  size_t n = count_choices(o->choices);
  const char *names[32];
  for (size_t i = 0; i < n && i < 32; i++)
    names[i] = o->choices[i].name;
  snprintf(err, errlen, "%s: unknown value '%s'", o->key, value);
  append_suggestion(err, errlen, value, names, n < 32 ? n : 32);
  append(err, errlen, " (valid: ");
  append_choices(err, errlen, o->choices);
  append(err, errlen, ")");
  return -1;
}

static int apply_value(const kvopt *o, void *ctx, const char *value, char *err, size_t errlen) {
  static const kvopt_choice bools[] = {{"True", 1},  {"true", 1}, {"1", 1}, {"False", 0},
                                       {"false", 0}, {"0", 0},    {NULL, 0}};
  kvopt_value v = {0};
  const kvopt_choice *c;
  switch (o->kind) {
  case KVOPT_CHOICE:
    if (!(c = find_choice(o, value)))
      return bad_choice(o, value, err, errlen);
    v.u = c->value;
    break;
  case KVOPT_BOOL:
    for (c = bools; c->name && strcmp(c->name, value) != 0; c++)
      ;
    if (!c->name) {
      snprintf(err, errlen, "%s: '%s' is not True or False", o->key, value);
      return -1;
    }
    v.u = c->value;
    break;
  case KVOPT_U64:
    if ((c = find_choice(o, value))) {
      v.u = c->value;
      break;
    }
    if (kvconf_u64(value, 0, UINT64_MAX, &v.u) != 0) {
      snprintf(err, errlen, "%s: '%s' is not a whole number (", o->key, value);
      append_range(err, errlen, o);
      append(err, errlen, ")");
      return -1;
    }
    if (v.u < o->umin || v.u > o->umax) {
      snprintf(err, errlen, "%s: %s is out of range (", o->key, value);
      append_range(err, errlen, o);
      append(err, errlen, ")");
      return -1;
    }
    break;
  case KVOPT_DOUBLE:
    if (kvconf_double(value, -HUGE_VAL, HUGE_VAL, &v.d) != 0) {
      snprintf(err, errlen, "%s: '%s' is not a number (", o->key, value);
      append_range(err, errlen, o);
      append(err, errlen, ")");
      return -1;
    }
    if (v.d < o->dmin || v.d > o->dmax || (o->open_min && v.d == o->dmin) ||
        (o->open_max && v.d == o->dmax)) {
      snprintf(err, errlen, "%s: %s is out of range (", o->key, value);
      append_range(err, errlen, o);
      append(err, errlen, ")");
      return -1;
    }
    break;
  case KVOPT_STRING:
    v.s = value;
    break;
  }
  return o->set(ctx, o, v, err, errlen);
}

int kvopt_apply(const kvopt *table, size_t n, void *ctx, const char *key, const char *value,
                char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(table[i].key, key) == 0)
      return apply_value(&table[i], ctx, value, err, errlen);
  const char *names[64];
  size_t m = n < 64 ? n : 64;
  for (size_t i = 0; i < m; i++)
    names[i] = table[i].key;
  snprintf(err, errlen, "unknown key '%s'", key);
  append_suggestion(err, errlen, key, names, m);
  append(err, errlen, " (known: ");
  for (size_t i = 0; i < m; i++)
    append(err, errlen, "%s%s", i ? ", " : "", names[i]);
  append(err, errlen, ")");
  return -1;
}

typedef struct table_ctx {
  const kvopt *table;
  size_t n;
  void *ctx;
} table_ctx;

static int apply_from_table(void *ctx, const char *key, const char *value, char *err,
                            size_t errlen) {
  table_ctx *t = ctx;
  return kvopt_apply(t->table, t->n, t->ctx, key, value, err, errlen);
}

int kvopt_parse(const char *text, const kvopt *table, size_t n, void *ctx, char *err,
                size_t errlen) {
  table_ctx t = {table, n, ctx};
  return kvconf_parse(text, apply_from_table, &t, err, errlen);
}
