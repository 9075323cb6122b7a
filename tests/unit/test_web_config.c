/* The agent's web configuration file (exporter-toolkit's format): what it
 * accepts, each bad input refused by gpupool_agent_start with
 * GPUPOOL_ERR_INVALID and a one-line reason (and nothing started), the
 * GnuTLS priority string from Go's names, and basic auth's bcrypt check with
 * its caches and cost bound. Certificates come from tests/e2e/lib/tls_certs.sh
 * (certtool). */
#include <criterion/criterion.h>
#include <crypt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "agent/web_auth.h"
#include "agent/web_config.h"
#include "gpupool/agent.h"
#include "helpers/http_client.h"
#include "helpers/metrics_text.h"

static char dir[64];

static void make_certs(void) {
  if (system("command -v certtool >/dev/null 2>&1") != 0)
    cr_skip("certtool is not installed (Debian: gnutls-bin)");
  snprintf(dir, sizeof dir, "/tmp/gpupool-webcfg-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  const char *src = getenv("GPUPOOL_SOURCE_DIR");
  char cmd[512];
  snprintf(cmd, sizeof cmd, "bash %s/tests/e2e/lib/tls_certs.sh %s", src ? src : ".", dir);
  cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

static void cleanup(void) {
  gpupool_agent_stop();
  if (dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
  }
}

/* Writes text to dir/web.yml; returns its path. */
static const char *write_yml(const char *text) {
  static char path[128];
  snprintf(path, sizeof path, "%s/web.yml", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
  return path;
}

static gpupool_status start(const char *path) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .web_config = path,
                             .ignore_env = 1,
                             .trace_off = 1};
  return gpupool_agent_start(&o);
}

static const char *hash_of(const char *password) {
  static char out[CRYPT_OUTPUT_SIZE];
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  cr_assert_not_null(crypt_gensalt_rn("$2b$", 4, NULL, 0, salt, sizeof salt));
  struct crypt_data cd;
  memset(&cd, 0, sizeof cd);
  const char *h = crypt_rn(password, salt, &cd, sizeof cd);
  cr_assert_not_null(h);
  snprintf(out, sizeof out, "%s", h);
  return out;
}

TestSuite(web_config, .init = make_certs, .fini = cleanup, .timeout = 120);

Test(web_config, a_node_exporter_file_starts_the_agent) {
  char yml[1024];
  snprintf(yml, sizeof yml,
           "# as node_exporter's web.yml\n"
           "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
           "  client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n"
           "  min_version: TLS12\n  max_version: TLS13\n"
           "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n"
           "  prefer_server_cipher_suites: true\n  curve_preferences: [X25519, CurveP256]\n"
           "http_server_config:\n  http2: true\n  headers:\n    X-Frame-Options: deny\n"
           "basic_auth_users:\n  alice: %s\n",
           hash_of("pw"));
  cr_assert_eq(start(write_yml(yml)), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_gt(gpupool_agent_port(), 0);
}

Test(web_config, an_empty_file_is_plain_http_without_auth) {
  cr_assert_eq(start(write_yml("")), GPUPOOL_OK, "%s", gpupool_last_error());
}

/* A relative web_config is the file it named when the agent started: after
 * the program chdir()s, a change to it still applies (the watcher read it,
 * and the files it names, from the new working directory: gone, so the
 * reload failed and the old headers stayed). */
Test(web_config, a_relative_file_is_reloaded_after_a_chdir) {
  char cwd[PATH_MAX], value[64] = "";
  cr_assert_not_null(getcwd(cwd, sizeof cwd));
  write_yml("http_server_config:\n  headers:\n    X-Frame-Options: deny\n");
  cr_assert_eq(chdir(dir), 0);
  cr_assert_eq(start("web.yml"), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(chdir("/"), 0);
  write_yml("http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n");
  /* The watcher looks every second. */
  for (int i = 0; i < 50 && strcasecmp(value, "sameorigin") != 0; i++) {
    usleep(100000);
    http_response r;
    cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/healthz", NULL, &r), 0);
    const char *h = http_header(&r, "X-Frame-Options", value, sizeof value);
    if (!h)
      value[0] = '\0';
    http_response_free(&r);
  }
  cr_expect_eq(strcasecmp(value, "sameorigin"), 0, "the change to web.yml was not read: %s", value);
  cr_assert_eq(chdir(cwd), 0);
}

static void refused(const char *yml, const char *why) {
  cr_assert_eq(start(write_yml(yml)), GPUPOOL_ERR_INVALID, "accepted:\n%s", yml);
  cr_assert(strstr(gpupool_last_error(), why), "'%s' does not say '%s'", gpupool_last_error(), why);
  cr_assert_null(strchr(gpupool_last_error(), '\n'), "not one line: %s", gpupool_last_error());
  cr_assert_eq(gpupool_agent_port(), 0, "the agent serves after a refused configuration");
}

#define TLS "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"

Test(web_config, bad_files_are_refused_with_a_reason) {
  refused("tls_server_config: [unclosed\n", "line ");
  refused("tls_server_config:\n  cert_file: a\n cert_file: b\n", "line ");
  refused("basic_auth: {}\n", "unknown key 'basic_auth'");
  refused(TLS "  client_auth: RequireAndVerifyClientCert\n", "unknown key 'client_auth'");
  refused(TLS "  cert_file: again.crt\n", "given twice");
  refused("tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n", "missing.crt");
  refused("tls_server_config:\n  key_file: server.key\n", "missing one of cert_file or cert");
  refused("tls_server_config:\n  cert_file: expired.crt\n  key_file: expired.key\n", "expired");
  refused("tls_server_config:\n  cert_file: future.crt\n  key_file: future.key\n",
          "not valid before");
  refused("tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n",
          "does not belong");
  refused("tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
          "not a PEM certificate");
  /* a NUL before the PEM text: GnuTLS's checks read the whole file, but
   * libmicrohttpd reads up to the NUL (an empty certificate, and a reload
   * that then failed to start aborted the host program) */
  char cmd[512];
  snprintf(cmd, sizeof cmd, "cd %s && { printf '\\0'; cat server.crt; } > nul.crt", dir);
  cr_assert_eq(system(cmd), 0);
  refused("tls_server_config:\n  cert_file: nul.crt\n  key_file: server.key\n", "NUL byte");
  refused(TLS "  min_version: TLS11\n", "weaker than TLS12");
  refused(TLS "  min_version: TLS10\n", "weaker than TLS12");
  refused(TLS "  min_version: SSL3\n", "unknown TLS version");
  refused(TLS "  min_version: TLS13\n  max_version: TLS12\n", "below min_version");
  refused(TLS "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "unknown or insecure");
  refused(TLS "  curve_preferences: [CurveP224]\n", "unknown curve");
  refused(TLS "  client_ca_file: ca.crt\n", "without a client_auth_type");
  refused(TLS "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file");
  refused(TLS "  client_auth_type: Sometimes\n", "is not one of");
  /* Names are checked on any certificate asked for (exporter-toolkit checks
   * them whatever client_auth_type is); one never asked for has none. */
  refused(TLS "  client_allowed_sans: [a]\n", "client_allowed_sans needs");

  refused("basic_auth_users:\n  alice: plaintext\n", "not a bcrypt hash");
  refused("basic_auth_users:\n  alice: $1$abcdefgh$abcdefghijklmnopqrstuv\n", "not a bcrypt hash");
  refused("basic_auth_users:\n  alice:\n", "not a bcrypt hash");
  refused("http_server_config:\n  headers:\n    Server: x\n", "cannot be configured");
  refused("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "is not one of");
  /* '' is no value of a header with a fixed set (exporter-toolkit refuses
   * it); blank is unset only for the free-form ones */
  refused("http_server_config:\n  headers:\n    X-Frame-Options: ''\n", "'' is not one of");
  refused("http_server_config:\n  headers:\n    X-Content-Type-Options: ''\n", "'' is not one of");
  refused("http_server_config:\n  http3: true\n", "unknown key 'http3'");
  refused("rate_limit:\n  interval: soon\n  burst: 1\n", "not a Go duration");
  refused("rate_limit:\n  interval: 1s\n", "burst of at least 1");
  refused("- a list\n", "must be a mapping");
  refused("a: 1\n---\nb: 2\n", "unknown key 'a'");
  refused("{}\n---\nb: 2\n", "more than one YAML document");
}

Test(web_config, a_missing_file_is_refused) {
  char path[128];
  snprintf(path, sizeof path, "%s/none.yml", dir);
  cr_assert_eq(start(path), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "none.yml"), "%s", gpupool_last_error());
  cr_assert_eq(gpupool_agent_port(), 0);
}

Test(web_config, web_config_needs_the_http_server) {
  gpupool_agent_options o = {.listen = "off", .web_config = write_yml(""), .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_ERR_INVALID);
}

static web_config *load(const char *yml) {
  web_config *c = NULL;
  web_files files;
  char err[1024];
  int rc = web_config_load(write_yml(yml), (int64_t)time(NULL), &c, &files, err, sizeof err);
  cr_assert_eq(rc, 0, "%s", err);
  return c;
}

Test(web_config, go_names_become_a_gnutls_priority_string) {
  web_config *c = load(TLS "  max_version: TLS12\n"
                           "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, "
                           "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]\n"
                           "  curve_preferences: [CurveP384]\n"
                           "  prefer_server_cipher_suites: false\n");
  cr_assert_str_eq(c->priorities,
                   "NORMAL:-VERS-ALL:+VERS-TLS1.2:-KX-ALL:-CIPHER-ALL:-MAC-ALL:+ECDHE-RSA:+"
                   "ECDHE-ECDSA:+AES-256-GCM:+CHACHA20-POLY1305:+AEAD:-GROUP-ALL:+GROUP-"
                   "SECP384R1");
  /* The string also allows ECDHE-ECDSA with AES-256-GCM and ECDHE-RSA with
   * ChaCha20: the handshake takes only the listed two (IANA numbers). */
  static const unsigned char rsa_aes256[2] = {0xc0, 0x30}, ecdsa_chacha[2] = {0xcc, 0xa9},
                             ecdsa_aes256[2] = {0xc0, 0x2c}, rsa_chacha[2] = {0xcc, 0xa8};
  cr_expect_eq(c->ntls12_suites, 2);
  cr_expect(web_config_tls12_suite_allowed(c, rsa_aes256));
  cr_expect(web_config_tls12_suite_allowed(c, ecdsa_chacha));
  cr_expect_not(web_config_tls12_suite_allowed(c, ecdsa_aes256));
  cr_expect_not(web_config_tls12_suite_allowed(c, rsa_chacha));
  web_config_free(c);
  /* A suite listed twice is one; TLS 1.3's suites are not TLS 1.2's. */
  c = load(TLS "  cipher_suites: [TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, "
               "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, TLS_AES_128_GCM_SHA256]\n");
  cr_expect_eq(c->ntls12_suites, 1);
  cr_expect(web_config_tls12_suite_allowed(c, rsa_chacha));
  cr_expect_not(web_config_tls12_suite_allowed(c, rsa_aes256));
  web_config_free(c);
  /* An empty client_allowed_sans is a list that names no one (exporter-
   * toolkit checks whenever the key is given): not the same as no key. */
  c = load(TLS "  client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n"
               "  client_allowed_sans: []\n");
  cr_expect_not_null(c->allowed_sans);
  cr_expect_eq(c->nsans, 0);
  web_config_free(c);
  c = load(TLS "  client_ca_file: ca.crt\n  client_auth_type: RequestClientCert\n"
               "  client_allowed_sans: [a]\n"); /* checked on a certificate only asked for */
  cr_expect_eq(c->nsans, 1);
  web_config_free(c);
  c = load(TLS);
  cr_expect_null(c->allowed_sans);
  cr_expect_eq(c->ntls12_suites, 0);
  cr_expect(web_config_tls12_suite_allowed(c, ecdsa_aes256), "no list: GnuTLS's choice");
  web_config_free(c);
  c = load(TLS);
  cr_assert_str_eq(c->priorities,
                   "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:"
                   "-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:+AES-128-CBC:+AES-"
                   "256-CBC:-MAC-ALL:+AEAD:+SHA1:%SERVER_PRECEDENCE");
  cr_assert_eq(c->tls, 1);
  cr_assert_eq(c->client_auth, WEB_CLIENT_NONE);
  cr_assert_gt(c->cert_not_after, time(NULL));
  web_config_free(c);
}

Test(web_config, relative_paths_start_at_the_file_and_inline_pem_works) {
  web_config *a = load(TLS);
  char yml[8192];
  int n = snprintf(yml, sizeof yml, "tls_server_config:\n  cert: |\n");
  for (const char *p = a->cert_pem; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    n += snprintf(yml + n, sizeof yml - (size_t)n, "    %.*s\n", (int)len, p);
    p += len + (nl ? 1 : 0);
  }
  snprintf(yml + n, sizeof yml - (size_t)n, "  key_file: %s/server.key\n", dir);
  web_config *b = load(yml);
  cr_assert_eq(memcmp(a->tls_digest, b->tls_digest, 32), 0, "the same TLS material");
  web_config_free(a);
  web_config_free(b);
}

Test(web_config, headers_users_and_rate_limit_are_read) {
  char yml[512];
  snprintf(yml, sizeof yml,
           "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
           "    Strict-Transport-Security: max-age=31536000\n    Content-Security-Policy: ''\n"
           "basic_auth_users:\n  alice: '%s'\n"
           "rate_limit:\n  interval: 1m30s\n  burst: 5\n",
           hash_of("pw"));
  web_config *c = load(yml);
  cr_assert_eq(c->tls, 0);
  cr_assert_eq(c->nheaders, 2, "a blank header is unset");
  cr_assert_str_eq(c->headers[0].name, "X-Content-Type-Options");
  cr_assert_str_eq(c->headers[1].value, "max-age=31536000");
  cr_assert_eq(c->nusers, 1);
  cr_assert_str_eq(c->users[0].name, "alice");
  cr_assert_eq(c->rate_interval_s, 90.0);
  cr_assert_eq(c->rate_burst, 5);
  web_config_free(c);
}

/* YAML's merge key, as exporter-toolkit's YAML library reads it: a mapping
 * takes the keys of the mappings <<: names that it does not give itself,
 * the first of a list first; anchors and aliases name them. */
Test(web_config, merge_keys_bring_the_keys_not_given) {
  web_config *c =
      load("rate_limit:\n  <<: &limit {interval: 1m30s, burst: 9}\n  burst: 5\n"
           "http_server_config:\n  headers:\n"
           "    X-Content-Type-Options: nosniff\n"
           "    <<: [{X-Frame-Options: deny, X-Content-Type-Options: ''},\n"
           "         {X-Frame-Options: sameorigin, X-XSS-Protection: '1; mode=block'}]\n");
  cr_assert_eq(c->rate_interval_s, 90.0, "merged");
  cr_assert_eq(c->rate_burst, 5, "the mapping's own key wins");
  cr_assert_eq(c->nheaders, 3);
  const char *want[3][2] = {{"X-Content-Type-Options", "nosniff"},
                            {"X-Frame-Options", "deny"},
                            {"X-XSS-Protection", "1; mode=block"}};
  for (int i = 0; i < 3; i++) {
    cr_assert_str_eq(c->headers[i].name, want[i][0]);
    cr_assert_str_eq(c->headers[i].value, want[i][1], "%s", want[i][0]);
  }
  web_config_free(c);
  /* merged into merged, and a merge at the top */
  c = load("<<: {rate_limit: {<<: {<<: {burst: 3}, interval: 2s}}}\n");
  cr_assert_eq(c->rate_interval_s, 2.0);
  cr_assert_eq(c->rate_burst, 3);
  web_config_free(c);
}

Test(web_config, bad_merge_keys_are_refused) {
  refused("rate_limit:\n  <<: 5\n", "takes a mapping or a list of mappings");
  refused("rate_limit:\n  <<: [{burst: 1}, x]\n", "takes mappings only");
  refused("rate_limit:\n  <<: {burst: 1, speed: 2}\n  interval: 1s\n", "unknown key 'speed'");
  refused("rate_limit:\n  '<<': {burst: 1}\n  interval: 1s\n", "unknown key '<<'");
  refused("rate_limit:\n  <<: {burst: 1}\n  <<: {interval: 1s}\n", "key '<<' given twice");
  refused("rate_limit:\n  <<: {burst: 1, burst: 2}\n  interval: 1s\n", "key 'burst' given twice");
  refused("a: &a {<<: {<<: {<<: {<<: {<<: {<<: {<<: {<<: {<<: {x: 1}}}}}}}}}}\n<<: *a\n",
          "nested more than 8 deep");
}

/* Every request goes through basic auth and the rate limit, whatever its
 * method: a POST without credentials is a 401, not a 405 (the 405 came
 * first and took no token from the bucket). */
Test(web_config, other_methods_need_credentials_and_tokens_too) {
  char yml[512];
  snprintf(yml, sizeof yml,
           "basic_auth_users:\n  alice: '%s'\nrate_limit:\n  interval: 60s\n  burst: 2\n",
           hash_of("right"));
  cr_assert_eq(start(write_yml(yml)), GPUPOOL_OK, "%s", gpupool_last_error());
  int port = gpupool_agent_port();
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, "POST", "/metrics", NULL, &r), 0);
  cr_expect_eq(r.status, 401, "POST without credentials: %d", r.status);
  http_response_free(&r);
  cr_assert_eq(http_request("127.0.0.1", port, "DELETE", "/metrics", NULL, &r), 0);
  cr_expect_eq(r.status, 401, "the second token");
  http_response_free(&r);
  cr_assert_eq(http_request("127.0.0.1", port, "POST", "/metrics", NULL, &r), 0);
  cr_expect_eq(r.status, 429, "the bucket is empty: %d", r.status);
  http_response_free(&r);
}

/* A 429 of rate_limit says in Retry-After when the bucket has a token
 * again (whole seconds, rounded up), not a fixed second: with one token
 * every 10 s, a client that came back after 1 s got another 429. */
Test(web_config, rate_limit_says_when_to_come_back) {
  cr_assert_eq(start(write_yml("rate_limit:\n  interval: 10s\n  burst: 1\n")), GPUPOOL_OK, "%s",
               gpupool_last_error());
  int port = gpupool_agent_port();
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, "GET", "/healthz", NULL, &r), 0);
  cr_expect_eq(r.status, 200);
  http_response_free(&r);
  cr_assert_eq(http_request("127.0.0.1", port, "GET", "/healthz", NULL, &r), 0);
  cr_expect_eq(r.status, 429);
  char value[32];
  cr_assert_not_null(http_header(&r, "Retry-After", value, sizeof value));
  int seconds = atoi(value);
  cr_expect(seconds >= 9 && seconds <= 10, "Retry-After: %s", value);
  http_response_free(&r);
}

Test(web_config, basic_credentials_are_read_as_go_reads_them) {
  struct {
    const char *header, *user, *pass; /* user NULL: none */
  } cases[] = {
      {"Basic %s", "alice", "right"},
      {"basic %s", "alice", "right"}, /* the scheme in any case */
      {"BASIC %s", "alice", "right"},
      {"Basic %s", "u", "p:q"}, /* the first colon splits */
      {"Basic %s", "", ""},
      {"Bearer %s", NULL, NULL},
      {"Basic  %s", NULL, NULL}, /* a space in the credentials: Go's decoder refuses it */
      {"Basic %s!", NULL, NULL},
      {"Basic %s", NULL, NULL}, /* no colon */
      {"Basic %s", NULL, NULL}, /* a NUL in the password */
      {"Basic %s", NULL, NULL}, /* nothing */
      /* white space after the value is none of it (RFC 9110 5.5; Go trims it) */
      {"Basic %s ", "alice", "right"},
      {"Basic %s\t \t", "alice", "right"},
      {"Basic %s x", NULL, NULL}, /* but a word after it is */
  };
  const char *b64[] = {"YWxpY2U6cmlnaHQ=",
                       "YWxpY2U6cmlnaHQ=",
                       "YWxpY2U6cmlnaHQ=",
                       "dTpwOnE=",
                       "Og==",
                       "YWxpY2U6cmlnaHQ=",
                       "YWxpY2U6cmlnaHQ=",
                       "YWxpY2U6cmlnaHQ=",
                       "bm9jb2xvbg==",
                       "YWxpY2U6cmkAZ2h0",
                       "",
                       "YWxpY2U6cmlnaHQ=",
                       "YWxpY2U6cmlnaHQ=",
                       "YWxpY2U6cmlnaHQ="};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char header[128], *user = (char *)"x", *pass = (char *)"x";
    snprintf(header, sizeof header, cases[i].header, b64[i]);
    int rc = web_auth_parse_basic(header, &user, &pass);
    if (!cases[i].user) {
      cr_expect_eq(rc, -1, "'%s' was read", header);
      cr_expect(!user && !pass);
      continue;
    }
    cr_assert_eq(rc, 0, "'%s' was not read", header);
    cr_expect_str_eq(user, cases[i].user);
    cr_expect_str_eq(pass, cases[i].pass);
    web_auth_free_credentials(user, pass);
  }
  char *user, *pass;
  cr_expect_eq(web_auth_parse_basic(NULL, &user, &pass), -1);
}

/* The scheme's name in any case (RFC 9110), as Go's net/http reads it. */
Test(web_config, the_basic_scheme_is_case_insensitive_over_http) {
  char yml[512];
  snprintf(yml, sizeof yml, "basic_auth_users:\n  alice: '%s'\n", hash_of("right"));
  cr_assert_eq(start(write_yml(yml)), GPUPOOL_OK, "%s", gpupool_last_error());
  int port = gpupool_agent_port();
  const char *headers[] = {"Authorization: basic YWxpY2U6cmlnaHQ=\r\n",
                           "Authorization: BASIC YWxpY2U6cmlnaHQ=\r\n",
                           "Authorization: Basic YWxpY2U6d3Jvbmc=\r\n"}; /* alice:wrong */
  int want[] = {200, 200, 401};
  for (int i = 0; i < 3; i++) {
    http_response r;
    cr_assert_eq(http_request("127.0.0.1", port, "GET", "/metrics", headers[i], &r), 0);
    cr_expect_eq(r.status, want[i], "%s: %d", headers[i], r.status);
    http_response_free(&r);
  }
}

Test(web_config, basic_auth_checks_bcrypt_caches_and_bounds_its_cost) {
  char yml[512];
  snprintf(yml, sizeof yml, "basic_auth_users:\n  alice: '%s'\n", hash_of("right"));
  web_config *c = load(yml);
  web_auth_reset();
  double t = 1000;
  cr_assert_eq(web_auth_check(c, NULL, NULL, t), WEB_AUTH_DENIED);
  cr_assert_eq(web_auth_check(c, "alice", "right", t), WEB_AUTH_OK);
  cr_assert_eq(web_auth_check(c, "alice", "wrong", t), WEB_AUTH_DENIED);
  cr_assert_eq(web_auth_check(c, "bob", "right", t), WEB_AUTH_DENIED, "an unknown user");
  /* The bcrypt budget (a burst of WEB_AUTH_BCRYPT_BURST) is spent now: new
   * passwords are "busy", cached answers are not. */
  web_auth_result r = WEB_AUTH_DENIED;
  for (int i = 0; i < WEB_AUTH_BCRYPT_BURST + 1 && r != WEB_AUTH_BUSY; i++) {
    char pw[16];
    snprintf(pw, sizeof pw, "guess%d", i);
    r = web_auth_check(c, "alice", pw, t);
  }
  cr_assert_eq(r, WEB_AUTH_BUSY);
  cr_assert_eq(web_auth_check(c, "alice", "right", t), WEB_AUTH_OK, "cached success");
  cr_assert_eq(web_auth_check(c, "alice", "wrong", t), WEB_AUTH_DENIED, "cached failure");
  cr_assert_eq(web_auth_check(c, "alice", "never-tried", t), WEB_AUTH_BUSY);
  /* A second later the budget is back. */
  cr_assert_eq(web_auth_check(c, "alice", "never-tried", t + 1.0), WEB_AUTH_DENIED);
  /* A flood of failures never evicts the cached success. */
  for (int i = 0; i < WEB_AUTH_FAIL_CACHE + 10; i++) {
    char pw[16];
    snprintf(pw, sizeof pw, "flood%d", i);
    web_auth_check(c, "alice", pw, t + 2.0 + i);
  }
  cr_assert_eq(web_auth_check(c, "alice", "right", t + 3000), WEB_AUTH_OK);
  web_auth_reset();
  web_config_free(c);
}

/* A bcrypt check runs on an HTTP thread, and gpupool_agent_stop() waits for
 * a running one: a cost of 31 (which crypt(3) and promtool accept) held a
 * thread, every other new login (429) and the host's exit for days. A cost
 * past WEB_MAX_BCRYPT_COST is refused, naming the user and the cost. */
Test(web_config, a_bcrypt_cost_above_the_maximum_is_refused) {
  char hash[CRYPT_OUTPUT_SIZE], yml[1024], why[128];
  snprintf(hash, sizeof hash, "%s", hash_of("pw")); /* $2b$04$... */
  int costs[] = {31, WEB_MAX_BCRYPT_COST + 1};
  for (int i = 0; i < 2; i++) {
    hash[4] = (char)('0' + costs[i] / 10);
    hash[5] = (char)('0' + costs[i] % 10);
    snprintf(yml, sizeof yml, "basic_auth_users:\n  alice: '%s'\n", hash);
    snprintf(why, sizeof why, "basic_auth_users.alice: bcrypt cost %d is above the maximum of %d",
             costs[i], WEB_MAX_BCRYPT_COST);
    refused(yml, why);
  }
  hash[4] = (char)('0' + WEB_MAX_BCRYPT_COST / 10);
  hash[5] = (char)('0' + WEB_MAX_BCRYPT_COST % 10);
  snprintf(yml, sizeof yml, "basic_auth_users:\n  alice: '%s'\n", hash);
  web_config *c = load(yml);
  cr_expect_eq(c->nusers, 1, "the maximum itself is accepted");
  web_config_free(c);
}

/* /metrics as alice (password "right"), which must be served; *ok: its
 * gpupool_agent_web_config_last_reload_successful. The response, to free. */
static http_response alices_metrics(double *ok) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics",
                            "Authorization: Basic YWxpY2U6cmlnaHQ=\r\n", &r),
               0);
  cr_assert_eq(r.status, 200);
  cr_assert_eq(metrics_value(r.body, "gpupool_agent_web_config_last_reload_successful", NULL, ok),
               0);
  return r;
}

/* The whole reloaded file is refused: the users and headers of the last
 * good one stay, and last_reload_successful turns 0. */
Test(web_config, a_reload_with_a_too_costly_hash_keeps_the_last_good_file) {
  char hash[CRYPT_OUTPUT_SIZE], costly[CRYPT_OUTPUT_SIZE], yml[2048];
  snprintf(hash, sizeof hash, "%s", hash_of("right"));
  snprintf(costly, sizeof costly, "%s", hash);
  memcpy(costly + 4, "31", 2);
  snprintf(yml, sizeof yml,
           "basic_auth_users:\n  alice: '%s'\n"
           "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
           hash);
  cr_assert_eq(start(write_yml(yml)), GPUPOOL_OK, "%s", gpupool_last_error());
  snprintf(yml, sizeof yml,
           "basic_auth_users:\n  alice: '%s'\n  bob: '%s'\n"
           "http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n",
           hash, costly);
  write_yml(yml);
  /* The watcher looks every second; alice's check is cached after the first. */
  double ok = 1;
  char frame[32] = "";
  for (int i = 0; i < 100 && ok != 0 && strcasecmp(frame, "sameorigin") != 0; i++) {
    usleep(100000);
    http_response r = alices_metrics(&ok);
    if (!http_header(&r, "X-Frame-Options", frame, sizeof frame))
      frame[0] = '\0';
    http_response_free(&r);
  }
  cr_expect_eq(ok, 0, "the file with a cost-31 hash was not refused");
  cr_expect_eq(strcasecmp(frame, "deny"), 0, "X-Frame-Options: %s", frame);
}

/* A file emptied while the agent runs with basic auth (a file being
 * rewritten in place is empty for a moment) keeps the last good
 * configuration: it must not turn authentication off. */
Test(web_config, an_emptied_file_keeps_auth_on) {
  char yml[512];
  snprintf(yml, sizeof yml, "basic_auth_users:\n  alice: '%s'\n", hash_of("right"));
  cr_assert_eq(start(write_yml(yml)), GPUPOOL_OK, "%s", gpupool_last_error());
  write_yml("");
  double ok = 1;
  for (int i = 0; i < 100 && ok != 0; i++) {
    usleep(100000);
    http_response r = alices_metrics(&ok);
    http_response_free(&r);
  }
  cr_expect_eq(ok, 0, "the emptied file was not refused");
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics", NULL, &r), 0);
  cr_expect_eq(r.status, 401, "without credentials: %d", r.status);
  http_response_free(&r);
  /* {} says it: no TLS, no users */
  write_yml("{}\n");
  int status = 401;
  for (int i = 0; i < 100 && status == 401; i++) {
    usleep(100000);
    cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics", NULL, &r), 0);
    status = r.status;
    http_response_free(&r);
  }
  cr_expect_eq(status, 200, "{} did not turn basic auth off");
}

/* What a load read is what the watcher compares with later: a file that
 * changes after the load's read (while it validates, or before the
 * watcher's next look) differs from the load's digest, so the change is
 * loaded at the next tick rather than taken as seen. */
Test(web_config, a_change_during_a_load_is_seen_later) {
  web_config *c = NULL;
  web_files files;
  char err[1024];
  const char *path = write_yml(TLS);
  cr_assert_eq(web_config_load(path, (int64_t)time(NULL), &c, &files, err, sizeof err), 0, "%s",
               err);
  unsigned char now[32];
  web_files_digest(&files, now);
  cr_expect_eq(memcmp(now, files.digest, 32), 0, "unchanged files: the same digest");
  write_yml(TLS "  min_version: TLS13\n");
  web_files_digest(&files, now);
  cr_expect_neq(memcmp(now, files.digest, 32), 0, "a later write differs from what was read");
  web_config_free(c);
}

static double interval_of(const char *duration) {
  char yml[256];
  snprintf(yml, sizeof yml, "rate_limit:\n  interval: '%s'\n  burst: 1\n", duration);
  web_config *c = load(yml);
  double s = c->rate_interval_s;
  web_config_free(c);
  return s;
}

/* rate_limit.interval is a Go duration (time.ParseDuration): strtod read
 * exponents, infinities and values past int64 nanoseconds, and refused a
 * leading '+'. */
Test(web_config, rate_limit_intervals_are_go_durations) {
  cr_expect_eq(interval_of("+1s"), 1.0);
  cr_expect_eq(interval_of("1.5h"), 5400.0);
  cr_expect_eq(interval_of("1h1m1.5s"), 3661.5);
  cr_expect_eq(interval_of(".5s"), 0.5);
  cr_expect_eq(interval_of("1.s"), 1.0);
  cr_expect_eq(interval_of("250ms"), 0.25);
  cr_expect_eq(interval_of("1500us"), 0.0015);
  cr_expect_eq(interval_of("1500\xc2\xb5s"), 0.0015); /* U+00B5 */
  cr_expect_eq(interval_of("1500\xce\xbcs"), 0.0015); /* U+03BC */
  cr_expect_eq(interval_of("0"), 0.0);
  cr_expect_eq(interval_of("-0s"), 0.0);
  cr_expect_eq(interval_of("9223372036854775807ns"), 9223372036854775807.0 / 1e9);
  cr_expect_eq(interval_of("2562047h"), 2562047 * 3600.0);
  const char *bad[] = {"1e3s",
                       "9999999h",
                       "1e300h",
                       "1e400s",
                       "18446744073709551616ns",
                       "9223372036854775808ns",
                       "2562048h",
                       "1",
                       "s",
                       ".s",
                       ".",
                       "1x",
                       "1s ",
                       " 1s",
                       "inf",
                       "nan",
                       "0x10s",
                       "+",
                       "-",
                       "1s-1s",
                       "1,5s"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char yml[256], why[128];
    snprintf(yml, sizeof yml, "rate_limit:\n  interval: '%s'\n  burst: 1\n", bad[i]);
    snprintf(why, sizeof why, "rate_limit.interval: '%s' is not a Go duration", bad[i]);
    refused(yml, why);
  }
  refused("rate_limit:\n  interval: ''\n  burst: 1\n", "rate_limit.interval: '' is not a Go");
  refused("rate_limit:\n  interval: -1s\n  burst: 1\n", "rate_limit.interval: '-1s' is negative");
}

/* As exporter-toolkit: a tls_server_config without certificate, key,
 * client CA or client_auth_type is no TLS (plain HTTP), and '' is no value
 * (client_auth_type '' is NoClientCert). Names are still checked. */
Test(web_config, an_empty_tls_server_config_is_plain_http) {
  const char *plain[] = {
      "tls_server_config: {}\n",
      "tls_server_config:\n  cert_file: ''\n  key_file: ''\n  client_auth_type: ''\n",
      ("tls_server_config:\n  min_version: TLS13\n  cipher_suites: "
       "[TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  curve_preferences: [X25519]\n"),
  };
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
    web_config *c = load(plain[i]);
    cr_expect_eq(c->tls, 0, "TLS on for:\n%s", plain[i]);
    web_config_free(c);
  }
  cr_assert_eq(start(write_yml("tls_server_config: {}\n")), GPUPOOL_OK, "%s", gpupool_last_error());
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/healthz", NULL, &r), 0);
  cr_expect_eq(r.status, 200, "plain HTTP: %d", r.status);
  http_response_free(&r);
  gpupool_agent_stop();
  web_config *c = load(TLS "  client_auth_type: ''\n");
  cr_expect_eq(c->tls, 1);
  cr_expect_eq(c->client_auth, WEB_CLIENT_NONE);
  web_config_free(c);
  refused("tls_server_config:\n  min_version: TLS9\n", "unknown TLS version 'TLS9'");
  refused("tls_server_config:\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
          "unknown or insecure");
  refused("tls_server_config:\n  curve_preferences: [CurveP224]\n", "unknown curve");
  refused("tls_server_config:\n  client_auth_type: NoClientCert\n",
          "missing one of cert_file or cert");
  refused(TLS "  client_auth_type: RequireAndVerifyClientCert\n  client_ca: not a certificate\n",
          "the client CA (client_ca) is not a PEM certificate");
}

/* 0 when gnutls-cli completes a TLS 1.2 handshake with the agent under the
 * given priority string. */
static int handshake(const char *priority) {
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "timeout 60 gnutls-cli --insecure --priority '%s' -p %d 127.0.0.1 "
           "</dev/null >/dev/null 2>&1",
           priority, gpupool_agent_port());
  return system(cmd);
}

/* With no cipher_suites, TLS 1.2 offers Go's defaults: ECDHE key exchange
 * only, with AES-GCM, ChaCha20-Poly1305 or AES-CBC-SHA; GnuTLS's NORMAL
 * also allowed static RSA key exchange (no forward secrecy) and AES-CCM.
 * An RSA certificate, so that static RSA could be served. */
Test(web_config, default_tls12_suites_are_forward_secret) {
  if (system("command -v gnutls-cli >/dev/null 2>&1") != 0)
    cr_skip("gnutls-cli is not installed (Debian: gnutls-bin)");
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "cd %s && certtool --generate-privkey --key-type=rsa --bits=2048 --outfile rsa.key "
           "2>/dev/null && printf 'cn = 127.0.0.1\\nip_address = 127.0.0.1\\ntls_www_server\\n"
           "signing_key\\nencryption_key\\nexpiration_days = 30\\n' > rsa.tmpl && "
           "certtool --generate-self-signed --load-privkey rsa.key --template rsa.tmpl "
           "--outfile rsa.crt 2>/dev/null",
           dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  cr_assert_eq(start(write_yml("tls_server_config:\n  cert_file: rsa.crt\n  key_file: rsa.key\n")),
               GPUPOOL_OK, "%s", gpupool_last_error());
#define TLS12 "NORMAL:-VERS-ALL:+VERS-TLS1.2"
  cr_expect_eq(handshake(TLS12 ":-KX-ALL:+ECDHE-RSA"), 0, "ECDHE-RSA refused");
  cr_expect_eq(handshake(TLS12 ":-KX-ALL:+ECDHE-RSA:-CIPHER-ALL:+AES-128-CBC:-MAC-ALL:+SHA1"), 0,
               "ECDHE-RSA with AES-128-CBC-SHA refused");
  cr_expect_neq(handshake(TLS12 ":-KX-ALL:+RSA"), 0, "static RSA key exchange accepted");
  cr_expect_neq(handshake(TLS12 ":-KX-ALL:+RSA:-CIPHER-ALL:+AES-128-GCM:-MAC-ALL:+AEAD"), 0,
                "TLS_RSA_WITH_AES_128_GCM_SHA256 accepted");
  cr_expect_neq(handshake(TLS12 ":-CIPHER-ALL:+AES-128-CCM:+AES-256-CCM:-MAC-ALL:+AEAD"), 0,
                "AES-CCM accepted");
  cr_expect_neq(handshake(TLS12 ":-CIPHER-ALL:+AES-128-CBC:+AES-256-CBC:-MAC-ALL:+SHA256:+SHA384"),
                0, "AES-CBC with SHA-256/384 accepted");
#undef TLS12
}

/* prefer_server_cipher_suites (a Go bool) read from a TLS file's plain
 * scalar; -1 when the file is refused. */
static int prefer_server_of(const char *scalar) {
  char yml[512], err[1024];
  snprintf(yml, sizeof yml, TLS "  prefer_server_cipher_suites: %s\n", scalar);
  web_config *c = NULL;
  web_files files;
  if (web_config_load(write_yml(yml), (int64_t)time(NULL), &c, &files, err, sizeof err) != 0)
    return -1;
  int v = c->prefer_server;
  web_config_free(c);
  return v;
}

/* exporter-toolkit reads its file with gopkg.in/yaml.v2, whose plain
 * (unquoted) scalars follow YAML 1.1 (resolve.go): y, Y, yes, Yes, YES,
 * true, True, TRUE, on, On, ON and their n/no/false/off are booleans, each
 * in exactly those spellings; a null (~, null, Null, NULL or nothing) puts
 * Go's zero value, false, into a bool. gpupool took true/yes/on in any case
 * and refused y and n, and a null kept the default (true). Quoted values,
 * which exporter-toolkit refuses for a bool, are still read as before. */
Test(web_config, plain_booleans_are_yaml_1_1_as_exporter_toolkit_reads_them) {
  const char *yes[] = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  const char *no[] = {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    cr_expect_eq(prefer_server_of(yes[i]), 1, "%s", yes[i]);
    cr_expect_eq(prefer_server_of(no[i]), 0, "%s", no[i]);
  }
  const char *null[] = {"~", "null", "Null", "NULL", ""};
  for (size_t i = 0; i < sizeof null / sizeof null[0]; i++)
    cr_expect_eq(prefer_server_of(null[i]), 0, "'%s': Go's zero value", null[i]);
  const char *bad[] = {"TrUe", "tRUE", "yES",  "YeS",  "oN", "oFF",   "nO",  "t",    "f", "1",
                       "0",    "+",    "nULL", "nuLL", "~~", "true_", "0x1", ".inf", "-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char yml[256], why[128];
    snprintf(yml, sizeof yml, "tls_server_config:\n  prefer_server_cipher_suites: %s\n", bad[i]);
    snprintf(why, sizeof why, "tls_server_config.prefer_server_cipher_suites: '%s' is not", bad[i]);
    refused(yml, why);
  }
  web_config *c = load("http_server_config:\n  http2: y\n");
  web_config_free(c);
  c = load("http_server_config:\n  http2: OFF\n");
  web_config_free(c);
  refused("http_server_config:\n  http2: oFf\n", "http_server_config.http2: 'oFf' is not");
  /* quoted: read as before (exporter-toolkit refuses a quoted bool) */
  cr_expect_eq(prefer_server_of("'TrUe'"), 1);
  cr_expect_eq(prefer_server_of("\"off\""), 0);
  refused("tls_server_config:\n  prefer_server_cipher_suites: 'y'\n", "'y' is not");
}

/* The burst a file's plain scalar gives (interval 1s); -1 when refused. */
static long burst_of(const char *scalar, const char *interval) {
  char yml[512], err[1024];
  snprintf(yml, sizeof yml, "rate_limit:\n  interval: %s\n  burst: %s\n", interval, scalar);
  web_config *c = NULL;
  web_files files;
  if (web_config_load(write_yml(yml), (int64_t)time(NULL), &c, &files, err, sizeof err) != 0)
    return -1;
  long b = (long)c->rate_burst;
  web_config_free(c);
  return b;
}

/* yaml.v2's plain integers (resolve.go): Go's strconv.ParseInt(s, 0, 64)
 * after every '_' is removed, so 0x, 0o, 0b (any case) and a leading 0
 * (octal) set the base, and a sign is taken; then ParseUint; then a
 * decimal float (yaml.v2 cuts it toward zero into an int: 1.5 is 1, and
 * 09, not octal, is the float 9); then 0b with a signed binary number.
 * gpupool read the burst with strtol base 10 ("0x10" refused, "010" 10). */
Test(web_config, plain_integers_are_yaml_1_1_as_exporter_toolkit_reads_them) {
  struct {
    const char *text;
    long burst;
  } good[] = {
      {"16", 16},
      {"+16", 16},
      {"0x10", 16},
      {"0X10", 16},
      {"0x_1_0", 16},
      {"017", 15},
      {"0o17", 15},
      {"0O17", 15},
      {"0b101", 5},
      {"0B101", 5},
      {"1_000", 1000},
      {"1__0_", 10},
      {"+_1_0", 10},
      {"010", 8},
      {"09", 9},
      {"08", 8},
      {"0_9", 9},
      {"1.5", 1},
      {"1.", 1},
      {"2e2", 200},
      {"2E+2", 200},
      {"1_0.9", 10},
      {".5e1", 5},
      {".1_5e2", 15},
      {"0b+11", 3},
      {"1000000", 1000000},
      {"0xF4240", 1000000},
      {"1_000_000.99", 1000000},
      {"000000000000000000000000000000000000000007", 7},
      {"0.9999999999999999999", 1},
      {"9.99999e5", 999999},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    cr_expect_eq(burst_of(good[i].text, "1s"), good[i].burst, "burst: %s", good[i].text);
  /* zero, without an interval (a limit needs a burst of at least 1) */
  const char *zero[] = {"0", "-0", "00", "0x0", "-0b0", "0.5", "-0.5", ".5", "~", ""};
  for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
    cr_expect_eq(burst_of(zero[i], "0"), 0, "burst: '%s'", zero[i]);
  const char *bad[] = {"0x",
                       "0xg",
                       "0o8",
                       "0b2",
                       "1e",
                       "_1",
                       "1x",
                       "1.2.3",
                       "-1",
                       "-0x1",
                       "0b-1",
                       "1e400",
                       ".inf",
                       "-.inf",
                       ".nan",
                       "0x1p4",
                       "1000001",
                       "0xF4241",
                       "99999999999999999999",
                       "18446744073709551616",
                       "true",
                       "y",
                       "._5",
                       ".5_",
                       "1s",
                       "2001-01-01",
                       "1_000_001",
                       "-.5e1",
                       "+",
                       "0b",
                       "-0b",
                       "-0b+1",
                       ".",
                       ".e1",
                       "1e+",
                       "0o"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char yml[256], why[128];
    snprintf(yml, sizeof yml, "rate_limit:\n  interval: 1s\n  burst: %s\n", bad[i]);
    snprintf(why, sizeof why, "rate_limit.burst: '%s' is not a number from 0 to 1000000", bad[i]);
    refused(yml, why);
  }
  /* quoted: read as before, a decimal (exporter-toolkit refuses a quoted int) */
  cr_expect_eq(burst_of("'5'", "1s"), 5);
  refused("rate_limit:\n  interval: 1s\n  burst: '0x10'\n", "'0x10' is not a number");
}

static double plain_interval_of(const char *scalar) {
  char yml[256];
  snprintf(yml, sizeof yml, "rate_limit:\n  interval: %s\n  burst: 1\n", scalar);
  web_config *c = load(yml);
  double s = c->rate_interval_s;
  web_config_free(c);
  return s;
}

/* rate_limit.interval is a Go time.Duration: yaml.v2 puts a plain number
 * (an integer, or a float cut toward zero) into it as nanoseconds, and
 * passes anything else to time.ParseDuration. gpupool took only the
 * duration text (and refused "5" and "00" for a missing unit). */
Test(web_config, a_plain_number_interval_is_nanoseconds) {
  cr_expect_eq(plain_interval_of("1s"), 1.0);
  cr_expect_eq(plain_interval_of("1000000000"), 1.0);
  cr_expect_eq(plain_interval_of("1_000_000_000"), 1.0);
  cr_expect_eq(plain_interval_of("0x3B9ACA00"), 1.0);
  cr_expect_eq(plain_interval_of("1e9"), 1.0);
  cr_expect_eq(plain_interval_of("1.5e9"), 1.5);
  cr_expect_eq(plain_interval_of("5"), 5e-9);
  cr_expect_eq(plain_interval_of("1.9"), 1e-9);
  cr_expect_eq(plain_interval_of("00"), 0.0);
  cr_expect_eq(plain_interval_of(".5"), 0.0);
  cr_expect_eq(plain_interval_of("~"), 0.0);
  cr_expect_eq(plain_interval_of("9223372036854775807"), 9223372036854775807.0 / 1e9);
  refused("rate_limit:\n  interval: -5\n  burst: 1\n", "rate_limit.interval: '-5' is negative");
  const char *bad[] = {"9223372036854775808", "1e19", ".inf", ".nan", "true", "1_0s", "2001-01-01"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char yml[256], why[128];
    snprintf(yml, sizeof yml, "rate_limit:\n  interval: %s\n  burst: 1\n", bad[i]);
    snprintf(why, sizeof why, "rate_limit.interval: '%s' is not a Go duration", bad[i]);
    refused(yml, why);
  }
  /* quoted: a duration's text, as before (Go's ParseDuration wants a unit) */
  refused("rate_limit:\n  interval: '5'\n  burst: 1\n", "'5' is not a Go duration");
}

/* A null is exactly ~, null, Null, NULL or nothing (yaml.v2): nULL is a
 * string, so a mapping's key with it is no mapping and a path is a file. */
Test(web_config, a_null_is_spelled_as_yaml_1_1_spells_it) {
  refused("basic_auth_users: nULL\n", "basic_auth_users: expected a mapping");
  refused("tls_server_config:\n  cert_file: nuLL\n  key_file: server.key\n", "nuLL");
  web_config *c = load("basic_auth_users: Null\nrate_limit: NULL\ntls_server_config: ~\n");
  cr_expect_eq(c->nusers, 0);
  web_config_free(c);
}

/* Go's crypto/tls names TLS_ECDHE_*_WITH_CHACHA20_POLY1305_SHA256 also by
 * constants without _SHA256, but tls.CipherSuites(), whose names
 * exporter-toolkit matches, has only the long ones: it refuses the short
 * ones ("unknown cipher"), and so does gpupool now, naming the spelling it
 * takes. */
Test(web_config, go_short_chacha20_aliases_are_refused_naming_the_name) {
  const char *alias[] = {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
                         "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"};
  for (int i = 0; i < 2; i++) {
    char yml[256], why[256];
    snprintf(why, sizeof why,
             "tls_server_config.cipher_suites: unknown cipher suite '%s' (Go's constant alias, "
             "which exporter-toolkit refuses): write %s_SHA256",
             alias[i], alias[i]);
    snprintf(yml, sizeof yml, TLS "  cipher_suites: [%s]\n", alias[i]);
    refused(yml, why);
    snprintf(yml, sizeof yml, "tls_server_config:\n  cipher_suites: [%s]\n", alias[i]); /* no TLS */
    refused(yml, why);
  }
}

/* /metrics' X-Frame-Options and last_reload_successful. */
static void frame_and_reload(char *frame, size_t size, double *ok) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics", NULL, &r), 0);
  cr_assert_eq(r.status, 200);
  if (!http_header(&r, "X-Frame-Options", frame, size))
    frame[0] = '\0';
  cr_assert_eq(metrics_value(r.body, "gpupool_agent_web_config_last_reload_successful", NULL, ok),
               0);
  http_response_free(&r);
}

/* A reload whose cipher_suites names an alias is a bad file: the last good
 * configuration stays (its header here) and last_reload_successful is 0. */
Test(web_config, a_reload_with_a_cipher_alias_keeps_the_last_good_file) {
  cr_assert_eq(start(write_yml("tls_server_config:\n  cipher_suites: "
                               "[TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256]\n"
                               "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")),
               GPUPOOL_OK, "%s", gpupool_last_error());
  char frame[32] = "";
  double ok = 1;
  frame_and_reload(frame, sizeof frame, &ok);
  cr_assert_eq(ok, 1);
  cr_assert_eq(strcasecmp(frame, "deny"), 0, "X-Frame-Options: %s", frame);
  write_yml("tls_server_config:\n  cipher_suites: [TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305]\n"
            "http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n");
  for (int i = 0; i < 100 && ok != 0; i++) { /* the watcher looks every second */
    usleep(100000);
    frame_and_reload(frame, sizeof frame, &ok);
  }
  cr_expect_eq(ok, 0, "the file with the alias was not refused");
  cr_expect_eq(strcasecmp(frame, "deny"), 0, "X-Frame-Options: %s", frame);
}
