#!/usr/bin/env bash
# Builds accelerated-scan's CUDA warp kernels (its accelerated_scan/warp.cuh, MIT) as torch ops
# in a library for bench/bench_linrec_vs.py --warp-lib: the package itself compiles them at
# import with torch's load_inline (nvcc, ninja and a pybind11 module of one Python version);
# built here once, for sm_90, the library loads in any Python with the same torch.
#   bench/build_accscan_warp.sh OUT_DIR   (downloads accelerated-scan==0.3.1 unless
#                                          ACCSCAN_DIR names an unpacked copy)
# The kernels' source is unchanged but for its include of torch/extension.h (Python headers),
# replaced by ATen/ATen.h; the nvcc flags are those of its load_inline call plus torch's own.
set -euo pipefail
mkdir -p "${1:?OUT_DIR}"
out=$(cd "$1" && pwd)
py=${PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
if [ -z "${ACCSCAN_DIR:-}" ]; then
  "$py" -m pip download --no-deps -q -d "$out" accelerated-scan==0.3.1
  (cd "$out" && "$py" -m zipfile -e accelerated_scan-0.3.1-py3-none-any.whl .)
  ACCSCAN_DIR=$out
fi
T=$("$py" -c "import torch, os; print(os.path.dirname(torch.__file__))")
sed 's|#include <torch/extension.h>|#include <ATen/ATen.h>|' "$ACCSCAN_DIR/accelerated_scan/warp.cuh" > "$out/warp.cu"
cat > "$out/reg.cpp" <<'CPP'
#include <ATen/ATen.h>
#include <torch/library.h>
at::Tensor warpscan_forward(const at::Tensor& gates, const at::Tensor& tokens, const at::Tensor& out,
                            const bool reverse);
void warpscan_backward(const at::Tensor& gates, const at::Tensor& output, const at::Tensor& outGrad,
                       const at::Tensor& gateGradOut, const at::Tensor& valueGradOut);
static at::Tensor fwd(const at::Tensor& g, const at::Tensor& t, const at::Tensor& o, bool r) {
  warpscan_forward(g, t, o, r);
  return o;
}
static void bwd(const at::Tensor& g, const at::Tensor& o, const at::Tensor& og, const at::Tensor& gg,
                const at::Tensor& tg) {
  warpscan_backward(g, o, og, gg, tg);
}
TORCH_LIBRARY(accscan_warp, m) {
  m.def("forward(Tensor gates, Tensor tokens, Tensor(a!) out, bool reverse) -> Tensor(a!)");
  m.def("backward(Tensor gates, Tensor output, Tensor outGrad, Tensor(a!) gateGradOut, "
        "Tensor(b!) valueGradOut) -> ()");
}
TORCH_LIBRARY_IMPL(accscan_warp, CUDA, m) {
  m.impl("forward", &fwd);
  m.impl("backward", &bwd);
}
CPP
inc="-I$T/include -I$T/include/torch/csrc/api/include -I/usr/local/cuda/include"
/usr/local/cuda/bin/nvcc -ccbin /usr/bin/g++ -O3 -std=c++17 --fmad false -lineinfo \
  --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90 -Xcompiler -fPIC \
  -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ \
  -U__CUDA_NO_BFLOAT16_OPERATORS__ -U__CUDA_NO_BFLOAT16_CONVERSIONS__ \
  $inc -c "$out/warp.cu" -o "$out/warp.o"
/usr/bin/g++ -O2 -std=c++17 -fPIC $inc -c "$out/reg.cpp" -o "$out/reg.o"
/usr/bin/g++ -shared "$out/warp.o" "$out/reg.o" -o "$out/libaccscan_warp.so" -L"$T/lib" -lc10 \
  -lc10_cuda -ltorch_cpu -ltorch_cuda -L/usr/local/cuda/lib64 -lcudart
echo "$out/libaccscan_warp.so"
