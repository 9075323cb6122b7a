/* Free blocks ordered by (size, address) in a treap: exact best fit (the
 * smallest block that fits, lowest address on ties) in O(log n). */
#ifndef GPUPOOL_FREE_INDEX_H
#define GPUPOOL_FREE_INDEX_H

#include <stddef.h>

#include "core/assert.h"

#include "pool_internal.h"

void free_index_insert(block **root, block *b);
void free_index_remove(block **root, block *b);
/* Free block old leaves the index and free block b (not in it) enters, b
 * sorting before old (shrink: a split's remainder) or after it (grow: a
 * block that absorbed old). When b's key sorts between old's neighbours it
 * takes old's place (no rotation, so it costs one descent where a remove and
 * an insert cost two and relink subtrees; only the neighbour on b's side
 * needs a look) and 0 is returned; else old is removed at the link found and
 * b inserted, and 1 is returned. */
int free_index_shrink(block **root, block *old, block *b);
int free_index_grow(block **root, block *old, block *b);
/* Gives b, in the index, the smaller size `size` (its address unchanged):
 * in place where its key still sorts after its predecessor's, else b leaves
 * and enters again. pred is that predecessor where the caller knows it (a
 * walk's previous block), NULL where it does not: then b's left subtree or
 * the descent to b finds it. No descent where it is known or in b's left
 * subtree and the order allows. */
void free_index_shrink_size(block **root, block *b, size_t size, const block *pred);
/* The smallest block with size >= size, or NULL. */
block *free_index_lower_bound(block *root, size_t size);
/* free_index_lower_bound, and in *up the block that follows the lower
 * bound's subtree in the index's order (its nearest ancestor whose left
 * subtree holds it; NULL: none): a walk from it (free_index_iter_from) gets
 * there without a second descent. */
block *free_index_lower_bound_up(block *root, size_t size, block **up);
/* The block after b in (size, address) order, or NULL. */
block *free_index_next(block *root, const block *b);
block *free_index_largest(block *root);

/* An in-order walk of an index that does not change meanwhile, from the
 * smallest block of at least some size: the ancestors still to visit are
 * kept on a stack, so a step costs O(1) amortized where free_index_next
 * descends from the root. A treap's depth is about 2 ln n; a deeper path
 * (never seen in practice) makes the walk go on with free_index_next. */
#define FREE_INDEX_ITER_DEPTH 64
typedef struct free_index_iter {
  block *root, *cur;
  /* free_index_iter_from's block (then its up) while its ancestors are not
   * on the stack; NULL when they are */
  block *from;
  block *up; /* what follows from's subtree, while up_known */
  int up_known;
  unsigned n;
  int deep; /* the stack overflowed: free_index_next from here on */
  /* the ancestors of cur whose left subtree holds it, nearest on top: what
   * follows cur's subtree is the top and its right subtree, and so on */
  block *stack[FREE_INDEX_ITER_DEPTH];
} free_index_iter;

/* Starts it at free_index_lower_bound(root, size), which it returns. */
block *free_index_iter_start(free_index_iter *it, block *root, size_t size);
/* Starts it at b, free_index_lower_bound_up(root, size, &up) for some size,
 * without a descent: the walk goes through b's right subtree, then up and
 * its right subtree, and descends from the root for up's ancestors
 * (free_index_iter_above) only if it goes on past that. A caller that found
 * b by a descent saves the second one where the walk stops early. */
static inline void free_index_iter_from(free_index_iter *it, block *root, block *b, block *up) {
  it->root = root;
  it->cur = it->from = b;
  it->up = up;
  it->up_known = 1;
  it->n = 0;
  it->deep = 0;
}
/* The block after it->from's subtree (it->up where known, which becomes
 * it->from), with the ancestors that follow it pushed: free_index_iter_next's
 * step out of that subtree. */
block *free_index_iter_above(free_index_iter *it);

/* The block after the current one (NULL: none), which becomes current.
 * Inline: the search over mapped pages (shard.c) steps a few blocks per
 * request. */
static inline block *free_index_iter_next(free_index_iter *it) {
  block *b = it->cur, *t;
  if (!b)
    return NULL;
  if (it->deep)
    return it->cur = free_index_next(it->root, b);
  if ((t = b->right)) { /* the smallest of b's right subtree */
    for (; t->left; t = t->left) {
      if (it->n == FREE_INDEX_ITER_DEPTH) {
        it->deep = 1;
        return it->cur = free_index_next(it->root, b);
      }
      it->stack[it->n++] = t;
    }
    return it->cur = t;
  }
  if (it->n)
    return it->cur = it->stack[--it->n];
  return it->cur = it->from ? free_index_iter_above(it) : NULL;
}

#endif
