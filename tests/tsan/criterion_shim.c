/* The runner of the TSan harness (see criterion/criterion.h here). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "criterion/criterion.h"

static crs_test *tests, **tail = &tests;
static jmp_buf escape;
static pthread_t runner;
static int failed_checks;
static int escaped; /* how the last test left: 1 a failed assertion, 2 a skip */

void crs_register(crs_test *t) {
  *tail = t;
  tail = &t->next;
}

static void vreport(const char *what, const char *file, int line, const char *expr, const char *fmt,
                    va_list ap) {
  fprintf(stderr, "%s:%d: %s: %s", file, line, what, expr);
  if (fmt[2]) /* ": " and a message */
    vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void crs_check(int ok, int fatal, const char *file, int line, const char *expr, const char *fmt,
               ...) {
  if (ok)
    return;
  va_list ap;
  va_start(ap, fmt);
  vreport(fatal ? "assertion failed" : "expectation failed", file, line, expr, fmt, ap);
  va_end(ap);
  failed_checks++;
  if (!fatal)
    return;
  if (!pthread_equal(pthread_self(), runner))
    exit(1); /* cannot unwind another thread to the runner */
  escaped = 1;
  longjmp(escape, 1);
}

void crs_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap); /* "skipped: " and the reason */
  fputc('\n', stderr);
  va_end(ap);
  escaped = 2;
  longjmp(escape, 1);
}

void crs_log(const char *level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%s] ", level);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* One test: 0 ran to its end or failed an assertion, 2 skipped. setjmp is
 * alone in this function, so that no local variable of the caller can be
 * clobbered by the longjmp (-Wclobbered), and t is only read after it. */
static int run_one(crs_test *const t) {
  if (setjmp(escape) == 0) {
    if (t->init)
      t->init();
    t->fn();
    escaped = 0;
  }
  if (t->fini)
    t->fini();
  return escaped;
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  runner = pthread_self();
  int run = 0, passed = 0, failed = 0, skipped = 0;
  for (crs_test *t = tests; t; t = t->next) {
    if (t->disabled) {
      skipped++;
      continue;
    }
    run++;
    int before = failed_checks;
    fprintf(stderr, "[RUN ] %s::%s\n", t->suite, t->name);
    if (run_one(t) == 2) {
      skipped++;
    } else if (failed_checks > before) {
      failed++;
      fprintf(stderr, "[FAIL] %s::%s\n", t->suite, t->name);
    } else {
      passed++;
      fprintf(stderr, "[ OK ] %s::%s\n", t->suite, t->name);
    }
  }
  printf("Synthesis: Tested: %d | Passing: %d | Failing: %d | Skipped: %d\n", run, passed, failed,
         skipped);
  return failed ? 1 : 0;
}
