/* The C interface of the PyTorch shim (bench_torch.cpp, built as the shared
 * object libgpupool_bench_torch.so only where a PyTorch with its C++ headers
 * is found). The benchmarks open it with dlopen, so that they build and run
 * everywhere and show PyTorch's caching allocator in the same table, timed by
 * the same loop, where it exists. Every function catches C++ exceptions. */
#ifndef BENCH_TORCH_SHIM_H
#define BENCH_TORCH_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change below; the loader refuses a shim of another version. */
#define GPUPOOL_BENCH_TORCH_ABI 1

int gpupool_bench_torch_abi(void);
/* "torch 2.11.0+cu130, allocator native", for the report. */
const char *gpupool_bench_torch_version(void);
/* Make device current and initialise the caching allocator; 0 or -1 + reason. */
int gpupool_bench_torch_init(int device, char *err, size_t errlen);
/* c10::cuda::CUDACachingAllocator::raw_alloc_with_stream / raw_delete;
 * NULL on failure (out of memory). stream is a cudaStream_t. */
void *gpupool_bench_torch_alloc(size_t size, void *stream);
void gpupool_bench_torch_free(void *ptr);
void gpupool_bench_torch_empty_cache(void);
/* Peaks to current and accumulated counters to zero. */
void gpupool_bench_torch_reset_stats(void);
/* out: peak reserved bytes, peak allocated bytes, segments allocated and
 * segments freed (the device calls); 0 or -1. */
int gpupool_bench_torch_stats(uint64_t out[4]);

#ifdef __cplusplus
}
#endif
#endif
