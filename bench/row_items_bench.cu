// A kernel-level experiment, not part of the library: times scanops' row kernel
// (ops/cuda/row_scan.cuh) for cummax (MaxCombine<float>, 32- and 64-bit positions), cumsum,
// float32 cumprod and bfloat16 / float16 cumsum at several items-per-thread counts, against a device copy of the same bytes, one floor per
// byte count measured interleaved with the runs (best of `reps`). Used to pick the row tile
// shape of the indexed combines and the look-back chunk size (docs/design.md). It checks no
// results: the kernels' correctness is test/cuda_exact_check.py's job.
//
// Build (no GPU needed; torch's headers for c10), then run on the GPU machine:
//   nvcc -std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90,code=sm_90 -I. \
//        -I<site-packages>/torch/include -o build-micro/row_items_bench bench/row_items_bench.cu
//   build-micro/row_items_bench [rows] [length] [reps]      (switches: bench/row_launch.cuh)
// CHECK=1 also runs the float32 cumsum once on a random walk of -1 / 0 / +1 steps (every
// partial sum exact in float32, whatever the association) and counts its mismatches against
// the host's running sum: a check of the look-back's carries, not of the other cases.

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

namespace {


template <class Combine, int kItems, class Source, class Sink>
void launch(const LaunchContext& ctx, Arena& arena, const Source& src, const Sink& dst,
            int64_t rows, int64_t length) {
  scanops::bench::launch_rows<Combine, kItems>(ctx, arena, src, dst, rows, length);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? atoll(argv[1]) : 32768;
  const int64_t length = argc > 2 ? atoll(argv[2]) : 32768;
  const int reps = argc > 3 ? atoi(argv[3]) : 5;
  const int64_t n = rows * length;
  scanops::bench::Setup setup;
  const cudaDeviceProp& prop = setup.prop;
  const cudaStream_t stream = setup.stream;
  Arena& arena = setup.arena;
  const LaunchContext& ctx = setup.ctx;

  float* in = nullptr;
  float* out = nullptr;
  int64_t* idx = nullptr;
  void* copy_a = nullptr;
  void* copy_b = nullptr;
  cudaMalloc(&in, n * 4);
  cudaMalloc(&out, n * 4);
  cudaMalloc(&idx, n * 8);
  cudaMalloc(&copy_a, n * 8);
  cudaMalloc(&copy_b, n * 8);
  cudaMemset(in, 0, n * 4);
  cudaMemset(copy_a, 0, n * 8);

  using Wide = MaxCombine<float>;
  using Narrow = Wide::narrow_t;
  struct Case {
    std::string name;
    int64_t bytes;  // per element, read + written
    std::function<void()> run;
  };
  std::vector<Case> cases;
#define SCANOPS_CASE(C, K)                                                                     \
  cases.push_back({#C " items " #K, 16, [&] {                                                 \
                     launch<C, K>(ctx, arena,                                                   \
                                  InputSource<C, float>{in, nullptr, nullptr}, \
                                  OutputSink<C, float>{out, idx, true}, rows, length);               \
                   }});
  SCANOPS_CASE(Wide, 8)
  SCANOPS_CASE(Narrow, 8)
  SCANOPS_CASE(Narrow, 16)
  SCANOPS_CASE(Narrow, 4)
#undef SCANOPS_CASE
  using Sum = SumCombine<float>;
  cases.push_back({"Sum items 32", 8, [&] {
                     launch<Sum, 32>(ctx, arena,
                                     InputSource<Sum, float>{in, nullptr, nullptr},
                                     OutputSink<Sum, float>{out, nullptr, true}, rows, length);
                   }});
  // masked float32 cumsum: a dense mask, a (1, N) mask and an (M, 1) mask read in place
  // (bytes: the input and output only, the floor of the broadcast cases).
  bool* mask = nullptr;
  cudaMalloc(&mask, n);
  cudaMemset(mask, 1, n);
  const auto bsrc = [&](int64_t so, int64_t sl) {
    InputSource<Sum, float, true> s{in, nullptr, mask};
    s.at.mask_at = CompanionIndex(CompanionLayout{true, so, sl, 0}, length, 1, n);
    return s;
  };
  cases.push_back({"Sum mask dense", 8, [&] {
                     launch<Sum, 32>(ctx, arena, InputSource<Sum, float>{in, nullptr, mask},
                                     OutputSink<Sum, float>{out, nullptr, true}, rows, length);
                   }});
  cases.push_back({"Sum mask (1, N)", 8, [&] {
                     launch<Sum, 32>(ctx, arena, bsrc(0, 1),
                                     OutputSink<Sum, float>{out, nullptr, true}, rows, length);
                   }});
  cases.push_back({"Sum mask (M, 1)", 8, [&] {
                     launch<Sum, 32>(ctx, arena, bsrc(1, 0),
                                     OutputSink<Sum, float>{out, nullptr, true}, rows, length);
                   }});
  // linear_recurrence, float32: dense coefficients (12 bytes an element) and a (1, N) row of
  // coefficients read in place (8 bytes: the floor of that case).
  using Aff = AffineCombine<float>;
  float* coef = nullptr;
  cudaMalloc(&coef, n * 4);
  cudaMemset(coef, 0, n * 4);
  cases.push_back({"Affine dense a", 8, [&] {
                     launch<Aff, 16>(ctx, arena, InputSource<Aff, float>{in, coef, nullptr},
                                     OutputSink<Aff, float>{out, nullptr, true}, rows, length);
                   }});
  cases.push_back({"Affine a (1, N)", 8, [&] {
                     InputSource<Aff, float, true> s{in, coef, nullptr};
                     s.at.coeff_at = CompanionIndex(CompanionLayout{true, 0, 1, 0}, length, 1, n);
                     launch<Aff, 16>(ctx, arena, s, OutputSink<Aff, float>{out, nullptr, true},
                                     rows, length);
                   }});
  // float32 cumprod (float64 states) and bfloat16 / float16 cumsum (float32 states).
  using Prod = ProdCombine<double>;
#define SCANOPS_CASE(C, T, K, B)                                                                \
  cases.push_back({#C " " #T " items " #K, B, [&] {                                            \
                     launch<C, K>(ctx, arena,                                                   \
                                  InputSource<C, T>{reinterpret_cast<const T*>(in), nullptr,    \
                                                    nullptr},                                   \
                                  OutputSink<C, T>{reinterpret_cast<T*>(out), nullptr, true},   \
                                  rows, length);                                                \
                   }});
  SCANOPS_CASE(Prod, float, 16, 8)
  SCANOPS_CASE(Prod, float, 32, 8)
  SCANOPS_CASE(Sum, c10::BFloat16, 32, 4)
  SCANOPS_CASE(Sum, c10::Half, 32, 4)
#if SCANOPS_ROW_MAX_ITEMS > 32
  SCANOPS_CASE(Sum, c10::BFloat16, 64, 4)
  SCANOPS_CASE(Sum, c10::Half, 64, 4)
#endif
#undef SCANOPS_CASE

  if (getenv("CHECK") && atoi(getenv("CHECK")) != 0) {
    scanops::bench::fill_steps<<<1024, 256, 0, stream>>>(in, n);
    cases[4].run();  // "Sum items 32"
    std::vector<float> hi(n), ho(n);
    cudaMemcpyAsync(hi.data(), in, n * 4, cudaMemcpyDeviceToHost, stream);
    cudaMemcpyAsync(ho.data(), out, n * 4, cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    int64_t bad = 0, first_bad = -1;
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t l = 0; l < length; ++l) {
        acc += hi[r * length + l];
        if (ho[r * length + l] != static_cast<float>(acc)) {
          if (first_bad < 0) first_bad = r * length + l;
          ++bad;
        }
      }
    }
    printf("check %s: %lld mismatches (first at %lld)\n", cases[4].name.c_str(), (long long)bad,
           (long long)first_bad);
  }
  std::vector<float> best(cases.size(), 1e30f);
  float floor16 = 1e30f, floor8 = 1e30f, floor4 = 1e30f, hi16 = 0, hi8 = 0, hi4 = 0;
  for (int r = 0; r < reps; ++r) {
    const float f16 = time_ms([&] { cudaMemcpyAsync(copy_b, copy_a, n * 8, cudaMemcpyDeviceToDevice, stream); }, stream);
    const float f8 = time_ms([&] { cudaMemcpyAsync(copy_b, copy_a, n * 4, cudaMemcpyDeviceToDevice, stream); }, stream);
    floor16 = std::min(floor16, f16), hi16 = std::max(hi16, f16);
    floor8 = std::min(floor8, f8), hi8 = std::max(hi8, f8);
    const float f4 = time_ms([&] { cudaMemcpyAsync(copy_b, copy_a, n * 2, cudaMemcpyDeviceToDevice, stream); }, stream);
    floor4 = std::min(floor4, f4), hi4 = std::max(hi4, f4);
    for (size_t c = 0; c < cases.size(); ++c) {
      best[c] = std::min(best[c], time_ms(cases[c].run, stream));
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  printf("%s rows %lld length %lld reps %d (%s)\n", prop.name, (long long)rows, (long long)length,
         reps, cudaGetErrorString(err));
  printf("floor 16 B/element %.3f ms (spread %.1f%%), 8 B/element %.3f ms (spread %.1f%%), "
         "4 B/element %.3f ms (spread %.1f%%)\n",
         floor16, 100 * (hi16 / floor16 - 1), floor8, 100 * (hi8 / floor8 - 1), floor4,
         100 * (hi4 / floor4 - 1));
  for (size_t c = 0; c < cases.size(); ++c) {
    const float fl = cases[c].bytes == 16 ? floor16 : cases[c].bytes == 8 ? floor8 : floor4;
    printf("%-22s %8.3f ms  %5.1f%% of copy\n", cases[c].name.c_str(), best[c], 100 * fl / best[c]);
  }
  return err == cudaSuccess ? 0 : 1;
}
