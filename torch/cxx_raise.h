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

/* Throws c10::OutOfMemoryError(message), which PyTorch raises in Python as
 * torch.OutOfMemoryError (a RuntimeError), when the PyTorch libraries in the
 * process export what that takes (c10::Error's constructor from a source
 * location and a std::string, the class's vtable and type info) in the
 * layout this file assumes, checked before anything is thrown; returns
 * otherwise, so the caller can throw std::runtime_error instead. function,
 * file and line are the source location the exception carries. */
void cxx_raise_torch_oom(const char *message, const char *function, const char *file,
                         unsigned line);

#endif
