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

void free_index_remove_at(const free_index_pos *pos, block *b) {
  *pos->link = merge(b->left, b->right);
  b->left = b->right = NULL;
}

/* b's position, found by descending to it. */
static free_index_pos find(block **root, const block *b) {
  free_index_pos pos = {root, NULL, NULL};
  while (*pos.link != b) {
    if (less(b, *pos.link)) {
      pos.hi = *pos.link;
      pos.link = &(*pos.link)->left;
    } else {
      pos.lo = *pos.link;
      pos.link = &(*pos.link)->right;
    }
  }
  return pos;
}

void free_index_remove(block **root, block *b) {
  block **link = root;
  while (*link != b)
    link = less(b, *link) ? &(*link)->left : &(*link)->right;
  free_index_remove_at(&(free_index_pos){link, NULL, NULL}, b);
}

int free_index_replace_at(block **root, const free_index_pos *pos, block *old, block *b) {
  block *lo = pos->lo, *hi = pos->hi; /* old's neighbours in order */
  if (old->left)
    for (lo = old->left; lo->right;)
      lo = lo->right;
  if (old->right)
    for (hi = old->right; hi->left;)
      hi = hi->left;
  if ((lo && !less(lo, b)) || (hi && !less(b, hi))) {
    /* Out of order there: old leaves by its link, b enters anew. */
    free_index_remove_at(pos, old);
    free_index_insert(root, b);
    return 1;
  }
  b->left = old->left;
  b->right = old->right;
  b->prio = old->prio; /* the heap order holds with old's priority */
  *pos->link = b;
  old->left = old->right = NULL;
  return 0;
}

int free_index_replace(block **root, block *old, block *b) {
  free_index_pos pos = find(root, old);
  return free_index_replace_at(root, &pos, old, b);
}

block *free_index_lower_bound(block **root, size_t size, free_index_pos *pos) {
  block **link = root, *best = NULL, *right_of = NULL; /* the last node passed on the right */
  while (*link) {
    block *t = *link;
    if (t->size >= size) {
      /* t's neighbours above it: the last node passed on each side (on the
       * left: the previous best) */
      *pos = (free_index_pos){link, right_of, best};
      best = t;
      link = &t->left;
    } else {
      right_of = t;
      link = &t->right;
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
