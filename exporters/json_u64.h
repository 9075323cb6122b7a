/* Unsigned integers as cJSON members written as their digits. cJSON keeps
 * numbers as doubles: from 10^15 on it prints them in exponent form
 * (1.79553648737561e+15) and beyond 2^53 it loses digits, so times since
 * 1970 in microseconds or nanoseconds need this. */
#ifndef GPUPOOL_JSON_U64_H
#define GPUPOOL_JSON_U64_H

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

/* Adds key: v to object o; NULL when out of memory. */
static inline cJSON *json_add_u64(cJSON *o, const char *key, uint64_t v) {
  char digits[24];
  snprintf(digits, sizeof digits, "%" PRIu64, v);
  return cJSON_AddRawToObject(o, key, digits);
}

#endif
