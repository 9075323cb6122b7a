/* The demo's workload: the allocation pattern of a data-parallel transformer
 * training loop. Parameters and optimizer state are allocated once; every
 * step draws a sequence length, allocates activations layer by layer (sized
 * by it), attention temporaries freed in a random order, logits, parameter
 * gradients (freed at zero_grad, as with set_to_none), gradient buckets
 * handed to a communication stream (gpupool_record_stream) and inputs
 * allocated on a copy stream. Varying shapes fragment a pool; the same
 * step sequence replayed on pools of different strategies shows how each
 * copes. A step that runs out of memory is dropped (its tensors freed), as
 * a job that skips a batch would. */
#ifndef GPUPOOL_DEMO_WORKLOAD_H
#define GPUPOOL_DEMO_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "demo_streams.h"
#include "gpupool/gpupool.h"

typedef struct demo_model {
  unsigned layers, hidden, heads, batch, vocab;
  unsigned seq_min, seq_max; /* sequence length drawn per step, multiple of 8 */
  size_t bucket_bytes;       /* gradient all-reduce bucket */
} demo_model;

/* A GPT-2-small-like model (about 2 GiB at the longest sequences). */
void demo_model_default(demo_model *m);

typedef struct demo_tensors {
  void **ptr;
  size_t n, cap;
} demo_tensors;

typedef struct demo_replica {
  gpupool *pool;
  demo_streams *streams;
  const demo_model *model;
  demo_tensors params, optim;              /* live for the whole run */
  demo_tensors inputs, acts, grads, temps; /* live during a step */
  uint64_t steps;                          /* steps completed */
  uint64_t dropped;                        /* steps dropped on out-of-memory */
  char error[256];                         /* the last failure, one line */
} demo_replica;

/* Allocates parameters and optimizer state in p. GPUPOOL_OK, or the status
 * of the failed allocation with r->error set (r is then released). */
gpupool_status demo_replica_init(demo_replica *r, gpupool *p, demo_streams *s, const demo_model *m);

/* One training step. The step's shapes and orders depend only on (seed,
 * step), so replicas on different pools replay the same steps. GPUPOOL_OK;
 * GPUPOOL_ERR_OOM when the step was dropped; another status (with r->error)
 * when the pool failed otherwise. Every tensor of the step is freed on
 * return. */
gpupool_status demo_replica_step(demo_replica *r, uint64_t seed, uint64_t step);

/* Frees everything the replica holds. */
void demo_replica_release(demo_replica *r);

#endif
