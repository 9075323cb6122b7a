/* Free blocks ordered by (size, address) in a treap: exact best fit (the
 * smallest block that fits, lowest address on ties) in O(log n). */
#ifndef GPUPOOL_FREE_INDEX_H
#define GPUPOOL_FREE_INDEX_H

#include <stddef.h>

#include "pool_internal.h"

void free_index_insert(block **root, block *b);
void free_index_remove(block **root, block *b);
/* The same at b's position (free_index_lower_bound found b, and the index
 * has not changed since): no descent to b. */
void free_index_remove_at(const free_index_pos *pos, block *b);
/* Puts free block b (not in the index) where old is, old leaving the index:
 * when b's key sorts between old's neighbours it takes old's place (no
 * rotation, so it costs one descent where a remove and an insert cost two
 * and relink subtrees) and 0 is returned; else old is removed at the link
 * found and b inserted, and 1 is returned. */
int free_index_replace(block **root, block *old, block *b);
int free_index_replace_at(block **root, const free_index_pos *pos, block *old, block *b);
/* The smallest block with size >= size, or NULL; *pos is set to its
 * position when there is one. */
block *free_index_lower_bound(block **root, size_t size, free_index_pos *pos);
/* The block after b in (size, address) order, or NULL. */
block *free_index_next(block *root, const block *b);
block *free_index_largest(block *root);

#endif
