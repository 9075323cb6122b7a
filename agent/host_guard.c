#include "host_guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* A DNS name as allowed_hosts takes it: letters, digits, '-' and '.', no
 * empty label; with a leading '.' where subdomains is set (".cluster.local"). */
static int valid_name(const char *s, size_t len, int subdomains) {
  if (subdomains && len > 1 && s[0] == '.') {
    s++;
    len--;
  }
  if (len == 0 || len >= HOST_GUARD_NAME_MAX || s[0] == '.' || s[len - 1] == '.')
    return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!isalnum(c) && c != '-' && c != '.')
      return 0;
    if (c == '.' && s[i + 1] == '.')
      return 0;
  }
  return 1;
}

static void put_name(host_guard *g, const char *s, size_t len) {
  char *to = g->names[g->n++];
  for (size_t i = 0; i < len; i++)
    to[i] = (char)tolower((unsigned char)s[i]);
  to[len] = '\0';
}

int host_guard_parse(const char *list, host_guard *g, char *err, size_t errlen) {
  host_guard out = {0};
  if (!strcmp(list, "*")) {
    out.any = 1;
    *g = out;
    return 0;
  }
  for (const char *s = list;;) {
    const char *end = strchr(s, ';');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    if (!valid_name(s, len, 1)) {
      snprintf(err, errlen,
               "allowed_hosts: '%.*s' is not a host name (names of letters, digits, '-' and '.', "
               "separated by ';'; a leading '.' allows every name under it; or '*' for any Host)",
               (int)(len > 300 ? 300 : len), s);
      return -1;
    }
    if (out.n == HOST_GUARD_MAX_NAMES) {
      snprintf(err, errlen, "allowed_hosts: more than %d names", HOST_GUARD_MAX_NAMES);
      return -1;
    }
    put_name(&out, s, len);
    if (!end)
      break;
    s = end + 1;
  }
  *g = out;
  return 0;
}

void host_guard_add(host_guard *g, const char *name) {
  size_t len = name ? strlen(name) : 0;
  if (g->n < sizeof g->names / sizeof *g->names && valid_name(name, len, 0))
    put_name(g, name, len);
}

/* Whether name (len bytes, no trailing dot) ends with suffix, case aside. */
static int ends_with(const char *name, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return len >= n && !strncasecmp(name + len - n, suffix, n);
}

static int listed(const host_guard *g, const char *name, size_t len) {
  for (size_t i = 0; i < g->n; i++) {
    const char *want = g->names[i];
    size_t n = strlen(want);
    if (want[0] == '.' ? ends_with(name, len, want) && len > n
                       : len == n && !strncasecmp(name, want, n))
      return 1;
  }
  return 0;
}

/* The uri-host of a Host header (RFC 9110 7.2: host [":" port]) in
 * [*name, *name + *len), brackets of an IPv6 literal kept; 0 where the port
 * part is not digits. */
static int split_port(const char *host, const char **name, size_t *len) {
  const char *colon;
  if (host[0] == '[') {
    const char *close = strchr(host, ']');
    if (!close)
      return 0;
    colon = close[1] ? close + 1 : NULL;
    if (colon && *colon != ':')
      return 0;
  } else {
    colon = strchr(host, ':');
  }
  *name = host;
  *len = colon ? (size_t)(colon - host) : strlen(host);
  if (colon)
    for (const char *p = colon + 1; *p; p++)
      if (!isdigit((unsigned char)*p))
        return 0;
  return 1;
}

int host_guard_allows(const host_guard *g, const char *host) {
  if (g->any || !host || !*host) /* browsers always send one */
    return 1;
  struct in6_addr a6;
  if (strchr(host, ':') != strrchr(host, ':') && inet_pton(AF_INET6, host, &a6) == 1)
    return 1; /* an IPv6 literal without its brackets (and so without a port) */
  const char *name;
  size_t len;
  if (!split_port(host, &name, &len))
    return 0;
  char buf[HOST_GUARD_NAME_MAX];
  if (len >= sizeof buf)
    return 0;
  if (name[0] == '[') { /* an IPv6 literal */
    memcpy(buf, name + 1, len - 2);
    buf[len - 2] = '\0';
    return inet_pton(AF_INET6, buf, &a6) == 1;
  }
  if (len && name[len - 1] == '.') /* "localhost." is "localhost" */
    len--;
  memcpy(buf, name, len);
  buf[len] = '\0';
  struct in_addr a4;
  if (inet_pton(AF_INET, buf, &a4) == 1 || !memchr(buf, '.', len))
    return 1;
  return ends_with(buf, len, ".localhost") || listed(g, buf, len);
}
