/* Throws C++ exceptions from C through the Itanium C++ ABI entry points of
 * the libstdc++ (and, for PyTorch's own exception, the libc10) the process
 * already has (a PyTorch process always does); the library itself neither
 * links nor loads a C++ runtime. The exception unwinds through the C frames
 * above it, which hold nothing to clean up and carry the unwind tables
 * x86-64 and AArch64 compilers emit by default. The symbols are looked up
 * once, the first time an exception is wanted, and their libraries' handles
 * kept open: the exceptions' code lives there. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cxx_raise.h"

/* At least sizeof(std::runtime_error) (16 in libstdc++): the size only tells
 * __cxa_allocate_exception how much room the object needs. */
#define RUNTIME_ERROR_ROOM 64
/* The same for c10::OutOfMemoryError, about 150 bytes in PyTorch 2.x (its
 * message, context, backtrace and what() strings): room to spare, as the
 * size is not exported. */
#define C10_ERROR_ROOM 1024

/* c10::SourceLocation (c10/util/StringUtil.h): trivially copyable and over
 * 16 bytes, so it is passed by value in memory, as this struct is in C. */
typedef struct c10_source_location {
  const char *function;
  const char *file;
  uint32_t line;
} c10_source_location;

/* Room for a std::string: 32 bytes with libstdc++'s C++11 ABI, 8 before it. */
typedef struct cxx_string {
  _Alignas(16) unsigned char bytes[64];
} cxx_string;

/* One std::string ABI: the names of c10::Error's constructor from a source
 * location and a string, and of the string's constructor from a C string and
 * destructor, mangled for that ABI. */
typedef struct string_abi {
  const char *error_ctor, *string_ctor, *string_dtor;
} string_abi;

static const string_abi string_abis[] = {
    {"_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
     "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC1EPKcRKS3_",
     "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEED1Ev"},
    {"_ZN3c105ErrorC1ENS_14SourceLocationESs", "_ZNSsC1EPKcRKSaIcE", "_ZNSsD1Ev"},
};

/* The libraries of PyTorch where c10::OutOfMemoryError's vtable and type
 * info are found (weak symbols, in every library that throws or catches
 * it), in the order they are looked at. */
static const char *const oom_libraries[] = {"libc10_cuda.so", "libc10.so", "libtorch_python.so"};

static struct {
  void *(*allocate_exception)(size_t);
  void (*free_exception)(void *);
  void (*throw_exception)(void *, void *, void (*)(void *));
  /* std::runtime_error */
  void (*runtime_error_ctor)(void *, const char *);
  void (*runtime_error_dtor)(void *);
  void *runtime_error_type;
  /* c10::OutOfMemoryError: c10::Error's constructor, then the subclass's
   * vtable (its address point) and type info */
  void (*error_ctor)(void *, c10_source_location, void *);
  void (*string_ctor)(void *, const char *, const void *);
  void (*string_dtor)(void *);
  void *const *oom_vtable; /* its address point */
  void *oom_type;
} cxx;
static pthread_once_t cxx_once = PTHREAD_ONCE_INIT;

/* The handle of a library already loaded (by its soname), NULL if it is not. */
static void *loaded(const char *soname) {
  return dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
}

/* POSIX allows converting dlsym's void * to a function pointer this way. */
#define LOOKUP(handle, field, name) (*(void **)&cxx.field = dlsym(handle, name))

/* Whether std::type_info type names the class whose mangled name is name
 * (its second word; GCC marks a name local to one library with a '*').
 * Libraries that each hold a copy of a class's weak vtable and type info
 * may point at one another's copies, so classes are told by name, as
 * libstdc++'s own type_info comparison does. */
static int type_named(const void *type, const char *name) {
  const char *n = type ? ((const char *const *)type)[1] : NULL;
  if (n && *n == '*')
    n++;
  return n && strcmp(n, name) == 0;
}

/* Whether vtable address point v is one of class name with no base before
 * it (the two words in front: the offset to the top, 0, and the type info). */
static int vtable_of(void *const *v, const char *name) {
  return v && v[-2] == NULL && type_named(v[-1], name);
}

#define C10_ERROR_NAME "N3c105ErrorE"
#define C10_OOM_NAME   "N3c1016OutOfMemoryErrorE"

static void look_up_c10(void *cxxlib) {
  void *c10 = loaded("libc10.so");
  if (!c10)
    return;
  for (size_t i = 0; i < sizeof string_abis / sizeof string_abis[0]; i++) {
    const string_abi *abi = &string_abis[i];
    LOOKUP(c10, error_ctor, abi->error_ctor);
    LOOKUP(cxxlib, string_ctor, abi->string_ctor);
    LOOKUP(cxxlib, string_dtor, abi->string_dtor);
    if (cxx.error_ctor && cxx.string_ctor && cxx.string_dtor)
      break;
    cxx.error_ctor = NULL;
  }
  for (size_t i = 0; i < sizeof oom_libraries / sizeof oom_libraries[0] && !cxx.oom_vtable; i++) {
    void *lib = loaded(oom_libraries[i]);
    void **v = lib ? dlsym(lib, "_ZTVN3c1016OutOfMemoryErrorE") : NULL;
    if (v && vtable_of(v + 2, C10_OOM_NAME)) {
      cxx.oom_vtable = v + 2;
      cxx.oom_type = v[1]; /* the type info this vtable points at */
    }
  }
}

static void look_up(void) {
  void *cxxlib = loaded("libstdc++.so.6");
  if (!cxxlib)
    return;
  LOOKUP(cxxlib, allocate_exception, "__cxa_allocate_exception");
  LOOKUP(cxxlib, free_exception, "__cxa_free_exception");
  LOOKUP(cxxlib, throw_exception, "__cxa_throw");
  LOOKUP(cxxlib, runtime_error_ctor, "_ZNSt13runtime_errorC1EPKc"); /* (const char *) */
  LOOKUP(cxxlib, runtime_error_dtor, "_ZNSt13runtime_errorD1Ev");
  cxx.runtime_error_type = dlsym(cxxlib, "_ZTISt13runtime_error"); /* its type info */
  if (cxx.allocate_exception && cxx.free_exception && cxx.throw_exception)
    look_up_c10(cxxlib);
}

void cxx_raise_runtime_error(const char *message) {
  pthread_once(&cxx_once, look_up);
  if (!cxx.allocate_exception || !cxx.throw_exception || !cxx.runtime_error_ctor ||
      !cxx.runtime_error_dtor || !cxx.runtime_error_type)
    return;
  void *e = cxx.allocate_exception(RUNTIME_ERROR_ROOM);
  cxx.runtime_error_ctor(e, message);
  cxx.throw_exception(e, cxx.runtime_error_type, cxx.runtime_error_dtor);
}

/* __cxa_throw's destructor for c10::OutOfMemoryError, whose own is not
 * exported: its virtual one, the first slot of its vtable (the complete
 * object destructor, in the Itanium ABI). */
static void destroy_by_vtable(void *object) {
  void (*const *slots)(void *) = *(void (*const *const *)(void *))object;
  slots[0](object);
}

void cxx_raise_torch_oom(const char *message, const char *function, const char *file,
                         unsigned line) {
  pthread_once(&cxx_once, look_up);
  if (!cxx.error_ctor || !cxx.oom_vtable)
    return;
  void *e = cxx.allocate_exception(C10_ERROR_ROOM);
  cxx_string msg;
  const char allocator = 0; /* std::allocator<char>, an empty class: any address */
  cxx.string_ctor(&msg, message, &allocator);
  c10_source_location where = {function, file, line};
  cxx.error_ctor(e, where, &msg); /* the string by value: its address, the caller destroys it */
  cxx.string_dtor(&msg);
  void *const **vptr = e;
  if (!vtable_of(*vptr, C10_ERROR_NAME)) { /* not the layout assumed: no exception thrown */
    cxx.free_exception(e);                 /* (what the object holds is lost) */
    return;
  }
  *vptr = cxx.oom_vtable; /* the object becomes the subclass, which adds no member */
  cxx.throw_exception(e, cxx.oom_type, destroy_by_vtable);
}
