/* Which Host headers the agent answers while it listens on loopback only: a
 * guard against DNS rebinding. A web page on attacker.example can make the
 * name resolve to 127.0.0.1 after it loaded and then read the agent's
 * /snapshot, /trace and /oom as its own origin; the request then still says
 * "Host: attacker.example". So a loopback listener refuses (403) a Host that
 * names a dotted DNS name other than localhost (and *.localhost), the
 * machine's host name or a name of allowed_hosts. IP literals and one-label
 * names ("t", "gpu-node") are answered: no public DNS name is either. A
 * listener beyond loopback is not guarded: its clients reach it by any of
 * the node's names, and web_config's TLS and auth protect it
 * (docs/security.md). */
#ifndef GPUPOOL_HOST_GUARD_H
#define GPUPOOL_HOST_GUARD_H

#include <stddef.h>

#define HOST_GUARD_MAX_NAMES 16  /* in allowed_hosts */
#define HOST_GUARD_NAME_MAX  254 /* a DNS name's 253 characters and a NUL */

typedef struct host_guard {
  int any; /* allowed_hosts:*: every Host answered */
  size_t n;
  /* lower case, without a trailing dot; ".example.com" is every name under
   * it: allowed_hosts', then the machine's two (host_guard_add) */
  char names[HOST_GUARD_MAX_NAMES + 2][HOST_GUARD_NAME_MAX];
} host_guard;

/* Reads allowed_hosts: names separated by ';' ("gpu1.example.com;.cluster.local"),
 * or "*". 0, or -1 with a reason (g unchanged). */
int host_guard_parse(const char *list, host_guard *g, char *err, size_t errlen);
/* Adds name (the machine's host name: two have room beside a full
 * allowed_hosts) where it is a valid one; silently not otherwise. */
void host_guard_add(host_guard *g, const char *name);
/* 1 when a request with Host header host (NULL: none) is answered. */
int host_guard_allows(const host_guard *g, const char *host);

#endif
