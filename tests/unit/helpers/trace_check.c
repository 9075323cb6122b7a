#include "trace_check.h"

#include <criterion/criterion.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/trace_writer.h"

/* ---- query arguments ------------------------------------------------------ */

static const char *pair_value(const char *pair) {
  const char *eq = strchr(pair, '=');
  return eq ? eq + 1 : "";
}

static int pair_has_key(const char *pair, const char *key) {
  size_t n = strlen(key);
  return strncmp(pair, key, n) == 0 && (pair[n] == '=' || pair[n] == '\0');
}

static const char *args_get(void *ctx, const char *key) {
  test_args *ta = ctx;
  for (size_t i = 0; i < ta->n; i++)
    if (pair_has_key(ta->pairs[i], key))
      return pair_value(ta->pairs[i]);
  return NULL;
}

static void args_each(void *ctx, void (*fn)(void *, const char *, const char *), void *arg) {
  test_args *ta = ctx;
  for (size_t i = 0; i < ta->n; i++) {
    const char *eq = strchr(ta->pairs[i], '=');
    size_t klen = eq ? (size_t)(eq - ta->pairs[i]) : strlen(ta->pairs[i]);
    if (klen >= sizeof ta->key)
      klen = sizeof ta->key - 1;
    memcpy(ta->key, ta->pairs[i], klen);
    ta->key[klen] = '\0';
    fn(arg, ta->key, pair_value(ta->pairs[i]));
  }
}

endpoint_args test_args_make(test_args *ta, const char *const *pairs, size_t n) {
  ta->pairs = pairs;
  ta->n = n;
  endpoint_args a = {.get = args_get, .each = args_each, .ctx = ta};
  return a;
}

/* ---- reading ---------------------------------------------------------------- */

char *trace_read_all(const trace_query *q, size_t chunk, size_t *len) {
  trace_stream *s = trace_stream_open(q);
  if (!s)
    return NULL;
  size_t cap = 1 << 16, n = 0;
  char *doc = malloc(cap + 1);
  char *buf = malloc(chunk);
  ssize_t got = -1;
  while (doc && buf && (got = trace_stream_read(s, buf, chunk)) > 0) {
    if (n + (size_t)got > cap) {
      while (n + (size_t)got > cap)
        cap *= 2;
      char *d = realloc(doc, cap + 1);
      if (!d)
        break;
      doc = d;
    }
    memcpy(doc + n, buf, (size_t)got);
    n += (size_t)got;
  }
  trace_stream_close(s);
  free(buf);
  if (got != 0) {
    free(doc);
    return NULL;
  }
  doc[n] = '\0';
  if (len)
    *len = n;
  return doc;
}

char *trace_read_query(const char *const *pairs, size_t n, size_t chunk) {
  test_args ta;
  endpoint_args a = test_args_make(&ta, pairs, n);
  trace_query q;
  char err[256];
  if (trace_query_parse(&q, &a, err, sizeof err) != 0)
    return NULL;
  return trace_read_all(&q, chunk, NULL);
}

/* ---- format rules ------------------------------------------------------------- */

static int fail(char *why, size_t whylen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
  return -1;
}

static int is_hex_string(const cJSON *v) {
  if (!cJSON_IsString(v) || strncmp(v->valuestring, "0x", 2) != 0 || !v->valuestring[2])
    return 0;
  for (const char *p = v->valuestring + 2; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return 0;
  return 1;
}

/* Sets of small records kept in growable arrays (tests only: linear search). */
typedef struct track {
  double pid, tid, last_ts;
} track;
typedef struct counter_keys {
  double pid;
  char name[256];
  char keys[512]; /* the arg names, joined */
} counter_keys;
typedef struct open_async {
  double pid;
  char cat[32], id[32], name[256];
} open_async;
typedef struct named {
  double pid, tid;
  int thread; /* 0 process_name, 1 thread_name */
} named;

typedef struct checker {
  track *tracks;
  size_t ntracks;
  counter_keys *counters;
  size_t ncounters;
  open_async *open;
  size_t nopen;
  named *names;
  size_t nnames;
} checker;

#define PUSH(arr, n, item)                                                                         \
  do {                                                                                             \
    arr = realloc(arr, (n + 1) * sizeof *arr);                                                     \
    arr[n++] = item;                                                                               \
  } while (0)

static int has_name(const checker *c, double pid, double tid, int thread) {
  for (size_t i = 0; i < c->nnames; i++)
    if (c->names[i].pid == pid && c->names[i].thread == thread &&
        (!thread || c->names[i].tid == tid))
      return 1;
  return 0;
}

static int check_args_addresses(const cJSON *args) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(args, "address");
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(args, "stream");
  return (!a || is_hex_string(a)) && (!s || is_hex_string(s));
}

static int check_counter(checker *c, const cJSON *ev, double pid, const char *name, char *why,
                         size_t whylen) {
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
  if (!cJSON_IsObject(args) || !args->child)
    return fail(why, whylen, "counter %s without args", name);
  char keys[512] = "";
  for (const cJSON *a = args->child; a; a = a->next) {
    if (!cJSON_IsNumber(a))
      return fail(why, whylen, "counter %s: arg %s is not a number", name, a->string);
    strncat(keys, a->string, sizeof keys - strlen(keys) - 2);
    strcat(keys, ",");
  }
  /* A memory counter's requested bytes are bytes of allocated blocks. */
  const cJSON *requested = cJSON_GetObjectItemCaseSensitive(args, "requested");
  const cJSON *allocated = cJSON_GetObjectItemCaseSensitive(args, "allocated");
  if (requested && allocated && requested->valuedouble > allocated->valuedouble)
    return fail(why, whylen, "counter %s: requested %.0f above allocated %.0f", name,
                requested->valuedouble, allocated->valuedouble);
  for (size_t i = 0; i < c->ncounters; i++)
    if (c->counters[i].pid == pid && strcmp(c->counters[i].name, name) == 0) {
      if (strcmp(c->counters[i].keys, keys) != 0)
        return fail(why, whylen, "counter %s: keys %s then %s", name, c->counters[i].keys, keys);
      return 0;
    }
  counter_keys k = {.pid = pid};
  snprintf(k.name, sizeof k.name, "%s", name);
  snprintf(k.keys, sizeof k.keys, "%s", keys);
  PUSH(c->counters, c->ncounters, k);
  return 0;
}

static int check_async(checker *c, const cJSON *ev, char ph, double pid, const char *name,
                       char *why, size_t whylen) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(ev, "id");
  const cJSON *cat = cJSON_GetObjectItemCaseSensitive(ev, "cat");
  if (!is_hex_string(id) || !cJSON_IsString(cat))
    return fail(why, whylen, "async %s without hex id or cat", name);
  for (size_t i = 0; i < c->nopen; i++) {
    open_async *o = &c->open[i];
    if (o->pid == pid && strcmp(o->cat, cat->valuestring) == 0 &&
        strcmp(o->id, id->valuestring) == 0 && strcmp(o->name, name) == 0) {
      if (ph == 'b')
        return fail(why, whylen, "async %s id %s opened twice", name, id->valuestring);
      c->open[i] = c->open[--c->nopen];
      return 0;
    }
  }
  if (ph == 'e')
    return fail(why, whylen, "async end %s id %s without begin", name, id->valuestring);
  open_async o = {.pid = pid};
  snprintf(o.cat, sizeof o.cat, "%s", cat->valuestring);
  snprintf(o.id, sizeof o.id, "%s", id->valuestring);
  snprintf(o.name, sizeof o.name, "%s", name);
  PUSH(c->open, c->nopen, o);
  return 0;
}

static int check_event(checker *c, const cJSON *ev, char *why, size_t whylen) {
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph");
  const cJSON *ts = cJSON_GetObjectItemCaseSensitive(ev, "ts");
  const cJSON *pid = cJSON_GetObjectItemCaseSensitive(ev, "pid");
  const cJSON *tid = cJSON_GetObjectItemCaseSensitive(ev, "tid");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(ev, "name");
  if (!cJSON_IsString(ph) || strlen(ph->valuestring) != 1 || !cJSON_IsNumber(ts) ||
      !cJSON_IsNumber(pid) || !cJSON_IsNumber(tid) || !cJSON_IsString(name))
    return fail(why, whylen, "event without ph/ts/pid/tid/name");
  char p = ph->valuestring[0];
  if (!strchr("MCbeXi", p))
    return fail(why, whylen, "unexpected ph %c", p);
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
  if (args && (!cJSON_IsObject(args) || !check_args_addresses(args)))
    return fail(why, whylen, "%s: args not an object or address/stream not hex", name->valuestring);
  if (p == 'M') {
    int thread = strcmp(name->valuestring, "thread_name") == 0;
    if (thread || strcmp(name->valuestring, "process_name") == 0) {
      const cJSON *n = cJSON_GetObjectItemCaseSensitive(args, "name");
      if (!cJSON_IsString(n) || !*n->valuestring)
        return fail(why, whylen, "%s without args.name", name->valuestring);
      named nm = {pid->valuedouble, tid->valuedouble, thread};
      PUSH(c->names, c->nnames, nm);
    }
    return 0;
  }
  /* Timeline events: named process and thread, time order per track. */
  if (!has_name(c, pid->valuedouble, 0, 0))
    return fail(why, whylen, "%s: pid %.0f has no process_name before it", name->valuestring,
                pid->valuedouble);
  if (!has_name(c, pid->valuedouble, tid->valuedouble, 1))
    return fail(why, whylen, "%s: tid %.0f has no thread_name before it", name->valuestring,
                tid->valuedouble);
  track *t = NULL;
  for (size_t i = 0; i < c->ntracks && !t; i++)
    if (c->tracks[i].pid == pid->valuedouble && c->tracks[i].tid == tid->valuedouble)
      t = &c->tracks[i];
  if (!t) {
    track nt = {pid->valuedouble, tid->valuedouble, ts->valuedouble};
    PUSH(c->tracks, c->ntracks, nt);
  } else if (ts->valuedouble < t->last_ts) {
    return fail(why, whylen, "%s: ts %.3f before %.3f on track %.0f/%.0f", name->valuestring,
                ts->valuedouble, t->last_ts, pid->valuedouble, tid->valuedouble);
  } else {
    t->last_ts = ts->valuedouble;
  }
  switch (p) {
  case 'C':
    return check_counter(c, ev, pid->valuedouble, name->valuestring, why, whylen);
  case 'b':
  case 'e':
    return check_async(c, ev, p, pid->valuedouble, name->valuestring, why, whylen);
  case 'X': {
    const cJSON *dur = cJSON_GetObjectItemCaseSensitive(ev, "dur");
    if (!cJSON_IsNumber(dur) || dur->valuedouble < 0)
      return fail(why, whylen, "%s: X without a dur >= 0", name->valuestring);
    return 0;
  }
  case 'i': {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(ev, "s");
    if (!cJSON_IsString(s) || !strchr("gpt", s->valuestring[0]) || s->valuestring[1])
      return fail(why, whylen, "%s: instant without scope g/p/t", name->valuestring);
    return 0;
  }
  }
  return 0;
}

int trace_check_format(const cJSON *root, char *why, size_t whylen) {
  if (!cJSON_IsObject(root))
    return fail(why, whylen, "not a JSON object");
  const cJSON *unit = cJSON_GetObjectItemCaseSensitive(root, "displayTimeUnit");
  if (!cJSON_IsString(unit) || strcmp(unit->valuestring, "ns") != 0)
    return fail(why, whylen, "displayTimeUnit is not \"ns\"");
  const cJSON *other = cJSON_GetObjectItemCaseSensitive(root, "otherData");
  static const char *const strings[] = {"version", "hostname"};
  static const char *const numbers[] = {"pid", "events_dropped", "baseTimeNanoseconds"};
  if (!cJSON_IsObject(other))
    return fail(why, whylen, "no otherData");
  for (size_t i = 0; i < 2; i++)
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(other, strings[i])))
      return fail(why, whylen, "otherData.%s is not a string", strings[i]);
  for (size_t i = 0; i < 3; i++)
    if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(other, numbers[i])))
      return fail(why, whylen, "otherData.%s is not a number", numbers[i]);
  const cJSON *events = trace_events(root);
  if (!cJSON_IsArray(events))
    return fail(why, whylen, "traceEvents is not an array");
  checker c = {0};
  int rc = 0;
  for (const cJSON *ev = events->child; ev && rc == 0; ev = ev->next)
    rc = cJSON_IsObject(ev) ? check_event(&c, ev, why, whylen)
                            : fail(why, whylen, "an event is not an object");
  free(c.tracks);
  free(c.counters);
  free(c.open);
  free(c.names);
  return rc;
}

cJSON *trace_parse_checked(char *doc) {
  cr_assert_not_null(doc, "the trace could not be read");
  cJSON *root = cJSON_Parse(doc);
  cr_assert_not_null(root, "the trace is not valid JSON: %.200s", doc);
  char why[512];
  cr_assert_eq(trace_check_format(root, why, sizeof why), 0, "format: %s", why);
  free(doc);
  return root;
}

const cJSON *trace_events(const cJSON *root) {
  return cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
}

int trace_count(const cJSON *root, const char *ph, const char *name) {
  int n = 0;
  const cJSON *ev;
  cJSON_ArrayForEach(ev, trace_events(root)) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(ev, "ph");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(ev, "name");
    if (cJSON_IsString(p) && strcmp(p->valuestring, ph) == 0 &&
        (!name || (cJSON_IsString(nm) && strstr(nm->valuestring, name))))
      n++;
  }
  return n;
}

double trace_other_number(const cJSON *root, const char *key) {
  const cJSON *other = cJSON_GetObjectItemCaseSensitive(root, "otherData");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(other, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}
