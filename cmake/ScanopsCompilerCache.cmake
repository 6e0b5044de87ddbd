# Use ccache for C++ and CUDA when it is installed (CI and re-builds get faster).
find_program(SCANOPS_CCACHE ccache)
if(SCANOPS_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER "${SCANOPS_CCACHE}")
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${SCANOPS_CCACHE}")
endif()
