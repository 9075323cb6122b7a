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

/* Where a block sits: the link that points to it, and the nearest block
 * before it among its ancestors (NULL: none). */
typedef struct position {
  block **link;
  block *lo;
} position;

static void remove_at(block **link, block *b) {
  *link = merge(b->left, b->right);
  b->left = b->right = NULL;
}

void free_index_remove(block **root, block *b) {
  block **link = root;
  while (*link != b) {
    gp_assert_internal(*link); /* b is in this index */
    link = less(b, *link) ? &(*link)->left : &(*link)->right;
  }
  remove_at(link, b);
}

/* b takes old's place (its neighbours allow it): no rotation, and old's
 * priority keeps the heap order. */
static void take_place(block **link, block *old, block *b) {
  b->left = old->left;
  b->right = old->right;
  b->prio = old->prio;
  *link = b;
  old->left = old->right = NULL;
}

int free_index_shrink(block **root, block *old, block *b) {
  position pos = {root, NULL};
  while (*pos.link != old) {
    gp_assert_internal(*pos.link); /* old is in this index */
    if (less(old, *pos.link)) {
      pos.link = &(*pos.link)->left;
    } else {
      pos.lo = *pos.link;
      pos.link = &(*pos.link)->right;
    }
  }
  block *lo = pos.lo; /* old's predecessor: the largest of its left subtree, or pos.lo */
  if (old->left)
    for (lo = old->left; lo->right;)
      lo = lo->right;
  if (lo && !less(lo, b)) { /* b sorts further down: old leaves, b enters anew */
    remove_at(pos.link, old);
    free_index_insert(root, b);
    return 1;
  }
  take_place(pos.link, old, b);
  return 0;
}

int free_index_grow(block **root, block *old, block *b) {
  block **link = root, *hi = NULL; /* old's successor among its ancestors */
  while (*link != old) {
    gp_assert_internal(*link); /* old is in this index */
    if (less(old, *link)) {
      hi = *link;
      link = &(*link)->left;
    } else {
      link = &(*link)->right;
    }
  }
  if (old->right)
    for (hi = old->right; hi->left;)
      hi = hi->left;
  if (hi && !less(b, hi)) { /* b sorts further up */
    remove_at(link, old);
    free_index_insert(root, b);
    return 1;
  }
  take_place(link, old, b);
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

/* The descent from it->root towards the lower bound of size, down to stop
 * (NULL: to the bottom), pushing the blocks of size or more it passes: the
 * ancestors whose left subtree it goes into. */
static void push_descent(free_index_iter *it, size_t size, const block *stop) {
  for (block *t = it->root; t != stop;) {
    gp_assert_internal(t); /* stop is in this index */
    if (t->size >= size) {
      free_index_iter_push(it, t);
      t = t->left;
    } else {
      t = t->right;
    }
  }
}

/* The stack holds the ancestors of the current block (itself on top) whose
 * left subtree the walk went into: what follows the current block is its
 * right subtree, then the rest of the stack, each followed by its own right
 * subtree. */
block *free_index_iter_start(free_index_iter *it, block *root, size_t size) {
  it->root = root;
  it->from = NULL;
  it->n = 0;
  it->deep = 0;
  push_descent(it, size, NULL);
  if (it->deep) /* the top of the stack is not the lower bound */
    return it->cur = free_index_lower_bound(root, size);
  return it->cur = it->n ? it->stack[it->n - 1] : NULL;
}

/* The descent to it->from pushes the ancestors that sort after it, as
 * free_index_iter_start's does; the stack is empty (the walk left from's
 * subtree), so they are all that follows. from being the lower bound of its
 * size, a block of that size or more other than from sorts after it: sizes
 * compared, as free_index_lower_bound does. */
block *free_index_iter_above(free_index_iter *it) {
  const block *from = it->from;
  size_t size = from->size;
  gp_assert_internal(!it->n && !it->deep && from == free_index_lower_bound(it->root, size));
  it->from = NULL;
  push_descent(it, size, from);
  if (it->deep) /* the top of the stack is not from's successor */
    return free_index_next(it->root, it->cur);
  return it->n ? it->stack[it->n - 1] : NULL;
}
