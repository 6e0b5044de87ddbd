#!/usr/bin/env bash
# Builds bench/cub_segmented.cu (cub::DeviceSegmentedScan behind a C ABI) for
# bench/bench_segmented.py --cub. Needs nvcc and CCCL >= 3.3 headers (the pinned nvidia-cuda-cccl
# wheel's include/cccl, found next to torch as CMakeLists.txt does, or at $SCANOPS_CCCL_INCLUDE_DIR).
# Usage: bash bench/build_cub_segmented.sh [OUT.so]   (default build-cubseg/libcub_segmented.so)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/build-cubseg/libcub_segmented.so}
py=${PYTHON:-python3}
cccl=${SCANOPS_CCCL_INCLUDE_DIR:-$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia", "cu13", "include", "cccl"))')}
test -f "$cccl/cub/version.cuh" || { echo "no CCCL at $cccl (set SCANOPS_CCCL_INCLUDE_DIR)" >&2; exit 1; }
grep -m1 '^#define CUB_VERSION ' "$cccl/cub/version.cuh"
mkdir -p "$(dirname "$out")"
${NVCC:-nvcc} -O3 -std=c++17 -arch=${ARCH:-sm_90} -Xcompiler -fPIC -shared \
  -I "$cccl" "$here/bench/cub_segmented.cu" -o "$out"
echo "built $out"
