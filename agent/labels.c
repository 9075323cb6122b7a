#include "labels.h"

#include <stdio.h>
#include <string.h>

#include "core/utf8.h"

/* Set by the scraper (job, instance, Kubernetes), by the agent on every pool
 * series, or by one of its families: a constant label of the same name would
 * make a series with a duplicate label. */
static const char *const reserved[] = {
    "job",     "instance", "pod",   "namespace", "container", "node",    "hostname",
    "device",  "UUID",     "pool",  "le",        "quantile",  "source",  "state",
    "op",      "kind",     "owner", "code",      "reason",    "version", "name",
    "backend", "strategy", "zlib",  "cuda",      "tag", /* gpupool_tag_allocated_bytes */
};

int label_name_valid(const char *name) {
  if (!name || !*name)
    return 0;
  for (const char *p = name; *p; p++) {
    char c = *p;
    int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    int digit = c >= '0' && c <= '9';
    if (!(alpha || (digit && p != name)))
      return 0;
  }
  return 1;
}

int label_name_reserved(const char *name) {
  if (strncmp(name, "__", 2) == 0)
    return 1;
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
    if (strcmp(name, reserved[i]) == 0)
      return 1;
  return 0;
}

int utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  for (size_t left = strlen(s); left;) {
    size_t n = utf8_char_len(p, left);
    if (!n)
      return 0;
    p += n;
    left -= n;
  }
  return 1;
}

void utf8_sanitize(const char *s, char *out, size_t outlen) {
  const unsigned char *p = (const unsigned char *)s;
  size_t o = 0;
  for (size_t left = strlen(s); left;) {
    size_t n = utf8_char_len(p, left);
    const unsigned char *src = n ? p : (const unsigned char *)"?";
    size_t k = n ? n : 1;
    if (o + k >= outlen)
      break; /* truncate on a character boundary */
    memcpy(out + o, src, k);
    o += k;
    p += k;
    left -= k;
  }
  out[o] = '\0';
}

/* One "name=value" item of [b, e). */
static int parse_item(const char *b, const char *e, agent_labels *out, char *err, size_t errlen) {
  const char *eq = memchr(b, '=', (size_t)(e - b));
  if (!eq) {
    snprintf(err, errlen, "labels: '%.*s' is not name=value", (int)(e - b), b);
    return -1;
  }
  size_t nlen = (size_t)(eq - b), vlen = (size_t)(e - eq - 1);
  if (out->n == LABELS_MAX) {
    snprintf(err, errlen, "labels: more than %d labels", LABELS_MAX);
    return -1;
  }
  if (nlen >= LABEL_NAME_MAX || vlen >= LABEL_VALUE_MAX) {
    snprintf(err, errlen, "labels: '%.*s' is too long", (int)(e - b), b);
    return -1;
  }
  char *name = out->name[out->n], *value = out->value[out->n];
  memcpy(name, b, nlen);
  name[nlen] = '\0';
  memcpy(value, eq + 1, vlen);
  value[vlen] = '\0';
  if (!label_name_valid(name)) {
    snprintf(err, errlen, "labels: '%s' is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)", name);
    return -1;
  }
  if (label_name_reserved(name)) {
    snprintf(err, errlen, "labels: '%s' is reserved (set by the agent or the scraper)", name);
    return -1;
  }
  for (size_t i = 0; i < out->n; i++) {
    if (strcmp(out->name[i], name) == 0) {
      snprintf(err, errlen, "labels: '%s' given twice", name);
      return -1;
    }
  }
  if (!*value) {
    snprintf(err, errlen, "labels: '%s' has an empty value", name);
    return -1;
  }
  if (!utf8_valid(value)) {
    snprintf(err, errlen, "labels: the value of '%s' is not UTF-8", name);
    return -1;
  }
  out->n++;
  return 0;
}

int labels_parse(const char *text, agent_labels *out, char *err, size_t errlen) {
  out->n = 0;
  if (!text || !*text)
    return 0;
  const char *p = text;
  for (;;) {
    const char *e = strchr(p, ';');
    if (!e)
      e = p + strlen(p);
    if (e == p) {
      snprintf(err, errlen, "labels: empty item in '%s'", text);
      return -1;
    }
    if (parse_item(p, e, out, err, errlen) != 0)
      return -1;
    if (!*e)
      return 0;
    p = e + 1;
  }
}
