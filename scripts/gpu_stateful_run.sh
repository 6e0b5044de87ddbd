#!/usr/bin/env bash
# One device call for the stateful scans (#33) and the sharded scans (#35), over libraries
# built on the VM for sm_90 and carried xz-compressed in carry/ (an ignored folder):
#   carry/cur.so.xz  the working tree's library     carry/pre.so.xz  66fa923's (before the
#                                                                    engine in named parts)
# Steps, each under its own time limit, all logged to $OUT/run.log:
#   the CUDA checks of `initial` (test/cuda_line_state_check.py, test_initial.py on CUDA),
#   output hashes of both libraries on one case set (bench/ab_bits.py: the engine change and
#   the kernels' line_state must not change a bit without `initial`), bench_initial.py (with /
#   without initial), bench_gpu.py on both libraries (share of the copy floor; --initial on the
#   current one), and bench_distributed.py on 2 GPUs (NCCL) where the machine has them.
# Usage (device tool): bash scripts/gpu_stateful_run.sh   (carry: ["carry"])
# STEPS="check test ab initial initialpre initial2 bench benchpre bench2 nccl" picks steps
# (initialpre / benchpre: the same on pre; initial2 / bench2: again, after them: an A/B/A) (default: all); TEST_K, AB_ARGS,
# BENCH_ARGS, BENCH_ONLY, PRE_ONLY, BENCH_SECS adjust them.
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$REPO/gpu-out}"
mkdir -p "$OUT" /tmp/cur /tmp/pre
LOG="$OUT/run.log"
cd "$REPO"
xz -dc carry/cur.so.xz > /tmp/cur/libscanops.so
xz -dc carry/pre.so.xz > /tmp/pre/libscanops.so
CUR=/tmp/cur/libscanops.so PRE=/tmp/pre/libscanops.so
AB_ARGS="${AB_ARGS:-}" BENCH_ARGS="${BENCH_ARGS:-}"
BENCH_ONLY="${BENCH_ONLY:-cumsum,logcumsumexp,cummax (2^20,linear_recurrence,cumprod}"
export PYTHONPATH="$REPO/python" PYTHONUNBUFFERED=1 SCANOPS_COMMIT="${SCANOPS_COMMIT:-}"
t0=$(date +%s)
step() {  # step NAME SECONDS command...
  local name=$1 secs=$2; shift 2
  echo "==> $name (limit ${secs} s, at +$(( $(date +%s) - t0 )) s)" >>"$LOG"
  timeout "$secs" "$@" >>"$LOG" 2>&1
  echo "<== $name rc=$?" >>"$LOG"
}
want() { [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $1 "* ]]; }
step device 20 bash -c 'nvidia-smi -L; python3 -c "import torch; print(torch.__version__)"'
export CUDA_VISIBLE_DEVICES=0
want check && step line_state_check 90 env SCANOPS_LIBRARY=$CUR python3 test/cuda_line_state_check.py
want test && step test_initial 75 env SCANOPS_LIBRARY=$CUR python3 -m pytest -q -p no:cacheprovider \
  test/python/test_initial.py -k "${TEST_K:-cuda and not compile}"
if want ab; then
  step ab_cur 60 env SCANOPS_LIBRARY=$CUR python3 bench/ab_bits.py --device cuda $AB_ARGS --out /tmp/ab_cur.json
  step ab_pre 60 env SCANOPS_LIBRARY=$PRE python3 bench/ab_bits.py --device cuda $AB_ARGS --out /tmp/ab_pre.json
  step ab_compare 10 python3 bench/ab_bits.py --compare /tmp/ab_pre.json /tmp/ab_cur.json
fi
want initial && step bench_initial 60 env SCANOPS_LIBRARY=$CUR python3 bench/bench_initial.py --device cuda \
  --elems $((1 << 26)) --md "$OUT/bench_initial.md"
want initialpre && step bench_initial_pre 60 env SCANOPS_LIBRARY=$PRE python3 bench/bench_initial.py \
  --device cuda --elems $((1 << 26)) --md "$OUT/bench_initial_pre.md"
want initial2 && step bench_initial_2 60 env SCANOPS_LIBRARY=$CUR python3 bench/bench_initial.py \
  --device cuda --elems $((1 << 26)) --md "$OUT/bench_initial_2.md"
want bench && step bench_gpu_cur "${BENCH_SECS:-120}" env SCANOPS_LIBRARY=$CUR python3 bench/bench_gpu.py \
  --no-compile --no-eager --initial --rounds 2 $BENCH_ARGS --only "$BENCH_ONLY" \
  --json "$OUT/bench_gpu.json" --md "$OUT/bench_gpu.md"
want benchpre && step bench_gpu_pre 60 env SCANOPS_LIBRARY=$PRE python3 bench/bench_gpu.py --no-compile \
  --no-eager --no-bitwise --rounds 2 $BENCH_ARGS --only "${PRE_ONLY:-$BENCH_ONLY}" --md "$OUT/bench_gpu_pre.md"
want bench2 && step bench_gpu_cur2 "${BENCH_SECS:-120}" env SCANOPS_LIBRARY=$CUR python3 bench/bench_gpu.py \
  --no-compile --no-eager --initial --rounds 2 $BENCH_ARGS --only "$BENCH_ONLY" --md "$OUT/bench_gpu_2.md"
unset CUDA_VISIBLE_DEVICES
if want nccl && [ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 2 ]; then
  step nccl_cumsum 45 env SCANOPS_LIBRARY=$CUR torchrun --nproc-per-node 2 \
    bench/bench_distributed.py --json "$OUT/distributed_cumsum.json"
  step nccl_linrec 45 env SCANOPS_LIBRARY=$CUR torchrun --nproc-per-node 2 \
    bench/bench_distributed.py --op linear_recurrence --json "$OUT/distributed_linrec.json"
fi
echo "total $(( $(date +%s) - t0 )) s" >>"$LOG"
tail -c 4000 "$LOG"
