/* CUPTI's CUDA memory per device over time, for /ui's charts: the sampler
 * calls ui_history_sample() at every interval; a bounded ring keeps the
 * latest UI_HISTORY_CAPACITY samples (the pools' own history is in
 * agent/trace_counters). */
#ifndef GPUPOOL_UI_HISTORY_H
#define GPUPOOL_UI_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#define UI_HISTORY_CAPACITY 16384

typedef struct ui_history_sample {
  uint64_t ts_ns; /* CLOCK_REALTIME */
  int device;
  uint64_t pool_bytes;  /* live CUDA memory CUPTI saw inside gpupool segments */
  uint64_t other_bytes; /* and outside them (cuBLAS, NCCL, other allocators) */
} ui_history_sample;

/* One sample per device CUPTI has seen, when CUPTI is recording. */
void ui_history_sample_now(void);
/* Copies the samples at or after since_ns, oldest first (at most max);
 * returns how many. */
size_t ui_history_read(uint64_t since_ns, ui_history_sample *out, size_t max);
/* Forgets every sample (the agent's stop). */
void ui_history_clear(void);

#endif
