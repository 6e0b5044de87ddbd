# Finds libtorch. Order: an explicit Torch_DIR / CMAKE_PREFIX_PATH, else the torch package of
# the Python interpreter CMake finds first (the project's .venv when scripts/ run CMake),
# through torch.utils.cmake_prefix_path.
#
# Two steps, because whether to build the CUDA back end depends on the torch found:
#   scanops_locate_torch()  before enable_language(CUDA): sets SCANOPS_TORCH_LIBDIR (torch's
#                           lib/ directory), SCANOPS_TORCH_HAS_CUDA (libc10_cuda is there),
#                           SCANOPS_TORCH_PY_VERSION and SCANOPS_TORCH_PY_CUDA (torch.__version__,
#                           torch.version.cuda; empty without Python)
#   find_package(Torch)     after it (torch's CMake package wants the CUDA toolkit when torch
#                           is a CUDA build)
macro(scanops_locate_torch)
  set(SCANOPS_TORCH_PY_VERSION "")
  set(SCANOPS_TORCH_PY_CUDA "")
  set(_scanops_torch_prefix "")
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c
        "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(torch.version.cuda or '')"
      OUTPUT_VARIABLE _scanops_torch_out OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _scanops_torch_rc ERROR_QUIET)
    if(_scanops_torch_rc EQUAL 0 AND _scanops_torch_out)
      string(REPLACE "\n" ";" _scanops_torch_out "${_scanops_torch_out}")
      list(GET _scanops_torch_out 0 _scanops_torch_prefix)
      list(GET _scanops_torch_out 1 SCANOPS_TORCH_PY_VERSION)
      list(LENGTH _scanops_torch_out _n)
      if(_n GREATER 2)
        list(GET _scanops_torch_out 2 SCANOPS_TORCH_PY_CUDA)
      endif()
    endif()
  endif()
  if(Torch_DIR)
    get_filename_component(SCANOPS_TORCH_LIBDIR "${Torch_DIR}/../../../lib" ABSOLUTE)
  elseif(_scanops_torch_prefix)
    list(APPEND CMAKE_PREFIX_PATH "${_scanops_torch_prefix}")
    get_filename_component(SCANOPS_TORCH_LIBDIR "${_scanops_torch_prefix}/../../lib" ABSOLUTE)
  else()
    set(SCANOPS_TORCH_LIBDIR "")
  endif()
  if(SCANOPS_TORCH_LIBDIR AND NOT EXISTS "${SCANOPS_TORCH_LIBDIR}/libc10_cuda.so")
    set(SCANOPS_TORCH_HAS_CUDA OFF)
  else()
    set(SCANOPS_TORCH_HAS_CUDA ON)  # found, or not known before find_package(Torch)
  endif()
endmacro()
