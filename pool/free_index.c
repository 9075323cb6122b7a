#include "free_index.h"

#include "core/assert.h"

/* Whether a sorts before a block of key (size, addr). */
static inline int less_key(const block *a, size_t size, uintptr_t addr) {
  return a->size < size || (a->size == size && a->addr < addr);
}

static inline int less(const block *a, const block *b) {
  return less_key(a, b->size, b->addr);
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

/* b's position in the index under root (b is in it). */
static position locate(block **root, const block *b) {
  position pos = {root, NULL};
  while (*pos.link != b) {
    gp_assert_internal(*pos.link); /* b is in this index */
    if (less(b, *pos.link)) {
      pos.link = &(*pos.link)->left;
    } else {
      pos.lo = *pos.link;
      pos.link = &(*pos.link)->right;
    }
  }
  return pos;
}

int free_index_shrink(block **root, block *old, block *b) {
  position pos = locate(root, old);
  /* old's predecessor: the largest of its left subtree, or pos.lo */
  block *lo = old->left ? free_index_largest(old->left) : pos.lo;
  if (lo && !less(lo, b)) { /* b sorts further down: old leaves, b enters anew */
    remove_at(pos.link, old);
    free_index_insert(root, b);
    return 1;
  }
  take_place(pos.link, old, b);
  return 0;
}

void free_index_shrink_size(block **root, block *b, size_t size, const block *pred) {
  gp_assert_internal(size > 0 && size < b->size);
  gp_assert_internal(!pred || b == free_index_next(*root, pred));
  if (!pred && b->left)
    pred = free_index_largest(b->left);
  position pos = {NULL, NULL};
  if (!pred) { /* none, or an ancestor: the descent to b passes it */
    pos = locate(root, b);
    pred = pos.lo;
  }
  if (pred && !less_key(pred, size, b->addr)) { /* b sorts further down: it enters anew */
    if (pos.link)
      remove_at(pos.link, b);
    else
      free_index_remove(root, b);
    b->size = size;
    free_index_insert(root, b);
    return;
  }
  b->size = size;
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

block *free_index_lower_bound_up(block *t, size_t size, block **up) {
  block *best = NULL, *above = NULL;
  while (t) {
    if (t->size >= size) {
      above = best;
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  *up = above;
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
      if (it->n == FREE_INDEX_ITER_DEPTH) {
        it->deep = 1;
        return;
      }
      it->stack[it->n++] = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
}

/* The descent pushes the lower bound last: it comes off the stack as the
 * first block. */
block *free_index_iter_start(free_index_iter *it, block *root, size_t size) {
  it->root = root;
  it->from = NULL;
  it->up_known = 0;
  it->n = 0;
  it->deep = 0;
  push_descent(it, size, NULL);
  if (it->deep) /* the stack does not reach the lower bound */
    return it->cur = free_index_lower_bound(root, size);
  return it->cur = it->n ? it->stack[--it->n] : NULL;
}

/* The stack is empty (the walk left from's subtree). Where up is known, it
 * follows, and from's ancestors after it are up's: up takes from's place.
 * Else the descent to from pushes the ancestors that sort after it, as
 * free_index_iter_start's does: they are all that follows. Sizes compared,
 * as free_index_lower_bound does: from is the lower bound of some size, or
 * the up of one (an ancestor of it whose left subtree holds it), and a block
 * of its size that sorts before it then lies in its left subtree, not on
 * the path. */
block *free_index_iter_above(free_index_iter *it) {
  gp_assert_internal(!it->n && !it->deep && it->from);
  block *next;
  if (it->up_known) {
    it->up_known = 0;
    next = it->from = it->up;
  } else {
    const block *from = it->from;
    it->from = NULL;
    push_descent(it, from->size, from);
    if (it->deep) /* the stack does not reach from's successor */
      next = free_index_next(it->root, it->cur);
    else
      next = it->n ? it->stack[--it->n] : NULL;
  }
  gp_assert_internal(next == free_index_next(it->root, it->cur));
  return next;
}
