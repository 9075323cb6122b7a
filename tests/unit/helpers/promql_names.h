/* The metric names a PromQL expression selects, found with a small
 * tokenizer: identifiers that are not functions, keywords, label names
 * (inside {...}, by/without/on/ignoring/group_left/group_right lists),
 * numbers, durations or template variables ($name). Good enough for the
 * expressions of dashboards and rules; not a PromQL parser. */
#ifndef GPUPOOL_TEST_PROMQL_NAMES_H
#define GPUPOOL_TEST_PROMQL_NAMES_H

#include <stddef.h>

#define PROMQL_NAME_MAX 160

/* Calls fn for each metric name in expr, in order (repeats included).
 * Returns the number of names, or -1 when the expression is malformed
 * (unbalanced brackets or an unterminated string). */
int promql_metric_names(const char *expr, void (*fn)(void *arg, const char *name), void *arg);

/* Calls fn with the text inside each range selector [...] of expr
 * (durations such as "5m" or "$__rate_interval"). Returns how many. */
int promql_ranges(const char *expr, void (*fn)(void *arg, const char *range), void *arg);

#endif
