/* /ui through a real socket: the page and its assets (Content-Type, CSP,
 * ETag and 304, caching), /ui/state.json and /ui/blocks.json (their JSON,
 * values equal to the pool's statistics, a pool gone, empty pools, bad
 * parameters), the tag of each block in blocks.json, and the blocks' allocation time and unmapped
 * bytes in the snapshot walk. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "gpupool/tag.h"
#include "helpers/http_client.h"
#include "helpers/http_json.h"
#include "pool/types.h"

static gpupool *pool, *empty;

static void setup(void) {
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_CONF");
  unsetenv("LOCAL_RANK");
  gpupool_options o = {
      .name = "web", .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 256 << 20, .ignore_env = 1};
  cr_assert_eq(gpupool_create(&o, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
  o.name = "nothing";
  cr_assert_eq(gpupool_create(&o, &empty), GPUPOOL_OK, "%s", gpupool_last_error());
}

static void teardown(void) {
  gpupool_agent_stop();
  gpupool_destroy(pool);
  gpupool_destroy(empty);
}

TestSuite(agent_ui, .init = setup, .fini = teardown);

static int start_local(void) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  return gpupool_agent_port();
}

static http_response request(int port, const char *method, const char *target,
                             const char *headers) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, method, target, headers, &r), 0,
               "%s %s: no complete answer", method, target);
  return r;
}

static http_response get(int port, const char *target, const char *headers) {
  return request(port, "GET", target, headers);
}

static const char *header(const http_response *r, const char *name) {
  static char buf[512];
  return http_header(r, name, buf, sizeof buf);
}

/* The src or href of the page that starts with prefix, up to its quote. */
static char *asset_url(const char *page, const char *prefix) {
  const char *p = strstr(page, prefix);
  cr_assert_not_null(p, "the page does not load %s", prefix);
  const char *end = strchr(p, '"');
  return strndup(p, (size_t)(end - p));
}

Test(agent_ui, page_and_assets) {
  int port = start_local();
  http_response r = get(port, "/ui", NULL);
  cr_assert_eq(r.status, 200);
  cr_assert_str_eq(header(&r, "Content-Type"), "text/html; charset=utf-8");
  cr_assert_str_eq(header(&r, "Cache-Control"), "no-cache");
  const char *csp = header(&r, "Content-Security-Policy");
  cr_assert(csp && strstr(csp, "default-src 'none'") && strstr(csp, "script-src 'self'") &&
                !strstr(csp, "unsafe-inline"),
            "CSP: %s", csp ? csp : "(none)");
  cr_assert_null(strstr(r.body, "<script>"), "no inline script");
  cr_assert_null(strstr(r.body, "@HASH:"), "every asset hash is filled in");
  char *js = asset_url(r.body, "/ui/ui.js?v=");
  char *css = asset_url(r.body, "/ui/ui.css?v=");
  char etag[128];
  snprintf(etag, sizeof etag, "%s", header(&r, "ETag"));
  cr_assert_eq(etag[0], '"');
  http_response_free(&r);

  r = get(port, "/ui/", NULL); /* the same page */
  cr_assert_eq(r.status, 200);
  cr_assert_str_eq(header(&r, "ETag"), etag);
  http_response_free(&r);

  char cond[200];
  snprintf(cond, sizeof cond, "If-None-Match: %s\r\n", etag);
  r = get(port, "/ui", cond);
  cr_assert_eq(r.status, 304, "a matching ETag is not modified");
  cr_assert_eq(r.body_len, 0);
  http_response_free(&r);
  r = get(port, "/ui", "If-None-Match: \"other\"\r\n");
  cr_assert_eq(r.status, 200);
  http_response_free(&r);

  const struct {
    const char *url, *type;
  } assets[] = {{js, "text/javascript; charset=utf-8"}, {css, "text/css; charset=utf-8"}};
  for (int i = 0; i < 2; i++) {
    r = get(port, assets[i].url, NULL);
    cr_assert_eq(r.status, 200, "%s: %d", assets[i].url, r.status);
    cr_assert_str_eq(header(&r, "Content-Type"), assets[i].type);
    cr_assert(strstr(header(&r, "Cache-Control"), "immutable"));
    cr_assert_str_eq(header(&r, "X-Content-Type-Options"), "nosniff");
    /* The ETag is the content's hash, the same one the page names. */
    const char *v = strstr(assets[i].url, "?v=") + 3;
    char want[64];
    snprintf(want, sizeof want, "\"%s\"", v);
    cr_assert_str_eq(header(&r, "ETag"), want);
    cr_assert_gt(r.body_len, 100);
    http_response_free(&r);
  }
  free(js);
  free(css);

  const char *missing[] = {"/ui/nothing.js", "/ui/index.html", "/uix", "/ui/state.json/x"};
  for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
    r = get(port, missing[i], NULL);
    cr_assert_eq(r.status, 404, "%s gave %d", missing[i], r.status);
    http_response_free(&r);
  }
  /* Without the hash, or with another (a stale page's), no keeping for good. */
  const char *unnamed[] = {"/ui/ui.js", "/ui/ui.js?v=0000000000000000"};
  for (size_t i = 0; i < sizeof unnamed / sizeof unnamed[0]; i++) {
    r = get(port, unnamed[i], NULL);
    cr_assert_eq(r.status, 200, "%s: %d", unnamed[i], r.status);
    cr_assert_str_eq(header(&r, "Cache-Control"), "no-cache", "%s", unnamed[i]);
    http_response_free(&r);
  }
  r = get(port, "/ui/ui.css?x=1", NULL);
  cr_assert_eq(r.status, 400);
  http_response_free(&r);

  r = get(port, "/", NULL); /* the index links the page */
  cr_assert(strstr(r.body, "href=\"/ui\""));
  http_response_free(&r);
}

/* The page and its script and style, asked by a client that accepts gzip:
 * gzip'd, the same bytes once inflated, under an ETag of their own (the
 * plain one with "-gzip", so that no cache takes one form for the other),
 * which a revalidation of that form matches and the plain one's does not;
 * HEAD announces the gzip'd length. A client that does not accept gzip gets
 * the file as it is. Built without zlib, every answer is plain. */
Test(agent_ui, files_gzip_when_accepted) {
  int port = start_local();
  http_response page = get(port, "/ui", NULL);
  char *targets[] = {strdup("/ui"), asset_url(page.body, "/ui/ui.js?v="),
                     asset_url(page.body, "/ui/ui.css?v=")};
  http_response_free(&page);
  for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
    const char *t = targets[i];
    http_response plain = get(port, t, NULL);
    cr_assert_eq(plain.status, 200, "%s", t);
    cr_assert_null(header(&plain, "Content-Encoding"), "%s", t);
    /* header() answers in one buffer: the plain answer's values copied */
    char plain_etag[128], plain_cache[128], plain_csp[512];
    snprintf(plain_etag, sizeof plain_etag, "%s", header(&plain, "ETag"));
    snprintf(plain_cache, sizeof plain_cache, "%s", header(&plain, "Cache-Control"));
    snprintf(plain_csp, sizeof plain_csp, "%s", header(&plain, "Content-Security-Policy"));
    http_response refused = get(port, t, "Accept-Encoding: gzip;q=0, identity\r\n");
    cr_assert_null(header(&refused, "Content-Encoding"), "%s", t);
    cr_assert_eq(refused.body_len, plain.body_len, "%s", t);
    http_response_free(&refused);
    http_response zipped = get(port, t, "Accept-Encoding: gzip, deflate, br\r\n");
    cr_assert_eq(zipped.status, 200, "%s", t);
    cr_assert(strstr(header(&zipped, "Vary"), "Accept-Encoding"), "%s", t);
#ifdef GPUPOOL_HAVE_ZLIB
    cr_assert_str_eq(header(&zipped, "Content-Encoding"), "gzip", "%s", t);
    cr_assert_lt(zipped.body_len, plain.body_len, "%s", t);
    char *text;
    size_t len;
    cr_assert_eq(http_gunzip(zipped.body, zipped.body_len, &text, &len), 0, "%s", t);
    cr_assert(len == plain.body_len && memcmp(text, plain.body, len) == 0,
              "%s: inflated, not the plain file", t);
    free(text);
    char want[160];
    snprintf(want, sizeof want, "%.*s-gzip\"", (int)strlen(plain_etag) - 1, plain_etag);
    cr_assert_str_eq(header(&zipped, "ETag"), want, "%s", t);
    cr_assert_str_eq(header(&zipped, "Cache-Control"), plain_cache, "%s", t);
    cr_assert_str_eq(header(&zipped, "Content-Security-Policy"), plain_csp, "%s", t);

    char cond[256];
    snprintf(cond, sizeof cond, "Accept-Encoding: gzip\r\nIf-None-Match: %s\r\n", want);
    http_response same = get(port, t, cond);
    cr_assert_eq(same.status, 304, "%s: the gzip'd form's ETag", t);
    cr_assert_str_eq(header(&same, "ETag"), want, "%s", t);
    http_response_free(&same);
    snprintf(cond, sizeof cond, "Accept-Encoding: gzip\r\nIf-None-Match: %s\r\n", plain_etag);
    http_response other = get(port, t, cond);
    cr_assert_eq(other.status, 200, "%s: the plain form's ETag validates the plain form only", t);
    cr_assert_str_eq(header(&other, "Content-Encoding"), "gzip", "%s", t);
    http_response_free(&other);
    snprintf(cond, sizeof cond, "If-None-Match: %s\r\n", want);
    other = get(port, t, cond);
    cr_assert_eq(other.status, 200, "%s: the gzip'd form's ETag, asked plain", t);
    cr_assert_null(header(&other, "Content-Encoding"), "%s", t);
    http_response_free(&other);

    http_response head = request(port, "HEAD", t, "Accept-Encoding: gzip\r\n");
    char announced[32];
    snprintf(announced, sizeof announced, "%zu", zipped.body_len);
    cr_assert_str_eq(header(&head, "Content-Length"), announced, "%s", t);
    cr_assert_str_eq(header(&head, "Content-Encoding"), "gzip", "%s", t);
    cr_assert_eq(head.body_len, 0);
    http_response_free(&head);
#else
    cr_assert_null(header(&zipped, "Content-Encoding"), "built without zlib: %s plain", t);
    cr_assert_str_eq(header(&zipped, "ETag"), plain_etag, "%s", t);
#endif
    http_response_free(&zipped);
    http_response_free(&plain);
    free(targets[i]);
  }
}

/* A 304 announces no length but the one its 200 has (RFC 9110 8.6), sends
 * no body, and leaves a kept-alive connection ready for the next request:
 * the page and a script revalidated by GET and HEAD, then /healthz, all on
 * one connection. */
Test(agent_ui, not_modified_keeps_the_length_and_the_connection) {
  int port = start_local();
  http_response page = get(port, "/ui", NULL);
  char *js = asset_url(page.body, "/ui/ui.js?v=");
  http_response script = get(port, js, NULL);
  cr_assert(page.body_len > 0 && script.body_len > 0);
  const struct {
    const char *method, *target;
    const http_response *ok;
  } revalidated[] = {{"GET", "/ui", &page},
                     {"HEAD", "/ui", &page},
                     {"GET", js, &script},
                     {"GET", "/ui/ui.js", &script}};
  size_t n = sizeof revalidated / sizeof revalidated[0];
  char requests[4096] = "";
  for (size_t i = 0; i < n; i++) {
    size_t used = strlen(requests);
    snprintf(requests + used, sizeof requests - used,
             "%s %s HTTP/1.1\r\nHost: t\r\nIf-None-Match: %s\r\n\r\n", revalidated[i].method,
             revalidated[i].target, header(revalidated[i].ok, "ETag"));
  }
  size_t used = strlen(requests);
  snprintf(requests + used, sizeof requests - used,
           "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  int fd = http_connect("127.0.0.1", port);
  cr_assert_geq(fd, 0);
  cr_assert_eq(send(fd, requests, strlen(requests), MSG_NOSIGNAL), (ssize_t)strlen(requests));
  char *data;
  size_t len;
  cr_assert_eq(http_read_all(fd, &data, &len), 0, "no complete answer");
  close(fd);

  size_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    const char *start = data + pos, *end = strstr(start, "\r\n\r\n");
    cr_assert_not_null(end, "%s %s: no (complete) answer: %s", revalidated[i].method,
                       revalidated[i].target, start);
    char block[2048];
    snprintf(block, sizeof block, "%.*s", (int)(end + 2 - start), start);
    cr_assert_eq(strncmp(block, "HTTP/1.1 304 ", 13), 0, "%s %s: %.60s", revalidated[i].method,
                 revalidated[i].target, block);
    http_response got = {.headers = block};
    cr_assert_null(header(&got, "Transfer-Encoding"), "%s", block);
    const char *length = header(&got, "Content-Length");
    if (length)
      cr_assert_eq(strtoull(length, NULL, 10), revalidated[i].ok->body_len,
                   "%s %s: a 304 with Content-Length %s, its 200 has %zu bytes",
                   revalidated[i].method, revalidated[i].target, length,
                   revalidated[i].ok->body_len);
    pos = (size_t)(end + 4 - data); /* no body */
  }
  cr_assert_eq(strncmp(data + pos, "HTTP/1.1 200 ", 13), 0, "after the 304s: %.60s", data + pos);
  const char *body = strstr(data + pos, "\r\n\r\n");
  cr_assert(body && strcmp(body + 4, "ok\n") == 0, "after the 304s: %s", data + pos);
  free(data);
  free(js);
  http_response_free(&page);
  http_response_free(&script);
}

static cJSON *find_pool(cJSON *state, const char *name) {
  cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(state, "pools")) {
    if (strcmp(cJSON_GetObjectItem(p, "name")->valuestring, name) == 0)
      return p;
  }
  return NULL;
}

Test(agent_ui, state_and_blocks) {
  int port = start_local();
  gpupool_host_stream *other = gpupool_host_stream_create();
  void *a, *b, *c;
  cr_assert_eq(gpupool_malloc(pool, &a, 1 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(pool, &b, 3 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(pool, &c, 4 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_record_stream(pool, b, other), GPUPOOL_OK);
  gpupool_host_stream_enqueue(other);
  cr_assert_eq(gpupool_free(pool, b), GPUPOOL_OK); /* pending on `other` */
  cr_assert_eq(gpupool_free(pool, a), GPUPOOL_OK);
  gpupool_stats st;
  cr_assert_eq(gpupool_get_stats(pool, &st), GPUPOOL_OK);

  cJSON *state = http_get_json(port, "/ui/state.json?window=60");
  cr_assert_eq(json_number(state, "window_s"), 60);
  cJSON *links = cJSON_GetObjectItem(state, "links");
  cr_assert(cJSON_IsBool(cJSON_GetObjectItem(links, "oom")));
  cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(links, "torch")),
            "this build's /snapshot answers format=torch");
  cJSON *web = find_pool(state, "web");
  cr_assert_not_null(web);
  cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(web, "live")));
  cr_assert_eq(json_number(web, "allocated"), (double)st.allocated_bytes[GPUPOOL_STAT_ALL].current);
  cr_assert_eq(json_number(web, "reserved"), (double)st.reserved_bytes[GPUPOOL_STAT_ALL].current);
  cr_assert_eq(json_number(web, "largest_free"), (double)st.largest_free_block);
  cr_assert_eq(json_number(web, "pending_free_blocks"), 1);
  cJSON *series = cJSON_GetObjectItem(web, "series");
  int n = cJSON_GetArraySize(cJSON_GetObjectItem(series, "t"));
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(series, "reserved")), n);
  cJSON *nothing = find_pool(state, "nothing");
  cr_assert_not_null(nothing, "an empty pool is listed");
  cr_assert_eq(json_number(nothing, "reserved"), 0);
  cJSON *cupti = cJSON_GetObjectItem(state, "cupti");
  cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(cupti, "up")));
  cr_assert_str_eq(cJSON_GetObjectItem(cupti, "reason")->valuestring, "off");
  char target[64];
  snprintf(target, sizeof target, "/ui/blocks.json?pool=%d", (int)json_number(web, "id"));
  int web_id = (int)json_number(web, "id"), empty_id = (int)json_number(nothing, "id");
  cJSON_Delete(state);

  cJSON *blocks = http_get_json(port, target);
  cJSON *p = cJSON_GetObjectItem(blocks, "pool");
  cr_assert_str_eq(cJSON_GetObjectItem(p, "name")->valuestring, "web");
  int states[3] = {0}, seen = 0;
  double bytes = 0;
  cJSON *seg;
  cJSON_ArrayForEach(seg, cJSON_GetObjectItem(p, "segments")) {
    cJSON *bl = cJSON_GetObjectItem(seg, "blocks");
    int k = cJSON_GetArraySize(bl);
    cr_assert_eq(k % 6, 0, "six numbers a block");
    double off = 0;
    for (int i = 0; i < k; i += 6, seen++) {
      cr_assert_eq(cJSON_GetArrayItem(bl, i)->valuedouble, off, "blocks tile the segment");
      off += cJSON_GetArrayItem(bl, i + 1)->valuedouble;
      int s = cJSON_GetArrayItem(bl, i + 3)->valueint;
      cr_assert(s >= 0 && s <= 2);
      states[s]++;
      double age = cJSON_GetArrayItem(bl, i + 4)->valuedouble;
      if (s != 0) /* events are on (the agent's default): the age is known */
        cr_assert(age >= 0 && age < 600000, "age %g", age);
      else
        cr_assert_eq(age, -1);
    }
    cr_assert_eq(off, json_number(seg, "size"));
    bytes += json_number(seg, "size");
  }
  cr_assert_eq(bytes, (double)st.reserved_bytes[GPUPOOL_STAT_ALL].current);
  cr_assert_eq(states[1], 1, "one allocated block");
  cr_assert_eq(states[2], 1, "one pending block");
  cr_assert_geq(states[0], 1);
  cJSON_Delete(blocks);

  snprintf(target, sizeof target, "/ui/blocks.json?pool=%d", empty_id);
  blocks = http_get_json(port, target);
  cr_assert_eq(
      cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(blocks, "pool"), "segments")), 0,
      "an empty pool has no segments");
  cJSON_Delete(blocks);

  /* A pool destroyed: blocks.json says so with 200, state.json keeps it as
   * gone while its samples are in the window. */
  gpupool_destroy(empty);
  empty = NULL;
  snprintf(target, sizeof target, "/ui/blocks.json?pool=%d", empty_id);
  blocks = http_get_json(port, target);
  cr_assert(cJSON_IsNull(cJSON_GetObjectItem(blocks, "pool")));
  cJSON_Delete(blocks);
  state = http_get_json(port, "/ui/state.json");
  nothing = find_pool(state, "nothing");
  if (nothing) /* sampled before it went */
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(nothing, "live")));
  cJSON_Delete(state);
  (void)web_id;

  gpupool_host_stream_complete(other);
  cr_assert_eq(gpupool_free(pool, c), GPUPOOL_OK);
  gpupool_host_stream_destroy(other);
}

/* Text that is not UTF-8 is written in state.json and blocks.json with
 * U+FFFD for each byte that begins no character, as every other JSON output
 * of the agent writes it (/ui wrote '?'). Pool names are checked to be
 * UTF-8 when the pool is created, so the test writes the bytes into one
 * afterwards: what the writer does with whatever text reaches it. */
Test(agent_ui, text_that_is_not_utf8_gets_u_fffd) {
  static const char odd_name[] = "odd\xff\xc3(\xe2\x82\xac";
  static const char want[] = "odd\xef\xbf\xbd\xef\xbf\xbd(\xe2\x82\xac";
  gpupool *odd;
  gpupool_options o = {
      .name = "odd", .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64 << 20, .ignore_env = 1};
  cr_assert_eq(gpupool_create(&o, &odd), GPUPOOL_OK, "%s", gpupool_last_error());
  memcpy(odd->cfg.name, odd_name, sizeof odd_name);
  int port = start_local();
  cJSON *state = http_get_json(port, "/ui/state.json");
  cJSON *p = find_pool(state, want);
  cr_assert_not_null(p, "no pool named %s", want);
  char target[64];
  snprintf(target, sizeof target, "/ui/blocks.json?pool=%d", (int)json_number(p, "id"));
  cJSON_Delete(state);
  cJSON *blocks = http_get_json(port, target);
  cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(blocks, "pool"), "name")->valuestring,
                   want);
  cJSON_Delete(blocks);
  gpupool_agent_stop();
  gpupool_destroy(odd);
}

Test(agent_ui, bad_parameters) {
  int port = start_local();
  const char *bad[] = {"/ui/state.json?window=5",
                       "/ui/state.json?window=abc",
                       "/ui/state.json?window=99999",
                       "/ui/state.json?pool=1",
                       "/ui/state.json?window=60&window=60",
                       "/ui/blocks.json",
                       "/ui/blocks.json?pool=x",
                       "/ui/blocks.json?pool=1&x=2",
                       "/ui/blocks.json?window=10",
                       "/ui/blocks.json?pool=",
                       "/ui/blocks.json?pool=-1",
                       "/ui/blocks.json?pool=1234567890",
                       "/ui/blocks.json?pool=1&pool=1",
                       "/ui/blocks.json?pool=1&tag=x",
                       "/ui/state.json?window=3601",
                       "/ui/state.json?window=60&tags=1",
                       "/ui?pool",
                       "/ui?pool=",
                       "/ui?pool=a&pool=a",
                       "/ui?device",
                       "/ui?device=",
                       "/ui?device=x",
                       "/ui?device=-1",
                       "/ui?device=4096",
                       "/ui?pool=a&device=1&device=1",
                       "/ui/favicon.svg?v",
                       "/ui/favicon.svg?v=1&v=2",
                       "/ui/state.json?window=60%00",
                       "/ui/blocks.json?pool=1%00"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    http_response r = get(port, bad[i], NULL);
    cr_assert_eq(r.status, 400, "%s gave %d", bad[i], r.status);
    cr_assert_str_eq(header(&r, "Content-Type"), "text/plain; charset=utf-8");
    cr_assert(r.body_len > 0 && strchr(r.body, '\n') == r.body + r.body_len - 1, "one line: %s",
              r.body);
    http_response_free(&r);
  }
}

/* The page's and the assets' refusals carry their security headers too,
 * and a bad window is quoted in the reason. */
Test(agent_ui, error_answers_carry_the_security_headers) {
  int port = start_local();
  const char *refused[] = {"/ui?device=x", "/ui/favicon.svg?v=1&v=2", "/ui/nope.js",
                           "/ui/index.html"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    http_response r = get(port, refused[i], NULL);
    cr_expect_geq(r.status, 400, "%s gave %d", refused[i], r.status);
    const char *csp = header(&r, "Content-Security-Policy");
    cr_expect(csp && strstr(csp, "default-src 'none'"), "%s: CSP %s", refused[i],
              csp ? csp : "(none)");
    const char *nosniff = header(&r, "X-Content-Type-Options");
    cr_expect(nosniff && !strcmp(nosniff, "nosniff"), "%s: no nosniff", refused[i]);
    cr_expect_null(header(&r, "ETag"), "%s: an error answer has no ETag", refused[i]);
    http_response_free(&r);
  }
  http_response r = get(port, "/ui/state.json?window=abc", NULL);
  cr_expect_eq(r.status, 400);
  cr_expect(strstr(r.body, "bad window 'abc'"), "%s", r.body);
  http_response_free(&r);
  gpupool_agent_stop();
}

static int tag_of(cJSON *tags, const char *name) {
  int i = 0;
  cJSON *t;
  cJSON_ArrayForEach(t, tags) {
    if (strcmp(cJSON_GetObjectItem(t, "name")->valuestring, name) == 0)
      return i;
    i++;
  }
  return -1;
}

/* blocks.json names each tagged block's tag (an index into the pool's tag
 * table, which carries the bytes per tag as gpupool_get_tag_stats counts
 * them); untagged and free blocks have -1, a segment without tagged blocks
 * no block_tags at all. */
Test(agent_ui, tagged_blocks) {
  int port = start_local();
  void *w, *k, *u, *f;
  cr_assert_eq(gpupool_tag_push("weights"), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(pool, &w, 3 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_push("kv_cache"), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(pool, &k, 5 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(pool, &f, 7 << 20, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  cr_assert_eq(gpupool_tag_pop(), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(pool, f), GPUPOOL_OK);                     /* a free block: no tag */
  cr_assert_eq(gpupool_malloc(pool, &u, 600 << 10, NULL), GPUPOOL_OK); /* small, untagged */
  gpupool_tag_stat ts[GPUPOOL_TAG_MAX];
  int nts = gpupool_get_tag_stats(pool, ts, GPUPOOL_TAG_MAX);
  cr_assert_geq(nts, 2);

  cJSON *state = http_get_json(port, "/ui/state.json");
  char target[64];
  snprintf(target, sizeof target, "/ui/blocks.json?pool=%d",
           (int)json_number(find_pool(state, "web"), "id"));
  cJSON_Delete(state);
  cJSON *doc = http_get_json(port, target);
  cJSON *p = cJSON_GetObjectItem(doc, "pool");
  cJSON *tags = cJSON_GetObjectItem(p, "tags");
  cr_assert(cJSON_IsArray(tags), "the pool has a tag table");
  cr_assert_eq(cJSON_GetArraySize(tags), nts, "every tag of the process, in its order");
  for (int i = 0; i < nts; i++) {
    cJSON *t = cJSON_GetArrayItem(tags, i);
    cr_assert_str_eq(cJSON_GetObjectItem(t, "name")->valuestring, ts[i].tag);
    cr_assert_eq(json_number(t, "allocated"), (double)ts[i].allocated_bytes, "%s", ts[i].tag);
  }
  int wi = tag_of(tags, "weights"), ki = tag_of(tags, "kv_cache");
  cr_assert(wi >= 0 && ki >= 0 && wi != ki);
  cr_assert_eq(json_number(cJSON_GetArrayItem(tags, wi), "allocated"), 3 << 20);
  cr_assert_eq(json_number(cJSON_GetArrayItem(tags, ki), "allocated"), 5 << 20);
  int seen_w = 0, seen_k = 0, untagged_segments = 0;
  cJSON *seg;
  cJSON_ArrayForEach(seg, cJSON_GetObjectItem(p, "segments")) {
    cJSON *bl = cJSON_GetObjectItem(seg, "blocks");
    cJSON *bt = cJSON_GetObjectItem(seg, "block_tags");
    if (!bt) {
      untagged_segments++;
      continue;
    }
    cr_assert_eq(cJSON_GetArraySize(bt) * 6, cJSON_GetArraySize(bl), "a tag index per block");
    for (int i = 0; i < cJSON_GetArraySize(bt); i++) {
      int t = cJSON_GetArrayItem(bt, i)->valueint;
      int st = cJSON_GetArrayItem(bl, 6 * i + 3)->valueint;
      double size = cJSON_GetArrayItem(bl, 6 * i + 2)->valuedouble; /* requested */
      if (st == 0)
        cr_assert_eq(t, -1, "a free block has no tag");
      else if (size == 3 << 20) {
        cr_assert_eq(t, wi, "the weights block");
        seen_w++;
      } else if (size == 5 << 20) {
        cr_assert_eq(t, ki, "the kv_cache block");
        seen_k++;
      } else {
        cr_assert_eq(t, -1, "an untagged block of %g B", size);
      }
    }
  }
  cr_assert_eq(seen_w, 1);
  cr_assert_eq(seen_k, 1);
  cr_assert_geq(untagged_segments, 1, "the small segment holds only the untagged block");
  cJSON_Delete(doc);
  cr_assert_eq(gpupool_free(pool, w), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(pool, k), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(pool, u), GPUPOOL_OK);
}
