/* The training-loop allocation pattern (see demo_workload.h). Sizes are
 * those of fp16 tensors (2 bytes) and fp32 optimizer state; nothing is
 * written to the memory: only the allocation pattern matters here. */
#include "demo_workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FP16  2u
#define FP32  4u
#define INT64 8u

void demo_model_default(demo_model *m) {
  *m = (demo_model){.layers = 6,
                    .hidden = 768,
                    .heads = 12,
                    .batch = 4,
                    .vocab = 32000,
                    .seq_min = 128,
                    .seq_max = 1024,
                    .bucket_bytes = 25u << 20};
}

/* splitmix64: a small, well-mixed generator for the step's random choices. */
static uint64_t rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int tensors_push(demo_tensors *t, void *ptr) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    void **grown = realloc(t->ptr, cap * sizeof *grown);
    if (!grown)
      return -1;
    t->ptr = grown;
    t->cap = cap;
  }
  t->ptr[t->n++] = ptr;
  return 0;
}

static void tensors_free_reverse(gpupool *p, demo_tensors *t) {
  while (t->n)
    gpupool_free(p, t->ptr[--t->n]);
}

/* Frees in a random order: temporaries die in whatever order kernels end. */
static void tensors_free_shuffled(gpupool *p, demo_tensors *t, uint64_t *rng) {
  for (size_t i = t->n; i > 1; i--) {
    size_t j = (size_t)(rng_next(rng) % i);
    void *tmp = t->ptr[i - 1];
    t->ptr[i - 1] = t->ptr[j];
    t->ptr[j] = tmp;
  }
  tensors_free_reverse(p, t);
}

static void tensors_drop(demo_tensors *t) {
  free(t->ptr);
  *t = (demo_tensors){0};
}

/* Allocates bytes on stream into t. On failure records why in r->error. */
static gpupool_status take(demo_replica *r, demo_tensors *t, size_t bytes, void *stream) {
  void *ptr = NULL;
  gpupool_status st = gpupool_malloc(r->pool, &ptr, bytes, stream);
  if (st != GPUPOOL_OK) {
    snprintf(r->error, sizeof r->error, "pool %s: %zu bytes: %s", gpupool_name(r->pool), bytes,
             gpupool_last_error());
    return st;
  }
  if (tensors_push(t, ptr) != 0) {
    gpupool_free(r->pool, ptr);
    snprintf(r->error, sizeof r->error, "out of host memory");
    return GPUPOOL_ERR_OOM;
  }
  return GPUPOOL_OK;
}

/* Parameter sizes of one layer: qkv, attention out, MLP up, MLP down, and
 * the two layer norms (weight + bias). */
#define LAYER_PARAMS 6
static size_t layer_param_elems(const demo_model *m, size_t i) {
  size_t h = m->hidden;
  static const unsigned hh[LAYER_PARAMS] = {3, 1, 4, 4, 0, 0};
  return hh[i] ? hh[i] * h * h : 2 * h;
}

/* Elements of parameter i: 0 is the embedding, then LAYER_PARAMS per layer. */
static size_t param_elems(const demo_model *m, size_t i) {
  return i == 0 ? (size_t)m->vocab * m->hidden : layer_param_elems(m, (i - 1) % LAYER_PARAMS);
}

static size_t param_count(const demo_model *m) {
  return 1 + (size_t)m->layers * LAYER_PARAMS;
}

gpupool_status demo_replica_init(demo_replica *r, gpupool *p, demo_streams *s,
                                 const demo_model *m) {
  memset(r, 0, sizeof *r);
  r->pool = p;
  r->streams = s;
  r->model = m;
  gpupool_status st = GPUPOOL_OK;
  for (size_t i = 0; st == GPUPOOL_OK && i < param_count(m); i++)
    st = take(r, &r->params, param_elems(m, i) * FP16, NULL);
  /* Adam: two fp32 moments per parameter tensor. */
  for (size_t i = 0; st == GPUPOOL_OK && i < 2 * param_count(m); i++)
    st = take(r, &r->optim, param_elems(m, i / 2) * FP32, NULL);
  if (st != GPUPOOL_OK) {
    char why[sizeof r->error];
    memcpy(why, r->error, sizeof why);
    demo_replica_release(r);
    memcpy(r->error, why, sizeof why);
  }
  return st;
}

/* Frees every tensor of the step (on success and on failure alike). */
static void end_step(demo_replica *r, uint64_t *rng) {
  tensors_free_shuffled(r->pool, &r->temps, rng);
  tensors_free_reverse(r->pool, &r->acts);
  tensors_free_reverse(r->pool, &r->grads);
  tensors_free_reverse(r->pool, &r->inputs);
}

/* A gradient bucket goes to the communication stream: allocated on the
 * compute stream, used by the all-reduce on comm, freed at once; the pool
 * reuses it only after the comm stream's work is done. */
static gpupool_status all_reduce_bucket(demo_replica *r, size_t bytes) {
  void *bucket = NULL;
  gpupool_status st = gpupool_malloc(r->pool, &bucket, bytes, r->streams->compute);
  if (st != GPUPOOL_OK) {
    snprintf(r->error, sizeof r->error, "pool %s: bucket of %zu bytes: %s", gpupool_name(r->pool),
             bytes, gpupool_last_error());
    return st;
  }
  demo_streams_enqueue(r->streams, r->streams->comm);
  st = gpupool_record_stream(r->pool, bucket, r->streams->comm);
  gpupool_free(r->pool, bucket);
  if (st != GPUPOOL_OK)
    snprintf(r->error, sizeof r->error, "pool %s: record_stream: %s", gpupool_name(r->pool),
             gpupool_last_error());
  return st;
}

/* Attention scores, probabilities and the dropout mask of one layer. */
static gpupool_status attention_temps(demo_replica *r, size_t scores, uint64_t *rng) {
  gpupool_status st = take(r, &r->temps, scores * FP16, NULL);
  if (st == GPUPOOL_OK)
    st = take(r, &r->temps, scores * FP16, NULL);
  if (st == GPUPOOL_OK)
    st = take(r, &r->temps, scores / 8 + 1, NULL);
  if (st == GPUPOOL_OK)
    tensors_free_shuffled(r->pool, &r->temps, rng);
  return st;
}

static gpupool_status forward(demo_replica *r, size_t tokens, size_t scores, uint64_t *rng) {
  const demo_model *m = r->model;
  size_t bsh = tokens * m->hidden * FP16;
  /* Activations saved for backward, per layer (in units of bsh). */
  static const unsigned saved[] = {1, 3, 1, 1, 4, 4, 1};
  gpupool_status st = take(r, &r->acts, bsh, NULL); /* embeddings */
  for (unsigned l = 0; st == GPUPOOL_OK && l < m->layers; l++) {
    for (size_t i = 0; st == GPUPOOL_OK && i < sizeof saved / sizeof *saved; i++) {
      st = take(r, &r->acts, saved[i] * bsh, NULL);
      if (st == GPUPOOL_OK && i == 1)
        st = attention_temps(r, scores, rng);
    }
  }
  return st;
}

/* The loss: logits and their gradient, both temporaries. */
static gpupool_status loss(demo_replica *r, size_t tokens, uint64_t *rng) {
  size_t logits = tokens * r->model->vocab * FP16;
  gpupool_status st = take(r, &r->temps, logits, NULL);
  if (st == GPUPOOL_OK)
    st = take(r, &r->temps, tokens * FP32, NULL);
  if (st == GPUPOOL_OK)
    st = take(r, &r->temps, logits, NULL);
  if (st == GPUPOOL_OK)
    tensors_free_shuffled(r->pool, &r->temps, rng);
  return st;
}

static gpupool_status backward(demo_replica *r, size_t tokens, size_t scores, uint64_t *rng) {
  const demo_model *m = r->model;
  size_t bsh = tokens * m->hidden * FP16;
  size_t pending = 0; /* gradient bytes not yet in a bucket */
  size_t per_layer = r->acts.n > 1 ? (r->acts.n - 1) / m->layers : 0;
  gpupool_status st = GPUPOOL_OK;
  for (unsigned l = m->layers; st == GPUPOOL_OK && l-- > 0;) {
    st = take(r, &r->temps, 4 * bsh, NULL); /* gradient of the layer's output */
    if (st == GPUPOOL_OK)
      st = attention_temps(r, scores, rng);
    for (size_t i = 0; st == GPUPOOL_OK && i < LAYER_PARAMS; i++) {
      size_t bytes = layer_param_elems(m, i) * FP16;
      st = take(r, &r->grads, bytes, NULL);
      pending += bytes;
      if (st == GPUPOOL_OK && pending >= m->bucket_bytes) {
        st = all_reduce_bucket(r, m->bucket_bytes);
        pending -= m->bucket_bytes;
      }
    }
    /* The layer's saved activations are no longer needed. */
    for (size_t i = 0; i < per_layer && r->acts.n > 1; i++)
      gpupool_free(r->pool, r->acts.ptr[--r->acts.n]);
    tensors_free_shuffled(r->pool, &r->temps, rng);
  }
  if (st == GPUPOOL_OK)
    st = take(r, &r->grads, (size_t)m->vocab * m->hidden * FP16, NULL);
  if (st == GPUPOOL_OK && pending)
    st = all_reduce_bucket(r, pending);
  return st;
}

/* Adam, one layer at a time: an fp32 temporary per parameter tensor, freed
 * in random order. */
static gpupool_status optimizer_step(demo_replica *r, uint64_t *rng) {
  gpupool_status st = GPUPOOL_OK;
  for (size_t i = 0; st == GPUPOOL_OK && i < param_count(r->model); i++) {
    st = take(r, &r->temps, param_elems(r->model, i) * FP32, NULL);
    if (st == GPUPOOL_OK && i % LAYER_PARAMS == 0)
      tensors_free_shuffled(r->pool, &r->temps, rng);
  }
  if (st == GPUPOOL_OK)
    tensors_free_shuffled(r->pool, &r->temps, rng);
  return st;
}

gpupool_status demo_replica_step(demo_replica *r, uint64_t seed, uint64_t step) {
  const demo_model *m = r->model;
  uint64_t rng = seed ^ (step * 0xd1b54a32d192ed03ull);
  unsigned span = (m->seq_max - m->seq_min) / 8 + 1;
  size_t seq = m->seq_min + 8 * (size_t)(rng_next(&rng) % span);
  size_t tokens = (size_t)m->batch * seq;
  size_t scores = (size_t)m->batch * m->heads * seq * seq;

  /* Last step's all-reduce and input copies are done by now. */
  demo_streams_finish(r->streams, r->streams->comm);
  demo_streams_finish(r->streams, r->streams->h2d);

  /* Token ids and labels arrive on the copy stream. */
  gpupool_status st = take(r, &r->inputs, tokens * INT64, r->streams->h2d);
  if (st == GPUPOOL_OK)
    st = take(r, &r->inputs, tokens * INT64, r->streams->h2d);
  if (st == GPUPOOL_OK)
    demo_streams_enqueue(r->streams, r->streams->h2d);
  if (st == GPUPOOL_OK)
    st = forward(r, tokens, scores, &rng);
  if (st == GPUPOOL_OK)
    st = loss(r, tokens, &rng);
  if (st == GPUPOOL_OK)
    st = backward(r, tokens, scores, &rng);
  if (st == GPUPOOL_OK)
    st = optimizer_step(r, &rng);
  end_step(r, &rng);
  if (st == GPUPOOL_OK)
    r->steps++;
  else if (st == GPUPOOL_ERR_OOM)
    r->dropped++;
  return st;
}

void demo_replica_release(demo_replica *r) {
  if (r->pool) {
    uint64_t rng = 1;
    end_step(r, &rng);
    tensors_free_reverse(r->pool, &r->optim);
    tensors_free_reverse(r->pool, &r->params);
  }
  tensors_drop(&r->params);
  tensors_drop(&r->optim);
  tensors_drop(&r->inputs);
  tensors_drop(&r->acts);
  tensors_drop(&r->grads);
  tensors_drop(&r->temps);
  r->pool = NULL;
}
