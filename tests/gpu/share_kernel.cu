#include "share_kernel.h"

static __global__ void fill_words(uint32_t *words, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    words[i] = share_word(i);
}

extern "C" int share_fill_words(uint32_t *words, size_t n) {
  fill_words<<<264, 256>>>(words, n);
  return (int)cudaGetLastError();
}
