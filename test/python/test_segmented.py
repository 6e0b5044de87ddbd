"""Segmented scans: `reset=` on every op, and the offsets (jagged) segment_* ops.

Reset form (torch.ops.scanops.<op>(..., reset=...) and the scanops.<op> wrappers):
- the hand-computed example ([1, 2, 3, 4, 5], resets at 2 and 4) for the reference and the ops;
- every op x exclusive x reverse x dtype x shape (1-D to 4-D, dim first / middle / last,
  lengths 0 to 257) x reset layout (dense, sparse, broadcast (B, L, 1) and (L,), constant
  along the line, transposed, expanded, all-False, all-True, only position 0) with and
  without `initial`, against a sequential float64 loop (exact for integer sums / products and
  cummax / cummin); inputs never modified, bitwise the same run to run;
- the spec's special cases: all-False == no reset, reset at 0 only == all-False (bitwise),
  all-True in closed form, linear_recurrence ignores `a` at a segment start, NaN in cummax;
- long lines (4097, 300000 with sparse resets: the chunked paths), many lines, few long lines,
  column layouts, checked against the unsegmented ops run segment by segment and vectorised
  exact references; bitwise the same for 1 and 4 CPU threads; a line scanned in two chunks;
- gradients (gradcheck and gradgradcheck, float64 and complex128) to x, a and initial;
- bad `reset` (dtype, shape, device): an error naming the op and 'reset'.

Offsets form (torch.ops.scanops.segment_<op>(values, offsets, ...) and scanops.segment_<op>):
- the hand example; B = 0, 1, many (1000 segments of length 0..5), empty segments, features
  (), (3,), (2, 5); int32 offsets; full and broadcast `initial`; against the same loop run on
  each segment (padded); equal to the reset form with resets at offsets[:-1];
- torch.nested jagged tensors in and out; gradients; bad offsets / initial: errors naming the
  op and the argument, inputs untouched.

Both: opcheck, torch.compile(fullgraph=True), torch.export, TorchScript. CUDA: every test
above on "cuda" too when a GPU is present (skipped otherwise), plus CUDA-specific shapes
(4096 x 37, 2 x 2^20, (3, 5000, 64) along dim 1, (100000, 3) along dim 0) against the CPU
result and exact references, and a bitwise run-to-run check.
"""
from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest
import torch

try:
    import scanops
except ImportError:  # run without PYTHONPATH=python (scripts/test.sh sets it)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import scanops

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
OPS = ["cumsum", "masked_cumsum", "cumprod", "linear_recurrence", "logcumsumexp", "cummax",
       "cummin"]
EXT = ("cummax", "cummin")
COMPLEX_OPS = ("cumsum", "masked_cumsum", "cumprod", "linear_recurrence", "logcumsumexp")
FLAGS = list(itertools.product([False, True], [False, True]))  # (exclusive, reverse)
f32, f64, f16, bf16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
c64, c128 = torch.complex64, torch.complex128
i32, i64, u8, b8 = torch.int32, torch.int64, torch.uint8, torch.bool


def flag_id(f):
    return ("excl" if f[0] else "incl") + ("-rev" if f[1] else "")


def sops():
    return torch.ops.scanops


# ---- data ---------------------------------------------------------------------------------

def is_exact(dt):
    return not (dt.is_floating_point or dt.is_complex)


def result_dtype(op, dt):
    if op in ("cumsum", "masked_cumsum", "cumprod") and is_exact(dt):
        return i64
    return dt


def wide_dtype(op, dt):
    if op in EXT:
        return dt
    if dt.is_complex:
        return c128
    if dt.is_floating_point:
        return f64
    return i64


def dtypes_of(op):
    if op in ("cumsum", "masked_cumsum"):
        return [f32, f64, f16, bf16, c64, i32, i64, b8, u8]
    if op == "cumprod":
        return [f32, f64, c64, i32, i64, u8, b8]
    if op in ("linear_recurrence", "logcumsumexp"):
        return [f32, f64, c64]
    return [f32, f64, bf16, i32, i64, u8, b8]


def rand(shape, dtype, gen, op, role="x"):
    shape = tuple(shape)
    if dtype == b8:
        return torch.rand(shape, generator=gen) < (0.8 if op == "cumprod" else 0.5)
    if is_exact(dtype):
        lo, hi = (0, 5) if dtype == u8 else (-20, 20)
        if op == "cumprod":
            lo, hi = (1, 4) if dtype == u8 else (-3, 4)
        return torch.randint(lo, hi, shape, generator=gen).to(dtype)
    if dtype.is_complex:
        r = torch.randn(shape, generator=gen, dtype=f64) * 0.5
        i = torch.randn(shape, generator=gen, dtype=f64) * 0.5
        t = torch.complex(r, i)
        if op == "cumprod" or role == "a":
            t = t / t.abs().clamp(min=1e-3) * (0.9 + 0.2 * torch.rand(shape, generator=gen, dtype=f64))
        return t.to(dtype)
    if op == "cumprod" or role == "a":
        t = 0.8 + 0.4 * torch.rand(shape, generator=gen, dtype=f64)
        t = t * torch.where(torch.rand(shape, generator=gen) < 0.2, -1.0, 1.0)
        return t.to(dtype)
    return torch.randn(shape, generator=gen, dtype=f64).to(dtype)


def line_shape(shape, d):
    return tuple(s for k, s in enumerate(shape) if k != d)


# Reset layouts: what `reset` looks like for an input of `shape` scanned along d.
LAYOUTS = ["dense", "sparse", "lines_bcast", "line_only", "const_along", "transposed",
           "expanded", "all_false", "all_true", "first_only"]


def make_reset(layout, shape, d, gen, p=None):
    shape = tuple(shape)
    nd = len(shape)
    if nd == 0:
        return torch.tensor(layout in ("all_true", "first_only", "dense"))
    n = shape[d]

    def rnd(s, q=0.3 if p is None else p):
        return torch.rand(s, generator=gen) < q
    if layout == "dense":
        return rnd(shape)
    if layout == "sparse":
        return rnd(shape, 0.04 if p is None else p)
    if layout == "lines_bcast":  # (B, L, 1) for (B, L, D): the same resets for every column
        return rnd(shape[:d + 1] + (1,) * (nd - d - 1))
    if layout == "line_only":  # (L,) for (..., L); (L, 1) for (B, L, D): one pattern for all
        return rnd((n,) + (1,) * (nd - d - 1))
    if layout == "const_along":  # size 1 along dim: every line all-True or all-False
        s = list(shape)
        s[d] = 1
        return rnd(tuple(s), 0.5)
    if layout == "transposed":  # non-contiguous, dense values
        if nd < 2:
            return rnd(shape)[::1]
        return rnd(shape[::-1]).permute(tuple(range(nd))[::-1])
    if layout == "expanded":  # a stride-0 view of the full shape
        return rnd((n,) + (1,) * (nd - d - 1)).expand(shape)
    if layout == "all_false":
        return torch.zeros(shape, dtype=b8)
    if layout == "all_true":
        return torch.ones(shape, dtype=b8)
    if layout == "first_only":
        r = torch.zeros(shape, dtype=b8)
        if n:
            r.narrow(d, 0, 1).fill_(True)
        return r
    raise ValueError(layout)


# ---- the sequential float64 reference ---------------------------------------------------

def identity_of(op, wide, lines):
    if op in ("cumsum", "masked_cumsum", "linear_recurrence"):
        return torch.zeros(lines, dtype=wide)
    if op == "cumprod":
        return torch.ones(lines, dtype=wide)
    if op == "logcumsumexp":
        return torch.full(lines, complex(-math.inf, 0) if wide.is_complex else -math.inf, dtype=wide)
    low = op == "cummax"
    if wide == b8:
        return torch.full(lines, not low, dtype=b8)
    if wide.is_floating_point:
        return torch.full(lines, -math.inf if low else math.inf, dtype=wide)
    info = torch.iinfo(wide)
    return torch.full(lines, info.min if low else info.max, dtype=wide)


def heads_of(r, reverse):
    """r: (..., n) resets in memory order -> True where an element is the first of its segment
    in scan order (other than the line's first in scan order)."""
    h = torch.zeros_like(r)
    if r.shape[-1] > 1:
        if reverse:
            h[..., :-1] = r[..., 1:]
        else:
            h[..., 1:] = r[..., 1:]
    return h


def step(op, sv, si, ev, av, k):
    if op in ("cumsum", "masked_cumsum"):
        return sv + ev, None
    if op == "cumprod":
        return sv * ev, None
    if op == "linear_recurrence":
        return av * sv + ev, None
    if op == "logcumsumexp":
        if sv.is_complex():
            return torch.log(torch.exp(sv) + torch.exp(ev)), None
        return torch.logaddexp(sv, ev), None
    # cummax / cummin: the later (in scan order) wins ties; NaN wins and stays
    if op == "cummax":
        win = torch.isnan(ev) | (~torch.isnan(sv) & (ev >= sv))
    else:
        win = torch.isnan(ev) | (~torch.isnan(sv) & (ev <= sv))
    return torch.where(win, ev, sv), torch.where(win, torch.full_like(si, k), si)


def seq_reference(op, x, dim, exclusive, reverse, initial=None, reset=None, mask=None, a=None):
    """The segmented scan of x along dim, one element at a time in float64 / complex128 / int64
    (x's dtype for cummax / cummin). A segment's first element in scan order starts the
    state afresh (the element itself, as a line of its own; exclusive: the identity is
    written); `initial` is the state before the line's first element in scan order."""
    zero_d = x.dim() == 0
    if zero_d:
        x = x.reshape(1)
        reset = None if reset is None else reset.reshape(1)
        mask = None if mask is None else mask.reshape(1)
        a = None if a is None else a.reshape(1)
        dim = 0
    d = dim % x.dim()
    xd = x.movedim(d, -1)
    n = xd.shape[-1]
    lines = tuple(xd.shape[:-1])
    wide = wide_dtype(op, x.dtype)
    r = torch.zeros(xd.shape, dtype=b8) if reset is None else reset.expand(x.shape).movedim(d, -1)
    heads = heads_of(r, reverse)
    md = None if mask is None else mask.expand(x.shape).movedim(d, -1)
    ad = None if a is None else a.expand(x.shape).movedim(d, -1)
    ident = identity_of(op, wide, lines)
    if initial is None:
        sv, fresh = ident.clone(), torch.ones(lines, dtype=b8)
    else:
        sv, fresh = initial.to(wide).expand(lines).clone(), torch.zeros(lines, dtype=b8)
    si = torch.full(lines, -1, dtype=i64)
    minus1 = si.clone()
    outs, idxs = [None] * n, [None] * n
    for k in (range(n - 1, -1, -1) if reverse else range(n)):
        fresh = fresh | heads[..., k]
        ev = xd[..., k].to(wide)
        if md is not None:
            ev = torch.where(md[..., k], ev, torch.zeros_like(ev))
        if exclusive:
            outs[k] = torch.where(fresh, ident, sv)
            idxs[k] = torch.where(fresh, minus1, si)
        nv, ni = step(op, sv, si, ev, None if ad is None else ad[..., k].to(wide), k)
        sv = torch.where(fresh, ev, nv)
        if ni is not None:
            si = torch.where(fresh, torch.full_like(si, k), ni)
        fresh = torch.zeros_like(fresh)
        if not exclusive:
            outs[k], idxs[k] = sv, si
    y = torch.stack(outs, -1) if n else torch.empty(lines + (0,), dtype=wide)
    y = y.movedim(-1, d)
    if zero_d:
        y = y.reshape(())
    if op in EXT:
        i = torch.stack(idxs, -1) if n else torch.empty(lines + (0,), dtype=i64)
        i = i.movedim(-1, d)
        return y, (i.reshape(()) if zero_d else i)
    return y


# ---- other references (long lines, many lines) -------------------------------------------

def unsegmented(op, x, dim, exclusive, reverse, initial=None, mask=None, a=None):
    kw = dict(exclusive=exclusive, reverse=reverse, initial=initial)
    if op == "masked_cumsum":
        return sops().masked_cumsum(x, mask, dim, **kw)
    if op == "linear_recurrence":
        return sops().linear_recurrence(a, x, dim, **kw)
    return getattr(sops(), op)(x, dim, **kw)


def per_segment_reference(op, x, dim, exclusive, reverse, initial, starts, mask=None, a=None):
    """The unsegmented op run on each segment (the same segment starts for every line);
    `initial` goes to the first segment in scan order. Indices back to line positions."""
    d = dim % x.dim()
    n = x.shape[d]
    bounds = sorted(set([0] + [s for s in starts if 0 < s < n])) + [n]
    segs = [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    first = segs[-1] if reverse else segs[0]
    vals, idxs = [], []
    for lo, hi in segs:
        def sl(t):
            if t is None:
                return None
            return t.expand(x.shape).narrow(d, lo, hi - lo)
        y = unsegmented(op, sl(x), d, exclusive, reverse, initial if (lo, hi) == first else None,
                        sl(mask), sl(a))
        if op in EXT:
            vals.append(y[0])
            idxs.append(torch.where(y[1] >= 0, y[1] + lo, -1))
        else:
            vals.append(y)
    if op in EXT:
        return torch.cat(vals, d), torch.cat(idxs, d)
    return torch.cat(vals, d)


def per_line_segment_reference(op, x, dim, exclusive, reverse, initial, reset, mask=None, a=None):
    """per_segment_reference for each line on its own (few lines only)."""
    d = dim % x.dim()
    xd = x.movedim(d, -1)
    lines = xd.shape[:-1]
    r = reset.expand(x.shape).movedim(d, -1)
    md = None if mask is None else mask.expand(x.shape).movedim(d, -1)
    ad = None if a is None else a.expand(x.shape).movedim(d, -1)
    init = None if initial is None else initial.expand(lines)
    vals = torch.empty(xd.shape, dtype=result_dtype(op, x.dtype), device=x.device)
    idxs = torch.empty(xd.shape, dtype=i64, device=x.device)
    for ix in itertools.product(*[range(s) for s in lines]):
        starts = r[ix].nonzero().flatten().tolist()
        y = per_segment_reference(op, xd[ix], 0, exclusive, reverse,
                                  None if init is None else init[ix], starts,
                                  None if md is None else md[ix], None if ad is None else ad[ix])
        if op in EXT:
            vals[ix], idxs[ix] = y
        else:
            vals[ix] = y
    if op in EXT:
        return vals.movedim(-1, d), idxs.movedim(-1, d)
    return vals.movedim(-1, d)


def _scan_order(t, d, reverse):
    t = t.movedim(d, -1)
    return t.flip(-1) if reverse else t


def _memory_order(t, d, reverse):
    t = t.flip(-1) if reverse else t
    return t.movedim(-1, d)


def vec_segmented_cumsum(x, dim, exclusive, reverse, reset, initial=None, mask=None):
    """Segmented (masked) cumsum, vectorised: int64 (exact, wrapping) or float64."""
    d = dim % x.dim()
    wide = f64 if x.is_floating_point() else i64
    v = x.to(wide)
    if mask is not None:
        v = torch.where(mask.expand(x.shape), v, torch.zeros_like(v))
    h = heads_of(reset.expand(x.shape).movedim(d, -1), reverse)
    h = h.flip(-1) if reverse else h
    v = _scan_order(v, d, reverse)
    n = v.shape[-1]
    k = torch.arange(n, device=x.device)
    start = torch.cummax(torch.where(h, k, torch.zeros_like(k)), -1).values
    c = torch.cumsum(v, -1)
    cpad = torch.cat([torch.zeros_like(v[..., :1]), c], -1)
    y = c - torch.gather(cpad, -1, start)
    if initial is not None:
        y = y + torch.where(start == 0, initial.to(wide).expand(v.shape[:-1]).unsqueeze(-1),
                            torch.zeros_like(y))
    if exclusive:
        y = y - v
    return _memory_order(y, d, reverse)


def vec_segmented_extremum_int32(op, x, dim, exclusive, reverse, reset):
    """Segmented cummax / cummin of an int32 tensor, vectorised and exact: torch.cummax of
    (segment number, value) packed in an int64 key (the later wins ties, as in scanops)."""
    d = dim % x.dim()
    h = heads_of(reset.expand(x.shape).movedim(d, -1), reverse)
    h = h.flip(-1) if reverse else h
    xv = _scan_order(x.to(i64), d, reverse)
    n = xv.shape[-1]
    g = torch.cumsum(h.to(i64), -1)
    off = 2 ** 31
    key = g * 2 ** 33 + ((xv + off) if op == "cummax" else (off - 1 - xv))
    kv, ki = torch.cummax(key, -1)
    u = kv - g * 2 ** 33
    val = (u - off) if op == "cummax" else (off - 1 - u)
    if exclusive:
        first = h.clone()
        first[..., :1] = True
        ident = torch.iinfo(i32).min if op == "cummax" else torch.iinfo(i32).max
        val = torch.cat([torch.full_like(val[..., :1], ident), val[..., :-1]], -1)
        ki = torch.cat([torch.full_like(ki[..., :1], -1), ki[..., :-1]], -1)
        val = torch.where(first, torch.full_like(val, ident), val)
        ki = torch.where(first, torch.full_like(ki, -1), ki)
    if reverse:
        ki = torch.where(ki >= 0, n - 1 - ki, ki)
    return _memory_order(val.to(i32), d, reverse), _memory_order(ki, d, reverse)


# ---- comparisons ----------------------------------------------------------------------------

def bits(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bits(u, v):
    if isinstance(u, (tuple, list)):
        return all(same_bits(p, q) for p, q in zip(u, v))
    return u.dtype == v.dtype and u.shape == v.shape and torch.equal(bits(u), bits(v))


def tolerance(dtype, n, op):
    eps = {f16: 2 ** -10, bf16: 2 ** -7}.get(dtype)
    if eps is None:
        eps = 1.2e-7 if dtype in (f32, c64) else 2.3e-16
    grow = math.sqrt(max(n, 1)) * 4 + 4
    if op in ("cumprod", "linear_recurrence"):
        grow *= 4
    return eps * grow


def _first_mismatch(g, w, bad):
    idx = bad.nonzero()[:4].tolist()
    return ", ".join(f"{tuple(i)}: got {g[tuple(i)].item()!r} want {w[tuple(i)].item()!r}"
                     for i in idx)


def assert_exact(got, want, ctx, what="values"):
    got, want = got.cpu(), want.cpu()
    assert got.shape == want.shape, f"{ctx}: {what} shape {tuple(got.shape)} vs {tuple(want.shape)}"
    if got.is_floating_point():
        gn, wn = torch.isnan(got), torch.isnan(want)
        bad = (gn != wn) | (~gn & ~wn & (got != want))
    else:
        bad = got != want
    if bool(bad.any()):
        raise AssertionError(f"{ctx}: {int(bad.sum())}/{got.numel()} {what} differ; "
                             + _first_mismatch(got, want, bad))


def assert_result(op, got, ref, in_dtype, n, ctx, out_dtype=None, rtol=None):
    """got: the op's result; ref: the wide reference (float64 / int64, or values and indices)."""
    if op in EXT:
        (gv, gi), (rv, ri) = got, ref
        assert gv.dtype == in_dtype and gi.dtype == i64, f"{ctx}: dtypes {gv.dtype}, {gi.dtype}"
        assert_exact(gv, rv.to(in_dtype), ctx)
        assert_exact(gi, ri, ctx, "indices")
        return
    rd = out_dtype or result_dtype(op, in_dtype)
    assert got.dtype == rd, f"{ctx}: dtype {got.dtype}, expected {rd}"
    assert tuple(got.shape) == tuple(ref.shape), f"{ctx}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    if is_exact(rd):
        assert_exact(got, ref.to(rd), ctx)
        return
    if got.numel() == 0:
        return
    tol = rtol if rtol is not None else tolerance(rd, n, op)
    g = got.cpu().to(ref.dtype)
    fin = torch.isfinite(ref)
    scale = float(ref[fin].abs().max()) if bool(fin.any()) else 1.0
    try:
        torch.testing.assert_close(g, ref, rtol=tol, atol=tol * max(scale, 1.0), equal_nan=True)
    except AssertionError as e:
        raise AssertionError(f"{ctx}: {e}") from None


# ---- calls ---------------------------------------------------------------------------------

def call_reset(op, x, dim, exclusive=False, reverse=False, initial=None, reset=None, mask=None,
               a=None, via="ops", **extra):
    kw = dict(exclusive=exclusive, reverse=reverse, initial=initial, reset=reset, **extra)
    f = getattr(sops() if via == "ops" else scanops, op)
    if op == "masked_cumsum":
        return f(x, mask, dim, **kw)
    if op == "linear_recurrence":
        return f(a, x, dim, **kw)
    return f(x, dim, **kw)


def call_segment(op, values, offsets, exclusive=False, reverse=False, initial=None, mask=None,
                 a=None, via="ops", **extra):
    kw = dict(exclusive=exclusive, reverse=reverse, initial=initial, **extra)
    f = getattr(sops() if via == "ops" else scanops, "segment_" + op)
    if op == "masked_cumsum":
        return f(values, mask, offsets, **kw)
    if op == "linear_recurrence":
        return f(a, values, offsets, **kw)
    return f(values, offsets, **kw)


def to(device, *ts):
    return [None if t is None else t.to(device) for t in ts]


def check_reset(op, shape, dim, dtype, exclusive, reverse, device, seed, layout="dense",
                with_init=False, via="ops", init_shape=None):
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    nd = len(shape)
    d = dim % max(nd, 1)
    x = rand(shape, dtype, gen, op)
    rd = result_dtype(op, dtype)
    init = None
    if with_init:
        init = rand(line_shape(shape, d) if init_shape is None else init_shape, rd, gen, op)
    mask = (torch.rand(shape, generator=gen) < 0.7) if op == "masked_cumsum" else None
    a = rand(shape, dtype, gen, op, role="a") if op == "linear_recurrence" else None
    reset = make_reset(layout, shape, d, gen)
    xs, rs, cs, ms, as_ = to(device, x, reset, init, mask, a)
    before = [t.clone() for t in (xs, rs, cs, ms, as_) if t is not None]
    got = call_reset(op, xs, dim, exclusive, reverse, cs, rs, ms, as_, via=via)
    again = call_reset(op, xs, dim, exclusive, reverse, cs, rs, ms, as_, via=via)
    ctx = (f"{via}.{op}(shape={shape}, dim={dim}, dtype={dtype}, exclusive={exclusive}, "
           f"reverse={reverse}, reset={layout}{tuple(reset.shape)}, initial="
           f"{None if init is None else tuple(init.shape)}, device={device}, seed={seed})")
    for b, t in zip(before, [t for t in (xs, rs, cs, ms, as_) if t is not None]):
        assert same_bits(b, t), f"{ctx}: an input was modified"
    assert same_bits(got, again), f"{ctx}: not bitwise reproducible"
    ref = seq_reference(op, x, d, exclusive, reverse, init, reset, mask, a)
    assert_result(op, got, ref, dtype, shape[d] if nd else 1, ctx)
    return got


# ================================================================================================
# The reference itself
# ================================================================================================

def test_reference_hand_examples():
    x = torch.tensor([1, 2, 3, 4, 5])
    r = torch.tensor([False, False, True, False, True])
    want = {(False, False): [1, 3, 3, 7, 5], (True, False): [0, 1, 0, 3, 0],
            (False, True): [3, 2, 7, 4, 5], (True, True): [2, 0, 4, 0, 0]}
    for f, w in want.items():
        assert seq_reference("cumsum", x, 0, *f, reset=r).tolist() == w, f
        assert vec_segmented_cumsum(x, 0, *f, r).tolist() == w, f
    c = torch.tensor(10)
    want_init = {(False, False): [11, 13, 3, 7, 5], (True, False): [10, 11, 0, 3, 0],
                 (False, True): [3, 2, 7, 4, 15], (True, True): [2, 0, 4, 0, 10]}
    for f, w in want_init.items():
        assert seq_reference("cumsum", x, 0, *f, initial=c, reset=r).tolist() == w, f
        assert vec_segmented_cumsum(x, 0, *f, r, initial=c).tolist() == w, f
    # position 0 changes nothing; an unsegmented line is the plain scan
    r0 = torch.tensor([True, False, False, False, False])
    assert seq_reference("cumsum", x, 0, False, False, reset=r0).tolist() == [1, 3, 6, 10, 15]
    # cummax: [1, 3, 2 | 5, 4]
    xm = torch.tensor([1, 3, 2, 5, 4], dtype=i32)
    rm = torch.tensor([False, False, False, True, False])
    lo = torch.iinfo(i32).min
    want_m = {(False, False): ([1, 3, 3, 5, 5], [0, 1, 1, 3, 3]),
              (True, False): ([lo, 1, 3, lo, 5], [-1, 0, 1, -1, 3]),
              (False, True): ([3, 3, 2, 5, 4], [1, 1, 2, 3, 4]),
              (True, True): ([3, 2, lo, 4, lo], [1, 2, -1, 4, -1])}
    for f, (wv, wi) in want_m.items():
        for v, i in (seq_reference("cummax", xm, 0, *f, reset=rm),
                     vec_segmented_extremum_int32("cummax", xm, 0, *f, rm)):
            assert v.tolist() == wv and i.tolist() == wi, (f, v, i)
    # linear recurrence h[t] = 0.5 h[t-1] + x[t], restarting at 2 and 4
    a = torch.full((5,), 0.5, dtype=f64)
    h = seq_reference("linear_recurrence", x.double(), 0, False, False, reset=r, a=a)
    assert h.tolist() == [1, 2.5, 3, 5.5, 5]
    h = seq_reference("linear_recurrence", x.double(), 0, False, True, reset=r, a=a)
    assert h.tolist() == [2, 2, 5, 4, 5]


def test_reference_self_consistency(seed):
    """The sequential loop against the vectorised references and the unsegmented ops run
    segment by segment (independent code paths)."""
    gen = torch.Generator().manual_seed(seed)
    for (excl, rev), op in itertools.product(FLAGS, OPS):
        x = rand((3, 40), f64 if op not in EXT else i32, gen, op)
        init = rand((3,), result_dtype(op, x.dtype), gen, op)
        mask = torch.rand(3, 40, generator=gen) < 0.6
        a = rand((3, 40), f64, gen, op, role="a") if op == "linear_recurrence" else None
        r = torch.rand(3, 40, generator=gen) < 0.2
        m = mask if op == "masked_cumsum" else None
        ref = seq_reference(op, x, 1, excl, rev, init, r, m, a)
        alt = per_line_segment_reference(op, x, 1, excl, rev, init, r, m, a)
        assert_result(op, alt, ref, x.dtype, 40, f"per-segment {op} {excl} {rev}")
        if op in ("cumsum", "masked_cumsum"):
            xi = rand((3, 40), i64, gen, op)
            assert torch.equal(seq_reference(op, xi, 1, excl, rev, init.long(), r, mask),
                               vec_segmented_cumsum(xi, 1, excl, rev, r, init.long(), mask))
        if op in EXT:
            v, i = vec_segmented_extremum_int32(op, x, 1, excl, rev, r)
            rv, ri = seq_reference(op, x, 1, excl, rev, None, r)
            assert torch.equal(v, rv) and torch.equal(i, ri)


# ================================================================================================
# Reset form
# ================================================================================================

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("via", ["ops", "wrapper"])
def test_hand_example(via, device):
    x = torch.tensor([1, 2, 3, 4, 5], device=device)
    r = torch.tensor([False, False, True, False, True], device=device)
    want = {(False, False): [1, 3, 3, 7, 5], (True, False): [0, 1, 0, 3, 0],
            (False, True): [3, 2, 7, 4, 5], (True, True): [2, 0, 4, 0, 0]}
    c = torch.tensor(10, device=device)
    want_init = {(False, False): [11, 13, 3, 7, 5], (True, False): [10, 11, 0, 3, 0],
                 (False, True): [3, 2, 7, 4, 15], (True, True): [2, 0, 4, 0, 10]}
    for f in FLAGS:
        y = call_reset("cumsum", x, 0, *f, reset=r, via=via)
        assert y.dtype == i64 and y.tolist() == want[f], (f, y)
        y = call_reset("cumsum", x.float(), 0, *f, reset=r, via=via)
        assert y.tolist() == want[f], (f, y)
        y = call_reset("cumsum", x, 0, *f, initial=c.long(), reset=r, via=via)
        assert y.tolist() == want_init[f], (f, y)
    xm = torch.tensor([1.0, 3.0, 2.0, 5.0, 4.0], device=device)
    rm = torch.tensor([False, False, False, True, False], device=device)
    v, i = call_reset("cummax", xm, 0, False, False, reset=rm, via=via)
    assert v.tolist() == [1, 3, 3, 5, 5] and i.tolist() == [0, 1, 1, 3, 3]
    v, i = call_reset("cummax", xm, 0, True, True, reset=rm, via=via)
    assert v.tolist() == [3, 2, -math.inf, 4, -math.inf] and i.tolist() == [1, 2, -1, 4, -1]
    a = torch.full((5,), 0.5, dtype=f64, device=device)
    h = call_reset("linear_recurrence", x.double(), 0, reset=r, a=a, via=via)
    assert h.tolist() == [1, 2.5, 3, 5.5, 5]
    h = call_reset("linear_recurrence", x.double(), 0, False, True, reset=r, a=a, via=via)
    assert h.tolist() == [2, 2, 5, 4, 5]


def test_schemas():
    for op in OPS:
        s = str(getattr(sops(), op).default._schema)
        assert "Tensor? initial=None, Tensor? reset=None)" in s, s
    for op in OPS:
        s = str(getattr(sops(), "segment_" + op).default._schema)
        assert "Tensor offsets" in s and "Tensor? initial=None" in s, s


SHAPES = [((1,), 0), ((2,), 0), ((3,), 0), ((17,), 0), ((3, 50), 1), ((50, 3), 0),
          ((4, 33, 5), 1), ((2, 3, 9, 4), 2), ((6, 2, 3, 4), 0), ((2, 3, 4, 7), -1),
          ((2, 255), -1), ((256,), 0), ((2, 257), 1), ((3, 0), 1), ((0, 4), 1)]
MAIN_LAYOUTS = ["dense", "sparse", "lines_bcast", "line_only", "dense", "const_along",
                "transposed", "expanded", "all_true", "first_only", "all_false"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
@pytest.mark.parametrize("op", OPS)
def test_against_sequential_reference(op, flags, device, seed):
    exclusive, reverse = flags
    for k, dtype in enumerate(dtypes_of(op)):
        for j, (shape, dim) in enumerate(SHAPES):
            if k >= 3 and j % 2 == (k % 2) and math.prod(shape) > 100:
                continue  # the narrow / integral dtypes on half of the big shapes
            layout = MAIN_LAYOUTS[(3 * j + k) % len(MAIN_LAYOUTS)]
            check_reset(op, shape, dim, dtype, exclusive, reverse, device,
                        seed=seed + 101 * k + j, layout=layout, with_init=(j + k) % 2 == 1,
                        via="wrapper" if (j + k) % 3 == 0 else "ops")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_every_layout(op, device, seed):
    """Every reset layout x flags x initial (full, one for all lines, partial) on a 3-D input
    along its middle dim and a 2-D one along its last."""
    dts = {"cumsum": [f32, i32], "masked_cumsum": [f64, i64], "cumprod": [f64, i64],
           "linear_recurrence": [f32], "logcumsumexp": [f64], "cummax": [f32, i32],
           "cummin": [f64, u8]}[op]
    for (layout, flags), dt in itertools.product(itertools.product(LAYOUTS, FLAGS), dts):
        for shape, dim in (((4, 21, 5), 1), ((5, 30), -1)):
            s = seed + LAYOUTS.index(layout) * 7 + FLAGS.index(flags)
            check_reset(op, shape, dim, dt, *flags, device, seed=s, layout=layout)
            init_shape = [None, (), (shape[0], 1) if len(shape) == 3 else (1,)][s % 3]
            check_reset(op, shape, dim, dt, *flags, device, seed=s + 1, layout=layout,
                        with_init=True, init_shape=init_shape)


X_LAYOUTS = ["transposed", "permuted", "strided", "expanded_other", "offset", "expanded_scan"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_input_layouts(op, device, seed):
    """Non-contiguous inputs (x, mask, a: transposed, permuted, strided, offset, expanded
    along another dim or along the scan) with dense and broadcast resets."""
    from reference import make_layout
    dt = {"cumsum": i64, "masked_cumsum": f32, "cumprod": f64, "cummax": f32, "cummin": i32}.get(op, f64)
    for k, (xl, (excl, rev)) in enumerate(itertools.product(X_LAYOUTS, FLAGS)):
        gen = torch.Generator().manual_seed(seed + k)
        shape, dim = [((4, 13, 6), 1), ((5, 40), 0), ((3, 4, 5, 9), -1)][k % 3]
        d = dim % len(shape)
        x = make_layout(shape, d, xl, lambda s: rand(s, dt, gen, op)).to(device)
        mask = make_layout(shape, d, xl, lambda s: torch.rand(s, generator=gen) < 0.6).to(device) \
            if op == "masked_cumsum" else None
        a = make_layout(shape, d, xl, lambda s: rand(s, dt, gen, op, "a")).to(device) \
            if op == "linear_recurrence" else None
        if xl in ("transposed", "permuted", "strided") and device == "cpu":
            assert not x.is_contiguous()
        for layout in ("dense", "transposed", "lines_bcast", "expanded"):
            r = make_reset(layout, shape, d, gen).to(device)
            init = rand(line_shape(shape, d), result_dtype(op, dt), gen, op).to(device) if k % 2 else None
            got = call_reset(op, x, dim, excl, rev, init, r, mask, a)
            ref = seq_reference(op, x.cpu(), d, excl, rev, None if init is None else init.cpu(), r.cpu(),
                                None if mask is None else mask.cpu(), None if a is None else a.cpu())
            assert_result(op, got, ref, dt, shape[d],
                          f"{op} x={xl}{tuple(x.stride())} {shape} dim={dim} reset={layout} excl={excl} rev={rev}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_special_resets(op, device, seed):
    """all-False == no reset (exact for integers / cummax, else to tolerance); a reset at 0
    only == all-False, bitwise; reset=None == omitted, bitwise; all-True in closed form."""
    gen = torch.Generator().manual_seed(seed)
    dts = [f32, i64] if op in ("cumsum", "masked_cumsum", "cumprod", "cummax", "cummin") else [f64]
    for dt, (excl, rev), (shape, dim) in itertools.product(
            dts, FLAGS, [((4, 9, 3), 1), ((3, 300), 1), ((700, 2), 0)]):
        x = rand(shape, dt, gen, op).to(device)
        mask = (torch.rand(shape, generator=gen) < 0.7).to(device) if op == "masked_cumsum" else None
        a = rand(shape, dt, gen, op, "a").to(device) if op == "linear_recurrence" else None
        d = dim % len(shape)
        init = rand(line_shape(shape, d), result_dtype(op, dt), gen, op).to(device)
        ctx = f"{op} {shape} dim={dim} {dt} excl={excl} rev={rev}"
        none = call_reset(op, x, dim, excl, rev, None, None, mask, a)
        plain = unsegmented(op, x, dim, excl, rev, None, mask, a)
        assert same_bits(none, plain), f"{ctx}: reset=None differs from no reset"
        for c in (None, init):
            base = unsegmented(op, x, dim, excl, rev, c, mask, a)
            zeros = torch.zeros(shape, dtype=b8, device=device)
            allf = call_reset(op, x, dim, excl, rev, c, zeros, mask, a)
            ref = (base[0].cpu(), base[1].cpu()) if op in EXT else base.cpu().to(wide_dtype(op, dt))
            assert_result(op, allf, ref, dt, shape[d], f"{ctx} all-False vs no reset, initial={c is not None}")
            first = zeros.clone()
            first.narrow(d, 0, 1).fill_(True)
            first_line = torch.zeros(shape[d], dtype=b8, device=device)
            first_line[0] = True
            first_line = first_line.reshape((shape[d],) + (1,) * (len(shape) - d - 1))  # broadcast
            for r in (first, first_line):
                got = call_reset(op, x, dim, excl, rev, c, r, mask, a, via="wrapper")
                assert same_bits(got, allf), f"{ctx}: a reset at position 0 changed the result"
        # all-True: every element a segment of its own
        ones = torch.ones(shape[d], dtype=b8, device=device).reshape((shape[d],) + (1,) * (len(shape) - d - 1))
        got = call_reset(op, x, dim, excl, rev, None, ones, mask, a)
        lines = x.movedim(d, -1).shape[:-1]
        wide = wide_dtype(op, dt)
        ident = identity_of(op, wide, lines).unsqueeze(-1).expand(lines + (shape[d],)).movedim(-1, d)
        if op in EXT:
            if excl:
                want = (ident, torch.full(shape, -1, dtype=i64))
            else:
                pos = torch.arange(shape[d]).reshape((shape[d],) + (1,) * (len(shape) - d - 1))
                want = (x.cpu(), pos.expand(shape))
        else:
            xv = x.cpu().to(wide)
            if op == "masked_cumsum":
                xv = torch.where(mask.cpu(), xv, torch.zeros_like(xv))
            want = ident if excl else xv
        assert_result(op, got, want, dt, 1, f"{ctx} all-True", rtol=0 if op != "logcumsumexp" else None)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
def test_linear_recurrence_ignores_a_at_segment_starts(flags, device, seed):
    """h[t-1] = 0 at a segment start: a NaN there changes nothing, forward and backward (its
    gradient is 0)."""
    excl, rev = flags
    gen = torch.Generator().manual_seed(seed)
    shape = (3, 40, 2)
    x = torch.randn(shape, generator=gen, dtype=f64).to(device)
    a = rand(shape, f64, gen, "linear_recurrence", "a").to(device)
    r = (torch.rand(shape, generator=gen) < 0.25).to(device)
    rl = r.movedim(1, -1)
    heads = heads_of(rl, rev).movedim(-1, 1)  # interior segment starts in scan order
    assert bool(heads.any())
    a_nan = torch.where(heads, torch.full_like(a, math.nan), a)
    a_zero = torch.where(heads, torch.zeros_like(a), a)
    for c in (None, torch.randn(3, 2, generator=gen, dtype=f64).to(device)):
        outs = []
        for aa in (a_zero, a_nan, a):
            aa = aa.clone().requires_grad_()
            xx = x.clone().requires_grad_()
            y = sops().linear_recurrence(aa, xx, 1, exclusive=excl, reverse=rev, initial=c, reset=r)
            g = torch.ones_like(y)
            da, dx = torch.autograd.grad(y, (aa, xx), g)
            outs.append((y.detach(), da, dx))
        (y0, da0, dx0), (y1, da1, dx1), (y2, da2, dx2) = outs
        assert same_bits(y0, y1) and same_bits(y0, y2), "a at a segment start was used"
        assert same_bits(dx0, dx1) and same_bits(dx0, dx2), "a at a segment start changed dx"
        assert bool((da1[heads] == 0).all()) and bool((da2[heads] == 0).all()), \
            "a nonzero gradient to a at a segment start"
        assert same_bits(da0, da1), "a NaN in a at a segment start changed da elsewhere"
        ref = seq_reference("linear_recurrence", x.cpu(), 1, excl, rev,
                            None if c is None else c.cpu(), r.cpu(), a=a_nan.cpu())
        assert_result("linear_recurrence", y1, ref, f64, 40, "NaN a at heads")


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf_and_ties_in_cummax(device, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, (5, 60), generator=gen).float()
    x[torch.rand(5, 60, generator=gen) < 0.05] = math.nan
    x[torch.rand(5, 60, generator=gen) < 0.05] = math.inf
    x[torch.rand(5, 60, generator=gen) < 0.05] = -math.inf
    r = torch.rand(5, 60, generator=gen) < 0.15
    init = torch.tensor([math.nan, -math.inf, 1.0, 2.0, math.inf])
    for op, (excl, rev), c in itertools.product(EXT, FLAGS, (None, init)):
        got = call_reset(op, x.to(device), 1, excl, rev, None if c is None else c.to(device), r.to(device))
        ref = seq_reference(op, x, 1, excl, rev, c, r)
        assert_result(op, got, ref, f32, 60, f"{op} NaN/inf/ties excl={excl} rev={rev} init={c is not None}")
    # columns (dim 0; the CPU's vector column walk: lanes of 4 and a tail), float32 and float64,
    # a reset per element and one broadcast over the row
    xc = torch.randint(0, 4, (60, 37), generator=gen).float()
    for v, frac in ((math.nan, 0.05), (math.inf, 0.05), (-math.inf, 0.05)):
        xc[torch.rand(60, 37, generator=gen) < frac] = v
    rc = torch.rand(60, 37, generator=gen) < 0.15
    rrow = torch.rand(60, 1, generator=gen) < 0.15
    initc = torch.randint(0, 4, (37,), generator=gen).float()
    initc[::5] = math.nan
    initc[1::7] = -math.inf
    for op, (excl, rev), c, rs, dt in itertools.product(EXT, FLAGS, (None, initc), (rc, rrow), (f32, torch.float64)):
        got = call_reset(op, xc.to(dt).to(device), 0, excl, rev, None if c is None else c.to(dt).to(device),
                         rs.to(device))
        ref = seq_reference(op, xc.to(dt), 0, excl, rev, None if c is None else c.to(dt), rs.expand(60, 37))
        assert_result(op, got, ref, dt, 60, f"{op} columns NaN/inf/ties excl={excl} rev={rev} "
                      f"init={c is not None} bcast={rs.shape[1] == 1} {dt}")


@pytest.mark.parametrize("device", DEVICES)
def test_dtype_argument_and_zero_dim(device, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-9, 9, (4, 30), generator=gen, dtype=i32)
    r = torch.rand(4, 30, generator=gen) < 0.3
    m = torch.rand(4, 30, generator=gen) < 0.6
    for op, dt, (excl, rev) in itertools.product(("cumsum", "masked_cumsum", "cumprod"), (f64, i64, i32), FLAGS):
        xx = torch.where(x.abs() > 3, x.sign(), x) if op == "cumprod" else x
        for via in ("ops", "wrapper"):
            got = call_reset(op, xx.to(device), 1, excl, rev, None, r.to(device), m.to(device), via=via, dtype=dt)
            ref = seq_reference(op, xx.to(dt), 1, excl, rev, None, r, m if op == "masked_cumsum" else None)
            assert_result(op, got, ref, dt, 30, f"{via}.{op} dtype={dt} excl={excl} rev={rev}", out_dtype=dt)
    # a 0-d input: one element, one segment
    for op in OPS:
        x0 = torch.tensor(0.75, device=device)
        m0 = torch.tensor(True, device=device)
        for rv, (excl, rev) in itertools.product((True, False), FLAGS):
            r0 = torch.tensor(rv, device=device)
            got = call_reset(op, x0, 0, excl, rev, None, r0, m0, torch.tensor(0.5, device=device))
            want = unsegmented(op, x0, 0, excl, rev, None, m0, torch.tensor(0.5, device=device))
            assert same_bits(got, want), (op, rv, excl, rev, got, want)


# ---- long lines, many lines, layouts -------------------------------------------------------

def long_inputs(op, shape, dt, gen):
    if op == "cumprod" and not is_exact(dt):
        x = torch.where(torch.rand(shape, generator=gen) < 0.5, torch.ones(shape, dtype=f64),
                        0.999 + 0.002 * torch.rand(shape, generator=gen, dtype=f64)).to(dt)
    else:
        x = rand(shape, dt, gen, op)
    mask = (torch.rand(shape, generator=gen) < 0.6) if op == "masked_cumsum" else None
    a = None
    if op == "linear_recurrence":
        a = ((0.5 + 0.5 * torch.rand(shape, generator=gen, dtype=f64))
             * torch.where(torch.rand(shape, generator=gen) < 0.2, -1.0, 1.0)).to(dt)
    return x, mask, a


LONG_DTYPES = {"cumsum": [f32, i64], "masked_cumsum": [f32, i32], "cumprod": [f32],
               "linear_recurrence": [f32], "logcumsumexp": [f32], "cummax": [f32, i32],
               "cummin": [i32, f32]}


def compare_long(op, got, ref, dt, ctx):
    if op in EXT or is_exact(dt):
        assert_result(op, got, ref, dt, 1, ctx)
    else:
        ref = ref.to(got.dtype) if ref.dtype != got.dtype else ref
        scale = max(1.0, float(ref.abs().max())) if ref.numel() else 1.0
        torch.testing.assert_close(got, ref, rtol=2e-4, atol=2e-4 * scale, msg=lambda m: f"{ctx}: {m}")


def check_cuda_reset(op, dt, x, dim, excl, rev, init, r, mask, a, ctx, reset_cuda=None):
    """The CUDA result of a reset-form call against the CPU one (compare_long), bitwise the
    same run to run; returns it on the CPU. reset_cuda: the reset to pass on the device, where
    its layout matters (else r copied)."""
    cpu = call_reset(op, x, dim, excl, rev, init, r, mask, a)
    xs, rs, cs, ms, as_ = to("cuda", x, r, init, mask, a)
    if reset_cuda is not None:
        rs = reset_cuda
    got = call_reset(op, xs, dim, excl, rev, cs, rs, ms, as_)
    again = call_reset(op, xs, dim, excl, rev, cs, rs, ms, as_)
    assert same_bits(got, again), f"{ctx}: not bitwise reproducible"
    got = tuple(t.cpu() for t in got) if op in EXT else got.cpu()
    compare_long(op, got, cpu, dt, ctx)
    return got


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_long_lines(op, device, seed):
    """1-D 300000 with ~20 resets (the chunked / multi-block paths) and (2, 4097) with shared
    resets, with and without initial, against the unsegmented op run segment by segment."""
    gen = torch.Generator().manual_seed(seed)
    for dt, (shape, nres), (excl, rev) in itertools.product(
            LONG_DTYPES[op], [((300_000,), 20), ((2, 4097), 6)], FLAGS):
        n = shape[-1]
        x, mask, a = long_inputs(op, shape, dt, gen)
        starts = sorted(torch.randint(1, n, (nres,), generator=gen).tolist())
        if nres > 10:
            starts += [1, n - 1, n // 2, n // 2 + 1]  # tiny segments at the ends / middle
            # segment starts at, just before and just after the CPU's chunk boundaries (2^16
            # positions of a line), counted from either end (reverse scans)
            starts += [65535, 65536, 65537, 131072, n - 65537, n - 65536, n - 65535]
        r = torch.zeros(n, dtype=b8)
        r[starts] = True
        init = rand(shape[:-1], result_dtype(op, dt), gen, op)
        x, mask, a, r, init = to(device, x, mask, a, r, init)
        for c in (None, init):
            got = call_reset(op, x, -1, excl, rev, c, r, mask, a)
            ctx = f"{op} {shape} {dt} excl={excl} rev={rev} initial={c is not None} device={device}"
            ref = per_segment_reference(op, x, -1, excl, rev, c, starts, mask, a)
            compare_long(op, got, ref, dt, ctx)
            if op in ("cumsum", "masked_cumsum") and is_exact(dt):
                vec = vec_segmented_cumsum(x, -1, excl, rev, r, c, mask)
                assert_exact(got, vec, ctx + " (vectorised int64 reference)")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_long_line_gradients(op, device, seed):
    """Gradients of a long segmented line (the chunked paths backward) and of a column layout
    equal those of the unsegmented op run segment by segment (float64)."""
    gen = torch.Generator().manual_seed(seed)
    for (shape, dim), (excl, rev) in itertools.product([((150_000,), 0), ((2, 2500, 64), 1)],
                                                       [(False, False), (True, True), (False, True)]):
        n = shape[dim]
        x, mask, a = long_inputs(op, shape, f64, gen)
        starts = sorted(set(torch.randint(1, n, (12,), generator=gen).tolist()
                            + [1, n - 1] + ([65536, n - 65536] if n > 65536 else [1024, n - 1024])))
        r = torch.zeros(n, dtype=b8)
        r[starts] = True
        r = r.reshape((n,) + (1,) * (len(shape) - dim - 1))
        c = rand(line_shape(shape, dim), f64, gen, op)
        g = torch.randn(shape, generator=gen, dtype=f64)
        x, mask, a, r, c, g = to(device, x, mask, a, r, c, g)
        leaves = [t.clone().requires_grad_() for t in ([x, c] + ([a] if a is not None else []))]
        grads = []
        for how in ("reset", "per-segment"):
            xx, cc = leaves[0], leaves[1]
            aa = leaves[2] if a is not None else None
            if how == "reset":
                y = call_reset(op, xx, dim, excl, rev, cc, r, mask, aa)
            else:
                y = per_segment_reference(op, xx, dim, excl, rev, cc, starts, mask, aa)
            y = finite(y[0] if op in EXT else y)
            grads.append(torch.autograd.grad(y, leaves, g, allow_unused=True))
        for name, p, q in zip(("x", "initial", "a"), *grads):
            q = torch.zeros_like(p) if q is None else q
            ctx = f"d{name} of {op} {shape} dim={dim} excl={excl} rev={rev}"
            torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-9 * max(1.0, float(q.abs().max())),
                                       msg=lambda m: f"{ctx}: {m}")


# (shape, dim, reset layout): many short lines, few long lines with per-line resets, columns
BIG = [((2000, 17), 1, "dense"), ((2, 30_000), 1, "sparse"), ((3, 3000, 8), 1, "dense"),
       ((3, 3000, 8), 1, "lines_bcast"), ((50_000, 3), 0, "dense"), ((64, 500, 3), 0, "sparse"),
       ((2, 3000, 64), 1, "dense"), ((2, 3000, 64), 1, "sparse")]  # the last: lines in chunks


@pytest.mark.parametrize("device", DEVICES)
def test_many_lines_few_lines_columns_exact(device, seed):
    """Per-line random resets on big layouts: int64 (masked) cumsum and int32 cummax / cummin
    against exact vectorised references, float32 cumsum against a float64 one."""
    gen = torch.Generator().manual_seed(seed)
    for (shape, dim, layout), (excl, rev) in itertools.product(BIG, FLAGS):
        r = make_reset(layout, shape, dim, gen, p=0.2 if layout == "dense" else 0.004)
        xi = torch.randint(-1000, 1000, shape, generator=gen, dtype=i64)
        m = torch.rand(shape, generator=gen) < 0.6
        c = torch.randint(-1000, 1000, line_shape(shape, dim), generator=gen, dtype=i64)
        xi_, r_, m_, c_ = to(device, xi, r, m, c)
        ctx = f"{shape} dim={dim} {layout} excl={excl} rev={rev} device={device}"
        got = call_reset("cumsum", xi_, dim, excl, rev, c_, r_)
        assert_exact(got, vec_segmented_cumsum(xi, dim, excl, rev, r, c), "cumsum int64 " + ctx)
        got = call_reset("masked_cumsum", xi_, dim, excl, rev, None, r_, m_)
        assert_exact(got, vec_segmented_cumsum(xi, dim, excl, rev, r, None, m), "masked_cumsum int64 " + ctx)
        x32 = torch.randint(-2 ** 31, 2 ** 31 - 1, shape, generator=gen, dtype=i32)
        for op in EXT:
            got = call_reset(op, x32.to(device), dim, excl, rev, None, r_)
            assert_result(op, got, vec_segmented_extremum_int32(op, x32, dim, excl, rev, r), i32, 1,
                          f"{op} int32 " + ctx)
        xf = torch.randn(shape, generator=gen)
        got = call_reset("cumsum", xf.to(device), dim, excl, rev, None, r_)
        ref = vec_segmented_cumsum(xf, dim, excl, rev, r)
        assert_result("cumsum", got, ref, f32, shape[dim], "cumsum float32 " + ctx)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_many_lines_few_lines_columns(op, device, seed):
    """Every op on the big layouts: many short lines against the sequential loop, few long
    lines and columns against the unsegmented op run segment by segment on each line."""
    gen = torch.Generator().manual_seed(seed)
    dt = LONG_DTYPES[op][-1]
    cases = [((2000, 17), 1, "dense", "seq"), ((2, 30_000), 1, "sparse", "line"),
             ((3, 3000, 4), 1, "lines_bcast", "line"), ((1500, 3), 0, "sparse", "line"),
             ((2, 2500, 64), 1, "lines_bcast", "line")]  # the last: lines cut in chunks
    for k, ((shape, dim, layout, how), (excl, rev)) in enumerate(itertools.product(cases, FLAGS)):
        x, mask, a = long_inputs(op, shape, dt, gen)
        r = make_reset(layout, shape, dim, gen, p=0.3 if how == "seq" else 0.004)
        init = rand(line_shape(shape, dim), result_dtype(op, dt), gen, op) if k % 2 else None
        xs, ms, as_, rs, cs = to(device, x, mask, a, r, init)
        got = call_reset(op, xs, dim, excl, rev, cs, rs, ms, as_)
        ctx = f"{op} {shape} dim={dim} {dt} {layout} excl={excl} rev={rev} init={init is not None}"
        if how == "seq":
            assert_result(op, got, seq_reference(op, x, dim, excl, rev, init, r, mask, a), dt,
                          shape[dim], ctx)
        else:
            if layout == "lines_bcast":  # the same resets for every column: per outer index
                refs = [per_segment_reference(op, x[o], 0, excl, rev, None if init is None else init[o],
                                              r[o, :, 0].nonzero().flatten().tolist(),
                                              None if mask is None else mask[o],
                                              None if a is None else a[o]) for o in range(shape[0])]
                ref = (torch.stack([q[0] for q in refs]), torch.stack([q[1] for q in refs])) \
                    if op in EXT else torch.stack(refs)
            else:
                ref = per_line_segment_reference(op, x, dim, excl, rev, init, r, mask, a)
            compare_long(op, tuple(t.cpu() for t in got) if op in EXT else got.cpu(), ref, dt, ctx)


def test_threads_bitwise(seed):
    """The CPU back end: the default thread count, 1 and 4 threads give the same bits (reset
    and offsets forms)."""
    gen = torch.Generator().manual_seed(seed)
    cases = [((300_000,), 0), ((4, 70_001), 1), ((40_001, 5), 0), ((2, 20_001, 3), 1)]
    results = {}
    threads = list(dict.fromkeys([torch.get_num_threads(), 1, 4]))
    for nt in threads:
        torch.set_num_threads(nt)
        gen.manual_seed(seed)
        out = []
        for op, (shape, dim) in itertools.product(OPS, cases):
            x, mask, a = long_inputs(op, shape, f32, gen)
            r = torch.rand(shape, generator=gen) < 0.001
            c = rand(line_shape(shape, dim), f32, gen, op)
            for excl, rev in ((False, False), (True, True)):
                out.append(call_reset(op, x, dim, excl, rev, c, r, mask, a))
        lens = torch.randint(0, 40, (5000,), generator=gen)
        offs = torch.cat([torch.zeros(1, dtype=i64), lens.cumsum(0)])
        v = torch.randn(int(offs[-1]), 3, generator=gen)
        for op in ("cumsum", "logcumsumexp", "cummax"):
            out.append(call_segment(op, v, offs, False, True))
        results[nt] = out
    for nt in threads[1:]:
        for k, (p, q) in enumerate(zip(results[threads[0]], results[nt])):
            assert same_bits(p, q), f"case {k}: {threads[0]} threads and {nt} threads differ"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
def test_chunked_continuation(flags, device, seed):
    """A segmented line in chunks, each chunk from the previous one's final state, equals the
    whole line when every chunk boundary is inside a segment."""
    excl, rev = flags
    gen = torch.Generator().manual_seed(seed)
    bounds = [0, 1, 250, 251, 600, 1000]
    shape, dim = (3, 1000, 2), 1
    for op in OPS:
        dt = {"cumsum": i64, "masked_cumsum": i32, "cummin": i32}.get(op, f64)
        x = rand(shape, dt, gen, op).to(device)
        mask = (torch.rand(shape, generator=gen) < 0.6).to(device) if op == "masked_cumsum" else None
        a = rand(shape, dt, gen, op, role="a").to(device) if op == "linear_recurrence" else None
        r = torch.rand(shape, generator=gen) < 0.05
        r[:, bounds[1:-1]] = False
        r = r.to(device)
        whole = call_reset(op, x, dim, excl, rev, None, r, mask, a)
        pieces = list(zip(bounds[:-1], bounds[1:]))
        state, outs = None, {}
        for lo, hi in (pieces[::-1] if rev else pieces):
            def sl(t):
                return None if t is None else t.narrow(dim, lo, hi - lo)
            y = call_reset(op, sl(x), dim, excl, rev, state, sl(r), sl(mask), sl(a))
            yv = y[0] if op in EXT else y
            outs[lo] = yv
            last = 0 if rev else hi - lo - 1
            state = yv.select(dim, last)
            if excl:  # the state after the chunk's last element
                xl = sl(x).select(dim, last).to(state.dtype)
                head = heads_of(sl(r).movedim(dim, -1), rev)[..., last]
                nxt = {"cumsum": lambda s: s + xl,
                       "masked_cumsum": lambda s: s + torch.where(sl(mask).select(dim, last), xl, torch.zeros_like(xl)),
                       "cumprod": lambda s: s * xl,
                       "linear_recurrence": lambda s: sl(a).select(dim, last) * s + xl,
                       "logcumsumexp": lambda s: torch.logaddexp(s, xl),
                       "cummax": lambda s: torch.maximum(s, xl),
                       "cummin": lambda s: torch.minimum(s, xl)}[op](state)
                lift = torch.where(sl(mask).select(dim, last), xl, torch.zeros_like(xl)) \
                    if op == "masked_cumsum" else xl
                state = torch.where(head, lift, nxt)
        got = torch.cat([outs[k] for k in sorted(outs)], dim)
        want = whole[0] if op in EXT else whole
        if is_exact(dt) or op in EXT:
            assert_exact(got, want, f"{op} chunks")
        else:
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12 * float(want.abs().max()))


# ---- autograd ------------------------------------------------------------------------------

def finite(y):
    """Exclusive logcumsumexp / cummax / cummin write an infinite identity at every segment
    start (also with initial): no gradient there, and gradcheck's differences need finite
    values."""
    return torch.where(torch.isfinite(y.detach()), y, torch.zeros_like(y))


RESET_36 = [[False, False, True, False, True, False], [False, True, True, False, False, False],
            [True, False, False, False, False, True]]


def _grad_reset_fn(op, excl, rev, r, dim=1):
    def f(*args):
        if op == "linear_recurrence":
            a, x, c = (args + (None,))[:3]
            return sops().linear_recurrence(a, x, dim, exclusive=excl, reverse=rev, initial=c, reset=r)
        x, c = (args + (None,))[:2]
        if op == "masked_cumsum":
            m = torch.arange(x.numel(), device=x.device).reshape(x.shape) % 3 != 1
            return sops().masked_cumsum(x, m, dim, exclusive=excl, reverse=rev, initial=c, reset=r)
        y = getattr(sops(), op)(x, dim, exclusive=excl, reverse=rev, initial=c, reset=r)
        return finite(y[0] if op in EXT else y)
    return f


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
@pytest.mark.parametrize("op", OPS)
def test_gradcheck_reset(op, flags, device, seed):
    gen = torch.Generator().manual_seed(seed)
    r_full = torch.tensor(RESET_36, device=device)
    r_line = torch.tensor([False, True, False, False, True, True], device=device)  # broadcast (6,)
    combos = [(f64, r_full, None), (f64, r_full, (3,)), (f64, r_line, ())]
    if op in COMPLEX_OPS:
        combos.append((c128, r_full, (3,)))
    for dt, r, ishape in combos:
        x = rand((3, 6), dt, gen, op).to(device).requires_grad_()
        f = _grad_reset_fn(op, *flags, r)
        args = [x]
        if op == "linear_recurrence":
            args = [rand((3, 6), dt, gen, op, "a").to(device).requires_grad_(), x]
        if ishape is not None:
            args.append(rand(ishape, dt, gen, op).to(device).requires_grad_())
        assert torch.autograd.gradcheck(f, tuple(args))
        assert torch.autograd.gradgradcheck(f, tuple(args))
    # the gradient never flows to reset, which is bool, and does not need one
    x = torch.randn(3, 6, dtype=f64, device=device, requires_grad=True)
    y = sops().cumsum(x, 1, reset=r_full)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert not r_full.requires_grad
    # d/dx of the sum of a segmented inclusive cumsum: the count of positions after x in its segment
    want = seq_reference("cumsum", torch.ones(3, 6, dtype=f64), 1, False, True, reset=r_full.cpu())
    torch.testing.assert_close(g.cpu(), want)


# ---- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES + ["meta"])
@pytest.mark.parametrize("op", OPS)
def test_bad_reset(op, device):
    x = torch.randn(3, 4, device=device)
    mask = torch.ones(3, 4, dtype=b8, device=device)
    a = torch.rand(3, 4, device=device)
    bad = [torch.zeros(3, 4, dtype=u8, device=device),  # not bool
           torch.zeros(3, 4, device=device),  # not bool
           torch.zeros(5, dtype=b8, device=device),  # not broadcastable
           torch.zeros(4, 3, dtype=b8, device=device),
           torch.zeros(2, 3, 4, dtype=b8, device=device)]  # broadcasts beyond x's shape
    if device == "cuda":
        bad.append(torch.zeros(3, 4, dtype=b8))  # another device
    for r, via, grad in itertools.product(bad, ("ops", "wrapper"), (False, True)):
        xx = x.clone().requires_grad_(grad)
        before = r.clone()
        with pytest.raises(RuntimeError) as e:
            call_reset(op, xx, 1, reset=r, mask=mask, a=a, via=via)
        msg = str(e.value)
        assert f"scanops.{op}" in msg and "reset" in msg, msg
        if device != "meta":
            assert torch.equal(r, before) and torch.equal(xx.detach(), x)
    if device == "cuda":  # x on the CPU, reset on the GPU
        with pytest.raises(RuntimeError) as e:
            call_reset(op, x.cpu(), 1, reset=torch.zeros(3, 4, dtype=b8, device=device),
                       mask=mask.cpu(), a=a.cpu())
        assert f"scanops.{op}" in str(e.value) and "reset" in str(e.value), str(e.value)
    # control: good ones work (full, broadcast, expanded)
    for r in (torch.zeros(3, 4, dtype=b8, device=device), torch.ones(4, dtype=b8, device=device),
              torch.ones(3, 1, dtype=b8, device=device), torch.tensor(True, device=device)):
        call_reset(op, x, 1, reset=r, mask=mask, a=a)


# ================================================================================================
# Offsets form
# ================================================================================================

def make_offsets(lengths, dtype=i64):
    return torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=dtype)


def seg_reference(op, values, offsets, exclusive, reverse, initial=None, mask=None, a=None):
    """Each segment as a line of its own through seq_reference: the segments padded to
    (B, Lmax, *features), left-aligned for forward scans and right-aligned for reverse ones
    (the padding comes after the segment in scan order), initial (B, *features)."""
    offs = offsets.long().cpu()
    B = offs.numel() - 1
    lens = offs[1:] - offs[:-1]
    total = values.shape[0]
    feat = tuple(values.shape[1:])
    wide = wide_dtype(op, values.dtype)
    Lmax = int(lens.max()) if B else 0
    if total == 0:
        y = torch.empty(values.shape, dtype=wide)
        return (y, torch.empty(values.shape, dtype=i64)) if op in EXT else y
    seg = torch.repeat_interleave(torch.arange(B), lens)
    shift = (Lmax - lens) if reverse else torch.zeros_like(lens)
    pos = torch.arange(total) - offs[:-1][seg] + shift[seg]

    def pad(t, fill):
        P = torch.full((B, Lmax) + feat, fill, dtype=t.dtype)
        P[seg, pos] = t.expand(values.shape)
        return P
    Pv = pad(values, 0)
    Pm = None if mask is None else pad(mask, False)
    Pa = None if a is None else pad(a, 1)
    init = None if initial is None else initial.expand((B,) + feat)
    ref = seq_reference(op, Pv, 1, exclusive, reverse, init, None, Pm, Pa)
    if op in EXT:
        v, i = ref[0][seg, pos], ref[1][seg, pos]
        sh = shift[seg].reshape((total,) + (1,) * len(feat))
        return v, torch.where(i >= 0, i - sh, i)
    return ref[seg, pos]


SEG_DTYPES = {"cumsum": [f32, i32, c64], "masked_cumsum": [f64, i64], "cumprod": [f64, i64, c64],
              "linear_recurrence": [f32, f64, c64], "logcumsumexp": [f32, f64],
              "cummax": [f32, i32], "cummin": [f64, u8]}


def seg_configs(gen):
    many = torch.randint(0, 6, (1000,), generator=gen).tolist()
    return [([], ()), ([], (3,)), ([5], (3,)), ([0], ()), ([1], (2, 5)), ([3, 0, 0, 4, 1, 0, 2], (2, 5)),
            (many, ()), (many, (3,)), ([257, 0, 17, 1], (3,)), ([0, 0], ()), ([0, 2, 0], (2, 5))]


def check_segment(op, lengths, feat, dtype, exclusive, reverse, device, seed, init_mode=None,
                  off_dtype=i64, via="ops"):
    gen = torch.Generator().manual_seed(seed)
    B, total = len(lengths), sum(lengths)
    shape = (total,) + tuple(feat)
    values = rand(shape, dtype, gen, op)
    offsets = make_offsets(lengths, off_dtype)
    rd = result_dtype(op, dtype)
    init = None
    if init_mode == "full":
        init = rand((B,) + tuple(feat), rd, gen, op)
    elif init_mode == "bcast":  # (1, *features) / (*features,) / ()
        init = rand([(1,) + tuple(feat), tuple(feat), ()][seed % 3], rd, gen, op)
    mask = (torch.rand(shape, generator=gen) < 0.7) if op == "masked_cumsum" else None
    a = rand(shape, dtype, gen, op, role="a") if op == "linear_recurrence" else None
    vs, os_, cs, ms, as_ = to(device, values, offsets, init, mask, a)
    before = [t.clone() for t in (vs, os_, cs, ms, as_) if t is not None]
    got = call_segment(op, vs, os_, exclusive, reverse, cs, ms, as_, via=via)
    again = call_segment(op, vs, os_, exclusive, reverse, cs, ms, as_, via=via)
    ctx = (f"{via}.segment_{op}(lengths={lengths if len(lengths) < 20 else f'{len(lengths)} segments'}, "
           f"features={feat}, dtype={dtype}, exclusive={exclusive}, reverse={reverse}, "
           f"initial={None if init is None else tuple(init.shape)}, offsets {off_dtype}, "
           f"device={device}, seed={seed})")
    for b, t in zip(before, [t for t in (vs, os_, cs, ms, as_) if t is not None]):
        assert same_bits(b, t), f"{ctx}: an input was modified"
    assert same_bits(got, again), f"{ctx}: not bitwise reproducible"
    ref = seg_reference(op, values, offsets, exclusive, reverse, init, mask, a)
    assert_result(op, got, ref, dtype, max(lengths, default=1), ctx)
    return got


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("via", ["ops", "wrapper"])
def test_segment_hand_example(via, device):
    v = torch.tensor([1, 2, 3, 4, 5], device=device)
    offs = torch.tensor([0, 2, 2, 4, 5], device=device)
    want = {(False, False): [1, 3, 3, 7, 5], (True, False): [0, 1, 0, 3, 0],
            (False, True): [3, 2, 7, 4, 5], (True, True): [2, 0, 4, 0, 0]}
    c = torch.tensor([10, 20, 30, 40], device=device)
    want_init = {(False, False): [11, 13, 33, 37, 45], (True, False): [10, 11, 30, 33, 40],
                 (False, True): [13, 12, 37, 34, 45], (True, True): [12, 10, 34, 30, 40]}
    for f in FLAGS:
        assert call_segment("cumsum", v, offs, *f, via=via).tolist() == want[f], f
        assert call_segment("cumsum", v, offs.int(), *f, via=via).tolist() == want[f], f
        assert call_segment("cumsum", v, offs, *f, initial=c, via=via).tolist() == want_init[f], f
        ref = seg_reference("cumsum", v.cpu(), offs, *f, initial=c.cpu())
        assert ref.tolist() == want_init[f], f
    vm = torch.tensor([1.0, 3.0, 2.0, 5.0, 4.0], device=device)
    om = torch.tensor([0, 3, 5], device=device)
    val, idx = call_segment("cummax", vm, om, via=via)
    assert val.tolist() == [1, 3, 3, 5, 5] and idx.tolist() == [0, 1, 1, 0, 0]
    val, idx = call_segment("cummax", vm, om, False, True, via=via)
    assert val.tolist() == [3, 3, 2, 5, 4] and idx.tolist() == [1, 1, 2, 0, 1]
    val, idx = call_segment("cummax", vm, om, True, False, initial=torch.tensor([2.0, 9.0], device=device), via=via)
    assert val.tolist() == [2, 2, 3, 9, 9] and idx.tolist() == [-1, -1, 1, -1, -1]
    for f in FLAGS:
        rv, ri = seg_reference("cummax", vm.cpu(), om.cpu(), *f)
        gv, gi = call_segment("cummax", vm, om, *f, via=via)
        assert gv.tolist() == rv.tolist() and gi.tolist() == ri.tolist(), f


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
@pytest.mark.parametrize("op", OPS)
def test_segment_against_reference(op, flags, device, seed):
    gen = torch.Generator().manual_seed(seed)
    configs = seg_configs(gen)
    for k, dt in enumerate(SEG_DTYPES[op]):
        for j, (lengths, feat) in enumerate(configs):
            if dt.is_complex and j % 3:
                continue
            s = seed + 31 * k + j
            check_segment(op, lengths, feat, dt, *flags, device, seed=s,
                          init_mode=[None, "full", "bcast"][(j + k) % 3],
                          off_dtype=i32 if (j + k) % 4 == 1 else i64,
                          via="wrapper" if (j + k) % 2 else "ops")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_segment_equals_reset_form(op, device, seed):
    """Without initial, segment_<op>(values, offsets) is <op>(values, 0, reset=r) with r true at
    offsets[:-1] (indices within the segment instead of the line)."""
    gen = torch.Generator().manual_seed(seed)
    dt = {"cumsum": i64, "masked_cumsum": i32, "cumprod": f64, "cummax": f32, "cummin": i32}.get(op, f64)
    for feat, (excl, rev) in itertools.product(((), (3,)), FLAGS):
        lengths = torch.randint(0, 7, (200,), generator=gen).tolist()
        offs = make_offsets(lengths)
        total = int(offs[-1])
        values = rand((total,) + feat, dt, gen, op)
        mask = (torch.rand(values.shape, generator=gen) < 0.6) if op == "masked_cumsum" else None
        a = rand(values.shape, dt, gen, op, role="a") if op == "linear_recurrence" else None
        r = torch.zeros(total, dtype=b8)
        r[offs[:-1][offs[:-1] < total]] = True
        r = r.reshape((total,) + (1,) * len(feat))
        values, offs, mask, a, r = to(device, values, offs, mask, a, r)
        seg = call_segment(op, values, offs, excl, rev, None, mask, a)
        res = call_reset(op, values, 0, excl, rev, None, r, mask, a)
        ctx = f"segment_{op} vs reset form, features={feat}, excl={excl}, rev={rev}"
        if op in EXT:
            row_seg = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)).to(device)
            start = offs[:-1][row_seg].reshape((total,) + (1,) * len(feat))
            idx = torch.where(res[1] >= 0, res[1] - start, res[1])
            assert_exact(seg[0], res[0], ctx)
            assert_exact(seg[1], idx, ctx, "indices")
        elif is_exact(dt):
            assert_exact(seg, res, ctx)
        else:
            torch.testing.assert_close(seg, res, rtol=1e-12, atol=1e-12, msg=lambda m: f"{ctx}: {m}")


@pytest.mark.parametrize("device", DEVICES)
def test_segment_dtype_argument(device, seed):
    gen = torch.Generator().manual_seed(seed)
    lengths = [4, 0, 7, 1]
    offs = make_offsets(lengths).to(device)
    v = torch.randint(-5, 5, (12, 2), generator=gen, dtype=i32)
    m = torch.rand(12, 2, generator=gen) < 0.5
    for op, dt, flags in itertools.product(("cumsum", "masked_cumsum", "cumprod"), (f64, i32), FLAGS):
        for via in ("ops", "wrapper"):
            got = call_segment(op, v.to(device), offs, *flags, mask=m.to(device), via=via, dtype=dt)
            ref = seg_reference(op, v.to(dt), offs, *flags, mask=m if op == "masked_cumsum" else None)
            assert_result(op, got, ref, dt, 7, f"{via}.segment_{op} dtype={dt} {flags}", out_dtype=dt)


def _nested(t, offsets):
    return torch.nested.nested_tensor_from_jagged(t, offsets)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_segment_nested_jagged(op, device, seed):
    gen = torch.Generator().manual_seed(seed)
    dt = {"cummin": i32, "cumsum": i64}.get(op, f32)
    for feat, (excl, rev), with_init in itertools.product(((), (3,)), FLAGS, (False, True)):
        lengths = [3, 0, 2, 5, 1]
        offs = make_offsets(lengths).to(device)
        v = rand((11,) + feat, dt, gen, op).to(device)
        mask = (torch.rand(v.shape, generator=gen) < 0.6).to(device)
        a = rand(v.shape, dt, gen, op, role="a").to(device)
        init = rand((5,) + feat, result_dtype(op, dt), gen, op).to(device) if with_init else None
        nt = _nested(v, offs)
        plain = call_segment(op, v, offs, excl, rev, init, mask, a)
        variants = [dict()]
        if op == "masked_cumsum":
            variants = [dict(mask=_nested(mask, nt.offsets())), dict(mask=mask)]
        if op == "linear_recurrence":
            variants = [dict(a=_nested(a, nt.offsets())), dict(a=a)]
        for extra in variants:
            kw = dict(mask=mask, a=a)
            kw.update(extra)
            out = call_segment(op, nt, None, excl, rev, init, kw["mask"], kw["a"], via="wrapper")
            ctx = f"nested segment_{op} features={feat} excl={excl} rev={rev} init={with_init} {list(extra)}"
            outs = out if op in EXT else (out,)
            wants = plain if op in EXT else (plain,)
            for o, w in zip(outs, wants):
                assert o.is_nested and o.layout == torch.jagged, ctx
                assert torch.equal(o.offsets(), nt.offsets()), ctx
                assert o.dim() == nt.dim() and o.shape[0] == nt.shape[0], ctx
                assert same_bits(o.values(), w), ctx
    # a nested input built from a list of tensors (its own offsets)
    parts = [torch.randn(n, 2, generator=gen).to(device) for n in (4, 1, 3)]
    nt = torch.nested.nested_tensor(parts, layout=torch.jagged)
    out = scanops.segment_cumsum(nt)
    for p, o in zip(parts, out.unbind()):
        torch.testing.assert_close(o, torch.cumsum(p, 0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
@pytest.mark.parametrize("op", OPS)
def test_gradcheck_segment(op, flags, device, seed):
    gen = torch.Generator().manual_seed(seed)
    excl, rev = flags
    offs = make_offsets([2, 0, 3, 2, 0]).to(device)  # empty segments, one at the end
    mask = (torch.arange(14, device=device).reshape(7, 2) % 3 != 1)
    for dt in [f64] + ([c128] if op == "cumsum" else []):
        v = rand((7, 2), dt, gen, op).to(device).requires_grad_()
        a = rand((7, 2), dt, gen, op, "a").to(device).requires_grad_()
        for ishape in (None, (5, 2), (2,)):
            c = None if ishape is None else rand(ishape, dt, gen, op).to(device).requires_grad_()

            def f(*ts):
                it = iter(ts)
                vv = next(it)
                aa = next(it) if op == "linear_recurrence" else None
                y = call_segment(op, vv, offs, excl, rev, next(it, None), mask, aa)
                return finite(y[0] if op in EXT else y)
            args = (v,) + ((a,) if op == "linear_recurrence" else ()) + ((c,) if c is not None else ())
            assert torch.autograd.gradcheck(f, args)
            assert torch.autograd.gradgradcheck(f, args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_bad_offsets(op, device):
    v = torch.randn(7, 3, device=device)
    mask = torch.ones(7, 3, dtype=b8, device=device)
    a = torch.rand(7, 3, device=device)

    def t(x, dt=i64):
        return torch.tensor(x, dtype=dt, device=device)
    bad = [t([1, 3, 7]), t([0, 4, 2, 7]), t([0, 2, 6]), t([0, 2, 9]), t([0, -1, 7]),
           t([0.0, 2.0, 7.0], f32), t([[0, 2, 7]]), t([], i64), t([3])]
    if device == "cuda":
        bad.append(torch.tensor([0, 2, 7]))  # another device
    bad += [t([0, 4, 2, 7], torch.int32), t([1, 7], torch.int32)]
    # without initial the offsets are checked with the reset mask (_segment_heads), with an
    # initial value (a scalar broadcast to any B) as the joined form's int64 offsets
    for offs, via, c in itertools.product(bad, ("ops", "wrapper"), (None, t(0.0, f32))):
        if c is not None and (offs.dtype not in (i64, torch.int32) or offs.device != v.device):
            continue
        before_v, before_o = v.clone(), offs.clone()
        with pytest.raises((RuntimeError, ValueError)) as e:
            call_segment(op, v, offs, initial=c, mask=mask, a=a, via=via)
        msg = str(e.value)
        assert f"scanops.segment_{op}" in msg and "offsets" in msg, (offs, msg)
        assert torch.equal(v, before_v) and torch.equal(offs, before_o)
    # initial of a wrong shape (B = 2 segments, features (3,)); dtype mismatch
    good = t([0, 2, 7])
    for c in (torch.zeros(3, 3, device=device), torch.zeros(2, 4, device=device),
              torch.zeros(4, 2, 3, device=device), torch.zeros(7, 3, device=device)):
        with pytest.raises((RuntimeError, ValueError)) as e:
            call_segment(op, v, good, initial=c, mask=mask, a=a)
        msg = str(e.value)
        assert f"scanops.segment_{op}" in msg and "initial" in msg, (tuple(c.shape), msg)
    # controls: good offsets, int32 offsets, good initial shapes
    for offs, c in ((good, None), (good.int(), None), (good, torch.zeros(2, 3, device=device)),
                    (good, torch.zeros(2, 1, device=device)), (good, torch.zeros((), device=device))):
        call_segment(op, v, offs, initial=c, mask=mask, a=a)


def test_heads_exact_cpu(seed):
    """CPU: at a head the inclusive output is the element itself and the exclusive one the
    identity, bit for bit (-0.0, infinities and NaN among the elements), and an exclusive
    line's first output is its initial value, for the vector kernels' combines and dtypes
    (rows and columns, both directions, lines cut into chunks)."""
    gen = torch.Generator().manual_seed(seed)
    ident = {"cumsum": 0.0, "cumprod": 1.0, "linear_recurrence": 0.0, "logcumsumexp": -math.inf}
    for dt, (shape, dim), op, rev in itertools.product(
            (f32, torch.float64), (((70_001,), 0), ((3, 1001), 1), ((501, 7), 0), ((2, 300, 9), 1)),
            list(ident), (False, True)):
        x = torch.randn(shape, generator=gen, dtype=dt)
        special = torch.tensor([-0.0, 0.0, math.inf, -math.inf, math.nan, 1e30], dtype=dt)
        pick = torch.rand(shape, generator=gen) < 0.05
        x[pick] = special[torch.randint(0, 6, (int(pick.sum()),), generator=gen)]
        r = torch.rand(shape, generator=gen) < 0.2
        a = torch.rand(shape, generator=gen, dtype=dt)
        init = torch.randn(shape[:dim] + shape[dim + 1:], generator=gen, dtype=dt)
        # heads in scan order: reset at l (forward) or l + 1 (reverse), not the line's first
        rr = r.movedim(dim, -1)
        h = torch.zeros_like(rr)
        if rev:
            h[..., :-1] = rr[..., 1:]
        else:
            h[..., 1:] = rr[..., 1:]
        bits = torch.int32 if dt == f32 else torch.int64
        for excl in (False, True):
            y = call_reset(op, x, dim, excl, rev, init, r, a=a).movedim(dim, -1)
            want = torch.full_like(x.movedim(dim, -1), ident[op]) if excl else x.movedim(dim, -1)
            assert torch.equal(y[h].view(bits), want[h].view(bits)), (op, dt, shape, rev, excl)
            if excl:
                first = y[..., -1] if rev else y[..., 0]
                assert torch.equal(first.contiguous().view(bits), init.view(bits)), (op, dt, shape, rev)


def _same_bits_but_nan(got, want, ctx):
    """Bit for bit where want is not NaN, NaN where it is (the NaN's bits are the conversion's)."""
    wn = torch.isnan(want)
    assert torch.equal(torch.isnan(got), wn), f"{ctx}: NaN positions differ"
    g, w = got[~wn], want[~wn]
    bad = g.view(torch.int16) != w.view(torch.int16)
    if bool(bad.any()):
        i = bad.nonzero()[:4].flatten().tolist()
        raise AssertionError(f"{ctx}: {int(bad.sum())}/{g.numel()} differ; "
                             + ", ".join(f"got {g[k].item()!r} want {w[k].item()!r}" for k in i))


@pytest.mark.parametrize("dt", [f16, bf16], ids=["float16", "bfloat16"])
def test_half_bf16_vector_kernels_exact_cpu(dt, seed):
    """CPU float16 / bfloat16 (the AVX2 segmented kernels converting at their loads and
    stores): the generic walk's bits. Sums, products and linear recurrences against the
    sequential float64 reference rounded as the generic walk rounds (to float, then to the
    dtype), cummax / cummin exactly (values and indices), logcumsumexp within the dtype's
    tolerance; rows and columns, per-element and broadcast resets, both directions, inclusive
    and exclusive, with and without initial, -0.0 / inf / NaN among the elements."""
    gen = torch.Generator().manual_seed(seed)
    special = torch.tensor([-0.0, 0.0, math.inf, -math.inf, math.nan], dtype=f64)
    cases = [((301,), 0), ((3, 257), 1), ((203, 9), 0), ((2, 120, 70), 1)]
    for k, (op, (shape, dim), (excl, rev)) in enumerate(itertools.product(OPS, cases, FLAGS)):
        x, mask, a = long_inputs(op, shape, f32, gen)
        if op not in ("cumprod",):
            x = x * torch.exp2(torch.randint(-8, 8, shape, generator=gen).float())
        x = x.to(dt)
        pick = torch.rand(shape, generator=gen) < 0.03
        x[pick] = special[torch.randint(0, 5, (int(pick.sum()),), generator=gen)].to(dt)
        a = None if a is None else a.to(dt)
        if k % 3 == 1 and len(shape) > 1:  # one flag for every line: broadcast
            rs = list(shape)
            rs[-1 if dim == 0 else 0] = 1
            r = (torch.rand(rs, generator=gen) < 0.1).expand(shape)
        else:
            r = torch.rand(shape, generator=gen) < 0.1
        init = rand(line_shape(shape, dim), f64, gen, op).to(dt) if k % 2 else None
        got = call_reset(op, x, dim, excl, rev, init, r, mask, a)
        ref = seq_reference(op, x, dim, excl, rev, init, r, mask, a)
        ctx = f"{op} {dt} {shape} dim={dim} excl={excl} rev={rev} init={init is not None}"
        if op in EXT:
            assert_result(op, got, ref, dt, 1, ctx)
            _same_bits_but_nan(got[0], ref[0], ctx)
        elif op == "logcumsumexp":
            assert_result(op, got, ref, dt, shape[dim], ctx)
        else:
            _same_bits_but_nan(got, ref.to(f32).to(dt), ctx)


@pytest.mark.parametrize("dt", [f16, bf16], ids=["float16", "bfloat16"])
def test_half_bf16_vector_kernels_chunked_cpu(dt, seed):
    """CPU float16 / bfloat16 lines long enough to be cut into chunks (fewer than kMinUnits
    units: a pass of chunk totals, then each chunk from its carry), rows and columns: (masked)
    cumsum of elements whose float64 sums are exact (multiples of 1/16, small) against the
    library's float64 result rounded to float then to the dtype, bit for bit; cummax / cummin
    against the float64 result (values and indices); at 1 and 2 threads."""
    gen = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    try:
        for nt, (shape, dim), (excl, rev) in itertools.product(
                (1, 2), (((150_001,), 0), ((3000, 64), 0), ((2, 2500, 33), 1)), FLAGS):
            torch.set_num_threads(nt)
            x = (torch.randint(-64, 65, shape, generator=gen) / 16).to(dt)
            r = torch.rand(shape, generator=gen) < 0.001
            m = torch.rand(shape, generator=gen) < 0.6
            init = (torch.randint(-64, 65, line_shape(shape, dim), generator=gen) / 16).to(dt)
            ctx = f"{dt} {shape} dim={dim} excl={excl} rev={rev} threads={nt}"
            for op in ("cumsum", "masked_cumsum"):
                got = call_reset(op, x, dim, excl, rev, init, r, m)
                want = call_reset(op, x.double(), dim, excl, rev, init.double(), r, m)
                _same_bits_but_nan(got, want.to(f32).to(dt), f"{op} {ctx}")
            for op in EXT:
                gv, gi = call_reset(op, x, dim, excl, rev, None, r)
                wv, wi = call_reset(op, x.double(), dim, excl, rev, None, r)
                _same_bits_but_nan(gv, wv.to(dt), f"{op} {ctx}")
                assert torch.equal(gi, wi), f"{op} {ctx}: indices differ"
    finally:
        torch.set_num_threads(threads)

@pytest.mark.parametrize("device", DEVICES)
def test_segment_heads(device):
    """_segment_heads (the offsets form's reset mask without initial) equals the mask built by
    index_fill, and _segment_offsets (the checked int64 offsets, with initial) the offsets,
    for int64 and int32 offsets with empty segments, at 1 and 2 threads (CUDA: more entries
    than one pass of the kernel's grid); both reject bad offsets naming the fault; opcheck."""
    gen = torch.Generator().manual_seed(3)
    threads = torch.get_num_threads()
    try:
        for lens in (torch.randint(0, 5, (100_000,), generator=gen), torch.ones(70_000, dtype=i64),
                     torch.tensor([0, 0, 5, 0]), torch.tensor([], dtype=i64),
                     torch.tensor([300_000]), torch.randint(0, 3000, (300,), generator=gen),
                     # long segments (the CPU splits the rows: 1 MiB tasks), several tasks
                     torch.randint(0, 40_000, (200,), generator=gen),
                     # more entries than the CUDA kernel's grid takes in one pass (H100: 2^19)
                     torch.randint(0, 3, (1_200_000,), generator=gen),
                     # segments around 2 KiB and 1 MiB, unaligned starts
                     torch.tensor([2047, 2048, 2049, 2050, 1, 0, (1 << 20) + 2048,
                                   (1 << 20) + 2049, 3 << 20, 5, 17, (1 << 21) + 3]),
                     torch.randint(1500, 5000, (2000,), generator=gen)):
            offs = torch.cat([torch.zeros(1, dtype=i64), lens.cumsum(0)]).to(device)
            total = int(offs[-1])
            ref = torch.zeros(total + 1, dtype=b8, device=device)
            ref[offs[:-1]] = True
            ref = ref[:total]
            for dt, nt in itertools.product((i64, torch.int32), (1, 2)):
                torch.set_num_threads(nt)
                got = sops()._segment_heads(offs.to(dt), total, "scanops.x")
                assert got.dtype == b8 and torch.equal(got, ref), (dt, nt, lens[:8])
                got = sops()._segment_offsets(offs.to(dt), total, "scanops.x")
                assert got.dtype == i64 and torch.equal(got, offs), (dt, nt, lens[:8])
    finally:
        torch.set_num_threads(threads)
    for bad, fault in (([1, 3, 7], "start at 0"), ([0, 4, 2, 7], "be non-decreasing"),
                       ([0, 2, 6], "end at"), ([0, -1, 7], "be non-decreasing"), ([3], "start at 0"),
                       ([0, 2, 9], "end at")):
        for dt, which in itertools.product((i64, torch.int32), ("_segment_heads", "_segment_offsets")):
            offs = torch.tensor(bad, device=device, dtype=dt)
            with pytest.raises(RuntimeError, match=f"scanops.x: argument 'offsets' must {fault}"):
                getattr(sops(), which)(offs, 7, "scanops.x")
            assert torch.equal(offs.cpu(), torch.tensor(bad, dtype=dt))
    # a decrease (or a row out of range) among long segments, and in a later task of many
    # short ones (the CPU checks each task's offsets before it writes)
    short = torch.arange(100_001)
    # (overlapping long segments)
    for bad, total in (([0, 200, 100, 300], 300), ([0, 400, 200_000, 300], 300),
                       ([0, 3 << 20] * 40 + [3 << 20], 3 << 20),
                       (torch.cat([short[:70_000], short[69_990:70_000], short[70_000:]]), 100_000),
                       (torch.cat([short[:90_000], torch.tensor([200_000]), short[90_000:]]), 100_000)):
        for nt in (1, 2):
            torch.set_num_threads(nt)
            try:
                for which in ("_segment_heads", "_segment_offsets"):
                    with pytest.raises(RuntimeError, match="scanops.x: argument 'offsets' must be non-decreasing"):
                        getattr(sops(), which)(torch.as_tensor(bad).to(device), total, "scanops.x")
            finally:
                torch.set_num_threads(threads)
    for which in ("_segment_heads", "_segment_offsets"):
        torch.library.opcheck(getattr(sops(), which).default,
                              (torch.tensor([0, 2, 2, 7], device=device), 7, "scanops.x"),
                              raise_exception=True)


# ================================================================================================
# PT2, TorchScript
# ================================================================================================

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", OPS)
def test_opcheck_reset(which, device):
    x = torch.randn(3, 8, device=device, dtype=f64, requires_grad=True)
    c = torch.randn(3, device=device, dtype=f64, requires_grad=True)
    m = torch.rand(3, 8, device=device) < 0.5
    a = torch.rand(3, 8, device=device, dtype=f64, requires_grad=True)
    r = torch.tensor([[0, 1, 0, 0, 1, 1, 0, 0]] * 2 + [[1, 0, 0, 0, 0, 0, 0, 1]], device=device).bool()
    cases = [("cumsum", (x, 1)), ("masked_cumsum", (x, m, 1)), ("cumprod", (x, 1)),
             ("linear_recurrence", (a, x, 1)), ("logcumsumexp", (x, 1)), ("cummax", (x, 1)),
             ("cummin", (x, 1))]
    for k, (op, args) in enumerate(cases):
        if op != which:
            continue
        for j in (k, k + 1):
            excl, rev = FLAGS[j % 4]
            kw = dict(exclusive=excl, reverse=rev, initial=c if j % 2 else None,
                      reset=r if j != 2 else r[0])  # a broadcast reset too
            torch.library.opcheck(getattr(sops(), op).default, args, kw, raise_exception=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", OPS)
def test_opcheck_segment(which, device):
    v = torch.randn(9, 2, device=device, dtype=f64, requires_grad=True)
    a = torch.rand(9, 2, device=device, dtype=f64, requires_grad=True)
    m = torch.rand(9, 2, device=device) < 0.5
    offs = torch.tensor([0, 3, 3, 8, 9], device=device)
    c = torch.randn(4, 2, device=device, dtype=f64, requires_grad=True)
    cases = [("cumsum", (v, offs)), ("masked_cumsum", (v, m, offs)), ("cumprod", (v, offs)),
             ("linear_recurrence", (a, v, offs)), ("logcumsumexp", (v, offs)),
             ("cummax", (v, offs)), ("cummin", (v, offs))]
    for k, (op, args) in enumerate(cases):
        if op != which:
            continue
        excl, rev = FLAGS[k % 4]
        kw = dict(exclusive=excl, reverse=rev, initial=c if k % 2 == 0 else None)
        torch.library.opcheck(getattr(sops(), "segment_" + op).default, args, kw,
                              raise_exception=True)


def _reset_step(a, x, r, h0):
    h = torch.ops.scanops.linear_recurrence(a, x, 1, initial=h0, reset=r)
    s = scanops.cumsum(x, 1, exclusive=True, reset=r)
    m, i = torch.ops.scanops.cummax(x, 1, reverse=True, initial=h0, reset=r)
    p = scanops.masked_cumsum(x, r, 1, reset=r.narrow(0, 0, 1))
    return h, s, m, i, p


def _segment_step(v, offs, c):
    s = scanops.segment_cumsum(v, offs, initial=c)
    m, i = torch.ops.scanops.segment_cummax(v, offs, reverse=True)
    lse = scanops.segment_logcumsumexp(v, offs, exclusive=True, initial=c)
    return s, m, i, lse


def _compile_export_check(fn, args, dynamic, backend="inductor"):
    want = fn(*args)
    got = torch.compile(fn, fullgraph=True, dynamic=dynamic, backend=backend)(*args)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w)

    class M(torch.nn.Module):
        def forward(self, *xs):
            return fn(*xs)
    ep = torch.export.export(M(), tuple(args))
    for w, g in zip(want, ep.module()(*args)):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_and_export_reset(device):
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(4, 64, generator=gen).to(device)
    x = torch.randn(4, 64, generator=gen).to(device)
    r = (torch.rand(4, 64, generator=gen) < 0.2).to(device)
    h0 = torch.randn(4, generator=gen).to(device)
    _compile_export_check(_reset_step, (a, x, r, h0), dynamic=True)
    # the compiled result is the segmented one (not the plain scan)
    ref = seq_reference("linear_recurrence", x.cpu(), 1, False, False, h0.cpu(), r.cpu(), a=a.cpu())
    got = torch.compile(_reset_step, fullgraph=True)(a, x, r, h0)[0]
    torch.testing.assert_close(got.cpu().double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_and_export_segment(device):
    gen = torch.Generator().manual_seed(2)
    offs = make_offsets([5, 0, 3, 9, 1]).to(device)
    v = torch.randn(18, 3, generator=gen).to(device)
    c = torch.randn(5, 3, generator=gen).to(device)
    # aot_eager: the segment_* ops are composites over the reset form, which Inductor
    # decomposes into several C++ kernels (about 15 s of C++ compilation on 2 cores)
    _compile_export_check(_segment_step, (v, offs, c), dynamic=False, backend="aot_eager")
    got = torch.compile(_segment_step, fullgraph=True, backend="aot_eager")(v, offs, c)[0]
    ref = seg_reference("cumsum", v.cpu(), offs.cpu(), False, False, c.cpu())
    torch.testing.assert_close(got.cpu().double(), ref, rtol=1e-5, atol=1e-5)


def test_torchscript():
    @torch.jit.script
    def f(a: torch.Tensor, x: torch.Tensor, r: torch.Tensor, v: torch.Tensor, offs: torch.Tensor,
          c: torch.Tensor):
        return (torch.ops.scanops.linear_recurrence(a, x, 1, reset=r),
                torch.ops.scanops.cumsum(x, 1, reverse=True, reset=r),
                torch.ops.scanops.segment_cumsum(v, offs, exclusive=True, initial=c))
    gen = torch.Generator().manual_seed(3)
    a, x = torch.rand(2, 9, generator=gen), torch.randn(2, 9, generator=gen)
    r = torch.rand(2, 9, generator=gen) < 0.3
    v, offs, c = torch.randn(6, generator=gen), make_offsets([2, 0, 4]), torch.randn(3, generator=gen)
    h, s, q = f(a, x, r, v, offs, c)
    torch.testing.assert_close(h.double(), seq_reference("linear_recurrence", x, 1, False, False, None, r, a=a))
    torch.testing.assert_close(s.double(), seq_reference("cumsum", x, 1, False, True, None, r))
    torch.testing.assert_close(q.double(), seg_reference("cumsum", v, offs, True, False, c))


# ================================================================================================
# CUDA-specific shapes
# ================================================================================================

CUDA_SHAPES = [((4096, 37), 1, "dense"), ((2, 1 << 20), 1, "sparse"), ((3, 5000, 64), 1, "dense"),
               ((3, 5000, 64), 1, "lines_bcast"), ((100_000, 3), 0, "dense"), ((100_000, 3), 0, "sparse")]


@needs_cuda
@pytest.mark.parametrize("op", OPS)
def test_cuda_shapes(op, seed):
    """Many short rows, few long rows, columns (inner > 1): the CUDA result against the CPU
    one (itself checked against the references above), exact for integers and cummax /
    cummin; int64 sums and int32 cummax / cummin against exact references; bitwise the same
    run to run."""
    gen = torch.Generator().manual_seed(seed)
    for k, (shape, dim, layout) in enumerate(CUDA_SHAPES):
        r = make_reset(layout, shape, dim, gen, p=0.1 if layout == "dense" else 0.0005)
        for dt in LONG_DTYPES[op]:
            x, mask, a = long_inputs(op, shape, dt, gen)
            c = rand(line_shape(shape, dim), result_dtype(op, dt), gen, op)
            for excl, rev in FLAGS:
                init = c if (k + excl + rev) % 2 else None
                ctx = f"cuda {op} {shape} dim={dim} {layout} {dt} excl={excl} rev={rev} init={init is not None}"
                got = check_cuda_reset(op, dt, x, dim, excl, rev, init, r, mask, a, ctx)
                if op in ("cumsum", "masked_cumsum") and dt == i64:
                    assert_exact(got, vec_segmented_cumsum(x, dim, excl, rev, r, init, mask), ctx)
                if op in EXT and dt == i32 and init is None:
                    assert_result(op, got, vec_segmented_extremum_int32(op, x, dim, excl, rev, r), dt, 1, ctx)


@needs_cuda
@pytest.mark.parametrize("op", OPS)
def test_cuda_heads_at_tile_edges(op, seed):
    """1-D lines of the flat kernel cut into chunks of tiles (tiles of 256 * K elements, K = 2
    .. 32 by dtype: every power of two from 512 to 8192 is a tile or chunk edge): segment starts
    at those edges and one before / after them, in the first tile of a chunk or not, no start in
    some chunks (those reduce and scan), a chunk of segments of 1..64 (its first tile split at
    its last start), both directions, exclusive, initial: the CUDA result against the CPU one,
    exact for integers and cummax / cummin, bitwise the same run to run."""
    gen = torch.Generator().manual_seed(seed)
    n = (1 << 17) + 77
    starts = set()
    for e in (512, 1024, 2048, 4096, 8192):
        for k in range(1, n // e + 1, 3):
            for d in (-1, 0, 1):
                if 0 < k * e + d < n:
                    starts.add(k * e + d)
    lo = 40000  # a run of short segments
    pos = lo
    while pos < lo + 20000:
        starts.add(pos)
        pos += int(torch.randint(1, 65, (1,), generator=gen))
    starts = sorted(x for x in starts if not (70000 <= x < 100000))  # a stretch of no start
    r = torch.zeros(n, dtype=b8)
    r[starts] = True
    for dt in LONG_DTYPES[op]:
        x, mask, a = long_inputs(op, (n,), dt, gen)
        c = rand((), result_dtype(op, dt), gen, op)
        for excl, rev in FLAGS:
            for init in (None, c):
                ctx = f"cuda {op} {dt} excl={excl} rev={rev} init={init is not None}"
                check_cuda_reset(op, dt, x, 0, excl, rev, init, r, mask, a, ctx)


@needs_cuda
@pytest.mark.parametrize("op", OPS)
def test_cuda_last_head_of_chunks(op, seed):
    """The flat kernel's chunks that do not start with a head reduce each warp's part from its
    last step backwards and stop at the first step holding a head: rows of 3001 (row starts
    anywhere in a chunk) with a reset in a few rows only, a reset whose storage starts one
    byte past an aligned address, and a 1-D line with single resets just after, at and just
    before chunk edges (reverse: the reset one past a chunk's memory makes its last head),
    every flag, initial per row: against the CPU, exact for integers and cummax / cummin,
    bitwise the same run to run."""
    gen = torch.Generator().manual_seed(seed)
    rows, length = 50, 3001
    n1 = 1 << 18
    base = torch.zeros(rows * length + 1, dtype=b8)
    base[1:][torch.randperm(rows * length, generator=gen)[:7]] = True
    cases = [((rows, length), 1, base[1:].view(rows, length))]
    r1 = torch.zeros(n1, dtype=b8)
    for e in (8192 * 3, 8192 * 5, 8192 * 9):
        r1[e - 1] = True
    r1[16384 * 7] = True
    r1[16384 * 9 + 1] = True
    cases.append(((n1,), 0, r1))
    for shape, dim, r in cases:
        # (the rows' reset keeps its one-byte offset on the device as well)
        r_cuda = to("cuda", base)[0][1:].view(rows, length) if r.dim() == 2 else None
        for dt in LONG_DTYPES[op]:
            x, mask, a = long_inputs(op, shape, dt, gen)
            c = rand(line_shape(shape, dim), result_dtype(op, dt), gen, op)
            for excl, rev in FLAGS:
                for init in (None, c):
                    ctx = f"cuda {op} {dt} {shape} excl={excl} rev={rev} init={init is not None}"
                    check_cuda_reset(op, dt, x, dim, excl, rev, init, r, mask, a, ctx,
                                     reset_cuda=r_cuda)


# Column problems of a sum or product over dense, aligned operands (`inner` a multiple of the
# vector width) take the vector column tiles (segmented.cuh, launch_vec_columns): float32 /
# float64 / int64 / complex64 sums, float64 / int64 products.
VEC_COLUMN_DTYPES = {"cumsum": [f32, f64, i64, c64], "masked_cumsum": [f32, f64, i64],
                     "cumprod": [f64, i64]}


def vec_column_resets(kind, shape, gen):
    """Resets of an (outer, length, inner) problem along dim 1: "dense" (a head in nearly every
    tile of every column: tiles publish their own prefix), "sparse" (look-back chains),
    "mixed" (dense columns beside columns with no head: a warp's tile waits on its
    look-back), "edges" (rows at and around multiples of 64..1024, the first and last row)."""
    outer, length, inner = shape
    if kind == "dense":
        return torch.rand(shape, generator=gen) < 0.3
    if kind == "sparse":
        return torch.rand(shape, generator=gen) < 0.001
    r = torch.zeros(shape, dtype=b8)
    if kind == "mixed":
        r[:, :, : inner // 2] = torch.rand((outer, length, inner // 2), generator=gen) < 0.2
        r[:, length // 3: length // 2] = False  # a stretch of rows with no head at all
        return r
    rows = {0, length - 1}
    for e in (64, 128, 256, 512, 1024):
        for k in range(1, length // e + 1):
            rows.update(k * e + d for d in (-1, 0, 1))
    rows = [q for q in rows if 0 <= q < length]
    r[:, rows] = torch.rand((outer, len(rows), inner), generator=gen) < 0.7
    return r


@needs_cuda
@pytest.mark.parametrize("op", list(VEC_COLUMN_DTYPES))
def test_cuda_vector_columns(op, seed):
    """Segmented columns on the vector column tiles: one band (16 lanes of 4 float32 columns),
    narrow bands of 8 columns, several bands, two column tiles a row; every flag, initial on
    alternate cases, every reset kind above; against the CPU (exact for integers), bitwise
    the same run to run. Also a reset of one flag a row (shared by the columns) for one and
    several outer indices, a reset or mask broadcast over the outer indices, and a reset stored
    one byte past an aligned address (the kernels it falls back to)."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [(1, 3001, 64), (2, 2049, 8), (5, 1000, 128), (1, 2500, 256), (3, 777, 32)]
    kinds = ["dense", "sparse", "mixed", "edges"]
    for k, (shape, dt) in enumerate(itertools.product(shapes, VEC_COLUMN_DTYPES[op])):
        x, mask, a = long_inputs(op, shape, dt, gen)
        c = rand(line_shape(shape, 1), result_dtype(op, dt), gen, op)
        for j, (excl, rev) in enumerate(FLAGS):
            kind = kinds[(k + j) % len(kinds)]
            r = vec_column_resets(kind, shape, gen)
            init = c if (k + j) % 2 else None
            ctx = f"cuda {op} {shape} dim=1 {kind} {dt} excl={excl} rev={rev} init={init is not None}"
            got = check_cuda_reset(op, dt, x, 1, excl, rev, init, r, mask, a, ctx)
            if op in ("cumsum", "masked_cumsum") and dt == i64:
                assert_exact(got, vec_segmented_cumsum(x, 1, excl, rev, r, init, mask), ctx)
    # one flag a row shared by the columns (the segment ops' layout: values (total, features))
    for shape, kind in (((1, 3001, 64), "dense"), ((1, 2500, 256), "sparse"), ((1, 2049, 8), "edges")):
        for dt in VEC_COLUMN_DTYPES[op]:
            x, mask, a = long_inputs(op, shape, dt, gen)
            c = rand(line_shape(shape, 1), result_dtype(op, dt), gen, op)
            r = vec_column_resets(kind, shape[:2] + (1,), gen)
            for j, (excl, rev) in enumerate(FLAGS):
                init = c if j % 2 else None
                ctx = f"cuda {op} {shape} row reset {kind} {dt} excl={excl} rev={rev} init={init is not None}"
                got = check_cuda_reset(op, dt, x, 1, excl, rev, init, r, mask, a, ctx)
                if op in ("cumsum", "masked_cumsum") and dt == i64:
                    assert_exact(got, vec_segmented_cumsum(x, 1, excl, rev, r.expand(shape), init, mask), ctx)
    # one flag a row under several outer indices (a flag a token of (B, L, features)), and a
    # reset or mask broadcast over the outer indices (read at an outer stride of 0)
    for shape, rshape, kind in (((3, 1500, 64), (3, 1500, 1), "dense"),
                                ((4, 9000, 8), (4, 9000, 1), "edges"),
                                ((3, 1200, 64), (1, 1200, 1), "sparse"),
                                ((3, 1200, 64), (1, 1200, 64), "mixed")):
        for dt in VEC_COLUMN_DTYPES[op]:
            x, mask, a = long_inputs(op, shape, dt, gen)
            if mask is not None:
                mask = mask[:1]
            c = rand(line_shape(shape, 1), result_dtype(op, dt), gen, op)
            r = vec_column_resets(kind, rshape, gen)
            for j, (excl, rev) in enumerate(FLAGS):
                init = c if j % 2 else None
                ctx = (f"cuda {op} {shape} reset {rshape} {kind} {dt} excl={excl} rev={rev} "
                       f"init={init is not None}")
                got = check_cuda_reset(op, dt, x, 1, excl, rev, init, r, mask, a, ctx)
                if op in ("cumsum", "masked_cumsum") and dt == i64:
                    m = None if mask is None else mask.expand(shape)
                    assert_exact(got, vec_segmented_cumsum(x, 1, excl, rev, r.expand(shape), init, m), ctx)
    shape = (1, 3001, 64)
    base = torch.zeros(shape[0] * shape[1] * shape[2] + 1, dtype=b8)
    base[1:] = vec_column_resets("dense", shape, gen).flatten()
    r = base[1:].view(shape)
    r_cuda = to("cuda", base)[0][1:].view(shape)
    for dt in VEC_COLUMN_DTYPES[op]:
        x, mask, a = long_inputs(op, shape, dt, gen)
        for excl, rev in FLAGS:
            ctx = f"cuda {op} {shape} offset reset {dt} excl={excl} rev={rev}"
            check_cuda_reset(op, dt, x, 1, excl, rev, None, r, mask, a, ctx, reset_cuda=r_cuda)


@needs_cuda
def test_cuda_segment_many_and_long(seed):
    gen = torch.Generator().manual_seed(seed)
    for lengths, feat in (([int(n) for n in torch.randint(0, 40, (20000,), generator=gen)], (3,)),
                          ([1 << 19, 0, 3, (1 << 19) + 7], ()), ([37] * 4096, (64,))):
        offs = make_offsets(lengths)
        for op in OPS:
            dt = LONG_DTYPES[op][-1]
            v, mask, a = long_inputs(op, (sum(lengths),) + feat, dt, gen)
            c = rand((len(lengths),) + feat, result_dtype(op, dt), gen, op)
            for excl, rev in ((False, False), (True, True)):
                cpu = call_segment(op, v, offs, excl, rev, c, mask, a)
                args = to("cuda", v, offs, c, mask, a)
                got = call_segment(op, args[0], args[1], excl, rev, *args[2:])
                assert same_bits(got, call_segment(op, args[0], args[1], excl, rev, *args[2:]))
                got = tuple(t.cpu() for t in got) if op in EXT else got.cpu()
                compare_long(op, got, cpu, dt, f"cuda segment_{op} {len(lengths)} segments {feat} {excl} {rev}")
