/* The fixed set of activity buffers handed to CUPTI: allocated and zeroed
 * once, never freed (CUPTI may return a buffer late), re-zeroed after each
 * use by the flush thread so that the requesting thread (an application
 * thread, inside a CUDA call) only takes one. Lock-free: each buffer's state
 * is an atomic. */
#ifndef GPUPOOL_CUPTI_BUFFERS_H
#define GPUPOOL_CUPTI_BUFFERS_H

#include <stddef.h>
#include <stdint.h>

/* 64 buffers of 64 KiB (4 MiB): about 500 memory records each. CUPTI keeps
 * one buffer per thread that allocates, so this is also how many threads can
 * record at once between two flushes. */
#define CUPTI_BUFFER_COUNT 64
#define CUPTI_BUFFER_SIZE  (64 * 1024)

/* Maps the buffers (once; later calls do nothing). 0, or -1 when out of memory. */
int cupti_buffers_init(void);

/* A zeroed buffer for CUPTI, or NULL when none is free (counted). Also
 * reports, through *low, that fewer than a quarter are free (flush soon). */
uint8_t *cupti_buffers_take(int *low);
/* CUPTI handed buf back and its records were decoded: it waits for re-zeroing. */
void cupti_buffers_done(uint8_t *buf);
/* 1 when buf is one of ours. */
int cupti_buffers_owns(const uint8_t *buf);
/* Zeroes every used buffer and makes it free again (the flush thread). */
void cupti_buffers_rezero(void);

uint64_t cupti_buffers_exhausted(void); /* requests refused */
size_t cupti_buffers_free_count(void);

#endif
