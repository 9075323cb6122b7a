/* The machine a benchmark runs on: the GPU (or the host backend when there
 * is none), a description for the report, and the streams to run on. */
#ifndef BENCH_DEVICE_H
#define BENCH_DEVICE_H

#include "gpupool/gpupool.h"

typedef struct bench_device {
  int gpu;                 /* 1: a CUDA device is present and used */
  int device;              /* its ordinal (0) */
  char name[512];          /* "NVIDIA H100 80GB HBM3" or "host backend (no GPU)" */
  char host[256];          /* "Intel(R) Xeon(R) ..., 16 cores" */
  gpupool_backend backend; /* GPUPOOL_BACKEND_CUDA or GPUPOOL_BACKEND_HOST */
} bench_device;

void bench_device_probe(bench_device *d);

/* n streams: created CUDA streams on a GPU, simulated host streams without.
 * NULL on failure. */
void **bench_streams_create(const bench_device *d, int n);
void bench_streams_destroy(const bench_device *d, void **streams, int n);

/* "2026-11-20 12:34 UTC" */
void bench_now_utc(char *buf, size_t len);

#endif
