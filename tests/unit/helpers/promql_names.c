#include "promql_names.h"

#include <ctype.h>
#include <string.h>

static int ident_start(int c) {
  return isalpha(c) || c == '_' || c == ':';
}

static int ident_char(int c) {
  return isalnum(c) || c == '_' || c == ':';
}

/* Index past the string literal starting at s[i] (a quote), or -1. */
static long skip_string(const char *s, long i) {
  char q = s[i++];
  while (s[i] && s[i] != q)
    i += (s[i] == '\\' && q != '`' && s[i + 1]) ? 2 : 1;
  return s[i] ? i + 1 : -1;
}

/* Index past the bracketed group opening at s[i] ('(', '{' or '['), or -1. */
static long skip_group(const char *s, long i) {
  char open = s[i], close = open == '(' ? ')' : open == '{' ? '}' : ']';
  int depth = 0;
  while (s[i]) {
    if (s[i] == '"' || s[i] == '\'' || s[i] == '`') {
      if ((i = skip_string(s, i)) < 0)
        return -1;
      continue;
    }
    if (s[i] == open)
      depth++;
    if (s[i] == close && --depth == 0)
      return i + 1;
    i++;
  }
  return -1;
}

static int is_keyword(const char *w) {
  static const char *const kw[] = {"and", "or",  "unless", "bool",  "offset", "inf",
                                   "nan", "Inf", "NaN",    "atan2", NULL};
  for (int i = 0; kw[i]; i++)
    if (strcmp(w, kw[i]) == 0)
      return 1;
  return 0;
}

static int takes_label_list(const char *w) {
  static const char *const kw[] = {"by",         "without",     "on", "ignoring",
                                   "group_left", "group_right", NULL};
  for (int i = 0; kw[i]; i++)
    if (strcmp(w, kw[i]) == 0)
      return 1;
  return 0;
}

/* "sum by (x) (...)": an aggregation whose modifier comes first. */
static int modifier_follows(const char *s) {
  static const char *const mod[] = {"by", "without", NULL};
  for (int i = 0; mod[i]; i++) {
    size_t n = strlen(mod[i]);
    if (strncmp(s, mod[i], n) == 0 && !ident_char((unsigned char)s[n]))
      return 1;
  }
  return 0;
}

int promql_metric_names(const char *s, void (*fn)(void *arg, const char *name), void *arg) {
  int count = 0;
  long i = 0;
  while (s[i]) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\'' || c == '`') {
      if ((i = skip_string(s, i)) < 0)
        return -1;
    } else if (c == '{' || c == '[') {
      if ((i = skip_group(s, i)) < 0)
        return -1;
    } else if (c == '$') { /* a template variable */
      i++;
      while (ident_char((unsigned char)s[i]))
        i++;
    } else if (isdigit(c) || (c == '.' && isdigit((unsigned char)s[i + 1]))) {
      while (isalnum((unsigned char)s[i]) || s[i] == '.' ||
             ((s[i] == '+' || s[i] == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E')))
        i++;
    } else if (ident_start(c)) {
      char word[PROMQL_NAME_MAX];
      size_t n = 0;
      while (ident_char((unsigned char)s[i])) {
        if (n + 1 < sizeof word)
          word[n++] = s[i];
        i++;
      }
      word[n] = '\0';
      long j = i;
      while (isspace((unsigned char)s[j]))
        j++;
      if (takes_label_list(word)) {
        if (s[j] == '(' && (i = skip_group(s, j)) < 0)
          return -1;
      } else if (s[j] != '(' && !is_keyword(word) && !modifier_follows(s + j)) {
        fn(arg, word);
        count++;
      }
    } else {
      i++;
    }
  }
  return count;
}

int promql_ranges(const char *s, void (*fn)(void *arg, const char *range), void *arg) {
  int count = 0;
  for (long i = 0; s[i];) {
    if (s[i] == '"' || s[i] == '\'' || s[i] == '`') {
      if ((i = skip_string(s, i)) < 0)
        return count;
    } else if (s[i] == '{') {
      if ((i = skip_group(s, i)) < 0)
        return count;
    } else if (s[i] == '[') {
      long end = skip_group(s, i);
      if (end < 0)
        return count;
      char range[PROMQL_NAME_MAX];
      size_t n =
          (size_t)(end - i - 2) < sizeof range - 1 ? (size_t)(end - i - 2) : sizeof range - 1;
      memcpy(range, s + i + 1, n);
      range[n] = '\0';
      fn(arg, range);
      count++;
      i = end;
    } else {
      i++;
    }
  }
  return count;
}
