/* bench_tls: what TLS and basic auth cost per scrape of the agent.
 *
 * One in-process agent, one loopback client (GnuTLS), GET /metrics of an
 * agent with no pools (so the document is small and the connection and
 * authentication costs show), timed from connect (or send) to the last byte:
 *   plain HTTP, a new connection per scrape      (the baseline)
 *   plain HTTP, one kept-alive connection
 *   TLS, a new connection per scrape             (a full handshake each time)
 *   TLS, one kept-alive connection
 *   TLS + basic auth, kept alive, credentials cached (Prometheus' steady state)
 *   TLS + basic auth, kept alive, not cached     (bcrypt cost 10 every scrape)
 * Median and p90 microseconds per scrape and the ratio of medians to the
 * baseline, side by side in one run. Certificates (ECDSA P-256) come from
 * tests/e2e/lib/tls_certs.sh (certtool).
 *
 *   bench_tls [--quick]      (run from the source tree, or set GPUPOOL_SOURCE_DIR)
 *
 * Exit status 1 when a measurement failed. */
#include <crypt.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent/web_auth.h"
#include "gpupool/agent.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* ---- a small HTTP/1.1 client, plain or GnuTLS ---- */

typedef struct client {
  int fd;
  gnutls_session_t s; /* NULL: plain */
} client;

static gnutls_certificate_credentials_t g_cred;

static ssize_t c_send(client *c, const char *buf, size_t n) {
  return c->s ? gnutls_record_send(c->s, buf, n) : send(c->fd, buf, n, MSG_NOSIGNAL);
}

static ssize_t c_recv(client *c, char *buf, size_t n) {
  if (!c->s)
    return recv(c->fd, buf, n, 0);
  ssize_t r;
  do
    r = gnutls_record_recv(c->s, buf, n);
  while (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED);
  return r < 0 ? -1 : r;
}

static void c_close(client *c) {
  if (c->s) {
    gnutls_bye(c->s, GNUTLS_SHUT_WR);
    gnutls_deinit(c->s);
    c->s = NULL;
  }
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
}

static int c_connect(client *c, int port, int tls) {
  c->s = NULL;
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0)
    return -1;
  if (!tls)
    return 0;
  if (gnutls_init(&c->s, GNUTLS_CLIENT) != 0)
    return -1;
  gnutls_set_default_priority(c->s);
  gnutls_credentials_set(c->s, GNUTLS_CRD_CERTIFICATE, g_cred);
  gnutls_session_set_verify_cert(c->s, NULL, 0); /* the chain to our CA */
  gnutls_transport_set_int(c->s, c->fd);
  int rc;
  do
    rc = gnutls_handshake(c->s);
  while (rc < 0 && !gnutls_error_is_fatal(rc));
  return rc < 0 ? -1 : 0;
}

/* One GET on c; the status, or -1. Reads a Content-Length or chunked body. */
static int c_get(client *c, const char *path, const char *auth) {
  char req[512];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%s\r\n", path,
                   auth ? "Authorization: Basic " : "", auth ? auth : "", auth ? "\r\n" : "");
  if (c_send(c, req, (size_t)n) != n)
    return -1;
  static char buf[1 << 20];
  size_t len = 0;
  buf[0] = '\0';
  char *end = NULL;
  while (!(end = strstr(buf, "\r\n\r\n"))) {
    ssize_t r = c_recv(c, buf + len, sizeof buf - 1 - len);
    if (r <= 0)
      return -1;
    len += (size_t)r;
    buf[len] = '\0';
  }
  int status = atoi(buf + 9);
  size_t head = (size_t)(end + 4 - buf);
  const char *cl = strcasestr(buf, "\r\nContent-Length:");
  if (cl && cl < end) {
    size_t want = head + strtoul(cl + 17, NULL, 10);
    while (len < want) {
      ssize_t r = c_recv(c, buf + len, sizeof buf - 1 - len);
      if (r <= 0)
        return -1;
      len += (size_t)r;
    }
  } else { /* chunked: up to the last chunk */
    buf[len] = '\0';
    while (!strstr(buf + head, "\r\n0\r\n\r\n") && strncmp(buf + head, "0\r\n\r\n", 5) != 0) {
      ssize_t r = c_recv(c, buf + len, sizeof buf - 1 - len);
      if (r <= 0)
        return -1;
      len += (size_t)r;
      buf[len] = '\0';
    }
  }
  return status;
}

/* ---- the measurements ---- */

typedef struct result {
  const char *name;
  double median_us, p90_us;
  int n;
} result;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef enum { NEW_CONN, KEEP_ALIVE, UNCACHED } mode;

/* n scrapes of /metrics; 0 or -1 when one failed. */
static int measure(result *r, const char *name, int port, int tls, mode m, const char *auth,
                   int n) {
  double *t = calloc((size_t)n, sizeof *t);
  client c = {.fd = -1};
  int ok = t != NULL;
  if (ok && m != NEW_CONN)
    ok = c_connect(&c, port, tls) == 0 && c_get(&c, "/metrics", auth) == 200; /* warm */
  for (int i = 0; ok && i < n; i++) {
    if (m == UNCACHED)
      web_auth_reset(); /* forget the credentials: bcrypt again */
    double t0 = now_us();
    if (m == NEW_CONN)
      ok = c_connect(&c, port, tls) == 0;
    int status = ok ? c_get(&c, "/metrics", auth) : -1;
    if (status != 200 && ok)
      fprintf(stderr, "bench_tls: %s: scrape %d answered %d\n", name, i, status);
    ok = ok && status == 200;
    t[i] = now_us() - t0;
    if (m == NEW_CONN)
      c_close(&c);
  }
  c_close(&c);
  if (!ok) {
    fprintf(stderr, "bench_tls: %s: a scrape failed\n", name);
    free(t);
    return -1;
  }
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  *r = (result){name, t[n / 2], t[(n * 9) / 10], n};
  free(t);
  return 0;
}

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  fputs(text, f);
  return fclose(f);
}

static int start_agent(const char *web_config) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .trace_off = 1,
                             .ignore_env = 1,
                             .web_config = web_config};
  if (gpupool_agent_start(&o) != GPUPOOL_OK) {
    fprintf(stderr, "bench_tls: %s\n", gpupool_last_error());
    return -1;
  }
  return gpupool_agent_port();
}

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  int n = quick ? 20 : 400, n_bcrypt = quick ? 3 : 20;
  char dir[] = "/tmp/gpupool-bench-tls-XXXXXX";
  if (!mkdtemp(dir))
    return 1;
  const char *src = getenv("GPUPOOL_SOURCE_DIR");
  char cmd[512], path[256], yml[1024];
  snprintf(cmd, sizeof cmd, "bash %s/tests/e2e/lib/tls_certs.sh %s", src ? src : ".", dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "bench_tls: '%s' failed (needs certtool, run from the source tree)\n", cmd);
    return 1;
  }
  snprintf(path, sizeof path, "%s/ca.crt", dir);
  gnutls_certificate_allocate_credentials(&g_cred);
  if (gnutls_certificate_set_x509_trust_file(g_cred, path, GNUTLS_X509_FMT_PEM) <= 0)
    return 1;
  /* bcrypt cost 10, as `htpasswd -nBC 10` and exporter-toolkit's docs. */
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  struct crypt_data cd;
  memset(&cd, 0, sizeof cd);
  const char *hash = crypt_gensalt_rn("$2b$", 10, NULL, 0, salt, sizeof salt)
                         ? crypt_rn("secret", salt, &cd, sizeof cd)
                         : NULL;
  if (!hash)
    return 1;
  const char *auth = "cHJvbWV0aGV1czpzZWNyZXQ="; /* prometheus:secret */

  result r[6];
  int bad = 0, port;
  /* Plain HTTP. */
  if ((port = start_agent(NULL)) < 0)
    return 1;
  bad |= measure(&r[0], "plain HTTP, new connection", port, 0, NEW_CONN, NULL, n);
  bad |= measure(&r[1], "plain HTTP, kept alive", port, 0, KEEP_ALIVE, NULL, n);
  gpupool_agent_stop();
  /* TLS. */
  snprintf(path, sizeof path, "%s/tls.yml", dir);
  write_file(path, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n");
  if ((port = start_agent(path)) < 0)
    return 1;
  bad |= measure(&r[2], "TLS, new connection (handshake)", port, 1, NEW_CONN, NULL, n);
  bad |= measure(&r[3], "TLS, kept alive", port, 1, KEEP_ALIVE, NULL, n);
  gpupool_agent_stop();
  /* TLS + basic auth. */
  snprintf(path, sizeof path, "%s/auth.yml", dir);
  snprintf(yml, sizeof yml,
           "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
           "basic_auth_users:\n  prometheus: '%s'\n",
           hash);
  write_file(path, yml);
  if ((port = start_agent(path)) < 0)
    return 1;
  bad |= measure(&r[4], "TLS + basic auth, cached", port, 1, KEEP_ALIVE, auth, n);
  bad |= measure(&r[5], "TLS + basic auth, bcrypt (cost 10)", port, 1, UNCACHED, auth, n_bcrypt);
  gpupool_agent_stop();
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "bench_tls: could not remove %s\n", dir);
  if (bad)
    return 1;

  printf("bench_tls: GET /metrics of an agent with no pools, loopback, GnuTLS %s, ECDSA P-256\n",
         gnutls_check_version(NULL));
  printf("%-38s %8s %10s %10s %10s\n", "per scrape", "scrapes", "median us", "p90 us", "x plain");
  for (int i = 0; i < 6; i++)
    printf("%-38s %8d %10.1f %10.1f %10.2f\n", r[i].name, r[i].n, r[i].median_us, r[i].p90_us,
           r[i].median_us / r[0].median_us);
  return 0;
}
