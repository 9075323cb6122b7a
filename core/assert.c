#include "assert.h"

#ifndef NDEBUG
#include <stdio.h>
#include <stdlib.h>

void gp_assert_fail(const char *cond, const char *file, int line, const char *func) {
  fprintf(stderr, "gpupool: internal assertion failed: %s (%s:%d, %s)\n", cond, file, line, func);
  abort();
}
#endif
