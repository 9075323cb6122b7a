/* advisor/json_syntax: read_trace calls a failed cJSON parse of a document
 * this accepts "out of host memory", so it must accept nothing cJSON
 * refuses (else malformed input would be reported as the host's memory),
 * and it should accept the documents the agent writes. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/json_syntax.h"

static int cjson_ok(const char *s, size_t len) {
  const char *end;
  cJSON *doc = cJSON_ParseWithLengthOpts(s, len, &end, 0);
  cJSON_Delete(doc);
  return doc != NULL;
}

/* json_document_ok's verdict alone. */
static int document_ok(const char *s, size_t len) {
  size_t error_at;
  return json_document_ok(s, len, &error_at);
}

static void expect_verdict(const char *s, int want) {
  cr_expect_eq(document_ok(s, strlen(s)), want, "'%s': wanted %d", s, want);
  if (want)
    cr_expect(cjson_ok(s, strlen(s)), "'%s' accepted, but cJSON refuses it", s);
}

Test(advisor_json_syntax, values) {
  static const char *ok[] = {"{}",
                             "[]",
                             " \t\r\n[ ]",
                             "0",
                             "-0",
                             "-12.5e+3",
                             "1E-2",
                             "true",
                             "false",
                             "null",
                             "\"\"",
                             "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"",
                             "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}",
                             "[1,2] \t\r\n",
                             "\"\xff invalid UTF-8 is cJSON's to take\""};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
    expect_verdict(ok[i], 1);
  static const char *bad[] = {"",
                              " ",
                              "[",
                              "[1,]",
                              "[,1]",
                              "{\"a\"}",
                              "{\"a\":}",
                              "{\"a\":1,}",
                              "{1:2}",
                              "[01]",
                              "1.",
                              ".5",
                              "1e",
                              "+1",
                              "-",
                              "[0x10]",
                              "tru",
                              "nul",
                              "NaN",
                              "\"abc",
                              "\"\\x\"",
                              "\"\\u12\"",
                              "\"\\u12g4\"",
                              "\"\\ud800\"",
                              "\"\\ud800x\"",
                              "\"\\ud800\\u0041\"",
                              "\"\\udc00\"",
                              "\"tab\there\"",
                              "[1 2]",
                              "{\"a\":1 \"b\":2}",
                              "\xef\xbb\xbf{}",
                              "[1,2] trailing bytes",
                              "{} {}",
                              "1 2"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    expect_verdict(bad[i], 0);
  cr_expect(!document_ok("[1]", 2), "the length bounds the text");
  cr_expect(!document_ok("[1]\0", 4), "a NUL after the document is not white space");
}

/* error_at: the first byte that is not JSON. */
Test(advisor_json_syntax, error_at) {
  static const struct {
    const char *text;
    size_t error_at;
  } cases[] = {{"[1,]", 3}, {"{\"a\" 1}", 5}, {"[1] x", 4}, {"\"a\tb\"", 2},
               {"[1,2", 4}, {"", 0},          {"nul", 0},   {"[0x1]", 2}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    size_t at = SIZE_MAX;
    cr_expect(!json_document_ok(cases[i].text, strlen(cases[i].text), &at), "'%s' accepted",
              cases[i].text);
    cr_expect_eq(at, cases[i].error_at, "'%s': error at %zu, wanted %zu", cases[i].text, at,
                 cases[i].error_at);
  }
}

/* cJSON's limits: CJSON_NESTING_LIMIT nested arrays and objects, numbers of
 * at most 63 characters. */
Test(advisor_json_syntax, cjson_limits) {
  size_t depth = CJSON_NESTING_LIMIT + 1;
  char *s = malloc(2 * depth + 1);
  cr_assert_not_null(s);
  for (size_t d = CJSON_NESTING_LIMIT; d <= depth; d++) {
    memset(s, '[', d);
    memset(s + d, ']', d);
    s[2 * d] = 0;
    int want = d <= CJSON_NESTING_LIMIT;
    cr_expect_eq(document_ok(s, 2 * d), want, "%zu nested arrays", d);
    cr_expect_eq(cjson_ok(s, 2 * d), want, "%zu nested arrays: cJSON's limit differs", d);
  }
  free(s);
  /* cJSON 1.7.15 reads a number through a 64-byte buffer: longer ones are
   * refused here (other versions may take them) */
  char num[80];
  for (size_t digits = 62; digits <= 64; digits++) {
    num[0] = '[';
    memset(num + 1, '7', digits);
    strcpy(num + 1 + digits, "]");
    expect_verdict(num, digits <= 63);
  }
}

/* Random corruptions of a /trace-like document: whatever this accepts,
 * cJSON parses. */
Test(advisor_json_syntax, accepts_nothing_cjson_refuses) {
  static const char doc[] =
      "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":1000002,"
      "\"args\":{\"name\":\"pool p (host, bfc)\"}},{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":1,"
      "\"tid\":1000002,\"ts\":1.5,\"id\":\"0x10\",\"args\":{\"requested\":-4096e0,"
      "\"stream\":\"\\u0030x0\",\"deferred\":[true,false,null]}}],\"displayTimeUnit\":\"ns\"}";
  size_t len = sizeof doc - 1;
  cr_assert(document_ok(doc, len));
  static const char alphabet[] = "{}[],:\"\\/-+.eE0123456789abfnrtuxd \t\n\x01\xff";
  char buf[sizeof doc];
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  long accepted = 0;
  for (int round = 0; round < 200000; round++) {
    memcpy(buf, doc, len);
    for (int k = 0; k < 1 + round % 3; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      buf[x % len] = alphabet[(x >> 32) % (sizeof alphabet - 1)];
    }
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t n = round % 4 ? len : x % len; /* some cut short too */
    if (document_ok(buf, n)) {
      accepted++;
      cr_assert(cjson_ok(buf, n), "accepted, but cJSON refuses: %.*s", (int)n, buf);
    }
  }
  cr_expect_gt(accepted, 1000, "too few corruptions still parse: the test proves little");
}
