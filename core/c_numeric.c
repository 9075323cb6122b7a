#include "c_numeric.h"

#include <pthread.h>
#include <stdlib.h>

/* Made once, never freed: uselocale() may hold it on any thread. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void make_c_locale(void) {
  c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

static locale_t the_c_locale(void) {
  pthread_once(&c_locale_once, make_c_locale);
  return c_locale;
}

locale_t c_numeric_enter(void) {
  locale_t c = the_c_locale();
  /* Without the object (newlocale failed: out of memory) the program's
   * locale stays; (locale_t)0 tells c_numeric_leave there is nothing to undo. */
  return c ? uselocale(c) : (locale_t)0;
}

void c_numeric_leave(locale_t old) {
  if (old)
    uselocale(old);
}

double c_strtod(const char *s, char **end) {
  locale_t c = the_c_locale();
  return c ? strtod_l(s, end, c) : strtod(s, end);
}
