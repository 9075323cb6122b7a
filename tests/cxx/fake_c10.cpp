// Built as libc10.so (tests/CMakeLists.txt): see fake_c10.h.
#include "fake_c10.h"

#include <utility>

namespace c10 {

Error::Error(SourceLocation where, std::string msg)
    : where_(where), msg_(std::move(msg)),
      what_(msg_ + " (raised from " + where.function + " at " + where.file + ":" +
            std::to_string(where.line) + ")") {}

Error::~Error() = default;

const char *Error::what() const noexcept {
  return what_.c_str();
}

} // namespace c10

extern "C" void fake_c10_throw_oom(const char *message) {
  throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
}
