// A stand-in, for the tests, for the part of PyTorch's libc10 that the torch
// adapter's exceptions use (torch/cxx_raise.c): c10::SourceLocation,
// c10::Error built from one and a message, and c10::OutOfMemoryError, a
// subclass with no member of its own, under PyTorch's names and with the
// shape the adapter relies on (polymorphic, one base, std::exception). Its
// members are not PyTorch's: the adapter reaches none of them.
#ifndef GPUPOOL_TESTS_FAKE_C10_H
#define GPUPOOL_TESTS_FAKE_C10_H

#include <cstdint>
#include <exception>
#include <string>

namespace c10 {

struct SourceLocation {
  const char *function;
  const char *file;
  uint32_t line;
};

class Error : public std::exception {
public:
  Error(SourceLocation where, std::string msg);
  ~Error() override;
  const char *what() const noexcept override;
  const SourceLocation &where() const {
    return where_;
  }
  const std::string &msg() const {
    return msg_;
  }

private:
  SourceLocation where_;
  std::string msg_;
  std::string what_; // the message and where it was raised
};

class OutOfMemoryError : public Error {
  using Error::Error;
};

} // namespace c10

// Throws a c10::OutOfMemoryError from inside the library, so that the
// library holds the class's vtable and type info, as PyTorch's do.
extern "C" void fake_c10_throw_oom(const char *message);

#endif
