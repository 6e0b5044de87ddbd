// scanops: maps a ScanProblem's (combine kind, input dtype, output dtype) onto one
// template instantiation of a back end's Runner. Shared by the CPU and CUDA back ends so
// that both accept exactly the same dtypes.
//
// Type pairs (in_t -> out_t) the engine produces (see result_dtype in scan_engine.cpp):
//   T -> T      for float, double, Half, BFloat16, complex64, complex128, int8, int16, int32,
//               int64, uint8 (and bool for cummax / cummin)
//   T -> int64  for int8, int16, int32, uint8, bool (torch's integral promotion, sums and
//               products)
// Accumulation: float for float/Half/BFloat16 (double on the CPU), double for double, int64
// for integers, complex<acc of the real type> for complex.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <c10/util/complex.h>

#include <cstdint>
#include <type_traits>

#include "ops/combine.h"
#include "ops/scan_engine.h"

namespace scanops {

// kWide: the back end accumulates float32 in float64 (the CPU back end: its sequential
// walks would otherwise grow rounding error with the line length; the CUDA back end's tree
// scans do not need it and keep float32 for bandwidth). Complex values accumulate in the
// complex type of the real accumulation type.
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
template <typename R, bool kWide>
struct AccType<c10::complex<R>, kWide> {
  using type = c10::complex<typename AccType<R, kWide>::type>;
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

// The value type cummax / cummin keep: the input's own type (a selected value is copied bit
// for bit, NaN payloads included, as torch does; half types compare as float).
template <typename in_t>
using extremum_t = in_t;

template <typename T>
constexpr bool is_floating_v = std::is_floating_point_v<T> || std::is_same_v<T, c10::Half> ||
                               std::is_same_v<T, c10::BFloat16>;

namespace detail {

// Sum / Prod: T -> T for floating and complex types, integral T -> T or int64, bool -> int64.
template <template <class> class CombineT, template <class, class, class> class Runner,
          bool kWide, typename in_t>
void run_same_or_long(const ScanProblem& p) {
  using A = acc_t<in_t, kWide || WideFloatAcc<CombineT>::value>;
  const auto out = p.out.values.scalar_type();
  if constexpr (std::is_same_v<in_t, bool>) {
    TORCH_CHECK(out == at::kLong, p.spec.op_name, ": internal error: bool scans to int64");
    Runner<CombineT<A>, in_t, int64_t>::run(p);
  } else if constexpr (is_floating_v<in_t> || is_complex<in_t>::value) {
    Runner<CombineT<A>, in_t, in_t>::run(p);
  } else {
    if (out == at::kLong && !std::is_same_v<in_t, int64_t>) {
      Runner<CombineT<A>, in_t, int64_t>::run(p);
    } else {
      Runner<CombineT<A>, in_t, in_t>::run(p);
    }
  }
}

// The input dtypes of p, each as its C++ type: f(type_tag<T>{}).
template <typename T>
struct type_tag {
  using type = T;
};
template <class F>
void visit_dtype(const ScanProblem& p, F&& f) {
  switch (p.in.input.scalar_type()) {
    case at::kFloat: return f(type_tag<float>{});
    case at::kDouble: return f(type_tag<double>{});
    case at::kHalf: return f(type_tag<c10::Half>{});
    case at::kBFloat16: return f(type_tag<c10::BFloat16>{});
    case at::kComplexFloat: return f(type_tag<c10::complex<float>>{});
    case at::kComplexDouble: return f(type_tag<c10::complex<double>>{});
    case at::kChar: return f(type_tag<int8_t>{});
    case at::kShort: return f(type_tag<int16_t>{});
    case at::kInt: return f(type_tag<int32_t>{});
    case at::kLong: return f(type_tag<int64_t>{});
    case at::kByte: return f(type_tag<uint8_t>{});
    case at::kBool: return f(type_tag<bool>{});
    default:
      TORCH_CHECK(false, p.spec.op_name, ": internal error: unexpected input dtype ",
                  p.in.input.scalar_type());
  }
}

[[noreturn]] inline void unexpected(const ScanProblem& p) {
  TORCH_CHECK(false, p.spec.op_name, ": internal error: dtype ", p.in.input.scalar_type(),
              " reached a combine kind that does not take it");
}

}  // namespace detail

namespace detail {
// One (combine kind, input type): the Runner instantiation for p's output dtype.
template <CombineKind K, template <class, class, class> class Runner, bool kWide, typename T>
void run_kind(const ScanProblem& p) {
  constexpr bool fp = is_floating_v<T> || is_complex<T>::value;
  if constexpr (K == CombineKind::Sum) {
    return run_same_or_long<SumCombine, Runner, kWide, T>(p);
  } else if constexpr (K == CombineKind::Prod) {
    return run_same_or_long<ProdCombine, Runner, kWide, T>(p);
  } else if constexpr (K == CombineKind::Affine) {
    if constexpr (!is_complex<T>::value && fp) {
      if (p.wide_acc) return Runner<AffineCombine<acc_t<T, true>>, T, T>::run(p);
    }
    if constexpr (fp) return Runner<AffineCombine<acc_t<T, kWide>>, T, T>::run(p);
    unexpected(p);
  } else if constexpr (K == CombineKind::LogAddExp) {
    if constexpr (fp) return Runner<LogAddExpCombine<acc_t<T, kWide>>, T, T>::run(p);
    unexpected(p);
  } else if constexpr (K == CombineKind::Max) {
    if constexpr (!is_complex<T>::value) return Runner<MaxCombine<extremum_t<T>>, T, T>::run(p);
    unexpected(p);
  } else {
    static_assert(K == CombineKind::Min);
    if constexpr (!is_complex<T>::value) return Runner<MinCombine<extremum_t<T>>, T, T>::run(p);
    unexpected(p);
  }
}
}  // namespace detail

// Runner<Combine, in_t, out_t>::run(const ScanProblem&) is the back end's kernel family
// entry for one instantiation. The one place that maps (combine kind, dtypes) onto the
// combine structs; the engine (scan_engine.cpp, kind_accepts) only lets through the dtypes
// each kind takes here:
//   Sum, Prod     every dtype (see run_same_or_long)
//   Affine        floating and complex, T -> T (coefficients in p.in.coeff)
//   LogAddExp     floating and complex, T -> T
//   Max, Min      every real dtype and bool, T -> T, plus the int64 indices in p.out.indices
//
// dispatch_kind<K> instantiates one combine kind only (p.spec.kind must be K): a back end
// may compile its kinds in separate translation units (the CPU back end does, so that they
// build in parallel) and switch on p.spec.kind itself.
template <CombineKind K, template <class, class, class> class Runner, bool kWide = false>
void dispatch_kind(const ScanProblem& p) {
  TORCH_CHECK(p.spec.kind == K, p.spec.op_name, ": internal error: combine kind mismatch");
  detail::visit_dtype(p, [&](auto tag) {
    detail::run_kind<K, Runner, kWide, typename decltype(tag)::type>(p);
  });
}

// Every combine kind in one translation unit.
template <template <class, class, class> class Runner, bool kWide = false>
void dispatch_scan(const ScanProblem& p) {
  switch (p.spec.kind) {
    case CombineKind::Sum: return dispatch_kind<CombineKind::Sum, Runner, kWide>(p);
    case CombineKind::Prod: return dispatch_kind<CombineKind::Prod, Runner, kWide>(p);
    case CombineKind::Affine: return dispatch_kind<CombineKind::Affine, Runner, kWide>(p);
    case CombineKind::LogAddExp: return dispatch_kind<CombineKind::LogAddExp, Runner, kWide>(p);
    case CombineKind::Max: return dispatch_kind<CombineKind::Max, Runner, kWide>(p);
    case CombineKind::Min: return dispatch_kind<CombineKind::Min, Runner, kWide>(p);
  }
  TORCH_CHECK(false, p.spec.op_name, ": internal error: unknown combine kind");
}

}  // namespace scanops
