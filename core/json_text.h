/* Text into cJSON documents. RFC 8259 wants JSON in UTF-8, and cJSON prints
 * a string's bytes as they are, escaping only '"', '\' and the control
 * characters: a file path, a host name or a message cut at the end of its
 * buffer that is not UTF-8 would make the whole document invalid. These
 * replace each byte that begins no valid UTF-8 character with U+FFFD, as
 * exporters/json_stream.h does for the documents written by hand; every
 * string of the caller's or the system's text goes into a document through
 * them (cJSON_AddStringToObject only for the library's own constants). */
#ifndef GPUPOOL_JSON_TEXT_H
#define GPUPOOL_JSON_TEXT_H

#include <cjson/cJSON.h>

/* A string item of text (NULL: ""); NULL when out of memory. */
cJSON *json_create_text(const char *text);
/* Adds key: text to object, as cJSON_AddStringToObject; NULL when out of
 * memory or object is NULL. */
cJSON *json_add_text(cJSON *object, const char *key, const char *text);

#endif
