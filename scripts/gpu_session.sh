#!/usr/bin/env bash
# What one call of the lent GPU machine runs: build against its preinstalled torch, every
# test (CUDA included), compute-sanitizer on the CUDA kernels, and the GPU benchmark.
# Logs go to $OUT (or ./gpu-out). Usage: scripts/gpu_session.sh [build|test|exact|sanitize|consumers|bench|cpubench]...
# BENCH_ARGS passes options to bench/bench_gpu.py, as shell words (e.g. --no-compile --rounds 3
# --only "cumprod,(32768, 32768) dim 0").
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$REPO/gpu-out}"
mkdir -p "$OUT"
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++   # the machine's default wrapper miscompiles
export SCANOPS_PYTHON="${SCANOPS_PYTHON:-$(command -v python3)}"
export SCANOPS_CUDA_ARCHS="${SCANOPS_CUDA_ARCHS:-9.0}"
export SCANOPS_BUILD_DIR="${SCANOPS_BUILD_DIR:-$REPO/build-gpu}"
export SCANOPS_LIBRARY="$SCANOPS_BUILD_DIR/libscanops.so"
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(build test exact sanitize consumers bench)
rc=0
for s in "${steps[@]}"; do
  case "$s" in
    build)
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/device.txt"
      ( source "$REPO/scripts/common.sh"; setup_python; time build ) 2>&1 | tee "$OUT/build.log" | tail -5
      [ -f "$SCANOPS_LIBRARY" ] || { echo "BUILD FAILED"; exit 1; } ;;
    test)
      ( cd "$REPO" && ctest --test-dir "$SCANOPS_BUILD_DIR" --output-on-failure ) > "$OUT/ctest.log" 2>&1 || rc=1
      tail -3 "$OUT/ctest.log"
      ( cd "$REPO" && "$SCANOPS_PYTHON" -m pytest -q -ra test/python --durations=10 -p no:cacheprovider ) > "$OUT/pytest.log" 2>&1 || rc=1
      tail -25 "$OUT/pytest.log" ;;
    consumers)
      ( cd "$REPO" && "$SCANOPS_PYTHON" -m pytest -q -ra test/consumers -p no:cacheprovider ) > "$OUT/consumers.log" 2>&1 || rc=1
      tail -15 "$OUT/consumers.log" ;;
    exact)
      ( cd "$REPO" && "$SCANOPS_PYTHON" test/cuda_exact_check.py ) > "$OUT/exact.log" 2>&1 || rc=1
      tail -4 "$OUT/exact.log" ;;
    sanitize)
      # SANITIZE_TOOLS (default: all four). memcheck runs every case; racecheck (~100x slower),
      # synccheck and initcheck one shape per kernel family (SCANOPS_SANITIZE_SUBSET).
      # Every kernel is instrumented (a kernel filter would hide the writes of the kernels it
      # leaves out: initcheck then reports their outputs as uninitialized wherever they are
      # read). Each report's kernel is counted (sanitize-<tool>-kernels.txt): the run fails for
      # any report in a scanops kernel (namespace scanops); the others (torch's, CCCL's) are
      # recorded (docs/reliability.md).
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
        subset=$([ $tool = memcheck ] && echo 0 || echo 1)
        ( cd "$REPO" && SCANOPS_SANITIZE_SUBSET=$subset compute-sanitizer --tool $tool \
            --print-limit 10000000 --show-backtrace no "$SCANOPS_PYTHON" test/sanitize_cases.py ) \
          > "$OUT/sanitize-$tool.full" 2>&1
        grep -E '^=========     at ' "$OUT/sanitize-$tool.full" | sed -E 's/^=========     at //; s/\+0x[0-9a-f]+$//' |
          sort | uniq -c | sort -rn > "$OUT/sanitize-$tool-kernels.txt"
        grep -vE '^=========     (at|by thread|Address) |^========= [A-Z][a-z]+ .*(read|write|access|hazard|barrier)' \
          "$OUT/sanitize-$tool.full" > "$OUT/sanitize-$tool.log"
        rm -f "$OUT/sanitize-$tool.full"
        echo "compute-sanitizer $tool: $(grep 'ERROR SUMMARY' "$OUT/sanitize-$tool.log" | head -1)"
        grep -q 'mismatches: 0' "$OUT/sanitize-$tool.log" || { echo "  (the cases failed)"; rc=1; }
        if grep -q 'scanops' "$OUT/sanitize-$tool-kernels.txt"; then
          echo "  reports in scanops kernels:"; grep 'scanops' "$OUT/sanitize-$tool-kernels.txt" | head; rc=1
        fi
        head -5 "$OUT/sanitize-$tool-kernels.txt" | cut -c1-200
      done ;;
    bench)
      eval "bench_args=(${BENCH_ARGS:-})"  # shell words: --only "1-D 2^30,(64, 2^22) dim 1" stays one
      ( cd "$REPO" && "$SCANOPS_PYTHON" bench/bench_gpu.py --json "$OUT/bench_gpu.json" --md "$OUT/bench_gpu.md" "${bench_args[@]}" ) > "$OUT/bench.log" 2>&1 || rc=1
      grep -v "^|" "$OUT/bench.log" | tail -40 ;;
    cpubench)
      ( cd "$REPO" && "$SCANOPS_PYTHON" bench/bench_cpu.py --json "$OUT/bench_cpu.json" --md "$OUT/bench_cpu.md" ) > "$OUT/bench_cpu.log" 2>&1 || rc=1
      tail -30 "$OUT/bench_cpu.log" ;;
    *) "$s" ;;
  esac
done
exit $rc
