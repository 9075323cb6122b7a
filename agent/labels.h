/* Constant labels ("name=value;name=value") the user adds to every series,
 * and the checks every label name and value of the agent goes through. */
#ifndef GPUPOOL_LABELS_H
#define GPUPOOL_LABELS_H

#include <stddef.h>

#define LABELS_MAX      16
#define LABEL_NAME_MAX  64
#define LABEL_VALUE_MAX 256

typedef struct agent_labels {
  size_t n;
  char name[LABELS_MAX][LABEL_NAME_MAX];
  char value[LABELS_MAX][LABEL_VALUE_MAX];
} agent_labels;

/* Parses "name=value;name=value" (NULL or "" = no labels). Names must match
 * [a-zA-Z_][a-zA-Z0-9_]*, not start with "__", be unique and not be one the
 * agent or the scraper sets (job, instance, pod, namespace, hostname, device,
 * UUID, pool, ...); values must be non-empty UTF-8. 0 or -1 with a reason. */
int labels_parse(const char *text, agent_labels *out, char *err, size_t errlen);

int label_name_valid(const char *name);
/* Names reserved for the scraper and for the agent's own labels. */
int label_name_reserved(const char *name);
int utf8_valid(const char *s);
/* Copies s into out (outlen > 0), replacing bytes that are not valid UTF-8
 * with '?', so that a label value never breaks a whole scrape. */
void utf8_sanitize(const char *s, char *out, size_t outlen);

#endif
