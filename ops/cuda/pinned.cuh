// scanops CUDA back end, layer 1: the look-back's combine, with its bits pinned.
//
// The decoupled look-back (lookback.cuh, and the column and segmented kernels' look-backs)
// computes a tile's inclusive prefix I(k) = combine(I(k-1), A(k)) at two kinds of code site:
// the tile's own publication, and the left fold of every later tile whose walk passes over
// tile k while it holds only its aggregate (fold_left, whose unrolled steps are several sites
// more). Which site computes the I(k) a tile continues from depends on timing, so every site
// must give the same bits for the same operands. Combine::combine written as C++ does not
// promise that:
//   * NaN payloads: an add or a multiply of two NaNs returns one of them, and the compiler
//     may order a commutative operation's operands differently at each site. float64 keeps
//     NaN payloads and signs on the GPU: fuzz seed 101 case 8586 (masked_cumsum float64 with
//     NaN and +-inf inputs) gave 0x7ff8000000000000 in one run and 0xfff8000000000000 in
//     another at the same 528 outputs (H200, 1 run in 49); test/python/test_cuda_bits.py,
//     NaNs of both signs in every chunk, differed in 8 of its configurations (H100);
//   * contraction: nvcc may fuse a product and a sum into an FMA (a complex product has two
//     ways to, g.a * f.b + g.b more), and may do so differently at different sites: the
//     candidate cause of fuzz seed 688027910 case 2316 (complex128 linear_recurrence, no NaN,
//     ~1e-15 apart run to run), which 49 runs on an H200 and 49 on an H100 did not reproduce.
// PinnedCombine<C>::combine spells the rounding out with intrinsics (__fmaf_rn, __fmul_rn,
// __fadd_rn and the double ones are never contracted), and canonical() maps every NaN to one
// NaN. Whether a result is NaN does not depend on payloads or operand order (a NaN operand
// makes every IEEE operation's result NaN; an invalid operation's NaN depends on values
// only), and every non-NaN result is then the same bits at every site; so a fold or a
// publication ends with canonical() and never needs it per step (one select per fold, off
// the fold's chain of dependent combines).
// Combines not specialised here already give the same bits everywhere: integers, selections
// (cummax / cummin), and complex logaddexp (one out-of-line body, SCANOPS_HD_CALL).
// Kept out of ops/combine.h, which the CPU back end shares (no CUDA intrinsics there).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/combine.h"
#include "ops/segmented.h"

namespace scanops::cuda {

namespace pinned {

__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double fma(double a, double b, double c) { return __fma_rn(a, b, c); }

template <class T>
__device__ __forceinline__ T canonical(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return x != x ? std::numeric_limits<T>::quiet_NaN() : x;
  } else if constexpr (is_complex<T>::value) {
    return T(canonical(x.real()), canonical(x.imag()));
  } else {
    return x;
  }
}

template <class T>
struct IsFloating : std::is_floating_point<T> {};
template <class R>
struct IsFloating<c10::complex<R>> : std::is_floating_point<R> {};
template <class T>
constexpr bool is_real_or_complex_float = IsFloating<T>::value;

// a + b
template <class T>
__device__ __forceinline__ T add(const T& a, const T& b) {
  return T(add(a.real(), b.real()), add(a.imag(), b.imag()));
}

// a * b + c, complex (c10::complex's product, with the contraction nvcc chose for it:
// re = fma(ar, br, -(ai * bi)), im = fma(ar, bi, ai * br); then + c).
template <class T>
__device__ __forceinline__ T mul_add(const T& a, const T& b, const T& c) {
  if constexpr (std::is_floating_point_v<T>) {
    return fma(a, b, c);
  } else {
    const auto re = fma(a.real(), b.real(), -mul(a.imag(), b.imag()));
    const auto im = fma(a.real(), b.imag(), mul(a.imag(), b.real()));
    return T(add(re, c.real()), add(im, c.imag()));
  }
}

template <class T>
__device__ __forceinline__ T mul(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>) {
    return mul(a, b);
  } else {
    return T(fma(a.real(), b.real(), -mul(a.imag(), b.imag())),
             fma(a.real(), b.imag(), mul(a.imag(), b.real())));
  }
}

}  // namespace pinned

// The combine of the look-back's folds and publications (see above). Default: Combine's own
// (the same bits at every site), canonical() the identity.
template <class Combine, class = void>
struct PinnedCombine {
  using state_t = typename Combine::state_t;
  static __device__ __forceinline__ state_t combine(const state_t& a, const state_t& b) {
    return Combine::combine(a, b);
  }
  static __device__ __forceinline__ state_t canonical(const state_t& s) { return s; }
};

template <class T>
struct PinnedCombine<SumCombine<T>, std::enable_if_t<pinned::is_real_or_complex_float<T>>> {
  using state_t = T;
  static __device__ __forceinline__ T combine(const T& a, const T& b) {
    if constexpr (std::is_floating_point_v<T>) {
      return pinned::add(a, b);
    } else {
      return pinned::add<T>(a, b);
    }
  }
  static __device__ __forceinline__ T canonical(const T& s) { return pinned::canonical(s); }
};

template <class T>
struct PinnedCombine<ProdCombine<T>, std::enable_if_t<pinned::is_real_or_complex_float<T>>> {
  using state_t = T;
  static __device__ __forceinline__ T combine(const T& a, const T& b) {
    return pinned::mul<T>(a, b);
  }
  static __device__ __forceinline__ T canonical(const T& s) { return pinned::canonical(s); }
};

// AffineCombine::combine(f, g) = (g.a * f.a, g.a * f.b + g.b).
template <class T>
struct PinnedCombine<AffineCombine<T>, std::enable_if_t<pinned::is_real_or_complex_float<T>>> {
  using state_t = AffineState<T>;
  static __device__ __forceinline__ state_t combine(const state_t& f, const state_t& g) {
    return {pinned::mul<T>(g.a, f.a), pinned::mul_add<T>(g.a, f.b, g.b)};
  }
  static __device__ __forceinline__ state_t canonical(const state_t& s) {
    return {pinned::canonical(s.a), pinned::canonical(s.b)};
  }
};

// log_add_exp (ops/combine.h) for real types, its last sum pinned: mx + log1p(exp(mn - mx)).
template <class T>
struct PinnedCombine<LogAddExpCombine<T>, std::enable_if_t<std::is_floating_point_v<T>>> {
  using state_t = T;
  static __device__ __forceinline__ T combine(T a, T b) {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    const T mn = a < b ? a : b;
    const T mx = a < b ? b : a;
    if (mn == mx && !(mn - mn == T(0))) return mn;  // two equal infinities
    return pinned::add(mx, lse_log1p(lse_exp(mn - mx)));
  }
  static __device__ __forceinline__ T canonical(T s) { return pinned::canonical(s); }
};

// Segmented scans' monoid over any combine C (ops/segmented.h).
template <class C, class Head>
struct PinnedCombine<SegmentedCombine<C, Head>> {
  using state_t = SegState<C, Head>;
  static __device__ __forceinline__ state_t combine(const state_t& f, const state_t& g) {
    if (g.head) return g;
    return {PinnedCombine<C>::combine(f.s, g.s), f.head};
  }
  static __device__ __forceinline__ state_t canonical(const state_t& s) {
    return {PinnedCombine<C>::canonical(s.s), s.head};
  }
};

// combine(a, b) as every look-back site must compute a published inclusive prefix.
template <class Combine>
__device__ __forceinline__ typename Combine::state_t lookback_combine(
    const typename Combine::state_t& a, const typename Combine::state_t& b) {
  using P = PinnedCombine<Combine>;
  return P::canonical(P::combine(a, b));
}

}  // namespace scanops::cuda
