/* Live allocations by address: a hash map split into stripes, each with its
 * own lock and open-addressing table, so frees from threads working on
 * different streams rarely meet on one lock. */
#ifndef GPUPOOL_PTRMAP_H
#define GPUPOOL_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

#include "spinlock.h"

#define PTRMAP_STRIPES 64

struct block;

typedef struct ptrmap_entry {
  uintptr_t key; /* 0: empty, 1: deleted */
  struct block *val;
} ptrmap_entry;

typedef struct ptrmap_stripe {
  spinlock lock;
  uint32_t used, deleted, mask;
  ptrmap_entry *tab;
} __attribute__((aligned(64))) ptrmap_stripe;

typedef struct ptrmap {
  ptrmap_stripe stripe[PTRMAP_STRIPES];
} ptrmap;

void ptrmap_destroy(ptrmap *m);
/* 0 on success, -1 when out of host memory. */
int ptrmap_insert(ptrmap *m, uintptr_t key, struct block *val);
/* Removes and returns the value, or NULL when key is absent. */
struct block *ptrmap_remove(ptrmap *m, uintptr_t key);
/* Calls fn(val, arg) with key's value under the stripe lock; returns -1 when
 * key is absent, else fn's return value. */
int ptrmap_with(ptrmap *m, uintptr_t key, int (*fn)(struct block *val, void *arg), void *arg);

#endif
