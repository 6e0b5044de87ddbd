#!/usr/bin/env bash
# Every test: builds if needed, then the GoogleTest suite (ctest) and the pytest suites
# (ops, autograd, TorchScript, torch.compile/export, consumers: CMake package, pip package,
# TorchScript in C++, AOTInductor). CUDA tests run when a GPU is present and skip cleanly
# otherwise. Arguments go to pytest.
#
# Which torch: SCANOPS_TORCH=pinned (default: torch 2.11.0, requirements.txt, .venv, build/),
# SCANOPS_TORCH=newest (torch 2.15.0, requirements-newest.txt, build-newest/), or
# SCANOPS_TORCH=both (the two in turn; CI, .ci/run); SCANOPS_PYTHON=<python> uses that
# Python's torch instead (see scripts/common.sh).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [ "$TORCH_CHOICE" = both ] && [ -z "${SCANOPS_PYTHON:-}" ]; then
  failed=()
  for choice in pinned newest; do
    log "===== torch: $choice ($(torch_pin "$([ $choice = pinned ] && echo requirements.txt || echo requirements-newest.txt)"))"
    SCANOPS_TORCH=$choice bash "${BASH_SOURCE[0]}" "$@" || failed+=("$choice")
  done
  if [ ${#failed[@]} -gt 0 ]; then
    log "FAILED with torch: ${failed[*]}"
    exit 1
  fi
  log "passed with torch: pinned and newest"
  exit 0
fi
install_system_packages
setup_python
build
export SCANOPS_BUILD_DIR="$BUILD_DIR" SCANOPS_CONSUMERS_DIR="$CONSUMERS_DIR"
export SCANOPS_PYTHON="$PY"
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"
log "GoogleTest (ctest)"
ctest_bin="ctest"; [ -x "$PYBIN/ctest" ] && ctest_bin="$PYBIN/ctest"
"$ctest_bin" --test-dir "$BUILD_DIR" --output-on-failure
log "pytest ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
cd "$REPO"
"$PY" -m pytest -q test/python test/consumers "$@"
