#include "web_config.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "core/assert.h"
#include "core/c_numeric.h"

#define MAX_FILE_BYTES (1u << 20) /* a configuration, certificate or key file */
#define MAX_LIST       64

/* ---- reading files ---- */

/* The whole file, NUL-terminated; NULL with a reason. */
static char *read_file(const char *path, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(MAX_FILE_BYTES + 1);
  size_t n = buf ? fread(buf, 1, MAX_FILE_BYTES + 1, f) : 0;
  int bad = ferror(f);
  fclose(f);
  if (!buf || bad || n > MAX_FILE_BYTES) {
    snprintf(err, errlen, "cannot read %s: %s", path,
             !buf  ? "out of memory"
             : bad ? "read error"
                   : "larger than 1 MiB");
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* One file's contents (data NULL: it could not be read) into a digest. A
 * missing file and an empty one must differ. */
static void digest_file(gnutls_hash_hd_t h, const char *data, size_t len) {
  unsigned char tag = data ? 1 : 0;
  size_t n = data ? len : 0;
  gnutls_hash(h, &tag, 1);
  gnutls_hash(h, &n, sizeof n);
  if (data)
    gnutls_hash(h, data, n);
}

void web_files_digest(const web_files *f, unsigned char out[32]) {
  gnutls_hash_hd_t h;
  memset(out, 0, 32);
  if (gnutls_hash_init(&h, GNUTLS_DIG_SHA256) != 0)
    return;
  char err[8];
  for (size_t i = 0; i < f->n; i++) {
    size_t len = 0;
    char *data = read_file(f->path[i], &len, err, sizeof err);
    digest_file(h, data, len);
    free(data);
  }
  gnutls_hash_deinit(h, out);
}

/* read_file, adding what it read (or that it could not) to digest (NULL:
 * none) as web_files_digest does. */
static char *read_hashed(gnutls_hash_hd_t digest, const char *path, size_t *len, char *err,
                         size_t errlen) {
  char *data = read_file(path, len, err, errlen);
  if (digest)
    digest_file(digest, data, data ? *len : 0);
  return data;
}

/* ---- the loader ---- */

typedef struct str_list {
  char *item[MAX_LIST];
  size_t n;
  int given;
} str_list;

typedef struct raw_tls {
  const char *cert, *key, *client_ca; /* inline PEM */
  const char *cert_file, *key_file, *client_ca_file, *client_auth_type;
  const char *min_version, *max_version;
  str_list cipher_suites, curves, sans;
  int prefer_server; /* -1 = default (true) */
} raw_tls;

typedef struct loader {
  yaml_document_t *doc;
  gnutls_hash_hd_t digest; /* over the files as read (web_files_digest's format), or NULL */
  char dir[PATH_MAX];      /* the configuration file's directory: relative paths start there */
  web_files *files;
  raw_tls tls;
  web_config *cfg;
  char *err;
  size_t errlen;
} loader;

__attribute__((format(printf, 3, 4))) static int fail(loader *l, const yaml_node_t *n,
                                                      const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  locale_t old = c_numeric_enter();
  vsnprintf(msg, sizeof msg, fmt, ap);
  c_numeric_leave(old);
  va_end(ap);
  if (n)
    snprintf(l->err, l->errlen, "line %lu: %s", (unsigned long)n->start_mark.line + 1, msg);
  else
    snprintf(l->err, l->errlen, "%s", msg);
  return -1;
}

/* ---- plain scalars, as exporter-toolkit's YAML library resolves them ----
 *
 * exporter-toolkit reads the file with gopkg.in/yaml.v2 (yaml.UnmarshalStrict),
 * which resolves a plain (unquoted) scalar by YAML 1.1's rules (its
 * resolve.go): a word of a fixed table (booleans, nulls, .inf, .nan), else,
 * for one that starts with a sign or a digit, with every '_' removed, Go's
 * strconv.ParseInt(s, 0, 64), then ParseUint(s, 0, 64), then a decimal float
 * (the regexp ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$ and
 * ParseFloat), then "0b" with a signed binary number (ParseInt(s[2:], 2, 64),
 * ParseUint) or "-0b" and one (ParseInt("-" + s[3:], 2, 64)); one that starts
 * with '.' is ParseFloat(s) as written. Anything else is a string. A quoted
 * scalar is always a string (gpupool still reads quoted booleans and numbers
 * as it did: see boolean() and rate_pair()). */

typedef enum { PLAIN_STR, PLAIN_NULL, PLAIN_BOOL, PLAIN_INT, PLAIN_UINT, PLAIN_FLOAT } plain_kind;

typedef struct plain_value {
  plain_kind kind;
  int b;      /* PLAIN_BOOL */
  int64_t i;  /* PLAIN_INT */
  uint64_t u; /* PLAIN_UINT: above INT64_MAX (a smaller one is PLAIN_INT) */
  double f;   /* PLAIN_FLOAT */
} plain_value;

/* resolve.go's table, each spelling exactly ("TrUe" is a string). */
static int plain_word(const char *in, plain_value *v) {
  static const struct {
    const char *text;
    plain_kind kind;
    int value; /* a boolean's; a float's: 0 NaN, 1 +Inf, -1 -Inf */
  } words[] = {
      {"y", PLAIN_BOOL, 1},       {"Y", PLAIN_BOOL, 1},       {"yes", PLAIN_BOOL, 1},
      {"Yes", PLAIN_BOOL, 1},     {"YES", PLAIN_BOOL, 1},     {"true", PLAIN_BOOL, 1},
      {"True", PLAIN_BOOL, 1},    {"TRUE", PLAIN_BOOL, 1},    {"on", PLAIN_BOOL, 1},
      {"On", PLAIN_BOOL, 1},      {"ON", PLAIN_BOOL, 1},      {"n", PLAIN_BOOL, 0},
      {"N", PLAIN_BOOL, 0},       {"no", PLAIN_BOOL, 0},      {"No", PLAIN_BOOL, 0},
      {"NO", PLAIN_BOOL, 0},      {"false", PLAIN_BOOL, 0},   {"False", PLAIN_BOOL, 0},
      {"FALSE", PLAIN_BOOL, 0},   {"off", PLAIN_BOOL, 0},     {"Off", PLAIN_BOOL, 0},
      {"OFF", PLAIN_BOOL, 0},     {"", PLAIN_NULL, 0},        {"~", PLAIN_NULL, 0},
      {"null", PLAIN_NULL, 0},    {"Null", PLAIN_NULL, 0},    {"NULL", PLAIN_NULL, 0},
      {".nan", PLAIN_FLOAT, 0},   {".NaN", PLAIN_FLOAT, 0},   {".NAN", PLAIN_FLOAT, 0},
      {".inf", PLAIN_FLOAT, 1},   {".Inf", PLAIN_FLOAT, 1},   {".INF", PLAIN_FLOAT, 1},
      {"+.inf", PLAIN_FLOAT, 1},  {"+.Inf", PLAIN_FLOAT, 1},  {"+.INF", PLAIN_FLOAT, 1},
      {"-.inf", PLAIN_FLOAT, -1}, {"-.Inf", PLAIN_FLOAT, -1}, {"-.INF", PLAIN_FLOAT, -1},
  };
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (!strcmp(in, words[i].text)) {
      memset(v, 0, sizeof *v);
      v->kind = words[i].kind;
      if (v->kind == PLAIN_BOOL)
        v->b = words[i].value;
      else if (v->kind == PLAIN_FLOAT)
        v->f = words[i].value ? words[i].value * (double)INFINITY : (double)NAN;
      return 1;
    }
  return 0;
}

static int is_digit(char c) {
  return c >= '0' && c <= '9';
}

/* Go's strconv.ParseUint(s, base, 64) for an s without '_': base 0 takes a
 * 0b, 0o or 0x prefix (any case; followed by at least one character) or a
 * leading 0 (octal). 0, or -1 when s is no such number or above 2^64 - 1. */
static int go_parse_uint(const char *s, unsigned base, uint64_t *out) {
  if (!*s)
    return -1;
  if (base == 0) {
    base = 10;
    if (s[0] == '0') {
      char c = s[1] && s[2] ? (char)(s[1] | 0x20) : 0; /* a prefix needs len(s) >= 3 */
      if (c == 'b' || c == 'o' || c == 'x') {
        base = c == 'b' ? 2 : c == 'o' ? 8 : 16;
        s += 2;
      } else {
        base = 8;
        s++;
      }
    }
  }
  uint64_t v = 0;
  for (; *s; s++) {
    unsigned c = (unsigned char)*s, d;
    if (is_digit((char)c))
      d = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
      d = (c | 0x20) - 'a' + 10;
    else
      return -1;
    if (d >= base || v > (UINT64_MAX - d) / base)
      return -1;
    v = v * base + d;
  }
  *out = v;
  return 0;
}

/* Go's strconv.ParseInt(s, base, 64) for an s without '_': a sign, then
 * go_parse_uint's number, within int64. 0, else -1. */
static int go_parse_int(const char *s, unsigned base, int64_t *out) {
  int neg = *s == '-';
  if (*s == '-' || *s == '+')
    s++;
  uint64_t u;
  if (go_parse_uint(s, base, &u) != 0 || u > (uint64_t)INT64_MAX + (uint64_t)neg)
    return -1;
  *out = !neg ? (int64_t)u : u ? -(int64_t)(u - 1) - 1 : 0;
  return 0;
}

/* The regexp resolve.go tries floats with (on s without '_'). */
static int yaml_style_float(const char *s) {
  s += *s == '-' || *s == '+';
  if (*s == '.') {
    if (!is_digit(*++s))
      return 0;
  } else {
    if (!is_digit(*s))
      return 0;
    while (is_digit(*s))
      s++;
    if (*s == '.')
      s++;
  }
  while (is_digit(*s))
    s++;
  if (*s == 'e' || *s == 'E') {
    s++;
    s += *s == '-' || *s == '+';
    if (!is_digit(*s))
      return 0;
    while (is_digit(*s))
      s++;
  }
  return *s == '\0';
}

/* A decimal float's value as Go's ParseFloat gives it (correctly rounded,
 * as glibc's strtod; an underflow is 0); -1 when it overflows (Go: ±Inf
 * and ErrRange). s is a decimal float without '_'. */
static int decimal_value(const char *s, double *out) {
  double f = c_strtod(s, NULL);
  if (isinf(f))
    return -1;
  *out = f;
  return 0;
}

/* Copies s without its '_' into out (strlen(s) + 1 bytes). */
static void drop_underscores(const char *s, char *out) {
  for (; *s; s++)
    if (*s != '_')
      *out++ = *s;
  *out = '\0';
}

/* Go's strconv.ParseFloat(s, 64) for an s that starts with '.': then
 * digits, with '_' only between two of them (strconv's underscoreOK), and
 * an optional exponent (e or E, a sign, a digit, then digits and '_').
 * plain: room for s without '_'. 0, else -1. */
static int go_parse_float_dot(const char *s, char *plain, double *out) {
  const char *p = s + 1;
  int digits = 0;
  for (; is_digit(*p) || *p == '_'; p++)
    digits += is_digit(*p);
  if (!digits)
    return -1;
  if (*p == 'e' || *p == 'E') {
    p++;
    p += *p == '-' || *p == '+';
    if (!is_digit(*p))
      return -1;
    while (is_digit(*p) || *p == '_')
      p++;
  }
  if (*p)
    return -1;
  /* underscoreOK: each '_' between a digit and a digit */
  for (p = s; *p; p++)
    if (*p == '_' && (p == s || !is_digit(p[-1]) || !is_digit(p[1])))
      return -1;
  drop_underscores(s, plain);
  return decimal_value(plain, out);
}

/* Resolves plain scalar in as yaml.v2 does (above) into *v. 0, or -1 when
 * out of memory. */
static int resolve_plain(const char *in, plain_value *v) {
  if (plain_word(in, v))
    return 0;
  memset(v, 0, sizeof *v);
  v->kind = PLAIN_STR;
  if (in[0] != '.' && in[0] != '+' && in[0] != '-' && !is_digit(in[0]))
    return 0;
  char *plain = malloc(strlen(in) + 1);
  if (!plain)
    return -1;
  if (in[0] == '.') {
    if (go_parse_float_dot(in, plain, &v->f) == 0)
      v->kind = PLAIN_FLOAT;
    free(plain);
    return 0;
  }
  /* (A timestamp, 2001-12-14, is tried first; it is never a number.) */
  drop_underscores(in, plain);
  if (go_parse_int(plain, 0, &v->i) == 0)
    v->kind = PLAIN_INT;
  else if (go_parse_uint(plain, 0, &v->u) == 0)
    v->kind = PLAIN_UINT;
  else if (yaml_style_float(plain) && decimal_value(plain, &v->f) == 0)
    v->kind = PLAIN_FLOAT;
  else if (!strncmp(plain, "0b", 2) && go_parse_int(plain + 2, 2, &v->i) == 0)
    v->kind = PLAIN_INT;
  else if (!strncmp(plain, "0b", 2) && go_parse_uint(plain + 2, 2, &v->u) == 0)
    v->kind = PLAIN_UINT;
  else if (!strncmp(plain, "-0b", 3)) {
    memmove(plain + 1, plain + 3, strlen(plain + 3) + 1); /* "-" + s[3:] */
    if (go_parse_int(plain, 2, &v->i) == 0)
      v->kind = PLAIN_INT;
  }
  free(plain);
  return 0;
}

/* A resolved plain scalar put into a Go int64 field (an int, or
 * time.Duration) as yaml.v2's decoder puts it: an int; a uint up to
 * 2^63 - 1; a float cut toward zero (1.9 is 1), where it lies in int64's
 * range (yaml.v2 takes floats up to 2^63 and converts as the machine does:
 * gpupool refuses a float out of range, whose value every field here would
 * refuse); null is 0. 0 with *out, or -1: the field refuses it. */
static int plain_int64(const plain_value *v, int64_t *out) {
  switch (v->kind) {
  case PLAIN_NULL:
    *out = 0;
    return 0;
  case PLAIN_INT:
    *out = v->i;
    return 0;
  case PLAIN_FLOAT:
    if (!(v->f >= -9223372036854775808.0 && v->f < 9223372036854775808.0))
      return -1;
    *out = (int64_t)v->f;
    return 0;
  default: /* a uint is above INT64_MAX; a string or a boolean is no number */
    return -1;
  }
}

/* A null as yaml.v2 spells it: a plain "", "~", "null", "Null" or "NULL"
 * ("nULL" is a string). */
static int is_null(const yaml_node_t *n) {
  if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return 0;
  plain_value v;
  return plain_word((const char *)n->data.scalar.value, &v) && v.kind == PLAIN_NULL;
}

/* The text of a scalar (NULL for an explicit null) or -1 for another node. */
static int scalar(loader *l, const yaml_node_t *n, const char *what, const char **out) {
  if (n->type != YAML_SCALAR_NODE)
    return fail(l, n, "%s: expected a string", what);
  *out = is_null(n) ? NULL : (const char *)n->data.scalar.value;
  if (*out && strlen(*out) != n->data.scalar.length)
    return fail(l, n, "%s: contains a NUL byte", what);
  return 0;
}

/* A Go bool. A plain scalar is one of resolve.go's words (y, Yes, TRUE, off,
 * ...; a null is Go's zero value, false), as exporter-toolkit reads it; a
 * quoted one (which exporter-toolkit refuses) true, yes, on, false, no or
 * off in any case, as gpupool has always read it. */
static int boolean(loader *l, const yaml_node_t *n, const char *what, int *out) {
  const char *v;
  if (scalar(l, n, what, &v) != 0)
    return -1;
  if (!v) {
    *out = 0; /* a null: Go's zero value */
    return 0;
  }
  if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
    plain_value pv;
    if (plain_word(v, &pv) && pv.kind == PLAIN_BOOL)
      return *out = pv.b, 0;
    return fail(l, n,
                "%s: '%s' is not a YAML boolean (true, false, yes, no, on, off, y or n; as "
                "written, Title-cased or upper-cased)",
                what, v);
  }
  static const char *yes[] = {"true", "yes", "on"}, *no[] = {"false", "no", "off"};
  for (int i = 0; i < 3; i++) {
    if (!strcasecmp(v, yes[i]))
      return *out = 1, 0;
    if (!strcasecmp(v, no[i]))
      return *out = 0, 0;
  }
  return fail(l, n, "%s: '%s' is not true or false", what, v);
}

static int string_list(loader *l, const yaml_node_t *n, const char *what, str_list *out) {
  out->given = 1;
  if (is_null(n))
    return 0;
  if (n->type != YAML_SEQUENCE_NODE)
    return fail(l, n, "%s: expected a list of strings", what);
  for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
    const char *v = NULL;
    if (scalar(l, yaml_document_get_node(l->doc, *it), what, &v) != 0)
      return -1;
    if (!v)
      return fail(l, n, "%s: an empty entry", what);
    if (out->n == MAX_LIST)
      return fail(l, n, "%s: more than %d entries", what, MAX_LIST);
    out->item[out->n++] = (char *)v;
  }
  return 0;
}

typedef int (*pair_fn)(loader *l, const char *key, const yaml_node_t *value);

#define MAX_PAIRS 256 /* keys of one mapping, merged ones included */
#define MAX_MERGE 8   /* mappings merged into mappings merged into ... */

/* A mapping's pairs as they count: its own, then those that YAML's merge
 * key brings (`<<: *anchor` or `<<: [*a, *b]`, as exporter-toolkit's YAML
 * library reads it) for the keys not given yet, the first merged mapping
 * first. */
typedef struct pair_set {
  const char *key[MAX_PAIRS];
  const yaml_node_t *value[MAX_PAIRS];
  int n;
} pair_set;

/* The merge key: a plain <<, not a quoted one, which is a key like others. */
static int is_merge_key(const yaml_node_t *k) {
  return k->type == YAML_SCALAR_NODE && k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
         !strcmp((const char *)k->data.scalar.value, "<<");
}

/* Whether key is among s's keys from index from on. */
static int pair_set_has(const pair_set *s, int from, const char *key) {
  for (int i = from; i < s->n; i++)
    if (!strcmp(s->key[i], key))
      return 1;
  return 0;
}

static int collect_pairs(loader *l, const yaml_node_t *n, const char *what, pair_set *s, int depth);

/* The mappings that merge key value v names, into s. */
static int collect_merged(loader *l, const yaml_node_t *v, const char *what, pair_set *s,
                          int depth) {
  if (depth == MAX_MERGE)
    return fail(l, v, "%s: merge keys (<<) nested more than %d deep", what, MAX_MERGE);
  if (v->type == YAML_MAPPING_NODE)
    return collect_pairs(l, v, what, s, depth + 1);
  if (v->type == YAML_SEQUENCE_NODE) {
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
      const yaml_node_t *m = yaml_document_get_node(l->doc, *it);
      if (m->type != YAML_MAPPING_NODE)
        return fail(l, m, "%s: a merge key (<<) takes mappings only", what);
      if (collect_pairs(l, m, what, s, depth + 1) != 0)
        return -1;
    }
    return 0;
  }
  return fail(l, v, "%s: a merge key (<<) takes a mapping or a list of mappings", what);
}

/* Mapping n's pairs into s, after those s holds (which win); a key given
 * twice in n itself is an error, as in exporter-toolkit's strict parsing. */
static int collect_pairs(loader *l, const yaml_node_t *n, const char *what, pair_set *s,
                         int depth) {
  const yaml_node_pair_t *merge = NULL;
  int first = s->n;
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = yaml_document_get_node(l->doc, p->key);
    if (is_merge_key(k)) {
      if (merge)
        return fail(l, k, "%s: key '<<' given twice", what);
      merge = p;
      continue;
    }
    const char *key;
    if (scalar(l, k, what, &key) != 0)
      return -1;
    if (!key)
      return fail(l, k, "%s: an empty key", what);
    if (pair_set_has(s, first, key))
      return fail(l, k, "%s: key '%s' given twice", what, key);
    if (pair_set_has(s, 0, key))
      continue; /* merged, and given by a mapping that merges it */
    if (s->n == MAX_PAIRS)
      return fail(l, k, "%s: more than %d keys", what, MAX_PAIRS);
    s->key[s->n] = key;
    s->value[s->n++] = yaml_document_get_node(l->doc, p->value);
  }
  return merge ? collect_merged(l, yaml_document_get_node(l->doc, merge->value), what, s, depth)
               : 0;
}

/* Calls fn for each key of a mapping (a null node is an empty mapping),
 * merged keys included (collect_pairs). */
static int each_pair(loader *l, const yaml_node_t *n, const char *what, pair_fn fn) {
  if (is_null(n))
    return 0;
  if (n->type != YAML_MAPPING_NODE)
    return fail(l, n, "%s: expected a mapping", what);
  pair_set s; /* 4 KiB; nested mappings (fn) add one each, a few at most */
  s.n = 0;
  int rc = collect_pairs(l, n, what, &s, 0);
  for (int i = 0; rc == 0 && i < s.n; i++)
    rc = fn(l, s.key[i], s.value[i]);
  return rc;
}

static int tls_pair(loader *l, const char *key, const yaml_node_t *v) {
  raw_tls *t = &l->tls;
  static const struct {
    const char *key;
    size_t off;
  } strings[] = {
      {"cert", offsetof(raw_tls, cert)},
      {"key", offsetof(raw_tls, key)},
      {"client_ca", offsetof(raw_tls, client_ca)},
      {"cert_file", offsetof(raw_tls, cert_file)},
      {"key_file", offsetof(raw_tls, key_file)},
      {"client_ca_file", offsetof(raw_tls, client_ca_file)},
      {"client_auth_type", offsetof(raw_tls, client_auth_type)},
      {"min_version", offsetof(raw_tls, min_version)},
      {"max_version", offsetof(raw_tls, max_version)},
  };
  char what[64];
  snprintf(what, sizeof what, "tls_server_config.%s", key);
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
    if (!strcmp(key, strings[i].key)) {
      const char **out = (const char **)((char *)t + strings[i].off);
      if (scalar(l, v, what, out) != 0)
        return -1;
      /* '' is no value, as in Go (which refuses '' as a TLS version). */
      if (*out && !**out && strcmp(key, "min_version") != 0 && strcmp(key, "max_version") != 0)
        *out = NULL;
      return 0;
    }
  if (!strcmp(key, "cipher_suites"))
    return string_list(l, v, what, &t->cipher_suites);
  if (!strcmp(key, "curve_preferences"))
    return string_list(l, v, what, &t->curves);
  if (!strcmp(key, "client_allowed_sans"))
    return string_list(l, v, what, &t->sans);
  if (!strcmp(key, "prefer_server_cipher_suites"))
    return boolean(l, v, what, &t->prefer_server);
  return fail(l, v,
              "tls_server_config: unknown key '%s' (known: cert_file, key_file, cert, key, "
              "client_ca_file, client_ca, client_auth_type, client_allowed_sans, min_version, "
              "max_version, cipher_suites, prefer_server_cipher_suites, curve_preferences)",
              key);
}

/* exporter-toolkit accepts these headers only, some with fixed values. */
static const struct {
  const char *name;
  const char *values[3]; /* allowed values; none listed = any */
} allowed_headers[WEB_MAX_HEADERS] = {
    {"Strict-Transport-Security", {NULL}},
    {"X-Content-Type-Options", {"nosniff", NULL}},
    {"X-Frame-Options", {"deny", "sameorigin", NULL}},
    {"X-XSS-Protection", {NULL}},
    {"Content-Security-Policy", {NULL}},
};

static int header_pair(loader *l, const char *key, const yaml_node_t *v) {
  size_t i;
  for (i = 0; i < WEB_MAX_HEADERS; i++)
    if (!strcmp(key, allowed_headers[i].name))
      break;
  if (i == WEB_MAX_HEADERS)
    return fail(l, v,
                "http_server_config.headers: header '%s' cannot be configured (allowed: "
                "Strict-Transport-Security, X-Content-Type-Options, X-Frame-Options, "
                "X-XSS-Protection, Content-Security-Policy)",
                key);
  const char *value;
  if (scalar(l, v, "http_server_config.headers", &value) != 0)
    return -1;
  if ((!value || !*value) && allowed_headers[i].values[0])
    return fail(l, v, "http_server_config.headers.%s: '' is not one of: %s%s%s", key,
                allowed_headers[i].values[0], allowed_headers[i].values[1] ? ", " : "",
                allowed_headers[i].values[1] ? allowed_headers[i].values[1] : "");
  if (!value || !*value)
    return 0; /* blank: unset */
  if (strpbrk(value, "\r\n"))
    return fail(l, v, "http_server_config.headers.%s: a line break in the value", key);
  if (allowed_headers[i].values[0]) {
    int ok = 0;
    for (int j = 0; allowed_headers[i].values[j]; j++)
      ok |= !strcmp(value, allowed_headers[i].values[j]);
    if (!ok)
      return fail(l, v, "http_server_config.headers.%s: '%s' is not one of: %s%s%s", key, value,
                  allowed_headers[i].values[0], allowed_headers[i].values[1] ? ", " : "",
                  allowed_headers[i].values[1] ? allowed_headers[i].values[1] : "");
  }
  web_config *c = l->cfg;
  c->headers[c->nheaders].name = allowed_headers[i].name;
  c->headers[c->nheaders].value = strdup(value);
  if (!c->headers[c->nheaders].value)
    return fail(l, v, "out of memory");
  c->nheaders++;
  return 0;
}

static int http_pair(loader *l, const char *key, const yaml_node_t *v) {
  if (!strcmp(key, "headers"))
    return each_pair(l, v, "http_server_config.headers", header_pair);
  if (!strcmp(key, "http2")) {
    /* The agent speaks HTTP/1.1 only; http2 is a permission, not a demand. */
    int ignored;
    return boolean(l, v, "http_server_config.http2", &ignored);
  }
  return fail(l, v, "http_server_config: unknown key '%s' (known: headers, http2)", key);
}

/* A bcrypt hash as crypt(3) and Go's bcrypt write it: $2a$, $2b$ or $2y$,
 * a two-digit cost from 04 to 31, then 53 characters of its base64. Its
 * cost, or 0 when it is none. */
static int bcrypt_cost(const char *h) {
  if (strlen(h) != 60 || h[0] != '$' || h[1] != '2' || !strchr("aby", h[2]) || h[3] != '$' ||
      h[6] != '$')
    return 0;
  if (h[4] < '0' || h[4] > '3' || h[5] < '0' || h[5] > '9')
    return 0;
  int cost = (h[4] - '0') * 10 + (h[5] - '0');
  if (cost < 4 || cost > 31)
    return 0;
  for (const char *p = h + 7; *p; p++)
    if (!strchr("./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", *p))
      return 0;
  return cost;
}

static int user_pair(loader *l, const char *key, const yaml_node_t *v) {
  const char *hash = NULL;
  char what[300];
  snprintf(what, sizeof what, "basic_auth_users.%s", key);
  if (scalar(l, v, what, &hash) != 0)
    return -1;
  if (strchr(key, ':'))
    return fail(l, v, "%s: a user name cannot contain ':' (basic auth separates with it)", what);
  int cost = hash ? bcrypt_cost(hash) : 0;
  if (!cost)
    return fail(l, v,
                "%s: not a bcrypt hash ($2y$, $2b$ or $2a$ and a cost; `htpasswd -nBC 10 \"\" "
                "| tr -d ':\\n'` writes one)",
                what);
  /* A check runs on an HTTP thread and gpupool_agent_stop() waits for it:
   * each cost step doubles its time (cost 31: days). */
  if (cost > WEB_MAX_BCRYPT_COST)
    return fail(l, v,
                "%s: bcrypt cost %d is above the maximum of %d (each step doubles the time a "
                "login check holds an HTTP thread and the agent's stop; rehash with "
                "`htpasswd -nBC 10`)",
                what, cost, WEB_MAX_BCRYPT_COST);
  web_config *c = l->cfg;
  web_user *u = realloc(c->users, (c->nusers + 1) * sizeof *u);
  if (!u)
    return fail(l, v, "out of memory");
  c->users = u;
  u[c->nusers].name = strdup(key);
  u[c->nusers].hash = strdup(hash);
  c->nusers++;
  if (!u[c->nusers - 1].name || !u[c->nusers - 1].hash)
    return fail(l, v, "out of memory");
  return 0;
}

/* Go's time.ParseDuration, byte for byte: an optional sign, then "0" or one
 * or more of a decimal number (digits, a fraction, or both) and a unit;
 * beyond int64 nanoseconds is an error, as in Go. NULL with *neg and the
 * magnitude in *ns, or why it is not a duration. */
static const char *parse_duration(const char *s, int *neg, uint64_t *ns) {
  static const struct {
    const char *unit;
    uint64_t ns;
  } units[] = {/* µs twice: U+00B5 (micro sign) and U+03BC (mu), in UTF-8 */
               {"ns", 1},       {"us", 1000},      {"\xc2\xb5s", 1000}, {"\xce\xbcs", 1000},
               {"ms", 1000000}, {"s", 1000000000}, {"m", 60000000000},  {"h", 3600000000000}};
  const uint64_t limit = (uint64_t)1 << 63;
  uint64_t d = 0;
  *neg = *s == '-';
  if (*s == '-' || *s == '+')
    s++;
  if (!strcmp(s, "0")) {
    *ns = 0;
    return NULL;
  }
  if (!*s)
    return "invalid";
  while (*s) {
    if (*s != '.' && !(*s >= '0' && *s <= '9'))
      return "invalid";
    uint64_t v = 0, f = 0;
    double scale = 1;
    const char *p = s;
    for (; *s >= '0' && *s <= '9'; s++) {
      if (v > limit / 10)
        return "out of range";
      v = v * 10 + (uint64_t)(*s - '0');
      if (v > limit)
        return "out of range";
    }
    int digits = s != p;
    if (*s == '.') {
      p = ++s;
      /* Digits past what 63 bits hold are read and dropped, as Go does. */
      for (int full = 0; *s >= '0' && *s <= '9'; s++) {
        if (full || f > (limit - 1) / 10 || f * 10 + (uint64_t)(*s - '0') > limit) {
          full = 1;
          continue;
        }
        f = f * 10 + (uint64_t)(*s - '0');
        scale *= 10;
      }
      digits |= s != p;
    }
    if (!digits)
      return "invalid";
    size_t len = 0;
    while (s[len] && s[len] != '.' && !(s[len] >= '0' && s[len] <= '9'))
      len++;
    if (!len)
      return "missing unit";
    size_t u = 0;
    while (u < sizeof units / sizeof units[0] &&
           (strlen(units[u].unit) != len || strncmp(s, units[u].unit, len) != 0))
      u++;
    if (u == sizeof units / sizeof units[0])
      return "unknown unit";
    s += len;
    if (v > limit / units[u].ns)
      return "out of range";
    v *= units[u].ns;
    if (f > 0) {
      v += (uint64_t)((double)f * ((double)units[u].ns / scale));
      if (v > limit)
        return "out of range";
    }
    d += v;
    if (d > limit)
      return "out of range";
  }
  if (!*neg && d > limit - 1)
    return "out of range";
  *ns = d;
  return NULL;
}

static int rate_pair(loader *l, const char *key, const yaml_node_t *v) {
  const char *text;
  char what[64];
  if (strcmp(key, "interval") && strcmp(key, "burst")) /* named before its value is read */
    return fail(l, v, "rate_limit: unknown key '%s' (known: interval, burst)", key);
  snprintf(what, sizeof what, "rate_limit.%s", key);
  if (scalar(l, v, what, &text) != 0)
    return -1;
  /* A plain scalar as exporter-toolkit reads it into its Go int and
   * time.Duration (resolve_plain); a quoted one as gpupool always read it. */
  int plain = text && v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
  plain_value pv = {.kind = PLAIN_STR};
  if (plain && resolve_plain(text, &pv) != 0)
    return fail(l, v, "out of memory");
  int64_t number = 0;
  if (!strcmp(key, "interval") && plain && pv.kind != PLAIN_STR) {
    /* a number is nanoseconds (yaml.v2 sets the Duration's int64) */
    if (plain_int64(&pv, &number) != 0)
      return fail(l, v,
                  "%s: '%s' is not a Go duration (as 1s, 500ms, 1m30s; a plain number is "
                  "nanoseconds, up to 2^63 - 1)",
                  what, text);
    if (number < 0)
      return fail(l, v, "%s: '%s' is negative", what, text);
    l->cfg->rate_interval_s = (double)number / 1e9;
    return 0;
  }
  if (!strcmp(key, "interval")) {
    uint64_t ns = 0;
    int neg = 0;
    const char *why = text ? parse_duration(text, &neg, &ns) : NULL;
    if (why)
      return fail(l, v, "%s: '%s' is not a Go duration (%s; as 1s, 500ms, 1m30s)", what, text, why);
    if (neg && ns)
      return fail(l, v, "%s: '%s' is negative", what, text);
    l->cfg->rate_interval_s = (double)ns / 1e9;
    return 0;
  }
  char *end = (char *)""; /* burst */
  long b = 0;
  if (plain)
    b = plain_int64(&pv, &number) != 0 ? -1 : number > 1000000 ? 1000001 : (long)number;
  else if (text)
    b = strtol(text, &end, 10);
  if (text && (*end || b < 0 || b > 1000000))
    return fail(l, v, "%s: '%s' is not a number from 0 to 1000000", what, text);
  l->cfg->rate_burst = (unsigned)b;
  return 0;
}

static int top_pair(loader *l, const char *key, const yaml_node_t *v) {
  if (!strcmp(key, "tls_server_config"))
    return each_pair(l, v, "tls_server_config", tls_pair);
  if (!strcmp(key, "http_server_config"))
    return each_pair(l, v, "http_server_config", http_pair);
  if (!strcmp(key, "basic_auth_users"))
    return each_pair(l, v, "basic_auth_users", user_pair);
  if (!strcmp(key, "rate_limit"))
    return each_pair(l, v, "rate_limit", rate_pair);
  return fail(l, v,
              "unknown key '%s' (known: tls_server_config, http_server_config, "
              "basic_auth_users, rate_limit)",
              key);
}

/* ---- TLS ---- */

/* Go's TLS version names. */
static int tls_version(loader *l, const char *what, const char *v, int def) {
  if (!v)
    return def;
  static const char *names[] = {"TLS10", "TLS11", "TLS12", "TLS13"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(v, names[i]))
      return 10 + i;
  fail(l, NULL, "tls_server_config.%s: unknown TLS version '%s' (TLS12 or TLS13)", what, v);
  return -1;
}

/* Go's names of TLS 1.2 cipher suites (crypto/tls CipherSuites()) as GnuTLS
 * key exchange, cipher and MAC. */
static const struct {
  const char *go, *kx, *cipher, *mac;
} suites[] = {
    {"TLS_RSA_WITH_AES_128_CBC_SHA", "RSA", "AES-128-CBC", "SHA1"},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", "RSA", "AES-256-CBC", "SHA1"},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", "RSA", "AES-128-GCM", "AEAD"},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", "RSA", "AES-256-GCM", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA", "AES-128-CBC", "SHA1"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA", "AES-256-CBC", "SHA1"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA", "AES-128-CBC", "SHA1"},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA", "AES-256-CBC", "SHA1"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA", "AES-128-GCM", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA", "AES-256-GCM", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA", "AES-128-GCM", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA", "AES-256-GCM", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA", "CHACHA20-POLY1305", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA", "CHACHA20-POLY1305", "AEAD"},
    /* TLS 1.3 suites: always on with TLS 1.3, as in Go, whatever the list. */
    {"TLS_AES_128_GCM_SHA256", NULL, NULL, NULL},
    {"TLS_AES_256_GCM_SHA384", NULL, NULL, NULL},
    {"TLS_CHACHA20_POLY1305_SHA256", NULL, NULL, NULL},
};

/* Go's crypto/tls has these constants too, for the suites above that end
 * in _SHA256; exporter-toolkit matches names against tls.CipherSuites(),
 * which names them with _SHA256 only, and refuses the short ones. */
static const char *const suite_aliases[] = {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
                                            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"};

/* The suites[] row of Go's name, or -1 with the loader's error. */
static int find_suite(loader *l, const char *name) {
  for (size_t j = 0; j < sizeof suites / sizeof suites[0]; j++)
    if (!strcmp(name, suites[j].go))
      return (int)j;
  for (size_t j = 0; j < sizeof suite_aliases / sizeof suite_aliases[0]; j++)
    if (!strcmp(name, suite_aliases[j]))
      return fail(l, NULL,
                  "tls_server_config.cipher_suites: unknown cipher suite '%s' (Go's constant "
                  "alias, which exporter-toolkit refuses): write %s_SHA256",
                  name, name);
  return fail(l, NULL,
              "tls_server_config.cipher_suites: unknown or insecure cipher suite '%s' (Go's "
              "names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)",
              name);
}

/* The two-byte IANA number of suites[j] as GnuTLS knows it: 0, or -1 when
 * GnuTLS has no such TLS 1.2 suite. */
static int suite_number(size_t j, unsigned char id[2]) {
  unsigned char cs[2];
  gnutls_kx_algorithm_t kx;
  gnutls_cipher_algorithm_t cipher;
  gnutls_mac_algorithm_t mac;
  gnutls_protocol_t min;
  for (size_t i = 0; gnutls_cipher_suite_info(i, cs, &kx, &cipher, &mac, &min); i++)
    if (min <= GNUTLS_TLS1_2 &&
        !strcmp(gnutls_kx_get_name(kx) ? gnutls_kx_get_name(kx) : "", suites[j].kx) &&
        !strcmp(gnutls_cipher_get_name(cipher), suites[j].cipher) &&
        !strcmp(gnutls_mac_get_name(mac), suites[j].mac)) {
      memcpy(id, cs, 2);
      return 0;
    }
  return -1;
}

int web_config_tls12_suite_allowed(const web_config *c, const unsigned char id[2]) {
  if (!c->ntls12_suites)
    return 1;
  for (size_t i = 0; i < c->ntls12_suites; i++)
    if (!memcmp(c->tls12_suites[i], id, 2))
      return 1;
  return 0;
}

static const struct {
  const char *go, *gnutls;
} curves[] = {
    {"CurveP256", "GROUP-SECP256R1"},
    {"CurveP384", "GROUP-SECP384R1"},
    {"CurveP521", "GROUP-SECP521R1"},
    {"X25519", "GROUP-X25519"},
};

/* The curves[] row of Go's name, or -1 with the loader's error. */
static int find_curve(loader *l, const char *name) {
  for (size_t j = 0; j < sizeof curves / sizeof curves[0]; j++)
    if (!strcmp(name, curves[j].go))
      return (int)j;
  return fail(l, NULL,
              "tls_server_config.curve_preferences: unknown curve '%s' (CurveP256, CurveP384, "
              "CurveP521, X25519)",
              name);
}

/* Appends ":+item" unless s already has it. */
static void add_item(char *s, size_t len, const char *item) {
  char needle[64];
  snprintf(needle, sizeof needle, ":+%s:", item);
  char probe[1024];
  snprintf(probe, sizeof probe, "%s:", s);
  if (strstr(probe, needle))
    return;
  size_t n = strlen(s);
  snprintf(s + n, len - n, ":+%s", item);
}

/* Nonzero, with the loader's error, when GnuTLS refuses priority string p. */
static int priority_refused(loader *l, const char *p) {
  gnutls_priority_t prio;
  const char *pos = NULL;
  int rc = gnutls_priority_init(&prio, p, &pos);
  if (rc != GNUTLS_E_SUCCESS)
    return fail(l, NULL, "tls_server_config: GnuTLS refuses the priority string '%s' at '%s': %s",
                p, pos ? pos : "?", gnutls_strerror(rc));
  gnutls_priority_deinit(prio);
  return 0;
}

/* The public-key algorithm of the server certificate (GNUTLS_PK_UNKNOWN
 * when it cannot be read). */
static int cert_pk(const web_config *c) {
  gnutls_x509_crt_t crt;
  gnutls_datum_t d = {(unsigned char *)c->cert_pem, (unsigned)c->cert_len};
  if (gnutls_x509_crt_init(&crt) != 0)
    return GNUTLS_PK_UNKNOWN;
  int pk = gnutls_x509_crt_import(crt, &d, GNUTLS_X509_FMT_PEM) == 0
               ? gnutls_x509_crt_get_pk_algorithm(crt, NULL)
               : GNUTLS_PK_UNKNOWN;
  gnutls_x509_crt_deinit(crt);
  return pk;
}

/* Whether a key of algorithm pk can sign for a TLS 1.2 key exchange of
 * suites[]: ECDSA suites want an elliptic-curve key, the others RSA. */
static int key_serves(int pk, const char *kx) {
  int ec = pk == GNUTLS_PK_ECDSA || pk == GNUTLS_PK_EDDSA_ED25519 || pk == GNUTLS_PK_EDDSA_ED448;
  return strstr(kx, "ECDSA") ? ec : pk == GNUTLS_PK_RSA;
}

/* The priority string of each listed TLS 1.2 suite alone (tls12_priority),
 * row[i] its suites[] row. */
static int suite_priorities(loader *l, const size_t *row, const char *groups) {
  web_config *c = l->cfg;
  int pk = c->ntls12_suites ? cert_pk(c) : GNUTLS_PK_UNKNOWN; /* read once, not per suite */
  for (size_t i = 0; i < c->ntls12_suites; i++) {
    if (!key_serves(pk, suites[row[i]].kx))
      continue;
    char p[512];
    snprintf(p, sizeof p,
             "NORMAL:-VERS-ALL:+VERS-TLS1.2:-KX-ALL:-CIPHER-ALL:-MAC-ALL:+%s:+%s:+%s%s",
             suites[row[i]].kx, suites[row[i]].cipher, suites[row[i]].mac, groups);
    if (priority_refused(l, p))
      return -1;
    if (!(c->tls12_priority[i] = strdup(p)))
      return fail(l, NULL, "out of memory");
  }
  return 0;
}

static int build_priorities(loader *l) {
  raw_tls *t = &l->tls;
  int min = tls_version(l, "min_version", t->min_version, 12);
  int max = min < 0 ? -1 : tls_version(l, "max_version", t->max_version, 13);
  if (min < 0 || max < 0)
    return -1;
  if (min < 12)
    return fail(l, NULL,
                "tls_server_config.min_version: %s is weaker than TLS12: TLS 1.0 and 1.1 are "
                "not offered",
                t->min_version);
  if (max < min)
    return fail(l, NULL, "tls_server_config: max_version %s is below min_version %s",
                t->max_version, t->min_version ? t->min_version : "TLS12");
  char p[1024] = "NORMAL:-VERS-ALL";
  if (max >= 13)
    add_item(p, sizeof p, "VERS-TLS1.3");
  if (min <= 12)
    add_item(p, sizeof p, "VERS-TLS1.2");
  size_t row[WEB_MAX_TLS12_SUITES]; /* each listed TLS 1.2 suite's suites[] row */
  if (t->cipher_suites.n) {
    char kx[256] = "", ciphers[256] = "", macs[256] = "";
    for (size_t i = 0; i < t->cipher_suites.n; i++) {
      int found = find_suite(l, t->cipher_suites.item[i]);
      if (found < 0)
        return -1;
      size_t j = (size_t)found;
      if (!suites[j].kx)
        continue;
      unsigned char id[2];
      if (suite_number(j, id) != 0)
        return fail(l, NULL, "tls_server_config.cipher_suites: GnuTLS does not offer '%s'",
                    t->cipher_suites.item[i]);
      web_config *c = l->cfg;
      if (web_config_tls12_suite_allowed(c, id) && c->ntls12_suites) /* listed twice */
        continue;
      gp_assert_internal(c->ntls12_suites < WEB_MAX_TLS12_SUITES); /* distinct suites[] rows */
      row[c->ntls12_suites] = j;
      memcpy(c->tls12_suites[c->ntls12_suites++], id, 2);
      add_item(kx, sizeof kx, suites[j].kx);
      add_item(ciphers, sizeof ciphers, suites[j].cipher);
      add_item(macs, sizeof macs, suites[j].mac);
    }
    if (max >= 13) { /* TLS 1.3's own suites stay, after the listed ones */
      add_item(ciphers, sizeof ciphers, "AES-128-GCM");
      add_item(ciphers, sizeof ciphers, "AES-256-GCM");
      add_item(ciphers, sizeof ciphers, "CHACHA20-POLY1305");
      add_item(macs, sizeof macs, "AEAD");
    }
    if (!kx[0] && min <= 12 && max == 12)
      return fail(l, NULL, "tls_server_config.cipher_suites: no TLS 1.2 cipher suite listed");
    size_t n = strlen(p);
    snprintf(p + n, sizeof p - n, ":-KX-ALL:-CIPHER-ALL:-MAC-ALL%s%s%s", kx, ciphers, macs);
  } else {
    /* Go's default TLS 1.2 suites (1.22 on): ECDHE only, with AES-GCM,
     * ChaCha20-Poly1305 and AES-CBC-SHA; GnuTLS's NORMAL adds static RSA key
     * exchange, AES-CCM and CBC-SHA256/384. TLS 1.3 keeps its three. */
    size_t n = strlen(p);
    snprintf(p + n, sizeof p - n,
             ":-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:"
             "+CHACHA20-POLY1305:+AES-128-CBC:+AES-256-CBC:-MAC-ALL:+AEAD:+SHA1");
  }
  char groups[256] = "";
  if (t->curves.n) {
    snprintf(groups, sizeof groups, ":-GROUP-ALL");
    for (size_t i = 0; i < t->curves.n; i++) {
      int j = find_curve(l, t->curves.item[i]);
      if (j < 0)
        return -1;
      add_item(groups, sizeof groups, curves[j].gnutls);
    }
    size_t n = strlen(p);
    snprintf(p + n, sizeof p - n, "%s", groups);
  }
  l->cfg->prefer_server = t->prefer_server;
  if (suite_priorities(l, row, groups) != 0)
    return -1;
  if (t->prefer_server)
    add_item(p, sizeof p, "%SERVER_PRECEDENCE");
  /* add_item wrote ":+%SERVER_PRECEDENCE": GnuTLS wants it without '+'. */
  char *sp = strstr(p, ":+%");
  if (sp)
    memmove(sp + 1, sp + 2, strlen(sp + 2) + 1);
  if (priority_refused(l, p))
    return -1;
  l->cfg->priorities = strdup(p);
  return l->cfg->priorities ? 0 : fail(l, NULL, "out of memory");
}

/* A path as the file names it: relative ones start at the file's directory. */
static int load_pem(loader *l, const char *what, const char *file, const char *inline_pem,
                    char **out, size_t *len) {
  if (file && inline_pem)
    return fail(l, NULL, "tls_server_config: give %s or %s_file, not both", what, what);
  if (inline_pem) {
    *out = strdup(inline_pem);
    *len = strlen(inline_pem);
    return *out ? 0 : fail(l, NULL, "out of memory");
  }
  char path[PATH_MAX];
  int n = file[0] == '/' ? snprintf(path, sizeof path, "%s", file)
                         : snprintf(path, sizeof path, "%.*s/%s", PATH_MAX / 2, l->dir, file);
  if (n < 0 || (size_t)n >= sizeof path)
    return fail(l, NULL, "tls_server_config.%s_file: the path is too long", what);
  int listed = l->files->n < WEB_MAX_FILES;
  if (listed)
    snprintf(l->files->path[l->files->n++], PATH_MAX, "%s", path);
  char why[PATH_MAX + 100];
  *out = read_hashed(listed ? l->digest : NULL, path, len, why, sizeof why);
  if (!*out)
    return fail(l, NULL, "tls_server_config.%s_file: %s", what, why);
  if (strlen(*out) != *len) { /* libmicrohttpd reads PEM text up to the first NUL */
    free(*out);
    *out = NULL;
    return fail(l, NULL, "tls_server_config.%s_file: %s holds a NUL byte (not PEM text)", what,
                path);
  }
  return 0;
}

static int check_time(loader *l, gnutls_x509_crt_t crt, const char *what, int64_t now) {
  time_t from = gnutls_x509_crt_get_activation_time(crt);
  time_t until = gnutls_x509_crt_get_expiration_time(crt);
  char when[32];
  if (until != (time_t)-1 && (int64_t)until < now) {
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&until));
    return fail(l, NULL, "tls_server_config: the %s expired at %s", what, when);
  }
  if (from != (time_t)-1 && (int64_t)from > now) {
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&from));
    return fail(l, NULL, "tls_server_config: the %s is not valid before %s", what, when);
  }
  return 0;
}

/* Parses every certificate of pem; checks the first (or every one) is valid now. */
static int check_certs(loader *l, const char *what, const char *pem, size_t len, int64_t now,
                       int all, int64_t *not_after) {
  gnutls_x509_crt_t *list = NULL;
  unsigned n = 0;
  gnutls_datum_t d = {(unsigned char *)pem, (unsigned)len};
  int rc = gnutls_x509_crt_list_import2(&list, &n, &d, GNUTLS_X509_FMT_PEM, 0);
  if (rc < 0 || n == 0) {
    if (rc >= 0)
      gnutls_free(list);
    return fail(l, NULL, "tls_server_config: the %s is not a PEM certificate: %s", what,
                rc < 0 ? gnutls_strerror(rc) : "no certificate in it");
  }
  int bad = 0;
  for (unsigned i = 0; i < n; i++) {
    if (!bad && (i == 0 || all))
      bad = check_time(l, list[i], what, now);
    if (i == 0 && not_after)
      *not_after = (int64_t)gnutls_x509_crt_get_expiration_time(list[i]);
    gnutls_x509_crt_deinit(list[i]);
  }
  gnutls_free(list);
  return bad ? -1 : 0;
}

static int load_tls(loader *l, int64_t now) {
  raw_tls *t = &l->tls;
  web_config *c = l->cfg;
  if (!t->cert_file && !t->cert)
    return fail(l, NULL, "tls_server_config: missing one of cert_file or cert");
  if (!t->key_file && !t->key)
    return fail(l, NULL, "tls_server_config: missing one of key_file or key");
  static const char *modes[] = {"NoClientCert", "RequestClientCert", "RequireAnyClientCert",
                                "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"};
  c->client_auth = WEB_CLIENT_NONE;
  if (t->client_auth_type) {
    int m = -1;
    for (int i = 0; i < 5; i++)
      if (!strcmp(t->client_auth_type, modes[i]))
        m = i;
    if (!strcmp(t->client_auth_type, "RequireClientCert")) /* the old name */
      m = WEB_CLIENT_REQUIRE_ANY;
    if (m < 0)
      return fail(l, NULL,
                  "tls_server_config.client_auth_type: '%s' is not one of NoClientCert, "
                  "RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, "
                  "RequireAndVerifyClientCert",
                  t->client_auth_type);
    c->client_auth = (web_client_auth)m;
  }
  if (load_pem(l, "cert", t->cert_file, t->cert, &c->cert_pem, &c->cert_len) != 0 ||
      load_pem(l, "key", t->key_file, t->key, &c->key_pem, &c->key_len) != 0)
    return -1;
  if ((t->client_ca_file || t->client_ca) &&
      load_pem(l, "client_ca", t->client_ca_file, t->client_ca, &c->ca_pem, &c->ca_len) != 0)
    return -1;
  if (c->ca_pem && c->client_auth == WEB_CLIENT_NONE)
    return fail(l, NULL,
                "tls_server_config: client CAs have been configured without a "
                "client_auth_type (RequireAndVerifyClientCert verifies clients)");
  if (!c->ca_pem && c->client_auth >= WEB_CLIENT_VERIFY_IF_GIVEN)
    return fail(l, NULL,
                "tls_server_config: client_auth_type %s needs client_ca_file (or "
                "client_ca) to verify client certificates against",
                t->client_auth_type);
  if (check_certs(l, t->cert_file ? "certificate (cert_file)" : "certificate (cert)", c->cert_pem,
                  c->cert_len, now, 0, &c->cert_not_after) != 0)
    return -1;
  if (c->ca_pem &&
      check_certs(l, t->client_ca_file ? "client CA (client_ca_file)" : "client CA (client_ca)",
                  c->ca_pem, c->ca_len, now, 1, NULL) != 0)
    return -1;
  /* The key must be readable and belong to the certificate. */
  gnutls_certificate_credentials_t cred;
  if (gnutls_certificate_allocate_credentials(&cred) != GNUTLS_E_SUCCESS)
    return fail(l, NULL, "out of memory");
  gnutls_datum_t cd = {(unsigned char *)c->cert_pem, (unsigned)c->cert_len};
  gnutls_datum_t kd = {(unsigned char *)c->key_pem, (unsigned)c->key_len};
  int rc = gnutls_certificate_set_x509_key_mem2(cred, &cd, &kd, GNUTLS_X509_FMT_PEM, NULL, 0);
  gnutls_certificate_free_credentials(cred);
  if (rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
    return fail(l, NULL, "tls_server_config: the key (%s) does not belong to the certificate (%s)",
                t->key_file ? "key_file" : "key", t->cert_file ? "cert_file" : "cert");
  if (rc < 0)
    return fail(l, NULL, "tls_server_config: cannot load the certificate and key: %s",
                gnutls_strerror(rc));
  if (t->sans.given) {
    c->allowed_sans = calloc(t->sans.n ? t->sans.n : 1, sizeof *c->allowed_sans);
    if (!c->allowed_sans)
      return fail(l, NULL, "out of memory");
    for (size_t i = 0; i < t->sans.n; i++)
      if (!(c->allowed_sans[c->nsans++] = strdup(t->sans.item[i])))
        return fail(l, NULL, "out of memory");
    if (c->client_auth == WEB_CLIENT_NONE)
      return fail(l, NULL,
                  "tls_server_config: client_allowed_sans needs a client_auth_type that asks "
                  "for a certificate (RequireAndVerifyClientCert, ...)");
  }
  return build_priorities(l);
}

/* As exporter-toolkit: TLS is on when a certificate, key, client CA or
 * client_auth_type is given; without one the other keys are ignored (no
 * TLS, plain HTTP). */
static int tls_enabled(const raw_tls *t) {
  return t->cert || t->key || t->client_ca || t->cert_file || t->key_file || t->client_ca_file ||
         t->client_auth_type;
}

/* Without TLS, Go still refuses unknown version, suite and curve names. */
static int check_tls_names(loader *l) {
  raw_tls *t = &l->tls;
  if (tls_version(l, "min_version", t->min_version, 12) < 0 ||
      tls_version(l, "max_version", t->max_version, 13) < 0)
    return -1;
  for (size_t i = 0; i < t->cipher_suites.n; i++)
    if (find_suite(l, t->cipher_suites.item[i]) < 0)
      return -1;
  for (size_t i = 0; i < t->curves.n; i++)
    if (find_curve(l, t->curves.item[i]) < 0)
      return -1;
  return 0;
}

static void digest_tls(web_config *c) {
  gnutls_hash_hd_t h;
  memset(c->tls_digest, 0, sizeof c->tls_digest);
  if (gnutls_hash_init(&h, GNUTLS_DIG_SHA256) != 0)
    return;
  int parts[] = {c->tls, (int)c->client_auth, (int)c->nsans, (int)c->ntls12_suites};
  gnutls_hash(h, parts, sizeof parts);
  gnutls_hash(h, c->tls12_suites, sizeof c->tls12_suites);
  const char *strs[] = {c->cert_pem, c->key_pem, c->ca_pem, c->priorities};
  for (size_t i = 0; i < 4; i++) {
    size_t n = strs[i] ? strlen(strs[i]) + 1 : 0;
    gnutls_hash(h, &n, sizeof n);
    if (n)
      gnutls_hash(h, strs[i], n);
  }
  for (size_t i = 0; i < c->nsans; i++)
    gnutls_hash(h, c->allowed_sans[i], strlen(c->allowed_sans[i]) + 1);
  gnutls_hash_deinit(h, c->tls_digest);
}

static const char *yaml_problem(const yaml_parser_t *p) {
  return p->problem ? p->problem : "malformed YAML";
}

int web_config_load(const char *path, int64_t now, web_config **out, web_files *files, char *err,
                    size_t errlen) {
  *out = NULL;
  memset(files, 0, sizeof *files);
  snprintf(files->path[files->n++], PATH_MAX, "%s", path);
  char why[PATH_MAX + 200];
  size_t len;
  gnutls_hash_hd_t digest = NULL;
  memset(files->digest, 0, sizeof files->digest); /* without a digest: differs, a reload later */
  if (gnutls_hash_init(&digest, GNUTLS_DIG_SHA256) != 0)
    digest = NULL;
  char *text = read_hashed(digest, path, &len, why, sizeof why);
  if (!text) {
    if (digest)
      gnutls_hash_deinit(digest, files->digest);
    snprintf(err, errlen, "web_config: %s", why);
    return -1;
  }
  loader l = {.files = files, .digest = digest, .err = why, .errlen = sizeof why};
  l.tls.prefer_server = 1;
  const char *slash = strrchr(path, '/');
  if (slash)
    snprintf(l.dir, sizeof l.dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);
  else
    snprintf(l.dir, sizeof l.dir, ".");
  web_config *c = calloc(1, sizeof *c);
  yaml_parser_t parser;
  yaml_document_t doc;
  int have_doc = 0, rc = -1;
  if (!c) {
    snprintf(why, sizeof why, "out of memory");
    goto done;
  }
  l.cfg = c;
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    snprintf(why, sizeof why, "line %lu: %s%s%s", (unsigned long)parser.problem_mark.line + 1,
             yaml_problem(&parser), parser.context ? " " : "",
             parser.context ? parser.context : "");
    yaml_parser_delete(&parser);
    goto done;
  }
  have_doc = 1;
  l.doc = &doc;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  c->empty = root == NULL;
  if (root) {
    if (root->type != YAML_MAPPING_NODE && !is_null(root)) {
      fail(&l, root, "the file must be a mapping (tls_server_config:, basic_auth_users:, ...)");
      goto parsed;
    }
    if (each_pair(&l, root, "web_config", top_pair) != 0)
      goto parsed;
  }
  /* Only one document: a second one would be silently ignored. */
  {
    yaml_document_t next;
    if (!yaml_parser_load(&parser, &next)) {
      snprintf(why, sizeof why, "line %lu: %s", (unsigned long)parser.problem_mark.line + 1,
               yaml_problem(&parser));
      goto parsed;
    }
    int more = yaml_document_get_root_node(&next) != NULL;
    yaml_document_delete(&next);
    if (more) {
      snprintf(why, sizeof why, "more than one YAML document");
      goto parsed;
    }
  }
  if (c->rate_interval_s > 0 && c->rate_burst == 0) {
    snprintf(why, sizeof why, "rate_limit: an interval needs a burst of at least 1");
    goto parsed;
  }
  c->tls = tls_enabled(&l.tls);
  if ((c->tls ? load_tls(&l, now) : check_tls_names(&l)) != 0)
    goto parsed;
  digest_tls(c);
  rc = 0;
parsed:
  yaml_parser_delete(&parser);
done:
  if (have_doc)
    yaml_document_delete(&doc);
  free(text);
  if (digest)
    gnutls_hash_deinit(digest, files->digest);
  if (rc != 0) {
    snprintf(err, errlen, "web_config %s: %s", path, why);
    web_config_free(c);
    return -1;
  }
  *out = c;
  return 0;
}

void web_config_free(web_config *c) {
  if (!c)
    return;
  free(c->cert_pem);
  if (c->key_pem) {
    explicit_bzero(c->key_pem, c->key_len);
    free(c->key_pem);
  }
  free(c->ca_pem);
  for (size_t i = 0; i < c->nsans; i++)
    free(c->allowed_sans[i]);
  free(c->allowed_sans);
  free(c->priorities);
  for (size_t i = 0; i < c->ntls12_suites; i++)
    free(c->tls12_priority[i]);
  for (size_t i = 0; i < c->nheaders; i++)
    free(c->headers[i].value);
  for (size_t i = 0; i < c->nusers; i++) {
    free(c->users[i].name);
    free(c->users[i].hash);
  }
  free(c->users);
  free(c);
}
