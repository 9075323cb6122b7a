/* Allocation traces for the replay benchmark. One event a line:
 *
 *   a <id> <size> <stream> [<device>]
 *                             an allocation of <size> bytes on <stream> (of
 *                             <device>, where not 0; trace_load reads the
 *                             busiest device of a file that names several)
 *   f <id>                    the free of the live allocation <id>
 *   r <id> <stream>           record_stream of the live allocation <id> on <stream>
 *                             (the advisor replays it; bench_replay skips it)
 *
 * <id> and <stream> are unsigned integers, decimal or 0x-hex (a device
 * address and a cudaStream_t, as torch/torch_allocator.c writes them under
 * GPUPOOL_RECORD); an id may be reused once the allocation it named is freed.
 * Blank lines and lines starting with '#' are ignored. The library's
 * GPUPOOL_RECORD reader (gpupool_history_load, advisor/read_record.c) parses
 * them: one parser for the advisor and the benchmark. */
#ifndef BENCH_TRACE_FILE_H
#define BENCH_TRACE_FILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct trace_op {
  uint32_t slot;    /* the allocation: 0 .. n_allocs-1, in order of allocation */
  uint8_t is_alloc; /* 1: allocate slot, 0: free it */
} trace_op;

typedef struct trace {
  trace_op *ops;
  size_t n_ops;
  size_t n_allocs, n_frees;
  size_t n_unmatched_frees; /* frees of ids not live: skipped */
  size_t n_live_at_end;     /* allocations never freed */
  uint64_t *slot_size;      /* per slot */
  uint16_t *slot_stream;    /* per slot: index into streams */
  uint64_t *streams;        /* the distinct stream values, in order of appearance */
  int n_streams;
  uint64_t peak_requested; /* the most bytes live at once */
  uint64_t total_requested;
  uint64_t max_size;
} trace;

/* 0, or -1 with the reader's "path:line: reason" in err. */
int trace_load(const char *path, trace *t, char *err, size_t errlen);
void trace_release(trace *t);

#endif
