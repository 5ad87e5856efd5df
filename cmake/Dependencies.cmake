# Dependencies: Debian packages (GoogleTest, CLI11, nlohmann-json, fmt) and the CuTe /
# CUTLASS headers shipped inside PyPI's nvidia-cutlass (pinned in scripts/install-deps.sh).
find_package(CUDAToolkit REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(GTest CONFIG REQUIRED)

set(KBMLA_CUTLASS_INCLUDE_DIR "" CACHE PATH
    "CUTLASS/CuTe include directory (default: the one inside the installed nvidia-cutlass wheel)")
if(NOT KBMLA_CUTLASS_INCLUDE_DIR)
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
    OUTPUT_VARIABLE _kbmla_cutlass_inc OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _kbmla_cutlass_rc ERROR_QUIET)
  if(_kbmla_cutlass_rc EQUAL 0)
    set(KBMLA_CUTLASS_INCLUDE_DIR "${_kbmla_cutlass_inc}" CACHE PATH "" FORCE)
  endif()
endif()
if(NOT EXISTS "${KBMLA_CUTLASS_INCLUDE_DIR}/cute/tensor.hpp")
  message(FATAL_ERROR
    "CuTe headers not found (looked in '${KBMLA_CUTLASS_INCLUDE_DIR}'). Install them with "
    "scripts/install-deps.sh (PyPI nvidia-cutlass), or pass -DKBMLA_CUTLASS_INCLUDE_DIR=<cutlass>/include.")
endif()
message(STATUS "kbmla: CuTe/CUTLASS headers from ${KBMLA_CUTLASS_INCLUDE_DIR}")
add_library(kbmla_cutlass INTERFACE)
target_include_directories(kbmla_cutlass SYSTEM INTERFACE "${KBMLA_CUTLASS_INCLUDE_DIR}")

# nccl.h (the CUDA toolkit ships it) for the types of the DCP all-gather path; libnccl itself
# is loaded at run time. Without the header that path throws a kbmla::Error saying so.
find_path(KBMLA_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(KBMLA_NCCL_INCLUDE_DIR)
  set(KBMLA_HAVE_NCCL 1)
  message(STATUS "kbmla: nccl.h from ${KBMLA_NCCL_INCLUDE_DIR} (libnccl loaded at run time)")
else()
  set(KBMLA_HAVE_NCCL 0)
  message(STATUS "kbmla: no nccl.h; dcp_allgather_merge will report that it was built without NCCL")
endif()
