#include "http_gzip_parallel.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#ifdef GPUPOOL_HAVE_ZLIB
#include <zlib.h>

/* Level and memory as http_gzip.c; windowBits -15: raw deflate, the gzip
 * wrapper is written here around the chunks. */
#define GZIP_LEVEL     1
#define GZIP_MEM_LEVEL 8
/* A sync flush adds an empty stored block (at most 5 bytes with the bits
 * that pad the last one) that deflateBound, made for Z_FINISH, leaves out. */
#define FLUSH_SLACK 16

/* What zlib writes for a gzip stream at level 1 without deflateSetHeader:
 * no name, no time, "fastest" (XFL 4), Unix (OS 3). */
static const uint8_t gzip_header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3};

/* A part is queued for its worker, then taken by the worker or, when the
 * worker has not started it by the time the caller is done with its own
 * part (its CPU busy with other work), by the caller. */
enum { PART_IDLE, PART_QUEUED, PART_TAKEN };

/* One thread's part of a body. */
typedef struct gz_part {
  z_stream z;
  http_gzip_par *owner;
  pthread_t thread;
  pthread_cond_t go; /* a worker waits here for its part to be queued */
  int state;         /* under owner->lock */
  /* The job, written by the caller before it queues the part. */
  const uint8_t *dict, *in;
  size_t dict_len, len, cap;
  uint8_t *out;
  int last;
  /* The result, read by the caller once pending is 0. */
  size_t out_len;
  uLong crc;
  int ok;
} gz_part;

struct http_gzip_par {
  pthread_mutex_t run_lock; /* one body at a time */
  pthread_mutex_t lock;     /* the parts' states and pending */
  pthread_cond_t done;
  unsigned pending; /* parts queued or taken */
  int stop;
  unsigned threads; /* parts: part[0] is the caller's, the others workers' */
  gz_part *part[HTTP_GZIP_MAX_THREADS];
};

static void compress_part(gz_part *w) {
  z_stream *z = &w->z;
  w->ok = 0;
  w->out_len = 0;
  if (deflateReset(z) != Z_OK ||
      (w->dict_len && deflateSetDictionary(z, w->dict, (uInt)w->dict_len) != Z_OK))
    return;
  z->next_in = (Bytef *)w->in;
  z->avail_in = (uInt)w->len;
  z->next_out = w->out;
  z->avail_out = (uInt)w->cap;
  int rc = deflate(z, w->last ? Z_FINISH : Z_SYNC_FLUSH);
  /* A sync flush is complete when it left room in the output. */
  w->ok = w->last ? rc == Z_STREAM_END : rc == Z_OK && z->avail_in == 0 && z->avail_out > 0;
  w->out_len = w->cap - z->avail_out;
  w->crc = crc32(0L, w->in, (uInt)w->len);
}

static void *worker_main(void *arg) {
  gz_part *w = arg;
  http_gzip_par *p = w->owner;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (w->state != PART_QUEUED && !p->stop)
      pthread_cond_wait(&w->go, &p->lock);
    if (p->stop)
      break;
    w->state = PART_TAKEN;
    pthread_mutex_unlock(&p->lock);
    compress_part(w);
    pthread_mutex_lock(&p->lock);
    w->state = PART_IDLE;
    if (--p->pending == 0)
      pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* The caller compresses the parts no worker has started, last first (the
 * last woken), then waits for the others. */
static void finish_parts(http_gzip_par *p, unsigned k) {
  pthread_mutex_lock(&p->lock);
  for (unsigned i = k - 1; i >= 1; i--) {
    gz_part *w = p->part[i];
    if (w->state != PART_QUEUED)
      continue;
    w->state = PART_TAKEN;
    pthread_mutex_unlock(&p->lock);
    compress_part(w);
    pthread_mutex_lock(&p->lock);
    w->state = PART_IDLE;
    p->pending--;
  }
  while (p->pending)
    pthread_cond_wait(&p->done, &p->lock);
  pthread_mutex_unlock(&p->lock);
}

static gz_part *part_new(http_gzip_par *p) {
  /* Cache lines of its own: deflate updates the z_stream's counters all the
   * time, next to another thread's part otherwise. */
  size_t size = (sizeof(gz_part) + 63) / 64 * 64;
  gz_part *w = aligned_alloc(64, size);
  if (w)
    memset(w, 0, size);
  if (w && deflateInit2(&w->z, GZIP_LEVEL, Z_DEFLATED, -15, GZIP_MEM_LEVEL, Z_DEFAULT_STRATEGY) !=
               Z_OK) {
    free(w);
    return NULL;
  }
  if (w)
    w->owner = p;
  return w;
}

static void part_free(gz_part *w) {
  deflateEnd(&w->z);
  free(w);
}

/* A worker with every signal blocked: they go to the program's threads. */
static int start_worker(gz_part *w) {
  if (pthread_cond_init(&w->go, NULL) != 0)
    return -1;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&w->thread, NULL, worker_main, w);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&w->go);
    return -1;
  }
  /* Named here, not by the worker: a worker the caller never needed may
   * not have run yet, and tools listing threads should see it named. */
  pthread_setname_np(w->thread, "gpupool-gzip");
  return 0;
}

http_gzip_par *http_gzip_par_new(unsigned threads) {
  if (threads < 1 || threads > HTTP_GZIP_MAX_THREADS)
    return NULL;
  http_gzip_par *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  pthread_mutex_init(&p->run_lock, NULL);
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->done, NULL);
  p->part[0] = part_new(p);
  if (!p->part[0]) {
    http_gzip_par_free(p);
    return NULL;
  }
  p->threads = 1;
  /* Fewer workers rather than none when memory or threads run out. */
  while (p->threads < threads) {
    gz_part *w = part_new(p);
    if (!w)
      break;
    if (start_worker(w) != 0) {
      part_free(w);
      break;
    }
    p->part[p->threads++] = w;
  }
  return p;
}

void http_gzip_par_free(http_gzip_par *p) {
  if (!p)
    return;
  pthread_mutex_lock(&p->lock);
  p->stop = 1;
  for (unsigned i = 1; i < p->threads; i++)
    pthread_cond_signal(&p->part[i]->go);
  pthread_mutex_unlock(&p->lock);
  for (unsigned i = 1; i < p->threads; i++) {
    pthread_join(p->part[i]->thread, NULL);
    pthread_cond_destroy(&p->part[i]->go);
  }
  for (unsigned i = 0; i < p->threads; i++)
    part_free(p->part[i]);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->run_lock);
  free(p);
}

unsigned http_gzip_par_threads(const http_gzip_par *p) {
  return p->threads;
}

unsigned http_gzip_par_chunks(const http_gzip_par *p, size_t len) {
  size_t k = len / HTTP_GZIP_CHUNK_MIN;
  return k < 1 ? 1 : k > p->threads ? p->threads : (unsigned)k;
}

/* Where chunk i of k starts (k: its end); len <= UINT_MAX and k <= 64
 * keep the product in 64 bits. */
static size_t chunk_start(size_t len, unsigned k, unsigned i) {
  return (size_t)((uint64_t)len * i / k);
}

/* Under run_lock: deflateBound reads the caller's stream. */
static size_t part_bound(http_gzip_par *p, size_t len) {
  return deflateBound(&p->part[0]->z, (uLong)len) + FLUSH_SLACK;
}

static size_t bound_locked(http_gzip_par *p, size_t len, unsigned k) {
  size_t n = sizeof gzip_header + 8;
  for (unsigned i = 0; i < k; i++)
    n += part_bound(p, chunk_start(len, k, i + 1) - chunk_start(len, k, i));
  return n;
}

size_t http_gzip_par_bound(http_gzip_par *p, size_t len) {
  if (len > UINT_MAX)
    return len;
  pthread_mutex_lock(&p->run_lock);
  size_t n = bound_locked(p, len, http_gzip_par_chunks(p, len));
  pthread_mutex_unlock(&p->run_lock);
  return n;
}

static void put_le32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(v >> (8 * i));
}

/* Under run_lock, with cap at least the bound. */
static size_t run_locked(http_gzip_par *p, const uint8_t *in, size_t len, uint8_t *out,
                         unsigned k) {
  memcpy(out, gzip_header, sizeof gzip_header);
  /* Each part writes into its own span of out, as large as its bound; the
   * spans are closed up once all are done. */
  size_t at = sizeof gzip_header;
  for (unsigned i = 0; i < k; i++) {
    gz_part *w = p->part[i];
    size_t start = chunk_start(len, k, i);
    w->in = start ? in + start : in; /* in may be NULL when len is 0 */
    w->len = chunk_start(len, k, i + 1) - start;
    w->dict_len = start < HTTP_GZIP_DICT ? start : HTTP_GZIP_DICT;
    w->dict = w->dict_len ? w->in - w->dict_len : NULL;
    w->last = i == k - 1;
    w->out = out + at;
    w->cap = part_bound(p, w->len);
    at += w->cap;
  }
  if (k > 1) {
    pthread_mutex_lock(&p->lock);
    p->pending = k - 1;
    for (unsigned i = 1; i < k; i++) {
      p->part[i]->state = PART_QUEUED;
      pthread_cond_signal(&p->part[i]->go);
    }
    pthread_mutex_unlock(&p->lock);
  }
  compress_part(p->part[0]);
  if (k > 1)
    finish_parts(p, k);

  for (unsigned i = 0; i < k; i++)
    if (!p->part[i]->ok)
      return 0;
  size_t pos = sizeof gzip_header;
  uLong crc = 0;
  for (unsigned i = 0; i < k; i++) {
    gz_part *w = p->part[i];
    memmove(out + pos, w->out, w->out_len);
    pos += w->out_len;
    crc = i == 0 ? w->crc : crc32_combine(crc, w->crc, (z_off_t)w->len);
  }
  put_le32(out + pos, (uint32_t)crc);
  put_le32(out + pos + 4, (uint32_t)len); /* ISIZE: the length modulo 2^32 */
  return pos + 8;
}

size_t http_gzip_par_run(http_gzip_par *p, const char *in, size_t len, uint8_t *out, size_t cap) {
  if (len > UINT_MAX)
    return 0;
  pthread_mutex_lock(&p->run_lock);
  unsigned k = http_gzip_par_chunks(p, len);
  size_t n = cap >= bound_locked(p, len, k) ? run_locked(p, (const uint8_t *)in, len, out, k) : 0;
  pthread_mutex_unlock(&p->run_lock);
  return n;
}
#else
http_gzip_par *http_gzip_par_new(unsigned threads) {
  (void)threads;
  return NULL;
}

void http_gzip_par_free(http_gzip_par *p) {
  (void)p;
}

unsigned http_gzip_par_threads(const http_gzip_par *p) {
  (void)p;
  return 1;
}

unsigned http_gzip_par_chunks(const http_gzip_par *p, size_t len) {
  (void)p, (void)len;
  return 1;
}

size_t http_gzip_par_bound(http_gzip_par *p, size_t len) {
  (void)p;
  return len;
}

size_t http_gzip_par_run(http_gzip_par *p, const char *in, size_t len, uint8_t *out, size_t cap) {
  (void)p, (void)in, (void)len, (void)out, (void)cap;
  return 0;
}
#endif
