/* The "key:value,key:value" grammar of PYTORCH_CUDA_ALLOC_CONF, shared by
 * GPUPOOL_CONF and GPUPOOL_AGENT_CONF. Parsing never aborts: each error comes
 * back with a one-line reason. */
#ifndef GPUPOOL_KVCONF_H
#define GPUPOOL_KVCONF_H

#include <stddef.h>
#include <stdint.h>

/* Called once per pair, in order; returns 0 to go on or -1 after writing a
 * reason into err (errlen bytes). key and value are NUL-terminated copies
 * with surrounding white space removed. */
typedef int (*kvconf_fn)(void *ctx, const char *key, const char *value, char *err, size_t errlen);

/* 0 on success; -1 with a reason ("GPUPOOL_CONF: ..." is the caller's prefix)
 * on a malformed string (empty key, missing ':', empty value) or when fn
 * refuses a pair. An empty or NULL string is valid and has no pairs.
 * Values may contain ':' (only the first ':' separates). */
int kvconf_parse(const char *text, kvconf_fn fn, void *ctx, char *err, size_t errlen);

/* Strict value parsers: the whole string must be consumed; 0 ok, -1 bad. */
int kvconf_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int kvconf_double(const char *s, double min, double max, double *out);

#endif
