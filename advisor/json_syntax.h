/* Whether a text is a JSON document, checked without allocating anything.
 * cJSON answers NULL both for malformed input and when it runs out of
 * memory: after a failed parse, read_trace asks this to tell the two apart.
 * What this accepts, cJSON accepts too (it is the stricter), so a document
 * that passes here failed in cJSON for want of memory. */
#ifndef GPUPOOL_ADVISOR_JSON_SYNTAX_H
#define GPUPOOL_ADVISOR_JSON_SYNTAX_H

#include <stddef.h>

/* 1 when text[0, len) begins with one JSON value (RFC 8259; what follows it
 * is not read, as cJSON_ParseWithLengthOpts does not without
 * require_null_terminated) within cJSON's limits: at most
 * CJSON_NESTING_LIMIT arrays and objects nested, numbers of at most 63
 * characters, \u escapes of whole characters (a surrogate only in a pair);
 * else 0. */
int json_syntax_ok(const char *text, size_t len);

#endif
