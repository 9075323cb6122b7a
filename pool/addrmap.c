#include "addrmap.h"

#include <stdlib.h>

#define EMPTY   0
#define DELETED 1

static inline uint32_t slot_of(uintptr_t key, uint32_t mask) {
  return (uint32_t)(((uint64_t)(key >> 9) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

static addrmap_entry *find(const addrmap *m, uintptr_t key) {
  if (!m->tab || key <= DELETED) /* the markers are never keys: 1 would match a tombstone */
    return NULL;
  for (uint32_t i = slot_of(key, m->mask);; i = (i + 1) & m->mask) {
    if (m->tab[i].key == key)
      return &m->tab[i];
    if (m->tab[i].key == EMPTY)
      return NULL;
  }
}

static int rehash(addrmap *m, uint32_t cap) {
  addrmap_entry *n = calloc(cap, sizeof *n);
  if (!n)
    return -1;
  for (uint32_t i = 0; m->tab && i <= m->mask; i++) {
    uintptr_t k = m->tab[i].key;
    if (k == EMPTY || k == DELETED)
      continue;
    uint32_t j = slot_of(k, cap - 1);
    while (n[j].key != EMPTY)
      j = (j + 1) & (cap - 1);
    n[j] = m->tab[i];
  }
  free(m->tab);
  m->tab = n;
  m->mask = cap - 1;
  m->deleted = 0;
  return 0;
}

int addrmap_insert(addrmap *m, uintptr_t key, struct block *val) {
  uint32_t cap = m->tab ? m->mask + 1 : 0;
  if ((m->used + m->deleted + 1) * 2 > cap) {
    /* Mostly tombstones: rebuild at the same size; else double. */
    uint32_t ncap = !cap ? 64 : (m->used + 1) * 4 <= cap ? cap : cap * 2;
    if (rehash(m, ncap) != 0)
      return -1;
  }
  uint32_t i = slot_of(key, m->mask);
  while (m->tab[i].key != EMPTY && m->tab[i].key != DELETED)
    i = (i + 1) & m->mask;
  if (m->tab[i].key == DELETED)
    m->deleted--;
  m->tab[i].key = key;
  m->tab[i].val = val;
  m->used++;
  return 0;
}

addrmap_entry *addrmap_find(const addrmap *m, uintptr_t key) {
  return find(m, key);
}

void addrmap_erase(addrmap *m, addrmap_entry *e) {
  e->key = DELETED;
  m->used--;
  m->deleted++;
}

void addrmap_destroy(addrmap *m) {
  free(m->tab);
  m->tab = NULL;
}
