#include "kvconf.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (copy_trimmed(p, end, key, sizeof key) == 0 && key[0] == '\0') {
      snprintf(err, errlen, "empty entry (a stray ',') in '%s'", text);
      return -1;
    }
    if (!colon) {
      snprintf(err, errlen, "'%.*s' is not key:value", (int)(end - p), p);
      return -1;
    }
    if (copy_trimmed(p, colon, key, sizeof key) != 0 ||
        copy_trimmed(colon + 1, end, value, sizeof value) != 0) {
      snprintf(err, errlen, "'%.*s' is too long", (int)(end - p), p);
      return -1;
    }
    if (key[0] == '\0') {
      snprintf(err, errlen, "empty key in '%.*s'", (int)(end - p), p);
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
  }
}

int kvconf_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  if (!s || !isdigit((unsigned char)s[0]))
    return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end != '\0' || v < min || v > max)
    return -1;
  *out = v;
  return 0;
}

int kvconf_double(const char *s, double min, double max, double *out) {
  if (!s || !(isdigit((unsigned char)s[0]) || s[0] == '.' || s[0] == '-' || s[0] == '+'))
    return -1;
  /* strtod follows LC_NUMERIC; configuration is always written with '.'. */
  double sign = 1, v = 0, scale = 1;
  const char *p = s;
  if (*p == '-' || *p == '+')
    sign = *p++ == '-' ? -1 : 1;
  int digits = 0;
  for (; isdigit((unsigned char)*p); p++, digits++)
    v = v * 10 + (*p - '0');
  if (*p == '.')
    for (p++; isdigit((unsigned char)*p); p++, digits++)
      v += (*p - '0') * (scale /= 10);
  if (!digits || *p != '\0')
    return -1;
  v *= sign;
  if (!isfinite(v) || v < min || v > max)
    return -1;
  *out = v;
  return 0;
}
