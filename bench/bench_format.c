/* Number formatting shared by the benchmark reports. */
#include <stdio.h>
#include <string.h>

#include "bench_format.h"

void bench_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = (double)bytes;
  uint64_t whole = bytes;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  int exact = 1;
  for (int i = 0; i < u; i++) {
    if (whole % 1024)
      exact = 0;
    whole /= 1024;
  }
  if (exact)
    snprintf(buf, len, "%llu %s", (unsigned long long)whole, units[u]);
  else
    snprintf(buf, len, "%.2f %s", v, units[u]);
}

void bench_csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"')
      fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}
