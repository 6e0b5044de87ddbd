# Finds libtorch. Order: an explicit Torch_DIR / CMAKE_PREFIX_PATH, else the torch package of
# the Python interpreter CMake finds first (the project's .venv when scripts/ run CMake),
# through torch.utils.cmake_prefix_path.
if(NOT Torch_DIR)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _scanops_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _scanops_torch_rc ERROR_QUIET)
    if(_scanops_torch_rc EQUAL 0 AND _scanops_torch_prefix)
      list(APPEND CMAKE_PREFIX_PATH "${_scanops_torch_prefix}")
    endif()
  endif()
endif()
find_package(Torch REQUIRED)
message(STATUS "scanops: Torch ${Torch_VERSION} from ${Torch_DIR}")
