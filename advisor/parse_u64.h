/* Unsigned 64-bit numbers as the history formats spell them (docs/advisor.md):
 * decimal digits, or "0x" (or "0X") and hex digits, and nothing else. The
 * one reader of numbers for every format, so that they agree: strtoull would
 * take a leading 0 for octal ("010" is eight), skip leading white space,
 * negate after a '-' ("-1" is 2^64 - 1) and saturate past 64 bits. */
#ifndef GPUPOOL_ADVISOR_PARSE_U64_H
#define GPUPOOL_ADVISOR_PARSE_U64_H

#include <stdint.h>

/* The spellings a field takes. */
enum {
  U64_DECIMAL = 1, /* "0" to "18446744073709551615"; leading zeros are decimal: "010" is ten */
  U64_HEX = 2,     /* "0x" and 1 or more hex digits of either case, up to 2^64 - 1 */
};

/* s, whole, as a number in one of the spellings allowed: 0 with *out set;
 * -1 (*out unchanged) for anything else: empty, white space, a sign, an
 * exponent, a digit of another base, a spelling not allowed, more than 64
 * bits. */
int parse_u64(const char *s, unsigned spellings, uint64_t *out);

#endif
