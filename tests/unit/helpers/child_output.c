#include "helpers/child_output.h"

#include <criterion/criterion.h>
#include <sys/wait.h>
#include <unistd.h>

int child_output(pid_t pid, int fd, char *out, size_t cap) {
  size_t n = 0;
  ssize_t got;
  while (n + 1 < cap && (got = read(fd, out + n, cap - 1 - n)) > 0)
    n += (size_t)got;
  out[n] = '\0';
  close(fd);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  return status;
}
