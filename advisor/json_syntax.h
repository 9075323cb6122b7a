/* Whether a text is a JSON document, checked without allocating anything.
 * cJSON answers NULL both for malformed input and when it runs out of
 * memory, and accepts what RFC 8259 does not (raw control characters in
 * strings, bytes after the document): read_trace checks a document here
 * first, so that a parse that fails afterwards failed for want of memory.
 * What this accepts, cJSON accepts too (it is the stricter). */
#ifndef GPUPOOL_ADVISOR_JSON_SYNTAX_H
#define GPUPOOL_ADVISOR_JSON_SYNTAX_H

#include <stddef.h>

/* 1 when text[0, len) is one JSON value (RFC 8259) within cJSON's limits
 * (at most CJSON_NESTING_LIMIT arrays and objects nested, numbers of at most
 * 63 characters, \u escapes of whole characters: a surrogate only in a
 * pair), with nothing but white space after it (a second document, a NUL or
 * any other byte after the value is malformed, which cJSON does not check);
 * else 0, and *error_at is the offset of the first byte that is not JSON (a
 * raw control character inside a string included). */
int json_document_ok(const char *text, size_t len, size_t *error_at);

#endif
