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
//                               (real, no create_graph: h[t-1] the forward's output; inclusive:
//                               both from one scan, _linear_recurrence_backward; exclusive:
//                               da = lam * output)
//   complex inputs: the same with a, x (cumprod: x) conjugated (PyTorch's convention)
//   Without create_graph the masked_cumsum, cumprod and linear_recurrence formulas run as
//   fused scans (fuse_backward below): the products and sums around each scan are done in
//   its load and store, e.g. cumprod's dx = (g + linrec(x, x*g)) * E is one pass, E being the
//   forward's output read one position on (real types; shift_mul of _linear_recurrence_fused).
//   E at position k is the product of the elements before k: the forward's output at k - 1
//   (inclusive), or at k (exclusive), 1 at the first position.
//   logcumsumexp, cummax, cummin: see their Functions below
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "ops/catalog.h"
#include "ops/prepend.h"
#include "scanops/scanops.h"

namespace scanops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool is_differentiable(at::ScalarType t) { return at::isFloatingType(t) || at::isComplexType(t); }

// Complex gradients follow PyTorch's convention (grad = g * conj(df/dz) for holomorphic f):
// the real formulas with the op's factors conjugated.
// Materialised once here: a lazy conj() view would be copied again by every scan it feeds
// (the engine reads memory) -- cumprod's and linear_recurrence's backward use it two or three
// times.
at::Tensor conj_if_complex(const at::Tensor& t) {
  return t.is_complex() ? t.conj().resolve_conj() : t;
}

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

bool has(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// `reset` (segments) of a forward, for its backward: the backward of a segmented scan is the
// segmented scan in the other direction (the same segments), so every formula below passes
// it to its scans, and takes its composite form (the fused scans take no segments).
void save_reset(AutogradContext* ctx, const std::optional<at::Tensor>& reset) {
  if (has(reset)) ctx->saved_data["reset"] = *reset;
}
std::optional<at::Tensor> load_reset(AutogradContext* ctx) {
  const auto it = ctx->saved_data.find("reset");
  if (it == ctx->saved_data.end()) return std::nullopt;
  return it->second.toTensor();
}
ScanOptions seg(bool exclusive, bool reverse, const std::optional<at::Tensor>& reset) {
  return {exclusive, reverse, std::nullopt, std::nullopt, reset};
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

// The backward passes' fused scans (internal ops, no autograd of their own): used while no
// graph of the backward is recorded (create_graph=False, the common case); a double backward
// takes the composite formulas, which are differentiable. They compute the same values in
// fewer passes over memory (see docs/design.md, "Forward + backward").
bool fuse_backward() { return !at::GradMode::is_enabled(); }

// _cumsum_fused: mul * (cumsum(g; e, r) + add).
at::Tensor cumsum_fused(const at::Tensor& g, int64_t dim, ScanOptions o,
                        const std::optional<at::Tensor>& add,
                        const std::optional<at::Tensor>& mul) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("scanops::_cumsum_fused", "")
          .typed<at::Tensor(const at::Tensor&, int64_t, bool, bool,
                            const std::optional<at::Tensor>&, const std::optional<at::Tensor>&)>();
  return op.call(g, dim, o.exclusive, o.reverse, add, mul);
}
// _linear_recurrence_fused: mul * (linear_recurrence(a, scale_x ? a * x : x; e, r) + add).
at::Tensor linear_recurrence_fused(const at::Tensor& a, const at::Tensor& x, int64_t dim,
                                   ScanOptions o, bool scale_x,
                                   const std::optional<at::Tensor>& add,
                                   const std::optional<at::Tensor>& mul,
                                   bool shift_mul = false, bool wide_acc = false) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("scanops::_linear_recurrence_fused", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool, bool, bool,
                            const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                            bool, bool)>();
  return op.call(a, x, dim, o.exclusive, o.reverse, scale_x, add, mul, shift_mul, wide_acc);
}

void maybe_non_differentiable(AutogradContext* ctx, const at::Tensor& out) {
  if (!is_differentiable(out.scalar_type())) ctx->mark_non_differentiable({out});
}

class CumsumFn : public torch::autograd::Function<CumsumFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, int64_t dim,
                            bool exclusive, bool reverse, std::optional<at::ScalarType> dtype,
                            const std::optional<at::Tensor>& reset) {
    save_flags(ctx, dim, exclusive, reverse);
    save_reset(ctx, reset);
    ctx->saved_data["self_dtype"] = self.scalar_type();
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = scanops::cumsum(self, dim, {exclusive, reverse, dtype, std::nullopt, reset});
    maybe_non_differentiable(ctx, out);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const auto self_dtype = ctx->saved_data["self_dtype"].toScalarType();
    at::Tensor g = scanops::cumsum(grads[0], f.dim, seg(f.exclusive, !f.reverse, load_reset(ctx)));
    return {grad_as(g, self_dtype), {}, {}, {}, {}, {}};
  }
};

class MaskedCumsumFn : public torch::autograd::Function<MaskedCumsumFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, const at::Tensor& mask,
                            int64_t dim, bool exclusive, bool reverse,
                            std::optional<at::ScalarType> dtype,
                            const std::optional<at::Tensor>& reset) {
    save_flags(ctx, dim, exclusive, reverse);
    save_reset(ctx, reset);
    ctx->saved_data["self_dtype"] = self.scalar_type();
    ctx->save_for_backward({mask});
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out =
        scanops::masked_cumsum(self, mask, dim, {exclusive, reverse, dtype, std::nullopt, reset});
    maybe_non_differentiable(ctx, out);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const auto self_dtype = ctx->saved_data["self_dtype"].toScalarType();
    const at::Tensor mask = ctx->get_saved_variables()[0];
    const auto reset = load_reset(ctx);
    at::Tensor g =
        fuse_backward() && !has(reset)
            ? cumsum_fused(grads[0], f.dim, {f.exclusive, !f.reverse}, {}, mask)
            : scanops::cumsum(grads[0], f.dim, seg(f.exclusive, !f.reverse, reset)) * mask;
    return {grad_as(g, self_dtype), {}, {}, {}, {}, {}, {}};
  }
};

class CumprodFn : public torch::autograd::Function<CumprodFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, int64_t dim,
                            bool exclusive, bool reverse, std::optional<at::ScalarType> dtype,
                            const std::optional<at::Tensor>& reset) {
    save_flags(ctx, dim, exclusive, reverse);
    save_reset(ctx, reset);
    if (dtype.has_value()) ctx->saved_data["dtype"] = *dtype;
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = scanops::cumprod(self, dim, {exclusive, reverse, dtype, std::nullopt, reset});
    // The output too where the fused backward reads it (real results: the exclusive products;
    // complex ones need them conjugated and scan them again).
    if (!out.is_complex()) {
      ctx->save_for_backward({self, out});
    } else {
      ctx->save_for_backward({self});
    }
    maybe_non_differentiable(ctx, out);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& self = saved[0];
    const at::Tensor& g = grads[0];
    at::Tensor x = self;
    if (ctx->saved_data.count("dtype")) x = x.to(ctx->saved_data["dtype"].toScalarType());
    x = conj_if_complex(x);
    const auto reset = load_reset(ctx);
    const auto exclusive_products = [&] {
      return scanops::cumprod(x, f.dim, seg(true, f.reverse, reset));
    };
    if (fuse_backward() && !has(reset)) {
      // dx = (linrec(x, x * g or g; exclusive, !r) (+ g)) * before, before (the exclusive
      // products) the forward's output where it was saved: itself (exclusive), or read one
      // position on in the backward's order (inclusive: shift_mul), no pass of its own.
      const bool from_output = saved.size() == 2;
      const at::Tensor dx = linear_recurrence_fused(
          x, g, f.dim, {.exclusive = true, .reverse = !f.reverse}, /*scale_x=*/!f.exclusive,
          f.exclusive ? std::optional<at::Tensor>() : std::optional<at::Tensor>(g),
          from_output ? saved[1] : exclusive_products(),
          /*shift_mul=*/from_output && !f.exclusive);
      return {grad_as(dx, self.scalar_type()), {}, {}, {}, {}, {}};
    }
    const at::Tensor before = exclusive_products();
    at::Tensor s;
    if (f.exclusive) {
      s = scanops::linear_recurrence(x, g, f.dim, seg(true, !f.reverse, reset));
    } else {
      s = g + scanops::linear_recurrence(x, x * g, f.dim, seg(true, !f.reverse, reset));
    }
    at::Tensor dx = before * s;
    return {grad_as(dx, self.scalar_type()), {}, {}, {}, {}, {}};
  }
};

class LinearRecurrenceFn : public torch::autograd::Function<LinearRecurrenceFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& x,
                            int64_t dim, bool exclusive, bool reverse,
                            const std::optional<at::Tensor>& reset) {
    save_flags(ctx, dim, exclusive, reverse);
    save_reset(ctx, reset);
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = scanops::linear_recurrence(a, x, dim, seg(exclusive, reverse, reset));
    // The output too where the fused backward reads it (h[t-1] of da = lam * h[t-1]: the
    // inclusive output one position on, or the exclusive output itself).
    if (!x.is_complex()) {
      ctx->save_for_backward({a, x, out});
    } else {
      ctx->save_for_backward({a, x});
    }
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& x = saved[1];
    const at::Tensor& g = grads[0];
    const auto reset = load_reset(ctx);
    const ScanOptions back = seg(true, !f.reverse, reset);
    // The full-shape coefficients: `a` may broadcast against x.
    const at::Tensor af = conj_if_complex(a.expand_symint(x.sym_sizes()));
    const bool fuse = fuse_backward() && !has(reset);
    if (fuse && saved.size() == 3 && !f.exclusive && ctx->needs_input_grad(0)) {
      // One scan for both: dx = lam, da = lam * h[t-1] with h the forward's output read one
      // position on (_linear_recurrence_backward), where da took a second scan of a and x.
      static const auto op =
          c10::Dispatcher::singleton()
              .findSchemaOrThrow("scanops::_linear_recurrence_backward", "")
              .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, int64_t, bool)>();
      auto [lam, lam_h] = op.call(af, g, saved[2], f.dim, f.reverse);
      return {grad_for(lam_h, a.scalar_type(), a.sym_sizes()),
              ctx->needs_input_grad(1) ? lam : at::Tensor(), {}, {}, {}, {}};
    }
    at::Tensor lam;
    if (fuse) {
      lam = linear_recurrence_fused(
          af, g, f.dim, back, /*scale_x=*/!f.exclusive,
          f.exclusive ? std::optional<at::Tensor>() : std::optional<at::Tensor>(g), {});
    } else {
      lam = f.exclusive ? scanops::linear_recurrence(af, g, f.dim, back)
                        : g + scanops::linear_recurrence(af, af * g, f.dim, back);
    }
    at::Tensor dx, da;
    if (ctx->needs_input_grad(1)) dx = lam;
    if (ctx->needs_input_grad(0)) {
      // lam * conj(h[t-1]), h[t-1] the forward's exclusive recurrence
      const ScanOptions fwd = seg(true, f.reverse, reset);
      // (fused, exclusive, real: h[t-1] is the forward's output, an elementwise product)
      const at::Tensor lam_h =
          fuse ? (saved.size() == 3
                      ? lam * saved[2]
                      : linear_recurrence_fused(af, conj_if_complex(x), f.dim, fwd, false, {}, lam))
               : lam * scanops::linear_recurrence(af, conj_if_complex(x), f.dim, fwd);
      da = grad_for(lam_h, a.scalar_type(), a.sym_sizes());
    }
    return {da, dx, {}, {}, {}, {}};
  }
};

// Along dim, the pairs (k, next(k)) of consecutive scan positions (next(k) = k + 1, or k - 1
// for reverse scans): fn(o, earlier, later) writes every pair's value to o, the view of out at
// the pairs' later (at_later) or earlier elements, reading views of the n - 1 earlier or later
// elements of a tensor through earlier(t) / later(t). The one position no pair covers there
// (the first in scan order, or the last) is set to fill. Narrowed views and out= variants:
// no shifted copy.
template <class Fn>
void along_pairs(at::Tensor& out, int64_t dim, bool reverse, bool at_later, const at::Scalar& fill,
                 Fn&& fn) {
  const c10::SymInt n = out.sym_size(dim);
  const int64_t e = reverse ? 1 : 0, l = 1 - e;  // offsets of the earlier / later elements' views
  const auto earlier = [&](const at::Tensor& t) { return t.narrow_symint(dim, e, n - 1); };
  const auto later = [&](const at::Tensor& t) { return t.narrow_symint(dim, l, n - 1); };
  at::Tensor o = at_later ? later(out) : earlier(out);
  fn(o, earlier, later);
  // uncovered: the first scan position (at_later) or the last one
  const bool low_end = at_later != reverse;
  out.narrow_symint(dim, low_end ? c10::SymInt(0) : n - 1, 1).fill_(fill);
}

// logcumsumexp(x; e, r) = y. dx[j] = sum over the outputs k that include x[j] (k at or after j
// in scan order; after j: exclusive) of g[k] exp(x[j] - y[k]). One rule on every path (fused,
// composite, complex; CPU and CUDA are the same code):
// - a NaN in g[k] makes NaN every dx[j] it reaches (the elements that output k includes), as
//   cumsum's backward does, and no other (torch's formula drops it: g > 0 and g < 0 are both
//   false for NaN, so it counts as 0; a finite result would hide garbage from downstream);
// - an element that reaches no output (an exclusive scan's last in scan order) gets exactly 0,
//   whatever x and g hold there (+inf or NaN included), also under double backward;
// - otherwise torch's special values: NaN where torch's gradient is NaN (a +inf input, an
//   element whose prefix up to some output is all -inf, a NaN input and everything before it).
// float16 / bfloat16 run in float32 from the input (LogcumsumexpFn::backward): the saved
// output, rounded to 8 or 11 bits, loses the differences y[k] - x[j] that the factors
// exp(x[j] - y[k]) need (at x = 10000 a bfloat16 ulp is 64).

// logcumsumexp's backward with no graph recorded (real float32 / float64): the internal op
// _logcumsumexp_backward (below), which runs the back end's one-scan kernel where it has one
// (ops/lse_grad.h: CUDA, float32, any dim; 16 bytes an element) and otherwise this composite: one
// linear recurrence over factors computed by elementwise passes (44 bytes an element).
// Inclusive: Q[j] = sum_{k >= j} g[k] exp(y[j] - y[k]) is the
// recurrence Q[j] = g[j] + c[next(j)] Q[next(j)], c[k] = exp(y[prev(k)] - y[k]) in [0, 1], and
// dx = exp(x - y) Q: one fused scan (lam = c * (g + lam) exclusive, + g, times exp(x - y)).
// Exclusive (y[next(j)] is the inclusive output at j, >= x[j]): dx[j] = exp(x[j] - y[next(j)])
// Q'[next(j)], Q'[j] = g[j] + a[j] Q'[next(j)], a[j] = exp(y[j] - y[next(j)]); the last 0.
// Every factor is an exp of a difference <= 0: no overflow, where torch's formula takes the
// logs of |g| and runs two log-sum-exp scans (compute bound) and ~15 elementwise passes.
// A NaN in g[k] reaches Q at k and every position before it (a coefficient 0 times NaN is
// NaN): the rule above.
// y is clamped to finite values for the coefficients: equal infinities (a +inf input and
// everything after it, or an all -inf prefix) give c = 1 instead of exp(inf - inf) = NaN,
// which would reach every earlier position through the recurrence (torch's gradient is finite
// there); a NaN output stays NaN, as in torch. The factor exp(x - y) keeps y's infinities:
// NaN where torch's is (the +inf input itself, an all -inf prefix).
// The recurrence accumulates in float64 (wide_acc): its coefficients are near 1 over long
// stretches (~ 1 - 1/k), where CUDA's trees of float32 products are biased: in float32 it was
// 5e-3 relative off on a 1-D 2^22 line, where torch's formula gives 7e-4 (H100, 2026-11-25).
at::Tensor logcumsumexp_backward_fused(const at::Tensor& x, const at::Tensor& y,
                                       const at::Tensor& g, const Flags& f) {
  const at::Scalar lowest = AT_DISPATCH_FLOATING_TYPES(
      g.scalar_type(), "scanops._logcumsumexp_backward",
      [] { return at::Scalar(std::numeric_limits<scalar_t>::lowest()); });
  const at::Scalar highest = -lowest.toDouble();
  // yc's buffer takes the factors exp(x - y) once the coefficients are read from it.
  at::Tensor yc = at::clamp(y, lowest, highest);
  const int64_t d = f.dim;
  const auto exp_diff = [](at::Tensor& o, const at::Tensor& u, const at::Tensor& v) {
    at::sub_out(o, u, v);
    o.exp_();
  };
  at::Tensor coef = at::empty_like(y, at::MemoryFormat::Contiguous);
  const ScanOptions back{.exclusive = true, .reverse = !f.reverse};
  if (!f.exclusive) {
    along_pairs(coef, d, f.reverse, /*at_later=*/true, 0,
                [&](at::Tensor& o, auto earlier, auto later) { exp_diff(o, earlier(yc), later(yc)); });
    exp_diff(yc, x, y);  // (yc: the factors now)
    return linear_recurrence_fused(coef, g, d, back, /*scale_x=*/true, g, yc,
                                   /*shift_mul=*/false, /*wide_acc=*/true);
  }
  along_pairs(coef, d, f.reverse, /*at_later=*/false, 0,
              [&](at::Tensor& o, auto earlier, auto later) { exp_diff(o, earlier(yc), later(yc)); });
  along_pairs(yc, d, f.reverse, /*at_later=*/false, 0,  // (yc: the factors now)
              [&](at::Tensor& o, auto earlier, auto later) { exp_diff(o, earlier(x), later(y)); });
  return linear_recurrence_fused(coef, g, d, back, /*scale_x=*/false, std::nullopt, yc,
                                 /*shift_mul=*/false, /*wide_acc=*/true);
}

// _logcumsumexp_backward's arguments: x, y and g of one shape, one floating dtype (float32 or
// float64: the autograd formula runs float16 / bfloat16 in float32) and one device, at least
// one dim. Returns dim wrapped.
int64_t check_lse_backward_args(const at::Tensor& x, const at::Tensor& y, const at::Tensor& g,
                                int64_t dim) {
  constexpr const char* op = "scanops._logcumsumexp_backward";
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dim");
  const int64_t d = c10::maybe_wrap_dim(dim, x.dim());
  for (const auto& [t, name] : {std::pair<const at::Tensor&, const char*>{y, "y"}, {g, "g"}}) {
    TORCH_CHECK(t.sym_sizes() == x.sym_sizes(), op, ": ", name, " must have x's shape ",
                x.sym_sizes(), ", got ", t.sym_sizes());
    TORCH_CHECK(t.scalar_type() == x.scalar_type(), op, ": ", name, " must have x's dtype ",
                x.scalar_type(), ", got ", t.scalar_type());
    TORCH_CHECK(t.device() == x.device(), op, ": ", name, " must be on x's device ",
                x.device(), ", got ", t.device());
  }
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble, op,
              ": x must be float32 or float64, got ", x.scalar_type());
  return d;
}

// _logcumsumexp_backward (CPU and CUDA): the back end's one-scan kernel where it has one for
// the problem (ops/lse_grad.h; CUDA: float32, ops/cuda/lse_grad.cu), else the fused
// composite above.
at::Tensor logcumsumexp_backward_kernel(const at::Tensor& x, const at::Tensor& y,
                                        const at::Tensor& g, int64_t dim, bool exclusive,
                                        bool reverse) {
  const int64_t d = check_lse_backward_args(x, y, g, dim);
  if (x.numel() == 0) return at::empty_like(x);
  const Backend* b = backend_of(x.device().type());
  at::Tensor dx;
  if (b != nullptr && b->lse_grad != nullptr && b->lse_grad(x, y, g, d, exclusive, reverse, dx)) {
    return dx;
  }
  return logcumsumexp_backward_fused(x, y, g, Flags{d, exclusive, reverse});
}
at::Tensor logcumsumexp_backward_meta(const at::Tensor& x, const at::Tensor& y,
                                      const at::Tensor& g, int64_t dim, bool /*exclusive*/,
                                      bool /*reverse*/) {
  check_lse_backward_args(x, y, g, dim);
  return at::empty_like(x, at::MemoryFormat::Contiguous);
}
at::Tensor logcumsumexp_backward(const at::Tensor& x, const at::Tensor& y, const at::Tensor& g,
                                 const Flags& f) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("scanops::_logcumsumexp_backward", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                            bool, bool)>();
  return op.call(x, y, g, f.dim, f.exclusive, f.reverse);
}

// x with an exclusive scan's last element in scan order (the one that reaches no output) set
// to 0. The composite formulas below give that element exp(x + L), L the back scan's identity
// -inf: exp(-inf + x) is NaN for x = +inf (or NaN), exp(-inf + 0) exactly 0, and nothing
// non-finite enters the graph there, so its higher derivatives are 0 too.
// Segmented (reset): every segment's last element in scan order reaches no output.
at::Tensor unreached_to_zero(const at::Tensor& x, const Flags& f,
                             const std::optional<at::Tensor>& reset) {
  const c10::SymInt n = x.sym_size(f.dim);
  if (has(reset)) {
    // forward: position n - 1, or followed by a segment start; reverse: position 0, or a start
    const at::Tensor r = reset->expand_symint(x.sym_sizes());
    const at::Tensor end = at::ones_like(r.narrow_symint(f.dim, 0, 1));
    const at::Tensor last = f.reverse ? at::cat({end, r.narrow_symint(f.dim, 1, n - 1)}, f.dim)
                                      : at::cat({r.narrow_symint(f.dim, 1, n - 1), end}, f.dim);
    return at::where(last, at::zeros({}, x.options()), x);
  }
  const at::Tensor zero = at::zeros_like(x.narrow_symint(f.dim, 0, 1));
  return f.reverse ? at::cat({zero, x.narrow_symint(f.dim, 1, n - 1)}, f.dim)
                   : at::cat({x.narrow_symint(f.dim, 0, n - 1), zero}, f.dim);
}

// dx from x, its output y and the incoming gradient g (one dtype: float32, float64 or complex;
// at least one element, at least one dim). With create_graph, and for complex g, torch's
// formula: dx_k = exp(x_k + logcumsumexp(log g - y; e, !r)_k), with the positive and negative
// parts of g apart so that logs stay real (one complex scan for complex g); a NaN in g is NaN
// in both parts (torch's g > 0 / g < 0 masks would drop it). Otherwise (no reset)
// _logcumsumexp_backward, above.
at::Tensor logcumsumexp_grad(const at::Tensor& x, const at::Tensor& y, const at::Tensor& g,
                             const Flags& f, const std::optional<at::Tensor>& reset) {
  const ScanOptions back = seg(f.exclusive, !f.reverse, reset);
  if (g.is_complex()) {
    // log(0) is -inf + 0j, whose derivative is not finite: zero gradients take a finite
    // stand-in under a where, so double backward stays finite (torch's formula gives NaN).
    // A NaN (either part) is no zero: its log is NaN and reaches what it reaches.
    const at::Tensor zero = g == 0;
    const at::Tensor log_g = at::where(zero, at::scalar_tensor(-1e30, y.options()),
                                       at::where(zero, at::ones_like(g), g).conj().log());
    const at::Tensor xe = f.exclusive ? unreached_to_zero(x, f, reset) : x;
    const at::Tensor out = (scanops::logcumsumexp(log_g - y, f.dim, back) + xe).exp();
    return out.conj();
  }
  if (fuse_backward() && !has(reset)) return logcumsumexp_backward(x, y, g, f);
  const at::Scalar lowest = AT_DISPATCH_FLOATING_TYPES(
      g.scalar_type(), "scanops.logcumsumexp_backward",
      [] { return at::Scalar(std::numeric_limits<scalar_t>::lowest()); });
  const at::Tensor floor = at::scalar_tensor(lowest, g.options());
  const at::Tensor log_abs = g.abs().log();
  const at::Tensor log_pos = at::where(g <= 0, floor, log_abs);  // NaN stays NaN
  const at::Tensor log_neg = at::where(g >= 0, floor, log_abs);
  const at::Tensor xe = f.exclusive ? unreached_to_zero(x, f, reset) : x;
  const at::Tensor pos = (scanops::logcumsumexp(log_pos - y, f.dim, back) + xe).exp();
  const at::Tensor neg = (scanops::logcumsumexp(log_neg - y, f.dim, back) + xe).exp();
  return pos - neg;
}

bool is_half_precision(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

class LogcumsumexpFn : public torch::autograd::Function<LogcumsumexpFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, int64_t dim,
                            bool exclusive, bool reverse, const std::optional<at::Tensor>& reset) {
    save_flags(ctx, dim, exclusive, reverse);
    save_reset(ctx, reset);
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = scanops::logcumsumexp(self, dim, seg(exclusive, reverse, reset));
    // (float16 / bfloat16: the backward recomputes the output in float32)
    if (is_half_precision(self.scalar_type())) {
      ctx->save_for_backward({self});
    } else {
      ctx->save_for_backward({self, out});
    }
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& self = saved[0];
    const at::Tensor& g = grads[0];
    // (0-dim: y = x, dx = g; exclusive: y = -inf, reaching no output: 0)
    if (self.dim() == 0) return {f.exclusive ? at::zeros_like(g) : g, {}, {}, {}, {}};
    if (g.sym_numel() == 0) return {g, {}, {}, {}, {}};
    const auto reset = load_reset(ctx);
    if (saved.size() == 2) return {logcumsumexp_grad(self, saved[1], g, f, reset), {}, {}, {}, {}};
    // float16 / bfloat16: x, y and g in float32, y recomputed from x (one more scan), rounded
    // once at the end. With the saved output, the bfloat16 gradient of PyTorch's OpInfo
    // sample (5, 5, 5) along dim 1 (a slab of 10000s) was 4.1 off, torch's 1.5; now 0.006
    // (test/python/test_lse_backward.py compares every sample and long lines with torch).
    const at::Tensor x = self.to(at::kFloat);
    const at::Tensor y = scanops::logcumsumexp(x, f.dim, seg(f.exclusive, f.reverse, reset));
    return {logcumsumexp_grad(x, y, g.to(at::kFloat), f, reset).to(self.scalar_type()), {}, {},
            {}, {}};
  }
};

// t shifted by one along dim towards higher (up = true: u[k] = t[k-1]) or lower positions
// (u[k] = t[k+1]), the vacated end filled with `fill`.
at::Tensor shift_along(const at::Tensor& t, int64_t dim, bool up, const at::Scalar& fill) {
  const c10::SymInt n = t.sym_size(dim);
  at::Tensor pad = at::full_symint({1}, fill, t.options());
  std::vector<c10::SymInt> pad_sizes(t.sym_sizes().begin(), t.sym_sizes().end());
  pad_sizes[dim] = 1;
  pad = pad.expand_symint(pad_sizes);
  if (up) return at::cat({pad, t.narrow_symint(dim, 0, n - 1)}, dim);
  return at::cat({t.narrow_symint(dim, 1, n - 1), pad}, dim);
}

// cummax / cummin (values y, indices j; e, r). The gradient of x_k is the sum of g over the
// outputs whose index is k. Those outputs are one contiguous run in scan order (the index only
// moves forward), starting at k (inclusive) or at the position after k in scan order
// (exclusive). The run sums come from one linear recurrence run against the scan order, with
// coefficient 1 inside a run and 0 at its end: a segmented sum in a fixed order (no atomics,
// run-to-run identical, unlike scatter_add on CUDA), linear in g, so differentiable again.
class CumExtremumFn : public torch::autograd::Function<CumExtremumFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& self, int64_t dim,
                               bool exclusive, bool reverse, bool is_max,
                               const std::optional<at::Tensor>& reset) {
    at::AutoDispatchBelowADInplaceOrView guard;
    // The op checks its arguments (errors name it) before dim is wrapped here.
    // (Segments need nothing in the backward: the indices hold them, each run of equal indices
    // lies inside one segment.)
    const ScanOptions o = seg(exclusive, reverse, reset);
    auto [values, indices] = is_max ? scanops::cummax(self, dim, o) : scanops::cummin(self, dim, o);
    save_flags(ctx, c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1)), exclusive,
               reverse);
    ctx->mark_non_differentiable({indices});
    ctx->save_for_backward({indices});
    return {values, indices};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Flags f = load_flags(ctx);
    const at::Tensor idx = ctx->get_saved_variables()[0];
    const at::Tensor& g = grads[0];
    if (idx.dim() == 0) return {f.exclusive ? at::zeros_like(g) : g, {}, {}, {}, {}, {}};
    if (g.sym_numel() == 0) return {g, {}, {}, {}, {}, {}};
    const int64_t d = f.dim;
    std::vector<c10::SymInt> pos_shape(idx.dim(), c10::SymInt(1));
    pos_shape[d] = idx.sym_size(d);
    const at::Tensor pos =
        at::arange(at::Scalar(idx.sym_size(d)), idx.options()).view_symint(pos_shape);
    if (fuse_backward()) {
      // One fused scan against the scan order (no graph recorded). Inclusive: the run of k
      // starts at k (idx[k] == k, a head); lam = c * (g + lam) exclusive with c = (idx != pos),
      // 0 at every head, so lam[k] + g[k] is g's sum from k to the end of k's run, kept at the
      // heads: dx = head * (lam + g). Exclusive: the run of k starts at next(k);
      // Q[k] = g[k] + a[k] Q[next(k)], a[k] = (idx[k] == idx[next(k)]), and dx[k] =
      // Q[next(k)] (the exclusive scan's value at k) where idx[next(k)] == k.
      const ScanOptions back{.exclusive = true, .reverse = !f.reverse};
      at::Tensor coef = at::empty_like(g, at::MemoryFormat::Contiguous);
      if (!f.exclusive) {
        const at::Tensor head = at::eq(idx, pos);
        at::logical_not_out(coef, head);
        return {linear_recurrence_fused(coef, g, d, back, /*scale_x=*/true, g, head),
                {}, {}, {}, {}, {}};
      }
      along_pairs(coef, d, f.reverse, /*at_later=*/false, 0,
                  [&](at::Tensor& o, auto earlier, auto later) {
                    at::eq_out(o, earlier(idx), later(idx));
                  });
      at::Tensor head = at::empty_like(idx, idx.options().dtype(at::kBool),
                                       at::MemoryFormat::Contiguous);
      along_pairs(head, d, f.reverse, /*at_later=*/false, false,
                  [&](at::Tensor& o, auto earlier, auto later) {
                    at::eq_out(o, later(idx), earlier(pos));
                  });
      return {linear_recurrence_fused(coef, g, d, back, /*scale_x=*/false, std::nullopt, head),
              {}, {}, {}, {}, {}};
    }
    // Next position in scan order: k+1 (forward scans), k-1 (reverse).
    const bool up = f.reverse;  // shift_along(t, up = reverse)[k] = t[next(k)]
    const at::Tensor next_idx = shift_along(idx, d, up, -2);
    const at::Tensor same_run = (idx == next_idx).to(g.scalar_type());
    const at::Tensor h = scanops::linear_recurrence(same_run, g, d, {.reverse = !f.reverse});
    at::Tensor dx;
    if (f.exclusive) {
      dx = at::where(next_idx == pos, shift_along(h, d, up, 0), at::zeros({}, g.options()));
    } else {
      dx = at::where(idx == pos, h, at::zeros({}, g.options()));
    }
    return {dx, {}, {}, {}, {}, {}};
  }
};

// When no input needs a gradient (inference, or inputs that do not require grad) the op goes
// straight to the device kernel below Autograd: no autograd node, no saved state (this is
// most of the host time of a small call).
bool wants_grad(const at::Tensor& t) {
  return at::GradMode::is_enabled() && t.requires_grad();
}
bool wants_grad(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() && wants_grad(*t);
}
// ---- `initial` under autograd ----------------------------------------------------------
// When a gradient is wanted, an op with `initial` runs as the op without it on the line with
// the initial value prepended (ops/prepend.h), so every formula above, its fusions, complex
// inputs and higher derivatives serve `initial` too, and the gradient of v is that of the
// prepended element (summed over a broadcast v by expand's backward). It costs a copy of the
// operands in the forward (the values are those of the kernels' own initial state up to the
// rounding of a different association of floating sums); without a gradient the device
// kernels take `initial` directly. The op's own checks run first, so that errors name it.

// With segments the joined line keeps all of self and the op runs as itself (exclusive too):
// the plain form's exclusive-as-inclusive shift would move each segment's first value across
// its boundary.
// reset on the line with the initial value prepended: the added element starts no segment,
// and (forward scans) neither does the line's own first element: `initial` belongs to the
// line's first segment in scan order.
std::optional<at::Tensor> join_reset(const Prepended& p, const std::optional<at::Tensor>& reset) {
  if (!has(reset)) return std::nullopt;
  at::Tensor r = reset->expand_symint(p.sizes);
  if (!p.reverse) {
    r = r.clone();
    r.narrow_symint(p.dim, 0, 1).fill_(false);
  }
  return p.join(at::zeros_like(p.ones_head(reset->options())), r);
}

ScanOperands checked_operands(ScanOperands in, const std::optional<at::Tensor>& initial,
                              const std::optional<at::Tensor>& reset) {
  in.initial = has(initial) ? &*initial : nullptr;
  in.reset = has(reset) ? &*reset : nullptr;
  return in;
}

at::Tensor cumsum_autograd(const at::Tensor& self, int64_t dim, bool exclusive, bool reverse,
                           std::optional<at::ScalarType> dtype,
                           const std::optional<at::Tensor>& initial,
                           const std::optional<at::Tensor>& reset) {
  if (!wants_grad(self) && !wants_grad(initial)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::cumsum(self, dim, {exclusive, reverse, dtype, initial, reset});
  }
  if (!has(initial)) return CumsumFn::apply(self, dim, exclusive, reverse, dtype, reset);
  check_scan_args(catalog::cumsum_spec(exclusive, reverse),
                  checked_operands(ScanOperands{self}, initial, reset), dim, dtype);
  at::Tensor x = self;
  const Prepended p = Prepended::plan(x, dim, exclusive && !has(reset), reverse);
  const auto rd = initial->scalar_type();
  at::Tensor xr = x.scalar_type() == rd ? x : x.to(rd);
  const at::Tensor y = CumsumFn::apply(p.join(p.head(*initial, rd), xr), p.dim, exclusive && has(reset), reverse,
                                       std::nullopt, join_reset(p, reset));
  return p.take(y);
}
at::Tensor masked_cumsum_autograd(const at::Tensor& self, const at::Tensor& mask, int64_t dim,
                                  bool exclusive, bool reverse,
                                  std::optional<at::ScalarType> dtype,
                                  const std::optional<at::Tensor>& initial,
                                  const std::optional<at::Tensor>& reset) {
  if (!wants_grad(self) && !wants_grad(initial)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::masked_cumsum(self, mask, dim, {exclusive, reverse, dtype, initial, reset});
  }
  if (!has(initial)) {
    return MaskedCumsumFn::apply(self, mask, dim, exclusive, reverse, dtype, reset);
  }
  check_scan_args(catalog::masked_cumsum_spec(exclusive, reverse),
                  checked_operands(ScanOperands{self, &mask}, initial, reset), dim, dtype);
  at::Tensor x = self;
  const Prepended p = Prepended::plan(x, dim, exclusive && !has(reset), reverse);
  const auto rd = initial->scalar_type();
  at::Tensor xr = x.scalar_type() == rd ? x : x.to(rd);
  const at::Tensor m = p.join(p.ones_head(mask.options()), mask);
  const at::Tensor y = MaskedCumsumFn::apply(p.join(p.head(*initial, rd), xr), m, p.dim, exclusive && has(reset),
                                             reverse, std::nullopt, join_reset(p, reset));
  return p.take(y);
}
at::Tensor cumprod_autograd(const at::Tensor& self, int64_t dim, bool exclusive, bool reverse,
                            std::optional<at::ScalarType> dtype,
                            const std::optional<at::Tensor>& initial,
                            const std::optional<at::Tensor>& reset) {
  if (!wants_grad(self) && !wants_grad(initial)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::cumprod(self, dim, {exclusive, reverse, dtype, initial, reset});
  }
  if (!has(initial)) return CumprodFn::apply(self, dim, exclusive, reverse, dtype, reset);
  check_scan_args(catalog::cumprod_spec(exclusive, reverse),
                  checked_operands(ScanOperands{self}, initial, reset), dim, dtype);
  at::Tensor x = self;
  const Prepended p = Prepended::plan(x, dim, exclusive && !has(reset), reverse);
  const auto rd = initial->scalar_type();
  at::Tensor xr = x.scalar_type() == rd ? x : x.to(rd);
  const at::Tensor y = CumprodFn::apply(p.join(p.head(*initial, rd), xr), p.dim, exclusive && has(reset), reverse,
                                        std::nullopt, join_reset(p, reset));
  return p.take(y);
}
at::Tensor linear_recurrence_autograd(const at::Tensor& a, const at::Tensor& x, int64_t dim,
                                      bool exclusive, bool reverse,
                                      const std::optional<at::Tensor>& initial,
                                      const std::optional<at::Tensor>& reset) {
  if (!wants_grad(a) && !wants_grad(x) && !wants_grad(initial)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::linear_recurrence(a, x, dim, {exclusive, reverse, std::nullopt, initial, reset});
  }
  if (!has(initial)) return LinearRecurrenceFn::apply(a, x, dim, exclusive, reverse, reset);
  check_scan_args(catalog::linear_recurrence_spec(exclusive, reverse),
                  checked_operands(ScanOperands{x, nullptr, &a, "x", "a"}, initial, reset), dim,
                  std::nullopt);
  at::Tensor xx = x;
  const Prepended p = Prepended::plan(xx, dim, exclusive && !has(reset), reverse);
  // h[-1] = v is the element (coefficient 1, input v) before x[0]: 1 * 0 + v.
  const at::Tensor ap = p.join(p.ones_head(a.options()), a);
  const at::Tensor y =
      LinearRecurrenceFn::apply(ap, p.join(p.head(*initial, x.scalar_type()), xx), p.dim, exclusive && has(reset),
                                reverse, join_reset(p, reset));
  return p.take(y);
}

at::Tensor logcumsumexp_autograd(const at::Tensor& self, int64_t dim, bool exclusive,
                                 bool reverse, const std::optional<at::Tensor>& initial,
                                 const std::optional<at::Tensor>& reset) {
  if (!wants_grad(self) && !wants_grad(initial)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return scanops::logcumsumexp(self, dim, {exclusive, reverse, std::nullopt, initial, reset});
  }
  if (!has(initial)) return LogcumsumexpFn::apply(self, dim, exclusive, reverse, reset);
  check_scan_args(catalog::logcumsumexp_spec(exclusive, reverse),
                  checked_operands(ScanOperands{self}, initial, reset), dim, std::nullopt);
  at::Tensor x = self;
  const Prepended p = Prepended::plan(x, dim, exclusive && !has(reset), reverse);
  const at::Tensor y = LogcumsumexpFn::apply(p.join(p.head(*initial, x.scalar_type()), x), p.dim,
                                             exclusive && has(reset), reverse, join_reset(p, reset));
  return p.take(y);
}
std::tuple<at::Tensor, at::Tensor> cum_extremum_autograd(const at::Tensor& self, int64_t dim,
                                                         bool exclusive, bool reverse,
                                                         bool is_max,
                                                         const std::optional<at::Tensor>& initial,
                                                         const std::optional<at::Tensor>& reset) {
  const bool diff = is_differentiable(self.scalar_type());
  if ((!wants_grad(self) && !wants_grad(initial)) || !diff) {
    at::AutoDispatchBelowADInplaceOrView guard;
    const ScanOptions o{exclusive, reverse, std::nullopt, initial, reset};
    return is_max ? scanops::cummax(self, dim, o) : scanops::cummin(self, dim, o);
  }
  if (!has(initial)) {
    auto out = CumExtremumFn::apply(self, dim, exclusive, reverse, is_max, reset);
    return {out[0], out[1]};
  }
  check_scan_args(is_max ? catalog::cummax_spec(exclusive, reverse)
                         : catalog::cummin_spec(exclusive, reverse),
                  checked_operands(ScanOperands{self}, initial, reset), dim, std::nullopt);
  at::Tensor x = self;
  const Prepended p = Prepended::plan(x, dim, exclusive && !has(reset), reverse);
  auto out = CumExtremumFn::apply(p.join(p.head(*initial, x.scalar_type()), x), p.dim, exclusive && has(reset),
                                  reverse, is_max, join_reset(p, reset));
  return {p.take(out[0]), p.take_indices(out[1])};
}
std::tuple<at::Tensor, at::Tensor> cummax_autograd(const at::Tensor& self, int64_t dim,
                                                   bool exclusive, bool reverse,
                                                   const std::optional<at::Tensor>& initial,
                                                   const std::optional<at::Tensor>& reset) {
  return cum_extremum_autograd(self, dim, exclusive, reverse, true, initial, reset);
}
std::tuple<at::Tensor, at::Tensor> cummin_autograd(const at::Tensor& self, int64_t dim,
                                                   bool exclusive, bool reverse,
                                                   const std::optional<at::Tensor>& initial,
                                                   const std::optional<at::Tensor>& reset) {
  return cum_extremum_autograd(self, dim, exclusive, reverse, false, initial, reset);
}

}  // namespace
}  // namespace scanops

TORCH_LIBRARY_IMPL(scanops, Autograd, m) {
  m.impl("cumsum", &scanops::cumsum_autograd);
  m.impl("masked_cumsum", &scanops::masked_cumsum_autograd);
  m.impl("cumprod", &scanops::cumprod_autograd);
  m.impl("linear_recurrence", &scanops::linear_recurrence_autograd);
  m.impl("logcumsumexp", &scanops::logcumsumexp_autograd);
  m.impl("cummax", &scanops::cummax_autograd);
  m.impl("cummin", &scanops::cummin_autograd);
}

// The internal op of logcumsumexp's backward (no autograd of its own: called with no graph
// recorded): its kernels are here, beside the composite formula they fall back to.
TORCH_LIBRARY_IMPL(scanops, CPU, m) {
  m.impl("_logcumsumexp_backward", &scanops::logcumsumexp_backward_kernel);
}
TORCH_LIBRARY_IMPL(scanops, CUDA, m) {
  m.impl("_logcumsumexp_backward", &scanops::logcumsumexp_backward_kernel);
}
TORCH_LIBRARY_IMPL(scanops, Meta, m) {
  m.impl("_logcumsumexp_backward", &scanops::logcumsumexp_backward_meta);
}
