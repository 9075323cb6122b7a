/* UTF-8 validity: one definition for every text gpupool writes that must
 * be UTF-8 (JSON documents, Prometheus label values). */
#ifndef GPUPOOL_UTF8_H
#define GPUPOOL_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 encoding of one character at s, reading at
 * most n bytes (n > 0): 1 to 4; 0 when s does not begin one (a stray
 * continuation byte, an overlong form, a surrogate, a code point beyond
 * U+10FFFF, or a character cut by n). */
size_t utf8_char_len(const unsigned char *s, size_t n);

#endif
