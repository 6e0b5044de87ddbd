// A kernel-level experiment, not part of the library: the 1-D float32 cumsum of scanops' row
// kernel in look-back mode (ops/cuda/row_scan.cuh, as the library launches it for one long
// line) against CCCL 3.5's cub::DeviceScan (default, and run-to-run deterministic: the
// "stable reduction order" look-back), inclusive and exclusive, with a device copy of the same
// bytes as the floor, measured interleaved (best of `reps`). Also bfloat16, float64 and
// float32 products, reverse float32 sums (CUB through reverse iterators) and uint8 / bool /
// int16 / int32 -> int64 and int64 sums. Checks the float32 sums' results against a host
// running sum on a random walk of -1 / 0 / +1 steps (exact in float32 whatever the
// association), so a wrong carry cannot pass; the other cases are timed only.
//
// Needs CCCL >= 3.5 headers ahead of the toolkit's (PyPI nvidia-cuda-cccl):
//   nvcc -std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90,code=sm_90 \
//        -I<site-packages>/nvidia/cu13/include/cccl -I. -I<site-packages>/torch/include \
//        -o build-micro/cub_scan_bench bench/cub_scan_bench.cu
//   build-micro/cub_scan_bench [n] [reps]

#include "bench/micro_common.cuh"

#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>
#include <cuda/std/iterator>

#include <string>
#include <vector>

#include "ops/cuda/row_scan.cuh"
#include <cuda/std/functional>

namespace cub_bench {

using namespace scanops;
using namespace scanops::cuda;
using scanops::bench::Arena;
using scanops::bench::time_ms;

// cub::DeviceScan through its dispatch with an explicit reduction-order switch (the public
// env API allows the stable order only for cuda::std::plus on floating-point accumulators; the
// dispatch takes any op with an identity). Accum is Op's result type.
template <class Op, bool kStable, bool kExclusive, class In, class Out>
void cub_scan(Arena& arena, const In* in, Out* out, int64_t n, cudaStream_t stream) {
  using accum_t = std::decay_t<decltype(Op{}(std::declval<In>(), std::declval<In>()))>;
  const accum_t init_value{};
  using offset_t = cub::detail::choose_offset_t<int64_t>;
  using init_t = std::conditional_t<kExclusive, cub::detail::InputValue<accum_t>, cub::NullType>;
  using selector_t =
      cub::detail::scan::policy_selector_from_types<const In*, Out*, accum_t, offset_t, Op, kStable>;
  constexpr auto force = kExclusive ? cub::ForceInclusive::No : cub::ForceInclusive::Yes;
  init_t init = [&] {
    if constexpr (kExclusive) return cub::detail::InputValue<accum_t>(init_value);
    else return cub::NullType{};
  }();
  size_t bytes = 0;
  (void)cub::DeviceScan::scan_impl_determinism<force, kStable>(nullptr, bytes, in, out, Op{},
                                                               init, n, stream, selector_t{});
  arena.used = 0;
  void* tmp = arena.allocate(static_cast<int64_t>(bytes));
  (void)cub::DeviceScan::scan_impl_determinism<force, kStable>(tmp, bytes, in, out, Op{}, init,
                                                               n, stream, selector_t{});
}

// The same through iterators (reverse scans: cuda::std::reverse_iterator over the pointers),
// the accumulator named.
template <class Op, class accum_t, bool kStable, class InIt, class OutIt>
void cub_scan_it(Arena& arena, InIt in, OutIt out, int64_t n, cudaStream_t stream) {
  using offset_t = cub::detail::choose_offset_t<int64_t>;
  using selector_t =
      cub::detail::scan::policy_selector_from_types<InIt, OutIt, accum_t, offset_t, Op, kStable>;
  size_t bytes = 0;
  (void)cub::DeviceScan::scan_impl_determinism<cub::ForceInclusive::Yes, kStable>(
      nullptr, bytes, in, out, Op{}, cub::NullType{}, n, stream, selector_t{});
  arena.used = 0;
  void* tmp = arena.allocate(static_cast<int64_t>(bytes));
  (void)cub::DeviceScan::scan_impl_determinism<cub::ForceInclusive::Yes, kStable>(
      tmp, bytes, in, out, Op{}, cub::NullType{}, n, stream, selector_t{});
}

}  // namespace cub_bench

int main(int argc, char** argv) {
  using namespace scanops;
  using scanops::bench::Arena;
  using scanops::bench::time_ms;
  using scanops::cuda::LaunchContext;
  using namespace cub_bench;
  const int64_t n = argc > 1 ? atoll(argv[1]) : (int64_t{1} << 30);
  const int reps = argc > 2 ? atoi(argv[2]) : 7;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  Arena arena(int64_t{256} << 20);
  const LaunchContext ctx{stream, prop.multiProcessorCount, &arena, prop.major};
  float *in = nullptr, *out = nullptr;
  void *copy_a = nullptr, *copy_b = nullptr;
  cudaMalloc(&in, n * 4);
  cudaMalloc(&out, n * 4);
  cudaMalloc(&copy_a, n * 4);
  cudaMalloc(&copy_b, n * 4);
  cudaMemset(copy_a, 0, n * 4);
  scanops::bench::fill_steps<<<1024, 256, 0, stream>>>(in, n);

  using Sum = SumCombine<float>;
  using scanops::cuda::InputSource;
  using scanops::cuda::OutputSink;
  struct Case {
    std::string name;
    int bytes;
    int check;  // 0: not checked, 1: inclusive, 2: exclusive float32 sums
    std::function<void()> run;
  };
  using PlusF = ::cuda::std::plus<float>;
  using PlusD = ::cuda::std::plus<double>;
  using MulD = ::cuda::std::multiplies<double>;
  using PlusL = ::cuda::std::plus<int64_t>;
  using Bf = c10::BFloat16;
  using Prod = ProdCombine<double>;
  const auto ours = [&](auto combine, auto in_p, auto out_p, bool exclusive, int64_t len,
                        bool reverse = false) {
    using C = decltype(combine);
    using In = std::remove_const_t<std::remove_pointer_t<decltype(in_p)>>;
    using OutT = std::remove_pointer_t<decltype(out_p)>;
    arena.used = 0;
    scanops::cuda::scan_rows<C>(ctx, InputSource<C, In>{in_p, nullptr, nullptr},
                                OutputSink<C, OutT>{out_p, nullptr, true}, 1, len,
                                ScanFlags{exclusive, reverse});
  };
  const Bf* in_bf = reinterpret_cast<const Bf*>(in);
  Bf* out_bf = reinterpret_cast<Bf*>(out);
  // bytes: read + written per element; checked: float32 results against the host sum
  std::vector<Case> cases = {
      {"ours f32", 8, 1, [&] { ours(Sum{}, (const float*)in, out, false, n); }},
      {"cub default f32", 8, 1, [&] { cub_scan<PlusF, false, false>(arena, (const float*)in, out, n, stream); }},
      {"cub stable f32", 8, 1, [&] { cub_scan<PlusF, true, false>(arena, (const float*)in, out, n, stream); }},
      {"ours f32 excl", 8, 2, [&] { ours(Sum{}, (const float*)in, out, true, n); }},
      {"cub stable f32 excl", 8, 2, [&] { cub_scan<PlusF, true, true>(arena, (const float*)in, out, n, stream); }},
      {"ours bf16 (f32 acc)", 4, 0, [&] { ours(Sum{}, in_bf, out_bf, false, n); }},
      {"cub stable bf16 (f32 acc)", 4, 0, [&] { cub_scan<PlusF, true, false>(arena, in_bf, out_bf, n, stream); }},
      {"ours f32 cumprod (f64)", 8, 0, [&] { ours(Prod{}, (const float*)in, out, false, n); }},
      {"cub stable f32 prod (f64)", 8, 0, [&] { cub_scan<MulD, true, false>(arena, (const float*)in, out, n, stream); }},
      {"ours f64 (half n)", 8, 0, [&] { ours(SumCombine<double>{}, (const double*)in, (double*)out, false, n / 2); }},
      {"cub stable f64 (half n)", 8, 0, [&] { cub_scan<PlusD, true, false>(arena, (const double*)in, (double*)out, n / 2, stream); }},
      // reverse float32 sums; int32 -> int64 and int64 sums (half n; bytes 12: floor3)
      {"ours f32 reverse", 8, 0, [&] { ours(Sum{}, (const float*)in, out, false, n, true); }},
      {"cub stable f32 reverse", 8, 0, [&] {
         cub_scan_it<PlusF, float, true>(arena, ::cuda::std::reverse_iterator<const float*>(in + n),
                                         ::cuda::std::reverse_iterator<float*>(out + n), n, stream);
       }},
      {"ours i32->i64 (half n)", 12, 0, [&] { ours(SumCombine<int64_t>{}, (const int32_t*)in, (int64_t*)out, false, n / 2); }},
      {"cub i32->i64 (half n)", 12, 0, [&] { cub_scan_it<PlusL, int64_t, false>(arena, (const int32_t*)in, (int64_t*)out, n / 2, stream); }},
      {"ours u8->i64 (half n)", 9, 0, [&] { ours(SumCombine<int64_t>{}, (const uint8_t*)in, (int64_t*)out, false, n / 2); }},
      {"cub u8->i64 (half n)", 9, 0, [&] { cub_scan_it<PlusL, int64_t, false>(arena, (const uint8_t*)in, (int64_t*)out, n / 2, stream); }},
      {"ours bool->i64 (half n)", 9, 0, [&] { ours(SumCombine<int64_t>{}, (const bool*)in, (int64_t*)out, false, n / 2); }},
      {"cub bool->i64 (half n)", 9, 0, [&] { cub_scan_it<PlusL, int64_t, false>(arena, (const bool*)in, (int64_t*)out, n / 2, stream); }},
      {"ours i16->i64 (half n)", 10, 0, [&] { ours(SumCombine<int64_t>{}, (const int16_t*)in, (int64_t*)out, false, n / 2); }},
      {"cub i16->i64 (half n)", 10, 0, [&] { cub_scan_it<PlusL, int64_t, false>(arena, (const int16_t*)in, (int64_t*)out, n / 2, stream); }},
      {"ours i64 (half n)", 8, 0, [&] { ours(SumCombine<int64_t>{}, (const int64_t*)in, (int64_t*)out, false, n / 2); }},
      {"cub i64 (half n)", 8, 0, [&] { cub_scan_it<PlusL, int64_t, false>(arena, (const int64_t*)in, (int64_t*)out, n / 2, stream); }},
  };
  std::vector<float> hi(n), ho(n);
  cudaMemcpy(hi.data(), in, n * 4, cudaMemcpyDeviceToHost);
  for (auto& c : cases) {
    if (c.check == 0) continue;
    cudaMemset(out, 0xff, n * 4);
    c.run();
    cudaMemcpy(ho.data(), out, n * 4, cudaMemcpyDeviceToHost);
    int64_t bad = 0;
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double before = acc;
      acc += hi[i];
      if (ho[i] != static_cast<float>(c.check == 2 ? before : acc)) ++bad;
    }
    printf("check %-26s %lld mismatches\n", c.name.c_str(), (long long)bad);
  }
  std::vector<float> best(cases.size(), 1e30f);
  float floor = 1e30f, hi_floor = 0, floor2 = 1e30f, hi_floor2 = 0, floor3 = 1e30f;
  float floor9 = 1e30f, floor10 = 1e30f;  // 9 / 10 bytes an element of n / 2
  for (int r = 0; r < reps; ++r) {
    const float f = time_ms([&] { cudaMemcpyAsync(copy_b, copy_a, n * 4, cudaMemcpyDeviceToDevice, stream); }, stream);
    floor = std::min(floor, f), hi_floor = std::max(hi_floor, f);
    const float f2 = time_ms([&] { cudaMemcpyAsync(copy_b, copy_a, n * 2, cudaMemcpyDeviceToDevice, stream); }, stream);
    floor2 = std::min(floor2, f2), hi_floor2 = std::max(hi_floor2, f2);
    floor3 = std::min(floor3, time_ms([&] { cudaMemcpyAsync(copy_b, copy_a, n * 3, cudaMemcpyDeviceToDevice, stream); }, stream));
    floor9 = std::min(floor9, time_ms([&] { cudaMemcpyAsync(copy_b, copy_a, n * 9 / 4, cudaMemcpyDeviceToDevice, stream); }, stream));
    floor10 = std::min(floor10, time_ms([&] { cudaMemcpyAsync(copy_b, copy_a, n * 10 / 4, cudaMemcpyDeviceToDevice, stream); }, stream));
    for (size_t c = 0; c < cases.size(); ++c) best[c] = std::min(best[c], time_ms(cases[c].run, stream));
  }
  const cudaError_t err = cudaDeviceSynchronize();
  printf("%s n %lld reps %d (%s)\nfloor 8 B/element %.3f ms (spread %.1f%%), 4 B/element %.3f ms "
         "(spread %.1f%%)\n", prop.name, (long long)n, reps, cudaGetErrorString(err), floor,
         100 * (hi_floor / floor - 1), floor2, 100 * (hi_floor2 / floor2 - 1));
  for (size_t c = 0; c < cases.size(); ++c) {
    const float fl = cases[c].bytes == 8    ? floor
                     : cases[c].bytes == 12 ? floor3
                     : cases[c].bytes == 9  ? floor9
                     : cases[c].bytes == 10 ? floor10
                                            : floor2;
    printf("%-28s %8.3f ms  %5.1f%% of copy\n", cases[c].name.c_str(), best[c], 100 * fl / best[c]);
  }
  return err == cudaSuccess ? 0 : 1;
}
