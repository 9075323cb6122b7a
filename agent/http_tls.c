#include "http_tls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent_health.h"

#define TLS_MAX_OFFERED 128 /* a client's suites kept for the choice; more are not read */

typedef struct tls_conn {
  const web_config *c;
  int done; /* the handshake completed */
  /* The suites of the client's hello, in its order (cipher_suites given). */
  unsigned char offered[TLS_MAX_OFFERED][2];
  unsigned noffered;
} tls_conn;

static tls_conn *conn_of(gnutls_session_t s) {
  /* libmicrohttpd sets the session's pointer to its connection. */
  struct MHD_Connection *conn = gnutls_session_get_ptr(s);
  const union MHD_ConnectionInfo *ci =
      conn ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
  return ci ? ci->socket_context : NULL;
}

/* Whether one of the certificate's subject alternative names (DNS, IP,
 * e-mail, URI) is in the allowed list. */
static int san_allowed(const web_config *c, const gnutls_datum_t *der) {
  gnutls_x509_crt_t crt;
  if (gnutls_x509_crt_init(&crt) != 0)
    return 0;
  int ok = 0;
  if (gnutls_x509_crt_import(crt, der, GNUTLS_X509_FMT_DER) == 0) {
    for (unsigned i = 0; !ok; i++) {
      char buf[1024], text[1024];
      size_t size = sizeof buf - 1;
      unsigned critical;
      int type = gnutls_x509_crt_get_subject_alt_name(crt, i, buf, &size, &critical);
      if (type == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
        break;
      if (type == GNUTLS_SAN_IPADDRESS && (size == 4 || size == 16)) {
        if (!inet_ntop(size == 4 ? AF_INET : AF_INET6, buf, text, sizeof text))
          continue;
      } else if (type == GNUTLS_SAN_DNSNAME || type == GNUTLS_SAN_RFC822NAME ||
                 type == GNUTLS_SAN_URI) {
        memcpy(text, buf, size);
        text[size] = '\0';
      } else {
        continue;
      }
      for (size_t j = 0; j < c->nsans && !ok; j++)
        ok = strcmp(text, c->allowed_sans[j]) == 0;
    }
  }
  gnutls_x509_crt_deinit(crt);
  return ok;
}

/* Called by GnuTLS when the client's certificate arrives; nonzero fails the
 * handshake. */
static int verify_client(gnutls_session_t s) {
  tls_conn *t = conn_of(s);
  if (!t)
    return -1; /* no policy: refuse rather than let it through */
  web_client_auth mode = t->c->client_auth;
  unsigned n = 0;
  const gnutls_datum_t *peers = gnutls_certificate_get_peers(s, &n);
  if (!peers || n == 0) /* with client_allowed_sans, no certificate names none */
    return mode == WEB_CLIENT_REQUIRE_ANY || mode == WEB_CLIENT_REQUIRE_AND_VERIFY ||
                   t->c->allowed_sans
               ? -1
               : 0;
  /* The chain, and the key purpose as Go checks it: a certificate whose
   * extended key usage names purposes must name TLS client authentication
   * (a server's certificate from the same CA is no client's). */
  if (mode >= WEB_CLIENT_VERIFY_IF_GIVEN) {
    gnutls_typed_vdata_st purpose = {.type = GNUTLS_DT_KEY_PURPOSE_OID,
                                     .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT};
    unsigned status = 0;
    if (gnutls_certificate_verify_peers(s, &purpose, 1, &status) < 0 || status != 0)
      return -1;
  }
  /* The names, as exporter-toolkit checks them: on the certificate given,
   * verified or not. */
  if (t->c->allowed_sans && !san_allowed(t->c, &peers[0]))
    return -1;
  return 0;
}

/* Where a hello's suites begin: after its legacy version, random and session
 * id (RFC 5246 7.4.1.2, 7.4.1.3), with at least two bytes there; 0 when the
 * hello is too short. */
static size_t suites_at(const gnutls_datum_t *hello) {
  size_t at = 2 + 32;
  if (!hello || hello->size <= at)
    return 0;
  at += 1 + hello->data[at];
  return hello->size >= at + 2 ? at : 0;
}

/* Whether the suite of a TLS 1.2 ServerHello is one cipher_suites lists. */
static int chosen_suite_listed(const web_config *c, const gnutls_datum_t *hello) {
  size_t at = suites_at(hello);
  return at && web_config_tls12_suite_allowed(c, hello->data + at);
}

/* Keeps the suites a ClientHello offers (their length, then the list); a
 * malformed hello keeps none. */
static void keep_offered(tls_conn *t, const gnutls_datum_t *hello) {
  t->noffered = 0;
  size_t at = suites_at(hello);
  if (!at)
    return;
  size_t len = (size_t)hello->data[at] << 8 | hello->data[at + 1];
  at += 2;
  if (len % 2 || hello->size < at + len)
    return;
  for (size_t i = 0; i < len && t->noffered < TLS_MAX_OFFERED; i += 2)
    memcpy(t->offered[t->noffered++], hello->data + at + i, 2);
}

static int offered(const tls_conn *t, const unsigned char id[2]) {
  for (unsigned i = 0; i < t->noffered; i++)
    if (!memcmp(t->offered[i], id, 2))
      return 1;
  return 0;
}

/* The index in cipher_suites of suite id where the key serves it, else
 * ntls12_suites. */
static size_t servable(const web_config *c, const unsigned char id[2]) {
  for (size_t i = 0; i < c->ntls12_suites; i++)
    if (c->tls12_priority[i] && !memcmp(c->tls12_suites[i], id, 2))
      return i;
  return c->ntls12_suites;
}

/* After the client's hello, before GnuTLS picks a suite: over TLS 1.2 with
 * cipher_suites given, the session gets the priority of one listed suite
 * the client offers and the key serves, the list's first with
 * prefer_server_cipher_suites, else the client's first. GnuTLS's own pick
 * from the cross product (web_config.h) could land on an unlisted
 * combination while a listed one was offered. None: the handshake fails, as
 * Go's does. */
static int choose_tls12_suite(gnutls_session_t s) {
  tls_conn *t = conn_of(s);
  if (!t)
    return GNUTLS_E_MEMORY_ERROR;
  const web_config *c = t->c;
  if (!c->ntls12_suites || gnutls_protocol_get_version(s) != GNUTLS_TLS1_2)
    return 0;
  size_t pick = c->ntls12_suites;
  if (c->prefer_server) {
    for (size_t i = 0; i < c->ntls12_suites && pick == c->ntls12_suites; i++)
      if (c->tls12_priority[i] && offered(t, c->tls12_suites[i]))
        pick = i;
  } else {
    for (unsigned k = 0; k < t->noffered && pick == c->ntls12_suites; k++)
      pick = servable(c, t->offered[k]);
  }
  if (pick == c->ntls12_suites)
    return GNUTLS_E_NO_CIPHER_SUITES;
  int rc = gnutls_priority_set_direct(s, c->tls12_priority[pick], NULL);
  return rc < 0 ? rc : 0;
}

/* The handshake's hook (GnuTLS keeps one per session). The server's hello,
 * as written, carries the suite chosen (the session names none before the
 * handshake ends): for TLS 1.2 it must be one cipher_suites lists, else the
 * negative answer ends the handshake. After the client's Finished the
 * handshake is done. A connection without its record (out of memory) has
 * no policy: refused, as in verify_client. */
static int on_handshake(gnutls_session_t s, unsigned htype, unsigned when, unsigned incoming,
                        const gnutls_datum_t *msg) {
  tls_conn *t = conn_of(s);
  if (!t)
    return GNUTLS_E_MEMORY_ERROR;
  if (htype == GNUTLS_HANDSHAKE_CLIENT_HELLO && when == GNUTLS_HOOK_PRE && incoming &&
      t->c->ntls12_suites)
    keep_offered(t, msg);
  if (htype == GNUTLS_HANDSHAKE_SERVER_HELLO && when == GNUTLS_HOOK_POST && !incoming &&
      gnutls_protocol_get_version(s) == GNUTLS_TLS1_2 && !chosen_suite_listed(t->c, msg))
    return GNUTLS_E_NO_CIPHER_SUITES;
  if (htype == GNUTLS_HANDSHAKE_FINISHED && when == GNUTLS_HOOK_POST && incoming) {
    /* A client that sends no certificate where one is only asked for may
     * never reach verify_client: client_allowed_sans refuses it here. */
    unsigned n = 0;
    if (t->c->allowed_sans && (!gnutls_certificate_get_peers(s, &n) || n == 0))
      return GNUTLS_E_CERTIFICATE_REQUIRED;
    t->done = 1;
  }
  return 0;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  const web_config *c = cls;
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    tls_conn *t = *socket_context;
    if (t && !t->done)
      agent_health_tls_handshake_failed();
    free(t);
    *socket_context = NULL;
    return;
  }
  /* Called before the handshake starts (the session exists already).
   * libmicrohttpd sends a TLS answer's header and body as two records:
   * without TCP_NODELAY the second waits for the client's delayed ACK. */
  const union MHD_ConnectionInfo *fd =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (fd) {
    int one = 1;
    setsockopt(fd->connect_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  tls_conn *t = calloc(1, sizeof *t);
  if (t)
    t->c = c;
  *socket_context = t;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  gnutls_session_t s = ci ? ci->tls_session : NULL;
  if (!s)
    return;
  gnutls_handshake_set_hook_function(s, GNUTLS_HANDSHAKE_ANY, GNUTLS_HOOK_BOTH, on_handshake);
  if (c->ntls12_suites)
    gnutls_handshake_set_post_client_hello_function(s, choose_tls12_suite);
  switch (c->client_auth) {
  case WEB_CLIENT_NONE:
    break;
  case WEB_CLIENT_REQUEST:
  case WEB_CLIENT_VERIFY_IF_GIVEN:
    gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUEST);
    gnutls_session_set_verify_function(s, verify_client);
    break;
  case WEB_CLIENT_REQUIRE_ANY:
  case WEB_CLIENT_REQUIRE_AND_VERIFY:
    gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_function(s, verify_client);
    break;
  }
}

void http_tls_options(const web_config *c, struct MHD_OptionItem *opts, unsigned *flags) {
  size_t n = 0;
  if (c && c->tls) {
    *flags |= MHD_USE_TLS;
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, c->cert_pem};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, c->key_pem};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, c->priorities};
    if (c->ca_pem)
      opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, c->ca_pem};
    opts[n++] =
        (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, (void *)c};
  }
  opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}
