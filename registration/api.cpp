// scanops: the public C++ API (include/scanops/scanops.h). Each function looks its op up in
// the dispatcher once and calls through it, so C++ gets what Python gets.
#include <ATen/core/dispatch/Dispatcher.h>

#include "scanops/scanops.h"

#ifndef SCANOPS_VERSION
#define SCANOPS_VERSION "0.0.0"
#endif

namespace scanops {

namespace {
template <typename Sig>
c10::TypedOperatorHandle<Sig> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}
using OptTensor = const std::optional<at::Tensor>&;
using ScanSig = at::Tensor(const at::Tensor&, int64_t, bool, bool, std::optional<at::ScalarType>,
                           OptTensor, OptTensor);
using MaskedSig = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool, bool,
                             std::optional<at::ScalarType>, OptTensor, OptTensor);
using IndexedSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t, bool, bool,
                                                      OptTensor, OptTensor);
void check_no_dtype(const char* op, const ScanOptions& o) {
  TORCH_CHECK(!o.dtype.has_value(), op,
              ": ScanOptions::dtype is not supported (the result has the input's dtype)");
}
}  // namespace

at::Tensor cumsum(const at::Tensor& self, int64_t dim, const ScanOptions& o) {
  static const auto op = find_op<ScanSig>("scanops::cumsum");
  return op.call(self, dim, o.exclusive, o.reverse, o.dtype, o.initial, o.reset);
}

at::Tensor masked_cumsum(const at::Tensor& self, const at::Tensor& mask, int64_t dim,
                         const ScanOptions& o) {
  static const auto op = find_op<MaskedSig>("scanops::masked_cumsum");
  return op.call(self, mask, dim, o.exclusive, o.reverse, o.dtype, o.initial, o.reset);
}

at::Tensor cumprod(const at::Tensor& self, int64_t dim, const ScanOptions& o) {
  static const auto op = find_op<ScanSig>("scanops::cumprod");
  return op.call(self, dim, o.exclusive, o.reverse, o.dtype, o.initial, o.reset);
}

at::Tensor linear_recurrence(const at::Tensor& a, const at::Tensor& x, int64_t dim,
                             const ScanOptions& o) {
  using Sig = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool, bool, OptTensor,
                         OptTensor);
  check_no_dtype("scanops.linear_recurrence", o);
  static const auto op = find_op<Sig>("scanops::linear_recurrence");
  return op.call(a, x, dim, o.exclusive, o.reverse, o.initial, o.reset);
}

at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim, const ScanOptions& o) {
  using Sig = at::Tensor(const at::Tensor&, int64_t, bool, bool, OptTensor, OptTensor);
  check_no_dtype("scanops.logcumsumexp", o);
  static const auto op = find_op<Sig>("scanops::logcumsumexp");
  return op.call(self, dim, o.exclusive, o.reverse, o.initial, o.reset);
}

std::tuple<at::Tensor, at::Tensor> cummax(const at::Tensor& self, int64_t dim,
                                          const ScanOptions& o) {
  check_no_dtype("scanops.cummax", o);
  static const auto op = find_op<IndexedSig>("scanops::cummax");
  return op.call(self, dim, o.exclusive, o.reverse, o.initial, o.reset);
}

std::tuple<at::Tensor, at::Tensor> cummin(const at::Tensor& self, int64_t dim,
                                          const ScanOptions& o) {
  check_no_dtype("scanops.cummin", o);
  static const auto op = find_op<IndexedSig>("scanops::cummin");
  return op.call(self, dim, o.exclusive, o.reverse, o.initial, o.reset);
}

namespace {
void check_no_reset(const char* op, const ScanOptions& o) {
  TORCH_CHECK(!o.reset.has_value(), op,
              ": ScanOptions::reset is not supported (the offsets give the segments)");
}
using SegSig = at::Tensor(const at::Tensor&, const at::Tensor&, bool, bool,
                          std::optional<at::ScalarType>, OptTensor);
using SegPlainSig = at::Tensor(const at::Tensor&, const at::Tensor&, bool, bool, OptTensor);
using SegIndexedSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                         bool, bool, OptTensor);
}  // namespace

at::Tensor segment_cumsum(const at::Tensor& values, const at::Tensor& offsets,
                          const ScanOptions& o) {
  check_no_reset("scanops.segment_cumsum", o);
  static const auto op = find_op<SegSig>("scanops::segment_cumsum");
  return op.call(values, offsets, o.exclusive, o.reverse, o.dtype, o.initial);
}
at::Tensor segment_masked_cumsum(const at::Tensor& values, const at::Tensor& mask,
                                 const at::Tensor& offsets, const ScanOptions& o) {
  using Sig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool, bool,
                         std::optional<at::ScalarType>, OptTensor);
  check_no_reset("scanops.segment_masked_cumsum", o);
  static const auto op = find_op<Sig>("scanops::segment_masked_cumsum");
  return op.call(values, mask, offsets, o.exclusive, o.reverse, o.dtype, o.initial);
}
at::Tensor segment_cumprod(const at::Tensor& values, const at::Tensor& offsets,
                           const ScanOptions& o) {
  check_no_reset("scanops.segment_cumprod", o);
  static const auto op = find_op<SegSig>("scanops::segment_cumprod");
  return op.call(values, offsets, o.exclusive, o.reverse, o.dtype, o.initial);
}
at::Tensor segment_linear_recurrence(const at::Tensor& a, const at::Tensor& x,
                                     const at::Tensor& offsets, const ScanOptions& o) {
  using Sig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool, bool,
                         OptTensor);
  check_no_dtype("scanops.segment_linear_recurrence", o);
  check_no_reset("scanops.segment_linear_recurrence", o);
  static const auto op = find_op<Sig>("scanops::segment_linear_recurrence");
  return op.call(a, x, offsets, o.exclusive, o.reverse, o.initial);
}
at::Tensor segment_logcumsumexp(const at::Tensor& values, const at::Tensor& offsets,
                                const ScanOptions& o) {
  check_no_dtype("scanops.segment_logcumsumexp", o);
  check_no_reset("scanops.segment_logcumsumexp", o);
  static const auto op = find_op<SegPlainSig>("scanops::segment_logcumsumexp");
  return op.call(values, offsets, o.exclusive, o.reverse, o.initial);
}
std::tuple<at::Tensor, at::Tensor> segment_cummax(const at::Tensor& values,
                                                  const at::Tensor& offsets,
                                                  const ScanOptions& o) {
  check_no_dtype("scanops.segment_cummax", o);
  check_no_reset("scanops.segment_cummax", o);
  static const auto op = find_op<SegIndexedSig>("scanops::segment_cummax");
  return op.call(values, offsets, o.exclusive, o.reverse, o.initial);
}
std::tuple<at::Tensor, at::Tensor> segment_cummin(const at::Tensor& values,
                                                  const at::Tensor& offsets,
                                                  const ScanOptions& o) {
  check_no_dtype("scanops.segment_cummin", o);
  check_no_reset("scanops.segment_cummin", o);
  static const auto op = find_op<SegIndexedSig>("scanops::segment_cummin");
  return op.call(values, offsets, o.exclusive, o.reverse, o.initial);
}

std::string version() { return SCANOPS_VERSION; }

}  // namespace scanops
