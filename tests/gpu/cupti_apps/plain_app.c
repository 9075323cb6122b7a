/* An unmodified CUDA program: a plain cudaMalloc loop, no gpupool code. The
 * injection test (tests/gpu/cupti_inject.sh) runs it with
 * CUDA_INJECTION64_PATH=libgpupool_inject.so and reads its /metrics.
 *
 *   plain_app READY_FILE RELEASE_FILE
 * Allocates HELD buffers (HELD_BYTES in all) and churns through short-lived
 * ones, writes HELD_BYTES into READY_FILE, then holds its buffers until
 * RELEASE_FILE exists (at most 120 s), frees them and exits 0. Exits 77 when
 * no device is visible. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define MiB   ((size_t)1 << 20)
#define HELD  8
#define CHURN 200

static int fail(const char *what, cudaError_t err) {
  fprintf(stderr, "plain_app: %s: %s\n", what, cudaGetErrorString(err));
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s READY_FILE RELEASE_FILE\n", argv[0]);
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    return 77;
  void *held[HELD];
  size_t held_bytes = 0;
  for (int i = 0; i < HELD; i++) {
    size_t size = (size_t)(i + 1) * 2 * MiB;
    cudaError_t err = cudaMalloc(&held[i], size);
    if (err != cudaSuccess)
      return fail("cudaMalloc", err);
    held_bytes += size;
  }
  for (int i = 0; i < CHURN; i++) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, MiB);
    if (err == cudaSuccess)
      err = cudaFree(p);
    if (err != cudaSuccess)
      return fail("cudaMalloc/cudaFree loop", err);
  }
  FILE *f = fopen(argv[1], "w");
  if (!f)
    return 1;
  fprintf(f, "%zu\n", held_bytes);
  fclose(f);
  for (int waited = 0; waited < 1200 && access(argv[2], F_OK) != 0; waited++) {
    struct timespec t = {0, 100000000};
    nanosleep(&t, NULL);
  }
  for (int i = 0; i < HELD; i++)
    cudaFree(held[i]);
  return 0;
}
