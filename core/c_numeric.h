/* Numbers written and read with '.' as the decimal point whatever locale
 * the host program set (setlocale(LC_ALL, "") under de_DE gives ','):
 * every text gpupool produces or parses (OOM messages, the advisor's table
 * and CSV, configuration lines, query parameters) is the same everywhere. */
#ifndef GPUPOOL_C_NUMERIC_H
#define GPUPOOL_C_NUMERIC_H

#include <locale.h>

/* Switches the calling thread to the "C" numeric locale; returns what
 * c_numeric_leave() restores. Brackets a stretch of printf calls. */
locale_t c_numeric_enter(void);
void c_numeric_leave(locale_t old);

/* strtod in the "C" locale. */
double c_strtod(const char *s, char **end);

#endif
