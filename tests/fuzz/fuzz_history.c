/* libFuzzer target: gpupool_history_load on any bytes, in every format
 * (auto: by content; the corpus holds GPUPOOL_RECORD files, /trace documents
 * and PyTorch snapshot pickles), then, for a history that loads, a replay
 * under bfc and under expandable segments. An input may be refused (an
 * error with its reason); it must never crash, leak or read out of bounds.
 * The bytes reach the loader through a memfd, by its /proc/self/fd path, as
 * a file would. */
#include <gpupool/advisor.h>
#include <stdint.h>
#include <unistd.h>

#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_file("fuzz_history", data, size, path, sizeof path);
  gpupool_history *h = NULL;
  if (gpupool_history_load(path, NULL, NULL, &h) == GPUPOOL_OK) {
    gpupool_replay_result r;
    (void)gpupool_replay(h, NULL, (uint64_t)1 << 30, &r);
    (void)gpupool_replay(h, "expandable_segments:True", (uint64_t)1 << 30, &r);
    gpupool_history_free(h);
  }
  close(fd);
  return 0;
}
