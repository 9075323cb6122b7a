/* core/json_text: text that need not be UTF-8 goes into cJSON documents as
 * valid UTF-8 (RFC 8259), each byte that begins no character replaced by
 * U+FFFD, control characters escaped by cJSON; valid text unchanged. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <string.h>

#include "core/json_text.h"

/* The document {"k": text} as printed. */
static char *printed(const char *text) {
  cJSON *o = cJSON_CreateObject();
  cr_assert_not_null(json_add_text(o, "k", text));
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  cr_assert_not_null(s);
  return s;
}

Test(json_text, invalid_bytes_become_replacement_characters) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"plain/path.json", "{\"k\":\"plain/path.json\"}"},
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
       "{\"k\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}"},
      {"a\xff"
       "b",
       "{\"k\":\"a\xef\xbf\xbd"
       "b\"}"},                                             /* not a lead byte */
      {"\x80", "{\"k\":\"\xef\xbf\xbd\"}"},                 /* a stray continuation */
      {"\xc0\xaf", "{\"k\":\"\xef\xbf\xbd\xef\xbf\xbd\"}"}, /* overlong '/' */
      {"\xed\xa0\x80", "{\"k\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"}"}, /* a surrogate */
      {"\xf4\x90\x80\x80", "{\"k\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"}"},
      {"cut \xe2\x82", "{\"k\":\"cut \xef\xbf\xbd\xef\xbf\xbd\"}"}, /* a character cut short */
      {"tab\tnl\nq\"bs\\\x01\x1f\x7f", "{\"k\":\"tab\\tnl\\nq\\\"bs\\\\\\u0001\\u001f\x7f\"}"},
      {NULL, "{\"k\":\"\"}"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *s = printed(cases[i].in);
    cr_expect_str_eq(s, cases[i].out, "case %zu", i);
    cJSON_free(s);
  }
  cJSON *item = json_create_text("x\xfey");
  cr_assert(cJSON_IsString(item));
  cr_expect_str_eq(item->valuestring, "x\xef\xbf\xbdy");
  cJSON_Delete(item);
  cr_expect_null(json_add_text(NULL, "k", "v"));
}
