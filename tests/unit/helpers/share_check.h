/* What the sharing tests (gpupool/share.h) share: an expandable pool of the
 * host backend, a block taken from it, a connected socket pair, and a
 * failure checked for its status and its reason. Each fails the current
 * test when a step fails (main thread only). */
#ifndef GPUPOOL_TESTS_SHARE_CHECK_H
#define GPUPOOL_TESTS_SHARE_CHECK_H

#include <stddef.h>

#include "gpupool/gpupool.h"

/* A host-backend pool of 1 GiB with expandable segments and no slack. */
gpupool *share_pool(void);
/* size bytes from p on the default stream. */
void *share_take(gpupool *p, size_t size);
/* A connected AF_UNIX pair of this socket type (SOCK_STREAM, ...). */
void share_sockets_of(int type, int sv[2]);
void share_sockets(int sv[2]); /* SOCK_STREAM */
/* got is want, and gpupool_last_error() says text. */
void share_expect_fail(gpupool_status got, gpupool_status want, const char *text);

#endif
