// scanops: the op catalogue. Each op is a thin instance of the scan engine: a name, a
// combine operation, the flags and its operands. Real kernels (CPU and CUDA: the engine
// picks the back end by device) and Meta kernels both come from here.
#pragma once

#include "ops/scan_engine.h"

namespace scanops::catalog {

inline ScanSpec cumsum_spec(bool exclusive, bool reverse) {
  return {"scanops.cumsum", CombineKind::Sum, {exclusive, reverse}};
}
inline ScanSpec masked_cumsum_spec(bool exclusive, bool reverse) {
  return {"scanops.masked_cumsum", CombineKind::Sum, {exclusive, reverse}};
}
inline ScanSpec cumprod_spec(bool exclusive, bool reverse) {
  return {"scanops.cumprod", CombineKind::Prod, {exclusive, reverse}};
}
inline ScanSpec linear_recurrence_spec(bool exclusive, bool reverse) {
  return {"scanops.linear_recurrence", CombineKind::Affine, {exclusive, reverse}};
}

inline ScanSpec logcumsumexp_spec(bool exclusive, bool reverse) {
  return {"scanops.logcumsumexp", CombineKind::LogAddExp, {exclusive, reverse}};
}
inline ScanSpec cummax_spec(bool exclusive, bool reverse) {
  return {"scanops.cummax", CombineKind::Max, {exclusive, reverse}};
}
inline ScanSpec cummin_spec(bool exclusive, bool reverse) {
  return {"scanops.cummin", CombineKind::Min, {exclusive, reverse}};
}

// Internal ops of the backward passes: a scan with the output epilogue mul * (value + add)
// fused into its store, and (linear recurrences) the input scaled by its coefficient on
// load. Autograd formulas call them when no graph of the backward is recorded.
inline ScanSpec cumsum_fused_spec(bool exclusive, bool reverse) {
  return {"scanops._cumsum_fused", CombineKind::Sum, {exclusive, reverse}};
}
inline ScanSpec linear_recurrence_fused_spec(bool exclusive, bool reverse) {
  return {"scanops._linear_recurrence_fused", CombineKind::Affine, {exclusive, reverse}};
}
inline ScanSpec linear_recurrence_backward_spec(bool reverse) {
  return {"scanops._linear_recurrence_backward", CombineKind::Affine, {true, !reverse}};
}
inline const at::Tensor* optional_ptr(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? &*t : nullptr;
}
inline ScanOperands with_state(ScanOperands in, const std::optional<at::Tensor>& initial,
                               const std::optional<at::Tensor>& reset) {
  in.initial = optional_ptr(initial);
  in.reset = optional_ptr(reset);
  return in;
}

// `Engine` is scan (real data) or scan_meta (shapes only).
#define SCANOPS_CATALOG_OPS(SUFFIX, ENGINE)                                                     \
  inline at::Tensor cumsum##SUFFIX(const at::Tensor& self, int64_t dim, bool exclusive,        \
                                   bool reverse, std::optional<at::ScalarType> dtype,          \
                                   const std::optional<at::Tensor>& initial, const std::optional<at::Tensor>& reset) {                 \
    return ENGINE(cumsum_spec(exclusive, reverse), with_state(ScanOperands{self}, initial, reset),   \
                  dim, dtype);                                                                 \
  }                                                                                            \
  inline at::Tensor masked_cumsum##SUFFIX(const at::Tensor& self, const at::Tensor& mask,      \
                                          int64_t dim, bool exclusive, bool reverse,           \
                                          std::optional<at::ScalarType> dtype,                 \
                                          const std::optional<at::Tensor>& initial, const std::optional<at::Tensor>& reset) {          \
    return ENGINE(masked_cumsum_spec(exclusive, reverse),                                      \
                  with_state(ScanOperands{self, &mask}, initial, reset), dim, dtype);               \
  }                                                                                            \
  inline at::Tensor cumprod##SUFFIX(const at::Tensor& self, int64_t dim, bool exclusive,       \
                                    bool reverse, std::optional<at::ScalarType> dtype,         \
                                    const std::optional<at::Tensor>& initial, const std::optional<at::Tensor>& reset) {                \
    return ENGINE(cumprod_spec(exclusive, reverse), with_state(ScanOperands{self}, initial, reset),  \
                  dim, dtype);                                                                 \
  }                                                                                            \
  inline at::Tensor linear_recurrence##SUFFIX(const at::Tensor& a, const at::Tensor& x,        \
                                              int64_t dim, bool exclusive, bool reverse,       \
                                              const std::optional<at::Tensor>& initial, const std::optional<at::Tensor>& reset) {      \
    return ENGINE(linear_recurrence_spec(exclusive, reverse),                                  \
                  with_state(ScanOperands{x, nullptr, &a, "x", "a"}, initial, reset), dim,          \
                  std::nullopt);                                                               \
  }                                                                                            \
  inline at::Tensor logcumsumexp##SUFFIX(const at::Tensor& self, int64_t dim, bool exclusive,  \
                                         bool reverse, const std::optional<at::Tensor>& initial, const std::optional<at::Tensor>& reset) { \
    return ENGINE(logcumsumexp_spec(exclusive, reverse),                                       \
                  with_state(ScanOperands{self}, initial, reset), dim, std::nullopt);               \
  }                                                                                            \
  inline at::Tensor cumsum_fused##SUFFIX(const at::Tensor& self, int64_t dim, bool exclusive,  \
                                         bool reverse, const std::optional<at::Tensor>& add,    \
                                         const std::optional<at::Tensor>& mul) {                \
    ScanOperands in{self};                                                                     \
    in.add = optional_ptr(add);                                                                \
    in.mul = optional_ptr(mul);                                                                \
    return ENGINE(cumsum_fused_spec(exclusive, reverse), in, dim, std::nullopt);               \
  }                                                                                            \
  inline at::Tensor linear_recurrence_fused##SUFFIX(                                           \
      const at::Tensor& a, const at::Tensor& x, int64_t dim, bool exclusive, bool reverse,     \
      bool scale_x, const std::optional<at::Tensor>& add, const std::optional<at::Tensor>& mul, \
      bool shift_mul, bool wide_acc) {                                                         \
    ScanOperands in{x, nullptr, &a, "x", "a"};                                                 \
    in.add = optional_ptr(add);                                                                \
    in.mul = optional_ptr(mul);                                                                \
    in.scale_input = scale_x;                                                                  \
    in.shift_mul = shift_mul;                                                                  \
    in.wide_acc = wide_acc;                                                                    \
    return ENGINE(linear_recurrence_fused_spec(exclusive, reverse), in, dim, std::nullopt);    \
  }                                                                                            \
  /* dx = lam = g + linrec(a, a * g; exclusive, !reverse), da = lam * h[t-1] (0 at the     \
     first position), for linear_recurrence(a, x; reverse) = h (inclusive) */                  \
  inline std::tuple<at::Tensor, at::Tensor> linear_recurrence_backward##SUFFIX(                \
      const at::Tensor& a, const at::Tensor& g, const at::Tensor& h, int64_t dim, bool reverse) { \
    ScanOperands in{g, nullptr, &a, "g", "a"};                                                 \
    in.add = &g;                                                                               \
    in.mul = &h;                                                                               \
    in.scale_input = true;                                                                     \
    in.shift_mul = true;                                                                       \
    in.mul_second = true;                                                                      \
    return ENGINE##_pair(linear_recurrence_backward_spec(reverse), in, dim);                   \
  }                                                                                            \
  inline std::tuple<at::Tensor, at::Tensor> cummax##SUFFIX(                                    \
      const at::Tensor& self, int64_t dim, bool exclusive, bool reverse,                       \
      const std::optional<at::Tensor>& initial, const std::optional<at::Tensor>& reset) {                                              \
    return ENGINE##_indexed(cummax_spec(exclusive, reverse),                                   \
                            with_state(ScanOperands{self}, initial, reset), dim);                   \
  }                                                                                            \
  inline std::tuple<at::Tensor, at::Tensor> cummin##SUFFIX(                                    \
      const at::Tensor& self, int64_t dim, bool exclusive, bool reverse,                       \
      const std::optional<at::Tensor>& initial, const std::optional<at::Tensor>& reset) {                                              \
    return ENGINE##_indexed(cummin_spec(exclusive, reverse),                                   \
                            with_state(ScanOperands{self}, initial, reset), dim);                   \
  }

SCANOPS_CATALOG_OPS(, scan)
SCANOPS_CATALOG_OPS(_meta, scan_meta)
#undef SCANOPS_CATALOG_OPS

}  // namespace scanops::catalog
