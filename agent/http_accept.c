#include "http_accept.h"

#include <ctype.h>
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

/* Over the elements "token;param;param" of a comma-separated header: the q
 * of the most specific matching element (0 when none matches). */
static double best_q(const char *header, match_fn match, const void *arg) {
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
  return best_q(header, match_media, type);
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
  return best_q(accept_encoding, match_coding, "gzip") > 0.0;
}
