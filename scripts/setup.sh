#!/usr/bin/env bash
# One command on a fresh machine: system packages, the Python environment with libtorch,
# the build of the library and the C++ demo, then the demo (every op from Python and from
# C++, on the GPU when there is one). The CUDA back end is built when a GPU is present
# (SCANOPS_WITH_CUDA=ON builds it without one; see cuda_choice in scripts/common.sh).
# scripts/test.sh builds the rest (the GoogleTest suite, the other examples).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
t_start=$(date +%s)
install_system_packages
setup_python
build scanops scanops_cpp_api_example
log "demo"
"$REPO/scripts/demo.sh"
log "set up in $(( $(date +%s) - t_start )) s (CUDA back end: $(cuda_choice))"
