/* The fuzz targets' files: bytes in a memfd, named by its /proc/self/fd
 * path, which the code under test opens as it would a file on disk. */
#ifndef GPUPOOL_FUZZ_FILE_H
#define GPUPOOL_FUZZ_FILE_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* A memfd holding data's size bytes, its path in path (cap bytes); returns
 * the descriptor, which the caller closes when the file is no longer read.
 * Aborts where the file cannot be made (the harness's own failure). */
static inline int fuzz_file(const char *name, const void *data, size_t size, char *path,
                            size_t cap) {
  int fd = memfd_create(name, 0);
  if (fd < 0 || write(fd, data, size) != (ssize_t)size)
    abort();
  snprintf(path, cap, "/proc/self/fd/%d", fd);
  return fd;
}

#endif
