// scanops: combine operations of the scan engine.
//
// A combine operation is a monoid over a `state_t`:
//   identity()        the neutral element (the value of an empty / exclusive prefix)
//   combine(a, b)     a is EARLIER in scan order than b (so non-commutative ops such as
//                     affine maps h -> a*h + x work: combine(f, g) = "apply f, then g")
//   lift(v)           an input element as a state
//   out(s)            the value written for a state
// Everything is HOST_DEVICE so the CPU and CUDA back ends instantiate the same code.
// This header must stay free of ATen/torch includes: it is included by .cu kernels.
#pragma once

#include <c10/util/complex.h>  // c10::complex (host and device), no ATen

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SCANOPS_HD __host__ __device__ __forceinline__
// A call, not inlined: large bodies (complex log/exp) inlined into every unrolled step of the
// CUDA kernels made a single .cu file take over ten minutes to compile.
#define SCANOPS_HD_CALL __host__ __device__ __noinline__
#else
#define SCANOPS_HD inline
#define SCANOPS_HD_CALL inline
#endif

namespace scanops {

// The catalogue of combine operations the engine knows. A new one adds an enumerator here and
// a struct below; ops/dispatch.h maps kinds and dtypes onto the structs for every back end.
enum class CombineKind : int { Sum = 0, Prod = 1, Affine = 2, LogAddExp = 3, Max = 4, Min = 5 };

// Besides identity/combine/lift every combine operation has
//   arity             how many input tensors an element is lifted from (1, or 2 for Affine,
//                     which also has lift_scaled: the input multiplied by its coefficient)
//   indexed           true: lift(v, pos) also takes the element's position along the scan dim
//                     (in the original order), and index(s) is written to a second, int64
//                     output (cummax / cummin); indexed combines also name narrow_t, the
//                     same operation keeping the position in 32 bits (lines < 2^31 long)
//   costly            true: a combine costs far more than a load (an exp and a log1p); back
//                     ends evaluate as few as they can (no second pass over a block)
//   selects           true: combine returns one of its operands (rounds nothing), so the
//                     result is the same bits under any association
//   value(s)          the scalar written to the output for a state (cast to out_t)
//   start(v)          the state a line starts from when it is given an initial value v (the
//                     op's `initial`, of the result dtype): the line's scan is then
//                     start(v), x[0], x[1], ... in scan order instead of identity(), x[0], ...
//                     (an exclusive scan writes value(start(v)) = v at its first position)
// and optionally `runs` (with run_t, run_begin, run_push, run_value): consecutive elements
// walked by one thread without a chain of combines (LogAddExpCombine).
// Back ends written against this interface need nothing else from an op.

template <typename T>
struct is_complex : std::false_type {};
template <typename T>
struct is_complex<c10::complex<T>> : std::true_type {};

// NaN test that is constant false for types without NaN (integers, bool).
template <typename T>
SCANOPS_HD bool is_nan(T x) {
  if constexpr (std::is_integral_v<T>) {
    return false;
  } else if constexpr (std::is_floating_point_v<T>) {
    return x != x;
  } else {  // c10::Half / BFloat16, tested as float (their operators are ambiguous in CUDA)
    const float f = static_cast<float>(x);
    return f != f;
  }
}

// Integer accumulation wraps modulo 2^64 (two's complement), as PyTorch's kernels do in
// practice, without signed-overflow undefined behaviour.
template <typename T>
SCANOPS_HD T wrap_add(T a, T b) { return a + b; }
template <typename T>
SCANOPS_HD T wrap_mul(T a, T b) { return a * b; }
template <>
SCANOPS_HD int64_t wrap_add<int64_t>(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
template <>
SCANOPS_HD int64_t wrap_mul<int64_t>(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

template <typename acc_t>
struct SumCombine {
  using state_t = acc_t;
  static SCANOPS_HD state_t identity() { return state_t(0); }
  static constexpr int arity = 1;
  static constexpr bool indexed = false;
  static constexpr bool costly = false;
  static constexpr bool selects = false;
  static SCANOPS_HD state_t combine(state_t a, state_t b) { return wrap_add(a, b); }
  template <typename in_t>
  static SCANOPS_HD state_t lift(in_t v) { return static_cast<state_t>(v); }
  template <typename out_t>
  static SCANOPS_HD state_t start(out_t v) { return static_cast<state_t>(v); }
  static SCANOPS_HD acc_t value(state_t s) { return s; }
};

template <typename acc_t>
struct ProdCombine {
  using state_t = acc_t;
  static SCANOPS_HD state_t identity() { return state_t(1); }
  static constexpr int arity = 1;
  static constexpr bool indexed = false;
  static constexpr bool costly = false;
  static constexpr bool selects = false;
  static SCANOPS_HD state_t combine(state_t a, state_t b) { return wrap_mul(a, b); }
  template <typename in_t>
  static SCANOPS_HD state_t lift(in_t v) { return static_cast<state_t>(v); }
  template <typename out_t>
  static SCANOPS_HD state_t start(out_t v) { return static_cast<state_t>(v); }
  static SCANOPS_HD acc_t value(state_t s) { return s; }
};

// First-order linear recurrence h[t] = a[t] * h[t-1] + x[t], h[-1] = 0, as a scan over
// affine maps h -> A*h + B. combine(f, g) = "f, then g" = (g.A*f.A, g.A*f.B + g.B): associative,
// not commutative. The output is the B of the prefix map (the map applied to h = 0).
// Element lift takes two inputs: the coefficient a[t] and the input x[t].
template <typename acc_t>
struct AffineState {
  acc_t a;
  acc_t b;
};

template <typename acc_t>
struct AffineCombine {
  using state_t = AffineState<acc_t>;
  static constexpr int arity = 2;
  static constexpr bool indexed = false;
  static constexpr bool costly = false;
  static constexpr bool selects = false;
  static SCANOPS_HD state_t identity() { return {acc_t(1), acc_t(0)}; }
  static SCANOPS_HD state_t combine(state_t f, state_t g) {
    return {g.a * f.a, g.a * f.b + g.b};
  }
  template <typename in_t>
  static SCANOPS_HD state_t lift(in_t a, in_t x) {
    return {static_cast<acc_t>(a), static_cast<acc_t>(x)};
  }
  // The element of the recurrence h[t] = a[t] * (h[t-1] + x[t]) (input scaled by its own
  // coefficient: the backward passes' lam = g + linrec(a, a * g; exclusive) in one pass).
  template <typename in_t>
  static SCANOPS_HD state_t lift_scaled(in_t a, in_t x) {
    return {static_cast<acc_t>(a), static_cast<acc_t>(a) * static_cast<acc_t>(x)};
  }
  // h[-1] = v: the constant map h -> v (its A, 1 or 0, is never read: the line's first map is
  // applied to h = 0 only through B; 1 keeps combine(start(v), g).a = g.a).
  template <typename out_t>
  static SCANOPS_HD state_t start(out_t v) { return {acc_t(1), static_cast<acc_t>(v)}; }
  static SCANOPS_HD acc_t value(state_t s) { return s.b; }
};

// log(exp(a) + exp(b)), stable for large magnitudes, as torch's logcumsumexp computes it:
// max + log1p(exp(min - max)); two equal infinities give that infinity (an all -inf prefix
// stays -inf, not NaN); NaN propagates. Complex values order by their real part (torch's rule).
SCANOPS_HD float lse_exp(float x) { return ::expf(x); }
SCANOPS_HD double lse_exp(double x) { return ::exp(x); }
SCANOPS_HD float lse_log1p(float x) { return ::log1pf(x); }
SCANOPS_HD double lse_log1p(double x) { return ::log1p(x); }

template <typename T>
SCANOPS_HD_CALL T log_add_exp_complex(T a, T b) {
  using R = typename T::value_type;
  if (is_nan(b.real()) || is_nan(b.imag())) return b;
  if (is_nan(a.real()) || is_nan(a.imag())) return a;
  const bool a_min = a.real() < b.real();
  const T mn = a_min ? a : b;
  const T mx = a_min ? b : a;
  const R r = mn.real();
  if (!(r - r == R(0)) && r == mx.real()) {  // both real parts the same infinity
    if (r < R(0)) return mn;
    return c10_complex_math::log(c10_complex_math::exp(mn) + c10_complex_math::exp(mx));
  }
  return c10_complex_math::log1p(c10_complex_math::exp(mn - mx)) + mx;
}

template <typename T>
SCANOPS_HD T log_add_exp(T a, T b) {
  if constexpr (is_complex<T>::value) {
    return log_add_exp_complex(a, b);
  } else {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    const T mn = a < b ? a : b;
    const T mx = a < b ? b : a;
    if (mn == mx && !(mn - mn == T(0))) return mn;  // two equal infinities
    return mx + lse_log1p(lse_exp(mn - mx));
  }
}

template <typename acc_t>
struct LogAddExpCombine {
  using state_t = acc_t;
  static constexpr int arity = 1;
  static constexpr bool indexed = false;
  static constexpr bool costly = true;
  static constexpr bool selects = false;
  static SCANOPS_HD state_t identity() {
    if constexpr (is_complex<acc_t>::value) {
      using R = typename acc_t::value_type;
      return acc_t(-std::numeric_limits<R>::infinity(), R(0));
    } else {
      return -std::numeric_limits<acc_t>::infinity();
    }
  }
  static SCANOPS_HD state_t combine(state_t a, state_t b) { return log_add_exp(a, b); }
  template <typename in_t>
  static SCANOPS_HD state_t lift(in_t v) { return static_cast<state_t>(v); }
  template <typename out_t>
  static SCANOPS_HD state_t start(out_t v) { return static_cast<state_t>(v); }
  static SCANOPS_HD acc_t value(state_t s) { return s; }

  // Runs (real types only, `runs`): a back end may walk consecutive elements of one thread
  // from a state s without a chain of combines, in the "online" form of the CPU kernel
  // (scan_cpu_lse_avx2.h): run_t (m, t), m the running maximum and t the sum of exp(x - m)
  // over the run less the maximum's own 1, so the state is m + log1p(t). An element costs a
  // max and an FMA on the chain from one element to the next; its exp and the log1p of an
  // output are off it (combine puts an exp and a log1p on it). The bits differ from those of
  // combine's chain (fixed for a fixed walk: reproducible); float32 errors against a float64
  // reference measured 2.5e-7 - 1.2e-6 relative on the H100 (docs/design.md), within
  // test/cuda_exact_check.py's bound. (The CUDA back end walks float32 runs with its own
  // form, ops/cuda/common.cuh's Walk<LogAddExpCombine<float>>: the same (m, t) with the
  // special-function units' ex2 / lg2; float64 walks use these.) Special values as combine: equal
  // operands (infinities included) add 1 to t (an all -inf run stays -inf), NaN makes t NaN.
  static constexpr bool runs = !is_complex<acc_t>::value;
  struct run_t {
    acc_t m;
    acc_t t;
  };
  static SCANOPS_HD run_t run_begin(state_t s) { return {s, acc_t(0)}; }
  static SCANOPS_HD void run_push(run_t& r, state_t x) {
    const acc_t d = x - r.m;
    const acc_t a = x == r.m ? acc_t(1) : lse_exp(-(d < acc_t(0) ? -d : d));  // exp(-|x - m|)
    if (d > acc_t(0)) {  // a new maximum: t' = (1 + t) a
      r.t = r.t * a + a;
      r.m = x;
    } else {
      r.t = r.t + a;
    }
  }
  static SCANOPS_HD state_t run_value(const run_t& r) { return r.m + lse_log1p(r.t); }
};

// cummax / cummin: the running extremum and the position it came from. combine(a, b) (a earlier
// in scan order) takes b when b is NaN, or when neither is NaN and b >= a (max) / b <= a (min):
// the latest of equal values wins and the latest NaN wins, once a NaN is seen it stays, exactly
// torch.cummax/cummin's sequential rule. That is the argmax of (rank, scan order) with NaN the
// highest rank, hence associative. index == kIdentity (-1) marks the identity (the exclusive
// value at the first position: the lowest value / -inf for max, the highest / +inf for min); it
// is neutral on both sides whatever the values. index == kInitial (-2) marks a line's initial
// value (start(v)): an ordinary value that comes before every element, written with index -1
// (index()). Every other index is >= 0.
//
// The position is kept as idx_t: int64_t in general; a back end may scan lines shorter than
// 2^31 with `narrow_t` (the same combine with an int32_t position: an 8-byte state for
// 4-byte values, twice the items per register budget of the int64 one). index() widens it.
template <typename val_t, typename idx_t = int64_t>
struct IndexedState {
  val_t v;
  idx_t i;
};

template <typename val_t>
SCANOPS_HD val_t lowest_value() {
  if constexpr (std::numeric_limits<val_t>::has_infinity) {
    return -std::numeric_limits<val_t>::infinity();
  } else {
    return std::numeric_limits<val_t>::lowest();
  }
}
template <typename val_t>
SCANOPS_HD val_t highest_value() {
  if constexpr (std::numeric_limits<val_t>::has_infinity) {
    return std::numeric_limits<val_t>::infinity();
  } else {
    return std::numeric_limits<val_t>::max();
  }
}

template <typename val_t, bool kMax, typename idx_t = int64_t>
struct ExtremumCombine {
  using state_t = IndexedState<val_t, idx_t>;
  using narrow_t = ExtremumCombine<val_t, kMax, int32_t>;  // for lines shorter than 2^31
  static constexpr int arity = 1;
  static constexpr bool indexed = true;
  static constexpr bool costly = false;
  static constexpr bool selects = true;
  static constexpr idx_t kIdentity = -1;
  static constexpr idx_t kInitial = -2;
  static SCANOPS_HD state_t identity() {
    return {kMax ? lowest_value<val_t>() : highest_value<val_t>(), kIdentity};
  }
  // Half types compare as float (exact); the state keeps the value's own bits.
  using cmp_t = std::conditional_t<std::is_arithmetic_v<val_t>, val_t, float>;
  static SCANOPS_HD bool wins(val_t later_v, val_t earlier_v) {
    const cmp_t later = static_cast<cmp_t>(later_v);
    const cmp_t earlier = static_cast<cmp_t>(earlier_v);
    return is_nan(later) || (!is_nan(earlier) && (kMax ? later >= earlier : later <= earlier));
  }
  static SCANOPS_HD state_t combine(const state_t& a, const state_t& b) {
    return (b.i != kIdentity && (a.i == kIdentity || wins(b.v, a.v))) ? b : a;
  }
  template <typename in_t>
  static SCANOPS_HD state_t lift(in_t v, int64_t pos) {
    return {static_cast<val_t>(v), static_cast<idx_t>(pos)};
  }
  template <typename out_t>
  static SCANOPS_HD state_t start(out_t v) { return {static_cast<val_t>(v), kInitial}; }
  static SCANOPS_HD val_t value(const state_t& s) { return s.v; }
  static SCANOPS_HD int64_t index(const state_t& s) {
    return s.i < 0 ? int64_t(-1) : static_cast<int64_t>(s.i);
  }
};
template <typename val_t>
using MaxCombine = ExtremumCombine<val_t, true>;
template <typename val_t>
using MinCombine = ExtremumCombine<val_t, false>;

// Direction and inclusivity are run-time flags of every kernel (they do not multiply
// template instantiations). `mask` (optional, bool, same canonical layout as the input)
// is the element transform: a masked-off element contributes identity().
struct ScanFlags {
  bool exclusive = false;
  bool reverse = false;
};

}  // namespace scanops
