/* The rule for pool names (issue 19): a name is a label in /metrics, a key
 * in /snapshot and /trace JSON and text in the agent's HTML index, so it
 * must be text every one of them can carry unchanged: valid UTF-8 (no
 * overlong forms, no surrogates, nothing above U+10FFFF), no control
 * characters (C0, DEL, C1), 1 to POOL_NAME_MAX bytes. gpupool_create
 * refuses any other name with GPUPOOL_ERR_INVALID. */
#ifndef GPUPOOL_POOL_NAME_H
#define GPUPOOL_POOL_NAME_H

#include <stddef.h>

#define POOL_NAME_MAX 127 /* bytes, without the NUL */

/* 0 when name follows the rule; else -1 with a one-line reason in err that
 * says where the name breaks it. */
int pool_name_check(const char *name, char *err, size_t errlen);

#endif
