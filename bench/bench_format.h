/* Number formatting shared by the benchmark reports. */
#ifndef BENCH_FORMAT_H
#define BENCH_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* "512 B", "4 KiB", "256 MiB", "1.50 GiB": exact where the size is a whole
 * number of the unit, two decimals otherwise. */
void bench_bytes(uint64_t bytes, char *buf, size_t len);

/* A CSV field: as is, or in double quotes (inner ones doubled) when it holds
 * a comma, a quote or a line break. */
void bench_csv_field(FILE *f, const char *s);

#endif
