// scanops: the segmented scan, shared by the CPU and CUDA back ends (host and device code,
// free of ATen like ops/combine.h).
//
// A segmented scan restarts at the positions a `reset` companion marks (ScanProblem's
// Segments): reset[o, l, i] true starts a new segment at position l of line (o, i), in the
// line's forward order; the segments are the same whatever the scan's direction. In scan
// order (k = 0 .. length - 1, position l = k, or length - 1 - k for a reverse scan) the element
// at k is a segment's first ("head") when
//   forward:  l > 0 and reset[l]
//   reverse:  l < length - 1 and reset[l + 1]   (the last element of a segment, in memory)
// The line's first element in scan order is a head too when the line has no initial value
// (it then starts from the element itself, not from identity() combined with it); with one it
// is combined into start(initial) as in an unsegmented scan: `initial` belongs to the line's
// first segment in scan order.
//
// Walk (SegmentedArgs::step, a position at a time): a thread scans consecutive scan
// positions of one line from a running state:
//   inclusive  head: r = lift(x)          else r = combine(r, lift(x));  write value(r)
//   exclusive  head: write identity, r = lift(x)    else write value(r), r = combine(r, lift(x))
// so every segment gets exactly the values (and bits) a line of its own would get from the same
// walk. Pieces of a line walked by different threads meet through SegmentedCombine, the
// monoid of (state, whether a head was seen): a piece's total is the fold of its elements
// (head elements restart it), and a piece is walked again from the combine of the totals
// before it (its carry); combine(carry, piece) keeps the piece's own state where the piece
// holds a head, which the walk does by restarting at that head.
#pragma once

#include <cstdint>

#include "ops/combine.h"

namespace scanops {

// (Head: bool, or a 32-bit word where a kernel keeps states in registers: the CUDA column
// tiles, segmented.cuh's TileSegCombine.)
template <class C, class Head = bool>
struct SegState {
  typename C::state_t s;
  Head head;  // the fold holds a segment's first element: it does not depend on what precedes
};

// The monoid of segmented scans over any combine C (associative when C is).
template <class C, class Head = bool>
struct SegmentedCombine {
  using state_t = SegState<C, Head>;
  static SCANOPS_HD state_t identity() { return {C::identity(), false}; }
  static SCANOPS_HD state_t combine(const state_t& f, const state_t& g) {
    if (g.head) return g;
    return {C::combine(f.s, g.s), f.head};
  }
};

// Element (o, l, i) of a companion of the problem's shape read through strides in elements
// (dense: so = length * inner, sl = inner, si = 1; a broadcast dim has stride 0).
struct SegStrides {
  int64_t so = 0, sl = 0, si = 0;
  SCANOPS_HD int64_t at(int64_t o, int64_t l, int64_t i) const { return o * so + l * sl + i * si; }
};

// One segmented problem as raw pointers, for one (Combine, in_t, out_t): what a walk reads and
// writes. Canonical layout (ops/scan_engine.h): input, values and indices dense, element
// (o, l, i) at (o * length + l) * inner + i; mask, coeff and reset through their strides.
template <class C, class in_t, class out_t>
struct SegmentedArgs {
  using state_t = typename C::state_t;
  using seg_t = SegState<C>;
  const in_t* input = nullptr;
  const in_t* coeff = nullptr;  // arity-2 combines (Affine)
  SegStrides coeff_at;
  const bool* mask = nullptr;   // nullptr: none (Sum only)
  SegStrides mask_at;
  const bool* reset = nullptr;  // never nullptr in a segmented problem
  SegStrides reset_at;
  out_t* values = nullptr;
  int64_t* indices = nullptr;     // indexed combines only
  const out_t* initial = nullptr;  // outer * inner values, or nullptr
  int64_t outer = 1, length = 1, inner = 1;
  bool exclusive = false, reverse = false;

  SCANOPS_HD int64_t pos(int64_t k) const { return reverse ? length - 1 - k : k; }
  SCANOPS_HD int64_t dense(int64_t o, int64_t l, int64_t i) const {
    return (o * length + l) * inner + i;
  }
  SCANOPS_HD state_t lift(int64_t o, int64_t l, int64_t i) const {
    const int64_t e = dense(o, l, i);
    if constexpr (C::arity == 2) {
      return C::template lift<in_t>(coeff[coeff_at.at(o, l, i)], input[e]);
    } else if constexpr (C::indexed) {
      return C::template lift<in_t>(input[e], l);
    } else {
      if (mask != nullptr && !mask[mask_at.at(o, l, i)]) return C::identity();
      return C::template lift<in_t>(input[e]);
    }
  }
  // Whether scan position k (at memory position l) of line (o, i) starts a segment (the
  // line's first position: only when the line has no initial value).
  SCANOPS_HD bool head(int64_t o, int64_t k, int64_t l, int64_t i) const {
    if (k == 0) return initial == nullptr;
    return reverse ? reset[reset_at.at(o, l + 1, i)] : reset[reset_at.at(o, l, i)];
  }
  // The state line (o, i) starts from, before its first element in scan order.
  SCANOPS_HD seg_t line_start(int64_t o, int64_t i) const {
    if (initial != nullptr) return {C::template start<out_t>(initial[o * inner + i]), true};
    return {C::identity(), false};
  }
  SCANOPS_HD void write(int64_t o, int64_t l, int64_t i, const state_t& s) const {
    const int64_t e = dense(o, l, i);
    values[e] = static_cast<out_t>(C::value(s));
    if constexpr (C::indexed) indices[e] = C::index(s);
  }
  // Scan position k of line (o, i) taken into the running state r (the line's start, a
  // carry, or identity() with head false for a piece's total); kWrite: its value written.
  template <bool kWrite>
  SCANOPS_HD void step(int64_t o, int64_t k, int64_t i, seg_t& r) const {
    const int64_t l = pos(k);
    const state_t x = lift(o, l, i);
    if (head(o, k, l, i)) {
      if (kWrite && exclusive) write(o, l, i, C::identity());
      r.s = x;
      r.head = true;
    } else {
      if (kWrite && exclusive) write(o, l, i, r.s);
      r.s = C::combine(r.s, x);
    }
    if (kWrite && !exclusive) write(o, l, i, r.s);
  }
};

}  // namespace scanops
