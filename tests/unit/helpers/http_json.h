/* A JSON answer of the agent, for Criterion tests. */
#ifndef TEST_HTTP_JSON_H
#define TEST_HTTP_JSON_H

#include <cjson/cJSON.h>

/* The document of GET target on 127.0.0.1:port, asserted to be a 200 with
 * Content-Type application/json and a JSON body; the caller deletes it. */
cJSON *http_get_json(int port, const char *target);
/* The number under key (case-sensitive) in object obj, asserted to be one. */
double json_number(const cJSON *obj, const char *key);

#endif
