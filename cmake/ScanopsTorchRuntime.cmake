# The shared libraries a torch installation brings, and how programs find them.
#
# A torch pip wheel keeps libtorch in site-packages/torch/lib and depends on nvidia-* wheels
# for NCCL, cuDNN, cuBLAS, the CUDA runtime, ... (site-packages/nvidia/<name>/lib; torch's
# own RPATH points there). Programs that link torch must link and run against those, not
# against older copies elsewhere: the CUDA toolkit's lib64/ also holds a libnccl.so.2 and a
# libcudart.so.13, and CMake puts that directory on the link line and in RUNPATHs (torch's
# CMake package links CUDA::cudart and friends from the toolkit). Left alone, `ld` resolves
# libtorch_cuda.so's libnccl.so.2 in the toolkit and fails on symbols only the newer NCCL has
# (torch 2.15: undefined reference to `ncclCommResume'), and a program loads the toolkit's
# CUDA runtime instead of the wheel's.
#
# Installed with the CMake package (scanopsConfig.cmake includes it), so consumers of an
# installed or pip-installed scanops get the same treatment.

# scanops_torch_runtime_dirs(<out-var> <torch library file or lib directory>)
# torch's lib/ directory, then (for a wheel, torch/lib inside site-packages) every
# site-packages/nvidia/*/lib directory, in a stable order.
function(scanops_torch_runtime_dirs out torch_lib)
  if(IS_DIRECTORY "${torch_lib}")
    get_filename_component(libdir "${torch_lib}" ABSOLUTE)
  else()
    get_filename_component(libdir "${torch_lib}" DIRECTORY)
  endif()
  set(dirs "${libdir}")
  get_filename_component(pkg "${libdir}/.." ABSOLUTE)
  get_filename_component(pkg_name "${pkg}" NAME)
  if(pkg_name STREQUAL "torch")
    get_filename_component(site "${pkg}/.." ABSOLUTE)
    file(GLOB nvidia_dirs LIST_DIRECTORIES true "${site}/nvidia/*/lib")
    list(SORT nvidia_dirs)
    foreach(d IN LISTS nvidia_dirs)
      if(IS_DIRECTORY "${d}")
        list(APPEND dirs "${d}")
      endif()
    endforeach()
  endif()
  set(${out} "${dirs}" PARENT_SCOPE)
endfunction()

# scanops_torch_runtime_link_options(<out-var> <dirs...>)
# Linker options that put <dirs> first: -rpath-link (where `ld` resolves the dependencies
# of shared libraries, e.g. libtorch_cuda.so's libnccl.so.2, at link time) and -rpath (the
# program's RUNPATH, ahead of the directories CMake adds after these options).
function(scanops_torch_runtime_link_options out)
  set(opts "")
  foreach(d IN LISTS ARGN)
    list(APPEND opts "LINKER:-rpath-link,${d}" "LINKER:-rpath,${d}")
  endforeach()
  set(${out} "${opts}" PARENT_SCOPE)
endfunction()
