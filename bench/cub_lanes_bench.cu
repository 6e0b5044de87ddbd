// A kernel-level experiment, not part of the library: narrow columns (a contiguous (rows, C)
// float32 block scanned along dim 0, C = 2..8 columns) as ONE line of C-lane elements through
// CCCL 3.5's cub::DeviceScan, its stable-order lookahead kernel (sm_90: the order is fixed by
// the length and the GPU, so the results are the same run to run) with a lane-wise plus,
// against a device copy of the same bytes (the floor), measured interleaved, best of `reps`.
// The tuple types are the library's own (ops/cuda/cub_lanes.cuh, cub_lanes_sum); the library
// scanned such blocks with its row kernels over `RowLanesCombine` (lanes_scan.cuh) before.
// Checks every case against a host running sum of a random walk of -1 / 0 / +1 steps (exact in
// float32 whatever the association), so a wrong carry cannot pass.
//
//   nvcc -std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90,code=sm_90 \
//        -I<site-packages>/nvidia/cu13/include/cccl -I. -I<site-packages>/torch/include \
//        -o build-micro/cub_lanes_bench \
//        bench/cub_lanes_bench.cu
//   build-micro/cub_lanes_bench [elements] [reps]

#include "bench/micro_common.cuh"

#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>

#include <algorithm>
#include <string>
#include <vector>

#include "ops/cuda/cub_lanes.cuh"

namespace {

using scanops::bench::fill_steps;
using scanops::bench::time_ms;
using scanops::cuda::LanePlus;
using scanops::cuda::Lanes;

template <class Op, class T, bool kStable>
void cub_scan(void*& tmp, size_t& cap, const T* in, T* out, int64_t n, cudaStream_t s) {
  using offset_t = cub::detail::choose_offset_t<int64_t>;
  using selector_t =
      cub::detail::scan::policy_selector_from_types<const T*, T*, T, offset_t, Op, kStable>;
  size_t bytes = 0;
  (void)cub::DeviceScan::scan_impl_determinism<cub::ForceInclusive::Yes, kStable>(
      nullptr, bytes, in, out, Op{}, cub::NullType{}, n, s, selector_t{});
  if (bytes > cap) {
    cudaFree(tmp);
    cudaMalloc(&tmp, bytes);
    cap = bytes;
  }
  (void)cub::DeviceScan::scan_impl_determinism<cub::ForceInclusive::Yes, kStable>(
      tmp, bytes, in, out, Op{}, cub::NullType{}, n, s, selector_t{});
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? atoll(argv[1]) : (int64_t{1} << 26);  // float32 elements
  const int reps = argc > 2 ? atoi(argv[2]) : 7;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  cudaStream_t s;
  cudaStreamCreate(&s);
  float *in, *out, *ca, *cb;
  cudaMalloc(&in, n * 4);
  cudaMalloc(&out, n * 4);
  cudaMalloc(&ca, n * 4);
  cudaMalloc(&cb, n * 4);
  cudaMemset(ca, 0, n * 4);
  fill_steps<<<1024, 256, 0, s>>>(in, n);
  void* tmp = nullptr;
  size_t cap = 0;
  struct Case {
    std::string name;
    int lanes;
    std::function<void()> run;
  };
  std::vector<Case> cases;
  // C columns as tuples aligned to A bytes (A = 4: the library's; 8 / 16: a tuple loaded whole).
  auto add = [&](auto lanes_tag, auto align_tag, bool stable) {
    constexpr int C = decltype(lanes_tag)::value;
    constexpr int A = decltype(align_tag)::value;
    using T = Lanes<C, A>;
    using Op = LanePlus<C, A>;
    const int64_t rows = n / C;
    const std::string nm = "cub " + std::string(stable ? "stable" : "default") + " lanes " +
                           std::to_string(C) + " align " + std::to_string(A) + " (" +
                           std::to_string(rows) + ", " + std::to_string(C) + ")";
    if (stable) {
      cases.push_back({nm, C, [=, &tmp, &cap] {
                         cub_scan<Op, T, true>(tmp, cap, reinterpret_cast<const T*>(in),
                                               reinterpret_cast<T*>(out), rows, s);
                       }});
    } else {
      cases.push_back({nm, C, [=, &tmp, &cap] {
                         cub_scan<Op, T, false>(tmp, cap, reinterpret_cast<const T*>(in),
                                                reinterpret_cast<T*>(out), rows, s);
                       }});
    }
  };
  using I2 = std::integral_constant<int, 2>;
  using I4 = std::integral_constant<int, 4>;
  using I6 = std::integral_constant<int, 6>;
  using I8 = std::integral_constant<int, 8>;
  using I16 = std::integral_constant<int, 16>;
  add(I2{}, I4{}, true);
  add(std::integral_constant<int, 3>{}, I4{}, true);
  add(I4{}, I4{}, true);
  add(std::integral_constant<int, 5>{}, I4{}, true);
  add(I6{}, I4{}, true);
  add(std::integral_constant<int, 7>{}, I4{}, true);
  add(I8{}, I4{}, true);
  add(I2{}, I8{}, true);
  add(I4{}, I16{}, true);
  add(I6{}, I8{}, true);
  add(I8{}, I16{}, true);
  add(I4{}, I16{}, false);
  add(I8{}, I16{}, false);

  std::vector<float> hi(n), ho(n);
  cudaMemcpy(hi.data(), in, n * 4, cudaMemcpyDeviceToHost);
  for (auto& c : cases) {
    cudaMemset(out, 0xff, n * 4);
    c.run();
    cudaMemcpy(ho.data(), out, n * 4, cudaMemcpyDeviceToHost);
    const int64_t used = n / c.lanes * c.lanes;
    std::vector<double> acc(c.lanes, 0.0);
    int64_t bad = 0;
    for (int64_t i = 0; i < used; ++i) {
      acc[i % c.lanes] += hi[i];
      if (ho[i] != static_cast<float>(acc[i % c.lanes])) ++bad;
    }
    printf("check %-40s %lld mismatches\n", c.name.c_str(), (long long)bad);
  }
  std::vector<float> best(cases.size(), 1e30f);
  float floor = 1e30f, hi_floor = 0;
  for (int r = 0; r < reps; ++r) {
    const float f = time_ms([&] { cudaMemcpyAsync(cb, ca, n * 4, cudaMemcpyDeviceToDevice, s); }, s);
    floor = std::min(floor, f), hi_floor = std::max(hi_floor, f);
    for (size_t c = 0; c < cases.size(); ++c) best[c] = std::min(best[c], time_ms(cases[c].run, s));
  }
  const cudaError_t err = cudaDeviceSynchronize();
  printf("%s n %lld reps %d (%s)\nfloor (copy of n float32) %.3f ms (spread %.1f%%)\n", prop.name,
         (long long)n, reps, cudaGetErrorString(err), floor, 100 * (hi_floor / floor - 1));
  for (size_t c = 0; c < cases.size(); ++c) {
    // a case moves n / C * C elements: the floor scaled to them
    const double fl = floor * double(n / cases[c].lanes * cases[c].lanes) / double(n);
    printf("%-40s %8.3f ms  %5.1f%% of copy\n", cases[c].name.c_str(), best[c], 100 * fl / best[c]);
  }
  return err == cudaSuccess ? 0 : 1;
}
