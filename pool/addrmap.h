/* Live allocations by address: an open-addressing hash map with linear
 * probing and backward-shift deletion (no tombstones, so a steady stream of
 * inserts and erases never rebuilds the table). Not locked: each shard owns
 * one and uses it under its lock. */
#ifndef GPUPOOL_ADDRMAP_H
#define GPUPOOL_ADDRMAP_H

#include <stddef.h>
#include <stdint.h>

struct block;

typedef struct addrmap_entry {
  uintptr_t key; /* 0: empty */
  struct block *val;
} addrmap_entry;

typedef struct addrmap {
  uint32_t used, mask;
  addrmap_entry *tab;
} addrmap;

/* Blocks are at least 512 bytes apart: the bits below carry no information. */
static inline uint32_t addrmap_slot(uintptr_t key, uint32_t mask) {
  return (uint32_t)(((uint64_t)(key >> 9) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

void addrmap_destroy(addrmap *m);
/* 0 on success, -1 when out of host memory. key is not 0 and not yet in m. */
int addrmap_insert(addrmap *m, uintptr_t key, struct block *val);

/* The entry of key, or NULL; valid until the next insert or erase. */
static inline addrmap_entry *addrmap_find(const addrmap *m, uintptr_t key) {
  if (!m->tab || !key)
    return NULL;
  for (uint32_t i = addrmap_slot(key, m->mask);; i = (i + 1) & m->mask) {
    if (m->tab[i].key == key)
      return &m->tab[i];
    if (!m->tab[i].key)
      return NULL;
  }
}

/* Removes an entry addrmap_find returned. */
void addrmap_erase(addrmap *m, addrmap_entry *e);
/* Takes an entry addrmap_find returned out of m but keeps its room: the key
 * still counts towards m's load, so inserts meanwhile grow m as they would
 * with it there, and addrmap_put_back returns it without host memory. Each
 * take ends in addrmap_put_back or addrmap_give_up_room. */
void addrmap_take(addrmap *m, addrmap_entry *e);
/* Returns a key taken with addrmap_take. */
void addrmap_put_back(addrmap *m, uintptr_t key, struct block *val);
/* The room of a key taken with addrmap_take, which stays out. */
void addrmap_give_up_room(addrmap *m);

#endif
