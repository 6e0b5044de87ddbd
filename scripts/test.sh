#!/usr/bin/env bash
# Every test: builds if needed, then the GoogleTest suite (ctest) and the pytest suites
# (ops, autograd, TorchScript, torch.compile/export, consumers: CMake package, TorchScript in
# C++, AOTInductor). CUDA tests run when a GPU is present and skip cleanly otherwise.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_system_packages
setup_python
build
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"
log "GoogleTest (ctest)"
ctest_bin="ctest"; [ -x "$PYBIN/ctest" ] && ctest_bin="$PYBIN/ctest"
"$ctest_bin" --test-dir "$BUILD_DIR" --output-on-failure
log "pytest"
cd "$REPO"
"$PY" -m pytest -q test/python test/consumers "$@"
