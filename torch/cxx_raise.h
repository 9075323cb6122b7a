/* Throwing a C++ exception from C, for callers inside a C++ runtime that
 * read failures only as exceptions (PyTorch's pluggable allocator does not
 * check the pointer it is given: NULL would become a tensor at address 0). */
#ifndef GPUPOOL_CXX_RAISE_H
#define GPUPOOL_CXX_RAISE_H

/* Throws std::runtime_error(message) when libstdc++ is already loaded in the
 * process, and does not return; returns when it is not, so the caller can
 * fail the C way. Only for callers whose caller is C++ code that catches:
 * an exception nobody catches terminates the program. */
void cxx_raise_runtime_error(const char *message);

#endif
