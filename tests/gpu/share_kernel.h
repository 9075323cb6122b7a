/* A kernel of the share test's own, so the importer's writes come from code
 * running on the device in the importing process (not from a copy engine). */
#ifndef GPUPOOL_TESTS_SHARE_KERNEL_H
#define GPUPOOL_TESTS_SHARE_KERNEL_H
#include <stddef.h>
#include <stdint.h>
#ifdef __CUDACC__
#define SHARE_HOST_DEVICE __host__ __device__
#else
#define SHARE_HOST_DEVICE
#endif
#ifdef __cplusplus
extern "C" {
#endif

/* The value word i of the shared block must hold after share_fill_words. */
SHARE_HOST_DEVICE static inline uint32_t share_word(size_t i) {
  return (uint32_t)(i * 2654435761u) ^ 0xc0ffeeu;
}

/* Launches a kernel on the default stream that stores share_word(i) into
 * words[i] for i < n; 0 on a successful launch, else the cudaError_t. */
int share_fill_words(uint32_t *words, size_t n);

#ifdef __cplusplus
}
#endif
#endif
