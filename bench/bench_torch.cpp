// The PyTorch shim: PyTorch's CUDA caching allocator behind the C interface
// of torch_shim.h, called the way C++ extensions call it
// (c10::cuda::CUDACachingAllocator::raw_alloc_with_stream / raw_delete).
// Built as libgpupool_bench_torch.so against the libc10/libc10_cuda of the
// installed PyTorch, only where one is found at configure time; the
// benchmarks open it with dlopen. No exception leaves this file.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cstdio>
#include <exception>
#include <string>

#include "torch_shim.h"

#ifndef BENCH_TORCH_VERSION
#define BENCH_TORCH_VERSION "unknown"
#endif

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

c10::DeviceIndex current_device = 0;
char version_text[160];

} // namespace

extern "C" {

int gpupool_bench_torch_abi(void) {
  return GPUPOOL_BENCH_TORCH_ABI;
}

const char *gpupool_bench_torch_version(void) {
  return version_text[0] ? version_text : "torch " BENCH_TORCH_VERSION;
}

int gpupool_bench_torch_init(int device, char *err, size_t errlen) {
  try {
    int n = c10::cuda::device_count();
    if (device < 0 || device >= n) {
      std::snprintf(err, errlen, "no CUDA device %d (%d visible)", device, n);
      return -1;
    }
    current_device = static_cast<c10::DeviceIndex>(device);
    c10::cuda::set_device(current_device);
    if (!alloc::get()->initialized())
      alloc::init(n);
    std::snprintf(version_text, sizeof version_text, "torch %s, caching allocator backend %s",
                  BENCH_TORCH_VERSION, alloc::name().c_str());
    return 0;
  } catch (const std::exception &e) {
    std::snprintf(err, errlen, "%s", e.what());
  } catch (...) {
    std::snprintf(err, errlen, "unknown C++ exception");
  }
  return -1;
}

void *gpupool_bench_torch_alloc(size_t size, void *stream) {
  try {
    return alloc::raw_alloc_with_stream(size, static_cast<cudaStream_t>(stream));
  } catch (...) {
    return nullptr;
  }
}

void gpupool_bench_torch_free(void *ptr) {
  try {
    alloc::raw_delete(ptr);
  } catch (...) {
  }
}

void gpupool_bench_torch_empty_cache(void) {
  try {
    alloc::emptyCache();
  } catch (...) {
  }
}

void gpupool_bench_torch_reset_stats(void) {
  try {
    alloc::resetPeakStats(current_device);
    alloc::resetAccumulatedStats(current_device);
  } catch (...) {
  }
}

int gpupool_bench_torch_stats(uint64_t out[4]) {
  try {
    auto s = alloc::getDeviceStats(current_device);
    // Index 0 of each stat array is the aggregate over the small and large pools.
    out[0] = static_cast<uint64_t>(s.reserved_bytes[0].peak);
    out[1] = static_cast<uint64_t>(s.allocated_bytes[0].peak);
    out[2] = static_cast<uint64_t>(s.segment[0].allocated);
    out[3] = static_cast<uint64_t>(s.segment[0].freed);
    return 0;
  } catch (...) {
    return -1;
  }
}

} // extern "C"
