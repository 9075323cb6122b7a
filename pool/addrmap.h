/* Live allocations by address: an open-addressing hash map with linear
 * probing. Not locked: each shard owns one and uses it under its lock. */
#ifndef GPUPOOL_ADDRMAP_H
#define GPUPOOL_ADDRMAP_H

#include <stddef.h>
#include <stdint.h>

struct block;

typedef struct addrmap_entry {
  uintptr_t key; /* 0: empty, 1: deleted */
  struct block *val;
} addrmap_entry;

typedef struct addrmap {
  uint32_t used, deleted, mask;
  addrmap_entry *tab;
} addrmap;

void addrmap_destroy(addrmap *m);
/* 0 on success, -1 when out of host memory. */
int addrmap_insert(addrmap *m, uintptr_t key, struct block *val);
/* The entry of key, or NULL; valid until the next insert. */
addrmap_entry *addrmap_find(const addrmap *m, uintptr_t key);
/* Removes an entry addrmap_find returned. */
void addrmap_erase(addrmap *m, addrmap_entry *e);

#endif
