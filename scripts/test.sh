#!/usr/bin/env bash
# Every test: builds if needed, then the GoogleTest suite (ctest) and the pytest suites
# (ops, autograd, TorchScript, torch.compile/export, consumers: CMake package, pip package,
# TorchScript in C++, AOTInductor), pytest on every core (pytest-xdist; SCANOPS_TEST_JOBS=N,
# 1: in this process). CUDA tests run when a GPU is present and skip cleanly otherwise.
# Arguments go to pytest. Prints the time of each phase at the end.
#
# Which torch: SCANOPS_TORCH=pinned (default: torch 2.11.0, requirements.txt, .venv, build/),
# SCANOPS_TORCH=newest (torch 2.15.0, requirements-newest.txt, build-newest/), or
# SCANOPS_TORCH=both (the two in turn; CI, .ci/run: the newest torch's environment is made
# while the pinned one builds and tests; with SCANOPS_CI_SANITIZE=address, as .ci/run sets it,
# then the ASan + UBSan run of scripts/sanitize.sh); SCANOPS_PYTHON=<python> uses that Python's torch
# instead. Which back ends: SCANOPS_WITH_CUDA (see cuda_choice in scripts/common.sh).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [ "$TORCH_CHOICE" = both ] && [ -z "${SCANOPS_PYTHON:-}" ]; then
  t_start=$(date +%s)
  mkdir -p "$REPO/build-newest"
  # The newest torch's virtual environment (a download of ~3 GB) while the pinned torch builds.
  venv_log="$REPO/build-newest/venv-setup.log"
  ( t0=$(date +%s)
    SCANOPS_TORCH=newest bash -c 'source "$1/scripts/common.sh"; setup_python' _ "$REPO" >"$venv_log" 2>&1
    rc=$?; echo "venv-seconds $(( $(date +%s) - t0 )) rc $rc" >>"$venv_log"; exit $rc ) &
  venv_pid=$!
  failed=()
  summaries=()
  for choice in pinned newest; do
    log "===== torch: $choice ($(torch_pin "$([ $choice = pinned ] && echo requirements.txt || echo requirements-newest.txt)"))"
    if [ $choice = newest ]; then
      wait "$venv_pid" || { cat "$venv_log"; failed+=("newest (environment)"); continue; }
      log "newest torch's environment, made in the background: $(tail -1 "$venv_log")"
    fi
    phases="$(mktemp)"
    PHASES_FILE="$phases" SCANOPS_TORCH=$choice bash "${BASH_SOURCE[0]}" "$@" || failed+=("$choice")
    summaries+=("$choice:$phases")
  done
  # CI (.ci/run): the CPU back end under AddressSanitizer + UndefinedBehaviorSanitizer with the
  # pinned torch, the ci scope of scripts/sanitize.sh (ctest, test/sanitize/cpu_paths.py: every
  # kernel, schedule and memory mode; the fuzz, fixed seeds and a fresh one).
  if [ "${SCANOPS_CI_SANITIZE:-}" = address ]; then
    log "===== AddressSanitizer + UndefinedBehaviorSanitizer (scripts/sanitize.sh address ci)"
    phases="$(mktemp)"
    PHASES_FILE="$phases" SCANOPS_TORCH=pinned bash "$REPO/scripts/sanitize.sh" address ci ||
      failed+=("address sanitizer")
    summaries+=("address sanitizer:$phases")
  fi
  log "time per phase, both torches (total $(( $(date +%s) - t_start )) s)"
  for s in "${summaries[@]}"; do echo "[${s%%:*}]"; cat "${s#*:}"; rm -f "${s#*:}"; done
  if [ ${#failed[@]} -gt 0 ]; then
    log "FAILED with torch: ${failed[*]}"
    exit 1
  fi
  log "passed with torch: pinned and newest${SCANOPS_CI_SANITIZE:+ (and the $SCANOPS_CI_SANITIZE sanitizer)}"
  exit 0
fi
own_phases=""
if [ -z "${PHASES_FILE:-}" ]; then own_phases="$(mktemp)"; export PHASES_FILE="$own_phases"; fi
phase_begin "system packages"; install_system_packages; phase_end
phase_begin "python environment (torch, tools)"; setup_python; phase_end
phase_begin "build (CUDA back end: $(cuda_choice))"; build; phase_end
export SCANOPS_BUILD_DIR="$BUILD_DIR" SCANOPS_CONSUMERS_DIR="$CONSUMERS_DIR"
export SCANOPS_PYTHON="$PY"
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"
log "GoogleTest (ctest)"
ctest_bin="ctest"; [ -x "$PYBIN/ctest" ] && ctest_bin="$PYBIN/ctest"
phase_begin "ctest"; "$ctest_bin" --test-dir "$BUILD_DIR" --output-on-failure; phase_end
log "pytest ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
cd "$REPO"
jobs="${SCANOPS_TEST_JOBS:-$(nproc)}"
xdist=()
if [ "$jobs" -gt 1 ] && "$PY" -c 'import xdist' 2>/dev/null; then
  # loadfile: a test file's tests run on one worker, in order (the consumer tests share one
  # work directory and build on each other's steps). (--dist loadgroup with an xdist_group
  # mark did not keep a module's tests together with pytest 9.2 and pytest-xdist 3.8.)
  xdist=(-n "$jobs" --dist loadfile)
fi
rc=0
phase_begin "pytest test/python test/consumers test/fuzz (${xdist[*]:-1 process})"
"$PY" -m pytest -q "${xdist[@]}" test/python test/consumers test/fuzz "$@" || rc=$?
phase_end
[ -n "$own_phases" ] && { phase_summary "torch $TORCH_CHOICE"; rm -f "$own_phases"; }
exit $rc
