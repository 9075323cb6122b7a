#include "http_json.h"

#include <criterion/criterion.h>
#include <string.h>

#include "http_client.h"

cJSON *http_get_json(int port, const char *target) {
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, "GET", target, NULL, &r), 0,
               "GET %s: no complete answer", target);
  cr_assert_eq(r.status, 200, "GET %s: %d %s", target, r.status, r.body);
  char buf[128];
  const char *type = http_header(&r, "Content-Type", buf, sizeof buf);
  cr_assert(type && strcmp(type, "application/json") == 0, "GET %s: Content-Type %s", target,
            type ? type : "(none)");
  cJSON *doc = cJSON_Parse(r.body);
  cr_assert_not_null(doc, "GET %s: not JSON: %.200s", target, r.body);
  http_response_free(&r);
  return doc;
}

double json_number(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  cr_assert(cJSON_IsNumber(v), "%s is not a number", key);
  return v->valuedouble;
}
