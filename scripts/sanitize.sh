#!/usr/bin/env bash
# Sanitizer runs of the CPU back end (docs/reliability.md):
#
#   bash scripts/sanitize.sh [address|thread] [ci|full] [pytest arguments...]
#
#   address (default): AddressSanitizer + UndefinedBehaviorSanitizer, build-asan/
#   thread:            ThreadSanitizer, build-tsan/
#   ci (default):      ctest, test/sanitize/cpu_paths.py (every kernel, schedule and memory mode
#                      of the CPU back end) and the fuzz (fixed seeds and a fresh one)
#   full:              ci plus every CPU Python test file but torch.compile / TorchScript
#   pytest arguments:  these tests too (e.g. test/python/test_cpu_threads.py -k threads)
#
# Configures and builds a CPU-only library with SCANOPS_SANITIZE (cmake/ScanopsSanitize.cmake)
# against the Python environment of scripts/setup.sh (common.sh: setup_python, build), runs the
# GoogleTest suite (its executable is instrumented and links the runtime), then Python with the
# sanitizer runtime preloaded (Python itself is not instrumented): test/sanitize/cpu_paths.py,
# the fuzz (test/fuzz/fuzz_ops.py: fixed seeds and a fresh one) and, for full, the CPU Python
# test files. ThreadSanitizer: the build's libscanops_tsan_omp.so (test/sanitize/
# tsan_omp_fork_join.cpp: the fork/join edges of every OpenMP region, torch's too) is preloaded
# too, right after the runtime, once its self-test (test/sanitize/tsan_omp_selftest.cpp) has
# run; the GoogleTest executable links it. Every report goes to a file under
# <build dir>/sanitizer-logs/ (child processes of the tests too); the run fails if a test fails
# or any report was written, and prints the reports.
#
# Environment: SCANOPS_SANITIZE_FUZZ_SECONDS (fresh-seed fuzz, default 30; 0: none),
# SCANOPS_SANITIZE_FUZZ_CASES (cases of each fixed seed, default 60), SCANOPS_TEST_JOBS (pytest
# workers, default: the number of cores), SCANOPS_JOBS (build jobs),
# and those of scripts/common.sh (SCANOPS_TORCH, SCANOPS_PYTHON).
set -euo pipefail
mode="${1:-address}"; [ $# -gt 0 ] && shift
scope="ci"
if [ $# -gt 0 ] && { [ "$1" = ci ] || [ "$1" = full ]; }; then scope="$1"; shift; fi
case "$mode" in
  address|asan) mode=address; sanitize="address,undefined"; dir=build-asan; runtime=libasan.so ;;
  thread|tsan) mode=thread; sanitize="thread"; dir=build-tsan; runtime=libtsan.so ;;
  *) echo "usage: $0 [address|thread] [ci|full] [pytest arguments...]" >&2; exit 2 ;;
esac
export SCANOPS_BUILD_DIR="${SCANOPS_SANITIZE_BUILD_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/$dir}"
export SCANOPS_WITH_CUDA=OFF
export SCANOPS_CMAKE_ARGS="-DSCANOPS_SANITIZE=$sanitize -DSCANOPS_BUILD_EXAMPLES=OFF ${SCANOPS_CMAKE_ARGS:-}"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [ "$TORCH_CHOICE" = both ]; then echo "$0: SCANOPS_TORCH=both: pick pinned or newest" >&2; exit 2; fi
if [ -z "${PHASES_FILE:-}" ]; then  # (scripts/test.sh passes its own, for CI's summary)
  PHASES_FILE="$(mktemp)"; export PHASES_FILE
  trap 'rm -f "$PHASES_FILE"' EXIT
fi
t_start=$(date +%s)

phase_begin "python environment"; setup_python; phase_end
# A build directory configured with other sanitizers is configured afresh (build() reconfigures
# only for another Python or CUDA choice).
cache="$BUILD_DIR/CMakeCache.txt"
if [ -f "$cache" ] && [ "$(sed -n 's/^SCANOPS_SANITIZE:[A-Z]*=//p' "$cache")" != "$sanitize" ]; then
  rm -f "$cache"
fi
phase_begin "build ($dir, -fsanitize=$sanitize)"; build; phase_end

# The sanitizer runtime of the compiler that built the library, preloaded into Python (a
# runtime must be loaded before anything it intercepts).
cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")"
rt="$(readlink -f "$("${cxx:-g++}" -print-file-name="$runtime")")"
[ -f "$rt" ] || { echo "$0: $runtime not found ($cxx -print-file-name=$runtime)" >&2; exit 1; }
# libstdc++ too: Python does not link it, and a runtime loaded before it finds no
# __cxa_throw to intercept (ASan: "CHECK failed: ... real___cxa_throw != 0" at the first C++
# exception, i.e. every bad-input test).
stdcxx="$(readlink -f "$("${cxx:-g++}" -print-file-name=libstdc++.so.6)")"
omp=""
if [ "$mode" = thread ]; then
  # The OpenMP fork/join interposer (cmake/ScanopsSanitize.cmake), right after the runtime: it
  # must come before libgomp in the lookup order, so that libtorch_cpu's GOMP_parallel calls
  # reach it as well as libscanops'.
  omp="$BUILD_DIR/libscanops_tsan_omp.so"
  [ -f "$omp" ] || { echo "$0: $omp not built (cmake/ScanopsSanitize.cmake)" >&2; exit 1; }
fi
preload="$rt${omp:+:$omp}:$stdcxx${LD_PRELOAD:+:$LD_PRELOAD}"
logs="$BUILD_DIR/sanitizer-logs"
rm -rf "$logs"; mkdir -p "$logs"
supp="$REPO/test/sanitize"
# Python and libtorch are not instrumented: leak checking would report every allocation that
# lives until exit (detect_leaks=0). A report aborts (a test sees its process die; pytest's
# faulthandler names the test) and is written to $logs/<tool>.<pid>.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:log_path=$logs/asan:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$logs/ubsan:suppressions=$supp/ubsan.supp:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:log_path=$logs/tsan:suppressions=$supp/tsan.supp:${TSAN_OPTIONS:-}"
# The libgomp entries the interposer does not model, where a process reaches one (printed at
# the end: a report across one of them may be false).
export SCANOPS_TSAN_OMP_NOTES="$BUILD_DIR/tsan-omp-notes.txt"
rm -f "$SCANOPS_TSAN_OMP_NOTES"
export SCANOPS_LIBRARY="$BUILD_DIR/libscanops.so" PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"

rc=0
if [ "$mode" = thread ]; then
  # The set-up's own check: OpenMP regions in instrumented code (as scanops') and in an
  # uninstrumented library loaded RTLD_LOCAL (as libtorch_cpu's under Python), with the
  # interposer preloaded as into Python: no report on correct code, a report on each planted
  # race; without it (the control) reports on the correct code, i.e. the interposer is what
  # models the edges and it reaches both kinds of caller.
  log "ThreadSanitizer self-test (test/sanitize/tsan_omp_selftest.cpp)"
  phase_begin "tsan self-test"
  st="$BUILD_DIR/tsan_omp_selftest" stlib="$BUILD_DIR/libtsan_omp_selftest_lib.so"
  "${cxx:-g++}" -O1 -g -fopenmp -fsanitize=thread "$supp/tsan_omp_selftest.cpp" -o "$st"
  "${cxx:-g++}" -O1 -g -fopenmp -fPIC -shared "$supp/tsan_omp_selftest_lib.cpp" -o "$stlib"
  st_reports() {  # preload, case: the number of reports
    env LD_PRELOAD="$1" TSAN_OPTIONS=halt_on_error=0 "$st" "$2" "$stlib" 2>&1 |
      grep -c "WARNING: ThreadSanitizer" || true
  }
  st_fail=0
  for c in "ok 0 $rt:$omp" "lib 0 $rt:$omp" "race 1 $rt:$omp" "lib-race 1 $rt:$omp" \
           "ok 1 $rt" "lib 1 $rt"; do
    read -r case_ some case_preload <<<"$c"  # some: 0 = no report wanted, 1 = one or more
    n=$(st_reports "$case_preload" "$case_")
    if [ "$some" = 0 ]; then want="want 0"; [ "$n" = 0 ] || st_fail=1
    else want="want 1 or more"; [ "$n" != 0 ] || st_fail=1; fi
    with="with the interposer"; [ "$case_preload" = "$rt" ] && with="without the interposer"
    printf '  %-9s %-23s %3s reports (%s)\n' "$case_" "$with" "$n" "$want"
  done
  if [ "$st_fail" != 0 ]; then echo "TSan self-test FAILED"; rc=1; fi
  phase_end
fi
log "GoogleTest (ctest), instrumented"
ctest_bin="ctest"; [ -x "$PYBIN/ctest" ] && ctest_bin="$PYBIN/ctest"
phase_begin "ctest"
"$ctest_bin" --test-dir "$BUILD_DIR" --output-on-failure || rc=1
phase_end

# Every kernel, schedule and memory mode of the CPU back end once (test/sanitize/cpu_paths.py,
# each mode in a process of its own); the fuzz, fixed seeds (the same cases every run) and a
# fresh seed (printed; a failure prints the command that replays it).
cd "$REPO"
log "CPU paths under the $mode sanitizer (test/sanitize/cpu_paths.py), LD_PRELOAD=$preload"
phase_begin "cpu paths (test/sanitize/cpu_paths.py)"
LD_PRELOAD="$preload" "$PY" test/sanitize/cpu_paths.py || rc=1
phase_end
fuzz=(env LD_PRELOAD="$preload" "$PY" test/fuzz/fuzz_ops.py)
fc="${SCANOPS_SANITIZE_FUZZ_CASES:-60}"
phase_begin "fuzz, fixed seeds 1-3, $fc cases each"
for s in 1 2 3; do "${fuzz[@]}" --seed "$s" --cases "$fc" || rc=1; done
phase_end
fs="${SCANOPS_SANITIZE_FUZZ_SECONDS:-30}"
if [ "$fs" != 0 ]; then
  phase_begin "fuzz, fresh seed, $fs s"
  "${fuzz[@]}" --seconds "$fs" || rc=1
  phase_end
fi

# full: the CPU Python test files too (every test but torch.compile / TorchScript; about an hour
# under ASan on 2 cores); ci with pytest arguments: those tests.
tests=()
if [ "$scope" = full ]; then
  tests=(test/python --ignore=test/python/test_pt2.py --ignore=test/python/test_torchscript.py)
fi
if [ ${#tests[@]} -gt 0 ] || [ $# -gt 0 ]; then
  jobs="${SCANOPS_TEST_JOBS:-$(nproc)}"
  xdist=()
  if [ "$jobs" -gt 1 ] && "$PY" -c 'import xdist' 2>/dev/null; then xdist=(-n "$jobs"); fi
  log "pytest under the $mode sanitizer (${tests[*]} $*)"
  phase_begin "pytest (${xdist[*]:-1 process})"
  LD_PRELOAD="$preload" "$PY" -m pytest -q -p no:cacheprovider --durations=15 "${xdist[@]}" \
    "${tests[@]}" "$@" || rc=1
  phase_end
fi

if [ -s "$SCANOPS_TSAN_OMP_NOTES" ]; then
  log "libgomp entries reached that the OpenMP interposer does not model (test/sanitize/tsan_omp_fork_join.cpp)"
  sort -u -t: -k2 "$SCANOPS_TSAN_OMP_NOTES"
fi
if compgen -G "$logs/*" >/dev/null; then
  log "sanitizer reports ($logs)"
  for f in "$logs"/*; do echo "---- $f"; cat "$f"; done
  rc=1
fi
phase_summary "$mode sanitizer, $scope, total $(( $(date +%s) - t_start )) s"
if [ $rc -ne 0 ]; then log "FAILED ($mode sanitizer)"; else log "passed ($mode sanitizer: no report)"; fi
exit $rc
