#include "http_accept.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* "q=0.5" parsed by hand: headers are not in the program's locale. */
static double parse_q(const char *s, const char *end) {
  while (s < end && isspace((unsigned char)*s))
    s++;
  if (s >= end || !isdigit((unsigned char)*s))
    return 1.0;
  double v = *s++ - '0';
  if (s < end && *s == '.') {
    double scale = 0.1;
    for (s++; s < end && isdigit((unsigned char)*s); s++, scale /= 10)
      v += (*s - '0') * scale;
  }
  return v > 1.0 ? 1.0 : v;
}

/* How specifically a list element's token matches what is asked for
 * (higher: more specific), 0 when it does not. */
typedef int (*match_fn)(const char *tok, size_t len, const void *arg);

/* The value of parameter `name` among an element's ";name=value" list
 * [params, end) ('"' quotes dropped) into out, or 0 when it has none. */
static int param_value(const char *params, const char *end, const char *name, char *out,
                       size_t outlen) {
  size_t nlen = strlen(name);
  for (const char *p = params; p && p < end;) {
    const char *b = p + 1;
    while (b < end && isspace((unsigned char)*b))
      b++;
    const char *next = memchr(b, ';', (size_t)(end - b));
    const char *stop = next ? next : end;
    if ((size_t)(stop - b) > nlen && strncasecmp(b, name, nlen) == 0 && b[nlen] == '=') {
      const char *v = b + nlen + 1, *ve = stop;
      while (ve > v && isspace((unsigned char)ve[-1]))
        ve--;
      if (ve - v >= 2 && *v == '"' && ve[-1] == '"')
        v++, ve--;
      size_t n = (size_t)(ve - v) < outlen - 1 ? (size_t)(ve - v) : outlen - 1;
      memcpy(out, v, n);
      out[n] = 0;
      return 1;
    }
    p = next;
  }
  return 0;
}

/* Over the elements "token;param;param" of a comma-separated header: the q
 * of the most specific matching element (0 when none matches). An element
 * whose version parameter is not one of versions (when given) does not
 * match; *version (when given) gets the chosen element's version, "" when
 * it names none. */
static double best_q(const char *header, match_fn match, const void *arg,
                     const char *const *versions, char *version, size_t version_len) {
  double q_best = 0.0;
  int spec_best = 0;
  const char *p = header;
  while (*p) {
    const char *end = strchr(p, ',');
    if (!end)
      end = p + strlen(p);
    const char *semi = memchr(p, ';', (size_t)(end - p));
    const char *tok_end = semi ? semi : end;
    while (p < tok_end && isspace((unsigned char)*p))
      p++;
    while (tok_end > p && isspace((unsigned char)tok_end[-1]))
      tok_end--;
    int spec = match(p, (size_t)(tok_end - p), arg);
    char v[16] = "";
    if (spec && versions && param_value(semi, end, "version", v, sizeof v)) {
      int known = 0;
      for (const char *const *k = versions; *k; k++)
        known |= strcmp(v, *k) == 0;
      if (!known)
        spec = 0;
    }
    if (spec) {
      double q = 1.0;
      for (const char *param = semi; param;) { /* each ";name=value" after the token */
        const char *b = param + 1;
        while (b < end && isspace((unsigned char)*b))
          b++;
        const char *next = NULL;
        for (const char *x = b; x < end && !next; x++)
          if (*x == ';')
            next = x;
        const char *stop = next ? next : end;
        if (stop - b >= 2 && (b[0] == 'q' || b[0] == 'Q') && b[1] == '=')
          q = parse_q(b + 2, stop);
        param = next;
      }
      if (spec > spec_best || (spec == spec_best && q > q_best)) {
        spec_best = spec;
        q_best = q;
        if (version)
          snprintf(version, version_len, "%s", v);
      }
    }
    p = *end ? end + 1 : end;
  }
  return q_best;
}

static int match_media(const char *tok, size_t len, const void *arg) {
  const char *type = arg;
  size_t tlen = strlen(type);
  if (len == tlen && strncasecmp(tok, type, len) == 0)
    return 3;
  const char *slash = strchr(type, '/');
  size_t major = (size_t)(slash - type);
  if (len == major + 2 && strncasecmp(tok, type, major + 1) == 0 && tok[major + 1] == '*')
    return 2;
  if (len == 3 && strncmp(tok, "*/*", 3) == 0)
    return 1;
  return 0;
}

double http_accept_q(const char *header, const char *type, int wildcard_ok) {
  if (!header || !*header)
    return wildcard_ok ? 1.0 : 0.0;
  return best_q(header, match_media, type, NULL, NULL, 0);
}

static int match_media_exact(const char *tok, size_t len, const void *arg) {
  return match_media(tok, len, arg) == 3;
}

double http_accept_q_version(const char *header, const char *type, const char *const *versions,
                             char *version, size_t version_len) {
  if (version_len)
    version[0] = 0;
  if (!header || !*header)
    return 0.0;
  return best_q(header, match_media_exact, type, versions, version, version_len);
}

static int match_coding(const char *tok, size_t len, const void *arg) {
  const char *coding = arg;
  if (len == strlen(coding) && strncasecmp(tok, coding, len) == 0)
    return 2;
  if (len == 6 && strncasecmp(tok, "x-gzip", 6) == 0 && strcmp(coding, "gzip") == 0)
    return 2;
  if (len == 1 && tok[0] == '*')
    return 1;
  return 0;
}

int http_accepts_gzip(const char *accept_encoding) {
  if (!accept_encoding)
    return 0;
  return best_q(accept_encoding, match_coding, "gzip", NULL, NULL, 0) > 0.0;
}
