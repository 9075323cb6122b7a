/* The host backend's simulated streams and fault injection, for tests and
 * demos that run without a GPU. */
#ifndef GPUPOOL_HOST_H
#define GPUPOOL_HOST_H

#include "gpupool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A simulated stream: pass it wherever a cudaStream_t goes. Work "enqueued"
 * on it stays pending until gpupool_host_stream_complete(); an event recorded
 * while work is pending completes only then. NULL is the default stream, on
 * which everything is always complete. */
typedef struct gpupool_host_stream gpupool_host_stream;

gpupool_host_stream *gpupool_host_stream_create(void);
void gpupool_host_stream_destroy(gpupool_host_stream *s);
void gpupool_host_stream_enqueue(gpupool_host_stream *s);  /* one pending work item */
void gpupool_host_stream_complete(gpupool_host_stream *s); /* everything enqueued is done */

/* Make the host backend of pool p fail device allocations: every Nth one
 * (every_n > 0) and/or a random fraction (0 <= rate <= 1, seeded).
 * every_n = 0 and rate = 0 turn injection off. GPUPOOL_ERR_UNSUPPORTED on a
 * pool of another backend. The same is settable in GPUPOOL_CONF with
 * fault_every_n, fault_rate and fault_seed; any of these keys given, whatever
 * its value, makes gpupool_create of a pool of another backend fail with
 * GPUPOOL_ERR_INVALID. */
gpupool_status gpupool_host_inject_faults(gpupool *p, unsigned every_n, double rate, uint64_t seed);

/* Simulate memory held on the device by other CUDA allocations (a cuBLAS
 * workspace, NCCL buffers: what CUPTI reports as owner="other" on a GPU):
 * `bytes` of the host backend's capacity are taken from pool p's simulated
 * device (the total held is set, not added to; 0 gives it back). OOM reports
 * of p show them as other CUDA memory. GPUPOOL_ERR_OOM when they do not fit,
 * GPUPOOL_ERR_UNSUPPORTED on a pool of another backend. */
gpupool_status gpupool_host_hold_other(gpupool *p, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
