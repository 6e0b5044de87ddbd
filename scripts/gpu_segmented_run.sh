#!/usr/bin/env bash
# One device call for the segmented scans (#34), over libraries built on the VM for sm_90 and
# carried xz-compressed in carry/ (an ignored folder):
#   carry/cur.so.xz  the working tree's library     carry/pre.so.xz  the library before
#                                                                    segments (baseline)
# Steps (STEPS="..." picks; default all), each under its own time limit, logged to $OUT/run.log:
#   test      test_segmented.py on CUDA (-k cuda), test_initial on CUDA, test_cuda_bits.py
#             (run-to-run bits), and EXTRA_TESTS (pytest arguments) if given
#   ab        output hashes of both libraries on one case set without segments (bench/ab_bits.py:
#             the unsegmented kernels must not change a bit)
#   bench     bench/bench_segmented.py on CUDA
#   sanitize  compute-sanitizer's four tools over test/sanitize_segmented_cases.py (every path of
#             the segmented kernels; memcheck on all cases, the others on the subset)
#   fuzz      the CUDA fuzz with a fixed seed, and the cases it found replayed
# Usage (device tool): bash scripts/gpu_segmented_run.sh   (carry: ["carry"])
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$REPO/gpu-out}"
mkdir -p "$OUT" /tmp/cur /tmp/pre
LOG="$OUT/run.log"
cd "$REPO"
xz -dc carry/cur.so.xz > /tmp/cur/libscanops.so
[ -f carry/pre.so.xz ] && xz -dc carry/pre.so.xz > /tmp/pre/libscanops.so
CUR=/tmp/cur/libscanops.so PRE=/tmp/pre/libscanops.so
export PYTHONPATH="$REPO/python" PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
t0=$(date +%s)
step() {  # step NAME SECONDS command...
  local name=$1 secs=$2; shift 2
  echo "==> $name (limit ${secs} s, at +$(( $(date +%s) - t0 )) s)" >>"$LOG"
  timeout "$secs" "$@" >>"$LOG" 2>&1
  echo "<== $name rc=$?" >>"$LOG"
}
want() { [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $1 "* ]]; }
step device 20 bash -c 'nvidia-smi -L; python3 -c "import torch; print(torch.__version__)"'
if want test; then
  step test_segmented "${TEST_SECS:-240}" env SCANOPS_LIBRARY=$CUR python3 -m pytest -q -x -p no:cacheprovider \
    test/python/test_segmented.py -k "${TEST_K:-cuda}" --durations=10
  step test_initial 90 env SCANOPS_LIBRARY=$CUR python3 -m pytest -q -p no:cacheprovider \
    test/python/test_initial.py -k "cuda and not compile"
  step test_cuda_bits 60 env SCANOPS_LIBRARY=$CUR python3 -m pytest -q -p no:cacheprovider \
    test/python/test_cuda_bits.py
  # EXTRA_TESTS: more pytest arguments (files, -k) run the same way
  [ -n "${EXTRA_TESTS:-}" ] && step extra_tests "${EXTRA_SECS:-120}" env SCANOPS_LIBRARY=$CUR \
    python3 -m pytest -q -p no:cacheprovider $EXTRA_TESTS
fi
if want ab && [ -f "$PRE" ]; then
  step ab_cur 60 env SCANOPS_LIBRARY=$CUR python3 bench/ab_bits.py --device cuda --small --out /tmp/ab_cur.json
  step ab_pre 60 env SCANOPS_LIBRARY=$PRE python3 bench/ab_bits.py --device cuda --small --out /tmp/ab_pre.json
  step ab_compare 10 python3 bench/ab_bits.py --compare /tmp/ab_pre.json /tmp/ab_cur.json
fi
want bench && step bench_segmented "${BENCH_SECS:-150}" env SCANOPS_LIBRARY=$CUR python3 bench/bench_segmented.py \
  --device cuda --elems "${BENCH_ELEMS:-67108864}" --reps 3 --md "$OUT/bench_segmented.md" \
  --json "$OUT/bench_segmented.json"
if want sanitize; then
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    subset=$([ $tool = memcheck ] && echo 0 || echo 1)
    step "sanitize_$tool" "${SANITIZE_SECS:-150}" bash -c "SCANOPS_LIBRARY=$CUR SCANOPS_SANITIZE_SUBSET=$subset \
      compute-sanitizer --tool $tool --print-limit 100000 --show-backtrace no python3 \
      test/sanitize_segmented_cases.py > /tmp/san_$tool.full 2>&1; \
      grep -E 'ERROR SUMMARY|mismatches|MISMATCH' /tmp/san_$tool.full | head -5; \
      grep -E '^=========     at ' /tmp/san_$tool.full | sort | uniq -c | sort -rn | head -5"
  done
fi
if want fuzz; then
  step fuzz_cuda 120 env SCANOPS_LIBRARY=$CUR python3 test/fuzz/fuzz_ops.py --seed 101 --device cuda \
    --seconds 90
  # The cases the CUDA fuzz found (docs/benchmarks/test-runs.md), replayed.
  for sc in "101 8586" "688027910 2316" "101 12366"; do
    set -- $sc
    step "fuzz_case_$1_$2" 60 env SCANOPS_LIBRARY=$CUR python3 test/fuzz/fuzz_ops.py --seed $1 \
      --case $2 --device cuda
  done
fi
echo "total $(( $(date +%s) - t0 )) s" >>"$LOG"
tail -c 6000 "$LOG"
