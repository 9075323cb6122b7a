#include "fsync_record.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MAX_SYNCED 16

int __real_fsync(int fd);
int __wrap_fsync(int fd);

static char synced[MAX_SYNCED][PATH_MAX];
static int nsynced;
static const char *fail_suffix;

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

int __wrap_fsync(int fd) {
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  path[n > 0 ? n : 0] = '\0';
  if (nsynced < MAX_SYNCED)
    snprintf(synced[nsynced++], sizeof synced[0], "%s", path);
  if (fail_suffix && ends_with(path, fail_suffix)) {
    errno = EIO;
    return -1;
  }
  return __real_fsync(fd);
}

void fsync_record_reset(void) {
  nsynced = 0;
  fail_suffix = NULL;
}

int fsync_record_count(void) {
  return nsynced;
}

const char *fsync_record_path(int i) {
  return i >= 0 && i < nsynced ? synced[i] : "";
}

void fsync_record_fail_suffix(const char *suffix) {
  fail_suffix = suffix;
}
