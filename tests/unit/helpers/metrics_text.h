/* Reading values back out of a Prometheus text exposition, for tests. */
#ifndef TEST_METRICS_TEXT_H
#define TEST_METRICS_TEXT_H

#include <stddef.h>

/* The value of the first sample named `name` (exactly) whose label block
 * contains every string of `labels` (a NULL-terminated list such as
 * {"pool=\"a\"", "source=\"cache\"", NULL}; NULL = any). 0 when found. */
int metrics_value(const char *text, const char *name, const char *const *labels, double *out);
/* How many samples are named `name` (with those labels). */
int metrics_count(const char *text, const char *name, const char *const *labels);

#endif
