#!/usr/bin/env bash
# Every test: builds if needed, then the GoogleTest suite (ctest) and the pytest suites
# (ops, autograd, TorchScript, torch.compile/export, consumers: CMake package, pip package,
# TorchScript in C++, AOTInductor), pytest on every core (pytest-xdist; SCANOPS_TEST_JOBS=N,
# 1: in this process). CUDA tests run when a GPU is present and skip cleanly otherwise.
# Arguments go to pytest. Prints the time of each phase at the end.
#
# Which torch: SCANOPS_TORCH=pinned (default: torch 2.11.0, requirements.txt, .venv, build/),
# SCANOPS_TORCH=newest (torch 2.15.0, requirements-newest.txt, build-newest/), or
# SCANOPS_TORCH=both (the two; CI, .ci/run: the newest torch's environment is made while the
# pinned one builds, its build runs beside the pinned tests); SCANOPS_PYTHON=<python> uses that Python's torch
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
  pin_phases="$(mktemp)"; new_phases="$(mktemp)"
  run_choice() {  # run_choice CHOICE STEPS PHASES [pytest args]: this script for one torch
    local choice="$1" steps="$2" phases="$3"; shift 3
    PHASES_FILE="$phases" SCANOPS_TEST_STEPS="$steps" SCANOPS_TORCH="$choice" \
      bash "${BASH_SOURCE[0]}" "$@"
  }
  log "===== torch: pinned ($(torch_pin requirements.txt)): build"
  pinned_built=1
  run_choice pinned build "$pin_phases" || { failed+=("pinned (build)"); pinned_built=0; }
  # The newest torch's build runs beside the pinned torch's tests: the tests leave a core idle
  # part of the time (single-threaded steps, waits on subprocesses).
  newest_build_log="$REPO/build-newest/build.log"
  newest_env=1
  wait "$venv_pid" || { cat "$venv_log"; failed+=("newest (environment)"); newest_env=0; }
  if [ $newest_env = 1 ]; then
    log "newest torch's environment, made in the background: $(tail -1 "$venv_log")"
    log "===== torch: newest ($(torch_pin requirements-newest.txt)): build, in the background (log: $newest_build_log)"
    run_choice newest build "$new_phases" >"$newest_build_log" 2>&1 &
    newest_build_pid=$!
  fi
  if [ $pinned_built = 1 ]; then
    log "===== torch: pinned ($(torch_pin requirements.txt)): tests"
    run_choice pinned test "$pin_phases" "$@" || failed+=("pinned")
  fi
  if [ $newest_env = 1 ]; then
    newest_built=1
    wait "$newest_build_pid" || { failed+=("newest (build)"); newest_built=0; }
    log "===== torch: newest ($(torch_pin requirements-newest.txt)): its build's log"
    cat "$newest_build_log"
    if [ $newest_built = 1 ]; then
      log "===== torch: newest ($(torch_pin requirements-newest.txt)): tests"
      run_choice newest test "$new_phases" "$@" || failed+=("newest")
    fi
  fi
  summaries=("pinned:$pin_phases" "newest (its build beside the pinned tests):$new_phases")
  log "time per phase, both torches (total $(( $(date +%s) - t_start )) s)"
  for s in "${summaries[@]}"; do echo "[${s%%:*}]"; cat "${s#*:}"; rm -f "${s#*:}"; done
  if [ ${#failed[@]} -gt 0 ]; then
    log "FAILED with torch: ${failed[*]}"
    exit 1
  fi
  log "passed with torch: pinned and newest"
  exit 0
fi
own_phases=""
if [ -z "${PHASES_FILE:-}" ]; then own_phases="$(mktemp)"; export PHASES_FILE="$own_phases"; fi
# SCANOPS_TEST_STEPS (used by the both-torches run above): build, test, or all (default).
steps="${SCANOPS_TEST_STEPS:-all}"
if [ "$steps" != test ]; then
  phase_begin "system packages"; install_system_packages; phase_end
  phase_begin "python environment (torch, tools)"; setup_python; phase_end
  phase_begin "build (CUDA back end: $(cuda_choice))"; build; phase_end
  [ "$steps" = build ] && exit 0
else
  setup_python >/dev/null
  export SCANOPS_LIBRARY="$BUILD_DIR/libscanops.so"
fi
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
