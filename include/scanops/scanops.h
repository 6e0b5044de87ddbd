// scanops: scan (prefix) operators for PyTorch — the public C++ API.
//
// Every function calls the op through the PyTorch dispatcher (`scanops::<op>` in
// TORCH_LIBRARY(scanops, ...)), exactly as `torch.ops.scanops.<op>` does from Python, so C++
// callers get the same device dispatch (CPU, CUDA, Meta), autograd and tracing behaviour.
//
// Link the CMake target `scanops::scanops` (find_package(scanops)). It carries
// `-Wl,--no-as-needed`, so the library's op registrations are present even in a program
// that only loads a TorchScript file and calls no function declared here.
//
// Semantics, for a line x[0..n-1] taken along `dim` (negative dims count from the end):
//   inclusive (default)   y[i] = x[0] (+) ... (+) x[i]
//   exclusive             y[i] = x[0] (+) ... (+) x[i-1];  y[0] = identity (0 sum, 1 product)
//   reverse               runs from the end: y[i] = x[i] (+) ... (+) x[n-1]
//                         (exclusive + reverse: x[i+1] (+) ... (+) x[n-1])
// Result dtype as torch.cumsum / torch.cumprod: `dtype` if given (the input is converted to
// it before the scan), else int64 for integral and bool inputs, else the input's dtype.
// float16 / bfloat16 / float32 accumulate in float32 on CUDA (float64 for cumprod) and in
// float64 on the CPU;
// integers accumulate in int64 (wrapping).
// Initial values (`initial`, every op): each line starts from a given value instead of the
// identity, taken in before its first element in scan order (for reverse scans: after the end
// of the line). cumsum: y[i] = initial + x[0] + ... + x[i]; cumprod multiplies it in;
// logcumsumexp log-adds it; linear_recurrence takes it as h[-1]; cummax / cummin start their
// running extremum from it (positions still holding it get index -1). Exclusive scans return
// it at the first position. Continuing a scan: the final state of a line is the last value of
// an inclusive scan (the first of a reverse one); pass it as the next chunk's `initial`.
// Differentiable in `initial` too.
// Segments (`reset`, every op): a bool tensor broadcastable to the input; true at position i
// along dim starts a new segment there (positions in the line's forward order, whatever the
// direction). Each segment is scanned as a line of its own: it restarts from the identity, an
// exclusive scan gives its first element (in scan order) the identity, a reverse scan runs it
// from its end to its start; `initial` applies to the line's first segment in scan order;
// cummax / cummin indices stay positions along the whole line. The backward of a segmented
// scan is the segmented scan in the other direction. Jagged tensors (values and offsets):
// the segment_* functions at the end of this header.
// Supported dtypes (CPU and CUDA alike): float32, float64, float16, bfloat16, complex64,
// complex128, int8, int16, int32, int64, uint8, bool (per op below; complex accumulates in
// complex64 on CUDA and complex128 on the CPU, complex128 for products). The result is a new contiguous tensor of the input's shape;
// inputs may have any shape and strides (0-dim, empty, non-contiguous, expanded).
// Autograd: every op is differentiable (twice and more) in its floating inputs; backward
// formulas call scanops ops through the dispatcher. No op synchronises with the host, so
// all of them can be captured in CUDA graphs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <tuple>

namespace scanops {

// Flags shared by every scan. C++20 designated initialisers read well:
//   scanops::cumsum(x, 1, {.exclusive = true, .reverse = true});
struct ScanOptions {
  bool exclusive = false;
  bool reverse = false;
  std::optional<at::ScalarType> dtype = std::nullopt;  // result dtype; input converted first
  // The value each line starts from (every op; see "Initial values" above): of the result
  // dtype, self's shape without `dim` or broadcastable to it. Unset: the combine's identity.
  std::optional<at::Tensor> initial = std::nullopt;
  // Segments (every op; see "Segments" above): a bool tensor broadcastable to self's shape,
  // true where a new segment starts along `dim` (positions in the line's forward order); each
  // segment is scanned as a line of its own, `initial` applying to the line's first segment in
  // scan order. Unset: one segment per line.
  std::optional<at::Tensor> reset = std::nullopt;
};

// Cumulative sum along `dim`.
// Schema: cumsum(Tensor self, int dim, *, bool exclusive=False, bool reverse=False,
//                ScalarType? dtype=None, Tensor? initial=None, Tensor? reset=None) -> Tensor
// Gradient: cumsum(grad, dim, exclusive, !reverse).
at::Tensor cumsum(const at::Tensor& self, int64_t dim, const ScanOptions& options = {});

// Cumulative sum of `self * mask` along `dim`, without materialising the product. `mask` is a
// bool tensor broadcastable to self's shape, on self's device. Masked-off elements
// contribute exactly 0, even when they hold NaN or inf (cumsum(self * mask) would not).
// Gradient wrt self: cumsum(grad, dim, exclusive, !reverse) * mask.
// Schema: masked_cumsum(Tensor self, Tensor mask, int dim, *, bool exclusive=False,
//                       bool reverse=False, ScalarType? dtype=None,
//                       Tensor? initial=None, Tensor? reset=None) -> Tensor
at::Tensor masked_cumsum(const at::Tensor& self, const at::Tensor& mask, int64_t dim,
                         const ScanOptions& options = {});

// Cumulative product along `dim`. Gradient exact with zeros in the input, O(n), no host
// synchronisation.
// Schema: cumprod(Tensor self, int dim, *, bool exclusive=False, bool reverse=False,
//                 ScalarType? dtype=None, Tensor? initial=None, Tensor? reset=None) -> Tensor
at::Tensor cumprod(const at::Tensor& self, int64_t dim, const ScanOptions& options = {});

// First-order linear recurrence along `dim`: h[t] = a[t] * h[t-1] + x[t], h[-1] = 0 (or initial)
// (reverse: h[t] = a[t] * h[t+1] + x[t]); exclusive returns h[t-1] (0 first). `a` has x's
// dtype (float32, float64, float16, bfloat16) and broadcasts to x's shape; the result has
// x's shape and dtype. Differentiable in a and x (to any order); this is the scan over affine
// maps h -> a*h + x, and cumprod's backward uses it. `options.dtype` must be unset.
// Schema: linear_recurrence(Tensor a, Tensor x, int dim, *, bool exclusive=False,
//                           bool reverse=False, Tensor? initial=None, Tensor? reset=None) -> Tensor
at::Tensor linear_recurrence(const at::Tensor& a, const at::Tensor& x, int64_t dim,
                             const ScanOptions& options = {});

// Cumulative log-sum-exp along `dim`: y[i] = log(exp(x[0]) + ... + exp(x[i])), computed stably
// (max + log1p(exp(min - max)) per step, as torch.logcumsumexp); -inf is the identity, so an
// exclusive scan starts with -inf and an all -inf prefix gives -inf (not NaN). Floating and
// complex dtypes; the result has self's dtype (float16/bfloat16/float32 accumulate in float32
// on CUDA, float64 on the CPU). `options.dtype` must be unset.
// Gradient: numerically stable (torch's formula, on scanops' reverse scans); twice
// differentiable.
// Schema: logcumsumexp(Tensor self, int dim, *, bool exclusive=False, bool reverse=False,
//                      Tensor? initial=None, Tensor? reset=None) -> Tensor
at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim, const ScanOptions& options = {});

// Running maximum / minimum along `dim` and where it came from, as torch.cummax / cummin:
// values (self's dtype) and int64 indices (positions along dim in the original order, even
// for reverse scans). Of equal values the latest in scan order wins; NaN propagates and the
// index is that of the latest NaN (torch's rule). exclusive: position 0 (the last for reverse)
// holds the identity, -inf / the dtype's lowest value for cummax (+inf / highest for cummin),
// with index -1. Real and bool dtypes (complex numbers have no order). Gradient: the values'
// gradient goes to the selected elements (a deterministic segmented sum, no atomics).
// Schema: cummax(Tensor self, int dim, *, bool exclusive=False, bool reverse=False,
//                Tensor? initial=None, Tensor? reset=None) -> (Tensor values, Tensor indices)
//         (cummin likewise)
std::tuple<at::Tensor, at::Tensor> cummax(const at::Tensor& self, int64_t dim,
                                          const ScanOptions& options = {});
std::tuple<at::Tensor, at::Tensor> cummin(const at::Tensor& self, int64_t dim,
                                          const ScanOptions& options = {});

// ---- Jagged tensors: segments given by offsets ---------------------------------------------
// values (total, *features) scanned along dim 0 within each segment
// values[offsets[b]:offsets[b+1]] (the layout of torch.nested jagged tensors and FBGEMM).
// offsets: int64 or int32, 1-D, B + 1 entries, offsets[0] = 0, non-decreasing, offsets[B] =
// total (checked; on CUDA that reads three flags back: one host synchronisation); empty
// segments allowed. options.initial: (B, *features) or broadcastable to it, the result dtype:
// segment b starts from initial[b]. options.reset must be unset. cummax / cummin indices count
// from each segment's first row (-1: the identity or initial[b]). Differentiable in values,
// a / x and initial. Schemas: segment_<op>(Tensor values, Tensor offsets, *, bool
// exclusive=False, bool reverse=False[, ScalarType? dtype=None], Tensor? initial=None);
// segment_masked_cumsum(values, mask, offsets, ...), segment_linear_recurrence(a, x, offsets,
// ...).
at::Tensor segment_cumsum(const at::Tensor& values, const at::Tensor& offsets,
                          const ScanOptions& options = {});
at::Tensor segment_masked_cumsum(const at::Tensor& values, const at::Tensor& mask,
                                 const at::Tensor& offsets, const ScanOptions& options = {});
at::Tensor segment_cumprod(const at::Tensor& values, const at::Tensor& offsets,
                           const ScanOptions& options = {});
at::Tensor segment_linear_recurrence(const at::Tensor& a, const at::Tensor& x,
                                     const at::Tensor& offsets, const ScanOptions& options = {});
at::Tensor segment_logcumsumexp(const at::Tensor& values, const at::Tensor& offsets,
                                const ScanOptions& options = {});
std::tuple<at::Tensor, at::Tensor> segment_cummax(const at::Tensor& values,
                                                  const at::Tensor& offsets,
                                                  const ScanOptions& options = {});
std::tuple<at::Tensor, at::Tensor> segment_cummin(const at::Tensor& values,
                                                  const at::Tensor& offsets,
                                                  const ScanOptions& options = {});

// The library's version, "MAJOR.MINOR.PATCH".
std::string version();

}  // namespace scanops
