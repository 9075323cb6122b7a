/* A program linked against libgpupool_static.a without GCC's link-time
 * optimisation, as clang, another GCC version or -fno-lto link it: it builds
 * only if the archive's objects carry machine code, and then allocates and
 * frees from a host-backend pool through it. Prints "ok" and exits 0. */
#include <stdio.h>

#include "gpupool/gpupool.h"

int main(void) {
  gpupool *p = NULL;
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};
  if (gpupool_create(&o, &p) != GPUPOOL_OK) {
    fprintf(stderr, "gpupool_create: %s\n", gpupool_last_error());
    return 1;
  }
  void *ptr = NULL;
  int rc = gpupool_malloc(p, &ptr, 4096, NULL) != GPUPOOL_OK || !ptr ||
           gpupool_free(p, ptr) != GPUPOOL_OK;
  if (rc)
    fprintf(stderr, "allocation: %s\n", gpupool_last_error());
  gpupool_destroy(p);
  if (!rc)
    printf("ok\n");
  return rc;
}
