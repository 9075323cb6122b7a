/* A small unpickler for the data pickle protocols 2 to 5 write for plain
 * containers: dict, list, tuple, set, str, bytes, int (any length; beyond
 * 64 bits marked big), float, bool and None, with the memo and frames.
 * Other objects (a class instance, a global) become PV_OBJECT values, so a
 * document that holds some still reads. Never executes anything. Every node
 * records the byte offset of the opcode that made it, for error messages.
 * Memory follows what the document holds, not how it is written: a value
 * dropped from the stack is recycled, and the memo is an array no longer
 * than the input (a pickler's memo indexes count its PUT opcodes). */
#ifndef GPUPOOL_ADVISOR_PICKLE_H
#define GPUPOOL_ADVISOR_PICKLE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  PV_NONE,
  PV_BOOL,
  PV_INT,
  PV_FLOAT,
  PV_STR,
  PV_BYTES,
  PV_LIST,
  PV_DICT,
  PV_OBJECT
} pv_type;

typedef struct pv {
  uint8_t type;
  uint8_t big;  /* PV_INT: did not fit in int64 (i holds 0) */
  uint8_t held; /* while parsing: in the memo or twice on the stack, so never recycled */
  uint32_t len; /* PV_STR/PV_BYTES bytes; PV_LIST items; PV_DICT pairs (items holds 2 x len) */
  uint64_t offset;
  union {
    int64_t i;
    double f;
    const char *s;        /* into the input buffer, not NUL-terminated */
    struct pv *next_free; /* while parsing: a recycled node, on the free list */
  };
  struct pv **items;
  uint32_t nitems, cap; /* entries of items used and allocated */
} pv;

typedef struct pickle_doc pickle_doc;

enum { PICKLE_MALFORMED = -1, PICKLE_HOST_OOM = -2 };
/* 0 with *out set; else *out NULL, err = "byte N: reason" and
 * PICKLE_MALFORMED (the input) or PICKLE_HOST_OOM (the host out of memory). */
int pickle_load(const unsigned char *buf, size_t len, pickle_doc **out, char *err, size_t errlen);
const pv *pickle_root(const pickle_doc *d);
void pickle_free(pickle_doc *d);

/* The value of key in dict d (of a key given twice, the last), or NULL. */
const pv *pv_get(const pv *d, const char *key);
int pv_is_str(const pv *v, const char *s);

#endif
