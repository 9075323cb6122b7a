/* Status strings and the per-thread reason for the last failure. */
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "core/c_numeric.h"

static _Thread_local char last_error[POOL_ERROR_MAX];
static _Thread_local pool_error_scope *innermost; /* of this thread's open scopes */

const char *gpupool_status_string(gpupool_status s) {
  switch (s) {
  case GPUPOOL_OK:
    return "success";
  case GPUPOOL_ERR_OOM:
    return "out of device memory";
  case GPUPOOL_ERR_INVALID:
    return "invalid argument";
  case GPUPOOL_ERR_BACKEND:
    return "backend or system error";
  case GPUPOOL_ERR_UNSUPPORTED:
    return "not supported";
  case GPUPOOL_ERR_HOST_OOM:
    return "out of host memory";
  }
  return "unknown status";
}

const char *gpupool_last_error(void) {
  return last_error;
}

/* Before last_error is overwritten: every open scope that has not saved the
 * text yet saves it now. A scope that has saved it saved it before any
 * scope inside it was entered, so the walk stops there. */
static void save_for_scopes(void) {
  for (pool_error_scope *s = innermost; s && !s->saved; s = s->outer) {
    memcpy(s->text, last_error, strlen(last_error) + 1);
    s->saved = 1;
  }
}

gpupool_status pool_fail(gpupool_status s, const char *fmt, ...) {
  /* Formatted apart first: an argument may be gpupool_last_error() itself
   * (a reason that quotes the one before it), which vsnprintf into
   * last_error would overwrite as it reads it. */
  char text[POOL_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  locale_t old = c_numeric_enter();
  vsnprintf(text, sizeof text, fmt, ap);
  c_numeric_leave(old);
  va_end(ap);
  /* One line, whatever the caller's text quotes (a path with a newline, an
   * escape sequence in a name): control characters become '?'. */
  for (char *c = text; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f)
      *c = '?';
  save_for_scopes();
  memcpy(last_error, text, strlen(text) + 1);
  return s;
}

void pool_error_scope_enter(pool_error_scope *s) {
  s->outer = innermost;
  s->saved = 0;
  innermost = s;
}

gpupool_status pool_error_scope_leave(pool_error_scope *s, gpupool_status st) {
  innermost = s->outer;
  if (st == GPUPOOL_OK && s->saved)
    memcpy(last_error, s->text, strlen(s->text) + 1);
  return st;
}
