/* Test helpers for the trace and snapshot writers: query arguments built from
 * "key=value" strings, reading a whole trace stream in chunks of a chosen
 * size, and a strict check of the Chrome Trace Event Format rules the
 * writer promises (docs/trace.md). */
#ifndef GPUPOOL_TEST_TRACE_CHECK_H
#define GPUPOOL_TEST_TRACE_CHECK_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "agent/endpoint.h"
#include "agent/trace_query.h"

/* Query parameters for endpoint_args: pairs[0..n) of "key=value". */
typedef struct test_args {
  const char *const *pairs;
  size_t n;
  char key[128], value[512];
} test_args;
/* An endpoint_args reading from ta (which must outlive it). */
endpoint_args test_args_make(test_args *ta, const char *const *pairs, size_t n);

/* The whole document of a trace_stream opened with q (NULL: no filter),
 * read `chunk` bytes at a time; malloc'd and NUL-terminated, NULL on error. */
char *trace_read_all(const trace_query *q, size_t chunk, size_t *len);
/* The same through trace_query_parse of "key=value" pairs; NULL if refused. */
char *trace_read_query(const char *const *pairs, size_t n, size_t chunk);

/* Checks the document against the format rules; 0 if it follows them, -1
 * with the first violation in why. */
int trace_check_format(const cJSON *root, char *why, size_t whylen);
/* Parses doc (freed) and checks its format, failing the current test where
 * it was not read, is not JSON or breaks a rule; the caller deletes the tree. */
cJSON *trace_parse_checked(char *doc);

/* Helpers over a parsed trace. */
const cJSON *trace_events(const cJSON *root);
/* Number of events with this ph and (if name is not NULL) whose name
 * contains `name`. */
int trace_count(const cJSON *root, const char *ph, const char *name);
double trace_other_number(const cJSON *root, const char *key);

#endif
