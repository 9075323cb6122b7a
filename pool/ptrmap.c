#include "ptrmap.h"

#include <stdlib.h>

#define EMPTY   0
#define DELETED 1

static inline uint64_t hash(uintptr_t key) {
  return (uint64_t)(key >> 9) * 0x9E3779B97F4A7C15ull;
}

static inline ptrmap_stripe *stripe_of(ptrmap *m, uint64_t h) {
  return &m->stripe[h >> 58];
}

static ptrmap_entry *find(ptrmap_stripe *s, uintptr_t key, uint64_t h) {
  if (!s->tab) return NULL;
  for (uint32_t i = (uint32_t)(h >> 16) & s->mask;; i = (i + 1) & s->mask) {
    if (s->tab[i].key == key) return &s->tab[i];
    if (s->tab[i].key == EMPTY) return NULL;
  }
}

static int rehash(ptrmap_stripe *s, uint32_t cap) {
  ptrmap_entry *n = calloc(cap, sizeof *n);
  if (!n) return -1;
  for (uint32_t i = 0; s->tab && i <= s->mask; i++) {
    uintptr_t k = s->tab[i].key;
    if (k == EMPTY || k == DELETED) continue;
    uint32_t j = (uint32_t)(hash(k) >> 16) & (cap - 1);
    while (n[j].key != EMPTY)
      j = (j + 1) & (cap - 1);
    n[j] = s->tab[i];
  }
  free(s->tab);
  s->tab = n;
  s->mask = cap - 1;
  s->deleted = 0;
  return 0;
}

int ptrmap_insert(ptrmap *m, uintptr_t key, struct block *val) {
  uint64_t h = hash(key);
  ptrmap_stripe *s = stripe_of(m, h);
  spin_lock(&s->lock);
  uint32_t cap = s->tab ? s->mask + 1 : 0;
  if ((s->used + s->deleted + 1) * 2 > cap) {
    /* Mostly tombstones: rebuild at the same size; else double. */
    uint32_t ncap = !cap ? 64 : (s->used + 1) * 4 <= cap ? cap : cap * 2;
    if (rehash(s, ncap) != 0) {
      spin_unlock(&s->lock);
      return -1;
    }
  }
  uint32_t i = (uint32_t)(h >> 16) & s->mask;
  while (s->tab[i].key != EMPTY && s->tab[i].key != DELETED)
    i = (i + 1) & s->mask;
  if (s->tab[i].key == DELETED) s->deleted--;
  s->tab[i].key = key;
  s->tab[i].val = val;
  s->used++;
  spin_unlock(&s->lock);
  return 0;
}

struct block *ptrmap_remove(ptrmap *m, uintptr_t key) {
  uint64_t h = hash(key);
  ptrmap_stripe *s = stripe_of(m, h);
  spin_lock(&s->lock);
  ptrmap_entry *e = find(s, key, h);
  struct block *v = NULL;
  if (e) {
    v = e->val;
    e->key = DELETED;
    s->used--;
    s->deleted++;
  }
  spin_unlock(&s->lock);
  return v;
}

int ptrmap_with(ptrmap *m, uintptr_t key, int (*fn)(struct block *val, void *arg), void *arg) {
  uint64_t h = hash(key);
  ptrmap_stripe *s = stripe_of(m, h);
  spin_lock(&s->lock);
  ptrmap_entry *e = find(s, key, h);
  int r = e ? fn(e->val, arg) : -1;
  spin_unlock(&s->lock);
  return r;
}

void ptrmap_destroy(ptrmap *m) {
  for (int i = 0; i < PTRMAP_STRIPES; i++) {
    free(m->stripe[i].tab);
    m->stripe[i].tab = NULL;
  }
}
