// scanops: the host side of the generic scan engine.
//
// Every op is an instance of one engine call:
//
//   scan(ScanSpec{op name, combine kind, exclusive, reverse}, self, mask?, dim, dtype?)
//
// The engine validates arguments (errors name the op and the argument), resolves the
// result dtype exactly as torch.cumsum/torch.cumprod do, builds the canonical view
// (outer x length x inner over a contiguous tensor), allocates the contiguous output and
// hands a ScanProblem to the back end of the input's device. Back ends only see
// ScanProblem: they never deal with strides, dims, dtypes policy or user errors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/core/SymIntArrayRef.h>

#include <optional>
#include <tuple>

#include "ops/combine.h"

namespace scanops {

struct ScanSpec {
  const char* op_name;  // as users see it, e.g. "scanops.cumsum"
  CombineKind kind;
  ScanFlags flags;
};

// The canonical problem a back end solves. All tensors are contiguous (but a broadcast mask or
// coefficient tensor, see below) and have the same number of elements (outer * length * inner).
//   input:  dtype in_t  (self, converted to `dtype` first when one was given)
//   mask:   undefined, or bool (broadcast to self's shape)
//   coeff:  undefined, or (Affine only) the coefficients a[t], dtype in_t, self's shape
//   output: dtype out_t (the result dtype)
//   indices: undefined, or (indexed combines: cummax / cummin) int64, self's shape: the
//           position along the scan dim, in the original order, each output value came from
// Element (o, l, i) lives at offset (o * length + l) * inner + i.
// A mask or coefficient tensor given with a broadcast (a stride-0 dim) may be handed to a back
// end that reads it in place (CUDA): it is then self's shape as a strided view whose element
// (o, l, i) is at o * so + l * sl + i * si of its data (BroadcastStrides::in_place).
// Fusions used by the backward passes (see ScanOperands), non-indexed kinds only:
//   scale_input (Affine): element t is lifted as (a[t], a[t] * x[t]) instead of (a[t], x[t])
//   add:    undefined, or out_t, self's shape: the value written is value + add[t] ...
//   mul:    undefined, or out_t or bool, self's shape: ... and multiplies mul[t] (add first)
//   shift_mul (CUDA, inner == 1, Affine with dense coefficients, mul of out_t; the engine
//           materialises the shift for the other problems): the element at scan position k
//           multiplies mul's element at position k + 1 in scan order instead, the last
//           element of a line 1
//   second: undefined, or (with shift_mul) out_t, self's shape: the products of shift_mul go
//           there (the last element of a line 0) and output keeps mul-less values
struct BroadcastStrides {
  bool in_place = false;
  int64_t so = 0, sl = 0, si = 0;  // in elements
};
struct ScanProblem {
  ScanSpec spec;
  at::Tensor input;
  at::Tensor mask;
  at::Tensor coeff;
  at::Tensor output;
  at::Tensor indices;
  at::Tensor add;
  at::Tensor mul;
  bool shift_mul = false;
  at::Tensor second;
  bool scale_input = false;
  bool wide_acc = false;  // see ScanOperands::wide_acc
  BroadcastStrides mask_strides;
  BroadcastStrides coeff_strides;
  int64_t outer = 1;
  int64_t length = 1;
  int64_t inner = 1;
};

// Whether a combine kind produces a second (int64 indices) output.
constexpr bool kind_is_indexed(CombineKind k) {
  return k == CombineKind::Max || k == CombineKind::Min;
}

// Result dtype of a scan. Sums and products as torch.cumsum / torch.cumprod: `dtype` if
// given, else int64 for integral and bool inputs, else self's dtype. The other kinds keep
// self's dtype (logcumsumexp: floating and complex; cummax / cummin: real and bool;
// linear_recurrence: floating and complex) and take no `dtype`. Throws (naming the op and
// the argument) for dtypes the kind does not take.
at::ScalarType result_dtype(const ScanSpec& spec, at::ScalarType self_dtype,
                            std::optional<at::ScalarType> dtype, const char* self_name = "self");

// The tensors of one scan: `self` (named by the op's schema as `self_name`, e.g. "x"), an
// optional bool mask (element transform), an optional coefficient tensor (Affine).
struct ScanOperands {
  const at::Tensor& self;
  const at::Tensor* mask = nullptr;
  const at::Tensor* coeff = nullptr;
  const char* self_name = "self";
  const char* coeff_name = "a";
  // The backward passes' fusions (internal ops: scanops::_cumsum_fused,
  // scanops::_linear_recurrence_fused): an output epilogue mul * (value + add), elementwise,
  // and for Affine the input scaled by its coefficient. `add` has the result dtype, `mul` the
  // result dtype or bool; both broadcast to self's shape. nullptr / undefined: none.
  const at::Tensor* add = nullptr;
  const at::Tensor* mul = nullptr;
  bool scale_input = false;
  // mul read one scan position on: the value at scan position k is multiplied by mul's
  // element at position k + 1 in this scan's order, the last one of each line by 1.
  // cumprod's backward scans against the forward's order, so that its exclusive products
  // are the forward's output read in place (no pass of their own).
  bool shift_mul = false;
  // With shift_mul: the products go to a second output (scan_pair), the value itself to the
  // first, and the last position of a line takes 0 (linear_recurrence's backward: da = lam *
  // h[t-1], h[-1] = 0, next to dx = lam).
  bool mul_second = false;
  // Affine, real floating types: float32 / half inputs accumulate in float64 on every back end
  // (the CPU does anyway; CUDA's trees of float32 products are biased for factors near 1).
  bool wide_acc = false;
};

// Checks shared by the real kernels and the Meta kernels (no data access). Returns the
// wrapped dim.
int64_t check_scan_args(const ScanSpec& spec, const ScanOperands& in, int64_t dim,
                        std::optional<at::ScalarType> dtype);

// The engine entry: checks, canonicalises, allocates and runs the back end of self's device.
at::Tensor scan(const ScanSpec& spec, const ScanOperands& in, int64_t dim,
                std::optional<at::ScalarType> dtype);

// Meta (shape-only) version, SymInt aware.
at::Tensor scan_meta(const ScanSpec& spec, const ScanOperands& in, int64_t dim,
                     std::optional<at::ScalarType> dtype);

// ScanOperands::mul_second: the values and the products (both of the result dtype).
std::tuple<at::Tensor, at::Tensor> scan_pair(const ScanSpec& spec, const ScanOperands& in,
                                             int64_t dim);
std::tuple<at::Tensor, at::Tensor> scan_meta_pair(const ScanSpec& spec, const ScanOperands& in,
                                                  int64_t dim);

// Indexed kinds (cummax / cummin): the values and the int64 indices.
std::tuple<at::Tensor, at::Tensor> scan_indexed(const ScanSpec& spec, const ScanOperands& in,
                                                int64_t dim);
std::tuple<at::Tensor, at::Tensor> scan_meta_indexed(const ScanSpec& spec,
                                                     const ScanOperands& in, int64_t dim);

// Back ends. scan_cpu always exists; scan_cuda is registered by the CUDA back end when the
// library is built with CUDA (see ops/cuda/), so the host code has no CUDA dependency.
void scan_cpu(const ScanProblem& p);
using BackendFn = void (*)(const ScanProblem&);
void register_cuda_backend(BackendFn fn);
BackendFn cuda_backend();  // nullptr if the library was built without CUDA

}  // namespace scanops
