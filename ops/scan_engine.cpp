// scanops: argument checks, dtype policy and the canonical view, shared by every op and
// every back end (and by the Meta kernels, which run the same checks).
#include "ops/scan_engine.h"

#include "ops/prepend.h"

#include <ATen/ATen.h>
#include <c10/core/WrapDimMinimal.h>

#include <atomic>

namespace scanops {

namespace {

bool is_real_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kByte:
    case at::kBool:
      return true;
    default:
      return false;
  }
}
bool is_complex_dtype(at::ScalarType t) {
  return t == at::kComplexFloat || t == at::kComplexDouble;
}
bool is_float_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

constexpr const char* kAll =
    "float32, float64, float16, bfloat16, complex64, complex128, int8, int16, int32, int64, "
    "uint8, bool";
constexpr const char* kFloatComplex =
    "float32, float64, float16, bfloat16, complex64, complex128";
constexpr const char* kReal = "float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool";

// The CUDA back end, set once at library load time (ops/cuda/scan_cuda.cpp).
Backend g_cuda;
std::atomic<const Backend*> g_cuda_backend{nullptr};

// The CPU back end: its capabilities are its own (scan_cpu_caps); the engine converts the rest
// (today: companions materialised, input scaling, epilogue and shifts done around the scan).
const Backend& cpu_backend() {
  static const Backend b{&scan_cpu, scan_cpu_caps(), &jagged_offsets_cpu};
  return b;
}

}  // namespace

void register_cuda_backend(const Backend& backend) {
  g_cuda = backend;
  g_cuda_backend.store(&g_cuda);
}
const Backend* cuda_backend() { return g_cuda_backend.load(); }
const Backend* backend_of(c10::DeviceType device) {
  switch (device) {
    case c10::DeviceType::CPU:
      return &cpu_backend();
    case c10::DeviceType::CUDA:
      return cuda_backend();
    default:
      return nullptr;
  }
}

at::ScalarType result_dtype(const ScanSpec& spec, at::ScalarType self_dtype,
                            std::optional<at::ScalarType> dtype, const char* self_name) {
  const char* op = spec.op_name;
  switch (spec.kind) {
    case CombineKind::Sum:
    case CombineKind::Prod: {
      TORCH_CHECK(is_real_dtype(self_dtype) || is_complex_dtype(self_dtype), op, ": argument '",
                  self_name, "' has unsupported dtype ", self_dtype, " (supported: ", kAll, ")");
      if (dtype.has_value()) {
        const auto d = *dtype;
        TORCH_CHECK(d != at::kBool, op, ": argument 'dtype' = Bool cannot hold the result of a ",
                    "scan (a sum or product); use an integral, floating or complex dtype");
        TORCH_CHECK(is_real_dtype(d) || is_complex_dtype(d), op, ": argument 'dtype' = ", d,
                    " is not supported (supported: ", kAll, " except bool)");
        return d;
      }
      if (at::isIntegralType(self_dtype, /*includeBool=*/true)) return at::kLong;
      return self_dtype;
    }
    case CombineKind::Affine:
    case CombineKind::LogAddExp:
      TORCH_CHECK(is_float_dtype(self_dtype) || is_complex_dtype(self_dtype), op,
                  ": argument '", self_name, "' has dtype ", self_dtype, "; ",
                  spec.kind == CombineKind::Affine ? "a linear recurrence" : "logcumsumexp",
                  " needs a floating or complex dtype (", kFloatComplex, ")");
      TORCH_CHECK(!dtype.has_value(), op, ": internal error: this op takes no dtype");
      return self_dtype;
    case CombineKind::Max:
    case CombineKind::Min:
      TORCH_CHECK(is_real_dtype(self_dtype), op, ": argument '", self_name, "' has dtype ",
                  self_dtype, "; ", spec.kind == CombineKind::Max ? "cummax" : "cummin",
                  " needs a real or bool dtype (", kReal,
                  "): complex numbers have no order");
      TORCH_CHECK(!dtype.has_value(), op, ": internal error: this op takes no dtype");
      return self_dtype;
  }
  TORCH_CHECK(false, op, ": internal error: unknown combine kind");
}

namespace {

// Whether a tensor of shape `from` broadcasts to `to` (as expand: `to` is kept).
bool broadcasts_to(c10::SymIntArrayRef from, c10::SymIntArrayRef to) {
  if (from.size() > to.size()) return false;
  for (size_t k = 0; k < from.size(); ++k) {
    const auto& m = from[from.size() - 1 - k];
    if (!(m == 1) && !(m == to[to.size() - 1 - k])) return false;
  }
  return true;
}

// mask / coeff: same device as self, broadcastable to self's shape.
void check_companion(const ScanSpec& spec, const at::Tensor& self, const char* self_name,
                     const at::Tensor& t, const char* name) {
  const char* op = spec.op_name;
  TORCH_CHECK(t.defined(), op, ": argument '", name, "' is an undefined tensor");
  TORCH_CHECK(t.device() == self.device(), op, ": argument '", name, "' is on ", t.device(),
              " but argument '", self_name, "' is on ", self.device(),
              "; both must be on the same device");
  const auto ts = t.sym_sizes();
  const auto xs = self.sym_sizes();
  TORCH_CHECK(broadcasts_to(ts, xs), op, ": argument '", name, "' of shape ", ts,
              " is not broadcastable to the shape of argument '", self_name, "', ", xs);
}

// initial: the result dtype, self's device, broadcastable to self's shape without dim `d`.
void check_initial(const ScanSpec& spec, const ScanOperands& in, int64_t d,
                   at::ScalarType out_dtype) {
  const char* op = spec.op_name;
  const at::Tensor& t = *in.initial;
  const at::Tensor& self = in.self;
  TORCH_CHECK(t.scalar_type() == out_dtype, op, ": argument 'initial' has dtype ",
              t.scalar_type(), " but the result has dtype ", out_dtype,
              "; they must match (the scan's state is of the result dtype)");
  TORCH_CHECK(t.device() == self.device(), op, ": argument 'initial' is on ", t.device(),
              " but argument '", in.self_name, "' is on ", self.device(),
              "; both must be on the same device");
  const auto ts = t.sym_sizes();
  const auto xs = self.sym_sizes();
  std::vector<c10::SymInt> line;  // self's shape without d
  for (int64_t k = 0; k < static_cast<int64_t>(xs.size()); ++k) {
    if (k != d) line.push_back(xs[k]);
  }
  TORCH_CHECK(broadcasts_to(ts, line), op, ": argument 'initial' of shape ", ts,
              " is not broadcastable to the shape of argument '", in.self_name,
              "' without the scan dim ", d, ", ", c10::SymIntArrayRef(line),
              " (one value per line)");
}

}  // namespace

int64_t check_scan_args(const ScanSpec& spec, const ScanOperands& in, int64_t dim,
                        std::optional<at::ScalarType> dtype) {
  const char* op = spec.op_name;
  const at::Tensor& self = in.self;
  TORCH_CHECK(self.defined(), op, ": argument '", in.self_name, "' is an undefined tensor");
  (void)result_dtype(spec, self.scalar_type(), dtype, in.self_name);
  const int64_t ndim = self.dim();
  const int64_t n = std::max<int64_t>(ndim, 1);
  TORCH_CHECK(dim >= -n && dim < n, op, ": argument 'dim' = ", dim,
              " is out of range for a tensor of ", ndim, " dimension(s) (expected a dim in [",
              -n, ", ", n - 1, "])");
  if (in.mask != nullptr) {
    TORCH_CHECK(!in.mask->defined() || in.mask->scalar_type() == at::kBool, op,
                ": argument 'mask' must be a bool tensor, got ", in.mask->scalar_type());
    check_companion(spec, self, in.self_name, *in.mask, "mask");
  }
  const auto out_dtype = result_dtype(spec, self.scalar_type(), dtype, in.self_name);
  TORCH_CHECK(!in.scale_input || spec.kind == CombineKind::Affine, op,
              ": an input scaled by its coefficient needs a linear recurrence");
  TORCH_CHECK(!kind_is_indexed(spec.kind) || (in.add == nullptr && in.mul == nullptr), op,
              ": cummax / cummin take no output epilogue");
  if (in.add != nullptr && in.add->defined()) {
    TORCH_CHECK(in.add->scalar_type() == out_dtype, op, ": argument 'add' has dtype ",
                in.add->scalar_type(), " but the result has dtype ", out_dtype,
                "; they must match");
    check_companion(spec, self, in.self_name, *in.add, "add");
  }
  if (in.mul != nullptr && in.mul->defined()) {
    TORCH_CHECK(in.mul->scalar_type() == out_dtype || in.mul->scalar_type() == at::kBool, op,
                ": argument 'mul' has dtype ", in.mul->scalar_type(),
                " but the result has dtype ", out_dtype, "; it must match, or be bool");
    check_companion(spec, self, in.self_name, *in.mul, "mul");
  }
  TORCH_CHECK(!in.shift_mul || (in.mul != nullptr && in.mul->defined()), op,
              ": shift_mul needs a tensor 'mul'");
  TORCH_CHECK(!in.mul_second || (in.shift_mul && in.mul->scalar_type() == out_dtype), op,
              ": a second output needs shift_mul and a 'mul' of the result dtype");
  if (in.initial != nullptr && in.initial->defined()) {
    check_initial(spec, in, c10::maybe_wrap_dim(dim, n), out_dtype);
  }
  if (in.reset != nullptr && in.reset->defined()) {
    TORCH_CHECK(in.reset->scalar_type() == at::kBool, op,
                ": argument 'reset' must be a bool tensor, got ", in.reset->scalar_type());
    check_companion(spec, self, in.self_name, *in.reset, "reset");
    TORCH_CHECK(in.add == nullptr && in.mul == nullptr && !in.scale_input && !in.shift_mul &&
                    !in.mul_second,
                op, ": internal error: segments with a fused epilogue");
  }
  if (in.coeff != nullptr) {
    TORCH_CHECK(!in.coeff->defined() || in.coeff->scalar_type() == self.scalar_type(), op,
                ": argument '", in.coeff_name, "' has dtype ", in.coeff->scalar_type(),
                " but argument '", in.self_name, "' has dtype ", self.scalar_type(),
                "; they must match");
    check_companion(spec, self, in.self_name, *in.coeff, in.coeff_name);
  }
  return c10::maybe_wrap_dim(dim, n);
}

at::Tensor scan_meta(const ScanSpec& spec, const ScanOperands& in, int64_t dim,
                     std::optional<at::ScalarType> dtype) {
  check_scan_args(spec, in, dim, dtype);
  return at::empty_symint(
      in.self.sym_sizes(),
      in.self.options().dtype(result_dtype(spec, in.self.scalar_type(), dtype, in.self_name)),
      at::MemoryFormat::Contiguous);
}

std::tuple<at::Tensor, at::Tensor> scan_meta_pair(const ScanSpec& spec, const ScanOperands& in,
                                                  int64_t dim) {
  at::Tensor values = scan_meta(spec, in, dim, std::nullopt);
  return {values, at::empty_like(values)};
}

std::tuple<at::Tensor, at::Tensor> scan_meta_indexed(const ScanSpec& spec,
                                                     const ScanOperands& in, int64_t dim) {
  at::Tensor values = scan_meta(spec, in, dim, std::nullopt);
  at::Tensor indices = at::empty_symint(in.self.sym_sizes(), in.self.options().dtype(at::kLong),
                                        at::MemoryFormat::Contiguous);
  return {values, indices};
}

namespace {

// The canonical strides (outer, scan, inner) of `t` expanded to `sizes`, scanned along `d`,
// when the expansion broadcasts (a stride-0 dim of more than one element) and each group of
// dims (before d, d, after d) merges into one stride; nullopt otherwise (the caller then
// materialises a contiguous copy).
std::optional<BroadcastStrides> in_place_strides(const at::Tensor& t, at::IntArrayRef sizes,
                                                 int64_t d) {
  if (sizes.empty()) return std::nullopt;
  const at::Tensor e = t.expand(sizes);
  const auto st = e.strides();
  bool broadcast = false;
  for (size_t k = 0; k < sizes.size(); ++k) broadcast |= sizes[k] > 1 && st[k] == 0;
  if (!broadcast) return std::nullopt;
  // One stride for dims [b, end) if each non-singleton dim steps over the next one whole.
  const auto merge = [&](int64_t b, int64_t end, int64_t& stride) {
    stride = 0;
    bool first = true;
    int64_t expect = 0;
    for (int64_t k = end - 1; k >= b; --k) {
      if (sizes[k] == 1) continue;
      if (!first && st[k] != expect) return false;
      if (first) stride = st[k];
      first = false;
      expect = st[k] * sizes[k];
    }
    return true;
  };
  BroadcastStrides s;
  s.in_place = true;
  if (!merge(0, d, s.so) || !merge(d, d + 1, s.sl) ||
      !merge(d + 1, static_cast<int64_t>(sizes.size()), s.si)) {
    return std::nullopt;
  }
  return s;
}

// ScanOperands::shift_mul materialised: m moved one scan position back along d (the element
// at scan position k is m's at k + 1), the last position of each line filled with `fill`.
at::Tensor shift_on(const at::Tensor& m, int64_t d, bool reverse, int fill) {
  if (m.dim() == 0) return at::full_like(m, fill);
  const int64_t n = m.size(d);
  const at::Tensor end = at::full_like(m.narrow(d, 0, 1), fill);
  return reverse ? at::cat({end, m.narrow(d, 0, n - 1)}, d)
                 : at::cat({m.narrow(d, 1, n - 1), end}, d);
}

// The back end of self's device; errors name the op and the argument.
const Backend& backend_for(const ScanSpec& spec, const ScanOperands& in) {
  const auto device = in.self.device();
  switch (device.type()) {
    case c10::DeviceType::CPU:
      return cpu_backend();
    case c10::DeviceType::CUDA: {
      const Backend* b = cuda_backend();
      TORCH_CHECK(b != nullptr, spec.op_name,
                  ": this build of scanops has no CUDA back end (configure with "
                  "SCANOPS_WITH_CUDA=ON)");
      return *b;
    }
    default:
      TORCH_CHECK(false, spec.op_name, ": argument '", in.self_name,
                  "' is on unsupported device ", device);
  }
}

std::tuple<at::Tensor, at::Tensor> run(const ScanSpec& spec, const ScanOperands& in,
                                       int64_t dim, std::optional<at::ScalarType> dtype);

// LineState::initial: `initial` broadcast to self's shape without d, contiguous, (conjugate
// and negative views resolved): outer * inner values, line (o, i) at o * inner + i.
at::Tensor line_values(const at::Tensor& initial, const at::Tensor& self, int64_t d) {
  std::vector<int64_t> line;
  for (int64_t k = 0; k < self.dim(); ++k) {
    if (k != d) line.push_back(self.size(k));
  }
  at::Tensor t = initial;
  if (t.is_conj()) t = t.resolve_conj();
  if (t.is_neg()) t = t.resolve_neg();
  return t.expand(line).contiguous();
}

// A back end without BackendCaps::line_state: the initial value prepended to every line
// (ops/prepend.h), the lines scanned from the identity, the added position dropped. The same
// values as a scan that starts from it, at the cost of a copy of the operands.
std::tuple<at::Tensor, at::Tensor> run_prepended(const ScanSpec& spec, const ScanOperands& in,
                                                 int64_t d, at::Tensor& output,
                                                 at::Tensor& indices) {
  at::Tensor x = in.self;
  // With segments the joined line keeps all of self and the scan keeps its own exclusive flag
  // (shifting an exclusive scan into an inclusive one would cross segment boundaries).
  const bool segmented = in.reset != nullptr && in.reset->defined();
  const Prepended p =
      Prepended::plan(x, d, spec.flags.exclusive && !segmented, spec.flags.reverse);
  const auto out_dtype = output.scalar_type();  // (the input converted to it, as dtype= does)
  const at::Tensor xp = p.join(p.head(*in.initial, out_dtype),
                               x.scalar_type() == out_dtype ? x : x.to(out_dtype));
  at::Tensor mp, ap;
  ScanOperands pin{xp};
  pin.self_name = in.self_name;
  pin.coeff_name = in.coeff_name;
  pin.wide_acc = in.wide_acc;
  if (in.mask != nullptr) {
    mp = p.join(p.ones_head(in.mask->options()), *in.mask);
    pin.mask = &mp;
  }
  if (in.coeff != nullptr) {
    ap = p.join(p.ones_head(in.coeff->options()), *in.coeff);
    pin.coeff = &ap;
  }
  at::Tensor rp;
  if (in.reset != nullptr && in.reset->defined()) {
    // The prepended element is no head, and (forward) neither is the element after it, the
    // line's first: `initial` belongs to the line's first segment.
    at::Tensor r = in.reset->expand(x.sizes());
    if (!spec.flags.reverse && x.dim() > 0) {
      r = r.clone();
      r.narrow(p.dim, 0, 1).fill_(false);
    }
    rp = p.join(at::zeros_like(p.ones_head(in.reset->options())), r);
    pin.reset = &rp;
  }
  ScanSpec ps = spec;
  ps.flags.exclusive = spec.flags.exclusive && segmented;
  auto [values, idx] = run(ps, pin, p.dim, std::nullopt);
  output.copy_(p.take(values));
  if (kind_is_indexed(spec.kind)) indices.copy_(p.take_indices(idx));
  return {output, indices};
}

// Checks, canonicalises, allocates (the output, and the indices for indexed kinds), converts
// what the back end does not take (BackendCaps) and runs it.
std::tuple<at::Tensor, at::Tensor> run(const ScanSpec& spec, const ScanOperands& in,
                                       int64_t dim, std::optional<at::ScalarType> dtype) {
  const at::Tensor& self = in.self;
  const int64_t d = check_scan_args(spec, in, dim, dtype);
  const auto out_dtype = result_dtype(spec, self.scalar_type(), dtype, in.self_name);
  at::Tensor output =
      at::empty(self.sizes(), self.options().dtype(out_dtype), at::MemoryFormat::Contiguous);
  at::Tensor indices;
  if (kind_is_indexed(spec.kind)) {
    indices = at::empty(self.sizes(), self.options().dtype(at::kLong),
                        at::MemoryFormat::Contiguous);
  }
  if (in.mul_second) indices = at::empty_like(output);  // (the second output)
  if (output.numel() == 0) return {output, indices};
  const Backend& backend = backend_for(spec, in);
  const BackendCaps& caps = backend.caps;
  const bool has_initial = in.initial != nullptr && in.initial->defined();
  TORCH_CHECK(!has_initial || (in.add == nullptr && in.mul == nullptr && !in.scale_input &&
                               !in.shift_mul && !in.mul_second),
              spec.op_name, ": internal error: an initial value with a fused epilogue");
  const bool segmented = in.reset != nullptr && in.reset->defined();
  TORCH_CHECK(!segmented || caps.segments, spec.op_name,
              ": internal error: a segmented scan on a back end without segments");
  if (has_initial && !caps.line_state) {
    return run_prepended(spec, in, d, output, indices);
  }

  ScanProblem p;
  p.spec = spec;
  p.wide_acc = in.wide_acc;
  const auto sizes = self.sizes();
  p.shape.length = self.dim() == 0 ? 1 : sizes[d];
  for (int64_t k = 0; k < d; ++k) p.shape.outer *= sizes[k];
  for (int64_t k = d + 1; k < self.dim(); ++k) p.shape.inner *= sizes[k];

  // Inputs. `dtype` converts before the scan (torch semantics); otherwise the kernels read the
  // input in its own dtype and widen on the fly (int8 -> int64, half -> float accumulate).
  // One pass at most: a conversion writes the contiguous layout directly.
  if (dtype.has_value() && *dtype != self.scalar_type()) {
    p.in.input = self.to(self.options().dtype(*dtype), /*non_blocking=*/false, /*copy=*/false,
                         at::MemoryFormat::Contiguous);
  } else {
    p.in.input = self.contiguous();
  }
  // Broadcast companions: read in place where the back end does (a strided view of self's
  // shape) and the dims merge, materialised otherwise.
  const auto companion = [&](const at::Tensor& t) {
    Companion c;
    c.t = t;
    if (c.t.is_conj()) c.t = c.t.resolve_conj();
    if (c.t.is_neg()) c.t = c.t.resolve_neg();
    if (caps.broadcast_in_place || segmented) {
      if (const auto s = in_place_strides(c.t, sizes, d)) {
        c.strides = *s;
        c.t = c.t.expand(sizes);
        return c;
      }
    }
    c.t = c.t.expand(sizes).contiguous();
    return c;
  };
  if (in.mask != nullptr) p.in.mask = companion(*in.mask);
  if (in.coeff != nullptr) p.in.coeff = companion(*in.coeff);
  if (segmented) p.segments.reset = companion(*in.reset);
  p.in.scale_input = in.scale_input;

  // The epilogue of the backward fusions, materialised.
  if (in.add != nullptr && in.add->defined()) p.epilogue.add = in.add->expand(sizes).contiguous();
  if (in.mul != nullptr && in.mul->defined()) p.epilogue.mul = in.mul->expand(sizes).contiguous();
  at::Tensor factor;  // mul_second, shifted here: the products' factors, applied after the scan
  if (in.shift_mul) {
    p.epilogue.shift_mul = true;
    if (caps.shift_mul != nullptr && caps.shift_mul(p)) {
      if (in.mul_second) p.epilogue.second = indices;
    } else {
      p.epilogue.shift_mul = false;
      if (in.mul_second) {
        factor = shift_on(p.epilogue.mul, d, spec.flags.reverse, 0);
        p.epilogue.mul = at::Tensor();
      } else {
        p.epilogue.mul = shift_on(p.epilogue.mul, d, spec.flags.reverse, 1);
      }
    }
  }
  // Lazy conjugate / negative views (x.conj(), as autograd's complex formulas pass) hold
  // the unconjugated data: the kernels read memory, so materialise them.
  for (at::Tensor* t : {&p.in.input, &p.epilogue.add, &p.epilogue.mul}) {
    if (t->defined() && t->is_conj()) *t = t->resolve_conj();
    if (t->defined() && t->is_neg()) *t = t->resolve_neg();
  }
  p.out.values = output;
  if (kind_is_indexed(spec.kind)) p.out.indices = indices;
  if (has_initial) p.state.initial = line_values(*in.initial, self, d);

  if (caps.fused_epilogue) {
    backend.run(p);
  } else {
    // The prologue and the epilogue as elementwise passes around the scan, in the composite
    // formulas' order (the same values, up to rounding of half types).
    at::Tensor add = std::move(p.epilogue.add), mul = std::move(p.epilogue.mul);
    p.epilogue = Epilogue{};
    if (p.in.scale_input) p.in.input = p.in.coeff.t * p.in.input;
    p.in.scale_input = false;
    backend.run(p);
    if (add.defined()) output.add_(add);
    if (mul.defined()) at::mul_out(output, mul, output);  // mul * y, as the formulas
  }
  // (mul_second, shifted here; the formula's order: lam * h[t-1])
  if (factor.defined()) at::mul_out(indices, output, factor);
  return {output, indices};
}

}  // namespace

at::Tensor scan(const ScanSpec& spec, const ScanOperands& in, int64_t dim,
                std::optional<at::ScalarType> dtype) {
  return std::get<0>(run(spec, in, dim, dtype));
}

std::tuple<at::Tensor, at::Tensor> scan_indexed(const ScanSpec& spec, const ScanOperands& in,
                                                int64_t dim) {
  return run(spec, in, dim, std::nullopt);
}

std::tuple<at::Tensor, at::Tensor> scan_pair(const ScanSpec& spec, const ScanOperands& in,
                                             int64_t dim) {
  TORCH_CHECK(in.mul_second, spec.op_name, ": internal error: scan_pair without mul_second");
  return run(spec, in, dim, std::nullopt);
}

}  // namespace scanops
