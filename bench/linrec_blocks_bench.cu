// A kernel-level experiment, not part of the library: times scanops' row kernel
// (ops/cuda/row_scan.cuh) for the float32 linear recurrence (AffineCombine<float>, dense
// coefficients: 12 bytes an element) at several tile shapes and resident blocks per SM,
// against a device copy of the same bytes, measured interleaved (best of `reps`). The
// variants force (items, blocks per SM) pairs through a partial specialization of
// kRowMinBlocks, with the prefetch ahead on or off; the library's kernel is "items 16 blocks
// 3 ahead false" (row_min_blocks), before 2026-11-28 it was "items 16 blocks 2 ahead true".
// A float32 cumsum (the library's kernel) rides along. Each variant's output is compared with
// the first's (max |difference|: other tile sizes associate differently, so not bits).
// Used for docs/benchmarks/h200-2026-11-28-linrec-blocks.md.
//
// Build (no GPU needed; torch's headers for c10), then run on the GPU machine:
//   nvcc -std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90,code=sm_90 -I. \
//        -I<site-packages>/torch/include -o build-micro/linrec_blocks_bench \
//        bench/linrec_blocks_bench.cu
//   build-micro/linrec_blocks_bench rows length [reps]   (switches: bench/row_launch.cuh)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/micro_common.cuh"
#include "bench/row_launch.cuh"
#include "ops/cuda/row_scan.cuh"

using namespace scanops;
using namespace scanops::cuda;
using scanops::bench::Arena;
using scanops::bench::time_ms;

using Aff = AffineCombine<float>;
using Src = InputSource<Aff, float>;
// The library's sink under another name: B resident blocks per SM, PF the prefetch ahead.
template <int B, bool PF>
struct SinkB : OutputSink<Aff, float> {};
// The backward's sink under another name (MulNextSink writing both gradients, as
// linear_recurrence's backward does: a reverse scan reading g, a and h, writing dx and da;
// 20 bytes an element), at B blocks per SM; the library's runs 2 and no prefetch ahead.
template <int B>
struct NextB : MulNextSink<Aff, float, true> {};

namespace scanops::cuda {
template <class Source, int B, bool PF, int kItems>
constexpr int kRowMinBlocks<Source, ::SinkB<B, PF>, kItems> = B;
template <class Source, int B, int kItems>
constexpr int kRowMinBlocks<Source, ::NextB<B>, kItems> = B;
template <>
constexpr bool row_prefetches_ahead<Src, ::NextB<2>, 16>() { return false; }
template <>
constexpr bool row_prefetches_ahead<Src, ::NextB<3>, 16>() { return false; }
#define SCANOPS_PF(K, B, PF) \
  template <>                \
  constexpr bool row_prefetches_ahead<Src, ::SinkB<B, PF>, K>() { return PF; }
SCANOPS_PF(16, 2, true)
SCANOPS_PF(16, 3, true)
SCANOPS_PF(16, 3, false)
SCANOPS_PF(8, 2, true)
SCANOPS_PF(8, 3, true)
SCANOPS_PF(8, 4, true)
SCANOPS_PF(8, 4, false)
SCANOPS_PF(4, 4, true)
#undef SCANOPS_PF
}  // namespace scanops::cuda

namespace {

// The row kernel in rows / packed / look-back mode as scan_rows picks it, kItems forced.
template <int kItems, class Sink, class C = Aff, class S = Src>
void launch(const LaunchContext& ctx, Arena& arena, const S& src, const Sink& dst, int64_t rows,
            int64_t length, bool reverse = false) {
  scanops::bench::launch_rows<C, kItems>(ctx, arena, src, dst, rows, length, reverse);
}

__global__ void fill(float* a, float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    a[i] = 0.5f + 0.5f * static_cast<float>(h >> 8) / 16777216.0f;
    x[i] = static_cast<float>((h >> 4) & 1023) / 512.0f - 1.0f;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? atoll(argv[1]) : 12288;
  const int64_t length = argc > 2 ? atoll(argv[2]) : 4096;
  const int reps = argc > 3 ? atoi(argv[3]) : 7;
  const int64_t n = rows * length;
  scanops::bench::Setup setup;
  const cudaDeviceProp& prop = setup.prop;
  const cudaStream_t stream = setup.stream;
  Arena& arena = setup.arena;
  const LaunchContext& ctx = setup.ctx;
  float *x = nullptr, *a = nullptr, *out = nullptr, *ref = nullptr;
  void *copy_a = nullptr, *copy_b = nullptr;
  cudaMalloc(&x, n * 4);
  cudaMalloc(&a, n * 4);
  cudaMalloc(&out, n * 4);
  cudaMalloc(&ref, n * 4);
  float *h = nullptr, *second = nullptr;
  cudaMalloc(&h, n * 4);
  cudaMalloc(&second, n * 4);
  cudaMemset(h, 0, n * 4);
  cudaMalloc(&copy_a, n * 10);
  cudaMalloc(&copy_b, n * 10);
  cudaMemset(copy_a, 0, n * 10);
  fill<<<1024, 256, 0, stream>>>(a, x, n);
  const Src src{x, a, nullptr};
  struct Case {
    std::string name;
    std::function<void(float*)> run;
    int bytes = 12;
  };
  std::vector<Case> cases;
#define SCANOPS_CASE(K, B, PF)                                                          \
  cases.push_back({"items " #K " blocks " #B " ahead " #PF, [&](float* o) {              \
                     SinkB<B, PF> s{};                                                  \
                     s.out = o;                                                         \
                     s.streaming = true;                                                \
                     launch<K>(ctx, arena, src, s, rows, length);                       \
                   }});
  SCANOPS_CASE(16, 2, true)  // the library's before 2026-11-28
  SCANOPS_CASE(16, 3, true)
  SCANOPS_CASE(16, 3, false)
  SCANOPS_CASE(8, 2, true)
  SCANOPS_CASE(8, 3, true)
  SCANOPS_CASE(8, 4, true)
  SCANOPS_CASE(8, 4, false)
  SCANOPS_CASE(4, 4, true)
#undef SCANOPS_CASE
  // float32 cumsum, the library's kernel (32 items, 2 blocks per SM), 8 bytes an element
  using Sum = SumCombine<float>;
  cases.push_back({"cumsum (library)", [&](float* o) {
                     OutputSink<Sum, float> s{};
                     s.out = o;
                     s.streaming = true;
                     launch<32, OutputSink<Sum, float>, Sum>(
                         ctx, arena, InputSource<Sum, float>{x, nullptr, nullptr}, s, rows,
                         length);
                   }, 8});
#define SCANOPS_NEXT(B)                                                                       \
  cases.push_back({"backward blocks " #B, [&](float* o) {                                     \
                     NextB<B> s{};                                                            \
                     s.out = o;                                                               \
                     s.streaming = true;                                                      \
                     s.mul_next = h;                                                          \
                     s.second = second;                                                       \
                     s.line = length;                                                         \
                     s.next = -1;                                                             \
                     launch<16>(ctx, arena, src, s, rows, length, true);                      \
                   }, 20});
  SCANOPS_NEXT(2)  // the library's
  SCANOPS_NEXT(3)
#undef SCANOPS_NEXT
  cases[0].run(ref);
  std::vector<float> hr(n), ho(n);
  cudaMemcpy(hr.data(), ref, n * 4, cudaMemcpyDeviceToHost);
  std::vector<double> diff(cases.size(), 0);
  for (size_t c = 1; c < cases.size() && cases[c].bytes == 12; ++c) {
    cases[c].run(out);
    cudaMemcpy(ho.data(), out, n * 4, cudaMemcpyDeviceToHost);
    for (int64_t i = 0; i < n; ++i) diff[c] = std::max(diff[c], std::fabs(double(ho[i]) - hr[i]));
  }
  std::vector<float> best(cases.size(), 1e30f);
  float floor12 = 1e30f, hi12 = 0, floor8 = 1e30f, floor20 = 1e30f;
  for (int r = 0; r < reps; ++r) {
    const float f = time_ms(
        [&] { cudaMemcpyAsync(copy_b, copy_a, n * 6, cudaMemcpyDeviceToDevice, stream); }, stream);
    floor12 = std::min(floor12, f), hi12 = std::max(hi12, f);
    floor20 = std::min(floor20, time_ms([&] {
      cudaMemcpyAsync(copy_b, copy_a, n * 10, cudaMemcpyDeviceToDevice, stream);
    }, stream));
    floor8 = std::min(floor8, time_ms([&] {
      cudaMemcpyAsync(copy_b, copy_a, n * 4, cudaMemcpyDeviceToDevice, stream);
    }, stream));
    for (size_t c = 0; c < cases.size(); ++c) {
      best[c] = std::min(best[c], time_ms([&] { cases[c].run(out); }, stream));
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  printf("%s rows %lld length %lld reps %d (%s); floor (copy of 12 B/element) %.4f ms, spread "
         "%.1f%%\n",
         prop.name, (long long)rows, (long long)length, reps, cudaGetErrorString(err), floor12,
         100 * (hi12 / floor12 - 1));
  for (size_t c = 0; c < cases.size(); ++c) {
    printf("%-28s %8.4f ms  %5.1f%% of copy  max|diff| %.2e\n", cases[c].name.c_str(), best[c],
           100 * (cases[c].bytes == 12 ? floor12 : cases[c].bytes == 20 ? floor20 : floor8) /
               best[c],
           diff[c]);
  }
  return err == cudaSuccess ? 0 : 1;
}
