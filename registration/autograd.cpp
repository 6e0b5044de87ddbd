// scanops: autograd, in C++ (TORCH_LIBRARY_IMPL(scanops, Autograd, ...)).
//
// Every backward formula is written with scanops' own ops, called through the dispatcher
// (include/scanops/scanops.h), so the backward is itself differentiable: double backward
// and torch.compile tracing of the backward work with no extra code. No formula reads a
// device value on the host, so backward passes can be captured in CUDA graphs.
//
//   cumsum(x; e, r)             dx = cumsum(g; e, !r)
//   masked_cumsum(x, m; e, r)   dx = cumsum(g; e, !r) * m
//   cumprod(x; e, r)            dx = E * S, with E = cumprod(x; exclusive, r) the product of
//                               the elements before k in scan order, and S the reverse-order
//                               linear recurrence
//                                 inclusive:  S = g + linrec(a=x, x*g; exclusive, !r)
//                                 exclusive:  S =     linrec(a=x, g;   exclusive, !r)
//                               i.e. sum over later outputs of g_i * (product of the elements
//                               strictly between k and i): O(n), no division, exact with zeros,
//                               and its own derivatives are O(n) too.
//   linear_recurrence(a, x; e, r), h[t] = a[t] h[t-1] + x[t]:
//                               inclusive:  lam = g + linrec(a, a*g; exclusive, !r)
//                               exclusive:  lam =     linrec(a, g;   exclusive, !r)
//                               dx = lam,  da = lam * linrec(a, x; exclusive, r)  (= h[t-1])
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "scanops/scanops.h"

namespace scanops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool is_differentiable(at::ScalarType t) { return at::isFloatingType(t); }

// Gradient of an input that may have been converted (dtype=...) or broadcast.
// Sizes are SymInts throughout, so tracing (torch.compile(dynamic=True)) adds no guards.
at::Tensor grad_for(const at::Tensor& g, at::ScalarType dtype, c10::SymIntArrayRef sizes) {
  at::Tensor out = g.scalar_type() == dtype ? g : g.to(dtype);
  if (!out.sym_sizes().equals(sizes)) out = at::sum_to(out, sizes);
  return out;
}
// The gradient of an input of the output's own shape: only the dtype may differ.
at::Tensor grad_as(const at::Tensor& g, at::ScalarType dtype) {
  return g.scalar_type() == dtype ? g : g.to(dtype);
}

void save_flags(AutogradContext* ctx, int64_t dim, bool exclusive, bool reverse) {
  ctx->saved_data["dim"] = dim;
  ctx->saved_data["exclusive"] = exclusive;
  ctx->saved_data["reverse"] = reverse;
}

struct Flags {
  int64_t dim;
  bool exclusive;
  bool reverse;
};
Flags load_flags(AutogradContext* ctx) {
  return {ctx->saved_data["dim"].toInt(), ctx->saved_data["exclusive"].toBool(),
          ctx->saved_data["reverse"].toBool()};
}

void maybe_non_differentiable(AutogradContext* ctx, const at::Tensor& out) {
  if (!is_differentiable(out.scalar_type())) ctx->mark_non_differentiable({out});
}

class CumsumFn : public torch::autograd::Function<CumsumFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, int64_t dim,
                            bool exclusive, bool reverse, std::optional<at::ScalarType> dtype) {
    save_flags(ctx, dim, exclusive, reverse);
    ctx->saved_data["self_dtype"] = self.scalar_type();
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = scanops::cumsum(self, dim, {exclusive, reverse, dtype});
    maybe_non_differentiable(ctx, out);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const auto self_dtype = ctx->saved_data["self_dtype"].toScalarType();
    at::Tensor g = scanops::cumsum(grads[0], f.dim, {f.exclusive, !f.reverse});
    return {grad_as(g, self_dtype), {}, {}, {}, {}};
  }
};

class MaskedCumsumFn : public torch::autograd::Function<MaskedCumsumFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, const at::Tensor& mask,
                            int64_t dim, bool exclusive, bool reverse,
                            std::optional<at::ScalarType> dtype) {
    save_flags(ctx, dim, exclusive, reverse);
    ctx->saved_data["self_dtype"] = self.scalar_type();
    ctx->save_for_backward({mask});
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = scanops::masked_cumsum(self, mask, dim, {exclusive, reverse, dtype});
    maybe_non_differentiable(ctx, out);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const auto self_dtype = ctx->saved_data["self_dtype"].toScalarType();
    const at::Tensor mask = ctx->get_saved_variables()[0];
    at::Tensor g = scanops::cumsum(grads[0], f.dim, {f.exclusive, !f.reverse}) * mask;
    return {grad_as(g, self_dtype), {}, {}, {}, {}, {}};
  }
};

class CumprodFn : public torch::autograd::Function<CumprodFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, int64_t dim,
                            bool exclusive, bool reverse, std::optional<at::ScalarType> dtype) {
    save_flags(ctx, dim, exclusive, reverse);
    if (dtype.has_value()) ctx->saved_data["dtype"] = *dtype;
    ctx->save_for_backward({self});
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = scanops::cumprod(self, dim, {exclusive, reverse, dtype});
    maybe_non_differentiable(ctx, out);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const at::Tensor self = ctx->get_saved_variables()[0];
    const at::Tensor& g = grads[0];
    at::Tensor x = self;
    if (ctx->saved_data.count("dtype")) x = x.to(ctx->saved_data["dtype"].toScalarType());
    const at::Tensor before = scanops::cumprod(x, f.dim, {.exclusive = true, .reverse = f.reverse});
    at::Tensor s;
    if (f.exclusive) {
      s = scanops::linear_recurrence(x, g, f.dim, {.exclusive = true, .reverse = !f.reverse});
    } else {
      s = g + scanops::linear_recurrence(x, x * g, f.dim,
                                         {.exclusive = true, .reverse = !f.reverse});
    }
    at::Tensor dx = before * s;
    return {grad_as(dx, self.scalar_type()), {}, {}, {}, {}};
  }
};

class LinearRecurrenceFn : public torch::autograd::Function<LinearRecurrenceFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& x,
                            int64_t dim, bool exclusive, bool reverse) {
    save_flags(ctx, dim, exclusive, reverse);
    ctx->save_for_backward({a, x});
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::linear_recurrence(a, x, dim, {exclusive, reverse});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& x = saved[1];
    const at::Tensor& g = grads[0];
    const ScanOptions back{.exclusive = true, .reverse = !f.reverse};
    // The full-shape coefficients: `a` may broadcast against x.
    const at::Tensor af = a.expand_symint(x.sym_sizes());
    at::Tensor lam = f.exclusive ? scanops::linear_recurrence(af, g, f.dim, back)
                                 : g + scanops::linear_recurrence(af, af * g, f.dim, back);
    at::Tensor dx, da;
    if (ctx->needs_input_grad(1)) dx = lam;
    if (ctx->needs_input_grad(0)) {
      const at::Tensor h_prev = scanops::linear_recurrence(
          af, x, f.dim, {.exclusive = true, .reverse = f.reverse});
      da = grad_for(lam * h_prev, a.scalar_type(), a.sym_sizes());
    }
    return {da, dx, {}, {}, {}};
  }
};

// When no input needs a gradient (inference, or inputs that do not require grad) the op goes
// straight to the device kernel below Autograd: no autograd node, no saved state (this is
// most of the host time of a small call).
bool wants_grad(const at::Tensor& t) {
  return at::GradMode::is_enabled() && t.requires_grad();
}

at::Tensor cumsum_autograd(const at::Tensor& self, int64_t dim, bool exclusive, bool reverse,
                           std::optional<at::ScalarType> dtype) {
  if (!wants_grad(self)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::cumsum(self, dim, {exclusive, reverse, dtype});
  }
  return CumsumFn::apply(self, dim, exclusive, reverse, dtype);
}
at::Tensor masked_cumsum_autograd(const at::Tensor& self, const at::Tensor& mask, int64_t dim,
                                  bool exclusive, bool reverse,
                                  std::optional<at::ScalarType> dtype) {
  if (!wants_grad(self)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::masked_cumsum(self, mask, dim, {exclusive, reverse, dtype});
  }
  return MaskedCumsumFn::apply(self, mask, dim, exclusive, reverse, dtype);
}
at::Tensor cumprod_autograd(const at::Tensor& self, int64_t dim, bool exclusive, bool reverse,
                            std::optional<at::ScalarType> dtype) {
  if (!wants_grad(self)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::cumprod(self, dim, {exclusive, reverse, dtype});
  }
  return CumprodFn::apply(self, dim, exclusive, reverse, dtype);
}
at::Tensor linear_recurrence_autograd(const at::Tensor& a, const at::Tensor& x, int64_t dim,
                                      bool exclusive, bool reverse) {
  if (!wants_grad(a) && !wants_grad(x)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::linear_recurrence(a, x, dim, {exclusive, reverse});
  }
  return LinearRecurrenceFn::apply(a, x, dim, exclusive, reverse);
}

}  // namespace
}  // namespace scanops

TORCH_LIBRARY_IMPL(scanops, Autograd, m) {
  m.impl("cumsum", &scanops::cumsum_autograd);
  m.impl("masked_cumsum", &scanops::masked_cumsum_autograd);
  m.impl("cumprod", &scanops::cumprod_autograd);
  m.impl("linear_recurrence", &scanops::linear_recurrence_autograd);
}
