#include "free_index.h"

#include "core/assert.h"

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
  gp_assert_internal(b->state == BLOCK_FREE && b->size > 0);
  block **link = root;
  while (*link && (*link)->prio >= b->prio)
    link = less(b, *link) ? &(*link)->left : &(*link)->right;
  split(*link, b, &b->left, &b->right);
  *link = b;
}

void free_index_remove(block **root, block *b) {
  block **link = root;
  while (*link != b) {
    gp_assert_internal(*link); /* b is in this index */
    link = less(b, *link) ? &(*link)->left : &(*link)->right;
  }
  *link = merge(b->left, b->right);
  b->left = b->right = NULL;
}

int free_index_replace(block **root, block *old, block *b) {
  block **link = root, *lo = NULL, *hi = NULL; /* old's neighbours in order */
  while (*link != old) {
    if (less(old, *link)) {
      hi = *link;
      link = &(*link)->left;
    } else {
      lo = *link;
      link = &(*link)->right;
    }
  }
  if (old->left)
    for (lo = old->left; lo->right;)
      lo = lo->right;
  if (old->right)
    for (hi = old->right; hi->left;)
      hi = hi->left;
  if ((lo && !less(lo, b)) || (hi && !less(b, hi)))
    return -1;
  b->left = old->left;
  b->right = old->right;
  b->prio = old->prio; /* the heap order holds with old's priority */
  *link = b;
  old->left = old->right = NULL;
  return 0;
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
