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
#include "ops/segmented.h"

namespace scanops {

struct ScanSpec {
  const char* op_name;  // as users see it, e.g. "scanops.cumsum"
  CombineKind kind;
  ScanFlags flags;
};

// ---- The scan problem a back end solves, in named parts ------------------------------------
// The engine (scan_engine.cpp) checks the arguments, resolves dtypes, canonicalises the layout
// and converts what the back end does not take itself (BackendCaps); a back end sees only a
// ScanProblem. A new per-line input or output is a new part (or a field of one) here, a
// capability in BackendCaps where back ends differ, and its use in each back end's runner.

// The canonical layout: every tensor of the problem holds outer * length * inner elements, the
// scan running along `length`; element (o, l, i) lives at offset (o * length + l) * inner + i.
struct ScanShape {
  int64_t outer = 1;
  int64_t length = 1;
  int64_t inner = 1;
  int64_t numel() const { return outer * length * inner; }
};

// A broadcast companion read in place (BackendCaps::broadcast_in_place): a strided view of
// self's shape whose element (o, l, i) is at o * so + l * sl + i * si of its data.
struct BroadcastStrides {
  bool in_place = false;
  int64_t so = 0, sl = 0, si = 0;  // in elements
};
// A tensor the scan reads beside its input, self's shape: contiguous, or a broadcast view
// read in place (strides.in_place).
struct Companion {
  at::Tensor t;  // undefined: none
  BroadcastStrides strides;
  bool defined() const { return t.defined(); }
};

// What the combine reads.
//   input: dtype in_t (self, converted to `dtype` first when one was given), contiguous
//   mask:  bool (Sum only: a masked-out element is the identity)
//   coeff: the coefficients a[t] of a linear recurrence (Affine only), dtype in_t
//   scale_input (Affine): element t is lifted as (a[t], a[t] * x[t]) instead of (a[t], x[t])
struct ScanInputs {
  at::Tensor input;
  Companion mask;
  Companion coeff;
  bool scale_input = false;
};

// Per-line state in: the value each line starts from (the ops' `initial`).
//   initial: undefined (every line starts from the combine's identity), or out_t (the result
//            dtype), contiguous, outer * inner elements: line (o, i) starts from
//            Combine::start(initial[o * inner + i]), taken in before the line's first element
//            in scan order (the last along the dim for a reverse scan). An exclusive scan
//            writes it at that first position. Back ends without BackendCaps::line_state get
//            the problem with the initial value prepended to every line instead (the engine).
struct LineState {
  at::Tensor initial;
  bool defined() const { return initial.defined(); }
};

// The segment structure of a segmented scan (the ops' `reset`): where segments start.
//   reset: undefined (one segment per line), or bool, self's shape, a Companion (dense, or a
//          broadcast view read in place: back ends with BackendCaps::segments read every
//          companion of a segmented problem through its strides): true at (o, l, i) starts a
//          segment at position l of line (o, i), in the line's forward order, whatever the
//          scan's direction (position 0 starts the first segment anyway). Each segment is
//          scanned as a line of its own; LineState::initial belongs to the line's first
//          segment in scan order. ops/segmented.h is the walk every back end follows.
// The jagged (offsets) form of the segment_* ops reaches the engine as a reset mask
// (registration/segments.cpp).
struct Segments {
  Companion reset;
  bool defined() const { return reset.defined(); }
};

// A companion as the segmented walk reads it (ops/segmented.h): its broadcast strides, or the
// dense layout's (undefined: zeros, never read).
inline SegStrides segment_strides(const Companion& c, const ScanShape& s) {
  if (!c.defined()) return {};
  if (c.strides.in_place) return {c.strides.so, c.strides.sl, c.strides.si};
  return {s.length * s.inner, s.inner, 1};
}

// The epilogue of the backward fusions (ScanOperands says which ops use them), non-indexed
// kinds only. The value written is mul[t] * (value + add[t]):
//   add:  undefined, or out_t, contiguous, self's shape
//   mul:  undefined, or out_t or bool, contiguous, self's shape
//   shift_mul (BackendCaps::shift_mul says for which problems; elsewhere the engine
//         materialises the shift): the element at scan position k multiplies mul's element
//         at position k + 1 in scan order instead, the last element of a line 1
//   second: undefined, or (with shift_mul) out_t, self's shape: the products of shift_mul go
//         there (the last element of a line 0) and the values keep mul-less values
struct Epilogue {
  at::Tensor add;
  at::Tensor mul;
  bool shift_mul = false;
  at::Tensor second;
  bool any() const { return add.defined() || mul.defined(); }
};

// What the scan writes, contiguous, self's shape.
//   values:  dtype out_t (the result dtype)
//   indices: undefined, or (indexed combines: cummax / cummin) int64: the position along the
//            scan dim, in the original order, each value came from
struct ScanOutputs {
  at::Tensor values;
  at::Tensor indices;
};

struct ScanProblem {
  ScanSpec spec;
  ScanShape shape;
  ScanInputs in;
  LineState state;
  Segments segments;
  Epilogue epilogue;
  ScanOutputs out;
  bool wide_acc = false;  // see ScanOperands::wide_acc
};

// The data pointers of a problem's tensors for one (in_t, out_t) instantiation, nullptr for
// the parts it does not have: what every back end's runner reads.
template <typename in_t, typename out_t>
struct ProblemData {
  const in_t* input;
  const in_t* coeff;
  const bool* mask;
  out_t* values;
  int64_t* indices;
  const out_t* add;
  const out_t* mul;       // mul of out_t
  const bool* mul_mask;   // mul of bool
  out_t* second;
  const out_t* initial;  // LineState::initial: outer * inner values
  explicit ProblemData(const ScanProblem& p)
      : input(p.in.input.const_data_ptr<in_t>()),
        coeff(p.in.coeff.defined() ? p.in.coeff.t.const_data_ptr<in_t>() : nullptr),
        mask(p.in.mask.defined() ? p.in.mask.t.const_data_ptr<bool>() : nullptr),
        values(p.out.values.mutable_data_ptr<out_t>()),
        indices(p.out.indices.defined() ? p.out.indices.mutable_data_ptr<int64_t>() : nullptr),
        add(p.epilogue.add.defined() ? p.epilogue.add.const_data_ptr<out_t>() : nullptr),
        mul(p.epilogue.mul.defined() && p.epilogue.mul.scalar_type() != at::kBool
                ? p.epilogue.mul.const_data_ptr<out_t>()
                : nullptr),
        mul_mask(p.epilogue.mul.defined() && p.epilogue.mul.scalar_type() == at::kBool
                     ? p.epilogue.mul.const_data_ptr<bool>()
                     : nullptr),
        second(p.epilogue.second.defined() ? p.epilogue.second.mutable_data_ptr<out_t>()
                                           : nullptr),
        initial(p.state.defined() ? p.state.initial.const_data_ptr<out_t>() : nullptr) {}
};

// ---- Back ends -----------------------------------------------------------------------------
// What a back end takes as is. The engine converts the rest before calling it: broadcast
// companions materialised, the input scaling and the epilogue run as elementwise passes around
// the scan, mul shifted by a copy. (The numbers are the same either way, up to the rounding of
// half types in the elementwise passes.)
struct BackendCaps {
  bool broadcast_in_place = false;  // reads a broadcast Companion through its strides
  bool fused_epilogue = false;      // ScanInputs::scale_input and Epilogue::add / mul
  bool line_state = false;          // starts each line from LineState::initial
  bool segments = false;            // scans Segments (required: the engine has no fallback)
  // Whether it reads mul one position on (Epilogue::shift_mul) for this problem (its shape,
  // spec, inputs and epilogue set); nullptr: never.
  bool (*shift_mul)(const ScanProblem&) = nullptr;
};
using BackendFn = void (*)(const ScanProblem&);
// The jagged form's offsets (registration/segments.cpp: _segment_heads, _segment_offsets) in
// one pass over them on their device: offsets contiguous int64 or int32, B + 1 >= 1 entries.
// Returns false (outputs unspecified) unless they start at 0, end at total and never decrease
// (the caller then names the fault); else writes what is asked: heads (bool (total)) true at
// each offsets[b] < total and false elsewhere, as_long (int64 (B + 1)) the offsets.
using JaggedOffsetsFn = bool (*)(const at::Tensor& offsets, int64_t total, at::Tensor* heads,
                                 at::Tensor* as_long);
// logcumsumexp's backward in one scan (ops/lse_grad.h; the internal op _logcumsumexp_backward):
// dx for logcumsumexp(x; exclusive, reverse) = y and the incoming gradient g along dim (dim
// wrapped; x, y and g of one shape, floating dtype and device, at least one element). Returns
// false, dx untouched, where the back end has no kernel for the problem; the caller then runs
// the composite formula (registration/autograd.cpp).
using LseGradFn = bool (*)(const at::Tensor& x, const at::Tensor& y, const at::Tensor& g,
                           int64_t dim, bool exclusive, bool reverse, at::Tensor& dx);
struct Backend {
  BackendFn run = nullptr;
  BackendCaps caps;
  JaggedOffsetsFn jagged_offsets = nullptr;  // nullptr: the generic ATen composition
  LseGradFn lse_grad = nullptr;              // nullptr: the composite formula everywhere
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
  // The ops' `initial` (optional): the value each line starts from, of the result dtype, of
  // self's shape without the scan dim or broadcastable to it (LineState).
  const at::Tensor* initial = nullptr;
  // The ops' `reset` (optional): bool, broadcastable to self's shape; true starts a new
  // segment at that position along dim (Segments). Never with the backward fusions below.
  const at::Tensor* reset = nullptr;
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

// Back ends. The CPU's always exists; the CUDA back end registers itself when the library is
// built with CUDA (see ops/cuda/), so that the host code has no CUDA dependency.
void scan_cpu(const ScanProblem& p);
BackendCaps scan_cpu_caps();  // what the CPU back end takes as is (ops/cpu/scan_cpu.cpp)
bool jagged_offsets_cpu(const at::Tensor& offsets, int64_t total, at::Tensor* heads,
                        at::Tensor* as_long);  // JaggedOffsetsFn (ops/cpu/scan_cpu_segmented.cpp)
void register_cuda_backend(const Backend& backend);
const Backend* cuda_backend();  // nullptr if the library was built without CUDA
// The back end of a device type: nullptr where there is none (CUDA without the CUDA back end).
const Backend* backend_of(c10::DeviceType device);

}  // namespace scanops
