/* The agent's web configuration file: the format of Prometheus
 * exporter-toolkit (`--web.config.file` of node_exporter and the other
 * exporters): tls_server_config, http_server_config, basic_auth_users and
 * rate_limit. Parsed with libyaml and validated whole: unknown keys,
 * unreadable, expired or mismatched certificates, a min_version below TLS 1.2
 * and passwords that are not bcrypt hashes (or cost more than
 * WEB_MAX_BCRYPT_COST) are one-line errors. A loaded
 * configuration is immutable; the reload watcher (web_watch.h) swaps it. */
#ifndef GPUPOOL_WEB_CONFIG_H
#define GPUPOOL_WEB_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  WEB_CLIENT_NONE = 0,           /* NoClientCert */
  WEB_CLIENT_REQUEST,            /* RequestClientCert: asked for, not verified */
  WEB_CLIENT_REQUIRE_ANY,        /* RequireAnyClientCert: required, not verified */
  WEB_CLIENT_VERIFY_IF_GIVEN,    /* VerifyClientCertIfGiven */
  WEB_CLIENT_REQUIRE_AND_VERIFY, /* RequireAndVerifyClientCert */
} web_client_auth;

#define WEB_MAX_HEADERS      5
#define WEB_MAX_TLS12_SUITES 16 /* Go's TLS 1.2 suites, aliases as one */
#define WEB_MAX_FILES        4  /* the configuration file, cert_file, key_file, client_ca_file */
/* The highest bcrypt cost basic_auth_users may use: the agent's stop waits
 * for a running check, which at 14 takes under a second (docs/security.md)
 * and doubles with each step. */
#define WEB_MAX_BCRYPT_COST 14

typedef struct web_header {
  const char *name; /* static */
  char *value;
} web_header;

typedef struct web_user {
  char *name;
  char *hash; /* $2a$, $2b$ or $2y$ bcrypt, cost at most WEB_MAX_BCRYPT_COST */
} web_user;

typedef struct web_config {
  int tls; /* tls_server_config is there: serve HTTPS */
  char *cert_pem, *key_pem, *ca_pem;
  size_t cert_len, key_len, ca_len; /* ca_pem NULL when no client CA */
  web_client_auth client_auth;
  char **allowed_sans; /* client_allowed_sans; NULL = not checked */
  size_t nsans;
  char *priorities; /* GnuTLS priority string: versions, ciphers, curves */
  /* The IANA numbers of the TLS 1.2 suites cipher_suites lists (none: not
   * given). GnuTLS's priority string allows every key exchange x cipher x
   * MAC it names, and TLS 1.3's ciphers with them: the handshake refuses a
   * TLS 1.2 suite outside the list (http_tls.c), as Go offers only those. */
  unsigned char tls12_suites[WEB_MAX_TLS12_SUITES][2];
  size_t ntls12_suites;
  /* For each of those suites, a GnuTLS priority string that allows it alone
   * over TLS 1.2 (with the curves), which the handshake sets once it knows
   * the client's suites (http_tls.c); NULL for a suite the certificate's key
   * cannot serve (an ECDSA suite with an RSA key, and the reverse). */
  char *tls12_priority[WEB_MAX_TLS12_SUITES];
  int prefer_server;      /* prefer_server_cipher_suites: the list's order, else the client's */
  int64_t cert_not_after; /* the server certificate's expiry (seconds since the epoch) */
  web_header headers[WEB_MAX_HEADERS];
  size_t nheaders;
  web_user *users;
  size_t nusers;
  double rate_interval_s; /* rate_limit: 0 = none */
  unsigned rate_burst;
  /* SHA-256 of everything the HTTP server is started with (TLS material and
   * policy): when it changes the server is restarted. */
  unsigned char tls_digest[32];
  int empty; /* the file holds no YAML document (empty, or a write caught half-way) */
} web_config;

/* The files a load read (or tried to read), so that a watcher can tell when
 * one of them changes; filled in on failure too. */
typedef struct web_files {
  size_t n;
  char path[WEB_MAX_FILES][PATH_MAX];
  /* web_files_digest of the bytes the load itself read: a change made while
   * it ran differs from it, so a watcher reloads again. */
  unsigned char digest[32];
} web_files;

/* Reads and validates path; now is the time certificates must be valid at.
 * 0 and *out (free with web_config_free), or -1 with a one-line reason. */
int web_config_load(const char *path, int64_t now, web_config **out, web_files *files, char *err,
                    size_t errlen);
void web_config_free(web_config *c);

/* Whether a TLS 1.2 connection may use the suite of this IANA number (as a
 * ServerHello carries it): one cipher_suites lists, any when none is. */
int web_config_tls12_suite_allowed(const web_config *c, const unsigned char id[2]);

/* SHA-256 over the contents (or absence) of each file: a change in any of
 * them changes it. */
void web_files_digest(const web_files *f, unsigned char out[32]);

#endif
