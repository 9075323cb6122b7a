/* The agent's HTTP server, through a real socket: every endpoint, methods,
 * unknown paths, bad parameters, HEAD, OpenMetrics, gzip, and the lifecycle
 * (busy port, bad address, restart, sd_dir, trace_file, the exit handler). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpupool/advisor.h"
#include "gpupool/agent.h"
#include "helpers/http_client.h"

static gpupool *pool;

static void setup(void) {
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_CONF");
  unsetenv("LOCAL_RANK");
  gpupool_options o = {
      .name = "web", .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64 << 20, .ignore_env = 1};
  cr_assert_eq(gpupool_create(&o, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
}

static void teardown(void) {
  gpupool_agent_stop();
  gpupool_destroy(pool);
}

TestSuite(agent_http, .init = setup, .fini = teardown);

/* Starts the agent on an ephemeral loopback port; returns the port. */
static int start_local(const char *extra_labels) {
  gpupool_agent_options o = {
      .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .labels = extra_labels, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  int port = gpupool_agent_port();
  cr_assert_gt(port, 0);
  return port;
}

static http_response get(int port, const char *method, const char *target, const char *headers) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, method, target, headers, &r), 0,
               "%s %s: no complete answer", method, target);
  return r;
}

static const char *header(const http_response *r, const char *name) {
  static char buf[256];
  return http_header(r, name, buf, sizeof buf);
}

Test(agent_http, serves_every_endpoint) {
  int port = start_local(NULL);
  void *p;
  cr_assert_eq(gpupool_malloc(pool, &p, 4096, NULL), GPUPOOL_OK);
  gpupool *twin; /* a second pool of the name on the device: web#2 in /metrics */
  gpupool_options o = {
      .name = gpupool_name(pool), .backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};
  cr_assert_eq(gpupool_create(&o, &twin), GPUPOOL_OK, "%s", gpupool_last_error());

  http_response r = get(port, "GET", "/metrics", NULL);
  cr_assert_eq(r.status, 200);
  cr_assert_str_eq(header(&r, "Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  cr_assert(strstr(r.body, "\ngpupool_allocated_bytes{"), "%.300s", r.body);
  cr_assert_null(strstr(r.body, "# EOF"), "the text format has no # EOF");
  http_response_free(&r);

  r = get(port, "GET", "/healthz", NULL);
  cr_assert_eq(r.status, 200);
  cr_assert_str_eq(r.body, "ok\n");
  http_response_free(&r);

  r = get(port, "GET", "/", NULL);
  cr_assert_eq(r.status, 200);
  cr_assert_str_eq(header(&r, "Content-Type"), "text/html; charset=utf-8");
  const char *links[] = {"href=\"/metrics\"",
                         "href=\"/trace?since=-30\"",
                         "href=\"/snapshot\"",
                         "href=\"/healthz\"",
                         "href=\"/oom\"",
                         "href=\"/ui\"",
                         "href=\"/advice?format=table\"",
                         GPUPOOL_VERSION,
                         "<td>web</td>",
                         "<td>web#2</td>"}; /* each pool by its /metrics label */
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
    cr_assert(strstr(r.body, links[i]), "the index page lacks %s", links[i]);
  http_response_free(&r);

  const char *json[] = {"/trace", "/snapshot"};
  for (size_t i = 0; i < 2; i++) {
    r = get(port, "GET", json[i], NULL);
    cr_assert_eq(r.status, 200, "%s: %d %s", json[i], r.status, r.body);
    cr_assert(strstr(header(&r, "Content-Type"), "application/json"));
    cJSON *doc = cJSON_Parse(r.body);
    cr_assert_not_null(doc, "%s is not JSON", json[i]);
    cJSON_Delete(doc);
    http_response_free(&r);
  }
  gpupool_free(pool, p);
  gpupool_destroy(twin);
}

Test(agent_http, only_get_and_head) {
  int port = start_local(NULL);
  const char *methods[] = {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    http_response r = get(port, methods[i], "/metrics", "Content-Length: 0\r\n");
    cr_assert_eq(r.status, 405, "%s gave %d", methods[i], r.status);
    cr_assert_str_eq(header(&r, "Allow"), "GET, HEAD");
    http_response_free(&r);
  }
}

Test(agent_http, unknown_paths_are_404) {
  int port = start_local(NULL);
  /* the last two: a %00 does not cut the path short */
  const char *paths[] = {"/nope",      "/metrics/",    "/metricsx",  "//metrics",
                         "/healthz/x", "/metrics%00x", "/healthz%00"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    http_response r = get(port, "GET", paths[i], NULL);
    cr_assert_eq(r.status, 404, "%s gave %d", paths[i], r.status);
    http_response_free(&r);
  }
}

Test(agent_http, bad_parameters_are_400_with_one_line) {
  int port = start_local(NULL);
  const char *targets[] = {
      "/metrics?x=1",     "/metrics?format",        "/healthz?verbose=1", "/?a=b",
      "/trace?limit=abc", "/trace?since=yesterday", "/snapshot?bogus=1",  "/trace?limit",
      "/trace?device",    "/snapshot?pool",         "/trace?limit=5%00x", "/snapshot?pool=a%00b",
      "/oom/1%00"};
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
    http_response r = get(port, "GET", targets[i], NULL);
    cr_assert_eq(r.status, 400, "%s gave %d", targets[i], r.status);
    cr_assert_gt(r.body_len, 1);
    cr_assert_eq(r.body[r.body_len - 1], '\n');
    cr_assert_null(memchr(r.body, '\n', r.body_len - 1), "%s: more than one line", targets[i]);
    http_response_free(&r);
  }
}

/* A number in a query is decimal digits: a sign only where a parameter
 * documents one (since=-5), no space, no 0x; leading zeros are read, as Go's
 * strconv reads them (a path's number, /oom/<id>, takes none:
 * test_oom_agent.c). */
Test(agent_http, numbers_in_queries_take_no_sign_space_or_prefix) {
  int port = start_local(NULL);
  const char *bad[] = {"/trace?limit=+5",
                       "/trace?limit=%2B5",
                       "/trace?limit=%205",
                       "/trace?limit=5%20",
                       "/trace?limit=0x5",
                       "/trace?limit=5.0",
                       "/trace?device=+0",
                       "/trace?device=%2B0",
                       "/trace?since=%2B5",
                       "/trace?until=%205",
                       "/trace?since=-%205",
                       "/trace?since=--5",
                       "/trace?limit=1e3",
                       "/ui/state.json?window=+60",
                       "/ui/blocks.json?pool=+1",
                       "/ui?device=+0",
                       "/trace?limit=99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    http_response r = get(port, "GET", bad[i], NULL);
    cr_expect_eq(r.status, 400, "%s gave %d", bad[i], r.status);
    http_response_free(&r);
  }
  const char *ok[] = {"/trace?limit=007",
                      "/trace?device=00",
                      "/trace?since=-5",
                      "/trace?since=-05",
                      "/ui/state.json?window=060",
                      "/ui/blocks.json?pool=01",
                      "/ui/state.json?window=0000000300",
                      "/ui/blocks.json?pool=00000000001"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    http_response r = get(port, "GET", ok[i], NULL);
    cr_expect_eq(r.status, 200, "%s gave %d: %.200s", ok[i], r.status, r.body);
    http_response_free(&r);
  }
}

/* Empty pieces of a query name nothing wherever they lie (a trailing one
 * was skipped, a leading or doubled one was an unknown parameter ''); the
 * empty name with a value is still refused. */
Test(agent_http, empty_query_pieces_are_skipped_anywhere) {
  int port = start_local(NULL);
  const char *ok[] = {"/metrics?&",         "/metrics?&&",     "/healthz?&",
                      "/trace?&limit=3",    "/trace?limit=3&", "/trace?limit=3&&device=0",
                      "/snapshot?&pool=no", "/ui/state.json?&"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    http_response r = get(port, "GET", ok[i], NULL);
    int want = strstr(ok[i], "pool=no") ? 400 : 200; /* a pool no pool has: 400 for its name */
    cr_expect_eq(r.status, want, "%s gave %d: %.*s", ok[i], r.status, (int)r.body_len, r.body);
    char body[512];
    snprintf(body, sizeof body, "%.*s", (int)r.body_len, r.body);
    cr_expect_null(strstr(body, "''"), "%s: %s", ok[i], body);
    http_response_free(&r);
  }
  const char *bad[] = {"/trace?=3", "/metrics?=", "/trace?limit=3&=1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    http_response r = get(port, "GET", bad[i], NULL);
    cr_expect_eq(r.status, 400, "%s gave %d", bad[i], r.status);
    http_response_free(&r);
  }
  /* /oom's reason names what /oom takes, not what /oom/<id> takes. */
  http_response r = get(port, "GET", "/oom?x=1", NULL);
  char body[512];
  snprintf(body, sizeof body, "%.*s", (int)r.body_len, r.body);
  cr_expect_eq(r.status, 400);
  cr_expect(strstr(body, "/oom takes none"), "%s", body);
  http_response_free(&r);
}

Test(agent_http, head_has_headers_and_no_body) {
  int port = start_local(NULL);
  const char *paths[] = {"/metrics", "/healthz", "/", "/trace", "/snapshot"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    http_response r = get(port, "HEAD", paths[i], NULL);
    cr_assert_eq(r.status, 200, "HEAD %s gave %d", paths[i], r.status);
    cr_assert_not_null(header(&r, "Content-Type"));
    cr_assert_eq(r.body_len, 0, "HEAD %s has a body", paths[i]);
    http_response_free(&r);
  }
}

/* Reads what the server sends until it closes the connection. */
static char *read_until_close(int fd, size_t *len) {
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap);
  cr_assert_not_null(buf);
  ssize_t k;
  while (n + 1 < cap && (k = recv(fd, buf + n, cap - n - 1, 0)) > 0)
    n += (size_t)k;
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* The header block at *pos (status 200 asserted), its Content-Length; *pos
 * moves past the block. */
static long next_headers(const char *data, size_t len, size_t *pos, const char *what) {
  const char *start = data + *pos;
  const char *end = strstr(start, "\r\n\r\n");
  cr_assert_not_null(end, "%s: no (complete) response at byte %zu of %zu", what, *pos, len);
  cr_assert_eq(strncmp(start, "HTTP/1.1 200 ", 13), 0, "%s: %.60s", what, start);
  char block[1024];
  snprintf(block, sizeof block, "%.*s", (int)(end - start), start);
  cr_assert_null(strstr(block, "Transfer-Encoding"), "%s: %s", what, block);
  const char *cl = strstr(block, "Content-Length: ");
  cr_assert_not_null(cl, "%s: no Content-Length: %s", what, block);
  *pos = (size_t)(end + 4 - data);
  return atol(cl + 16);
}

/* Prometheus and browsers keep connections open: after a HEAD (of a
 * streamed document too) the next request on the same connection is
 * answered cleanly, and HEAD announces the length GET would send. */
Test(agent_http, head_then_get_on_one_connection) {
  int port = start_local(NULL);
  const char *paths[] = {"/trace", "/metrics", "/snapshot", "/", "/healthz"};
  size_t npaths = sizeof paths / sizeof paths[0];
  char requests[2048] = "";
  for (size_t i = 0; i < npaths; i++) {
    size_t n = strlen(requests);
    snprintf(requests + n, sizeof requests - n,
             "HEAD %s HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n%s\r\n",
             paths[i], i + 1 == npaths ? "Connection: close\r\n" : "");
  }
  int fd = http_connect("127.0.0.1", port);
  cr_assert_geq(fd, 0);
  cr_assert_eq(send(fd, requests, strlen(requests), MSG_NOSIGNAL), (ssize_t)strlen(requests));
  size_t len, pos = 0;
  char *data = read_until_close(fd, &len);
  close(fd);
  for (size_t i = 0; i < npaths; i++) {
    long head_len = next_headers(data, len, &pos, paths[i]);
    cr_assert_gt(head_len, 0, "HEAD %s announces %ld bytes", paths[i], head_len);
    cr_assert_eq(next_headers(data, len, &pos, "GET /healthz after it"), 3);
    cr_assert_eq(strncmp(data + pos, "ok\n", 3), 0, "after HEAD %s: %.40s", paths[i], data + pos);
    pos += 3;
  }
  cr_assert_eq(pos, len, "bytes left over: %.40s", data + pos);
  free(data);
}

Test(agent_http, openmetrics_when_asked) {
  int port = start_local(NULL);
  http_response r =
      get(port, "GET", "/metrics",
          "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n");
  cr_assert_eq(r.status, 200);
  cr_assert_str_eq(header(&r, "Content-Type"),
                   "application/openmetrics-text; version=1.0.0; charset=utf-8");
  cr_assert_gt(r.body_len, 6);
  cr_assert_str_eq(r.body + r.body_len - 6, "# EOF\n");
  cr_assert(strstr(r.body, "# TYPE gpupool_frees counter\n"));
  cr_assert(strstr(r.body, "# UNIT gpupool_reserved_bytes bytes\n"));
  http_response_free(&r);

  r = get(port, "GET", "/metrics", "Accept: text/plain;version=0.0.4\r\n");
  cr_assert_str_eq(header(&r, "Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  http_response_free(&r);

  /* A version the agent does not write is not served as OpenMetrics. */
  r = get(port, "GET", "/metrics",
          "Accept: application/openmetrics-text;version=2.0.0,*/*;q=0.1\r\n");
  cr_assert_str_eq(header(&r, "Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  http_response_free(&r);
  r = get(port, "GET", "/metrics", "Accept: application/openmetrics-text;version=0.0.1\r\n");
  cr_assert_str_eq(header(&r, "Content-Type"),
                   "application/openmetrics-text; version=0.0.1; charset=utf-8");
  http_response_free(&r);
}

Test(agent_http, gzip_when_allowed) {
  int port = start_local(NULL);
  http_response r = get(port, "GET", "/metrics", "Accept-Encoding: gzip\r\n");
  cr_assert_eq(r.status, 200);
#ifdef GPUPOOL_HAVE_ZLIB
  cr_assert_str_eq(header(&r, "Content-Encoding"), "gzip");
  char *plain;
  size_t len;
  cr_assert_eq(http_gunzip(r.body, r.body_len, &plain, &len), 0, "not a gzip stream");
  cr_assert_eq(strncmp(plain, "# HELP ", 7), 0);
  cr_assert(strstr(plain, "gpupool_reserved_bytes{"));
  cr_assert_eq(plain[len - 1], '\n');
  free(plain);
#else
  cr_assert_null(header(&r, "Content-Encoding"), "built without zlib: no gzip");
#endif
  http_response_free(&r);

  r = get(port, "GET", "/metrics", "Accept-Encoding: gzip;q=0\r\n");
  cr_assert_null(header(&r, "Content-Encoding"));
  http_response_free(&r);
}

/* A whole document that no cache keeps (/snapshot here, /snapshot's pickle
 * in use: tens of MB) is deflated as it is sent where the client accepts
 * gzip and it is over 1 KiB: the same bytes once inflated, and HEAD
 * announces the deflated length. Errors and small bodies go as they are
 * (/ui's files are gzip'd once, with an ETag of their own: test_agent_ui). */
Test(agent_http, whole_documents_gzip_when_allowed) {
  int port = start_local(NULL);
  void *p[16];
  for (int i = 0; i < 16; i++)
    cr_assert_eq(gpupool_malloc(pool, &p[i], (size_t)4096 << (i % 8), NULL), GPUPOOL_OK);
  http_response plain = get(port, "GET", "/snapshot", NULL);
  cr_assert_eq(plain.status, 200);
  cr_assert_gt(plain.body_len, 1024, "%zu bytes: too small to be deflated", plain.body_len);
  cr_assert_null(header(&plain, "Content-Encoding"));
  http_response zipped = get(port, "GET", "/snapshot", "Accept-Encoding: gzip\r\n");
  cr_assert_eq(zipped.status, 200);
#ifdef GPUPOOL_HAVE_ZLIB
  cr_assert_str_eq(header(&zipped, "Content-Encoding"), "gzip");
  cr_assert_lt(zipped.body_len, plain.body_len);
  char *text;
  size_t len;
  cr_assert_eq(http_gunzip(zipped.body, zipped.body_len, &text, &len), 0, "not a gzip stream");
  cr_assert_eq(len, plain.body_len);
  cr_assert_eq(memcmp(text, plain.body, len), 0, "inflated, not the identity body");
  free(text);
  http_response head = get(port, "HEAD", "/snapshot", "Accept-Encoding: gzip\r\n");
  cr_assert_str_eq(header(&head, "Content-Encoding"), "gzip");
  char announced[32];
  snprintf(announced, sizeof announced, "%zu", zipped.body_len);
  cr_assert_str_eq(header(&head, "Content-Length"), announced);
  cr_assert_eq(head.body_len, 0);
  http_response_free(&head);
#else
  cr_assert_null(header(&zipped, "Content-Encoding"), "built without zlib: no gzip");
#endif
  http_response_free(&zipped);
  http_response_free(&plain);

  const char *as_they_are[] = {"/healthz", "/snapshot?format=xml"};
  for (size_t i = 0; i < sizeof as_they_are / sizeof as_they_are[0]; i++) {
    http_response r = get(port, "GET", as_they_are[i], "Accept-Encoding: gzip\r\n");
    cr_assert_null(header(&r, "Content-Encoding"), "%s was deflated", as_they_are[i]);
    cr_assert(r.body_len > 0 && r.body[0] != '\x1f', "%s", as_they_are[i]);
    http_response_free(&r);
  }
  http_response r = get(port, "GET", "/snapshot", "Accept-Encoding: gzip;q=0\r\n");
  cr_assert_null(header(&r, "Content-Encoding"));
  http_response_free(&r);
  for (int i = 0; i < 16; i++)
    cr_assert_eq(gpupool_free(pool, p[i]), GPUPOOL_OK);
}

Test(agent_http, busy_port_is_a_clear_error) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(listen(fd, 1), 0);
  socklen_t len = sizeof a;
  getsockname(fd, (struct sockaddr *)&a, &len);
  char listen_at[64];
  snprintf(listen_at, sizeof listen_at, "127.0.0.1:%d", ntohs(a.sin_port));

  cr_redirect_stderr();
  /* cupti:auto: the port fails the start before CUPTI says anything. */
  gpupool_agent_options o = {.listen = listen_at, .cupti = GPUPOOL_CUPTI_AUTO, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_ERR_BACKEND);
  cr_assert(strstr(gpupool_last_error(), "in use"), "%s", gpupool_last_error());
  cr_assert_eq(gpupool_agent_port(), 0);
  fflush(stderr);
  char line[512] = "";
  FILE *err = cr_get_redirected_stderr();
  /* The library prints nothing: the caller prints gpupool_last_error() once. */
  cr_assert_null(fgets(line, sizeof line, err), "the library printed: %s", line);

  /* The program runs on: pools work, and the agent starts elsewhere. */
  void *p;
  cr_assert_eq(gpupool_malloc(pool, &p, 100, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(pool, p), GPUPOOL_OK);
  start_local(NULL);
  close(fd);
}

Test(agent_http, bad_addresses_and_conf_start_nothing) {
  cr_redirect_stderr();
  const struct {
    const char *listen;
    gpupool_status status;
  } bad[] = {
      {"999.1.1.1:0", GPUPOOL_ERR_BACKEND}, {"no-such-host.invalid:0", GPUPOOL_ERR_BACKEND},
      {"192.0.2.1:0", GPUPOOL_ERR_BACKEND}, /* TEST-NET: not an address of this machine */
      {"[::1:0", GPUPOOL_ERR_INVALID},      {"127.0.0.1:99999", GPUPOOL_ERR_INVALID},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupool_agent_options o = {
        .listen = bad[i].listen, .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
    cr_assert_eq(gpupool_agent_start(&o), bad[i].status, "%s: %s", bad[i].listen,
                 gpupool_last_error());
    cr_assert(strstr(gpupool_last_error(), "gpupool agent:"), "%s", gpupool_last_error());
    cr_assert_eq(gpupool_agent_port(), 0);
  }
  setenv("GPUPOOL_AGENT_CONF", "listen:127.0.0.1:0,colour:red", 1);
  cr_assert_eq(gpupool_agent_start(NULL), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "colour"), "%s", gpupool_last_error());
  unsetenv("GPUPOOL_AGENT_CONF");
  start_local(NULL); /* none of that left anything running */
}

Test(agent_http, start_stop_restart) {
  int port = start_local(NULL);
  gpupool_agent_options o = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "already running"), "%s", gpupool_last_error());
  cr_assert_eq(gpupool_agent_port(), port, "the running agent is untouched");

  gpupool_agent_stop();
  cr_assert_eq(gpupool_agent_port(), 0);
  http_response r;
  cr_assert_neq(http_request("127.0.0.1", port, "GET", "/healthz", NULL, &r), 0,
                "nothing listens after stop");
  gpupool_agent_stop(); /* idempotent */

  for (int i = 0; i < 3; i++) {
    port = start_local(NULL);
    r = get(port, "GET", "/healthz", NULL);
    cr_assert_eq(r.status, 200);
    http_response_free(&r);
    gpupool_agent_stop();
  }
}

Test(agent_http, same_port_again_after_stop) {
  int port = start_local(NULL);
  http_response r = get(port, "GET", "/metrics", NULL); /* leaves a TIME_WAIT connection */
  http_response_free(&r);
  gpupool_agent_stop();
  char listen_at[64];
  snprintf(listen_at, sizeof listen_at, "127.0.0.1:%d", port);
  gpupool_agent_options o = {.listen = listen_at, .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_agent_port(), port);
}

Test(agent_http, listen_off_serves_nothing) {
  gpupool_agent_options o = {.listen = "off", .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_agent_port(), 0);
}

Test(agent_http, ipv6_loopback) {
  gpupool_agent_options o = {.listen = "[::1]:0", .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
  cr_redirect_stderr();
  if (gpupool_agent_start(&o) != GPUPOOL_OK) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int usable = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
      close(fd);
    cr_assert_not(usable, "::1 is usable here, yet the agent failed: %s", gpupool_last_error());
    cr_skip("this machine has no IPv6 loopback");
  }
  http_response r;
  cr_assert_eq(http_request("::1", gpupool_agent_port(), "GET", "/healthz", NULL, &r), 0);
  cr_assert_eq(r.status, 200);
  http_response_free(&r);
}

Test(agent_http, every_interface_takes_ipv4) {
  gpupool_agent_options o = {.listen = ":0", .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  http_response r = get(gpupool_agent_port(), "GET", "/healthz", NULL);
  cr_assert_eq(r.status, 200);
  http_response_free(&r);
}

Test(agent_http, sd_dir_file_lives_while_the_agent_runs) {
  char dir[] = "/tmp/gpupool-sd-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .sd_dir = dir,
                             .hostname = "node-7",
                             .labels = "team=ml",
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  char path[512];
  snprintf(path, sizeof path, "%s/gpupool-node-7-%ld.json", dir, (long)getpid());
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "no %s", path);
  char text[4096];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  cJSON *doc = cJSON_Parse(text);
  cr_assert(cJSON_IsArray(doc), "%s", text);
  cJSON *group = cJSON_GetArrayItem(doc, 0);
  cJSON *target = cJSON_GetArrayItem(cJSON_GetObjectItem(group, "targets"), 0);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d", gpupool_agent_port());
  cr_assert_str_eq(cJSON_GetStringValue(target), want);
  cJSON *labels = cJSON_GetObjectItem(group, "labels");
  cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(labels, "__meta_gpupool_label_team")),
                   "ml");
  cJSON_Delete(doc);

  gpupool_agent_stop();
  struct stat st;
  cr_assert_neq(stat(path, &st), 0, "the target file outlived the agent");
  cr_assert_eq(rmdir(dir), 0, "sd_dir should be left empty");
}

/* sd_dir is often shared (NFS, /var/run): a link another user planted at
 * the temporary file's name is not followed, and what it points to keeps
 * its contents. */
Test(agent_http, sd_dir_follows_no_link_at_the_temporary_name) {
  char dir[] = "/tmp/gpupool-sd-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char victim[600], link[600], path[600];
  snprintf(victim, sizeof victim, "%s.victim", dir);
  FILE *f = fopen(victim, "w");
  cr_assert_not_null(f);
  fputs("precious\n", f);
  fclose(f);
  snprintf(link, sizeof link, "%s/.gpupool-node-8-%ld.json.tmp", dir, (long)getpid());
  cr_assert_eq(symlink(victim, link), 0);
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .sd_dir = dir,
                             .hostname = "node-8",
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  char text[64] = "";
  f = fopen(victim, "r");
  cr_assert_not_null(f);
  cr_expect_not_null(fgets(text, sizeof text, f));
  fclose(f);
  cr_expect_str_eq(text, "precious\n", "the write went through the link");
  snprintf(path, sizeof path, "%s/gpupool-node-8-%ld.json", dir, (long)getpid());
  struct stat st;
  cr_expect_eq(lstat(path, &st), 0, "no %s", path);
  cr_expect(S_ISREG(st.st_mode), "the target file is no regular file");
  gpupool_agent_stop();
  cr_expect_neq(lstat(link, &st), 0, "the link is left behind");
  unlink(link);
  unlink(victim);
  cr_assert_eq(rmdir(dir), 0, "sd_dir should be left empty");
}

Test(agent_http, sd_dir_that_cannot_be_written_fails_the_start) {
  cr_redirect_stderr();
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .sd_dir = "/nonexistent/dir",
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "sd_dir"), "%s", gpupool_last_error());
  cr_assert_eq(gpupool_agent_port(), 0);
}

/* Runs gpupool_agent_start(o) where no file may grow past 8 bytes (writes
 * beyond fail with EFBIG, as on a full disk); the status. */
static gpupool_status start_with_tiny_files(const gpupool_agent_options *o) {
  struct rlimit old, tiny = {.rlim_cur = 8};
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  tiny.rlim_max = old.rlim_max;
  signal(SIGXFSZ, SIG_IGN); /* else the write past the limit kills the test */
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &tiny), 0);
  gpupool_status s = gpupool_agent_start(o);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  return s;
}

/* The target file is smaller than stdio's buffer: the full disk shows only
 * at fclose, and the message gives that reason. */
Test(agent_http, sd_dir_on_a_full_disk_fails_the_start_with_the_reason) {
  char dir[] = "/tmp/gpupool-sd-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  gpupool_agent_options o = {
      .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .sd_dir = dir, .ignore_env = 1};
  cr_assert_eq(start_with_tiny_files(&o), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "sd_dir: cannot write ") &&
                strstr(gpupool_last_error(), strerror(EFBIG)),
            "%s", gpupool_last_error());
  cr_expect_eq(gpupool_agent_port(), 0);
  cr_expect_eq(rmdir(dir), 0, "sd_dir should be left empty");
}

static cJSON *read_json(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *text = malloc((size_t)n + 1);
  size_t got = fread(text, 1, (size_t)n, f);
  text[got] = '\0';
  fclose(f);
  cJSON *doc = cJSON_Parse(text);
  free(text);
  return doc;
}

/* Runs the agent with trace_file path (removed first) over one allocation's
 * lifetime and stops it: the trace is written then. */
static void trace_one_lifetime_into(const char *path) {
  unlink(path);
  gpupool_agent_options o = {
      .listen = "off", .cupti = GPUPOOL_CUPTI_OFF, .trace_file = path, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  void *p;
  cr_assert_eq(gpupool_malloc(pool, &p, 1 << 20, NULL), GPUPOOL_OK);
  gpupool_free(pool, p);
  gpupool_agent_stop();
}

Test(agent_http, trace_file_is_written_at_stop) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/gpupool-trace-%ld.json", (long)getpid());
  trace_one_lifetime_into(path);
  cJSON *doc = read_json(path);
  cr_assert_not_null(doc, "%s is missing or not JSON", path);
  cr_assert(cJSON_IsArray(cJSON_GetObjectItem(doc, "traceEvents")));
  cJSON_Delete(doc);
  unlink(path);
}

#ifdef GPUPOOL_HAVE_ZLIB
/* A trace_file named *.gz is written gzip'd (one member, as Perfetto and
 * chrome://tracing read it): inflated, the same JSON document, whose
 * allocation reads back as a history (gpupool-advise reads the file as it
 * is). */
Test(agent_http, trace_file_named_gz_is_gzipped) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/gpupool-trace-%ld.json.gz", (long)getpid());
  trace_one_lifetime_into(path);
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s is missing", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *zipped = malloc((size_t)n);
  cr_assert_eq(fread(zipped, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  cr_assert(n > 2 && (unsigned char)zipped[0] == 0x1f && (unsigned char)zipped[1] == 0x8b,
            "%s is not gzip'd", path);
  char *text;
  size_t len;
  cr_assert_eq(http_gunzip(zipped, (size_t)n, &text, &len), 0, "not one whole gzip member");
  free(zipped);
  cJSON *doc = cJSON_ParseWithLength(text, len);
  free(text);
  cr_assert_not_null(doc, "inflated, not JSON");
  cr_assert(cJSON_IsArray(cJSON_GetObjectItem(doc, "traceEvents")));
  cJSON_Delete(doc);
  gpupool_history *h;
  cr_assert_eq(gpupool_history_load(path, NULL, "web", &h), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(gpupool_history_get_info(h)->allocations, 1);
  gpupool_history_free(h);
  unlink(path);
}
#endif

/* A trace_file the agent could not write at stop fails the start, with the
 * path and the reason, and starts nothing: a later good start works. */
Test(agent_http, trace_file_that_cannot_be_written_fails_the_start) {
  char dir[] = "/tmp/gpupool-trace-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char missing[128], in_a_file[128], too_long[4200], good[128];
  snprintf(missing, sizeof missing, "%s/no/such/dir/trace.json", dir);
  snprintf(in_a_file, sizeof in_a_file, "%s/file/trace.json", dir);
  snprintf(good, sizeof good, "%s/file", dir);
  FILE *f = fopen(good, "w");
  cr_assert_not_null(f);
  fclose(f);
  /* 4090 bytes: a setting, but no room for the temporary file's ".tmp.<pid>" */
  snprintf(too_long, sizeof too_long, "%s/%0*d", dir, (int)(4090 - strlen(dir) - 1), 0);
  const struct {
    const char *path, *why;
  } bad[] = {{missing, strerror(ENOENT)},
             {in_a_file, strerror(ENOTDIR)},
             {dir, "is a directory"},
             {too_long, "path too long"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupool_agent_options o = {.listen = "127.0.0.1:0",
                               .cupti = GPUPOOL_CUPTI_OFF,
                               .trace_file = bad[i].path,
                               .ignore_env = 1};
    cr_expect_eq(gpupool_agent_start(&o), GPUPOOL_ERR_INVALID, "%.100s", bad[i].path);
    char want[160];
    snprintf(want, sizeof want, "gpupool agent: trace_file '%.100s", bad[i].path);
    cr_expect(strstr(gpupool_last_error(), want) && strstr(gpupool_last_error(), bad[i].why), "%s",
              gpupool_last_error());
    cr_expect_eq(gpupool_agent_port(), 0, "nothing started");
  }
  snprintf(good, sizeof good, "%s/trace.json", dir);
  gpupool_agent_options o = {
      .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .trace_file = good, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_neq(access(good, F_OK), 0, "the start created no file");
  gpupool_agent_stop();
  cJSON *doc = read_json(good);
  cr_expect_not_null(doc, "%s is missing or not JSON", good);
  cJSON_Delete(doc);
  unlink(good);
  snprintf(good, sizeof good, "%s/file", dir);
  unlink(good);
  cr_expect_eq(rmdir(dir), 0, "nothing else was left in %s", dir);
}

/* Relative paths name what they named when the agent started: a program
 * that chdir()s while the agent runs still gets its trace in trace_file's
 * directory and its sd_dir file removed at stop (both were looked up again
 * from the new working directory: the trace went there, the file stayed). */
Test(agent_http, relative_paths_hold_across_a_chdir) {
  char cwd[PATH_MAX], here[] = "/tmp/gpupool-here-XXXXXX", away[] = "/tmp/gpupool-away-XXXXXX";
  cr_assert_not_null(getcwd(cwd, sizeof cwd));
  cr_assert_not_null(mkdtemp(here));
  cr_assert_not_null(mkdtemp(away));
  cr_assert_eq(chdir(here), 0);
  cr_assert_eq(mkdir("sd", 0700), 0);
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .trace_file = "trace.json",
                             .sd_dir = "sd",
                             .hostname = "node-rel",
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  char trace[128], sd_file[128], stray[128];
  snprintf(trace, sizeof trace, "%s/trace.json", here);
  snprintf(sd_file, sizeof sd_file, "%s/sd/gpupool-node-rel-%ld.json", here, (long)getpid());
  snprintf(stray, sizeof stray, "%s/trace.json", away);
  cr_assert_eq(access(sd_file, F_OK), 0, "no %s", sd_file);
  cr_assert_eq(chdir(away), 0);
  gpupool_agent_stop();
  cJSON *doc = read_json(trace);
  cr_expect_not_null(doc, "%s is missing or not JSON", trace);
  cJSON_Delete(doc);
  cr_expect_neq(access(stray, F_OK), 0, "the trace went to the new working directory");
  cr_expect_neq(access(sd_file, F_OK), 0, "the sd_dir file outlived the agent");
  unlink(trace);
  unlink(sd_file);
  unlink(stray);
  snprintf(trace, sizeof trace, "%s/sd", here);
  cr_expect_eq(rmdir(trace), 0);
  cr_expect_eq(rmdir(here), 0, "nothing else was left in %s", here);
  cr_expect_eq(rmdir(away), 0, "nothing else was left in %s", away);
  cr_assert_eq(chdir(cwd), 0);
}

Test(agent_http, exit_handler_stops_the_agent_and_writes_the_trace) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/gpupool-exit-trace-%ld.json", (long)getpid());
  unlink(path);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    gpupool_agent_options o = {
        .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .trace_file = path, .ignore_env = 1};
    if (gpupool_agent_start(&o) != GPUPOOL_OK)
      _exit(2);
    exit(0); /* no gpupool_agent_stop: the exit handler does it */
  }
  int status;
  cr_assert_eq(waitpid(child, &status, 0), child);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  cJSON *doc = read_json(path);
  cr_assert_not_null(doc, "the exit handler did not write %s", path);
  cJSON_Delete(doc);
  unlink(path);
}

/* A child forked while the agent runs (its sampler walking the pools every
 * millisecond) creates and destroys pools of its own without waiting on a
 * lock the parent's threads held at the fork (before, it hung in
 * gpupool_create), and is told it serves nothing (port 0; before, the
 * parent's). A child still alive after 10 s is killed by its alarm. */
Test(agent_http, a_forked_child_uses_pools_and_serves_nothing) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  cr_skip("a child forked from a threaded process can wait on the sanitizer's own allocator lock");
#endif
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .sample_interval_ms = 1,
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_options po = {
      .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64 << 20, .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&po, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  int forks = 200;
  for (int i = 0; i < forks; i++) {
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
      alarm(10);
      gpupool *c;
      if (gpupool_create(&po, &c) != GPUPOOL_OK)
        _exit(2);
      gpupool_destroy(c);
      _exit(gpupool_agent_port() == 0 ? 0 : 3);
    }
    int status;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "fork %d: child status %d (signal %d: 14 is its alarm, a hang)", i, status,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
  cr_expect_gt(gpupool_agent_port(), 0, "the parent still serves");
  gpupool_destroy(p);
  gpupool_agent_stop();
}

Test(agent_http, cupti_force_that_fails_starts_nothing) {
  cr_redirect_stderr();
  gpupool_agent_options o = {
      .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_FORCE, .ignore_env = 1};
  gpupool_status s = gpupool_agent_start(&o);
  if (s == GPUPOOL_OK)
    cr_skip("CUPTI records on this machine: cupti:force succeeds");
  cr_assert(strstr(gpupool_last_error(), "cupti"), "%s", gpupool_last_error());
  cr_assert_eq(gpupool_agent_port(), 0);
  start_local(NULL); /* cupti:off starts: nothing was left running */
}

/* Escapes in the path and the query still decode (%HH, and '+' as a space
 * in the query); only %00 is kept as written. */
Test(agent_http, escapes_decode) {
  int port = start_local(NULL);
  gpupool *named;
  gpupool_options o = {.name = "a b/c", .backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};
  cr_assert_eq(gpupool_create(&o, &named), GPUPOOL_OK, "%s", gpupool_last_error());
  const char *targets[] = {"/snapshot?pool=a%20b%2Fc", "/snapshot?pool=a+b%2fc", "/%6Detrics",
                           "/trace?limit=%35"};
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
    http_response r = get(port, "GET", targets[i], NULL);
    cr_expect_eq(r.status, 200, "%s gave %d: %s", targets[i], r.status, r.body);
    if (i < 2)
      cr_expect(strstr(r.body, "\"a b/c\""), "%s: %s", targets[i], r.body);
    http_response_free(&r);
  }
  gpupool_destroy(named);
}

/* Sends raw bytes on a new connection; what comes back until the close. */
static char *exchange(int port, const char *bytes) {
  int fd = http_connect("127.0.0.1", port);
  cr_assert_geq(fd, 0);
  cr_assert_eq(send(fd, bytes, strlen(bytes), MSG_NOSIGNAL), (ssize_t)strlen(bytes));
  shutdown(fd, SHUT_WR);
  size_t len;
  char *got = read_until_close(fd, &len);
  close(fd);
  return got;
}

/* Requests whose framing is ambiguous are refused, as Go's server refuses
 * them (RFC 9112), and their leftover bytes are never read as a request; a
 * target in absolute form is served (RFC 9112 3.2.2). */
Test(agent_http, strict_framing_and_absolute_form) {
  int port = start_local(NULL);
  static const char *const refused[] = {
      "GET /healthz HTTP/1.1\r\n\r\n", /* no Host */
      "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      /* two lengths; the rest never a request */
      ("GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"
       "hello!GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"),
  };
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    char *got = exchange(port, refused[i]);
    cr_assert_eq(strncmp(got, "HTTP/1.1 400 ", 13), 0, "request %zu: %.80s", i, got);
    cr_assert_null(strstr(got, "\nHTTP/1."), "request %zu: a second answer: %s", i, got);
    free(got);
  }
  char *got = exchange(port, "GET http://127.0.0.1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             "Connection: close\r\n\r\n");
  cr_assert_eq(strncmp(got, "HTTP/1.1 200 ", 13), 0, "%.80s", got);
  cr_assert(strstr(got, "\r\n\r\nok\n"), "%s", got);
  free(got);
}

/* The first line of the answer to GET target with Host header host, on a
 * new connection. */
static char *status_for_host(int port, const char *method, const char *target, const char *host) {
  char req[512];
  snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", method,
           target, host);
  return exchange(port, req);
}

/* A loopback listener answers Host headers that name this machine only, so
 * that a web page whose name was rebound to 127.0.0.1 cannot read the agent
 * (agent/host_guard.h); allowed_hosts adds names, "*" any; a listener on
 * every interface is not guarded. */
Test(agent_http, a_loopback_listener_refuses_a_rebound_host) {
  int port = start_local(NULL);
  static const char *const answered[] = {"127.0.0.1", "localhost:1", "ui.localhost", "[::1]:9",
                                         "gpu-node"};
  for (size_t i = 0; i < sizeof answered / sizeof *answered; i++) {
    char *got = status_for_host(port, "GET", "/healthz", answered[i]);
    cr_expect_eq(strncmp(got, "HTTP/1.1 200 ", 13), 0, "Host %s: %.80s", answered[i], got);
    free(got);
  }
  char system_name[256] = "";
  cr_assert_eq(gethostname(system_name, sizeof system_name - 1), 0);
  char *got = status_for_host(port, "GET", "/metrics", system_name);
  cr_expect_eq(strncmp(got, "HTTP/1.1 200 ", 13), 0, "this machine's name %s: %.80s", system_name,
               got);
  free(got);
  static const char *const targets[] = {"/metrics", "/snapshot", "/trace", "/ui", "/healthz"};
  for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
    got = status_for_host(port, "GET", targets[i], "attacker.example:9477");
    cr_expect_eq(strncmp(got, "HTTP/1.1 403 ", 13), 0, "%s: %.80s", targets[i], got);
    cr_expect(strstr(got, "allowed_hosts"), "%s: %s", targets[i], got);
    cr_expect_null(strstr(got, "gpupool_"), "%s: the refused answer has metrics", targets[i]);
    free(got);
  }
  got = status_for_host(port, "HEAD", "/metrics", "attacker.example");
  cr_expect_eq(strncmp(got, "HTTP/1.1 403 ", 13), 0, "HEAD: %.80s", got);
  cr_expect_null(strstr(got, "forbidden"), "HEAD has no body: %s", got);
  free(got);
  got = status_for_host(port, "POST", "/metrics", "attacker.example");
  cr_expect_eq(strncmp(got, "HTTP/1.1 403 ", 13), 0, "POST: %.80s", got);
  free(got);
  gpupool_agent_stop();

  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .ignore_env = 1,
                             .allowed_hosts = "attacker.example;.svc.cluster.local"};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  port = gpupool_agent_port();
  static const char *const listed[][2] = {{"attacker.example:9477", "200"},
                                          {"agent.ns.svc.cluster.local", "200"},
                                          {"other.example", "403"}};
  for (size_t i = 0; i < 3; i++) {
    got = status_for_host(port, "GET", "/healthz", listed[i][0]);
    cr_expect_eq(strncmp(got + 9, listed[i][1], 3), 0, "Host %s: %.80s", listed[i][0], got);
    free(got);
  }
  gpupool_agent_stop();

  setenv("GPUPOOL_AGENT_CONF", "listen:127.0.0.1:0,allowed_hosts:*", 1);
  cr_assert_eq(gpupool_agent_start(NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  unsetenv("GPUPOOL_AGENT_CONF");
  got = status_for_host(gpupool_agent_port(), "GET", "/healthz", "other.example");
  cr_expect_eq(strncmp(got, "HTTP/1.1 200 ", 13), 0, "allowed_hosts:*: %.80s", got);
  free(got);
  gpupool_agent_stop();

  gpupool_agent_options every = {.listen = ":0", .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
  cr_redirect_stderr(); /* its warning */
  cr_assert_eq(gpupool_agent_start(&every), GPUPOOL_OK, "%s", gpupool_last_error());
  got = status_for_host(gpupool_agent_port(), "GET", "/healthz", "other.example");
  cr_expect_eq(strncmp(got, "HTTP/1.1 200 ", 13), 0, "every interface: %.80s", got);
  free(got);
}

/* A bad allowed_hosts fails the start with the reason, and starts nothing. */
Test(agent_http, a_bad_allowed_hosts_starts_nothing) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .ignore_env = 1,
                             .allowed_hosts = "good.example;bad name"};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "allowed_hosts: 'bad name'"), "%s", gpupool_last_error());
  cr_expect_eq(gpupool_agent_port(), 0);
  cr_expect_eq(gpupool_agent_conf_check("allowed_hosts:a;;b"), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_agent_conf_check("allowed_hosts:a.example;.b.example"), GPUPOOL_OK, "%s",
               gpupool_last_error());
  o.allowed_hosts = "good.example";
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
}
