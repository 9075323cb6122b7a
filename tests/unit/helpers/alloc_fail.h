/* Host allocations that fail on demand, for the tests of out-of-host-memory
 * paths. A test that uses these is linked with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc (tests/CMakeLists.txt,
 * names ending in _host_oom): every malloc, calloc and realloc of the test
 * and of the statically linked library goes through the counter of
 * alloc_fail.c. */
#ifndef GPUPOOL_TEST_ALLOC_FAIL_H
#define GPUPOOL_TEST_ALLOC_FAIL_H

/* The n-th allocation from now fails (1: the next one). */
void alloc_fail_arm(long n);
/* Disarms; whether the armed allocation was reached (and so failed). */
int alloc_fail_disarm(void);

#endif
