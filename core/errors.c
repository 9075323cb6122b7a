/* Status strings and the per-thread reason for the last failure. */
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include "core/c_numeric.h"

static _Thread_local char last_error[1280]; /* an OOM explains itself at length */

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

gpupool_status pool_fail(gpupool_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  locale_t old = c_numeric_enter();
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  c_numeric_leave(old);
  va_end(ap);
  return s;
}

void pool_clear_error(void) {
  last_error[0] = '\0';
}
