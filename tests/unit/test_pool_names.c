/* Pool names (issue 19): gpupool_create refuses a name that is not UTF-8
 * text (an invalid byte, a character cut short, a surrogate, an overlong
 * form, a control character, too long) with GPUPOOL_ERR_INVALID and a
 * one-line reason, from every way a name comes in (options, tunables,
 * GPUPOOL_CONF); and every endpoint of the agent (/metrics, /trace,
 * /snapshot, /) stays valid UTF-8, parses (JSON) and carries the accepted
 * names, quotes, backslashes and markup included, unchanged. UTF-8 is
 * checked here with iconv, not with the library's own code. */
#include <criterion/criterion.h>
#include <errno.h>
#include <iconv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "gpupool/agent.h"
#include "gpupool/gpupool.h"
#include "helpers/http_client.h"

static void clean_env(void) {
  unsetenv("GPUPOOL_CONF");
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("LOCAL_RANK");
}

static void stop_agent(void) {
  gpupool_agent_stop();
}

TestSuite(pool_names, .init = clean_env, .fini = stop_agent);

static const struct {
  const char *name, *what;
  int utf8; /* valid UTF-8 all the same (refused for a control character, or empty) */
} bad[] = {
    {"\xff", "the byte 0xff", 0},
    {"ab\xc3", "a two-byte character cut short", 0},
    {"\xe6\xbc", "a three-byte character cut short", 0},
    {"\xed\xa0\x80", "a UTF-16 surrogate (U+D800)", 0},
    {"x\xc0\xaf", "an overlong '/'", 0},
    {"\xf4\x90\x80\x80", "beyond U+10FFFF", 0},
    {"\x80", "a lone continuation byte", 0},
    {"a\nb", "a newline", 1},
    {"tab\there", "a tab", 1},
    {"del\x7f", "DEL", 1},
    {"c1\xc2\x85", "a C1 control (U+0085)", 1},
    {"", "empty", 1},
};

/* Valid UTF-8 per iconv (glibc's decoder, independent of gpupool's). */
static int utf8_ok(const char *s, size_t n) {
  iconv_t cd = iconv_open("UTF-32LE", "UTF-8");
  cr_assert_neq(cd, (iconv_t)-1, "iconv_open: %s", strerror(errno));
  size_t cap = 4 * n + 4;
  char *out = malloc(cap), *op = out, *ip = (char *)s;
  size_t il = n, ol = cap;
  size_t r = iconv(cd, &ip, &il, &op, &ol);
  free(out);
  iconv_close(cd);
  return r != (size_t)-1 && il == 0;
}

Test(pool_names, the_checker_of_this_test_rejects_what_it_must) {
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_assert_eq(utf8_ok(bad[i].name, strlen(bad[i].name)), bad[i].utf8, "iconv on %s",
                 bad[i].what);
  static const char text[] = "mod\xc3\xa8le \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\x99\x82";
  cr_assert(utf8_ok(text, sizeof text - 1));
}

static gpupool_status create_named(const char *name, const char *tunables, gpupool **out) {
  gpupool_options o = {.name = name,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = 64 << 20,
                       .tunables = tunables,
                       .ignore_env = 1};
  return gpupool_create(&o, out);
}

Test(pool_names, create_refuses_every_name_that_is_not_utf8_text) {
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupool *p = (gpupool *)&p;
    cr_assert_eq(create_named(bad[i].name, NULL, &p), GPUPOOL_ERR_INVALID, "%s accepted",
                 bad[i].what);
    cr_assert(p == NULL || p == (gpupool *)&p, "%s: a pool came back", bad[i].what);
    const char *e = gpupool_last_error();
    if (bad[i].name[0])
      cr_assert(strstr(e, "must be UTF-8 text without control characters"), "%s: %s", bad[i].what,
                e);
    else
      cr_assert(strstr(e, "1 to 127 bytes"), "%s: %s", bad[i].what, e);
    cr_assert_null(strchr(e, '\n'), "one line: %s", e);
    cr_assert(utf8_ok(e, strlen(e)), "%s: the message itself is not UTF-8", bad[i].what);
  }
  gpupool *p;
  cr_assert_eq(create_named("\xff", NULL, &p), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "byte 0xff at offset 0"), "%s", gpupool_last_error());
  cr_assert_eq(create_named("ab\xc3", NULL, &p), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "byte 0xc3 at offset 2"), "%s", gpupool_last_error());
}

Test(pool_names, the_length_limit_counts_bytes) {
  char name[200];
  /* 63 two-byte characters = 126 bytes, plus one byte: 127, accepted. */
  size_t n = 0;
  for (int i = 0; i < 63; i++)
    n += (size_t)sprintf(name + n, "\xc3\xa9");
  strcpy(name + n, "x");
  gpupool *p;
  cr_assert_eq(create_named(name, NULL, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_str_eq(gpupool_name(p), name);
  gpupool_destroy(p);
  strcpy(name + n, "\xc3\xa9"); /* 128 bytes */
  cr_assert_eq(create_named(name, NULL, &p), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "1 to 127 bytes, not 128"), "%s", gpupool_last_error());
}

Test(pool_names, tunables_and_gpupool_conf_follow_the_same_rule) {
  gpupool *p;
  cr_assert_eq(create_named("ok", "name:\xed\xa0\x80", &p), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "UTF-8"), "%s", gpupool_last_error());
  cr_assert_eq(create_named("ok", "name:caf\xc3\xa9", &p), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_str_eq(gpupool_name(p), "caf\xc3\xa9");
  gpupool_destroy(p);

  setenv("GPUPOOL_CONF", "backend:host,host_capacity_mb:64,name:x\xff", 1);
  cr_assert_eq(gpupool_create(NULL, &p), GPUPOOL_ERR_INVALID);
  cr_assert(strstr(gpupool_last_error(), "byte 0xff at offset 1"), "%s", gpupool_last_error());
  unsetenv("GPUPOOL_CONF");
}

/* Names the endpoints must carry unchanged: non-ASCII text, and the
 * characters each format escapes (JSON and label quotes, backslash, HTML
 * markup). */
static const char *const good[] = {
    "mod\xc3\xa8le",
    "\xe6\xa8\xa1\xe5\x9e\x8b-\xf0\x9f\x99\x82",
    "q\"uote\\back",
    "<b>&amp;</b>",
};
#define NGOOD (sizeof good / sizeof good[0])

static char *get(int port, const char *target, http_response *r) {
  cr_assert_eq(http_request("127.0.0.1", port, "GET", target, NULL, r), 0, "GET %s", target);
  cr_assert_eq(r->status, 200, "GET %s: %d %s", target, r->status, r->body);
  cr_assert(utf8_ok(r->body, r->body_len), "GET %s: the body is not UTF-8", target);
  return r->body;
}

/* A JSON string's name values anywhere in the document. */
static int json_has_string(const cJSON *j, const char *key, const char *value) {
  for (const cJSON *c = j ? j->child : NULL; c; c = c->next) {
    if (cJSON_IsString(c) && c->string && strcmp(c->string, key) == 0 &&
        strcmp(c->valuestring, value) == 0)
      return 1;
    if (json_has_string(c, key, value))
      return 1;
  }
  return 0;
}

/* Escapes a label value as the Prometheus text format does. */
static void prom_label(const char *s, char *out, size_t n) {
  size_t k = 0;
  for (; *s && k + 3 < n; s++) {
    if (*s == '"' || *s == '\\')
      out[k++] = '\\';
    out[k++] = *s;
  }
  out[k] = '\0';
}

static void url_encode(const char *s, char *out, size_t n) {
  size_t k = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && k + 4 < n; p++)
    k += (size_t)snprintf(out + k, n - k, "%%%02X", *p);
  out[k] = '\0';
}

Test(pool_names, every_endpoint_is_valid_utf8_with_the_names_unchanged) {
  gpupool *pools[NGOOD];
  for (size_t i = 0; i < NGOOD; i++) {
    cr_assert_eq(create_named(good[i], NULL, &pools[i]), GPUPOOL_OK, "%s", gpupool_last_error());
    void *x;
    cr_assert_eq(gpupool_malloc(pools[i], &x, 4096, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(pools[i], x), GPUPOOL_OK);
  }
  /* Refused names leave nothing behind in the registry. */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupool *p;
    cr_assert_eq(create_named(bad[i].name, NULL, &p), GPUPOOL_ERR_INVALID);
  }
  gpupool_agent_options ao = {
      .listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF, .trace_events = 1024, .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&ao), GPUPOOL_OK, "%s", gpupool_last_error());
  int port = gpupool_agent_port();

  http_response r;
  char *body = get(port, "/metrics", &r);
  for (size_t i = 0; i < NGOOD; i++) {
    char label[256], want[300];
    prom_label(good[i], label, sizeof label);
    snprintf(want, sizeof want, "pool=\"%s\"", label);
    cr_assert(strstr(body, want), "/metrics has no %s", want);
  }
  cr_assert_null(strstr(body, "pool=\"?\""), "/metrics had to sanitise a name");
  http_response_free(&r);

  body = get(port, "/snapshot", &r);
  cJSON *j = cJSON_Parse(body);
  cr_assert_not_null(j, "/snapshot is not JSON");
  for (size_t i = 0; i < NGOOD; i++)
    cr_assert(json_has_string(j, "name", good[i]), "/snapshot lacks pool %s", good[i]);
  cJSON_Delete(j);
  http_response_free(&r);

  for (size_t i = 0; i < NGOOD; i++) {
    char enc[512], target[600];
    url_encode(good[i], enc, sizeof enc);
    snprintf(target, sizeof target, "/snapshot?pool=%s", enc);
    body = get(port, target, &r);
    j = cJSON_Parse(body);
    cr_assert_not_null(j, "%s is not JSON", target);
    cr_assert(json_has_string(j, "name", good[i]), "%s lacks its pool", target);
    cJSON_Delete(j);
    http_response_free(&r);
  }

  body = get(port, "/trace", &r);
  j = cJSON_Parse(body);
  cr_assert_not_null(j, "/trace is not JSON");
  char *flat = cJSON_PrintUnformatted(j); /* names as decoded strings, re-encoded */
  for (size_t i = 0; i < NGOOD; i++) {
    cJSON *str = cJSON_CreateString(good[i]);
    char *esc = cJSON_PrintUnformatted(str);
    cJSON_Delete(str);
    cr_assert_not_null(esc);
    esc[strlen(esc) - 1] = '\0'; /* the name's JSON text without its closing quote */
    cr_assert(strstr(flat, esc + 1), "/trace lacks pool %s", good[i]);
    free(esc);
  }
  free(flat);
  cJSON_Delete(j);
  http_response_free(&r);

  body = get(port, "/", &r);
  cr_assert(strstr(body, "mod\xc3\xa8le"), "/ lacks a non-ASCII name");
  cr_assert(strstr(body, "&lt;b&gt;&amp;amp;&lt;/b&gt;"), "/ does not escape markup in a name");
  cr_assert_null(strstr(body, "<b>&amp;</b>"), "/ shows markup from a name raw");
  http_response_free(&r);

  gpupool_agent_stop();
  for (size_t i = 0; i < NGOOD; i++)
    gpupool_destroy(pools[i]);
}
