/* gzip of one body by several threads, as pigz does, all of it done by zlib:
 * the body is cut into chunks of at least HTTP_GZIP_CHUNK_MIN bytes, one per
 * thread; each chunk is raw deflate (level 1, as http_gzip.h) primed with the
 * HTTP_GZIP_DICT bytes of the body before it (deflateSetDictionary), every
 * chunk but the last ended by a sync flush (byte-aligned, no final bit), so
 * that their concatenation is one deflate stream; zlib's crc32 of each chunk
 * is joined with crc32_combine, and a gzip header and trailer around the
 * whole make one standard gzip member. A body of one chunk (or one thread)
 * is one deflate call on the calling thread, byte for byte
 * http_gzip's output.
 *
 * The calling thread compresses the first chunk itself; the other chunks go
 * to worker threads started with the compressor, each with its own z_stream
 * kept between bodies (deflateReset), woken per body (a condition variable
 * each) and joined when it is freed. A chunk whose worker has not started
 * it by the time the caller is done with its own (the worker's CPU busy
 * with other work) is compressed by the caller: on a busy machine a body
 * takes about as long as on one thread, not longer. One body at a time: a
 * second caller waits for the first. */
#ifndef GPUPOOL_HTTP_GZIP_PARALLEL_H
#define GPUPOOL_HTTP_GZIP_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_GZIP_CHUNK_MIN (32 * 1024)
/* The dictionary of a chunk: 8 KiB, not deflate's whole 32 KiB window. On
 * the dev VM, a /metrics body of 161 KB in 2-4 chunks: a 32 KiB dictionary
 * costs ~30 us of deflateSetDictionary hashing per chunk and ~20 us more in
 * deflate (a chunk takes 1.7-3x as long as with none, 1.1-1.2x with 8 KiB)
 * for 0.1 % fewer bytes than 8 KiB (docs/metrics.md, "Cost"). */
#define HTTP_GZIP_DICT        (8 * 1024)
#define HTTP_GZIP_MAX_THREADS 64

typedef struct http_gzip_par http_gzip_par;

/* threads (1..HTTP_GZIP_MAX_THREADS) compress a body: the caller and
 * threads - 1 workers started here (fewer when the system refuses a thread:
 * http_gzip_par_threads says). NULL without zlib, memory or a valid count. */
http_gzip_par *http_gzip_par_new(unsigned threads);
/* Stops and joins the workers; NULL is fine. */
void http_gzip_par_free(http_gzip_par *p);
/* The threads that compress a body, the caller included. */
unsigned http_gzip_par_threads(const http_gzip_par *p);
/* The chunks a body of len bytes is cut into (1 = the serial path). */
unsigned http_gzip_par_chunks(const http_gzip_par *p, size_t len);
/* The most bytes http_gzip_par_run writes for len input bytes. */
size_t http_gzip_par_bound(http_gzip_par *p, size_t len);
/* One gzip member of in[0..len) into out (cap bytes, at least the bound);
 * the bytes written, or 0 when zlib fails or cap is too small. */
size_t http_gzip_par_run(http_gzip_par *p, const char *in, size_t len, uint8_t *out, size_t cap);

#endif
