// scanops: maps a ScanProblem's (combine kind, input dtype, output dtype) onto one
// template instantiation of a back end's Runner. Shared by the CPU and CUDA back ends so
// that both accept exactly the same dtypes.
//
// Type pairs (in_t -> out_t) the engine produces (see result_dtype in scan_engine.cpp):
//   T -> T      for float, double, Half, BFloat16, int8, int16, int32, int64, uint8
//   T -> int64  for int8, int16, int32, uint8, bool (torch's integral promotion)
// Accumulation: float for float/Half/BFloat16 (double on the CPU), double for double, int64
// for integers.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>

#include "ops/combine.h"
#include "ops/scan_engine.h"

namespace scanops {

// kWide: the back end accumulates float32 in float64 (the CPU back end: its sequential
// walks would otherwise grow rounding error with the line length; the CUDA back end's tree
// scans do not need it and keep float32 for bandwidth).
template <typename in_t, bool kWide>
struct AccType {
  using type = std::conditional_t<std::is_floating_point_v<in_t>,
                                  std::conditional_t<kWide, double, in_t>, int64_t>;
};
template <bool kWide>
struct AccType<c10::Half, kWide> {
  using type = std::conditional_t<kWide, double, float>;
};
template <bool kWide>
struct AccType<c10::BFloat16, kWide> {
  using type = std::conditional_t<kWide, double, float>;
};
template <typename in_t, bool kWide = false>
using acc_t = typename AccType<in_t, kWide>::type;

// Products of floating values accumulate in float64 on every back end: a tree of float32
// products of near-1 factors (the usual cumprod data) is biased (the dropped low bits of
// (1+a)(1+b) have the sign of ab), about 1e-9 relative per factor, 1.5% after 2^24 factors,
// where a sequential float32 walk stays near 2e-5. Sums keep float32 on CUDA (tree sums are
// more accurate than sequential ones).
template <template <class> class CombineT>
struct WideFloatAcc : std::false_type {};
template <>
struct WideFloatAcc<ProdCombine> : std::true_type {};

namespace detail {

template <template <class> class CombineT, template <class, class, class> class Runner,
          bool kWide, typename in_t>
void run_same_or_long(const ScanProblem& p) {
  using A = acc_t<in_t, kWide || WideFloatAcc<CombineT>::value>;
  const auto out = p.output.scalar_type();
  if constexpr (std::is_same_v<in_t, bool>) {
    TORCH_CHECK(out == at::kLong, p.spec.op_name, ": internal error: bool scans to int64");
    Runner<CombineT<A>, in_t, int64_t>::run(p);
  } else if constexpr (std::is_floating_point_v<in_t> || std::is_same_v<in_t, c10::Half> ||
                       std::is_same_v<in_t, c10::BFloat16>) {
    Runner<CombineT<A>, in_t, in_t>::run(p);
  } else {
    if (out == at::kLong && !std::is_same_v<in_t, int64_t>) {
      Runner<CombineT<A>, in_t, int64_t>::run(p);
    } else {
      Runner<CombineT<A>, in_t, in_t>::run(p);
    }
  }
}

template <template <class> class CombineT, template <class, class, class> class Runner,
          bool kWide>
void dispatch_types(const ScanProblem& p) {
  switch (p.input.scalar_type()) {
    case at::kFloat: return run_same_or_long<CombineT, Runner, kWide, float>(p);
    case at::kDouble: return run_same_or_long<CombineT, Runner, kWide, double>(p);
    case at::kHalf: return run_same_or_long<CombineT, Runner, kWide, c10::Half>(p);
    case at::kBFloat16: return run_same_or_long<CombineT, Runner, kWide, c10::BFloat16>(p);
    case at::kChar: return run_same_or_long<CombineT, Runner, kWide, int8_t>(p);
    case at::kShort: return run_same_or_long<CombineT, Runner, kWide, int16_t>(p);
    case at::kInt: return run_same_or_long<CombineT, Runner, kWide, int32_t>(p);
    case at::kLong: return run_same_or_long<CombineT, Runner, kWide, int64_t>(p);
    case at::kByte: return run_same_or_long<CombineT, Runner, kWide, uint8_t>(p);
    case at::kBool: return run_same_or_long<CombineT, Runner, kWide, bool>(p);
    default:
      TORCH_CHECK(false, p.spec.op_name, ": internal error: unexpected input dtype ",
                  p.input.scalar_type());
  }
}

}  // namespace detail

// Runner<Combine, in_t, out_t>::run(const ScanProblem&) is the back end's kernel family
// entry for one instantiation.
template <template <class, class, class> class Runner, bool kWide = false>
void dispatch_scan(const ScanProblem& p) {
  switch (p.spec.kind) {
    case CombineKind::Sum: return detail::dispatch_types<SumCombine, Runner, kWide>(p);
    case CombineKind::Prod: return detail::dispatch_types<ProdCombine, Runner, kWide>(p);
    case CombineKind::Affine: break;  // see dispatch_affine
  }
  TORCH_CHECK(false, p.spec.op_name, ": internal error: unknown combine kind");
}

// Affine (linear recurrence) problems: floating types only, in_t == out_t, two inputs
// (p.coeff holds a[t]). Kept apart from dispatch_scan so a back end opts in explicitly.
template <template <class, class, class> class Runner, bool kWide = false>
void dispatch_affine(const ScanProblem& p) {
  switch (p.input.scalar_type()) {
    case at::kFloat: return Runner<AffineCombine<acc_t<float, kWide>>, float, float>::run(p);
    case at::kDouble: return Runner<AffineCombine<double>, double, double>::run(p);
    case at::kHalf:
      return Runner<AffineCombine<acc_t<c10::Half, kWide>>, c10::Half, c10::Half>::run(p);
    case at::kBFloat16:
      return Runner<AffineCombine<acc_t<c10::BFloat16, kWide>>, c10::BFloat16,
                    c10::BFloat16>::run(p);
    default:
      TORCH_CHECK(false, p.spec.op_name, ": internal error: unexpected dtype ",
                  p.input.scalar_type());
  }
}

}  // namespace scanops
