/* The advisor's inputs: the PyTorch snapshot reader on pickles written by
 * Python's own pickle (protocols 2, 4 and 5, tests/unit/advisor_snapshot.py),
 * /trace documents, GPUPOOL_RECORD files, and every kind of bad input: a
 * clear error naming the line or byte offset, never a crash. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <iconv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpupool/advisor.h"
#include "gpupool/gpupool.h"
#include "gpupool/host.h"
#include "pool/pool_view.h"

static char dir[] = "/tmp/gpupool_advisor_inXXXXXX";

static void setup(void) {
  cr_assert(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

static void path_of(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", dir, name);
}

static void write_file(const char *path, const void *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  cr_assert_eq(fwrite(buf, 1, len, f), len);
  cr_assert_eq(fclose(f), 0);
}

static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n + 1);
  cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* Writes the snapshot and its record twin with the given pickle protocol. */
static void make_snapshot(int protocol, char *pk, char *rec, size_t n) {
  char name[64], cmd[1024];
  snprintf(name, sizeof name, "s%d.pickle", protocol);
  path_of(pk, n, name);
  snprintf(name, sizeof name, "s%d.record", protocol);
  path_of(rec, n, name);
  const char *src = getenv("GPUPOOL_SOURCE_DIR");
  snprintf(cmd, sizeof cmd, "python3 %s/tests/unit/advisor_snapshot.py %s %s %d", src ? src : ".",
           pk, rec, protocol);
  cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

/* Fails (GPUPOOL_ERR_INVALID) with a message holding want. */
static void expect_bad_pool(const char *path, const char *format, const char *pool,
                            const char *want) {
  gpupool_history *h = (gpupool_history *)1;
  gpupool_status st = gpupool_history_load(path, format, pool, &h);
  cr_expect_neq(st, GPUPOOL_OK, "%s (pool %s) loaded", path, pool ? pool : "NULL");
  cr_expect_null(h);
  if (want)
    cr_expect(strstr(gpupool_last_error(), want), "error '%s' lacks '%s'", gpupool_last_error(),
              want);
  if (st == GPUPOOL_OK)
    gpupool_history_free(h);
}

static void expect_bad(const char *path, const char *format, const char *want) {
  expect_bad_pool(path, format, NULL, want);
}

TestSuite(advisor_inputs, .init = setup, .fini = teardown);

Test(advisor_inputs, torch_snapshot_protocols) {
  for (int proto = 2; proto <= 5; proto++) {
    if (proto == 3)
      continue;
    char pk[256], rec[256];
    make_snapshot(proto, pk, rec, sizeof pk);
    gpupool_history *hp, *hr;
    cr_assert_eq(gpupool_history_load(pk, NULL, NULL, &hp), GPUPOOL_OK, "%s", gpupool_last_error());
    cr_assert_eq(gpupool_history_load(rec, "record", NULL, &hr), GPUPOOL_OK, "%s",
                 gpupool_last_error());
    const gpupool_history_info *ip = gpupool_history_get_info(hp),
                               *ir = gpupool_history_get_info(hr);
    cr_expect_str_eq(ip->format, "torch");
    cr_expect_eq(ip->events, ir->events, "protocol %d: %llu events, record %llu", proto,
                 (unsigned long long)ip->events, (unsigned long long)ir->events);
    cr_expect_eq(ip->allocations, ir->allocations);
    cr_expect_gt(ip->record_streams, 0);
    cr_expect_eq(ip->record_streams, ir->record_streams);
    cr_expect_eq(ip->peak_requested, ir->peak_requested);
    cr_expect_gt(ip->duration_s, 0);
    const char *confs[] = {"", "expandable_segments:True", "strategy:round"};
    for (int c = 0; c < 3; c++) {
      gpupool_replay_result a, b;
      cr_assert_eq(gpupool_replay(hp, confs[c], (uint64_t)1 << 34, &a), GPUPOOL_OK);
      cr_assert_eq(gpupool_replay(hr, confs[c], (uint64_t)1 << 34, &b), GPUPOOL_OK);
      cr_expect_eq(a.peak_reserved, b.peak_reserved);
      cr_expect_eq(a.device_allocs, b.device_allocs);
      cr_expect_eq(a.sync_events, b.sync_events);
      cr_expect_gt(a.sync_events, 0);
    }
    gpupool_history_free(hp);
    gpupool_history_free(hr);
  }
}

/* Every prefix of a small snapshot, a stride of prefixes of the whole one,
 * and random byte corruptions: an error naming a byte, or (for a corruption
 * that still parses) a history; never a crash. */
Test(advisor_inputs, torch_snapshot_truncated_and_corrupt) {
  char pk[256], rec[256], bad[256];
  make_snapshot(4, pk, rec, sizeof pk);
  path_of(bad, sizeof bad, "bad.pickle");
  size_t len;
  unsigned char *buf = read_file(pk, &len);
  for (size_t n = 1; n < len; n += n < 2048 ? 1 : 997) {
    write_file(bad, buf, n);
    expect_bad(bad, "torch", "byte ");
  }
  uint64_t s = 88172645463325252ULL;
  for (int i = 0; i < 300; i++) {
    unsigned char *c = malloc(len);
    memcpy(c, buf, len);
    for (int k = 0; k < 4; k++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      c[s % len] = (unsigned char)(s >> 32);
    }
    write_file(bad, c, len);
    free(c);
    gpupool_history *h = NULL;
    if (gpupool_history_load(bad, "torch", NULL, &h) == GPUPOOL_OK)
      gpupool_history_free(h);
    else
      cr_expect(strstr(gpupool_last_error(), "bad.pickle"), "%s", gpupool_last_error());
  }
  free(buf);
}

Test(advisor_inputs, torch_snapshot_bad_documents) {
  char p[256];
  path_of(p, sizeof p, "x.pickle");
  /* protocol 2 pickle of {"segments": []}: no device_traces */
  static const unsigned char no_traces[] = {0x80, 2,   '}', 'q', 0,   'X', 8,   0,   0,   0,  's',
                                            'e',  'g', 'm', 'e', 'n', 't', 's', ']', 's', '.'};
  write_file(p, no_traces, sizeof no_traces);
  expect_bad(p, NULL, "no device_traces");
  static const unsigned char proto9[] = {0x80, 9, 'N', '.'};
  write_file(p, proto9, sizeof proto9);
  expect_bad(p, NULL, "byte 0: pickle protocol above 5");
  static const unsigned char bad_op[] = {0x80, 2, 'N', 0xff, '.'};
  write_file(p, bad_op, sizeof bad_op);
  expect_bad(p, NULL, "byte 3: unsupported pickle opcode 0xff");
  static const unsigned char underflow[] = {0x80, 2, 's', '.'};
  write_file(p, underflow, sizeof underflow);
  expect_bad(p, NULL, "byte 2: stack underflow");
  static const unsigned char bad_get[] = {0x80, 2, 'h', 7, '.'};
  write_file(p, bad_get, sizeof bad_get);
  expect_bad(p, NULL, "byte 2: memo get");
  static const unsigned char two_values[] = {0x80, 2, 'N', 'N', '.'};
  write_file(p, two_values, sizeof two_values);
  expect_bad(p, NULL, "STOP with a stack");
  /* {"device_traces": [[{"action": 5}]]} */
  static const unsigned char bad_entry[] = {0x80, 2,   '}', 'X', 13,  0,   0,   0,   'd', 'e', 'v',
                                            'i',  'c', 'e', '_', 't', 'r', 'a', 'c', 'e', 's', ']',
                                            ']',  '}', 'X', 6,   0,   0,   0,   'a', 'c', 't', 'i',
                                            'o',  'n', 'K', 5,   's', 'a', 'a', 's', '.'};
  write_file(p, bad_entry, sizeof bad_entry);
  expect_bad(p, "torch", "device_traces[0][0] is not a trace entry");
  /* {"device_traces": [[{"action": "alloc", "addr": -1}]]} */
  static const unsigned char neg_addr[] = {
      0x80, 2,   '}', 'X', 13,  0,    0,    0,    'd',  'e', 'v', 'i', 'c', 'e', '_', 't', 'r',
      'a',  'c', 'e', 's', ']', ']',  '}',  'X',  6,    0,   0,   0,   'a', 'c', 't', 'i', 'o',
      'n',  'X', 5,   0,   0,   0,    'a',  'l',  'l',  'o', 'c', 's', 'X', 4,   0,   0,   0,
      'a',  'd', 'd', 'r', 'J', 0xff, 0xff, 0xff, 0xff, 's', 'a', 'a', 's', '.'};
  write_file(p, neg_addr, sizeof neg_addr);
  expect_bad(p, "torch", "addr, size or stream is not a non-negative integer");
}

/* A pickle written opcode by opcode (protocol 4). */
typedef struct pickle_out {
  unsigned char *b;
  size_t n, cap;
} pickle_out;

static void put(pickle_out *o, const void *s, size_t n) {
  if (o->n + n > o->cap) {
    o->cap = 2 * (o->n + n);
    o->b = realloc(o->b, o->cap);
    cr_assert_not_null(o->b);
  }
  memcpy(o->b + o->n, s, n);
  o->n += n;
}

static void put_str(pickle_out *o, const char *s) { /* SHORT_BINUNICODE */
  unsigned char head[2] = {0x8c, (unsigned char)strlen(s)};
  put(o, head, 2);
  put(o, s, strlen(s));
}

/* {"device_traces": [[ENTRIES]]}: begin_snapshot, the entries, end_snapshot. */
static void begin_snapshot(pickle_out *o) {
  put(o, "\x80\x04}", 3);
  put_str(o, "device_traces");
  put(o, "]](", 3);
}

static void end_snapshot(pickle_out *o, const char *path) {
  put(o, "eas.", 4);
  write_file(path, o->b, o->n);
  free(o->b);
  *o = (pickle_out){0};
}

/* An entry freeing address 9 of nkeys keys (decoys but for action and
 * addr), memoized as 0, then named refs - 1 more times. */
static void put_entry_named_often(pickle_out *o, int nkeys, int refs) {
  put(o, "}q\x00(", 4);
  for (int i = 0; i < nkeys - 2; i++) {
    char key[16];
    snprintf(key, sizeof key, "x%d", i);
    put_str(o, key);
    put(o, "N", 1);
  }
  put_str(o, "action");
  put_str(o, "free_requested");
  put_str(o, "addr");
  put(o, "K\x09u", 3);
  for (int i = 1; i < refs; i++)
    put(o, "h\x00", 2);
}

/* The memo lets a document name one entry many times, 2 bytes each: the
 * work per entry must not grow with the entry. An entry of 100,001 keys
 * (one key given 100,000 times) named 100,000 times is refused at once (the
 * old reader looked each field up along all its keys, at each name: 10^10
 * steps); one of 64 keys, the most, reads. */
Test(advisor_inputs, torch_entries_named_many_times) {
  char p[256];
  path_of(p, sizeof p, "many.pickle");
  pickle_out o = {0};
  begin_snapshot(&o);
  put(&o, "}q\x00(", 4);
  put_str(&o, "k");
  put(&o, "q\x01Nq\x02", 5);
  for (int i = 1; i < 100000; i++)
    put(&o, "h\x01h\x02", 4);
  put_str(&o, "action");
  put_str(&o, "segment_alloc");
  put(&o, "u", 1);
  for (int i = 1; i < 100000; i++)
    put(&o, "h\x00", 2);
  end_snapshot(&o, p);
  expect_bad(p, "torch", "device_traces[0][0] is not a trace entry (100001 keys, more than 64)");
  for (int nkeys = 64; nkeys <= 65; nkeys++) {
    begin_snapshot(&o);
    put(&o, "}(", 2);
    put_str(&o, "action");
    put_str(&o, "alloc");
    put_str(&o, "addr");
    put(&o, "K\x01", 2);
    put_str(&o, "size");
    put(&o, "M\x00\x02u", 4); /* 512 */
    put_entry_named_often(&o, nkeys, 10000);
    end_snapshot(&o, p);
    gpupool_history *h = NULL;
    if (nkeys == 65) {
      expect_bad(p, "torch", "device_traces[0][1] is not a trace entry (65 keys, more than 64)");
      continue;
    }
    cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
    const gpupool_history_info *in = gpupool_history_get_info(h);
    cr_expect_eq(in->allocations, 1);
    cr_expect_eq(in->unmatched_frees, 10000);
    gpupool_history_free(h);
  }
}

/* A key given twice in an entry: the last value, as Python reads it. */
Test(advisor_inputs, torch_entry_key_given_twice) {
  char p[256];
  path_of(p, sizeof p, "twice.pickle");
  pickle_out o = {0};
  begin_snapshot(&o);
  put(&o, "}(", 2);
  put_str(&o, "action");
  put_str(&o, "segment_alloc");
  put_str(&o, "addr");
  put(&o, "K\x07", 2);
  put_str(&o, "size");
  put(&o, "K\x01", 2);
  put_str(&o, "action");
  put_str(&o, "alloc");
  put_str(&o, "size");
  put(&o, "M\x00\x02u", 4); /* 512 */
  end_snapshot(&o, p);
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  const gpupool_history_info *in = gpupool_history_get_info(h);
  cr_expect_eq(in->allocations, 1);
  cr_expect_eq(in->peak_requested, 512);
  gpupool_history_free(h);
}

/* --pool N of a snapshot is a device ordinal in decimal digits, as
 * docs/advisor.md says: the old reader (strtoul) also took " 1", "+1" and
 * "1" after any white space, so a typo chose a device. */
Test(advisor_inputs, torch_device_is_decimal) {
  char p[256];
  path_of(p, sizeof p, "devices.pickle");
  pickle_out o = {0};
  put(&o, "\x80\x04}", 3);
  put_str(&o, "device_traces");
  put(&o, "](]](", 5); /* device 0: no entries; device 1: one allocation */
  put(&o, "}(", 2);
  put_str(&o, "action");
  put_str(&o, "alloc");
  put_str(&o, "addr");
  put(&o, "K\x01", 2);
  put_str(&o, "size");
  put(&o, "M\x00\x02u", 4); /* 512 */
  put(&o, "ees.", 4);
  write_file(p, o.b, o.n);
  free(o.b);
  static const char *ok[] = {"1", "01"};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    gpupool_history *h = NULL;
    cr_assert_eq(gpupool_history_load(p, "torch", ok[i], &h), GPUPOOL_OK, "'%s': %s", ok[i],
                 gpupool_last_error());
    cr_expect_eq(gpupool_history_get_info(h)->allocations, 1, "'%s'", ok[i]);
    gpupool_history_free(h);
  }
  static const char *bad[] = {" 1", "+1", "1 ", "-0", "0x1", "1e0", "", "18446744073709551617"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char want[64];
    snprintf(want, sizeof want, "no device '%s' in device_traces (2 devices)", bad[i]);
    expect_bad_pool(p, "torch", bad[i], want);
  }
}

Test(advisor_inputs, record_file_errors) {
  static const struct {
    const char *text, *want, *format;
  } cases[] = {
      {"a 0x10 100 0\nx 1\n", ":2: expected", "record"},
      {"a 0x10 100\n", ":1: expected", "record"},
      {"a 0x10 0 0\n", ":1: expected", "record"},
      {"a 0x10 -5 0\n", ":1: expected", "record"},
      {"# c\n\na 0x10 12abc 0\n", ":3: expected", "record"},
      {"a 1 10 0\na 1 10 0\n", ":2: allocation 0x1 is already live", "record"},
      {"f 1 2\n", ":1: expected", "record"},
      {"r 1\n", ":1: expected", "record"},
      {"a 99999999999999999999999 1 0\n", ":1: expected", "record"},
      {"a 1 281474976710657 0\n", ":1: allocation 0x1 of 281474976710657 bytes is larger than 2^48",
       "record"},
      {"", "no allocation events", "record"},
      {"# only a comment\n", "no allocation events", "record"},
      /* blank lines before the first, read to tell the format, still count */
      {"\n\n\na 1 100 0\nbogus\n", "bad.record:5: expected", NULL},
      {" \n\t\n\na 1 100 0\nbogus\n", "bad.record:5: expected", NULL},
      {"\n\na 1 100 0\nf 1", "bad.record:4: the file ends inside this line", NULL},
  };
  char p[256];
  path_of(p, sizeof p, "bad.record");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_file(p, cases[i].text, strlen(cases[i].text));
    expect_bad(p, cases[i].format, cases[i].want);
  }
  write_file(p, "a 1 10 0\n\0f 1\n", 14);
  expect_bad(p, "record", ":2: a NUL byte");
  /* frees and record_streams of unknown ids (older than the history) are
   * skipped and counted; a request of 2^48 bytes, the largest, is read */
  const char *ok = "f 0x99\na 0x10 100 0x0\nr 0x10 0x5\nr 0x98 0x5\nf 0x10\na (nil) 7 0\n"
                   "a 0x20 281474976710656 0\n";
  write_file(p, ok, strlen(ok));
  gpupool_history *h;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  const gpupool_history_info *in = gpupool_history_get_info(h);
  cr_expect_eq(in->unmatched_frees, 1);
  cr_expect_eq(in->unmatched_record_streams, 1);
  cr_expect_eq(in->allocations, 3);
  cr_expect_eq(in->record_streams, 1);
  cr_expect_eq(in->live_at_end, 2);
  cr_expect_eq(in->streams, 2);
  gpupool_history_free(h);
}

/* One file for a process's devices: device N's allocations name it after
 * the stream; a free or record_stream belongs to the device its id is live
 * on. One device is read: the one asked for, else the busiest. */
Test(advisor_inputs, record_files_of_several_devices) {
  static const char text[] = "f 0xdead\n"
                             "a 0x1000 1073741824 0x0\n"
                             "a 0x9000 1073741824 0x0 1\n"
                             "a 0x5000 100 0x0 1\n"
                             "f 0x1000\n"
                             "r 0x5000 0x7\n"
                             "f 0x9000\n"
                             "f 0x5000\n";
  char p[256];
  path_of(p, sizeof p, "devices.record");
  write_file(p, text, strlen(text));
  static const struct {
    const char *pool;
    uint64_t allocations, peak, record_streams;
    const char *source;
  } want[] = {
      {NULL, 2, 1073741824 + 100, 1, "devices.record (device 1)"},
      {"1", 2, 1073741824 + 100, 1, "devices.record (device 1)"},
      {"0", 1, 1073741824, 0, "devices.record (device 0)"},
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    gpupool_history *h;
    cr_assert_eq(gpupool_history_load(p, NULL, want[i].pool, &h), GPUPOOL_OK, "%s",
                 gpupool_last_error());
    const gpupool_history_info *in = gpupool_history_get_info(h);
    cr_expect_eq(in->allocations, want[i].allocations, "pool %s", want[i].pool);
    cr_expect_eq(in->peak_requested, want[i].peak, "pool %s", want[i].pool);
    cr_expect_eq(in->record_streams, want[i].record_streams, "pool %s", want[i].pool);
    cr_expect_eq(in->unmatched_frees, 1, "f 0xdead, live on no device");
    cr_expect(strstr(in->source, want[i].source), "%s", in->source);
    gpupool_history_free(h);
  }
  expect_bad_pool(p, NULL, "2", "no allocations on device '2' (devices in the file: 0, 1)");
  expect_bad_pool(p, NULL, "x", "no allocations on device 'x'");
  /* a file of device 0 alone is named by its path, as before */
  static const char one[] = "a 0x1000 100 0x0\nf 0x1000\n";
  write_file(p, one, strlen(one));
  gpupool_history *h;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_null(strstr(gpupool_history_get_info(h)->source, "(device"), "%s",
                 gpupool_history_get_info(h)->source);
  gpupool_history_free(h);
  static const char *const bad[] = {"a 1 10 0 4096\n", "a 1 10 0 -1\n", "a 1 10 0 0x1\n",
                                    "a 1 10 0 1 2\n"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    write_file(p, bad[i], strlen(bad[i]));
    expect_bad(p, NULL, "devices.record:1: expected");
  }
}

/* Numbers are decimal or 0x-hex, as docs/advisor.md says and the writers
 * print them: a leading 0 is no octal (the old reader took 010 for 8 and
 * refused 0009), and anything else is an error naming the line. */
Test(advisor_inputs, record_numbers_are_decimal_or_hex) {
  static const struct {
    const char *size;
    uint64_t bytes;
  } ok[] = {
      {"010", 10},
      {"0009", 9},
      {"0x10", 16},
      {"0X1f", 31},
      {"0x0001", 1},
      {"281474976710656", (uint64_t)1 << 48},
      {"0x00000000000000000000000000000100", 256},
  };
  char p[256], text[128];
  path_of(p, sizeof p, "numbers.record");
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    snprintf(text, sizeof text, "a 010 %s 0x0\nf 10\n", ok[i].size);
    write_file(p, text, strlen(text));
    gpupool_history *h = NULL;
    cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s: %s", ok[i].size,
                 gpupool_last_error());
    const gpupool_history_info *in = gpupool_history_get_info(h);
    cr_expect_eq(in->peak_requested, ok[i].bytes, "%s: %llu bytes", ok[i].size,
                 (unsigned long long)in->peak_requested);
    cr_expect_eq(in->frees, 1, "%s: the free of id 10 (written 010) did not match", ok[i].size);
    gpupool_history_free(h);
  }
  static const char *bad[] = {"1e3",
                              "0x",
                              "0b1",
                              "0o7",
                              "0x1g",
                              "12a",
                              "+5",
                              "0x-1",
                              "18446744073709551616",
                              "0x10000000000000000"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(text, sizeof text, "a 1 4096 0\na 2 %s 0\n", bad[i]);
    write_file(p, text, strlen(text));
    expect_bad(p, "record", "numbers.record:2: expected");
  }
  /* the largest id */
  const char *max = "a 18446744073709551615 1 0xffffffffffffffff\nf 0xFFFFFFFFFFFFFFFF\n";
  write_file(p, max, strlen(max));
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(gpupool_history_get_info(h)->frees, 1);
  gpupool_history_free(h);
}

/* Writers end every line with a newline: a file whose last line has none
 * was cut short, and is refused on that line (the old reader read the cut
 * number: "a 2 1073741824 0" cut after "a 2 10" was an allocation of 10
 * bytes). Every file the project ships still loads. */
Test(advisor_inputs, record_cut_short_is_refused) {
  char p[256];
  path_of(p, sizeof p, "cut.record");
  static const char *cut[] = {"a 1 4096 0\na 2 10", "a 1 4096 0\nf 1", "a 1 4096 0\n# a comm",
                              "a 1 4096 0\n  "};
  for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
    write_file(p, cut[i], strlen(cut[i]));
    expect_bad(p, NULL,
               "cut.record:2: the file ends inside this line (no newline after it): truncated");
  }
  const char *src = getenv("GPUPOOL_SOURCE_DIR");
  static const char *shipped[] = {"cnn_train_60steps.trace", "lm_train_24steps.trace"};
  for (size_t i = 0; i < sizeof shipped / sizeof *shipped; i++) {
    char data[512];
    snprintf(data, sizeof data, "%s/tests/data/%s", src ? src : ".", shipped[i]);
    gpupool_history *h = NULL;
    cr_assert_eq(gpupool_history_load(data, NULL, NULL, &h), GPUPOOL_OK, "%s",
                 gpupool_last_error());
    cr_expect_gt(gpupool_history_get_info(h)->allocations, 1000);
    gpupool_history_free(h);
  }
}

/* A line is read into a bounded buffer: an input without newlines is an
 * error at its first line once the limit is passed (not a buffer as large
 * as the input), a NUL byte at once; separators and comments of any length
 * are still read. */
Test(advisor_inputs, record_lines_are_bounded) {
  char p[256];
  path_of(p, sizeof p, "long.record");
  size_t n = (size_t)64 << 20; /* 64 MiB of digits, no newline */
  char *big = malloc(n);
  cr_assert(big);
  memset(big, '1', n);
  memcpy(big, "a 1 ", 4);
  write_file(p, big, n);
  expect_bad(p, "record", "long.record:1: a line longer than 65536 bytes");
  /* a line at the limit (separator runs count as one byte) is read */
  FILE *f = fopen(p, "w");
  cr_assert(f);
  fprintf(f, "a 0x10 100 0\n#");
  fwrite(big, 1, (size_t)1 << 20, f); /* a comment of 1 MiB */
  fprintf(f, "\n  \t a 0x20 ");
  for (int i = 0; i < 100000; i++)
    fputs(" \t", f);
  fprintf(f, "0x%0*x 0\r\nf 0x20\n", 65536 - 12, 200); /* "a 0x20 0x..c8 0\r": 65536 */
  fclose(f);
  gpupool_history *h;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  const gpupool_history_info *in = gpupool_history_get_info(h);
  cr_expect_eq(in->allocations, 2);
  cr_expect_eq(in->frees, 1);
  cr_expect_eq(in->peak_requested, 300);
  gpupool_history_free(h);
  /* one byte more is refused, on its line */
  f = fopen(p, "w");
  cr_assert(f);
  fprintf(f, "a 0x10 100 0\na 0x20 0x%0*x 0\n", 65536 - 10, 200);
  fclose(f);
  expect_bad(p, "record", "long.record:2: a line longer than 65536 bytes");
  /* NUL bytes without a newline: refused at the first */
  memset(big, 0, n);
  write_file(p, big, n);
  expect_bad(p, NULL, "long.record:1: a NUL byte");
  free(big);
}

/* A history may use as many streams as a pool serves (1024), not one more. */
Test(advisor_inputs, record_files_use_as_many_streams_as_a_pool) {
  char p[256];
  path_of(p, sizeof p, "streams.record");
  for (int n = 1024; n <= 1025; n++) {
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < n; i++)
      fprintf(f, "a 0x%x 512 0x%x\nf 0x%x\n", i + 1, i + 1, i + 1);
    fclose(f);
    gpupool_history *h = NULL;
    gpupool_status st = gpupool_history_load(p, NULL, NULL, &h);
    if (n == 1024) {
      cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
      cr_expect_eq(gpupool_history_get_info(h)->streams, 1024);
      gpupool_advice_options o = {.no_defaults = 1, .current = "strategy:bfc", .no_capacity = 1};
      gpupool_advice *adv = NULL;
      cr_expect_eq(gpupool_advise(h, &o, &adv), GPUPOOL_OK, "%s", gpupool_last_error());
      gpupool_advice_free(adv);
      gpupool_history_free(h);
    } else {
      cr_expect_neq(st, GPUPOOL_OK);
      cr_expect(strstr(gpupool_last_error(), "more than 1024 streams"), "%s", gpupool_last_error());
    }
  }
}

/* Fails with status want_st and a message holding want. */
static void expect_status(gpupool_status st, gpupool_status want_st, const char *want) {
  cr_expect_eq(st, want_st, "status %d (%s), not %d: %s", st, gpupool_status_string(st), want_st,
               gpupool_last_error());
  cr_expect(strstr(gpupool_last_error(), want), "error '%s' lacks '%s'", gpupool_last_error(),
            want);
}

static void put_int(pickle_out *o, uint32_t v) { /* BININT */
  unsigned char b[5] = {'J', (unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  put(o, b, 5);
}

/* A history of more streams than a pool serves is malformed input
 * (GPUPOOL_ERR_INVALID, "more than 1024 streams"), whichever reader finds
 * it and wherever the stream comes from (an allocation, a record_stream, or
 * the "other stream" of a free that waited on events); it is not the host
 * out of memory, nor the device's GPUPOOL_ERR_OOM. Here each has 1024
 * streams already. */
Test(advisor_inputs, streams_beyond_a_pools_are_invalid_input) {
  gpupool_history *h = NULL;
  char p[256];
  path_of(p, sizeof p, "streams.record");
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  fprintf(f, "a 1 4096 0\n");
  for (int i = 1; i <= 1024; i++)
    fprintf(f, "r 1 %d\n", i);
  fclose(f);
  expect_status(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_ERR_INVALID,
                "streams.record:1025: more than 1024 streams");

  path_of(p, sizeof p, "streams.json");
  f = fopen(p, "w");
  cr_assert_not_null(f);
  fprintf(f, "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":1000002,"
             "\"args\":{\"name\":\"pool p (host, bfc)\"}}");
  for (int i = 0; i < 1024; i++)
    fprintf(f,
            ",{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,\"ts\":%d,\"id\":\"0x%x\","
            "\"args\":{\"requested\":4096,\"stream\":\"0x%x\"}}",
            i, 0x1000 + i, i);
  fprintf(f, ",{\"ph\":\"e\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,\"ts\":2000,\"id\":"
             "\"0x1000\",\"args\":{\"deferred\":1}}]}");
  fclose(f);
  expect_status(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_ERR_INVALID,
                "streams.json: traceEvents[1025]: more than 1024 streams");

  path_of(p, sizeof p, "streams.pickle");
  pickle_out o = {0};
  begin_snapshot(&o);
  for (uint32_t i = 0; i < 1024; i++) {
    put(&o, "}(", 2);
    put_str(&o, "action");
    put_str(&o, "alloc");
    put_str(&o, "addr");
    put_int(&o, 0x1000 + i);
    put_str(&o, "size");
    put_int(&o, 4096);
    put_str(&o, "stream");
    put_int(&o, i);
    put(&o, "u", 1);
  }
  put(&o, "}(", 2); /* a free whose free_completed is not next: it waited */
  put_str(&o, "action");
  put_str(&o, "free_requested");
  put_str(&o, "addr");
  put_int(&o, 0x1000);
  put(&o, "u}(", 3);
  put_str(&o, "action");
  put_str(&o, "free_completed");
  put_str(&o, "addr");
  put_int(&o, 0x1001);
  put(&o, "u", 1);
  end_snapshot(&o, p);
  expect_status(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_ERR_INVALID,
                "device_traces[0][1024]: more than 1024 streams");

  /* a pool that serves 1024 streams, one block's free deferred by a
   * record_stream: its rings' history needs a 1025th */
  pool_events_enable(64);
  gpupool_options opt = {
      .backend = GPUPOOL_BACKEND_HOST, .host_capacity = (size_t)4 << 30, .ignore_env = 1};
  gpupool *pool;
  cr_assert_eq(gpupool_create(&opt, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
  static gpupool_host_stream *streams[1024];
  void *first = NULL;
  for (int i = 0; i < 1024; i++) {
    streams[i] = i ? gpupool_host_stream_create() : NULL;
    void *b;
    cr_assert_eq(gpupool_malloc(pool, &b, 4096, streams[i]), GPUPOOL_OK, "%d: %s", i,
                 gpupool_last_error());
    if (!first)
      first = b;
  }
  gpupool_host_stream_enqueue(streams[1]);
  cr_assert_eq(gpupool_record_stream(pool, first, streams[1]), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(pool, first), GPUPOOL_OK);
  expect_status(gpupool_history_from_pool(pool, &h), GPUPOOL_ERR_INVALID, "more than 1024 streams");
  gpupool_host_stream_complete(streams[1]);
  gpupool_destroy(pool);
  pool_events_disable();
  for (int i = 1; i < 1024; i++)
    gpupool_host_stream_destroy(streams[i]);
}

static const char trace_doc[] =
    "{\"traceEvents\":[\n"
    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":1000002,\"args\":{\"name\":\"pool "
    "main (host, bfc)\"}},\n"
    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":1000004,\"args\":{\"name\":\"pool "
    "side (host, bfc)\"}},\n"
    "{\"ph\":\"i\",\"name\":\"free\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,\"ts\":1,\"s\":"
    "\"t\",\"args\":{\"address\":\"0x900\",\"size\":512,\"requested\":1,\"stream\":\"0x0\","
    "\"deferred\":0}},\n"
    "{\"ph\":\"b\",\"name\":\"pool main alloc\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,"
    "\"ts\":2,\"id\":\"0x1000\",\"args\":{\"address\":\"0x1000\",\"size\":3145728,\"requested\":"
    "3000000,\"stream\":\"0x0\",\"source\":\"device\"}},\n"
    "{\"ph\":\"b\",\"name\":\"pool main alloc\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,"
    "\"ts\":3,\"id\":\"0x5000\",\"args\":{\"address\":\"0x5000\",\"size\":1024,\"requested\":"
    "1000,\"stream\":\"0x7\",\"source\":\"device\"}},\n"
    "{\"ph\":\"b\",\"name\":\"pool side alloc\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000004,"
    "\"ts\":3,\"id\":\"0x1000\",\"args\":{\"address\":\"0x1000\",\"size\":512,\"requested\":"
    "100,\"stream\":\"0x0\",\"source\":\"device\"}},\n"
    "{\"ph\":\"e\",\"name\":\"pool main alloc\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,"
    "\"ts\":4,\"id\":\"0x1000\",\"args\":{\"deferred\":1}},\n"
    "{\"ph\":\"i\",\"name\":\"empty_cache\",\"cat\":\"pool\",\"pid\":1,\"tid\":1000002,\"ts\":5,"
    "\"s\":\"t\",\"args\":{\"released\":0,\"reserved_after\":0,\"allocated_after\":0,"
    "\"stream\":\"0x0\"}},\n"
    "{\"ph\":\"C\",\"name\":\"pool main memory\",\"pid\":1,\"tid\":1000002,\"ts\":5,\"args\":{"
    "\"allocated\":0}}\n"
    "],\"displayTimeUnit\":\"ns\"}\n";

Test(advisor_inputs, trace_documents) {
  char p[256];
  path_of(p, sizeof p, "t.json");
  write_file(p, trace_doc, strlen(trace_doc));
  gpupool_history *h;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  const gpupool_history_info *in = gpupool_history_get_info(h);
  cr_expect_str_eq(in->format, "trace");
  cr_expect(strstr(in->source, "pool main"), "%s", in->source);
  cr_expect_eq(in->allocations, 2);
  cr_expect_eq(in->frees, 1);
  cr_expect_eq(in->record_streams, 1);
  cr_expect_eq(in->empty_caches, 1);
  cr_expect_eq(in->unmatched_frees, 1);
  cr_expect_eq(in->peak_requested, 3001000);
  gpupool_replay_result r;
  cr_assert_eq(gpupool_replay(h, NULL, (uint64_t)1 << 30, &r), GPUPOOL_OK);
  cr_expect_eq(r.peak_allocated, 3000320 + 1024); /* rounded to 512 bytes */
  cr_expect_eq(r.sync_events, 1);
  gpupool_history_free(h);
  cr_assert_eq(gpupool_history_load(p, "trace", "side", &h), GPUPOOL_OK, "%s",
               gpupool_last_error());
  cr_expect_eq(gpupool_history_get_info(h)->allocations, 1);
  gpupool_history_free(h);
  cr_expect_neq(gpupool_history_load(p, "trace", "nosuch", &h), GPUPOOL_OK);
  cr_expect(strstr(gpupool_last_error(), "no pool named 'nosuch'"), "%s", gpupool_last_error());
  /* every truncation: a byte offset */
  size_t len = strlen(trace_doc) - 2; /* the whole document less "}\n" */
  for (size_t n = 1; n <= len; n += 7) {
    write_file(p, trace_doc, n);
    expect_bad(p, "trace", "byte ");
  }
  const char *bad[][2] = {
      {"{\"traceEvents\":{}}", "no traceEvents array"},
      {"{\"traceEvents\":[]}", "no pool allocation events"},
      {"{\"traceEvents\":[{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,\"id\":5}]}",
       "traceEvents[0]: allocation event without a valid id, size or stream"},
      {"[1,2", "byte 4: truncated JSON"},
      /* white space before the document, read to tell the format, counts */
      {"\n\n \n\n[1,2", "byte 9: truncated JSON"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    write_file(p, bad[i][0], strlen(bad[i][0]));
    expect_bad(p, NULL, bad[i][1]);
  }
}

/* A deferred free ("e" with deferred 1) of an id the document never
 * allocated is one unmatched free, not also a record_stream of it. */
Test(advisor_inputs, trace_deferred_free_of_an_older_allocation) {
  static const char older_free[] =
      "{\"ph\":\"e\",\"name\":\"pool main alloc\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,"
      "\"ts\":1,\"id\":\"0x900\",\"args\":{\"deferred\":1}},\n";
  const char *first = strstr(trace_doc, "{\"ph\":\"i\",\"name\":\"free\"");
  cr_assert_not_null(first);
  const char *after = strstr(first, "\n") + 1; /* the instant free's line, replaced */
  char doc[sizeof trace_doc + sizeof older_free], p[256];
  snprintf(doc, sizeof doc, "%.*s%s%s", (int)(first - trace_doc), trace_doc, older_free, after);
  path_of(p, sizeof p, "older.json");
  write_file(p, doc, strlen(doc));
  gpupool_history *h;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  const gpupool_history_info *in = gpupool_history_get_info(h);
  cr_expect_eq(in->unmatched_frees, 1);
  cr_expect_eq(in->unmatched_record_streams, 0);
  cr_expect_eq(in->record_streams, 1, "the live allocation's deferred free");
  gpupool_history_free(h);
}

/* A /trace document is JSON as RFC 8259 has it, which cJSON alone does not
 * check: bytes after the document (a second document pasted on, stray text,
 * NULs) and raw control characters inside a string (a NUL cut the pool name
 * there) are malformed, at their byte. args.deferred is read by its value,
 * 0 or 1 as the agent writes it (or false and true): before, its presence
 * alone made a free deferred, "deferred":0 included. */
Test(advisor_inputs, trace_documents_as_rfc_8259_has_them) {
  static const char doc[] =
      "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":1000002,"
      "\"args\":{\"name\":\"pool main (host, bfc)\"}},{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":1,"
      "\"tid\":1000002,\"ts\":1,\"id\":\"0x10\",\"args\":{\"requested\":4096,\"stream\":\"0x0\"}}%"
      "s]}";
  static const char free_event[] = ",{\"ph\":\"e\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,"
                                   "\"ts\":2,\"id\":\"0x10\",\"args\":{%s}}";
  char p[256], text[2048], ev[256];
  path_of(p, sizeof p, "rfc.json");
  snprintf(text, sizeof text, doc, "");
  size_t n = strlen(text);
  const char *tails[] = {" garbage", "\0\0garbage", "{}", "\n\n]"};
  const size_t tail_len[] = {8, 9, 2, 3}, bad_at[] = {1, 0, 0, 2}; /* after the document */
  for (size_t i = 0; i < 4; i++) {
    char bad[2048];
    memcpy(bad, text, n);
    memcpy(bad + n, tails[i], tail_len[i]);
    write_file(p, bad, n + tail_len[i]);
    char want[64];
    snprintf(want, sizeof want, "byte %zu: malformed JSON", n + bad_at[i]);
    expect_bad(p, NULL, want);
  }
  memcpy(text + n, " \n\t\r\n", 5); /* trailing white space is no error */
  write_file(p, text, n + 5);
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_history_free(h);
  /* a raw NUL, and a raw newline, in the pool's name */
  for (int c = 0; c < 2; c++) {
    snprintf(text, sizeof text, doc, "");
    char *at = strstr(text, "ma") + 2;
    *at = c ? '\n' : '\0';
    write_file(p, text, n);
    char want[64];
    snprintf(want, sizeof want, "byte %zu: malformed JSON", (size_t)(at - text));
    expect_bad(p, NULL, want);
  }
  /* args.deferred by its value */
  const struct {
    const char *args;
    int ok;
    uint64_t record_streams;
  } deferred[] = {{"", 1, 0},
                  {"\"deferred\":0", 1, 0},
                  {"\"deferred\":false", 1, 0},
                  {"\"deferred\":1", 1, 1},
                  {"\"deferred\":true", 1, 1},
                  {"\"deferred\":null", 0, 0},
                  {"\"deferred\":\"yes\"", 0, 0},
                  {"\"deferred\":2", 0, 0},
                  {"\"deferred\":1e300", 0, 0}};
  for (size_t i = 0; i < sizeof deferred / sizeof *deferred; i++) {
    snprintf(ev, sizeof ev, free_event, deferred[i].args);
    snprintf(text, sizeof text, doc, ev);
    write_file(p, text, strlen(text));
    if (!deferred[i].ok) {
      expect_bad(p, NULL, "traceEvents[2]: args.deferred is not 0, 1, false or true");
      continue;
    }
    cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s: %s", deferred[i].args,
                 gpupool_last_error());
    cr_expect_eq(gpupool_history_get_info(h)->record_streams, deferred[i].record_streams, "%s",
                 deferred[i].args);
    cr_expect_eq(gpupool_history_get_info(h)->frees, 1, "%s", deferred[i].args);
    gpupool_history_free(h);
  }
}

/* JSON numbers are doubles: an id, size or stream is read only if it is an
 * integer in [0, 2^64), and an event is on a pool track only if its pid and
 * tid are integers of at most 2^53 (those the agent writes). The old reader
 * cast any double to an integer (undefined behaviour beyond the range: on
 * x86, 2^63), so these loaded or failed for another reason. */
Test(advisor_inputs, trace_numbers_out_of_range) {
  static const char head[] = "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,"
                             "\"tid\":1000002,\"args\":{\"name\":\"pool p (host, bfc)\"}},";
  static const struct {
    const char *event, *want;
  } cases[] = {
      {"\"pid\":1,\"tid\":1000002,\"id\":\"0x10\",\"args\":{\"requested\":1e300,\"stream\":0}",
       "traceEvents[1]: allocation event without a valid id, size or stream"},
      {"\"pid\":1,\"tid\":1000002,\"id\":\"0x10\",\"args\":{\"requested\":1e400,\"stream\":0}",
       "traceEvents[1]: allocation event without a valid id, size or stream"},
      {"\"pid\":1,\"tid\":1000002,\"id\":\"0x10\",\"args\":{\"requested\":4096.5,\"stream\":0}",
       "traceEvents[1]: allocation event without a valid id, size or stream"},
      {"\"pid\":1,\"tid\":1000002,\"id\":1e300,\"args\":{\"requested\":4096,\"stream\":0}",
       "traceEvents[1]: allocation event without a valid id, size or stream"},
      {"\"pid\":1,\"tid\":1000002,\"id\":18446744073709551616,\"args\":{\"requested\":4096,"
       "\"stream\":0}",
       "traceEvents[1]: allocation event without a valid id, size or stream"},
      {"\"pid\":1,\"tid\":1000002,\"id\":16,\"args\":{\"requested\":4096,\"stream\":-1e300}",
       "traceEvents[1]: allocation event without a valid id, size or stream"},
      {"\"pid\":1,\"tid\":1e300,\"id\":16,\"args\":{\"requested\":4096,\"stream\":0}",
       "no pool allocation events in the trace"},
      {"\"pid\":1,\"tid\":1000002.5,\"id\":16,\"args\":{\"requested\":4096,\"stream\":0}",
       "no pool allocation events in the trace"},
      {"\"pid\":-1e300,\"tid\":1000002,\"id\":16,\"args\":{\"requested\":4096,\"stream\":0}",
       "no pool allocation events in the trace"},
  };
  char p[256], doc[1024];
  path_of(p, sizeof p, "range.json");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    snprintf(doc, sizeof doc, "%s{\"ph\":\"b\",\"cat\":\"alloc\",\"ts\":1,%s}]}", head,
             cases[i].event);
    write_file(p, doc, strlen(doc));
    expect_bad(p, NULL, cases[i].want);
  }
  /* the largest of each still reads */
  snprintf(doc, sizeof doc,
           "%s{\"ph\":\"b\",\"cat\":\"alloc\",\"ts\":1,\"pid\":1,\"tid\":1000002,"
           "\"id\":18446744073709549568,\"args\":{\"requested\":281474976710656,"
           "\"stream\":18446744073709549568}},"
           "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":9007199254740992,"
           "\"tid\":9007199254740992,\"args\":{\"name\":\"pool q (host, bfc)\"}}]}",
           head);
  write_file(p, doc, strlen(doc));
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(gpupool_history_get_info(h)->peak_requested, (uint64_t)1 << 48);
  gpupool_history_free(h);
  cr_assert_eq(gpupool_history_load(p, NULL, "q@9007199254740991", &h), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "no allocation events for pool q"), "%s",
            gpupool_last_error());
}

/* An id or stream given as a string is "0x" and hex digits, as the agent
 * writes them (docs/trace.md, docs/advisor.md), and nothing else. The old
 * reader (strtoull, base 0) read "010" as 8 (octal), skipped white space,
 * took "-1" for 2^64 - 1 and "0x" and 17 digits for 2^64 - 1, and read
 * decimal strings: each loaded a history of ids the agent never wrote. */
Test(advisor_inputs, trace_id_strings_are_hex) {
  static const char head[] = "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,"
                             "\"tid\":1000002,\"args\":{\"name\":\"pool p (host, bfc)\"}},";
  char p[256], doc[1024];
  path_of(p, sizeof p, "ids.json");
  static const struct {
    const char *text;
    uint64_t value;
  } ok[] = {{"0x10", 16},
            {"0X1f", 31},
            {"0xABCdef", 0xabcdef},
            {"0x0000000000000000000010", 16},
            {"0xffffffffffffffff", UINT64_MAX}};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    /* an allocation with the id and stream spelt so, and its free by the
     * id as the agent spells it: the free matches only if both read alike */
    snprintf(doc, sizeof doc,
             "%s{\"ph\":\"b\",\"cat\":\"alloc\",\"ts\":1,\"pid\":1,\"tid\":1000002,"
             "\"id\":\"%s\",\"args\":{\"requested\":4096,\"stream\":\"%s\"}},"
             "{\"ph\":\"e\",\"cat\":\"alloc\",\"ts\":2,\"pid\":1,\"tid\":1000002,"
             "\"id\":\"0x%llx\",\"args\":{}}]}",
             head, ok[i].text, ok[i].text, (unsigned long long)ok[i].value);
    write_file(p, doc, strlen(doc));
    gpupool_history *h = NULL;
    cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s: %s", ok[i].text,
                 gpupool_last_error());
    cr_expect_eq(gpupool_history_get_info(h)->frees, 1, "%s", ok[i].text);
    gpupool_history_free(h);
  }
  static const char *bad[] = {"010",   "16",   " 0x10", "0x10 ",  "-1",
                              "+0x10", "-0x1", "0x",    "0x1g",   "1e3",
                              "0b1",   "",     "0x 1",  "\\t0x1", "0x10000000000000000"};
  static const char *fields[][2] = {
      {"id", "\"id\":\"%s\",\"args\":{\"requested\":1,\"stream\":0}"},
      {"args.stream", "\"id\":1,\"args\":{\"requested\":1,\"stream\":\"%s\"}"},
      {"args.requested", "\"id\":1,\"args\":{\"requested\":\"%s\",\"stream\":0}"}};
  for (size_t f = 0; f < sizeof fields / sizeof *fields; f++)
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      char event[256], want[128];
      snprintf(event, sizeof event, fields[f][1], bad[i]);
      snprintf(doc, sizeof doc,
               "%s{\"ph\":\"b\",\"cat\":\"alloc\",\"ts\":1,\"pid\":1,\"tid\":1000002,%s}]}", head,
               event);
      write_file(p, doc, strlen(doc));
      snprintf(want, sizeof want,
               "ids.json: traceEvents[1]: allocation event without a valid id, size or stream: %s ",
               fields[f][0]);
      expect_bad(p, NULL, want);
    }
  /* the end of an allocation names its id the same way */
  snprintf(
      doc, sizeof doc,
      "%s{\"ph\":\"b\",\"cat\":\"alloc\",\"ts\":1,\"pid\":1,\"tid\":1000002,\"id\":\"0x8\","
      "\"args\":{\"requested\":1,\"stream\":\"0x0\"}},{\"ph\":\"e\",\"cat\":\"alloc\",\"ts\":2,"
      "\"pid\":1,\"tid\":1000002,\"id\":\"010\",\"args\":{}}]}",
      head);
  write_file(p, doc, strlen(doc));
  expect_bad(p, NULL, "traceEvents[2]: allocation event without a valid id, size or stream: id ");
}

/* A process of two devices (the demo's --device-count 2): a pool named bfc
 * on each, as docs/trace.md lays them out (pid = device ordinal + 1), and
 * a pool whose name holds an '@' and parentheses. */
static const char two_devices_doc[] =
    "{\"traceEvents\":[\n"
    "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"GPU 0\"}},\n"
    "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":2,\"tid\":2,\"args\":{\"name\":\"GPU 1\"}},\n"
    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":1000002,\"args\":{\"name\":"
    "\"pool bfc (host, bfc)\"}},\n"
    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":2,\"tid\":1000004,\"args\":{\"name\":"
    "\"pool bfc (host, bfc)\"}},\n"
    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":2,\"tid\":1000006,\"args\":{\"name\":"
    "\"pool kv@0 (x) (host, round)\"}},\n"
    "{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,\"ts\":1,\"id\":\"0x1000\","
    "\"args\":{\"size\":1048576,\"requested\":1000000,\"stream\":\"0x0\"}},\n"
    "{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":2,\"tid\":1000004,\"ts\":2,\"id\":\"0x1000\","
    "\"args\":{\"size\":4194304,\"requested\":4000000,\"stream\":\"0x0\"}},\n"
    "{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":2,\"tid\":1000004,\"ts\":3,\"id\":\"0x9000\","
    "\"args\":{\"size\":4194304,\"requested\":4000000,\"stream\":\"0x0\"}},\n"
    "{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":2,\"tid\":1000006,\"ts\":3,\"id\":\"0x9000\","
    "\"args\":{\"size\":512,\"requested\":7,\"stream\":\"0x0\"}},\n"
    "{\"ph\":\"e\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,\"ts\":4,\"id\":\"0x1000\","
    "\"args\":{}}\n"
    "]}\n";

/* --pool NAME names one pool; a name on several devices is an error that
 * lists them and says how to choose: NAME@DEVICE. */
Test(advisor_inputs, trace_pools_of_several_devices) {
  char p[256];
  path_of(p, sizeof p, "two.json");
  write_file(p, two_devices_doc, strlen(two_devices_doc));
  gpupool_history *h = (gpupool_history *)1;
  cr_expect_eq(gpupool_history_load(p, NULL, "bfc", &h), GPUPOOL_ERR_INVALID);
  cr_expect_null(h);
  cr_expect(strstr(gpupool_last_error(),
                   "two.json: 2 pools match 'bfc': bfc@0 (1 allocation), bfc@1 (2 allocations); "
                   "choose one as NAME@DEVICE (gpupool-advise --pool bfc@0)"),
            "%s", gpupool_last_error());
  const struct {
    const char *sel, *source;
    uint64_t allocations, peak;
  } ok[] = {
      {"bfc@0", "two.json (pool bfc@0)", 1, 1000000},
      {"bfc@1", "two.json (pool bfc@1)", 2, 8000000},
      {NULL, "two.json (pool bfc@1)", 2, 8000000}, /* the busiest */
      {"kv@0 (x)", "two.json (pool kv@0 (x)@1)", 1, 7},
      {"kv@0 (x)@1", "two.json (pool kv@0 (x)@1)", 1, 7},
  };
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    cr_assert_eq(gpupool_history_load(p, NULL, ok[i].sel, &h), GPUPOOL_OK, "%s: %s", ok[i].sel,
                 gpupool_last_error());
    const gpupool_history_info *in = gpupool_history_get_info(h);
    cr_expect(strstr(in->source, ok[i].source), "%s: source %s", ok[i].sel, in->source);
    cr_expect_eq(in->allocations, ok[i].allocations, "%s", ok[i].sel);
    cr_expect_eq(in->peak_requested, ok[i].peak, "%s", ok[i].sel);
    gpupool_history_free(h);
  }
  cr_expect_neq(gpupool_history_load(p, NULL, "bfc@2", &h), GPUPOOL_OK);
  cr_expect(strstr(gpupool_last_error(), "no pool named 'bfc@2' in the trace (pools: bfc@0 (1 "
                                         "allocation), bfc@1 (2 allocations), kv@0 (x)@1"),
            "%s", gpupool_last_error());
}

/* An agent may trace up to 1024 pools on each device: every track counts.
 * 5000 pools on two devices, the last the busiest; the old reader kept the
 * first 64 tracks and dropped the others' events. */
Test(advisor_inputs, trace_of_thousands_of_pools) {
  char p[256];
  path_of(p, sizeof p, "many.json");
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  fprintf(f, "{\"traceEvents\":[{}");
  enum { POOLS = 5000 };
  for (int k = 0; k < POOLS; k++) {
    int pid = 1 + k % 2, tid = 1000002 + 2 * k;
    fprintf(f,
            ",{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":"
            "\"pool p%d (host, bfc)\"}}",
            pid, tid, k);
    for (int i = 0; i < (k == POOLS - 1 ? 10 : 3); i++)
      fprintf(f,
              ",{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":%d,\"tid\":%d,\"ts\":%d,\"id\":\"0x%x\","
              "\"args\":{\"requested\":%d,\"stream\":\"0x0\"}}",
              pid, tid, i, 0x1000 * (i + 1), 512 * (k + 1));
  }
  fprintf(f, "]}");
  fclose(f);
  const struct {
    const char *sel, *source;
    uint64_t allocations, peak;
  } ok[] = {
      {NULL, "many.json (pool p4999@1)", 10, 10 * 512 * 5000}, /* the busiest */
      {"p4999", "many.json (pool p4999@1)", 10, 10 * 512 * 5000},
      {"p64@0", "many.json (pool p64@0)", 3, 3 * 512 * 65},
      {"p0", "many.json (pool p0@0)", 3, 3 * 512},
  };
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    gpupool_history *h = NULL;
    cr_assert_eq(gpupool_history_load(p, NULL, ok[i].sel, &h), GPUPOOL_OK, "%s: %s", ok[i].sel,
                 gpupool_last_error());
    const gpupool_history_info *in = gpupool_history_get_info(h);
    cr_expect(strstr(in->source, ok[i].source), "%s: source %s", ok[i].sel, in->source);
    cr_expect_eq(in->allocations, ok[i].allocations, "%s", ok[i].sel);
    cr_expect_eq(in->peak_requested, ok[i].peak, "%s", ok[i].sel);
    gpupool_history_free(h);
  }
  gpupool_history *h = NULL;
  cr_expect_eq(gpupool_history_load(p, NULL, "p5000", &h), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "no pool named 'p5000' in the trace (pools: p0@0 (3 "
                                         "allocations), p1@1 (3 allocations)"),
            "%s", gpupool_last_error());
}

/* A path is any bytes but NUL: the JSON advice (gpupool-advise --json, the
 * agent's /advice) names it in input.source, valid UTF-8 all the same
 * (RFC 8259), each byte that begins no character a U+FFFD and control
 * characters escaped. The old renderer wrote the bytes as they were: a
 * document no strict parser (Python's json, Go's, jq) reads. */
Test(advisor_inputs, json_of_a_path_that_is_not_utf8) {
  char p[256];
  path_of(p, sizeof p, "run\xff\xfe \xe2\x82\xac\x01.record");
  static const char text[] = "a 0x10 4096 0\nf 0x10\n";
  write_file(p, text, strlen(text));
  gpupool_history *h;
  cr_assert_eq(gpupool_history_load(p, NULL, NULL, &h), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_advice_options o = {.no_defaults = 1, .no_capacity = 1, .threads = 1, .max_added_ms = -1};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(h, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_history_free(h);
  char *json = gpupool_advice_render(a, "json");
  gpupool_advice_free(a);
  cr_assert_not_null(json);
  /* valid UTF-8 throughout, by glibc's decoder; no raw control character
   * but the final newline */
  size_t len = strlen(json);
  iconv_t cd = iconv_open("UTF-32LE", "UTF-8");
  cr_assert_neq(cd, (iconv_t)-1);
  char *in = json, *out_buf = malloc(4 * len), *out = out_buf;
  size_t in_left = len, out_left = 4 * len;
  cr_expect_neq(iconv(cd, &in, &in_left, &out, &out_left), (size_t)-1, "not UTF-8 at byte %zu: %s",
                (size_t)(in - json), json);
  iconv_close(cd);
  free(out_buf);
  for (size_t i = 0; i + 1 < len; i++)
    cr_expect_geq((unsigned char)json[i], 0x20, "a raw control character at byte %zu", i);
  cJSON *doc = cJSON_Parse(json);
  cr_assert_not_null(doc, "%s", json);
  const cJSON *source = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "input"), "source");
  cr_assert(cJSON_IsString(source));
  char want[256];
  path_of(want, sizeof want, "run\xef\xbf\xbd\xef\xbf\xbd \xe2\x82\xac\x01.record");
  cr_expect_str_eq(source->valuestring, want);
  cJSON_Delete(doc);
  free(json);
}

#define BOM "\xEF\xBB\xBF"

/* Writes BOM + text to path. */
static void write_marked(const char *path, const char *text) {
  char buf[4096];
  int n = snprintf(buf, sizeof buf, BOM "%s", text);
  cr_assert(n > 0 && (size_t)n < sizeof buf);
  write_file(path, buf, (size_t)n);
}

/* Loads path (format NULL: by content) and checks what it read. */
static void expect_loaded(const char *path, const char *format, const char *want_format,
                          uint64_t allocations, uint64_t peak) {
  gpupool_history *h = NULL;
  cr_assert_eq(gpupool_history_load(path, format, NULL, &h), GPUPOOL_OK, "%s (format %s): %s", path,
               format ? format : "auto", gpupool_last_error());
  const gpupool_history_info *in = gpupool_history_get_info(h);
  cr_expect_str_eq(in->format, want_format, "%s", path);
  cr_expect_eq(in->allocations, allocations, "%s: %llu allocations", path,
               (unsigned long long)in->allocations);
  cr_expect_eq(in->peak_requested, peak, "%s: peak %llu", path,
               (unsigned long long)in->peak_requested);
  gpupool_history_free(h);
}

/* A text input that begins with a UTF-8 byte-order mark (EF BB BF), as
 * Windows tools write one, is read as what follows it: a /trace document
 * as JSON, a record file as records, by content and by name. The old loader
 * saw EF, took every such input for a record file and refused its first
 * line (a JSON document: "the file ends inside this line"). */
Test(advisor_inputs, byte_order_mark_at_the_start) {
  char t[256], r[256];
  path_of(t, sizeof t, "bom.json");
  path_of(r, sizeof r, "bom.record");
  write_marked(t, trace_doc);
  expect_loaded(t, NULL, "trace", 2, 3001000);
  expect_loaded(t, "trace", "trace", 2, 3001000);
  expect_loaded(t, "auto", "trace", 2, 3001000);
  /* white space between the mark and the document */
  char spaced[4096];
  snprintf(spaced, sizeof spaced, "\r\n\t %s", trace_doc);
  write_marked(t, spaced);
  expect_loaded(t, NULL, "trace", 2, 3001000);
  write_marked(t, "[{\"ph\":\"b\",\"cat\":\"alloc\",\"pid\":1,\"tid\":1000002,\"id\":\"0x10\","
                  "\"args\":{\"requested\":4096,\"stream\":\"0x0\"}}]");
  expect_loaded(t, NULL, "trace", 1, 4096);
  static const char records[] = "# gpupool record\na 0x10 100 0\na 0x20 300 0\nf 0x10\n";
  write_marked(r, records);
  expect_loaded(r, NULL, "record", 2, 400);
  expect_loaded(r, "record", "record", 2, 400);
  write_marked(r, "a 0x10 100 0\n"); /* the mark right before the first record */
  expect_loaded(r, NULL, "record", 1, 100);
  expect_loaded(r, "record", "record", 1, 100);
}

/* Errors in a file that begins with a byte-order mark name the file's own
 * line, and the file's own byte offset, the mark's 3 bytes counted (the
 * message says so: an editor hides the mark). */
Test(advisor_inputs, byte_order_mark_error_positions) {
  char p[256];
  path_of(p, sizeof p, "bom.record");
  static const struct {
    const char *text, *format, *want;
  } cases[] = {
      {"a 1 100 0\nbogus\n", NULL, "bom.record:2: expected"},
      {"a 1 100 0\nbogus\n", "record", "bom.record:2: expected"},
      {"\n\n \na 1 100 0\nbogus\n", NULL, "bom.record:5: expected"},
      {"bogus\n", NULL, "bom.record:1: expected"},
      {"a 1 100 0\nf 1", NULL, "bom.record:2: the file ends inside this line"},
      {"[1,2", NULL,
       "bom.record: byte 7 (from the start of the file, its byte-order mark counted): "
       "truncated JSON"},
      {"[1,2", "trace",
       "bom.record: byte 7 (from the start of the file, its byte-order mark "
       "counted): truncated JSON"},
      {"\n\n \n\n[1,2", NULL, "bom.record: byte 12 (from the start of the file"},
      {"[1,x]", NULL,
       "bom.record: byte 6 (from the start of the file, its byte-order mark "
       "counted): malformed JSON"},
      {"", NULL, "no allocation events"},
      {"", "trace",
       "byte 3 (from the start of the file, its byte-order mark counted): truncated "
       "JSON"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_marked(p, cases[i].text);
    expect_bad(p, cases[i].format, cases[i].want);
  }
  /* a document without a mark: offsets as they were, nothing added */
  write_file(p, "[1,x]", 5);
  expect_bad(p, NULL, "bom.record: byte 3: malformed JSON");
}

/* A byte-order mark anywhere but at the very start (after white space, a
 * second one, in a later line or between JSON tokens) and a broken one (EF
 * BB without BF) stay errors, which say what they found. A pickle is
 * binary: no mark is skipped before one. */
Test(advisor_inputs, byte_order_mark_elsewhere_or_broken) {
  char p[256];
  path_of(p, sizeof p, "odd.json");
  static const struct {
    const char *text;
    size_t len;
    const char *format, *want;
  } cases[] = {
#define CASE(text, format, want) {text, sizeof text - 1, format, want}
      CASE("a 1 100 0\n" BOM "f 1\n", NULL,
           "odd.json:2: a UTF-8 byte-order mark inside the file (only its first bytes may be one)"),
      CASE(BOM BOM "a 1 100 0\n", NULL, "odd.json:1: a UTF-8 byte-order mark inside the file"),
      CASE(" " BOM "a 1 100 0\n", NULL, "odd.json:1: a UTF-8 byte-order mark inside the file"),
      CASE("\n" BOM "{\"traceEvents\":[]}\n", NULL,
           "odd.json:2: a UTF-8 byte-order mark inside the file"),
      CASE("a 1 100 0 " BOM "\n", "record", "odd.json:1: a UTF-8 byte-order mark inside the file"),
      CASE("{\"traceEvents\":[" BOM "]}", NULL,
           "odd.json: byte 16: a UTF-8 byte-order mark inside the document (only the file's first "
           "bytes may be one): malformed JSON"),
      CASE(BOM "{\"traceEvents\":[" BOM "]}", NULL,
           "odd.json: byte 19 (from the start of the file, its byte-order mark counted): a UTF-8 "
           "byte-order mark inside the document"),
      CASE(" " BOM "{\"traceEvents\":[]}", "trace",
           "odd.json: byte 1: a UTF-8 byte-order mark inside the document"),
      CASE(BOM BOM "{}", "trace",
           "odd.json: byte 3 (from the start of the file, its byte-order "
           "mark counted): a UTF-8 byte-order mark inside the document"),
      CASE("\xEF\xBB{\"traceEvents\":[]}", NULL,
           "odd.json: byte 2: a broken UTF-8 byte-order mark: the file begins with EF BB 7B (a "
           "mark is EF BB BF)"),
      CASE("\xEF\xBB{\"traceEvents\":[]}", "trace", "byte 2: a broken UTF-8 byte-order mark"),
      CASE("\xEF\xBB\x61 1 100 0\n", "record", "byte 2: a broken UTF-8 byte-order mark"),
      CASE("\xEF{}", NULL,
           "odd.json: byte 1: a broken UTF-8 byte-order mark: the file begins with EF 7B"),
      CASE("\xEF\xBB", NULL,
           "odd.json: byte 2: a broken UTF-8 byte-order mark: the file is EF BB and ends there"),
      CASE("\xEF", "trace", "byte 1: a broken UTF-8 byte-order mark: the file is EF and ends"),
      CASE(BOM "\x80\x02}.\n", NULL, "odd.json:1: expected"), /* text after a mark */
      CASE(BOM "\x80\x02}.", "torch", "odd.json: byte 0"),
#undef CASE
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_file(p, cases[i].text, cases[i].len);
    expect_bad(p, cases[i].format, cases[i].want);
  }
  /* a mark inside a JSON string is a character (U+FEFF) like any other,
   * and one in a record file's comment is a comment's text */
  char doc[4096];
  const char *name = strstr(trace_doc, "pool main");
  snprintf(doc, sizeof doc, "%.*s" BOM "%s", (int)(name - trace_doc), trace_doc, name);
  write_file(p, doc, strlen(doc));
  expect_loaded(p, NULL, "trace", 2, 3001000);
  static const char comment[] = "# " BOM "\na 1 100 0\n";
  write_file(p, comment, sizeof comment - 1);
  expect_loaded(p, NULL, "record", 1, 100);
}

Test(advisor_inputs, load_arguments) {
  gpupool_history *h;
  cr_expect_eq(gpupool_history_load(NULL, NULL, NULL, &h), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_history_load("/nonexistent/x", NULL, NULL, &h), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "/nonexistent/x: cannot open"), "%s",
            gpupool_last_error());
  cr_expect_eq(gpupool_history_load("/dev/null", "yaml", NULL, &h), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "unknown history format 'yaml'"), "%s",
            gpupool_last_error());
  expect_bad("/dev/null", NULL, "no allocation events");
  expect_bad("/dev/null", "torch", "byte 0: empty input");
  expect_bad("/dev/null", "trace", "byte 0");
}

#ifdef GPUPOOL_HAVE_ZLIB
#include <fcntl.h>
#include <zlib.h>

/* Writes buf gzip'd to path as one member, or appended as a further one. */
static void write_gz(const char *path, const void *buf, size_t len, int append) {
  gzFile g = gzopen(path, append ? "ab" : "wb");
  cr_assert(g);
  cr_assert_eq(gzwrite(g, buf, (unsigned)len), (int)len);
  cr_assert_eq(gzclose(g), Z_OK);
}

/* path (format NULL: by content) loads as plain does: the same format,
 * events, allocations and peak. */
static void expect_same_history(const char *path, const char *format, const char *plain) {
  gpupool_history *h, *p;
  cr_assert_eq(gpupool_history_load(path, format, NULL, &h), GPUPOOL_OK, "%s: %s", path,
               gpupool_last_error());
  cr_assert_eq(gpupool_history_load(plain, NULL, NULL, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  const gpupool_history_info *a = gpupool_history_get_info(h), *b = gpupool_history_get_info(p);
  cr_expect_str_eq(a->format, b->format, "%s", path);
  cr_expect_eq(a->events, b->events, "%s: %llu events, plain %llu", path,
               (unsigned long long)a->events, (unsigned long long)b->events);
  cr_expect_gt(a->allocations, 0);
  cr_expect_eq(a->allocations, b->allocations, "%s", path);
  cr_expect_eq(a->peak_requested, b->peak_requested, "%s", path);
  gpupool_history_free(h);
  gpupool_history_free(p);
}

#define CNN_RECORD "tests/data/cnn_train_60steps.trace"

/* Every format may come gzip'd (a /trace saved with Accept-Encoding: gzip,
 * a record file or a pickle compressed to keep): it is inflated as it is
 * read and reads as the plain file does, found by content or named;
 * members written one after the other read as their concatenation, and a
 * byte-order mark at the start of the inflated text is skipped as in a
 * plain file. The old loader took the gzip header for a record line. */
Test(advisor_inputs, gzip_compressed_inputs) {
  char gz[256], plain[256], pk[256], rec[256];
  size_t len;
  unsigned char *records = read_file(CNN_RECORD, &len);
  path_of(gz, sizeof gz, "cnn.record.gz");
  write_gz(gz, records, len, 0);
  expect_same_history(gz, NULL, CNN_RECORD);
  expect_same_history(gz, "record", CNN_RECORD);
  /* two members, cut inside a line */
  write_gz(gz, records, len / 2, 0);
  write_gz(gz, records + len / 2, len - len / 2, 1);
  expect_same_history(gz, NULL, CNN_RECORD);
  free(records);

  path_of(plain, sizeof plain, "t.json");
  write_file(plain, trace_doc, strlen(trace_doc));
  path_of(gz, sizeof gz, "t.json.gz");
  write_gz(gz, trace_doc, strlen(trace_doc), 0);
  expect_same_history(gz, NULL, plain);
  expect_same_history(gz, "trace", plain);
  char marked[4096];
  snprintf(marked, sizeof marked, BOM "%s", trace_doc);
  write_gz(gz, marked, strlen(marked), 0);
  expect_same_history(gz, NULL, plain);

  make_snapshot(4, pk, rec, sizeof pk);
  unsigned char *pickle = read_file(pk, &len);
  path_of(gz, sizeof gz, "s.pickle.gz");
  write_gz(gz, pickle, len, 0);
  free(pickle);
  expect_same_history(gz, NULL, pk);
  expect_same_history(gz, "torch", pk);
}

/* A gzip'd input cut short or corrupt is refused with zlib's reason and
 * no history, also where the reader would have made sense of the bytes
 * before the damage (a record file cut at a line's end) or stopped at the
 * garbage a damaged member inflated to (then the rest is read to find the
 * member's error). A read error and a directory are said as such. */
Test(advisor_inputs, gzip_inputs_cut_short_or_corrupt) {
  char gz[256], cut[256];
  size_t len, zlen;
  unsigned char *records = read_file(CNN_RECORD, &len);
  path_of(gz, sizeof gz, "cnn.record.gz");
  write_gz(gz, records, len, 0);
  free(records);
  unsigned char *z = read_file(gz, &zlen);
  path_of(cut, sizeof cut, "cut.gz");
  const size_t cuts[] = {2, 10, 11, zlen / 2, zlen - 8, zlen - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    write_file(cut, z, cuts[i]);
    expect_bad(cut, NULL, "a gzip'd file cut short or corrupt (unexpected end of file)");
    expect_bad(cut, "record", "cut short or corrupt");
  }
  z[zlen - 6] ^= 0x55; /* the member's CRC-32 */
  write_file(cut, z, zlen);
  expect_bad(cut, NULL, "a gzip'd file cut short or corrupt (incorrect data check) after ");
  z[zlen - 6] ^= 0x55;
  memcpy(z + zlen / 2, "XXXX", 4); /* the middle of the deflate data */
  write_file(cut, z, zlen);
  expect_bad(cut, NULL, "a gzip'd file cut short or corrupt (");
  free(z);

  expect_bad("/proc/self/mem", NULL, "/proc/self/mem: read error after 0 bytes: ");
  expect_bad(dir, NULL, "cannot open: Is a directory");
}

/* "-" reads standard input, gzip'd or not, and leaves it open. */
Test(advisor_inputs, gzip_input_on_stdin) {
  size_t len;
  unsigned char *records = read_file(CNN_RECORD, &len);
  char gz[256];
  path_of(gz, sizeof gz, "cnn.record.gz");
  write_gz(gz, records, len, 0);
  free(records);
  int saved = dup(STDIN_FILENO), fd = open(gz, O_RDONLY);
  cr_assert(saved >= 0 && fd >= 0);
  cr_assert_eq(dup2(fd, STDIN_FILENO), STDIN_FILENO);
  close(fd);
  gpupool_history *h = NULL;
  gpupool_status st = gpupool_history_load("-", NULL, NULL, &h);
  int still_open = fcntl(STDIN_FILENO, F_GETFD) != -1;
  dup2(saved, STDIN_FILENO);
  close(saved);
  cr_assert_eq(st, GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect(still_open, "standard input closed");
  gpupool_history *p;
  cr_assert_eq(gpupool_history_load(CNN_RECORD, NULL, NULL, &p), GPUPOOL_OK);
  cr_expect_str_eq(gpupool_history_get_info(h)->source, "-");
  cr_expect_eq(gpupool_history_get_info(h)->allocations, gpupool_history_get_info(p)->allocations);
  cr_expect_eq(gpupool_history_get_info(h)->events, gpupool_history_get_info(p)->events);
  cr_expect_gt(gpupool_history_get_info(p)->allocations, 0);
  gpupool_history_free(p);
  gpupool_history_free(h);
}
#endif
