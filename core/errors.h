#ifndef GPUPOOL_ERRORS_H
#define GPUPOOL_ERRORS_H

#include "gpupool/gpupool.h"

/* Records a one-line reason for gpupool_last_error() and returns s. */
gpupool_status pool_fail(gpupool_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void pool_clear_error(void);

#endif
