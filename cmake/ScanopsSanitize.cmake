# Sanitizer builds of the library's C++ code (the CPU back end, the engine, the registrations)
# and of the C++ programs linking it (the GoogleTest suite, the examples): scripts/sanitize.sh.
#
#   SCANOPS_SANITIZE            empty (default): off. Else the -fsanitize= list, e.g.
#                               "address,undefined" (ASan + UBSan) or "thread" (TSan).
#   SCANOPS_SANITIZE_OPT        optimisation of a sanitizer build (default -O1: about half the
#                               compile time of the normal -O3 on the 2-core VM, and the level
#                               the sanitizers are documented for; -O2/-O3 to see what they
#                               see at the release level: the AVX2 kernels are intrinsics, the
#                               same instructions at every level).
#
# Added to every C++ target of the project (not CUDA sources: a sanitizer build is meant to be
# CPU-only, SCANOPS_WITH_CUDA=OFF): -fsanitize=<list> -fno-omit-frame-pointer -g <opt>, and
# -fno-sanitize-recover=undefined with UBSan (a UB report aborts the process, so it fails the
# test that hit it). Link: -fsanitize=<list>, so that the executables load the sanitizer
# runtime first; a Python process has to LD_PRELOAD it (scripts/sanitize.sh does).
#
# ThreadSanitizer: the OpenMP runtime (libgomp, torch's copy) is not instrumented, so TSan does
# not see the happens-before edges of a parallel region's fork and join (the pool's threads
# are woken and joined through libgomp's own futexes) and reports every write made before a
# region and read inside it as a race, in scanops' regions and in libtorch_cpu's (torch.flip's
# memcpy, exp_kernel: intercepted functions are checked in uninstrumented code too).
# test/sanitize/tsan_omp_fork_join.cpp, built in TSan builds only as libscanops_tsan_omp.so
# (uninstrumented, its GOMP_ entries exported), defines GOMP_parallel, the libgomp entry that
# every `#pragma omp parallel` (at::parallel_for) compiles to, and declares those two edges to
# TSan (nothing else: every synchronisation inside a region, the chained scans' atomics
# included, is instrumented code that TSan checks). It must come before libgomp in the process's
# lookup order for every caller's GOMP_parallel to reach it: linked here into every executable
# of the project (a direct dependency; libgomp is an indirect one) and LD_PRELOADed into Python
# by scripts/sanitize.sh. libscanops.so itself carries nothing of it. See docs/reliability.md.
set(SCANOPS_SANITIZE "" CACHE STRING
    "Sanitizers for the C++ code, a -fsanitize= list (address,undefined or thread); empty: off")
set(SCANOPS_SANITIZE_OPT "-O1" CACHE STRING "Optimisation level of a sanitizer build (e.g. -O1, -O2)")

if(SCANOPS_SANITIZE)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "scanops: SCANOPS_SANITIZE needs GCC or Clang (have ${CMAKE_CXX_COMPILER_ID})")
  endif()
  string(REPLACE "," ";" _scanops_san_list "${SCANOPS_SANITIZE}")
  if("thread" IN_LIST _scanops_san_list AND
     ("address" IN_LIST _scanops_san_list OR "leak" IN_LIST _scanops_san_list))
    message(FATAL_ERROR "scanops: SCANOPS_SANITIZE=${SCANOPS_SANITIZE}: thread cannot be combined "
                        "with address or leak (two builds: address,undefined and thread)")
  endif()
  set(SCANOPS_SANITIZE_COMPILE_FLAGS
      "-fsanitize=${SCANOPS_SANITIZE}" -fno-omit-frame-pointer -g ${SCANOPS_SANITIZE_OPT})
  if("undefined" IN_LIST _scanops_san_list)
    list(APPEND SCANOPS_SANITIZE_COMPILE_FLAGS -fno-sanitize-recover=undefined)
  endif()
  set(SCANOPS_SANITIZE_LINK_FLAGS "-fsanitize=${SCANOPS_SANITIZE}")
  if("thread" IN_LIST _scanops_san_list)
    # The OpenMP fork/join interposer (see above). Not instrumented: its own bookkeeping (the
    # region record the members read) is no access of the program's.
    add_library(scanops_tsan_omp SHARED "${CMAKE_SOURCE_DIR}/test/sanitize/tsan_omp_fork_join.cpp")
    set_target_properties(scanops_tsan_omp PROPERTIES
      OUTPUT_NAME scanops_tsan_omp CXX_VISIBILITY_PRESET hidden)
    target_compile_options(scanops_tsan_omp PRIVATE -O1 -g -fno-omit-frame-pointer -Wall -Wextra)
    target_link_options(scanops_tsan_omp PRIVATE "LINKER:--as-needed")
    target_link_libraries(scanops_tsan_omp PRIVATE ${CMAKE_DL_LIBS})
  endif()
  message(STATUS "scanops: sanitizers: ${SCANOPS_SANITIZE} (${SCANOPS_SANITIZE_COMPILE_FLAGS})")

  # The C++ targets of a directory and its subdirectories.
  function(_scanops_sanitize_targets dir out)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(sub IN LISTS subdirs)
      _scanops_sanitize_targets("${sub}" more)
      list(APPEND targets ${more})
    endforeach()
    set(${out} ${targets} PARENT_SCOPE)
  endfunction()

  # Run once the whole project is configured (every target defined): the flags come after the
  # targets' own options (the library's -O3), so SCANOPS_SANITIZE_OPT is the level used.
  function(_scanops_sanitize_apply)
    _scanops_sanitize_targets("${CMAKE_SOURCE_DIR}" targets)
    list(REMOVE_ITEM targets scanops_tsan_omp)
    foreach(t IN LISTS targets)
      get_target_property(type ${t} TYPE)
      if(type MATCHES "^(EXECUTABLE|SHARED_LIBRARY|MODULE_LIBRARY|STATIC_LIBRARY|OBJECT_LIBRARY)$")
        target_compile_options(${t} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${SCANOPS_SANITIZE_COMPILE_FLAGS}>")
        if(NOT type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY)$")
          target_link_options(${t} PRIVATE ${SCANOPS_SANITIZE_LINK_FLAGS})
        endif()
        # An executable's libgomp calls (libtorch_cpu's, libscanops') reach the interposer:
        # a direct dependency (kept although the program references none of its symbols)
        # precedes libgomp, an indirect one, in the lookup order.
        if(type STREQUAL "EXECUTABLE" AND TARGET scanops_tsan_omp)
          target_link_options(${t} PRIVATE "LINKER:--no-as-needed")
          target_link_libraries(${t} PRIVATE scanops_tsan_omp)
        endif()
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _scanops_sanitize_apply)
endif()
