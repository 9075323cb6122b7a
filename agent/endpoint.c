#include "endpoint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void endpoint_bad_request(endpoint_body *out, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  for (char *p = line; *p; p++) /* one line, whatever went into it */
    if (*p == '\n' || *p == '\r')
      *p = ' ';
  memset(out, 0, sizeof *out);
  out->status = 400;
  out->content_type = "text/plain; charset=utf-8";
  size_t n = strlen(line);
  out->data = malloc(n + 2);
  if (out->data) {
    memcpy(out->data, line, n);
    out->data[n] = '\n';
    out->data[n + 1] = '\0';
    out->len = n + 1;
  }
}
