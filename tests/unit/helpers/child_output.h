/* What the tests that run a child process share: its output read to the
 * end, then its exit awaited. */
#ifndef GPUPOOL_TEST_CHILD_OUTPUT_H
#define GPUPOOL_TEST_CHILD_OUTPUT_H

#include <stddef.h>
#include <sys/types.h>

/* Reads fd (the read end of a pipe the child writes to, the parent's
 * write end already closed) until end of file into out, NUL-terminated and
 * cut at cap - 1 bytes; closes fd; waits for pid (asserts it) and returns
 * its wait status. */
int child_output(pid_t pid, int fd, char *out, size_t cap);

#endif
