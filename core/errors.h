#ifndef GPUPOOL_ERRORS_H
#define GPUPOOL_ERRORS_H

#include "gpupool/gpupool.h"

#define POOL_ERROR_MAX 1280 /* an OOM explains itself at length */

/* Records a one-line reason for gpupool_last_error() and returns s. */
gpupool_status pool_fail(gpupool_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* gpupool_last_error() is the reason for the last failure the caller saw:
 * a public call that succeeds leaves it as it was, even when it recovered
 * on its way from a failure of its own (a device allocation retried after
 * the cache was emptied, pages moved when none could be created, a
 * replay's OOMs). Such a call brackets its work with a scope:
 * pool_error_scope_enter, then pool_error_scope_leave(&s, st), which puts
 * the text of before the enter back when st is GPUPOOL_OK and keeps the
 * newest reason otherwise, and returns st. Scopes nest (one per call on the
 * stack, left in the reverse order); the text is copied only when a
 * pool_fail overwrites it inside a scope, so a call that fails nothing
 * copies nothing. */
typedef struct pool_error_scope {
  struct pool_error_scope *outer;
  int saved; /* text holds the reason of before the enter */
  char text[POOL_ERROR_MAX];
} pool_error_scope;
void pool_error_scope_enter(pool_error_scope *s);
gpupool_status pool_error_scope_leave(pool_error_scope *s, gpupool_status st);

#endif
