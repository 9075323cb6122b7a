#include "writable_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int writable_dir_errno(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return errno;
  if (!S_ISDIR(st.st_mode))
    return ENOTDIR;
  return access(path, W_OK | X_OK) != 0 ? errno : 0;
}

int writable_dir_sync(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  int err = fsync(fd) != 0 ? errno : 0;
  close(fd);
  return err;
}
