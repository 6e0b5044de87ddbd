// scanops CUDA back end: cub_line_sum and cub_lanes_sum (see cub_line_scan.h), the only file
// that includes CUB.
#include "ops/cuda/cub_line_scan.h"

#if SCANOPS_CUB_LINE_SCAN

#include <c10/cuda/CUDAException.h>

#include <cub/device/device_scan.cuh>
#include <cub/version.cuh>
#include <cuda/std/functional>

#include "ops/cuda/cub_lanes.cuh"

#if CUB_VERSION < 300500
#error "scanops: SCANOPS_CUB_LINE_SCAN needs CCCL >= 3.5 (its stable-order DeviceScan)"
#endif

namespace scanops::cuda {

template <class In, class Out>
void cub_line_sum(const LaunchContext& ctx, const In* in, Out* out, int64_t length,
                  bool exclusive, const Out* initial) {
  constexpr bool kInt = std::is_integral_v<Out>;
  using acc_t = std::conditional_t<kInt, int64_t,
                                   std::conditional_t<std::is_same_v<Out, double>, double, float>>;
  using Plus = ::cuda::std::plus<acc_t>;
  using offset_t = cub::detail::choose_offset_t<int64_t>;
  // The stable reduction order for floating sums: what DeviceScan's public API engages for a
  // floating `plus` under cuda::execution::determinism::run_to_run. It is asked for through
  // the dispatch, which also takes the caller's temporary storage (the public env API
  // allocates its own), with the accumulator named by the operator (float32 for the half
  // types). Integer sums are exact in any order: CUB's default one.
  constexpr bool kStable = !kInt;
  using Policy = cub::detail::scan::policy_selector_from_types<const In*, Out*, acc_t, offset_t,
                                                                Plus, kStable>;
  const auto run = [&](auto force, auto init) -> cudaError_t {
    size_t bytes = 0;
    cudaError_t err = cub::DeviceScan::scan_impl_determinism<decltype(force)::value, kStable>(
        nullptr, bytes, in, out, Plus{}, init, length, ctx.stream, Policy{});
    if (err != cudaSuccess) return err;
    void* tmp = ctx.scratch->allocate(static_cast<int64_t>(bytes > 0 ? bytes : 1));
    return cub::DeviceScan::scan_impl_determinism<decltype(force)::value, kStable>(
        tmp, bytes, in, out, Plus{}, init, length, ctx.stream, Policy{});
  };
  using cub::ForceInclusive;
  // The initial value: an init value that the kernel reads on the device (a FutureValue over
  // `initial`, converted to acc_t there). An exclusive scan has an init value anyway (0 when
  // none: an immediate value of the same InputValue type, so one kernel serves both); an
  // inclusive one with an initial value is CUB's inclusive scan with an init value
  // (ForceInclusive::Yes: init + in[0] + ... + in[i]), a second kernel per type; without one
  // it keeps the init-less kernel (0 + x is not x's bits for x = -0.0).
  using Init = cub::detail::InputValue<acc_t, const Out*>;
  const auto init_value = [&]() {
    return initial != nullptr ? Init(cub::FutureValue<acc_t, const Out*>(initial)) : Init(acc_t{0});
  };
  cudaError_t err;
  if (exclusive) {
    err = run(std::integral_constant<ForceInclusive, ForceInclusive::No>{}, init_value());
  } else if (initial != nullptr) {
    err = run(std::integral_constant<ForceInclusive, ForceInclusive::Yes>{}, init_value());
  } else {
    err = run(std::integral_constant<ForceInclusive, ForceInclusive::Yes>{}, cub::NullType{});
  }
  C10_CUDA_CHECK(err);
}

template void cub_line_sum<float, float>(const LaunchContext&, const float*, float*, int64_t,
                                         bool, const float*);
template void cub_line_sum<double, double>(const LaunchContext&, const double*, double*, int64_t,
                                           bool, const double*);
template void cub_line_sum<c10::Half, c10::Half>(const LaunchContext&, const c10::Half*,
                                                 c10::Half*, int64_t, bool, const c10::Half*);
template void cub_line_sum<c10::BFloat16, c10::BFloat16>(const LaunchContext&,
                                                         const c10::BFloat16*, c10::BFloat16*,
                                                         int64_t, bool, const c10::BFloat16*);
#define SCANOPS_CUB_LINE_INT(In)                                                         \
  template void cub_line_sum<In, int64_t>(const LaunchContext&, const In*, int64_t*, int64_t, \
                                          bool, const int64_t*);
SCANOPS_CUB_LINE_INT(bool)
SCANOPS_CUB_LINE_INT(uint8_t)
SCANOPS_CUB_LINE_INT(int8_t)
SCANOPS_CUB_LINE_INT(int16_t)
SCANOPS_CUB_LINE_INT(int32_t)
SCANOPS_CUB_LINE_INT(int64_t)
#undef SCANOPS_CUB_LINE_INT

namespace {

template <int C>
void lanes_sum(const LaunchContext& ctx, const float* in, float* out, int64_t outer,
               int64_t length, bool exclusive, const float* initial) {
  using L = Lanes<C>;
  using Op = LanePlus<C>;
  using offset_t = cub::detail::choose_offset_t<int64_t>;
  using Policy = cub::detail::scan::policy_selector_from_types<const L*, L*, L, offset_t, Op, true>;
  using Init = cub::detail::InputValue<L, const L*>;
  const L* lin = reinterpret_cast<const L*>(in);
  L* lout = reinterpret_cast<L*>(out);
  const L* linit = reinterpret_cast<const L*>(initial);
  // The temporary storage (tile states) depends on the length only: sized once, and shared by
  // the blocks' scans, which run one after another on the stream.
  void* tmp = nullptr;
  size_t bytes = 0;
  const auto run = [&](auto force, auto init, int64_t o) -> cudaError_t {
    constexpr cub::ForceInclusive kForce = decltype(force)::value;
    if (tmp == nullptr) {
      const cudaError_t err = cub::DeviceScan::scan_impl_determinism<kForce, true>(
          nullptr, bytes, lin, lout, Op{}, init, length, ctx.stream, Policy{});
      if (err != cudaSuccess) return err;
      tmp = ctx.scratch->allocate(static_cast<int64_t>(bytes > 0 ? bytes : 1));
    }
    return cub::DeviceScan::scan_impl_determinism<kForce, true>(
        tmp, bytes, lin + o * length, lout + o * length, Op{}, init, length, ctx.stream,
        Policy{});
  };
  using cub::ForceInclusive;
  for (int64_t o = 0; o < outer; ++o) {
    // As cub_line_sum: an exclusive scan starts from its initial value or zeros; an inclusive
    // one with an initial value is CUB's inclusive scan with an init value, read on the device.
    const Init init = linit != nullptr ? Init(cub::FutureValue<L, const L*>(linit + o)) : Init(L{});
    cudaError_t err;
    if (exclusive) {
      err = run(std::integral_constant<ForceInclusive, ForceInclusive::No>{}, init, o);
    } else if (linit != nullptr) {
      err = run(std::integral_constant<ForceInclusive, ForceInclusive::Yes>{}, init, o);
    } else {
      err = run(std::integral_constant<ForceInclusive, ForceInclusive::Yes>{}, cub::NullType{}, o);
    }
    C10_CUDA_CHECK(err);
  }
}

}  // namespace

bool cub_lanes_fits(int cc_major, int64_t outer, int64_t length, int64_t inner, bool reverse) {
  // (cub_line_scan.h has the measurements behind these bounds.)
  constexpr int64_t kMaxBlocks = 4;
  constexpr int64_t kMinElements = int64_t{1} << 26;
  return cc_major >= 9 && !reverse && inner >= 2 && inner <= kCubMaxLanes && inner != 4 &&
         outer <= kMaxBlocks && length * inner >= kMinElements;
}

void cub_lanes_sum(const LaunchContext& ctx, const float* in, float* out, int64_t outer,
                   int64_t length, int lanes, bool exclusive, const float* initial) {
  switch (lanes) {
    case 2: return lanes_sum<2>(ctx, in, out, outer, length, exclusive, initial);
    case 3: return lanes_sum<3>(ctx, in, out, outer, length, exclusive, initial);
    case 5: return lanes_sum<5>(ctx, in, out, outer, length, exclusive, initial);
    case 6: return lanes_sum<6>(ctx, in, out, outer, length, exclusive, initial);
    case 7: return lanes_sum<7>(ctx, in, out, outer, length, exclusive, initial);
    default: TORCH_CHECK(false, "scanops: internal error: cub_lanes_sum with ", lanes, " lanes");
  }
}

}  // namespace scanops::cuda

#endif  // SCANOPS_CUB_LINE_SCAN
