/* gzip of one body by several threads (agent/http_gzip_parallel.h): for
 * every size around the chunk boundaries and every thread count, zlib's
 * inflate in gzip mode reads back exactly the input as one member that ends
 * exactly at the end of the buffer, with the header zlib writes and a
 * trailer of the input's CRC-32 and length; one chunk is byte for byte the
 * serial compressor's output; the dictionary keeps matches across chunks. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "agent/http_gzip.h"
#include "agent/http_gzip_parallel.h"
#include "helpers/gzip_check.h"

#define CHUNK HTTP_GZIP_CHUNK_MIN

static uint32_t le32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Compresses in[0..n) with p and checks everything about the result; the
 * compressed size. */
static size_t check(http_gzip_par *p, const uint8_t *in, size_t n, uint8_t *back) {
  size_t cap = http_gzip_par_bound(p, n);
  uint8_t *z = malloc(cap);
  cr_assert_not_null(z);
  size_t zlen = http_gzip_par_run(p, (const char *)in, n, z, cap);
  cr_assert_gt(zlen, 18u, "%zu bytes, %u threads: failed", n, http_gzip_par_threads(p));
  cr_assert_leq(zlen, cap);
  static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3};
  cr_assert_arr_eq(z, header, sizeof header, "the gzip header zlib writes at level 1");
  cr_assert_eq(gz_read_member(z, zlen, back, n + 1), n, "%zu bytes, %u threads", n,
               http_gzip_par_threads(p));
  cr_assert(n == 0 || memcmp(back, in, n) == 0, "%zu bytes, %u threads: other bytes back", n,
            http_gzip_par_threads(p));
  cr_assert_eq(le32(z + zlen - 8), (uint32_t)crc32(0L, in, (uInt)n), "the trailer's CRC");
  cr_assert_eq(le32(z + zlen - 4), (uint32_t)n, "the trailer's ISIZE");
  free(z);
  return zlen;
}

Test(http_gzip_parallel, every_size_and_thread_count_reads_back) {
  static const unsigned threads[] = {1, 2, 3, 4, 8};
  size_t sizes[64];
  size_t ns = 0;
  sizes[ns++] = 0;
  sizes[ns++] = 1;
  sizes[ns++] = 100;
  for (size_t k = 1; k <= 9; k++) { /* where the chunk count changes, and around it */
    sizes[ns++] = k * CHUNK - 1;
    sizes[ns++] = k * CHUNK;
    sizes[ns++] = k * CHUNK + 1;
  }
  sizes[ns++] = 161 * 1000; /* a scrape of 8 devices x 4 pools */
  sizes[ns++] = 1000 * 1000;
  uint8_t *in = malloc(1000 * 1000), *back = malloc(1000 * 1000 + 1);
  cr_assert(in && back);
  for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
    http_gzip_par *p = http_gzip_par_new(threads[t]);
    cr_assert_not_null(p);
    cr_assert_eq(http_gzip_par_threads(p), threads[t]);
    for (size_t i = 0; i < ns; i++)
      for (int kind = 0; kind < 3; kind++) {
        gz_fill(in, sizes[i], kind);
        check(p, in, sizes[i], back);
      }
    http_gzip_par_free(p);
  }
  free(in);
  free(back);
}

Test(http_gzip_parallel, chunks_are_at_least_the_minimum_and_at_most_the_threads) {
  http_gzip_par *p = http_gzip_par_new(4);
  cr_assert_not_null(p);
  cr_assert_eq(http_gzip_par_chunks(p, 0), 1);
  cr_assert_eq(http_gzip_par_chunks(p, 2 * CHUNK - 1), 1);
  cr_assert_eq(http_gzip_par_chunks(p, 2 * CHUNK), 2);
  cr_assert_eq(http_gzip_par_chunks(p, 4 * CHUNK), 4);
  cr_assert_eq(http_gzip_par_chunks(p, 100 * CHUNK), 4);
  http_gzip_par_free(p);
  p = http_gzip_par_new(1);
  cr_assert_eq(http_gzip_par_chunks(p, 100 * CHUNK), 1);
  http_gzip_par_free(p);
}

/* One chunk (a small body, or one thread) is the serial path: the same
 * bytes as one zlib gzip stream. */
Test(http_gzip_parallel, one_chunk_is_the_serial_compressors_output) {
  static uint8_t in[200000];
  gz_fill(in, sizeof in, 0);
  static const unsigned threads[] = {1, 4};
  static const size_t sizes[] = {0, 1, CHUNK - 1, 2 * CHUNK - 1, sizeof in};
  for (size_t t = 0; t < 2; t++) {
    http_gzip_par *p = http_gzip_par_new(threads[t]);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      if (http_gzip_par_chunks(p, sizes[i]) != 1)
        continue;
      size_t cap = http_gzip_par_bound(p, sizes[i]);
      uint8_t *z = malloc(cap);
      size_t zlen = http_gzip_par_run(p, (const char *)in, sizes[i], z, cap);
      char *serial;
      size_t slen;
      cr_assert_eq(http_gzip((const char *)in, sizes[i], &serial, &slen), 0);
      cr_assert_eq(zlen, slen, "%zu bytes, %u threads", sizes[i], threads[t]);
      cr_assert_arr_eq(z, serial, zlen, "%zu bytes, %u threads", sizes[i], threads[t]);
      free(serial);
      free(z);
    }
    http_gzip_par_free(p);
  }
}

/* Random bytes repeated with a period shorter than the dictionary: serially
 * the repeats cost almost nothing; a chunk without the bytes before it as a
 * dictionary would carry a period of random bytes of its own. */
Test(http_gzip_parallel, the_dictionary_keeps_matches_across_chunks) {
  enum { PERIOD = HTTP_GZIP_DICT / 2 };
  static uint8_t in[8 * CHUNK], back[8 * CHUNK + 1];
  gz_fill(in, PERIOD, 1);
  for (size_t i = 1; i < sizeof in / PERIOD; i++)
    memcpy(in + i * PERIOD, in, PERIOD);
  http_gzip_par *p = http_gzip_par_new(4);
  cr_assert_eq(http_gzip_par_chunks(p, sizeof in), 4);
  size_t zlen = check(p, in, sizeof in, back);
  cr_assert_lt(zlen, 2 * PERIOD, "%zu bytes: chunks did not match into the one before", zlen);
  http_gzip_par_free(p);
}

/* Text compresses about as well in chunks as serially. */
Test(http_gzip_parallel, ratio_close_to_serial) {
  static uint8_t in[1000 * 1000], back[1000 * 1000 + 1];
  gz_fill(in, sizeof in, 0);
  http_gzip_par *one = http_gzip_par_new(1), *four = http_gzip_par_new(4);
  size_t serial = check(one, in, sizeof in, back);
  size_t parallel = check(four, in, sizeof in, back);
  cr_assert_lt(parallel, serial + serial / 50, "4 threads %zu bytes, 1 thread %zu", parallel,
               serial);
  http_gzip_par_free(one);
  http_gzip_par_free(four);
}

Test(http_gzip_parallel, too_little_room_writes_nothing_and_bad_counts_are_refused) {
  static uint8_t in[5 * CHUNK];
  gz_fill(in, sizeof in, 1);
  http_gzip_par *p = http_gzip_par_new(4);
  size_t cap = http_gzip_par_bound(p, sizeof in);
  uint8_t *z = malloc(cap);
  cr_assert_eq(http_gzip_par_run(p, (const char *)in, sizeof in, z, cap - 1), 0u,
               "less than the bound: 0, not a cut stream");
  cr_assert_gt(http_gzip_par_run(p, (const char *)in, sizeof in, z, cap), 0u,
               "the compressor still works after a refusal");
  free(z);
  http_gzip_par_free(p);
  cr_assert_null(http_gzip_par_new(0));
  cr_assert_null(http_gzip_par_new(HTTP_GZIP_MAX_THREADS + 1));
  http_gzip_par_free(NULL);
}
