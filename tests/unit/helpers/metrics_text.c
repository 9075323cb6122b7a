#include "metrics_text.h"

#include <stdlib.h>
#include <string.h>

/* Calls back for each matching sample line; stops when fn returns nonzero. */
static int each_match(const char *text, const char *name, const char *const *labels,
                      int (*fn)(const char *value, void *arg), void *arg) {
  size_t nlen = strlen(name);
  for (const char *line = text; line && *line;) {
    const char *eol = strchr(line, '\n');
    size_t llen = eol ? (size_t)(eol - line) : strlen(line);
    if (line[0] != '#' && llen > nlen && strncmp(line, name, nlen) == 0 &&
        (line[nlen] == '{' || line[nlen] == ' ')) {
      const char *value = NULL;
      int ok = 1;
      if (line[nlen] == '{') {
        const char *close = line + nlen;
        /* the label block ends at the '}' that is followed by a space */
        while (close < line + llen && !(close[0] == '}' && close[1] == ' '))
          close++;
        value = close + 2;
        for (const char *const *l = labels; l && *l && ok; l++) {
          const char *hit = strstr(line + nlen, *l);
          ok = hit && hit < close;
        }
      } else {
        value = line + nlen + 1;
        ok = !labels || !labels[0];
      }
      if (ok && fn(value, arg))
        return 1;
    }
    line = eol ? eol + 1 : NULL;
  }
  return 0;
}

static int take_value(const char *value, void *arg) {
  *(double *)arg = strtod(value, NULL);
  return 1;
}

static int count_one(const char *value, void *arg) {
  (void)value;
  (*(int *)arg)++;
  return 0;
}

int metrics_value(const char *text, const char *name, const char *const *labels, double *out) {
  return each_match(text, name, labels, take_value, out) ? 0 : -1;
}

int metrics_count(const char *text, const char *name, const char *const *labels) {
  int n = 0;
  each_match(text, name, labels, count_one, &n);
  return n;
}
