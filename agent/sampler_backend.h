/* Backend numbers that cost a CUDA call (the cudaMemPool attributes of
 * cuda_async pools), read by the sampler thread and kept per pool id, so
 * that a scrape only copies them. */
#ifndef GPUPOOL_SAMPLER_BACKEND_H
#define GPUPOOL_SAMPLER_BACKEND_H

#include <stdint.h>

#include "pool/pool_view.h"

#define SAMPLER_BACKEND_MAX 256 /* pools with backend numbers tracked */

/* Reads every pool whose backend has such numbers (sampler thread). */
void sampler_backend_refresh(void);
/* The last reading for pool id; 0 when there is one, -1 otherwise. */
int sampler_backend_get(uint32_t pool_id, pool_backend_info *out);
void sampler_backend_clear(void);

#endif
