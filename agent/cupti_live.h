/* The live-allocation map of CUPTI-observed memory: address -> what was
 * allocated there. A bounded open-addressing hash (linear probing, deletion
 * by backward shift, so no tombstones), sized once: when full, an insert
 * fails and the caller counts it. Not thread-safe: the decoder serialises. */
#ifndef GPUPOOL_CUPTI_LIVE_H
#define GPUPOOL_CUPTI_LIVE_H

#include <stddef.h>
#include <stdint.h>

typedef struct cupti_live_entry {
  uint64_t addr; /* never 0 (0 marks an empty slot) */
  uint64_t bytes;
  int32_t device; /* CUDA ordinal, -1 when the record had none */
  uint8_t kind;   /* CUpti_ActivityMemoryKind, 0..7 */
  uint8_t owner;  /* 0 = inside a gpupool segment, 1 = other */
  uint16_t pad;
} cupti_live_entry;

typedef struct cupti_live cupti_live;

/* Holds up to max_entries allocations (the table has twice as many slots).
 * NULL when out of memory. */
cupti_live *cupti_live_create(size_t max_entries);
void cupti_live_destroy(cupti_live *m);

typedef enum {
  CUPTI_LIVE_INSERTED = 0,
  CUPTI_LIVE_REPLACED, /* addr was already there (its release was missed): *old has it */
  CUPTI_LIVE_FULL,     /* not stored */
  CUPTI_LIVE_BAD_ADDR, /* addr 0: not stored */
} cupti_live_insert_result;

cupti_live_insert_result cupti_live_insert(cupti_live *m, const cupti_live_entry *e,
                                           cupti_live_entry *old);
/* 1 and *out filled when addr was live (and is now removed), 0 otherwise. */
int cupti_live_remove(cupti_live *m, uint64_t addr, cupti_live_entry *out);
/* Pointer to the entry for addr (valid until the next insert/remove), or NULL. */
cupti_live_entry *cupti_live_find(cupti_live *m, uint64_t addr);
void cupti_live_clear(cupti_live *m);
size_t cupti_live_count(const cupti_live *m);
size_t cupti_live_max(const cupti_live *m);

#endif
