/* The unpickler (pickle.h). Opcodes are those of Python's pickle protocol
 * 2-5 documentation; anything else is an error naming the byte offset. */
#include "pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/array_grow.h"

#define CHUNK     4096
#define MAX_STACK (1u << 20)
#define MAX_ITEMS UINT32_MAX / 2

typedef struct chunk {
  struct chunk *next;
  size_t used;
  pv node[CHUNK];
} chunk;

struct pickle_doc {
  chunk *chunks;
  pv *root;
};

typedef struct parser {
  const unsigned char *b;
  size_t len, pos, op_at;
  pickle_doc *doc;
  pv **stack;
  size_t sp, cap_stack;
  size_t *marks;
  size_t nmarks, cap_marks;
  pv **memo;
  size_t cap_memo, memo_next;
  pv *free_nodes; /* recycled nodes (drop), linked through next_free */
  char *err;
  size_t errlen;
  int host_oom; /* the failure is the host's memory, not the input */
} parser;

static int fail(parser *p, const char *what) {
  snprintf(p->err, p->errlen, "byte %zu: %s", p->op_at, what);
  return -1;
}

static int out_of_memory(parser *p) {
  p->host_oom = 1;
  return fail(p, "out of host memory");
}

static pv *node(parser *p, pv_type t) {
  pv *v = p->free_nodes;
  if (v) {
    p->free_nodes = v->next_free;
  } else {
    chunk *c = p->doc->chunks;
    if (!c || c->used == CHUNK) {
      c = malloc(sizeof *c);
      if (!c)
        return NULL;
      c->used = 0;
      c->next = p->doc->chunks;
      p->doc->chunks = c;
    }
    v = &c->node[c->used++];
  }
  memset(v, 0, sizeof *v);
  v->type = (uint8_t)t;
  v->offset = p->op_at;
  return v;
}

static int take(parser *p, size_t n, const unsigned char **out) {
  if (n > p->len - p->pos)
    return fail(p, "truncated: the data ends inside an opcode");
  *out = p->b + p->pos;
  p->pos += n;
  return 0;
}

static uint64_t le(const unsigned char *s, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++)
    v |= (uint64_t)s[i] << (8 * i);
  return v;
}

static int push(parser *p, pv *v) {
  if (!v)
    return out_of_memory(p);
  if (p->sp == p->cap_stack && p->cap_stack >= MAX_STACK)
    return fail(p, "stack too deep");
  if (array_grow((void **)&p->stack, &p->cap_stack, p->sp + 1, sizeof *p->stack, 256) != 0)
    return out_of_memory(p);
  p->stack[p->sp++] = v;
  return 0;
}

static pv *pop(parser *p) {
  size_t floor = p->nmarks ? p->marks[p->nmarks - 1] : 0;
  if (p->sp <= floor) {
    fail(p, "stack underflow");
    return NULL;
  }
  return p->stack[--p->sp];
}

/* Recycles v, dropped from the stack, unless something else refers to it
 * (held), and with it those of its items nothing else refers to: an item
 * not held was moved into one container from the stack, so it is in no
 * other. A document that pushes and drops values ("N0N0...") thus keeps no
 * more nodes than values it holds. The work list, not recursion: a nesting
 * may be as deep as the stack. */
static void drop(parser *p, pv *v) {
  if (v->held)
    return;
  v->next_free = NULL;
  for (pv *work = v; work;) {
    pv *n = work;
    work = n->next_free;
    for (uint32_t i = 0; i < n->nitems; i++)
      if (!n->items[i]->held) {
        n->items[i]->next_free = work;
        work = n->items[i];
      }
    free(n->items);
    n->items = NULL;
    n->nitems = n->cap = 0;
    n->next_free = p->free_nodes;
    p->free_nodes = n;
  }
}

/* Pops the top value and drops it (drop). */
static int pop_drop(parser *p) {
  pv *v = pop(p);
  if (!v)
    return -1;
  drop(p, v);
  return 0;
}

/* Drops the n values of the stack from base (the stack already ends at base). */
static void drop_range(parser *p, size_t base, size_t n) {
  for (size_t i = 0; i < n; i++)
    drop(p, p->stack[base + i]);
}

static pv *top(parser *p) {
  size_t floor = p->nmarks ? p->marks[p->nmarks - 1] : 0;
  if (p->sp <= floor) {
    fail(p, "stack underflow");
    return NULL;
  }
  return p->stack[p->sp - 1];
}

static int add_item(parser *p, pv *c, pv *item) {
  size_t n = c->nitems;
  if (n >= MAX_ITEMS)
    return fail(p, "container too large");
  if (n == c->cap) {
    uint32_t cap = c->cap ? 2 * c->cap : 8;
    pv **it = realloc(c->items, cap * sizeof *it);
    if (!it)
      return out_of_memory(p);
    c->items = it;
    c->cap = cap;
  }
  c->items[n] = item;
  c->nitems++;
  c->len = c->type == PV_DICT ? c->nitems / 2 : c->nitems;
  return 0;
}

/* Items above the top mark, then the mark popped: *base and *n. */
static int pop_mark(parser *p, size_t *base, size_t *n) {
  if (!p->nmarks)
    return fail(p, "no MARK for this opcode");
  *base = p->marks[--p->nmarks];
  *n = p->sp - *base;
  p->sp = *base;
  return 0;
}

/* A pickler numbers the memo from 0, one index per PUT or MEMOIZE opcode,
 * so every index it writes is below the input's length: a larger one is no
 * pickler's, and would cost a memo as large as the index, not the input. */
static int memo_put(parser *p, size_t idx, pv *v) {
  if (idx >= p->len)
    return fail(p, "memo index beyond the input's length (no pickler writes one)");
  if (idx >= p->cap_memo) {
    size_t cap = p->cap_memo ? p->cap_memo : 256;
    while (cap <= idx)
      cap *= 2;
    if (cap > p->len)
      cap = p->len;
    pv **m = realloc(p->memo, cap * sizeof *m);
    if (!m)
      return out_of_memory(p);
    memset(m + p->cap_memo, 0, (cap - p->cap_memo) * sizeof *m);
    p->memo = m;
    p->cap_memo = cap;
  }
  p->memo[idx] = v;
  v->held = 1;
  return 0;
}

static int memo_get(parser *p, size_t idx) {
  if (idx >= p->cap_memo || !p->memo[idx])
    return fail(p, "memo get of an index never put");
  return push(p, p->memo[idx]);
}

static int collect(parser *p, pv *c, size_t base, size_t n) {
  if (c->type == PV_DICT && n % 2)
    return fail(p, "odd number of items for a dict");
  for (size_t i = 0; i < n; i++)
    if (add_item(p, c, p->stack[base + i]))
      return -1;
  return 0;
}

static int str_op(parser *p, pv_type t, size_t lenbytes) {
  const unsigned char *s;
  if (take(p, lenbytes, &s))
    return -1;
  uint64_t n = le(s, lenbytes);
  if (n > p->len - p->pos || n > UINT32_MAX)
    return fail(p, "truncated: a string or bytes longer than the data left");
  pv *v = node(p, t);
  if (!v)
    return out_of_memory(p);
  v->s = (const char *)p->b + p->pos;
  v->len = (uint32_t)n;
  p->pos += n;
  return push(p, v);
}

static int long_op(parser *p, size_t lenbytes) {
  const unsigned char *s;
  if (take(p, lenbytes, &s))
    return -1;
  uint64_t n = le(s, lenbytes);
  if (n > p->len - p->pos)
    return fail(p, "truncated: a long longer than the data left");
  pv *v = node(p, PV_INT);
  if (!v)
    return out_of_memory(p);
  const unsigned char *d = p->b + p->pos;
  p->pos += n;
  if (n > 8) {
    v->big = 1;
  } else if (n) {
    uint64_t u = le(d, n);
    if (n < 8 && (d[n - 1] & 0x80))
      u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    v->i = (int64_t)u;
  }
  return push(p, v);
}

static int opaque(parser *p, int pops) {
  for (int i = 0; i < pops; i++)
    if (pop_drop(p))
      return -1;
  return push(p, node(p, PV_OBJECT));
}

static int step(parser *p, int *stop) {
  /* set by take and pop_mark where they succeed; initialised for GCC 13,
   * which cannot see that (-Wmaybe-uninitialized) */
  const unsigned char *a = NULL;
  p->op_at = p->pos;
  if (p->pos >= p->len)
    return fail(p, "truncated: no STOP opcode");
  unsigned char op = p->b[p->pos++];
  pv *v, *k;
  size_t base = 0, n = 0;
  switch (op) {
  case 0x80: /* PROTO */
    if (take(p, 1, &a))
      return -1;
    if (a[0] > 5)
      return fail(p, "pickle protocol above 5");
    return 0;
  case 0x95: /* FRAME: the frame's bytes follow inline */
    return take(p, 8, &a);
  case '.':
    *stop = 1;
    return 0;
  case '}':
    return push(p, node(p, PV_DICT));
  case ']':
  case ')':
  case 0x8f: /* EMPTY_SET */
    return push(p, node(p, PV_LIST));
  case '(':
    /* cap_marks is 0 or 64 doubled: the next doubling would pass MAX_STACK */
    if (p->nmarks == p->cap_marks && p->cap_marks >= MAX_STACK)
      return fail(p, "too many MARKs");
    if (array_grow((void **)&p->marks, &p->cap_marks, p->nmarks + 1, sizeof *p->marks, 64) != 0)
      return out_of_memory(p);
    p->marks[p->nmarks++] = p->sp;
    return 0;
  case 's': { /* SETITEM */
    pv *d;
    if (!(v = pop(p)) || !(k = pop(p)) || !(d = top(p)))
      return -1;
    if (d->type == PV_OBJECT) {
      drop(p, k);
      drop(p, v);
      return 0;
    }
    if (d->type != PV_DICT)
      return fail(p, "SETITEM on something not a dict");
    return add_item(p, d, k) || add_item(p, d, v);
  }
  case 'u':  /* SETITEMS */
  case 'e':  /* APPENDS */
  case 0x90: /* ADDITEMS */
    if (pop_mark(p, &base, &n) || !(v = top(p)))
      return -1;
    if (v->type == PV_OBJECT) { /* items of an object we do not model */
      drop_range(p, base, n);
      return 0;
    }
    if (v->type != (op == 'u' ? PV_DICT : PV_LIST))
      return fail(p, op == 'u' ? "SETITEMS on something not a dict"
                               : "APPENDS on something not a list or set");
    return collect(p, v, base, n);
  case 'a': /* APPEND */
    if (!(k = pop(p)) || !(v = top(p)))
      return -1;
    if (v->type == PV_OBJECT) {
      drop(p, k);
      return 0;
    }
    if (v->type != PV_LIST)
      return fail(p, "APPEND on something not a list");
    return add_item(p, v, k);
  case 't':  /* TUPLE */
  case 0x91: /* FROZENSET */
    if (pop_mark(p, &base, &n))
      return -1;
    if (!(v = node(p, PV_LIST)))
      return out_of_memory(p);
    return collect(p, v, base, n) || push(p, v);
  case 0x85:
  case 0x86:
  case 0x87: /* TUPLE1..3 */
    n = (size_t)(op - 0x84);
    if (p->sp < n + (p->nmarks ? p->marks[p->nmarks - 1] : 0))
      return fail(p, "stack underflow");
    if (!(v = node(p, PV_LIST)))
      return out_of_memory(p);
    p->sp -= n;
    return collect(p, v, p->sp, n) || push(p, v);
  case 'J':
    if (take(p, 4, &a))
      return -1;
    if (!(v = node(p, PV_INT)))
      return out_of_memory(p);
    v->i = (int32_t)(uint32_t)le(a, 4);
    return push(p, v);
  case 'K':
  case 'M':
    if (take(p, op == 'K' ? 1 : 2, &a))
      return -1;
    if (!(v = node(p, PV_INT)))
      return out_of_memory(p);
    v->i = (int64_t)le(a, op == 'K' ? 1 : 2);
    return push(p, v);
  case 0x8a:
    return long_op(p, 1);
  case 0x8b:
    return long_op(p, 4);
  case 'G': {
    if (take(p, 8, &a))
      return -1;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
      u = u << 8 | a[i];
    if (!(v = node(p, PV_FLOAT)))
      return out_of_memory(p);
    memcpy(&v->f, &u, sizeof u);
    return push(p, v);
  }
  case 'N':
    return push(p, node(p, PV_NONE));
  case 0x88:
  case 0x89:
    if (!(v = node(p, PV_BOOL)))
      return out_of_memory(p);
    v->i = op == 0x88;
    return push(p, v);
  case 0x8c:
    return str_op(p, PV_STR, 1);
  case 'X':
    return str_op(p, PV_STR, 4);
  case 0x8d:
    return str_op(p, PV_STR, 8);
  case 'U':
  case 'C':
    return str_op(p, op == 'U' ? PV_STR : PV_BYTES, 1);
  case 'T':
  case 'B':
    return str_op(p, op == 'T' ? PV_STR : PV_BYTES, 4);
  case 0x8e:
  case 0x96:
    return str_op(p, PV_BYTES, 8);
  case 'q':
  case 'r':
    if (take(p, op == 'q' ? 1 : 4, &a) || !(v = top(p)))
      return -1;
    return memo_put(p, (size_t)le(a, op == 'q' ? 1 : 4), v);
  case 0x94: /* MEMOIZE */
    if (!(v = top(p)))
      return -1;
    return memo_put(p, p->memo_next++, v);
  case 'h':
  case 'j':
    if (take(p, op == 'h' ? 1 : 4, &a))
      return -1;
    return memo_get(p, (size_t)le(a, op == 'h' ? 1 : 4));
  case '0':
    return pop_drop(p);
  case '1':
    if (pop_mark(p, &base, &n))
      return -1;
    drop_range(p, base, n);
    return 0;
  case '2':
    if (!(v = top(p)))
      return -1;
    v->held = 1;
    return push(p, v);
  case 'c': { /* GLOBAL module\nname\n: an object we do not model */
    for (int line = 0; line < 2; line++) {
      const void *nl = memchr(p->b + p->pos, '\n', p->len - p->pos);
      if (!nl)
        return fail(p, "truncated: GLOBAL without its newline");
      p->pos = (size_t)((const unsigned char *)nl - p->b) + 1;
    }
    return push(p, node(p, PV_OBJECT));
  }
  case 0x93: /* STACK_GLOBAL */
  case 'R':  /* REDUCE */
  case 0x81: /* NEWOBJ */
    return opaque(p, 2);
  case 0x92: /* NEWOBJ_EX */
    return opaque(p, 3);
  case 'Q': /* BINPERSID */
    return opaque(p, 1);
  case 'b': /* BUILD: the state is dropped, the object stays */
    return pop_drop(p) || !top(p) ? -1 : 0;
  case 0x82:
  case 0x83:
  case 0x84: /* EXT1/2/4 */
    if (take(p, op == 0x82 ? 1 : op == 0x83 ? 2 : 4, &a))
      return -1;
    return push(p, node(p, PV_OBJECT));
  case 0x97: /* NEXT_BUFFER: out-of-band data is not in the file */
    return fail(p, "out-of-band buffer (protocol 5 NEXT_BUFFER) not supported");
  case 0x98: /* READONLY_BUFFER */
    return top(p) ? 0 : -1;
  default: {
    char what[64];
    snprintf(what, sizeof what, "unsupported pickle opcode 0x%02x", op);
    return fail(p, what);
  }
  }
}

int pickle_load(const unsigned char *buf, size_t len, pickle_doc **out, char *err, size_t errlen) {
  parser p = {.b = buf, .len = len, .err = err, .errlen = errlen};
  *out = NULL;
  p.doc = calloc(1, sizeof *p.doc);
  if (!p.doc) {
    out_of_memory(&p);
    return PICKLE_HOST_OOM;
  }
  int stop = 0, r = 0;
  if (len == 0)
    r = fail(&p, "empty input");
  while (!r && !stop)
    r = step(&p, &stop);
  if (!r) {
    if (p.sp != 1 || p.nmarks)
      r = fail(&p, "STOP with a stack that does not hold one value");
    else
      p.doc->root = p.stack[0];
  }
  free(p.stack);
  free(p.marks);
  free(p.memo);
  if (r) {
    pickle_free(p.doc);
    return p.host_oom ? PICKLE_HOST_OOM : PICKLE_MALFORMED;
  }
  *out = p.doc;
  return 0;
}

const pv *pickle_root(const pickle_doc *d) {
  return d->root;
}

void pickle_free(pickle_doc *d) {
  if (!d)
    return;
  for (chunk *c = d->chunks, *next; c; c = next) {
    next = c->next;
    for (size_t i = 0; i < c->used; i++)
      free(c->node[i].items);
    free(c);
  }
  free(d);
}

int pv_is_str(const pv *v, const char *s) {
  size_t n = strlen(s);
  return v && v->type == PV_STR && v->len == n && !memcmp(v->s, s, n);
}

const pv *pv_get(const pv *d, const char *key) {
  if (!d || d->type != PV_DICT)
    return NULL;
  for (uint32_t i = d->len; i-- > 0;) /* a key given twice: the last, as Python keeps it */
    if (pv_is_str(d->items[2 * i], key))
      return d->items[2 * i + 1];
  return NULL;
}
