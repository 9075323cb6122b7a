// gpupool_torch_malloc's failures as a PyTorch process sees them: this
// program links libc10.so (the stand-in of fake_c10.h), so the adapter
// (torch/torch_allocator.c) takes itself to be inside PyTorch and throws.
// Out of memory must be a c10::OutOfMemoryError, which PyTorch raises in
// Python as torch.OutOfMemoryError; any other failure std::runtime_error.
// Each Criterion test runs in its own process, so each starts with no pool.
#include <criterion/criterion.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "fake_c10.h"
#include "gpupool/gpupool.h"
#include "gpupool/torch.h"

static void host_pools(void) {
  setenv("GPUPOOL_CONF", "backend:host,host_capacity_mb:64", 1);
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_RECORD");
}

static uint64_t ooms(void) {
  gpupool_stats s;
  std::memset(&s, 0, sizeof s);
  cr_assert_eq(gpupool_get_stats(gpupool_torch_pool(0), &s), GPUPOOL_OK);
  return s.num_ooms;
}

static bool starts_with(const std::string &s, const char *prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

Test(torch_oom, out_of_memory_is_c10_out_of_memory_error, .init = host_pools) {
  void *kept = gpupool_torch_malloc(1 << 20, 0, nullptr);
  cr_assert_not_null(kept);
  std::string what, msg, function;
  bool caught = false;
  try {
    gpupool_torch_malloc(size_t(1) << 30, 0, nullptr); // 1 GiB of a 64 MiB device
  } catch (const c10::OutOfMemoryError &e) {
    caught = true;
    what = e.what();
    msg = e.msg();
    function = e.where().function;
  }
  cr_assert(caught, "no c10::OutOfMemoryError");
  cr_assert(starts_with(msg, "CUDA out of memory."), "message: %s", msg.c_str());
  cr_assert(msg.find("in pool 'torch'") != std::string::npos, "message: %s", msg.c_str());
  cr_assert(what.find("raised from gpupool_torch_malloc at ") != std::string::npos,
            "what(): %s (function %s)", what.c_str(), function.c_str());
  cr_assert_eq(ooms(), 1);
  // The pool and what it holds go on.
  void *p = gpupool_torch_malloc(1 << 20, 0, nullptr);
  cr_assert_not_null(p);
  gpupool_torch_free(p, 1 << 20, 0, nullptr);
  gpupool_torch_free(kept, 1 << 20, 0, nullptr);
}

// PyTorch's handlers catch c10::Error (and std::exception) as well: the
// exception is one, with its message, whichever clause meets it first.
Test(torch_oom, out_of_memory_is_a_c10_error_and_a_std_exception, .init = host_pools) {
  bool as_error = false, as_exception = false;
  try {
    gpupool_torch_malloc(size_t(1) << 30, 0, nullptr);
  } catch (const c10::Error &e) {
    as_error = dynamic_cast<const c10::OutOfMemoryError *>(&e) != nullptr;
  }
  cr_assert(as_error, "not caught as a c10::Error that is a c10::OutOfMemoryError");
  try {
    gpupool_torch_malloc(size_t(1) << 30, 0, nullptr);
  } catch (const std::exception &e) {
    as_exception = starts_with(e.what(), "CUDA out of memory.");
    cr_assert(as_exception, "what(): %s", e.what());
  }
  cr_assert(as_exception, "not caught as a std::exception");
  cr_assert_eq(ooms(), 2);
}

Test(torch_oom, another_failure_is_std_runtime_error, .init = host_pools) {
  bool caught = false;
  try {
    gpupool_torch_malloc(1024, -1, nullptr); // no such device
  } catch (const c10::Error &e) {
    cr_assert_fail("a c10::Error for a bad device: %s", e.what());
  } catch (const std::runtime_error &e) {
    caught = true;
    cr_assert(std::strstr(e.what(), "no such device") != nullptr, "what(): %s", e.what());
  }
  cr_assert(caught, "no std::runtime_error");
}

// fake_c10_throw_oom is the stand-in's own throw: what the adapter's must
// be indistinguishable from for a catch clause.
Test(torch_oom, the_stand_in_throws_the_same_class) {
  bool caught = false;
  try {
    fake_c10_throw_oom("CUDA out of memory. (the stand-in)");
  } catch (const c10::OutOfMemoryError &e) {
    caught = starts_with(e.msg(), "CUDA out of memory.");
  }
  cr_assert(caught);
}

// set_begin_allocate_to_pool: PyTorch casts the address to
// void(int, std::pair<unsigned long long, unsigned long long>,
// std::function<bool(cudaStream_t)>) and calls it at a CUDA graph's capture
// begin. Called that way (the pair by value, the std::function by value), the
// refusal must arrive as std::runtime_error naming the device and the pool id,
// and the allocator must go on.
Test(torch_oom, a_private_pool_is_refused_as_pytorch_calls_it, .init = host_pools) {
  using MempoolId = std::pair<unsigned long long, unsigned long long>;
  using BeginFn = void(int, MempoolId, std::function<bool(void *)>);
  std::function<BeginFn> begin =
      reinterpret_cast<BeginFn *>(reinterpret_cast<void *>(&gpupool_torch_begin_allocate_to_pool));
  int filter_calls = 0;
  std::string msg;
  try {
    begin(3, MempoolId{7, 11}, [&filter_calls](void *) { return ++filter_calls > 0; });
  } catch (const std::runtime_error &e) {
    msg = e.what();
  }
  cr_assert(msg.find("CUDA graph capture into a private memory pool") != std::string::npos,
            "no refusal: '%s'", msg.c_str());
  cr_assert(msg.find("device 3 (memory pool id (7, 11))") != std::string::npos, "%s", msg.c_str());
  cr_assert_eq(filter_calls, 0);
  void *p = gpupool_torch_malloc(1 << 20, 0, nullptr);
  cr_assert_not_null(p);
  gpupool_torch_free(p, 1 << 20, 0, nullptr);
}
