#include "json_syntax.h"

#include <cjson/cJSON.h>
#include <string.h>

typedef struct cursor {
  const unsigned char *s;
  size_t n, i;
} cursor;

static int at(const cursor *c, char ch) {
  return c->i < c->n && c->s[c->i] == (unsigned char)ch;
}

static int is_digit(const cursor *c) {
  return c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9';
}

static void skip_space(cursor *c) {
  while (at(c, ' ') || at(c, '\t') || at(c, '\n') || at(c, '\r'))
    c->i++;
}

static int literal(cursor *c, const char *word) {
  size_t k = strlen(word);
  if (c->n - c->i < k || memcmp(c->s + c->i, word, k))
    return 0;
  c->i += k;
  return 1;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? of at most 63 characters:
 * cJSON copies a number into a 64-byte buffer and reads on after it. */
static int number(cursor *c) {
  size_t start = c->i;
  if (at(c, '-'))
    c->i++;
  if (at(c, '0'))
    c->i++;
  else if (is_digit(c))
    while (is_digit(c))
      c->i++;
  else
    return 0;
  if (at(c, '.')) {
    c->i++;
    if (!is_digit(c))
      return 0;
    while (is_digit(c))
      c->i++;
  }
  if (at(c, 'e') || at(c, 'E')) {
    c->i++;
    if (at(c, '+') || at(c, '-'))
      c->i++;
    if (!is_digit(c))
      return 0;
    while (is_digit(c))
      c->i++;
  }
  return c->i - start <= 63;
}

/* "\uXXXX" at the cursor (the backslash and u included): its code unit. */
static int escape_u(cursor *c, unsigned *unit) {
  if (c->n - c->i < 6 || c->s[c->i] != '\\' || c->s[c->i + 1] != 'u')
    return 0;
  *unit = 0;
  for (size_t k = 2; k < 6; k++) {
    unsigned char h = c->s[c->i + k];
    unsigned d = h >= '0' && h <= '9'   ? (unsigned)(h - '0')
                 : h >= 'a' && h <= 'f' ? (unsigned)(h - 'a' + 10)
                 : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10)
                                        : 16;
    if (d == 16)
      return 0;
    *unit = *unit << 4 | d;
  }
  c->i += 6;
  return 1;
}

/* A string, the cursor on its opening quote. */
static int string(cursor *c) {
  c->i++;
  while (c->i < c->n) {
    unsigned char ch = c->s[c->i];
    if (ch == '"') {
      c->i++;
      return 1;
    }
    if (ch < 0x20)
      return 0;
    if (ch != '\\') {
      c->i++;
      continue;
    }
    if (c->n - c->i < 2)
      return 0;
    unsigned char e = c->s[c->i + 1];
    if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
        e == 't') {
      c->i += 2;
      continue;
    }
    unsigned unit, low;
    if (!escape_u(c, &unit) || (unit >= 0xDC00 && unit <= 0xDFFF))
      return 0; /* a low surrogate must follow a high one */
    if (unit >= 0xD800 && unit <= 0xDBFF && (!escape_u(c, &low) || low < 0xDC00 || low > 0xDFFF))
      return 0; /* a high surrogate must have its low one */
  }
  return 0;
}

/* An object's key and its colon, white space before each. */
static int key(cursor *c) {
  skip_space(c);
  if (!at(c, '"') || !string(c))
    return 0;
  skip_space(c);
  if (!at(c, ':'))
    return 0;
  c->i++;
  return 1;
}

static int value_at(cursor *c);

/* One JSON value at the start of text[0, len): 1, with *stop just after it;
 * else 0, with *stop where the text stops being JSON. */
static int value(const char *text, size_t len, size_t *stop) {
  cursor c = {(const unsigned char *)text, len, 0};
  int ok = value_at(&c);
  *stop = c.i;
  return ok;
}

int json_document_ok(const char *text, size_t len, size_t *error_at) {
  size_t stop;
  if (!value(text, len, &stop)) {
    *error_at = stop;
    return 0;
  }
  cursor c = {(const unsigned char *)text, len, stop};
  skip_space(&c);
  *error_at = c.i;
  return c.i == len;
}

/* One JSON value at the cursor, which stops just after it, or where the
 * text stops being JSON. */
static int value_at(cursor *c) {
  char open[CJSON_NESTING_LIMIT]; /* '[' or '{' of each array and object entered */
  size_t depth = 0;
  for (;;) {
    /* a value */
    skip_space(c);
    if (at(c, '[') || at(c, '{')) {
      if (depth == CJSON_NESTING_LIMIT)
        return 0;
      char close = at(c, '[') ? ']' : '}';
      open[depth++] = (char)c->s[c->i++];
      skip_space(c);
      if (at(c, close)) {
        c->i++;
        depth--;
      } else {
        if (close == '}' && !key(c))
          return 0;
        continue; /* the first member's value */
      }
    } else if (at(c, '"')) {
      if (!string(c))
        return 0;
    } else if (at(c, '-') || is_digit(c)) {
      if (!number(c))
        return 0;
    } else if (!literal(c, "true") && !literal(c, "false") && !literal(c, "null")) {
      return 0;
    }
    /* after a value: the end of the document, the next member, or the end
     * of the array or object (which is a value in its turn) */
    for (;;) {
      if (depth == 0)
        return 1;
      skip_space(c);
      char close = open[depth - 1] == '[' ? ']' : '}';
      if (at(c, close)) {
        c->i++;
        depth--;
        continue;
      }
      if (!at(c, ','))
        return 0;
      c->i++;
      if (close == '}' && !key(c))
        return 0;
      break;
    }
  }
}
