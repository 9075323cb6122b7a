# CUPTI GPU tests that are not Criterion executables (the tests/gpu/cupti_*.c
# ones are, through tests/gpu/CMakeLists.txt's glob). Include this file from
# tests/gpu/CMakeLists.txt. Both tests exit 77 to skip (no GPU, no PyTorch).
#   gpu_cupti_inject: an unmodified CUDA program with libgpupool_inject.so
#                     serves /metrics with its allocations.
#   gpu_cupti_torch:  PyTorch with the injection shows its caching
#                     allocator's segments as owner="other".
add_executable(cupti_plain_app ${CMAKE_CURRENT_LIST_DIR}/cupti_apps/plain_app.c)
target_link_libraries(cupti_plain_app PRIVATE CUDA::cudart)

add_test(NAME gpu_cupti_inject
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cupti_inject.sh
    $<TARGET_FILE:gpupool_inject> $<TARGET_FILE:cupti_plain_app>)
set_tests_properties(gpu_cupti_inject PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)

find_program(GPUPOOL_CUPTI_PYTHON3 NAMES python3)
if(GPUPOOL_CUPTI_PYTHON3)
  add_test(NAME gpu_cupti_torch
    COMMAND ${GPUPOOL_CUPTI_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/cupti_torch.py
      $<TARGET_FILE:gpupool_inject>)
  set_tests_properties(gpu_cupti_torch PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()
