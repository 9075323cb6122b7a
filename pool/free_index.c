#include "free_index.h"

static inline int less(const block *a, const block *b) {
  return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

/* Splits t into blocks ordered before key (*l) and the rest (*r). */
static void split(block *t, const block *key, block **l, block **r) {
  while (t) {
    if (less(t, key)) {
      *l = t;
      l = &t->right;
      t = t->right;
    } else {
      *r = t;
      r = &t->left;
      t = t->left;
    }
  }
  *l = *r = NULL;
}

static block *merge(block *l, block *r) {
  block *root = NULL, **link = &root;
  while (l && r) {
    if (l->prio > r->prio) {
      *link = l;
      link = &l->right;
      l = l->right;
    } else {
      *link = r;
      link = &r->left;
      r = r->left;
    }
  }
  *link = l ? l : r;
  return root;
}

void free_index_insert(block **root, block *b) {
  block **link = root;
  while (*link && (*link)->prio >= b->prio)
    link = less(b, *link) ? &(*link)->left : &(*link)->right;
  split(*link, b, &b->left, &b->right);
  *link = b;
}

void free_index_remove(block **root, block *b) {
  block **link = root;
  while (*link != b)
    link = less(b, *link) ? &(*link)->left : &(*link)->right;
  *link = merge(b->left, b->right);
  b->left = b->right = NULL;
}

block *free_index_lower_bound(block *t, size_t size) {
  block *best = NULL;
  while (t) {
    if (t->size >= size) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  return best;
}

block *free_index_next(block *t, const block *b) {
  block *best = NULL;
  while (t) {
    if (less(b, t)) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  return best;
}

block *free_index_largest(block *t) {
  while (t && t->right)
    t = t->right;
  return t;
}
