#!/usr/bin/env bash
# One command on a fresh machine: system packages, the Python environment with libtorch,
# the build, then the demo (every op from Python and from C++, on the GPU when there is one).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_system_packages
setup_python
build
log "demo"
"$REPO/scripts/demo.sh"
