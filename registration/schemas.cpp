// scanops: the op catalogue as users see it. Every schema lives here, in one block.
#include <torch/library.h>

// Every public op takes `initial` (keyword-only, default None): the value each line starts
// from (ops/scan_engine.h, LineState), and `reset` (keyword-only, last, default None): a bool
// tensor broadcastable to the input, true where a new segment starts along dim (Segments).
// Programs saved with older schemas (without them) load and run: the arguments are trailing
// and defaulted (test/data/).
TORCH_LIBRARY(scanops, m) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  m.def(
      "cumsum(Tensor self, int dim, *, bool exclusive=False, bool reverse=False, "
      "ScalarType? dtype=None, Tensor? initial=None, Tensor? reset=None) -> Tensor",
      tags);
  m.def(
      "masked_cumsum(Tensor self, Tensor mask, int dim, *, bool exclusive=False, "
      "bool reverse=False, ScalarType? dtype=None, Tensor? initial=None, Tensor? reset=None) -> Tensor",
      tags);
  m.def(
      "cumprod(Tensor self, int dim, *, bool exclusive=False, bool reverse=False, "
      "ScalarType? dtype=None, Tensor? initial=None, Tensor? reset=None) -> Tensor",
      tags);
  // h[t] = a[t] * h[t-1] + x[t], h[-1] = initial or 0 (exclusive: y[t] = h[t-1]).
  m.def(
      "linear_recurrence(Tensor a, Tensor x, int dim, *, bool exclusive=False, "
      "bool reverse=False, Tensor? initial=None, Tensor? reset=None) -> Tensor",
      tags);
  m.def(
      "logcumsumexp(Tensor self, int dim, *, bool exclusive=False, bool reverse=False, "
      "Tensor? initial=None, Tensor? reset=None) -> Tensor",
      tags);
  // indices: int64 positions along dim (original order) of the values; -1 where an exclusive
  // scan has seen no element yet, or where the value is still the line's initial value.
  m.def(
      "cummax(Tensor self, int dim, *, bool exclusive=False, bool reverse=False, "
      "Tensor? initial=None, Tensor? reset=None) -> "
      "(Tensor values, Tensor indices)",
      tags);
  m.def(
      "cummin(Tensor self, int dim, *, bool exclusive=False, bool reverse=False, "
      "Tensor? initial=None, Tensor? reset=None) -> "
      "(Tensor values, Tensor indices)",
      tags);
  // Jagged tensors (the offsets form of segments): values (total, *features) scanned along
  // dim 0 within each segment values[offsets[b]:offsets[b+1]]; offsets int64 or int32, B + 1
  // long, from 0 to total, non-decreasing; initial (optional) (B, *features) or broadcastable
  // to it, segment b starting from initial[b]. cummax / cummin indices count from the segment's
  // start. Composite ops (registration/segments.cpp) over the reset form.
  m.def(
      "segment_cumsum(Tensor values, Tensor offsets, *, bool exclusive=False, bool reverse=False, "
      "ScalarType? dtype=None, Tensor? initial=None) -> Tensor",
      tags);
  m.def(
      "segment_masked_cumsum(Tensor values, Tensor mask, Tensor offsets, *, bool exclusive=False, "
      "bool reverse=False, ScalarType? dtype=None, Tensor? initial=None) -> Tensor",
      tags);
  m.def(
      "segment_cumprod(Tensor values, Tensor offsets, *, bool exclusive=False, bool reverse=False, "
      "ScalarType? dtype=None, Tensor? initial=None) -> Tensor",
      tags);
  m.def(
      "segment_linear_recurrence(Tensor a, Tensor x, Tensor offsets, *, bool exclusive=False, "
      "bool reverse=False, Tensor? initial=None) -> Tensor",
      tags);
  m.def(
      "segment_logcumsumexp(Tensor values, Tensor offsets, *, bool exclusive=False, "
      "bool reverse=False, Tensor? initial=None) -> Tensor",
      tags);
  m.def(
      "segment_cummax(Tensor values, Tensor offsets, *, bool exclusive=False, bool reverse=False, "
      "Tensor? initial=None) -> (Tensor values, Tensor indices)",
      tags);
  m.def(
      "segment_cummin(Tensor values, Tensor offsets, *, bool exclusive=False, bool reverse=False, "
      "Tensor? initial=None) -> (Tensor values, Tensor indices)",
      tags);
  // Internal: offsets checked (errors name `op`) and returned as a new int64 tensor.
  m.def("_segment_offsets(Tensor offsets, SymInt total, str op) -> Tensor", tags);
  // Internal: the reset mask (bool (total), true at each nonempty segment's first row) of
  // offsets checked as _segment_offsets checks them.
  m.def("_segment_heads(Tensor offsets, SymInt total, str op) -> Tensor", tags);
  // Internal (the backward passes' fusions, no autograd of their own): the scan's output y
  // written as mul * (y + add); _linear_recurrence_fused with scale_x lifts (a[t], a[t] x[t]),
  // with shift_mul multiplies mul at the next scan position (1 at a line's last); wide_acc
  // accumulates float32 / half inputs in float64 on every back end (CUDA: float32 otherwise).
  m.def(
      "_cumsum_fused(Tensor self, int dim, *, bool exclusive, bool reverse, Tensor? add, "
      "Tensor? mul) -> Tensor",
      tags);
  m.def(
      "_linear_recurrence_fused(Tensor a, Tensor x, int dim, *, bool exclusive, bool reverse, "
      "bool scale_x, Tensor? add, Tensor? mul, bool shift_mul=False, bool wide_acc=False) -> Tensor",
      tags);
  // logcumsumexp's backward: dx for logcumsumexp(x; exclusive, reverse) = y and the incoming
  // gradient g (x, y, g of one shape and floating dtype), in one scan where the back end has
  // it (CUDA: float32), else the composite formula (registration/autograd.cpp).
  m.def(
      "_logcumsumexp_backward(Tensor x, Tensor y, Tensor g, int dim, *, bool exclusive, "
      "bool reverse) -> Tensor",
      tags);
  // The backward of an inclusive linear_recurrence(a, x; reverse) = h, in one scan: (dx, da)
  // = (lam, lam * h[t-1]), lam = g + linear_recurrence(a, a * g; exclusive, !reverse), h[-1]
  // = 0 (a of x's shape).
  m.def(
      "_linear_recurrence_backward(Tensor a, Tensor g, Tensor h, int dim, *, bool reverse) -> "
      "(Tensor, Tensor)",
      tags);
}
