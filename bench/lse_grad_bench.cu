// A kernel-level experiment, not part of the library: logcumsumexp's backward in one scan
// (ops/cuda/lse_grad.cu, LogScaledSumCombine of ops/lse_grad.h), timed against a device copy
// of its 16 bytes an element (x, y, g in; dx out), interleaved, best of `reps`; the library's
// launch (launch_lse_grad) and the same kernel forced to 3 blocks per SM. Checks the
// library's output, inclusive and exclusive, forward and reverse, against a float64 loop on
// the host over the same float32 y (max error relative to sum |g[k] exp(x[j] - y[k])|).
//
// Build (no GPU needed), then run on the GPU machine:
//   nvcc -std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90,code=sm_90 -I. \
//        -I<site-packages>/torch/include -o build-micro/lse_grad_bench bench/lse_grad_bench.cu
//   build-micro/lse_grad_bench rows length [reps]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/micro_common.cuh"
#include "bench/row_launch.cuh"
#include "ops/cuda/lse_grad.cu"

using namespace scanops;
using namespace scanops::cuda;
using scanops::bench::time_ms;

template <int B>
struct SinkB : LseGradSink {};
using Src = InputSource<LseCombine, float>;
namespace scanops::cuda {
template <class Source, int B, int kItems>
constexpr int kRowMinBlocks<Source, ::SinkB<B>, kItems> = B;
}

namespace {
// float64 reference of one line (positions in memory order; the scan runs the other way)
void reference(const float* x, const float* y, const float* g, int64_t n, bool excl, bool rev,
               std::vector<double>& dx, std::vector<double>& scale) {
  dx.assign(n, 0);
  scale.assign(n, 0);
  // Q[j] = sum over outputs k including j of g[k] exp(y_ref - y[k]), walking from the far end
  double q = 0, qa = 0, yref = 0;
  bool any = false;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t j = rev ? s : n - 1 - s;  // later outputs first
    if (!excl) {
      if (any) { q *= std::exp(double(y[j]) - yref); qa *= std::exp(double(y[j]) - yref); }
      q += g[j]; qa += std::fabs(g[j]); yref = y[j]; any = true;
    }
    if (any) { dx[j] = std::exp(double(x[j]) - yref) * q; scale[j] = std::exp(double(x[j]) - yref) * qa; }
    if (excl) {
      if (any) { q *= std::exp(double(y[j]) - yref); qa *= std::exp(double(y[j]) - yref); }
      q += g[j]; qa += std::fabs(g[j]); yref = y[j]; any = true;
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? atoll(argv[1]) : 16384;
  const int64_t length = argc > 2 ? atoll(argv[2]) : 16384;
  const int reps = argc > 3 ? atoi(argv[3]) : 7;
  const int64_t n = rows * length;
  scanops::bench::Setup setup;
  const cudaStream_t stream = setup.stream;
  const LaunchContext& ctx = setup.ctx;
  std::vector<float> hx(n), hg(n);
  uint64_t st = 12345;
  auto rnd = [&] { st = st * 6364136223846793005ull + 1442695040888963407ull; return double(st >> 11) / 9007199254740992.0; };
  for (int64_t i = 0; i < n; ++i) {
    hx[i] = float(std::sqrt(-2 * std::log(rnd() + 1e-300)) * std::cos(6.283185307179586 * rnd()));
    hg[i] = float(rnd() * 2 - 1);
  }
  float *x, *y, *g, *dx;
  cudaMalloc(&x, n * 4); cudaMalloc(&y, n * 4); cudaMalloc(&g, n * 4); cudaMalloc(&dx, n * 4);
  void *ca, *cb;
  cudaMalloc(&ca, n * 8); cudaMalloc(&cb, n * 8); cudaMemset(ca, 0, n * 8);
  cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(g, hg.data(), n * 4, cudaMemcpyHostToDevice);
  std::vector<float> hy(n), hd(n);
  const int64_t check_rows = std::min<int64_t>(rows, 3);
  double worst = 0;
  for (int excl = 0; excl < 2; ++excl) {
    for (int rev = 0; rev < 2; ++rev) {
      // y = logcumsumexp(x; excl, rev) per line, float64 then rounded
      for (int64_t r = 0; r < rows; ++r) {
        double m = -INFINITY;
        for (int64_t s = 0; s < length; ++s) {
          const int64_t i = r * length + (rev ? length - 1 - s : s);
          const double v = hx[i];
          const double nm = excl ? m : (v > m ? v : m) + std::log1p(std::exp(-std::fabs(v - m)));
          if (excl) {
            hy[i] = float(m);
            m = v > m ? v + std::log1p(std::exp(m - v)) : m + std::log1p(std::exp(v - m));
          } else {
            m = (m == -INFINITY) ? v : nm;
            hy[i] = float(m);
          }
        }
      }
      cudaMemcpy(y, hy.data(), n * 4, cudaMemcpyHostToDevice);
      setup.arena.used = 0;
      launch_lse_grad(ctx, LseGradArgs{x, y, g, dx, rows, length, 1, bool(excl), bool(rev)});
      cudaMemcpy(hd.data(), dx, n * 4, cudaMemcpyDeviceToHost);
      double err = 0;
      std::vector<double> ref, scale;
      for (int64_t r = rows - check_rows; r < rows; ++r) {
        const int64_t o = r * length;
        reference(hx.data() + o, hy.data() + o, hg.data() + o, length, excl, rev, ref, scale);
        for (int64_t j = 0; j < length; ++j) {
          const double e = std::fabs(hd[o + j] - ref[j]) / std::max(scale[j], 1e-30);
          if (!(e <= err)) err = e;
        }
      }
      printf("check exclusive %d reverse %d: max error / sum|terms| %.3g (%lld rows)\n", excl, rev,
             err, (long long)check_rows);
      worst = std::max(worst, err);
    }
  }
  // timing: the inclusive forward case (y of the last loop is reverse exclusive; fine for speed)
  float floor16 = 1e30f, lib = 1e30f, b3 = 1e30f, b2 = 1e30f;
  for (int r = 0; r < reps; ++r) {
    floor16 = std::min(floor16, time_ms([&] { cudaMemcpyAsync(cb, ca, n * 8, cudaMemcpyDeviceToDevice, stream); }, stream));
    lib = std::min(lib, time_ms([&] { setup.arena.used = 0; launch_lse_grad(ctx, LseGradArgs{x, y, g, dx, rows, length, 1, false, false}); }, stream));
    b3 = std::min(b3, time_ms([&] {
      SinkB<3> s{}; s.out = dx; s.x = x; s.streaming = true;
      scanops::bench::launch_rows<LseCombine, 16>(ctx, setup.arena, Src{g, y, nullptr}, s, rows, length, true);
    }, stream));
    b2 = std::min(b2, time_ms([&] {
      SinkB<2> s{}; s.out = dx; s.x = x; s.streaming = true;
      scanops::bench::launch_rows<LseCombine, 16>(ctx, setup.arena, Src{g, y, nullptr}, s, rows, length, true);
    }, stream));
  }
  const cudaError_t err = cudaDeviceSynchronize();
  printf("%s rows %lld length %lld (%s): floor (copy of 16 B/element) %.4f ms\n", setup.prop.name,
         (long long)rows, (long long)length, cudaGetErrorString(err), floor16);
  printf("library  %.4f ms %5.1f%%\n2 blocks %.4f ms %5.1f%%\n3 blocks %.4f ms %5.1f%%\n", lib,
         100 * floor16 / lib, b2, 100 * floor16 / b2, b3, 100 * floor16 / b3);
  return err == cudaSuccess && worst < 1e-5 ? 0 : 1;
}
