// scanops: the combine of logcumsumexp's backward in one scan (internal op
// _logcumsumexp_backward). Free of ATen and CUDA, as ops/combine.h (kept apart from it so
// that the forward kernels, which all include combine.h, do not depend on it).
//
// logcumsumexp(x; e, r) = y. For every element j, dx[j] = sum over the outputs k that include
// x[j] of g[k] exp(x[j] - y[k]) = exp(x[j]) S[j], S[j] = sum of g[k] exp(-y[k]): a sum over
// the outputs after j in scan order (at or after: inclusive), i.e. a scan in the other
// direction. S is held as a pair (Y, Q) meaning S = Q exp(-Y): Y a reference, Q the sum of
// g[k] exp(Y - y[k]). The combine keeps the smaller reference, so every factor is exp of a
// difference <= 0 (no overflow), and computes each factor from the two references directly:
// no product of factors is ever formed (the earlier fused backward, a linear recurrence over
// the factors exp(y[k-1] - y[k]), multiplied them along the line, and needed float64
// accumulation against the bias of float32 product trees). The output is
// dx[j] = exp(x[j] - Y[j]) Q[j] (LseGradSink, ops/cuda/lse_grad.cu); the reference at j is y
// itself (inclusive) or the next output (exclusive), up to rounding (the minimum is taken).
//
// Special values, as the composite formula's (registration/autograd.cpp, the rule written
// above logcumsumexp_grad):
// - references are y itself, infinities included: equal references (two infinities: a +inf
//   input and everything after it, an all -inf prefix) combine with the factor 1, where the
//   composite's exp(inf - inf) would be NaN and reach every earlier position; a NaN reference
//   makes the factor NaN. The output's factor exp(x - Y) is NaN where torch's is (a +inf
//   input itself, an all -inf prefix);
// - identity() is (+inf, 0), neutral on both sides (a +inf reference included: factor 1
//   times 0). An element whose sum is empty (an exclusive scan's last in scan order, reaching
//   no output) holds it, and the sink writes exactly 0 there, whatever x holds, found by its
//   position (a reached element can hold (+inf, 0) too: a +inf output and gradients summing
//   to 0);
// - a NaN (in g, or a NaN output y) makes Q NaN at that element and at every one before it
//   in position (0 * NaN is NaN): the rule's NaN propagation.
#pragma once

#include <limits>

#include "ops/combine.h"  // SCANOPS_HD, lse_exp

namespace scanops {

template <typename acc_t>
struct LogScaledSumState {
  acc_t y;  // the reference
  acc_t q;  // the sum of g exp(y - y_k)
};

template <typename acc_t>
struct LogScaledSumCombine {
  using state_t = LogScaledSumState<acc_t>;
  static constexpr int arity = 2;  // (y, g): lift(a = y, x = g)
  static constexpr bool indexed = false;
  static constexpr bool costly = true;
  static constexpr bool selects = false;
  static SCANOPS_HD state_t identity() { return {std::numeric_limits<acc_t>::infinity(), acc_t(0)}; }
  // The sum of both, on the smaller reference: the other's Q scaled by exp(-|f.y - g.y|).
  // Equal references (two identities included) add the Q's (factor 1). A NaN reference makes
  // the factor NaN, and the result's Q NaN.
  static SCANOPS_HD state_t combine(const state_t& f, const state_t& g) {
    const acc_t d = f.y == g.y ? acc_t(0) : f.y - g.y;
    const acc_t e = lse_exp(d < acc_t(0) ? d : -d);
    if (d >= acc_t(0)) return {g.y, g.q + e * f.q};
    return {f.y, f.q + e * g.q};
  }
  template <typename in_t>
  static SCANOPS_HD state_t lift(in_t y, in_t g) {
    return {static_cast<acc_t>(y), static_cast<acc_t>(g)};
  }
  template <typename in_t>
  static SCANOPS_HD state_t lift_scaled(in_t y, in_t g) {  // (no scaled form: as lift)
    return lift(y, g);
  }
  // (no initial states: the op takes none; a sum q at reference 0)
  template <typename out_t>
  static SCANOPS_HD state_t start(out_t v) { return {acc_t(0), static_cast<acc_t>(v)}; }
  static SCANOPS_HD acc_t value(const state_t& s) { return s.q; }
};

}  // namespace scanops
