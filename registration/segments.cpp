// scanops: the jagged (offsets) form of segmented scans, the segment_* ops.
//
// values (total, *features) is scanned along dim 0 within each segment
// values[offsets[b]:offsets[b+1]]. Composite (CompositeImplicitAutograd) over the reset form
// of the public ops, so that autograd, Meta, torch.compile, torch.export and TorchScript come
// from theirs:
//   without initial  reset = true at offsets[:-1] (a (total, 1, ...) mask broadcast over the
//                    features), the op along dim 0: the data is read and written once
//   with initial     each segment's initial[b] joined to its segment as one more row (before
//                    it; after it for reverse scans), a head of the reset form, and taken out
//                    of the result: the values are gathered into the joined tensor and the
//                    result out of it (two more passes over the data)
// cummax / cummin indices count from each segment's start (the reset form's count along the
// whole line, less the segment's first position).
// The offsets are checked by _segment_offsets (errors name the op) in the back end's one pass
// over them (Backend::jagged_offsets): on a CUDA device that reads one fault word back to the
// host (one synchronisation, so that no scan indexes by bad offsets); the data scan itself
// does not. Without initial the mask comes from _segment_heads (the check and the mask in
// the same pass, no int64 copy).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <string>

#include "ops/scan_engine.h"
#include "scanops/scanops.h"

namespace scanops::jagged {
namespace {

// _segment_offsets: offsets as a new contiguous int64 tensor, checked against total.
at::Tensor segment_offsets(const at::Tensor& offsets, c10::SymInt total_sym,
                           c10::string_view op_view) {
  const std::string op(op_view);
  const int64_t total = total_sym.guard_int(__FILE__, __LINE__);
  at::Tensor o = offsets.to(offsets.options().dtype(at::kLong), /*non_blocking=*/false,
                            /*copy=*/true, at::MemoryFormat::Contiguous);
  const int64_t n = o.numel();
  // [first != 0, some decrease, last != total] in one tensor: one read back
  at::Tensor bad = at::stack({o[0] != 0,
                              n > 1 ? (o.narrow(0, 1, n - 1) < o.narrow(0, 0, n - 1)).any()
                                    : at::zeros({}, o.options().dtype(at::kBool)),
                              o[n - 1] != total});
  const at::Tensor flags = bad.cpu();
  const bool* f = flags.const_data_ptr<bool>();
  TORCH_CHECK(!f[0], op, ": argument 'offsets' must start at 0, got ", o[0].item<int64_t>());
  TORCH_CHECK(!f[1], op, ": argument 'offsets' must be non-decreasing (offsets[b] <= ",
              "offsets[b+1]): segment b is values[offsets[b]:offsets[b+1]]");
  TORCH_CHECK(!f[2], op, ": argument 'offsets' must end at the number of rows of the values, ",
              total, ", got ", o[n - 1].item<int64_t>());
  return o;
}
at::Tensor segment_offsets_meta(const at::Tensor& offsets, c10::SymInt, c10::string_view) {
  return at::empty_like(offsets, offsets.options().dtype(at::kLong),
                        at::MemoryFormat::Contiguous);
}

// The back end's JaggedOffsetsFn for the offsets' device, or nullptr (the generic ATen
// composition then).
const Backend* jagged_backend(const at::Tensor& offsets) {
  const Backend* b = backend_of(offsets.device().type());
  return b != nullptr && b->jagged_offsets != nullptr ? b : nullptr;
}

// _segment_offsets: offsets as a new contiguous int64 tensor, checked against total. The back
// end's one pass (CPU, CUDA: one kernel and one read of its fault word back to the host);
// where it rejects the offsets, the generic check names the fault.
at::Tensor segment_offsets_checked(const at::Tensor& offsets, c10::SymInt total_sym,
                                   c10::string_view op) {
  const Backend* b = jagged_backend(offsets);
  if (b == nullptr) return segment_offsets(offsets, total_sym, op);
  const int64_t total = total_sym.guard_int(__FILE__, __LINE__);
  at::Tensor r = at::empty({offsets.numel()}, offsets.options().dtype(at::kLong));
  if (!b->jagged_offsets(offsets.contiguous(), total, nullptr, &r)) {
    segment_offsets(offsets, total_sym, op);  // throws the error that names the fault
    TORCH_CHECK(false, std::string(op), ": internal error: offsets rejected without a message");
  }
  return r;
}

// _segment_heads: the reset form's mask of checked offsets, bool (total), true at each
// nonempty segment's first row (offsets[b] < total), without the int64 copy: the back end's
// one pass (CPU: ops/cpu/scan_cpu_segmented.cpp's segment_heads, rows split for long segments,
// huge pages; CUDA: jagged_offsets.cu); where it rejects the offsets, _segment_offsets names
// the fault. Elsewhere: _segment_offsets, then the mask by index_fill.
at::Tensor segment_heads_generic(const at::Tensor& offsets, c10::SymInt total, c10::string_view op) {
  const at::Tensor o = segment_offsets(offsets, total, op);
  const c10::SymInt B = o.sym_size(0) - 1;
  at::Tensor r = at::zeros_symint({total + 1}, o.options().dtype(at::kBool));
  r = at::index_fill(r, 0, o.narrow_symint(0, 0, B), true);
  return r.narrow_symint(0, 0, total);
}
at::Tensor segment_heads_checked(const at::Tensor& offsets, c10::SymInt total_sym,
                                 c10::string_view op) {
  const Backend* b = jagged_backend(offsets);
  if (b == nullptr) return segment_heads_generic(offsets, total_sym, op);
  const int64_t total = total_sym.guard_int(__FILE__, __LINE__);
  at::Tensor r = at::empty({total}, offsets.options().dtype(at::kBool));
  if (!b->jagged_offsets(offsets.contiguous(), total, &r, nullptr)) {
    segment_offsets(offsets, total_sym, op);  // throws the error that names the fault
    TORCH_CHECK(false, std::string(op), ": internal error: offsets rejected without a message");
  }
  return r;
}
at::Tensor segment_heads_meta(const at::Tensor& offsets, c10::SymInt total, c10::string_view) {
  return at::empty_symint({total}, offsets.options().dtype(at::kBool));
}

// The checks that need no data: values has a row dim, offsets 1-D integral on its device.
void check_jagged(const char* op, const at::Tensor& values, const char* values_name,
                  const at::Tensor& offsets) {
  TORCH_CHECK(values.dim() >= 1, op, ": argument '", values_name,
              "' must have at least one dim (the rows of the segments), got a 0-d tensor");
  TORCH_CHECK(offsets.scalar_type() == at::kLong || offsets.scalar_type() == at::kInt, op,
              ": argument 'offsets' must be int64 or int32, got ", offsets.scalar_type());
  TORCH_CHECK(offsets.dim() == 1 && offsets.sym_numel() >= 1, op,
              ": argument 'offsets' must be 1-D with B + 1 >= 1 entries (B segments), got shape ",
              offsets.sym_sizes());
  TORCH_CHECK(offsets.device() == values.device(), op, ": argument 'offsets' is on ",
              offsets.device(), " but argument '", values_name, "' is on ", values.device(),
              "; both must be on the same device");
}

// One jagged problem: checked offsets, the reset mask and what the joined form needs.
struct Jagged {
  const char* op;
  at::Tensor raw;  // the offsets as given
  c10::SymInt total, B;
  int64_t ndim;
  bool reverse;

  static Jagged make(const char* op, const at::Tensor& values, const char* values_name,
                     const at::Tensor& offsets, bool reverse) {
    check_jagged(op, values, values_name, offsets);
    Jagged j;
    j.op = op;
    j.raw = offsets;
    j.total = values.sym_size(0);
    j.B = offsets.sym_size(0) - 1;
    j.ndim = values.dim();
    j.reverse = reverse;
    return j;
  }
  // The offsets checked, int64 (B + 1), taken on first use (_segment_offsets).
  const at::Tensor& offsets() const {
    static const auto check = c10::Dispatcher::singleton()
                                  .findSchemaOrThrow("scanops::_segment_offsets", "")
                                  .typed<at::Tensor(const at::Tensor&, c10::SymInt,
                                                    c10::string_view)>();
    if (!checked_.defined()) {
      // after reset() the offsets are known good: only the int64 form is missing (on a CUDA
      // device the check would read its flags back to the host a second time)
      checked_ = heads_checked_ ? raw.to(raw.options().dtype(at::kLong), /*non_blocking=*/false,
                                         /*copy=*/false, at::MemoryFormat::Contiguous)
                                : check.call(raw, total, op);
    }
    return checked_;
  }
  // The reset form's mask (total), offsets checked (_segment_heads): what the scans without
  // initial need, without the int64 copy of the offsets.
  at::Tensor reset() const {
    static const auto op_ = c10::Dispatcher::singleton()
                                .findSchemaOrThrow("scanops::_segment_heads", "")
                                .typed<at::Tensor(const at::Tensor&, c10::SymInt,
                                                  c10::string_view)>();
    at::Tensor r = op_.call(raw, total, op);
    heads_checked_ = true;
    return r;
  }
  // (n) viewed as (n, 1, ..., 1): broadcast over the features.
  at::Tensor rows(const at::Tensor& t) const {
    std::vector<c10::SymInt> shape(ndim, c10::SymInt(1));
    shape[0] = t.sym_size(0);
    return t.view_symint(shape);
  }
  at::Tensor starts() const { return offsets().narrow_symint(0, 0, B); }
  at::Tensor ends() const { return offsets().narrow_symint(0, 1, B); }
  // A bool (n) mask, true at `at` (entries may repeat; entries == n are dropped).
  at::Tensor heads(const c10::SymInt& n, const at::Tensor& at_) const {
    at::Tensor r = at::zeros_symint({n + 1}, raw.options().dtype(at::kBool));
    r = at::index_fill(r, 0, at_, true);
    return r.narrow_symint(0, 0, n);
  }
  // The segment of every row (total), and its first row.
  at::Tensor segment_of_rows() const {
    const at::Tensor b = at::arange(at::Scalar(B), offsets().options());
    return at::repeat_interleave_symint(b, ends() - starts(), 0, total);
  }
  // initial of the result dtype, broadcastable to (B, *features) of `like`: expanded to it.
  at::Tensor initial_rows(const at::Tensor& initial, const at::Tensor& like,
                          at::ScalarType out_dtype) const {
    TORCH_CHECK(initial.scalar_type() == out_dtype, op, ": argument 'initial' has dtype ",
                initial.scalar_type(), " but the result has dtype ", out_dtype,
                "; they must match (the scan's state is of the result dtype)");
    TORCH_CHECK(initial.device() == like.device(), op, ": argument 'initial' is on ",
                initial.device(), " but the values are on ", like.device());
    std::vector<c10::SymInt> shape(like.sym_sizes().begin(), like.sym_sizes().end());
    shape[0] = B;
    const auto is = initial.sym_sizes();
    bool ok = is.size() <= shape.size();
    for (size_t k = 0; ok && k < is.size(); ++k) {
      const auto& m = is[is.size() - 1 - k];
      ok = m == 1 || m == shape[shape.size() - 1 - k];
    }
    TORCH_CHECK(ok, op, ": argument 'initial' of shape ", is,
                " is not broadcastable to (B, *features) = ", c10::SymIntArrayRef(shape),
                " (one value per segment)");
    return initial.expand_symint(shape);
  }

 private:
  mutable at::Tensor checked_;
  mutable bool heads_checked_ = false;  // reset() ran: _segment_heads checked the offsets
};

// The joined form (with initial): rows of the values and the initial rows in one tensor of
// total + B rows, segment b's initial first (last for reverse scans).
struct Joined {
  at::Tensor row_at;   // (total) joined position of each value row
  at::Tensor init_at;  // (B) joined position of each initial row
  at::Tensor first_at;  // (total) joined position of the first value row of each row's segment
  at::Tensor reset;    // (total + B) heads: each segment's first joined row
  c10::SymInt n;

  static Joined make(const Jagged& j) {
    Joined w;
    const at::Tensor seg = j.segment_of_rows();
    const at::Tensor b = at::arange(at::Scalar(j.B), j.offsets().options());
    const int64_t shift = j.reverse ? 0 : 1;
    const at::Tensor rowid = at::arange(at::Scalar(j.total), j.offsets().options());
    w.row_at = rowid + seg + shift;
    w.init_at = (j.reverse ? j.ends() : j.starts()) + b;
    w.first_at = j.starts().index_select(0, seg) + seg + shift;
    w.n = j.total + j.B;
    w.reset = j.heads(w.n, j.starts() + b);
    return w;
  }
  // values (rows of `fill` where the initial rows go unless `init` is given).
  at::Tensor join(const Jagged& j, const at::Tensor& values, const at::Tensor& init) const {
    std::vector<c10::SymInt> shape(values.sym_sizes().begin(), values.sym_sizes().end());
    shape[0] = n;
    at::Tensor out = at::zeros_symint(shape, values.options());
    out = at::index_copy(out, 0, row_at, values);
    if (init.defined()) {
      out = at::index_copy(out, 0, init_at, init);
    } else {
      std::vector<c10::SymInt> ishape = shape;
      ishape[0] = j.B;
      out = at::index_copy(out, 0, init_at, at::ones_symint(ishape, values.options()));
    }
    return out;
  }
  at::Tensor take(const at::Tensor& y) const { return at::index_select(y, 0, row_at); }
};

// Indices along a (joined or plain) line back to counts from the segment's start: -1 where
// none (identity) or the initial value.
at::Tensor within_segment(const Jagged& j, const at::Tensor& idx, const at::Tensor& first,
                          const at::Tensor& init_of_row) {
  at::Tensor none = idx < 0;
  if (init_of_row.defined()) none = none | (idx == j.rows(init_of_row));
  return at::where(none, at::full({}, -1, idx.options()), idx - j.rows(first));
}

at::ScalarType sum_dtype(const at::Tensor& values, std::optional<at::ScalarType> dtype) {
  if (dtype.has_value()) return *dtype;
  return at::isIntegralType(values.scalar_type(), /*includeBool=*/true) ? at::kLong
                                                                         : values.scalar_type();
}

// The op on the reset form (no initial) or on the joined form (initial): `run(values, reset,
// companions...)` with dim 0. `companions` are broadcast to values' shape and joined with
// ones.
template <class Run>
at::Tensor jagged_scan(const Jagged& j, const at::Tensor& values, at::ScalarType out_dtype,
                       const std::optional<at::Tensor>& initial, Run&& run) {
  if (!initial.has_value() || !initial->defined()) {
    return run(values, j.rows(j.reset()), [](const at::Tensor& t) { return t; });
  }
  const at::Tensor init = j.initial_rows(*initial, values, out_dtype);
  const Joined w = Joined::make(j);
  const at::Tensor v = values.scalar_type() == out_dtype ? values : values.to(out_dtype);
  const auto companion = [&](const at::Tensor& t) {
    return w.join(j, t.expand_symint(values.sym_sizes()), at::Tensor());
  };
  return w.take(run(w.join(j, v, init), j.rows(w.reset), companion));
}

at::Tensor segment_cumsum(const at::Tensor& values, const at::Tensor& offsets, bool exclusive,
                          bool reverse, std::optional<at::ScalarType> dtype,
                          const std::optional<at::Tensor>& initial) {
  const auto j = Jagged::make("scanops.segment_cumsum", values, "values", offsets, reverse);
  const bool joined = initial.has_value() && initial->defined();
  return jagged_scan(j, values, sum_dtype(values, dtype), initial,
                     [&](const at::Tensor& v, const at::Tensor& reset, auto) {
                       return scanops::cumsum(v, 0, {exclusive, reverse, joined ? std::nullopt : dtype,
                                                     std::nullopt, reset});
                     });
}
at::Tensor segment_masked_cumsum(const at::Tensor& values, const at::Tensor& mask,
                                 const at::Tensor& offsets, bool exclusive, bool reverse,
                                 std::optional<at::ScalarType> dtype,
                                 const std::optional<at::Tensor>& initial) {
  const auto j =
      Jagged::make("scanops.segment_masked_cumsum", values, "values", offsets, reverse);
  const bool joined = initial.has_value() && initial->defined();
  return jagged_scan(j, values, sum_dtype(values, dtype), initial,
                     [&](const at::Tensor& v, const at::Tensor& reset, auto companion) {
                       return scanops::masked_cumsum(
                           v, companion(mask), 0,
                           {exclusive, reverse, joined ? std::nullopt : dtype, std::nullopt, reset});
                     });
}
at::Tensor segment_cumprod(const at::Tensor& values, const at::Tensor& offsets, bool exclusive,
                           bool reverse, std::optional<at::ScalarType> dtype,
                           const std::optional<at::Tensor>& initial) {
  const auto j = Jagged::make("scanops.segment_cumprod", values, "values", offsets, reverse);
  const bool joined = initial.has_value() && initial->defined();
  return jagged_scan(j, values, sum_dtype(values, dtype), initial,
                     [&](const at::Tensor& v, const at::Tensor& reset, auto) {
                       return scanops::cumprod(v, 0, {exclusive, reverse, joined ? std::nullopt : dtype,
                                                      std::nullopt, reset});
                     });
}
at::Tensor segment_linear_recurrence(const at::Tensor& a, const at::Tensor& x,
                                     const at::Tensor& offsets, bool exclusive, bool reverse,
                                     const std::optional<at::Tensor>& initial) {
  const auto j = Jagged::make("scanops.segment_linear_recurrence", x, "x", offsets, reverse);
  return jagged_scan(j, x, x.scalar_type(), initial,
                     [&](const at::Tensor& v, const at::Tensor& reset, auto companion) {
                       return scanops::linear_recurrence(
                           companion(a), v, 0, {exclusive, reverse, std::nullopt, std::nullopt, reset});
                     });
}
at::Tensor segment_logcumsumexp(const at::Tensor& values, const at::Tensor& offsets,
                                bool exclusive, bool reverse,
                                const std::optional<at::Tensor>& initial) {
  const auto j =
      Jagged::make("scanops.segment_logcumsumexp", values, "values", offsets, reverse);
  return jagged_scan(j, values, values.scalar_type(), initial,
                     [&](const at::Tensor& v, const at::Tensor& reset, auto) {
                       return scanops::logcumsumexp(
                           v, 0, {exclusive, reverse, std::nullopt, std::nullopt, reset});
                     });
}
std::tuple<at::Tensor, at::Tensor> segment_extremum(const char* op, bool is_max,
                                                    const at::Tensor& values,
                                                    const at::Tensor& offsets, bool exclusive,
                                                    bool reverse,
                                                    const std::optional<at::Tensor>& initial) {
  const auto j = Jagged::make(op, values, "values", offsets, reverse);
  const auto run = [&](const at::Tensor& v, const at::Tensor& reset) {
    const ScanOptions o{exclusive, reverse, std::nullopt, std::nullopt, reset};
    return is_max ? scanops::cummax(v, 0, o) : scanops::cummin(v, 0, o);
  };
  if (!initial.has_value() || !initial->defined()) {
    auto [y, idx] = run(values, j.rows(j.reset()));
    const at::Tensor first = j.starts().index_select(0, j.segment_of_rows());
    return {y, within_segment(j, idx, first, at::Tensor())};
  }
  const at::Tensor init = j.initial_rows(*initial, values, values.scalar_type());
  const Joined w = Joined::make(j);
  auto [y, idx] = run(w.join(j, values, init), j.rows(w.reset));
  const at::Tensor init_of_row = w.init_at.index_select(0, j.segment_of_rows());
  return {w.take(y), within_segment(j, w.take(idx), w.first_at, init_of_row)};
}
std::tuple<at::Tensor, at::Tensor> segment_cummax(const at::Tensor& values,
                                                  const at::Tensor& offsets, bool exclusive,
                                                  bool reverse,
                                                  const std::optional<at::Tensor>& initial) {
  return segment_extremum("scanops.segment_cummax", true, values, offsets, exclusive, reverse,
                          initial);
}
std::tuple<at::Tensor, at::Tensor> segment_cummin(const at::Tensor& values,
                                                  const at::Tensor& offsets, bool exclusive,
                                                  bool reverse,
                                                  const std::optional<at::Tensor>& initial) {
  return segment_extremum("scanops.segment_cummin", false, values, offsets, exclusive, reverse,
                          initial);
}

}  // namespace
}  // namespace scanops::jagged

TORCH_LIBRARY_IMPL(scanops, CompositeImplicitAutograd, m) {
  m.impl("segment_cumsum", &scanops::jagged::segment_cumsum);
  m.impl("segment_masked_cumsum", &scanops::jagged::segment_masked_cumsum);
  m.impl("segment_cumprod", &scanops::jagged::segment_cumprod);
  m.impl("segment_linear_recurrence", &scanops::jagged::segment_linear_recurrence);
  m.impl("segment_logcumsumexp", &scanops::jagged::segment_logcumsumexp);
  m.impl("segment_cummax", &scanops::jagged::segment_cummax);
  m.impl("segment_cummin", &scanops::jagged::segment_cummin);
}
TORCH_LIBRARY_IMPL(scanops, CPU, m) {
  m.impl("_segment_offsets", &scanops::jagged::segment_offsets_checked);
  m.impl("_segment_heads", &scanops::jagged::segment_heads_checked);
}
TORCH_LIBRARY_IMPL(scanops, CUDA, m) {
  m.impl("_segment_offsets", &scanops::jagged::segment_offsets_checked);
  m.impl("_segment_heads", &scanops::jagged::segment_heads_checked);
}
TORCH_LIBRARY_IMPL(scanops, Meta, m) {
  m.impl("_segment_offsets", &scanops::jagged::segment_offsets_meta);
  m.impl("_segment_heads", &scanops::jagged::segment_heads_meta);
}
