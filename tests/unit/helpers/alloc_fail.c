#include "alloc_fail.h"

#include <stddef.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);

/* The allocation that fails: the n-th from when it is armed, 0 when none is
 * armed; allocs_seen counts the allocations since. */
static long fail_at, allocs_seen;

static int should_fail(void) {
  return fail_at && ++allocs_seen == fail_at;
}

void *__wrap_malloc(size_t size) {
  return should_fail() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size) {
  return should_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size) {
  return should_fail() ? NULL : __real_realloc(p, size);
}

void alloc_fail_arm(long n) {
  allocs_seen = 0;
  fail_at = n;
}

int alloc_fail_disarm(void) {
  int hit = fail_at && allocs_seen >= fail_at;
  fail_at = 0;
  return hit;
}
