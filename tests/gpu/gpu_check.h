/* What every GPU test needs: a CUDA runtime call that must succeed, and a
 * skip (with the reason) when no device is visible. Static functions only:
 * each test file is its own executable. */
#ifndef GPUPOOL_TESTS_GPU_CHECK_H
#define GPUPOOL_TESTS_GPU_CHECK_H

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    cr_assert_eq(err_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(err_));                    \
  } while (0)

/* Skips without a device; prints what runs on which device. */
static inline void gpu_require(const char *what) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    cr_skip("no CUDA device: %s", cudaGetErrorString(err));
  if (count == 0)
    cr_skip("no CUDA device visible");
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  fprintf(stderr, "[gpu] %s on device 0: %s (sm_%d%d, %.1f GiB)\n", what, prop.name, prop.major,
          prop.minor, (double)prop.totalGlobalMem / (1 << 30));
}

#endif
