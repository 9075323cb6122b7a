/* gpupool as PyTorch's CUDA allocator, through
 * torch.cuda.memory.CUDAPluggableAllocator(path_to_libgpupool.so,
 *     "gpupool_torch_malloc", "gpupool_torch_free")
 * and torch.cuda.memory.change_current_allocator (docs/torch.md).
 *
 * One pool per device, named "torch", on the cuda backend, created on first
 * use; GPUPOOL_CONF (applied after those defaults) picks the strategy and the
 * tunables, or another backend. The agent is started once, with the first
 * pool, when GPUPOOL_AGENT_CONF is set. GPUPOOL_RECORD=path writes every
 * allocation ("a <address> <size> <stream>"), free ("f <address>") and
 * record_stream ("r <address> <stream>") to that file (truncated at the first
 * allocation, flushed at exit), the trace format of bench/bench_replay.
 *
 * `stream` is a cudaStream_t: a pointer, declared void * here so that callers
 * need no CUDA headers; the ABI is the same. */
#ifndef GPUPOOL_TORCH_H
#define GPUPOOL_TORCH_H

#include <stddef.h>

#include "gpupool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL when size is 0 (empty tensors). On a failure inside PyTorch (libc10
 * loaded), a C++ exception carrying the reason, since PyTorch does not check
 * the pointer it is given: out of memory as c10::OutOfMemoryError (Python's
 * torch.OutOfMemoryError) where PyTorch's libraries allow, else, and for any
 * other failure (no such device, a pool that cannot be created),
 * std::runtime_error (a RuntimeError); elsewhere, NULL and the reason in one
 * line on stderr. */
void *gpupool_torch_malloc(size_t size, int device, void *stream);
void gpupool_torch_free(void *ptr, size_t size, int device, void *stream);
/* tensor.record_stream(stream), as PyTorch's pluggable allocator passes it
 * (CUDAPluggableAllocator.allocator().set_record_stream_fn, which
 * gpupool.torch.enable() sets): gpupool_record_stream on the pool that holds
 * ptr, so that its reuse after the free waits for stream's work. A pointer no
 * pool holds, or a refused call, is one line on stderr (GPUPOOL_ERR_UNSUPPORTED,
 * as in a forked child using its parent's tensors, once a process). With
 * GPUPOOL_RECORD, the line "r <address> <stream>". */
void gpupool_torch_record_stream(void *ptr, void *stream);

/* torch.cuda.set_per_process_memory_fraction(fraction, device), as PyTorch's
 * pluggable allocator passes it (set_memory_fraction_fn, which
 * gpupool.torch.enable() sets): gpupool_set_memory_fraction on device's
 * pool, or, before its first allocation, on the pool when it is created
 * (over GPUPOOL_CONF's memory_fraction). A fraction outside [0, 1] or a
 * device out of range is one line on stderr and changes nothing. */
void gpupool_torch_set_memory_fraction(double fraction, int device);
/* The fraction device's pool has, or will be created with: 1.0 when none
 * (PyTorch's get_per_process_memory_fraction); NaN for a device out of
 * range. */
double gpupool_torch_memory_fraction(int device);
/* torch.cuda.empty_cache() through PyTorch's own path (set_reset_fn, which
 * enable() sets): gpupool_empty_cache on every device's pool. */
void gpupool_torch_empty_cache(void);

/* An out-of-memory observer, as PyTorch's allocator calls those given to
 * torch._C._cuda_attach_out_of_memory_observer: the device, the bytes asked
 * for, the device's memory (its memory_fraction cap where the pool has one)
 * and its free memory then (0 when it cannot be read). */
typedef void (*gpupool_torch_oom_observer)(int device, size_t requested, size_t device_total,
                                           size_t device_free);
/* Adds fn to the observers called, in the order given, on the failing
 * thread before gpupool_torch_malloc reports out of memory (with no lock
 * held: an observer may read the pools, take a snapshot, allocate).
 * gpupool.torch.enable() puts torch._C._cuda_attach_out_of_memory_observer
 * on it. At most 16: GPUPOOL_ERR_UNSUPPORTED past them, GPUPOOL_ERR_INVALID
 * for NULL. */
gpupool_status gpupool_torch_attach_oom_observer(gpupool_torch_oom_observer fn);

/* PyTorch's MempoolId_t (std::pair of two unsigned long long), as it is
 * passed by value. */
typedef struct gpupool_torch_mempool_id {
  unsigned long long first, second;
} gpupool_torch_mempool_id;
/* PyTorch's call to route allocations into a private memory pool (a CUDA
 * graph's capture: torch.cuda.graph, torch.compile's reduce-overhead mode,
 * torch.cuda.MemPool), as its pluggable allocator passes it
 * (set_begin_allocate_to_pool, which enable() sets); filter is the
 * std::function PyTorch passes by reference to a copy. gpupool has no
 * private pools yet: without this refusal a graph's memory would go back to
 * the pool after its capture and be handed to other tensors, which the
 * graph's replays would then overwrite. Inside PyTorch it throws
 * std::runtime_error (a RuntimeError before the capture begins) saying so;
 * elsewhere it writes the reason on stderr. */
void gpupool_torch_begin_allocate_to_pool(int device, gpupool_torch_mempool_id pool,
                                          const void *filter);

/* The pool of device, or NULL before its first allocation (for statistics:
 * gpupool_get_stats). */
gpupool *gpupool_torch_pool(int device);

/* Checks conf as GPUPOOL_CONF for the adapter's pools (gpupool_conf_check
 * over the options they are created with: name torch, backend cuda; and a
 * device key or backend sim refused: each pool serves PyTorch's device, with
 * device memory), so that a bad configuration is refused where it is given
 * rather than at the first allocation. Creates nothing, touches no device, reads no environment.
 * GPUPOOL_OK, or GPUPOOL_ERR_INVALID (GPUPOOL_ERR_UNSUPPORTED for
 * expandable_segments with backend cuda_async, as gpupool_conf_check) with the
 * reason in gpupool_last_error(). */
gpupool_status gpupool_torch_conf_check(const char *conf);

#ifdef __cplusplus
}
#endif
#endif
