#include "sampler_backend.h"

#include <pthread.h>
#include <string.h>

#include "device_info.h"
#include "pool/backend.h"
#include "pool/registry.h"

typedef struct entry {
  uint32_t id;
  pool_backend_info info;
} entry;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static entry g_entries[SAMPLER_BACKEND_MAX];
static size_t g_n;

typedef struct read_ctx {
  gpupool *pool;
  pool_backend_info *out;
} read_ctx;

static void read_in_ctx(void *arg) {
  read_ctx *r = arg;
  pool_get_backend_info(r->pool, r->out);
}

typedef struct collect {
  entry fresh[SAMPLER_BACKEND_MAX];
  size_t n;
} collect;

/* Under the registry lock (the pool stays alive); the CUDA call runs in the
 * application's own context of the pool's device, or not at all. */
static void visit(gpupool *p, void *arg) {
  collect *c = arg;
  backend *be = pool_get_backend(p);
  if (!be || !be->ops->mempool_attrs || c->n == SAMPLER_BACKEND_MAX)
    return;
  entry *e = &c->fresh[c->n];
  memset(e, 0, sizeof *e);
  e->id = pool_id(p);
  read_ctx r = {p, &e->info};
  if (device_info_in_primary_ctx(gpupool_device(p), read_in_ctx, &r) == 0 && e->info.valid)
    c->n++;
}

void sampler_backend_refresh(void) {
  static collect c; /* only the sampler thread refreshes */
  c.n = 0;
  registry_foreach(visit, &c);
  pthread_mutex_lock(&g_lock);
  memcpy(g_entries, c.fresh, c.n * sizeof c.fresh[0]);
  g_n = c.n;
  pthread_mutex_unlock(&g_lock);
}

int sampler_backend_get(uint32_t pool_id, pool_backend_info *out) {
  int found = -1;
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_n; i++) {
    if (g_entries[i].id == pool_id) {
      *out = g_entries[i].info;
      found = 0;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return found;
}

void sampler_backend_clear(void) {
  pthread_mutex_lock(&g_lock);
  g_n = 0;
  pthread_mutex_unlock(&g_lock);
}
