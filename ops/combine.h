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

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SCANOPS_HD __host__ __device__ __forceinline__
#else
#define SCANOPS_HD inline
#endif

namespace scanops {

// The catalogue of combine operations the engine knows. Ops that arrive later
// (cummax/cummin with index, logcumsumexp, affine pairs for linear recurrences)
// add an enumerator here and a struct below; back ends switch on it in one place.
enum class CombineKind : int { Sum = 0, Prod = 1, Affine = 2 };

// Besides identity/combine/lift every combine operation has
//   arity             how many input tensors an element is lifted from (1, or 2 for Affine)
//   value(s)          the scalar written to the output for a state (cast to out_t)
// Back ends written against this interface need nothing else from an op.

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
  static SCANOPS_HD state_t combine(state_t a, state_t b) { return wrap_add(a, b); }
  template <typename in_t>
  static SCANOPS_HD state_t lift(in_t v) { return static_cast<state_t>(v); }
  static SCANOPS_HD acc_t value(state_t s) { return s; }
};

template <typename acc_t>
struct ProdCombine {
  using state_t = acc_t;
  static SCANOPS_HD state_t identity() { return state_t(1); }
  static constexpr int arity = 1;
  static SCANOPS_HD state_t combine(state_t a, state_t b) { return wrap_mul(a, b); }
  template <typename in_t>
  static SCANOPS_HD state_t lift(in_t v) { return static_cast<state_t>(v); }
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
  static SCANOPS_HD state_t identity() { return {acc_t(1), acc_t(0)}; }
  static SCANOPS_HD state_t combine(state_t f, state_t g) {
    return {g.a * f.a, g.a * f.b + g.b};
  }
  template <typename in_t>
  static SCANOPS_HD state_t lift(in_t a, in_t x) {
    return {static_cast<acc_t>(a), static_cast<acc_t>(x)};
  }
  static SCANOPS_HD acc_t value(state_t s) { return s.b; }
};

// Direction and inclusivity are run-time flags of every kernel (they do not multiply
// template instantiations). `mask` (optional, bool, same canonical layout as the input)
// is the element transform: a masked-off element contributes identity().
struct ScanFlags {
  bool exclusive = false;
  bool reverse = false;
};

}  // namespace scanops
