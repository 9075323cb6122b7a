/* Throws std::runtime_error from C through the Itanium C++ ABI entry points
 * of the libstdc++ the process already has (a PyTorch process always does);
 * the library itself neither links nor loads a C++ runtime. The exception
 * unwinds through the C frames above it, which hold nothing to clean up and
 * carry the unwind tables x86-64 and AArch64 compilers emit by default. */
#include <dlfcn.h>
#include <stddef.h>

#include "cxx_raise.h"

/* At least sizeof(std::runtime_error) (16 in libstdc++): the size only tells
 * __cxa_allocate_exception how much room the object needs. */
#define RUNTIME_ERROR_ROOM 64

void cxx_raise_runtime_error(const char *message) {
  void *cxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!cxx)
    return;
  void *(*allocate_exception)(size_t);
  void (*construct)(void *, const char *);
  void (*destruct)(void *);
  void (*throw_exception)(void *, void *, void (*)(void *));
  /* POSIX allows converting dlsym's void * to a function pointer this way. */
  *(void **)&allocate_exception = dlsym(cxx, "__cxa_allocate_exception");
  *(void **)&construct = dlsym(cxx, "_ZNSt13runtime_errorC1EPKc"); /* runtime_error(const char *) */
  *(void **)&destruct = dlsym(cxx, "_ZNSt13runtime_errorD1Ev");
  *(void **)&throw_exception = dlsym(cxx, "__cxa_throw");
  void *type = dlsym(cxx, "_ZTISt13runtime_error"); /* typeid(std::runtime_error) */
  /* The handle stays open: the exception's code lives in that library. */
  if (!allocate_exception || !construct || !destruct || !throw_exception || !type)
    return;
  void *e = allocate_exception(RUNTIME_ERROR_ROOM);
  construct(e, message);
  throw_exception(e, type, destruct);
}
