// scanops: a scan from an initial value as the scan of the line with that value prepended.
//
// A scan that starts from v is the scan of the line with v prepended as its first element in
// scan order (Combine::start(v) is the lift of an element v, with coefficient 1 and mask
// true):
//   inclusive: scan(v, x[0], ..., x[n-1]) less its first position
//   exclusive: the inclusive scan of (v, x[0], ..., x[n-2]) (x[n-1] reaches no output)
// (reverse: v appended, the line read from its end; cummax / cummin: positions shifted back,
// v's own written -1). Two users: the engine, for a back end without BackendCaps::line_state
// (scan_engine.cpp, run_prepended), and autograd, where a gradient is wanted (the op without
// `initial` on the joined line, so every backward formula serves `initial`:
// registration/autograd.cpp). ATen ops only, SymInt-aware (traced under torch.compile).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/WrapDimMinimal.h>

#include <vector>

namespace scanops {

struct Prepended {
  int64_t dim = 0;                    // the scan dim of the joined operands
  bool scalar = false;                // self was 0-d (viewed as one element along dim 0)
  bool reverse = false, exclusive = false;
  c10::SymInt n;                      // the line length of self
  std::vector<c10::SymInt> sizes;     // self's shape (0-d: (1,))

  // `self` viewed with a dim to scan (0-d: one element along dim 0), and the plan for it.
  static Prepended plan(at::Tensor& self, int64_t dim, bool exclusive, bool reverse) {
    Prepended p;
    p.scalar = self.dim() == 0;
    if (p.scalar) self = self.unsqueeze(0);
    p.dim = c10::maybe_wrap_dim(dim, self.dim());
    p.n = self.sym_size(p.dim);
    p.reverse = reverse;
    p.exclusive = exclusive;
    p.sizes.assign(self.sym_sizes().begin(), self.sym_sizes().end());
    return p;
  }
  // Along dim: `head` (one position) first in scan order before `body` (an operand
  // broadcastable to self's shape, expanded to it), whose last position in scan order is
  // dropped for exclusive scans.
  at::Tensor join(const at::Tensor& head, const at::Tensor& body) const {
    at::Tensor b = body.expand_symint(sizes);
    if (exclusive) b = reverse ? b.narrow_symint(dim, 1, n - 1) : b.narrow_symint(dim, 0, n - 1);
    return reverse ? at::cat({b, head}, dim) : at::cat({head, b}, dim);
  }
  // v (broadcastable to self's shape without dim) as the head: one position along dim.
  at::Tensor head(const at::Tensor& v, at::ScalarType dtype) const {
    std::vector<c10::SymInt> line;
    for (int64_t k = 0; k < static_cast<int64_t>(sizes.size()); ++k) {
      if (k != dim) line.push_back(sizes[k]);
    }
    const at::Tensor t = v.scalar_type() == dtype ? v : v.to(dtype);
    return t.expand_symint(line).unsqueeze(dim);
  }
  // A head of ones (the mask's true, the recurrence's coefficient: its value is never read).
  at::Tensor ones_head(const at::TensorOptions& o) const {
    std::vector<c10::SymInt> shape = sizes;
    shape[dim] = 1;
    return at::ones_symint(shape, o);
  }
  // The op's output from the inclusive scan of the joined operands.
  at::Tensor take(const at::Tensor& y) const {
    at::Tensor out = (exclusive || reverse) ? y.narrow_symint(dim, 0, n) : y.narrow_symint(dim, 1, n);
    return scalar ? out.squeeze(0) : out;
  }
  // cummax / cummin: positions in the joined line back to positions in self, -1 for v.
  at::Tensor take_indices(const at::Tensor& idx) const {
    at::Tensor pos = (exclusive || reverse) ? idx.narrow_symint(dim, 0, n) : idx.narrow_symint(dim, 1, n);
    at::Tensor out;
    if (!reverse) {
      out = at::clamp_min(pos - 1, -1);  // v at 0, x[j] at j + 1; -1 (none) stays -1
    } else if (!exclusive) {
      out = at::where(pos == n, at::full_like(pos, -1), pos);  // (x[0], ..., x[n-1], v)
    } else {
      out = at::where(pos == n - 1, at::full_like(pos, -1), pos + 1);  // (x[1], ..., x[n-1], v)
    }
    return scalar ? out.squeeze(0) : out;
  }
};

}  // namespace scanops
