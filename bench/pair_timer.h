/* Times malloc+free pairs of one size through a bench_alloc: on one thread
 * (median ns per pair over timed batches) and on several threads at once
 * (median total pairs per second over timed runs). Each measurement starts
 * with an untimed warm-up that fills the allocator's cache, so what is timed
 * is the cache-hit path a program runs in its steady state. */
#ifndef BENCH_PAIR_TIMER_H
#define BENCH_PAIR_TIMER_H

#include <stddef.h>
#include <stdint.h>

#include "bench_alloc.h"

typedef struct pair_plan {
  uint64_t warmup_ns; /* untimed pairs before each measurement */
  uint64_t batch_ns;  /* one thread: the length of one timed batch */
  int reps;           /* one thread: timed batches (the median is reported) */
  uint64_t run_ns;    /* threads: the length of one timed run */
  int runs;           /* threads: timed runs (the median is reported) */
} pair_plan;

uint64_t bench_clock_ns(void);
double bench_median(double *v, int n); /* sorts v */

/* Median ns per pair, or NAN when an allocation failed. */
double pair_ns_one_thread(const bench_alloc *a, size_t size, void *stream, const pair_plan *p);
/* The same for n allocators side by side: each is warmed up, then they take
 * turns, one timed batch each per round, so that a slow phase of a noisy
 * machine hits all of them alike. out[i]: the median ns per pair of a[i];
 * NAN where a[i] is NULL or failed. */
void pair_ns_side_by_side(const bench_alloc *const *a, int n, size_t size, void *stream,
                          const pair_plan *p, double *out);
/* Median total pairs per second of nthreads threads, thread i on streams[i];
 * NAN when an allocation failed or a thread could not start. */
double pairs_per_s_threads(const bench_alloc *a, size_t size, void *const *streams, int nthreads,
                           const pair_plan *p);
/* ns per pair: pair_ns_one_thread on streams[0] when nthreads is 1, else the
 * whole process's, 1e9 / pairs_per_s_threads. */
double pair_ns_threads(const bench_alloc *a, size_t size, void *const *streams, int nthreads,
                       const pair_plan *p);
/* Runs untimed pairs on this thread until done() says so or timeout_ns
 * passed (or an allocation failed), e.g. until the event clock has switched
 * to its ticked mode, as in a busy program that has run a while. */
void pairs_until(const bench_alloc *a, size_t size, void *stream, unsigned (*done)(void),
                 uint64_t timeout_ns);

#endif
