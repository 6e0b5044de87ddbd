"""logcumsumexp, cummax, cummin and complex inputs, differentially against PyTorch.

* cummax / cummin: values bit for bit and indices exactly equal to torch.cummax / torch.cummin
  (on the CPU, the oracle), with ties (small integer data), NaN, +-0.0 and +-inf; the
  exclusive / reverse variants against their definitions built from torch ops:
    reverse:   v, i = torch.cummax(x.flip(d), d); values = v.flip(d), indices = (n-1-i).flip(d)
    exclusive: shifted by one in scan order; the first position in scan order holds the
               identity (cummax: -inf / the dtype's lowest value / False; cummin: +inf / the
               highest / True) with index -1.
* logcumsumexp: against torch.logcumsumexp evaluated in float64 (complex128), with an error
  bound (see ``lcse_expected``); -inf is the identity (exclusive starts with -inf, an all -inf
  prefix stays -inf, never NaN).
* complex cumsum / masked_cumsum / cumprod / linear_recurrence / logcumsumexp against complex128
  references and torch's own complex functions; the dtype= argument with complex dtypes.
* errors naming the op; autograd (gradcheck / gradgradcheck, gradients against torch's,
  complex gradients in PyTorch's conjugate convention); run-to-run bitwise reproducibility.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from reference import (DEVICES, FLAG_IDS, FLAGS, call, dtype_id, eps_acc, linrec_ref,
                       make_gen, make_layout, needs_cuda, ops, poison_allocator, same_bits,
                       scan_ref)
from test_ops import PARTIAL_TILE_SHAPES

f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
c64, c128 = torch.complex64, torch.complex128
i8, i16, i32, i64, u8, b = torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool

REAL_FLOAT = (f32, f64, f16, bf16)
COMPLEX = (c64, c128)
LCSE_DTYPES = REAL_FLOAT + COMPLEX
MINMAX_DTYPES = REAL_FLOAT + (i8, i16, i32, i64, u8, b)
INF = float("inf")

device_p = pytest.mark.parametrize("device", DEVICES)
flags_p = pytest.mark.parametrize("exclusive,reverse", FLAGS, ids=FLAG_IDS)
minmax_p = pytest.mark.parametrize("op", ["cummax", "cummin"])


def _id(v):
    return dtype_id(v) if isinstance(v, torch.dtype) else None


def _nondet(device) -> float:
    return 0.0 if str(device) == "cpu" else 1e-12


def shape_id(shape, dim):
    return f"{'x'.join(map(str, shape)) or 'scalar'}-d{dim}"


# ------------------------------------------------------------------------------------------
# References (differentiable torch compositions)
# ------------------------------------------------------------------------------------------

def _as_line(x, dim):
    """(x viewed with at least one dim, dim normalised, was 0-dim)."""
    zero_d = x.dim() == 0
    if zero_d:
        x = x.reshape(1)
    return x, dim % x.dim(), zero_d


def minmax_identity(op: str, dtype: torch.dtype):
    if dtype == b:
        return op == "cummin"
    if dtype.is_floating_point:
        return -INF if op == "cummax" else INF
    ii = torch.iinfo(dtype)
    return ii.min if op == "cummax" else ii.max


def minmax_ref(op: str, x: torch.Tensor, dim: int, exclusive: bool = False,
               reverse: bool = False):
    """(values, indices) from torch.cummax / torch.cummin by the definitions in the header."""
    tfn = torch.cummax if op == "cummax" else torch.cummin
    x, d, zero_d = _as_line(x, dim)
    n = x.shape[d]
    xs = x.flip(d) if reverse else x
    v, i = tfn(xs, d)
    if exclusive and n > 0:
        first_v = torch.full_like(v.narrow(d, 0, 1), minmax_identity(op, x.dtype))
        first_i = torch.full_like(i.narrow(d, 0, 1), -1)
        v = torch.cat([first_v, v.narrow(d, 0, n - 1)], d)
        i = torch.cat([first_i, i.narrow(d, 0, n - 1)], d)
    if reverse:
        i = torch.where(i >= 0, n - 1 - i, i).flip(d)
        v = v.flip(d)
    if zero_d:
        v, i = v.reshape(()), i.reshape(())
    return v, i


def _neg_inf_like(t):
    if t.is_complex():
        return torch.full_like(t, complex(-INF, 0.0))
    return torch.full_like(t, -INF)


def lcse_ref(x: torch.Tensor, dim: int, exclusive: bool = False, reverse: bool = False):
    """torch.logcumsumexp composed with flip / shift (in x's dtype; differentiable)."""
    x, d, zero_d = _as_line(x, dim)
    n = x.shape[d]
    xs = x.flip(d) if reverse else x
    y = torch.logcumsumexp(xs, d)
    if exclusive and n > 0:
        y = torch.cat([_neg_inf_like(y.narrow(d, 0, 1)), y.narrow(d, 0, n - 1)], d)
    if reverse:
        y = y.flip(d)
    return y.reshape(()) if zero_d else y


def _scan_max(v, dim, exclusive, reverse):
    """Running max of v (float64, >= 0) in scan order; exclusive puts 0 first."""
    v, d, zero_d = _as_line(v, dim)
    n = v.shape[d]
    vs = v.flip(d) if reverse else v
    m = torch.cummax(vs, d).values if n else vs
    if exclusive and n > 0:
        m = torch.cat([torch.zeros_like(m.narrow(d, 0, 1)), m.narrow(d, 0, n - 1)], d)
    if reverse:
        m = m.flip(d)
    return m.reshape(()) if zero_d else m


def _count(shape, dim, exclusive, reverse, device):
    """Number of terms of each result (float64, broadcastable), at least 1."""
    if len(shape) == 0:
        return torch.ones((), dtype=f64, device=device)
    d = dim % len(shape)
    n = shape[d]
    k = torch.arange(n, dtype=f64, device=device)
    if reverse:
        k = k.flip(0)
    if not exclusive:
        k = k + 1
    view = [1] * len(shape)
    view[d] = n
    return k.clamp_min(1).reshape(view)


def lcse_expected(x: torch.Tensor, dim: int, exclusive: bool = False, reverse: bool = False):
    """(reference, absolute tolerance) for logcumsumexp of x.

    Every partial result of any combination order is a log-sum-exp of a subset of the line,
    so its magnitude is at most B = max |x_j| (over the prefix) + log(k); a combination step
    rounds with an absolute error of a few eps_acc * B and passes earlier errors on with
    weights that add up to 1 (a convex combination). Complex sums can cancel: the error of
    log S is |dS| / |S|, with |dS| <= eps * sum |exp x_j|, hence the extra term
    exp(logsumexp(Re x) - Re y) (1 for real inputs). C = 16 + 4 sqrt(k) (random data), 16 + k
    for float64 (the float64 reference has errors of the same order)."""
    xr = x.to(c128 if x.is_complex() else f64)
    ref = lcse_ref(xr, dim, exclusive, reverse)
    mag = xr.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    k = _count(tuple(x.shape), dim, exclusive, reverse, x.device)
    bound = _scan_max(mag, dim, exclusive, reverse) + torch.log(k + 1)
    out_real = x.real.dtype if x.is_complex() else x.dtype
    e_out, e_acc = torch.finfo(out_real).eps, eps_acc(out_real)
    c = 16 + k if out_real == f64 else 16 + 4 * k.sqrt()
    if x.is_complex():
        c = 2 * c
        re = lcse_ref(xr.real, dim, exclusive, reverse)
        cond = torch.exp((re - ref.real).nan_to_num(0.0, posinf=0.0, neginf=0.0).clamp(max=600))
        bound = bound + cond + math.pi
    floor = 2 * torch.finfo(out_real).tiny * e_out
    tol = c * e_acc * bound + e_out * ref.abs().nan_to_num(0.0, posinf=0.0) + floor
    return ref, tol


def _same(u, v):
    """Bitwise equality, complex tensors too (NaN-safe)."""
    if u.is_complex() and v.is_complex():
        return u.dtype == v.dtype and same_bits(torch.view_as_real(u), torch.view_as_real(v))
    return same_bits(u, v)


def _mismatch_detail(bad, got, want, n=5):
    idx = bad.nonzero()[:n].tolist()
    return ", ".join(f"{tuple(i)}: got {got[tuple(i)].item()!r} want {want[tuple(i)].item()!r}"
                     for i in idx)


def assert_lcse_close(got, ref, tol, ctx=""):
    """got (any device, x's dtype) vs the float64 / complex128 reference."""
    got = got.cpu()
    ref, tol = ref.cpu(), tol.cpu().expand(ref.shape)
    assert tuple(got.shape) == tuple(ref.shape), f"{ctx}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    if got.numel() == 0:
        return
    if got.is_complex():
        g = got.to(c128)
        finite = torch.isfinite(ref.real)
        d_re = (g.real - ref.real).abs()
        # A logarithm's imaginary part is defined modulo 2 pi (torch's own sequential formula
        # need not return the principal value either).
        d_im = torch.remainder(g.imag - ref.imag + math.pi, 2 * math.pi) - math.pi
        err = torch.hypot(d_re, d_im.abs())
        ok = torch.where(finite, err <= tol, torch.zeros_like(finite))
        # Non-finite real parts: -inf stays -inf (the imaginary part carries no information
        # there, it must only not be NaN); +inf stays non-finite (below); where the reference is NaN the
        # result must not be finite either (complex infinities have no direction: torch turns
        # (inf + nan j) + 1 into nan + nan j, a result of inf + nan j is as good).
        neg = ref.real == -INF
        ok |= neg & (g.real == -INF) & ~torch.isnan(g.imag)
        # +inf: the combine of two +inf real parts is log(exp(a) + exp(b)), whose value (inf or
        # nan real part) depends on the association order of the scan (CUDA's tree vs torch's
        # sequential walk), as complex infinities have no direction: any non-finite result.
        ok |= (ref.real == INF) & ~torch.isfinite(g.real)
        ok |= torch.isnan(ref.real) & ~torch.isfinite(g.real)
    else:
        g = got.double()
        finite = torch.isfinite(ref)
        ok = (g - ref).abs() <= tol
        ok = torch.where(finite, ok, (g == ref) | (torch.isnan(g) & torch.isnan(ref)))
    if not bool(ok.all()):
        bad = ~ok
        raise AssertionError(f"{ctx}: {int(bad.sum())}/{got.numel()} elements off; "
                             f"{_mismatch_detail(bad, g, ref)}; tol at first: "
                             f"{tol[tuple(bad.nonzero()[0].tolist())].item():.3g}")


def check_lcse(x, dim, exclusive=False, reverse=False, ctx=""):
    before = x.clone()
    poison_allocator(x.device, max(x.numel(), 1) * 16)
    got = ops.logcumsumexp(x, dim, exclusive=exclusive, reverse=reverse)
    ctx = (f"logcumsumexp(shape={tuple(x.shape)}, strides={x.stride()}, {dtype_id(x.dtype)}, "
           f"dim={dim}, exclusive={exclusive}, reverse={reverse}) on {x.device} {ctx}")
    assert got.dtype == x.dtype, f"{ctx}: dtype {got.dtype}"
    assert got.device == x.device, f"{ctx}: device {got.device}"
    assert got.is_contiguous(), f"{ctx}: result not contiguous"
    assert got.data_ptr() != x.data_ptr() or x.numel() == 0, f"{ctx}: result aliases the input"
    ref, tol = lcse_expected(x.cpu(), dim, exclusive, reverse)
    assert_lcse_close(got, ref, tol, ctx)
    assert _same(before, x), f"{ctx}: the input was modified"
    return got


def check_minmax(op, x, dim, exclusive=False, reverse=False, ctx=""):
    before = x.clone()
    poison_allocator(x.device, max(x.numel(), 1) * 16)
    v, i = getattr(ops, op)(x, dim, exclusive=exclusive, reverse=reverse)
    ctx = (f"{op}(shape={tuple(x.shape)}, strides={x.stride()}, {dtype_id(x.dtype)}, dim={dim}, "
           f"exclusive={exclusive}, reverse={reverse}) on {x.device} {ctx}")
    assert v.dtype == x.dtype and i.dtype == i64, f"{ctx}: dtypes {v.dtype}, {i.dtype}"
    assert v.shape == x.shape and i.shape == x.shape, f"{ctx}: shapes {v.shape}, {i.shape}"
    assert v.device == x.device and i.device == x.device, f"{ctx}: devices"
    assert v.is_contiguous() and i.is_contiguous(), f"{ctx}: results not contiguous"
    xc = x.cpu()
    rv, ri = minmax_ref(op, xc, dim, exclusive, reverse)
    vc, ic = v.cpu(), i.cpu()
    if not torch.equal(ic, ri):
        bad = ic != ri
        raise AssertionError(f"{ctx}: {int(bad.sum())}/{x.numel()} indices differ from torch's; "
                             f"{_mismatch_detail(bad, ic, ri)}; x near the first: "
                             f"{_neighbourhood(xc, bad, dim)}")
    # Values bit for bit (-0.0 vs 0.0, infinities), NaN where torch has NaN; NaN payload
    # bits are checked by test_minmax_nan_bits_preserved alone.
    bad = _bit_mismatch(vc, rv)
    if bool(bad.any()):
        raise AssertionError(f"{ctx}: {int(bad.sum())}/{x.numel()} values differ from torch's "
                             f"(bitwise); {_mismatch_detail(bad, vc, rv)}")
    # The values are the selected elements themselves.
    if xc.dim() > 0 and xc.numel() > 0:
        sel = xc.gather(dim, ic.clamp_min(0))
        has = ic >= 0
        assert not bool(_bit_mismatch(torch.where(has, sel, vc), vc).any()), \
            f"{ctx}: values are not x[indices]"
    assert same_bits(before, x), f"{ctx}: the input was modified"
    return v, i


def _bit_mismatch(u, v):
    """Elementwise: bit patterns differ, except that any NaN matches any NaN."""
    if not u.is_floating_point():
        return u != v
    view = {2: i16, 4: i32, 8: i64}[u.element_size()]
    both_nan = torch.isnan(u) & torch.isnan(v)
    return (u.view(view) != v.view(view)) & ~both_nan


def _neighbourhood(x, bad, dim):
    if x.dim() == 0:
        return x.item()
    pos = bad.nonzero()[0].tolist()
    d = dim % x.dim()
    line = x[tuple(p if k != d else slice(None) for k, p in enumerate(pos))]
    j = pos[d]
    return line[max(0, j - 4): j + 3].tolist()


# ------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------

def minmax_data(kind: str, shape, dtype, gen, device="cpu"):
    """kind 'ties' (small integers: many ties), 'random', 'special' (floats: NaN, +-inf,
    +-0.0 among small integers)."""
    shape = tuple(shape)
    kw = dict(generator=gen, device=device)
    if dtype == b:
        p = 0.5 if kind != "special" else 0.9
        return torch.rand(shape, **kw) < p
    if kind == "ties" or (kind == "special" and not dtype.is_floating_point):
        lo, hi = (0, 7) if dtype == u8 else (-3, 4)
        return torch.randint(lo, hi, shape, **kw).to(dtype)
    if kind == "random":
        if dtype.is_floating_point:
            return torch.randn(shape, **kw).to(dtype)
        if dtype == i64:
            return torch.randint(-(2**62), 2**62, shape, dtype=i64, **kw) * 2
        ii = torch.iinfo(dtype)
        return torch.randint(ii.min, ii.max + 1, shape, **kw).to(dtype)
    assert kind == "special"
    x = torch.randint(-3, 4, shape, **kw).to(f32)
    r = torch.rand(shape, **kw)
    x = torch.where(x == 0, torch.where(torch.rand(shape, **kw) < 0.5, -0.0, 0.0), x)
    x = torch.where(r < 0.04, float("nan"), x)
    x = torch.where((r >= 0.04) & (r < 0.08), INF, x)
    x = torch.where((r >= 0.08) & (r < 0.12), -INF, x)
    return x.to(dtype)


def lcse_data(kind: str, shape, dtype, gen, device="cpu"):
    """'random' (scale 3), 'special' (-inf often, +inf, NaN, big magnitudes), complex: random
    real parts and phases."""
    shape = tuple(shape)
    kw = dict(generator=gen, device=device)
    real = dtype.to_real() if dtype.is_complex else dtype
    base = f64 if real == f64 else f32
    x = 3 * torch.randn(shape, dtype=base, **kw)
    if kind == "special":
        r = torch.rand(shape, dtype=base, **kw)
        big = 6e4 if real == f16 else 1e30 if real in (f32, bf16) else 1e300
        x = torch.where(r < 0.3, -INF, x)
        x = torch.where((r >= 0.3) & (r < 0.32), INF, x)
        x = torch.where((r >= 0.32) & (r < 0.34), float("nan"), x)
        x = torch.where((r >= 0.34) & (r < 0.37), big, x)
        x = torch.where((r >= 0.37) & (r < 0.40), -big, x)
    if dtype.is_complex:
        phase = (torch.rand(shape, dtype=base, **kw) * 2 - 1) * math.pi
        return torch.complex(x, phase).to(dtype)
    return x.to(dtype)


# ------------------------------------------------------------------------------------------
# Known values, independent of torch
# ------------------------------------------------------------------------------------------

@device_p
def test_logcumsumexp_known_values(device):
    x = torch.zeros(4, dtype=f64, device=device)
    l2, l3, l4 = math.log(2), math.log(3), math.log(4)
    want = {(False, False): [0, l2, l3, l4], (True, False): [-INF, 0, l2, l3],
            (False, True): [l4, l3, l2, 0], (True, True): [l3, l2, 0, -INF]}
    for (e, r), w in want.items():
        got = ops.logcumsumexp(x, 0, exclusive=e, reverse=r)
        assert got.dtype == f64
        torch.testing.assert_close(got.cpu(), torch.tensor(w, dtype=f64), rtol=1e-15, atol=1e-15)
    # Huge values: no overflow (stable), and -inf is the identity.
    y = ops.logcumsumexp(torch.tensor([1000.0, 1000.0, -INF], device=device), 0)
    assert y.tolist() == pytest.approx([1000.0, 1000.0 + l2, 1000.0 + l2], rel=1e-7)
    z = ops.logcumsumexp(torch.tensor([-INF, -INF, 0.0, -INF], device=device), 0)
    assert z.tolist() == [-INF, -INF, 0.0, 0.0]
    z = ops.logcumsumexp(torch.full((3, 5), -INF, device=device), 1, exclusive=True)
    assert (z == -INF).all()
    zc = ops.logcumsumexp(torch.zeros(3, dtype=c64, device=device), 0, exclusive=True)
    assert zc[0].item() == complex(-INF, 0.0)
    torch.testing.assert_close(zc[1:].cpu(), torch.tensor([0, l2], dtype=c64))


@device_p
def test_cummax_cummin_known_values(device):
    x = torch.tensor([1.0, 3.0, 2.0, 3.0, 0.0], device=device)
    want = {
        (False, False): ([1, 3, 3, 3, 3], [0, 1, 1, 3, 3]),
        (True, False): ([-INF, 1, 3, 3, 3], [-1, 0, 1, 1, 3]),
        (False, True): ([3, 3, 3, 3, 0], [1, 1, 3, 3, 4]),
        (True, True): ([3, 3, 3, 0, -INF], [1, 3, 3, 4, -1]),
    }
    for (e, r), (wv, wi) in want.items():
        v, i = ops.cummax(x, 0, exclusive=e, reverse=r)
        assert v.tolist() == wv and i.tolist() == wi, (e, r, v, i)
    xi = torch.tensor([2, 0, 1, 0, 5], dtype=i16, device=device)
    v, i = ops.cummin(xi, 0)
    assert v.dtype == i16 and v.tolist() == [2, 0, 0, 0, 0] and i.tolist() == [0, 1, 1, 3, 3]
    v, i = ops.cummin(xi, 0, exclusive=True)
    assert v.tolist() == [32767, 2, 0, 0, 0] and i.tolist() == [-1, 0, 1, 1, 3]
    v, i = ops.cummin(xi.to(u8), 0, exclusive=True, reverse=True)
    assert v.tolist() == [0, 0, 0, 5, 255] and i.tolist() == [1, 3, 3, 4, -1]
    xb = torch.tensor([False, True, False], device=device)
    v, i = ops.cummax(xb, 0, exclusive=True)
    assert v.tolist() == [False, False, True] and i.tolist() == [-1, 0, 1]
    v, i = ops.cummin(xb, 0, exclusive=True)
    assert v.tolist() == [True, False, False] and i.tolist() == [-1, 0, 0]
    # NaN propagates with the index of the latest NaN.
    xn = torch.tensor([1.0, float("nan"), 5.0, float("nan"), 7.0], device=device)
    for op in ("cummax", "cummin"):
        v, i = getattr(ops, op)(xn, 0)
        assert i.tolist() == [0, 1, 1, 3, 3], (op, i)
        assert math.isnan(v[1].item()) and math.isnan(v[4].item())


# ------------------------------------------------------------------------------------------
# cummax / cummin against torch: every dtype, data kind, flag, shape class and layout
# ------------------------------------------------------------------------------------------

MINMAX_SHAPES = [((), 0), ((), -1), ((0,), 0), ((3, 0), 1), ((3, 0), 0), ((0, 4), 1),
                 ((1,), 0), ((17,), 0), ((6, 37), -1), ((37, 6), 0), ((3, 5, 7), 1),
                 ((2, 3, 129), -2), ((4, 1, 5), 1), ((5, 300), 1), ((300, 5), 0)]


@device_p
@flags_p
@minmax_p
@pytest.mark.parametrize("dtype", MINMAX_DTYPES, ids=_id)
def test_minmax_dtypes_shapes(device, op, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, "cpu")
    kinds = ("ties", "random", "special") if dtype.is_floating_point else ("ties", "random")
    for kind in kinds:
        for shape, dim in MINMAX_SHAPES:
            x = minmax_data(kind, shape, dtype, gen).to(device)
            check_minmax(op, x, dim, exclusive, reverse, ctx=f"[{kind}]")


LAYOUT_CASES = [("transposed", (7, 9, 13), 1), ("transposed", (40, 33), 1), ("transposed", (40, 33), 0),
                ("permuted", (7, 9, 13), 0), ("permuted", (7, 9, 13), -1), ("strided", (7, 9, 13), 2),
                ("strided", (300,), 0), ("expanded_scan", (9, 40), 1), ("expanded_other", (9, 40), 1),
                ("expanded_other", (40, 9), 0), ("offset", (11, 23), 1)]


@device_p
@flags_p
@minmax_p
@pytest.mark.parametrize("dtype", [f32, bf16, i32, u8, b], ids=_id)
def test_minmax_layouts(device, op, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, "cpu")
    for layout, shape, dim in LAYOUT_CASES:
        for kind in ("ties", "special"):
            x = make_layout(shape, dim, layout,
                            lambda s: minmax_data(kind, s, dtype, gen).to(device))
            check_minmax(op, x, dim, exclusive, reverse, ctx=f"[{layout}, {kind}]")


LONG_CASES = [((2, 100_000), 1), ((100_003,), 0), ((3, 4097), -1), ((5000, 3), 0),
              ((3, 70_000, 2), 1), ((70_001, 2), 0), ((257, 300), 0)]


@device_p
@minmax_p
@pytest.mark.parametrize("dtype", [f32, f16, i64, u8, b], ids=_id)
@pytest.mark.parametrize("shape,dim", LONG_CASES, ids=[shape_id(s, d) for s, d in LONG_CASES])
def test_minmax_long_lines(device, op, dtype, shape, dim, seed):
    """Long rows / columns (several CPU chunks and CUDA tiles, the look-back) with ties and
    NaN everywhere, and monotone data (the winner changes at every step / never)."""
    gen = make_gen(seed, "cpu")
    kinds = ("ties", "special") if dtype.is_floating_point else ("ties", "random")
    for kind in kinds:
        x = minmax_data(kind, shape, dtype, gen).to(device)
        if kind == "special":  # NaN rarer on long lines: keep stretches NaN-free
            x = torch.where(torch.rand(shape, generator=gen).to(device) < 0.9995,
                            minmax_data("ties", shape, dtype, gen).to(device), x)
        for e, r in FLAGS:
            check_minmax(op, x, dim, e, r, ctx=f"[{kind}]")
    if dtype not in (b, u8, i8):
        n = shape[dim]
        ramp = torch.arange(n, device=device).to(dtype)
        view = [1] * len(shape)
        view[dim] = n
        x = ramp.reshape(view).expand(shape).contiguous()
        for e, r in ((False, False), (True, True)):
            check_minmax(op, x, dim, e, r, ctx="[ramp]")


@pytest.mark.parametrize("threads", [1, 3])
@minmax_p
def test_minmax_cpu_thread_counts(op, threads, seed):
    torch.set_num_threads(threads)
    gen = make_gen(seed, "cpu")
    for shape, dim in [((2, 200_001), 1), ((150_000,), 0), ((70_000, 3), 0)]:
        x = minmax_data("ties", shape, f32, gen)
        for e, r in FLAGS:
            check_minmax(op, x, dim, e, r, ctx=f"[threads={threads}]")


@device_p
@minmax_p
def test_minmax_signed_zeros_and_infinities(device, op):
    """-0.0 == +0.0: a tie, the latest wins and its bits are returned; +-inf are ordinary values;
    a NaN wins over everything and later NaNs take over its index."""
    z, nz, nan = 0.0, -0.0, float("nan")
    rows = [[nz, z, nz, z], [z, nz, z, nz], [-INF, -INF, INF, INF], [INF, -INF, nan, INF, nan],
            [nan, nan, nan], [-INF, nz, -INF, z]]
    for row in rows:
        for dtype in REAL_FLOAT:
            x = torch.tensor(row, dtype=dtype, device=device)
            for e, r in FLAGS:
                check_minmax(op, x, 0, e, r, ctx=f"[{row}]")


@device_p
@minmax_p
@pytest.mark.parametrize("dtype", REAL_FLOAT, ids=_id)
def test_minmax_nan_bits_preserved(device, op, dtype):
    """A NaN value is the selected element itself, sign and payload included, as torch
    returns it (torch's own float -> bfloat16 conversion makes NaNs 0xFFFF, for instance)."""
    bits = {f16: [-1, 0x7E01, -512], bf16: [-1, 0x7FC1, -64], f32: [-1, 0x7FC00001, -4194304],
            f64: [-1, 0x7FF8000000000001, -2251799813685248]}[dtype]
    view = {2: i16, 4: i32, 8: i64}[dtype.itemsize]
    for nan_bits in bits:
        x = torch.tensor([1.0, 3.0, 2.0, 0.0, 5.0, 4.0], dtype=dtype)
        x.view(view)[2] = nan_bits
        x.view(view)[4] = nan_bits
        assert torch.isnan(x[2]) and torch.isnan(x[4])
        x = x.to(device)
        for e, r in FLAGS:
            v, i = getattr(ops, op)(x, 0, exclusive=e, reverse=r)
            rv, ri = minmax_ref(op, x.cpu(), 0, e, r)
            assert torch.equal(i.cpu(), ri)
            assert same_bits(v.cpu(), rv), (
                f"{op} {dtype_id(dtype)} NaN bits {nan_bits:#x} (exclusive={e}, reverse={r}): got "
                f"{v.cpu().view(view).tolist()}, torch {rv.view(view).tolist()}")


# ------------------------------------------------------------------------------------------
# logcumsumexp against the float64 / complex128 reference
# ------------------------------------------------------------------------------------------

LCSE_SHAPES = [((), 0), ((), -1), ((0,), 0), ((3, 0), 1), ((0, 4), 1), ((3, 0, 5), -1),
               ((1,), 0), ((17,), 0), ((1000,), -1), ((6, 37), -1), ((37, 6), 0), ((3, 5, 7), 1),
               ((2, 3, 129), -2), ((4, 1, 6), 1), ((5, 300), 1), ((300, 5), 0)]


@device_p
@flags_p
@pytest.mark.parametrize("dtype", LCSE_DTYPES, ids=_id)
def test_logcumsumexp_dtypes_shapes(device, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, "cpu")
    for kind in ("random", "special"):
        for shape, dim in LCSE_SHAPES:
            x = lcse_data(kind, shape, dtype, gen).to(device)
            check_lcse(x, dim, exclusive, reverse, ctx=f"[{kind}]")


@device_p
@flags_p
@pytest.mark.parametrize("dtype", [f32, f64, bf16, c64], ids=_id)
def test_logcumsumexp_layouts(device, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, "cpu")
    for layout, shape, dim in LAYOUT_CASES:
        x = make_layout(shape, dim, layout, lambda s: lcse_data("random", s, dtype, gen).to(device))
        check_lcse(x, dim, exclusive, reverse, ctx=f"[{layout}]")


LCSE_LONG = ([(f32, s, d) for s, d in LONG_CASES] + [(bf16, s, d) for s, d in LONG_CASES[:4]] +
             [(c64, s, d) for s, d in LONG_CASES[:5]] +
             [(dt, s, d) for dt in (f64, c128) for s, d in (LONG_CASES[0], LONG_CASES[3])])


@device_p
@pytest.mark.parametrize("dtype,shape,dim", LCSE_LONG,
                         ids=[f"{dtype_id(t)}-{shape_id(s, d)}" for t, s, d in LCSE_LONG])
def test_logcumsumexp_long_lines(device, dtype, shape, dim, seed):
    gen = make_gen(seed, "cpu")
    x = lcse_data("random", shape, dtype, gen).to(device)
    for e, r in (FLAGS if dtype == f32 else ((False, False), (True, True))):
        check_lcse(x, dim, e, r)
    if not dtype.is_complex:
        # -inf runs, then values: the identity must survive chunk / tile boundaries.
        xs = lcse_data("special", shape, dtype, gen).to(device)
        check_lcse(xs, dim, True, False, ctx="[special]")
        check_lcse(xs, dim, False, True, ctx="[special]")


@device_p
@flags_p
@pytest.mark.parametrize("dtype", LCSE_DTYPES, ids=_id)
def test_logcumsumexp_nonfinite(device, dtype, exclusive, reverse):
    """All -inf rows give -inf (never NaN), leading -inf runs, +inf, NaN, both infinities."""
    nan = float("nan")
    rows = [[-INF] * 6, [-INF, -INF, 0.5, -INF, 1.0, -INF], [0.0, INF, 1.0, -INF, 2.0, 3.0],
            [1.0, nan, -INF, 2.0, 0.0, 1.0], [INF, -INF, INF, -INF, 0.0, 0.0],
            [-INF, -INF, -INF, -INF, -INF, 7.0]]
    x = torch.tensor(rows, dtype=f64)
    if dtype.is_complex:
        x = torch.complex(x, torch.linspace(-3, 3, x.numel(), dtype=f64).reshape(x.shape))
    x = x.to(dtype).to(device)
    got = check_lcse(x, 1, exclusive, reverse)
    assert not torch.isnan(got[0].cpu()).any(), "an all -inf row gave NaN"
    assert (got[0].real == -INF).all()
    if exclusive:  # the first position in scan order is exactly -inf (+0j)
        first = got[:, -1 if reverse else 0].cpu()
        want = torch.full_like(first, complex(-INF, 0.0) if dtype.is_complex else -INF)
        assert same_bits(first, want) if not dtype.is_complex else torch.equal(first, want)
    check_lcse(x.t(), 0, exclusive, reverse, ctx="[transposed]")


@device_p
@pytest.mark.parametrize("dtype", LCSE_DTYPES, ids=_id)
def test_logcumsumexp_matches_torch(device, dtype, seed):
    """Second oracle: torch.logcumsumexp itself on the same device, same dtype."""
    gen = make_gen(seed, "cpu")
    tol = {f16: dict(rtol=2e-3, atol=2e-3), bf16: dict(rtol=2e-2, atol=2e-2),
           f32: dict(rtol=1e-5, atol=1e-5), c64: dict(rtol=1e-5, atol=1e-5)}.get(
        dtype, dict(rtol=1e-12, atol=1e-12))
    for shape, dim in [((13,), 0), ((7, 19), 1), ((7, 19), -2), ((3, 4, 5), 1), ((), 0)]:
        x = lcse_data("random", shape, dtype, gen).to(device)
        want = torch.logcumsumexp(x, dim)
        got = ops.logcumsumexp(x, dim)
        assert got.dtype == want.dtype and got.shape == want.shape
        if dtype.is_complex:  # imaginary parts modulo 2 pi
            got, want = torch.exp(got.to(c128)), torch.exp(want.to(c128))
        torch.testing.assert_close(got, want, **tol)


# ------------------------------------------------------------------------------------------
# Zero-dim and empty: as torch
# ------------------------------------------------------------------------------------------

@device_p
def test_zero_dim_and_empty_as_torch(device):
    for shape, dim in [((), 0), ((), -1), ((0,), 0), ((3, 0), 1), ((3, 0), 0), ((0, 4), 1)]:
        for dtype in (f32, f64, c64):
            x = torch.full(shape, 1.5, dtype=dtype, device=device)
            want = torch.logcumsumexp(x, dim)
            got = ops.logcumsumexp(x, dim)
            assert got.shape == want.shape and got.dtype == want.dtype and torch.equal(got, want)
            for e, r in FLAGS:
                g = ops.logcumsumexp(x, dim, exclusive=e, reverse=r)
                assert g.shape == x.shape and g.dtype == dtype
                if len(shape) == 0:
                    assert g.real.item() == (-INF if e else 1.5)
        for dtype in MINMAX_DTYPES:
            x = torch.ones(shape, device=device).to(dtype)
            for op in ("cummax", "cummin"):
                wv, wi = getattr(torch, op)(x, dim)
                v, i = getattr(ops, op)(x, dim)
                assert v.shape == wv.shape and v.dtype == wv.dtype and torch.equal(v, wv)
                assert i.shape == wi.shape and i.dtype == i64 and torch.equal(i, wi)
                for e, r in FLAGS:
                    v, i = getattr(ops, op)(x, dim, exclusive=e, reverse=r)
                    assert v.shape == x.shape and i.shape == x.shape
                    if len(shape) == 0:
                        want_v = minmax_identity(op, dtype) if e else 1
                        assert v.item() == want_v and i.item() == (-1 if e else 0), (op, dtype, e, r)


# ------------------------------------------------------------------------------------------
# Complex cumsum / masked_cumsum / cumprod / linear_recurrence
# ------------------------------------------------------------------------------------------

def complex_data(role, shape, dtype, gen, n_scan=16, device="cpu"):
    """'sum': Gaussian real and imaginary parts; 'prod': |z| near 1 (so long products stay in
    range), any phase; 'coef': |a| <= 1, any phase; 'int': small Gaussian integers (exact)."""
    shape = tuple(shape)
    real = dtype.to_real()
    base = f64 if real == f64 else f32
    kw = dict(generator=gen, device=device, dtype=base)
    if role == "sum":
        z = torch.complex(torch.randn(shape, **kw), torch.randn(shape, **kw))
    elif role == "int":
        z = torch.complex(torch.randint(-3, 4, shape, **kw), torch.randint(-3, 4, shape, **kw))
    else:
        n = max(int(n_scan), 1)
        phase = (torch.rand(shape, **kw) * 2 - 1) * math.pi
        if role == "prod":
            mag = torch.exp(min(0.5, 2.5 / math.sqrt(n)) * torch.randn(shape, **kw))
        else:
            mag = torch.exp(-min(1.0, 4.0 / n) * torch.rand(shape, **kw))
        z = torch.polar(mag, phase)
    return z.to(dtype)


def check_complex(op, x, dim, exclusive=False, reverse=False, *, mask=None, a=None, ctx=""):
    """op on complex x against a complex128 reference with a bound on |got - ref|."""
    before = [t.clone() for t in (x, mask, a) if t is not None]
    poison_allocator(x.device, max(x.numel(), 1) * 16)  # complex128: 16 bytes an element
    got = call(op, dim, exclusive, reverse, x=x, mask=mask, a=a, poison=False)
    ctx = (f"{op}(shape={tuple(x.shape)}, strides={x.stride()}, {dtype_id(x.dtype)}, dim={dim}, "
           f"exclusive={exclusive}, reverse={reverse}) on {x.device} {ctx}")
    assert got.dtype == x.dtype, f"{ctx}: dtype {got.dtype}"
    assert got.shape == x.shape and got.device == x.device and got.is_contiguous(), ctx
    xc = x.cpu().to(c128)
    g = got.cpu().to(c128)
    real = x.dtype.to_real()
    e_out, e_acc = torch.finfo(real).eps, eps_acc(real)
    k = _count(tuple(x.shape), dim, exclusive, reverse, "cpu")
    worst = real == f64
    if op in ("cumsum", "masked_cumsum"):
        v = xc if mask is None else xc * mask.cpu()
        ref = scan_ref("sum", v, dim, exclusive, reverse)
        bound = scan_ref("sum", v.abs(), dim, exclusive, reverse)
        c = 16 + k if worst else 16.0
        tol = 2 * c * e_acc * bound + e_out * ref.abs()
    elif op == "cumprod":
        ref = scan_ref("prod", xc, dim, exclusive, reverse)
        c = 16 + k if worst else 16 + 4 * k.sqrt()
        tol = 4 * ref.abs() * (2 * e_out + e_acc * c)
    else:
        ac = a.cpu().to(c128)
        ref = linrec_ref(ac, xc, dim, exclusive, reverse)
        bound = linrec_ref(ac.abs().to(f64), xc.abs().to(f64), dim, exclusive, reverse)
        c = 16 + k if worst else 16.0
        tol = 4 * c * e_acc * bound + e_out * ref.abs()
    tol = tol + 2 * torch.finfo(real).tiny
    if got.numel():
        err = (g - ref).abs()
        ok = err <= tol
        if not bool(ok.all()):
            bad = ~ok
            raise AssertionError(f"{ctx}: {int(bad.sum())}/{x.numel()} off; "
                                 f"{_mismatch_detail(bad, g, ref)}; worst err/tol "
                                 f"{(err / tol).max().item():.3g}")
    for bf, t in zip(before, [t for t in (x, mask, a) if t is not None]):
        assert _same(bf, t), f"{ctx}: an input was modified"
    return got


COMPLEX_OPS = ["cumsum", "masked_cumsum", "cumprod", "linear_recurrence"]
COMPLEX_SHAPES = [((), 0), ((0,), 0), ((3, 0), 1), ((1,), 0), ((17,), 0), ((6, 37), -1),
                  ((37, 6), 0), ((3, 5, 7), 1), ((2, 3, 129), -2), ((5, 300), 1), ((300, 5), 0),
                  ((2, 5000), 1), ((4097,), 0)]


def _complex_operands(op, shape, dim, dtype, gen, device, layout="contiguous"):
    n = shape[dim] if shape else 1
    role = "prod" if op == "cumprod" else "sum"
    fill = lambda s: complex_data(role, s, dtype, gen, n).to(device)  # noqa: E731
    out = {"x": make_layout(shape, dim, layout, fill)}
    if op == "masked_cumsum":
        out["mask"] = (torch.rand(shape, generator=gen) < 0.6).to(device)
    if op == "linear_recurrence":
        out["a"] = make_layout(shape, dim, layout,
                               lambda s: complex_data("coef", s, dtype, gen, n).to(device))
    return out


@device_p
@flags_p
@pytest.mark.parametrize("op", COMPLEX_OPS)
@pytest.mark.parametrize("dtype", COMPLEX, ids=_id)
def test_complex_ops(device, op, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, "cpu")
    for shape, dim in COMPLEX_SHAPES:
        check_complex(op, dim=dim, exclusive=exclusive, reverse=reverse,
                      **_complex_operands(op, shape, dim, dtype, gen, device))
    for layout, shape, dim in LAYOUT_CASES:
        check_complex(op, dim=dim, exclusive=exclusive, reverse=reverse, ctx=f"[{layout}]",
                      **_complex_operands(op, shape, dim, dtype, gen, device, layout))


@device_p
@pytest.mark.parametrize("dtype", COMPLEX, ids=_id)
def test_complex_matches_torch_functions(device, dtype, seed):
    """Second oracle: torch.cumsum / torch.cumprod / torch.logcumsumexp on the same device."""
    gen = make_gen(seed, "cpu")
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == c64 else dict(rtol=1e-12, atol=1e-12)
    for shape, dim in [((13,), 0), ((7, 19), 1), ((7, 19), -2), ((3, 4, 5), 1), ((), 0)]:
        n = shape[dim] if shape else 1
        xs = complex_data("sum", shape, dtype, gen, n).to(device)
        xp = complex_data("prod", shape, dtype, gen, n).to(device)
        for tname, x in (("cumsum", xs), ("cumprod", xp)):
            want = getattr(torch, tname)(x, dim)
            got = getattr(ops, tname)(x, dim)
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got, want, **tol)
            if x.dim():
                want_r = getattr(torch, tname)(x.flip(dim), dim).flip(dim)
                torch.testing.assert_close(getattr(ops, tname)(x, dim, reverse=True), want_r, **tol)
        m = (torch.rand(shape, generator=gen) < 0.5).to(device)
        torch.testing.assert_close(ops.masked_cumsum(xs, m, dim), torch.cumsum(xs * m, dim), **tol)


@device_p
@flags_p
@pytest.mark.parametrize("op", ["cumsum", "masked_cumsum"])
def test_complex_small_integers_exact(device, op, exclusive, reverse, seed):
    """Small Gaussian integers: every partial sum is exact in any order (both dtypes)."""
    gen = make_gen(seed, "cpu")
    for dtype in COMPLEX:
        for shape, dim in [((3, 100_000), 1), ((70_001, 2), 0), ((33, 1000), 1), ((1000, 33), 0)]:
            x = complex_data("int", shape, dtype, gen).to(device)
            m = (torch.rand(shape, generator=gen) < 0.6).to(device)
            got = ops.cumsum(x, dim, exclusive=exclusive, reverse=reverse) if op == "cumsum" else \
                ops.masked_cumsum(x, m, dim, exclusive=exclusive, reverse=reverse)
            v = x.cpu().to(c128) * (m.cpu() if op == "masked_cumsum" else 1)
            want = scan_ref("sum", v, dim, exclusive, reverse).to(dtype)
            assert got.dtype == dtype and torch.equal(got.cpu(), want), (op, dtype, shape, dim)


@device_p
@flags_p
def test_complex_cumprod_unit_roots_exact(device, exclusive, reverse, seed):
    """Products of +-1, +-i are exact in any order: a lost or repeated factor shows."""
    gen = make_gen(seed, "cpu")
    units = torch.tensor([1, -1, 1j, -1j], dtype=c128)
    for dtype in COMPLEX:
        for shape, dim in [((3, 100_000), 1), ((70_001, 2), 0), ((5, 999), -1)]:
            x = units[torch.randint(0, 4, shape, generator=gen)].to(dtype)
            got = ops.cumprod(x.to(device), dim, exclusive=exclusive, reverse=reverse)
            want = scan_ref("prod", x.to(c128), dim, exclusive, reverse).to(dtype)
            assert torch.equal(got.cpu(), want), (dtype, shape, dim)


@device_p
def test_complex_dtype_argument(device, seed, capfd):
    """dtype= as torch: real/int -> complex, complex -> complex of the other width, and
    complex -> real (the imaginary part is discarded, with torch's warning)."""
    gen = make_gen(seed, "cpu")
    xr = torch.randn(4, 9, generator=gen).to(device)
    xi = torch.randint(-3, 4, (4, 9), generator=gen).to(i32).to(device)
    xc = complex_data("sum", (4, 9), c64, gen).to(device)
    cases = [(xr, c64), (xr, c128), (xi, c64), (xc, c128), (xc.to(c128), c64)]
    for x, dt in cases:
        for op in ("cumsum", "cumprod"):
            for e, r in FLAGS:
                got = getattr(ops, op)(x, 1, exclusive=e, reverse=r, dtype=dt)
                want = scan_ref("sum" if op == "cumsum" else "prod", x.to(dt).to(c128), 1, e, r)
                assert got.dtype == dt
                tol = dict(rtol=1e-5, atol=1e-5) if dt == c64 else dict(rtol=1e-12, atol=1e-12)
                torch.testing.assert_close(got.to(c128), want, **tol)
            torch.testing.assert_close(getattr(ops, op)(x, 1, dtype=dt),
                                       getattr(torch, op)(x, 1, dtype=dt), rtol=1e-5, atol=1e-5)
        m = (torch.rand(4, 9, generator=gen) < 0.5).to(device)
        got = ops.masked_cumsum(x, m, 1, dtype=dt)
        torch.testing.assert_close(got, torch.cumsum(x.to(dt) * m, 1), rtol=1e-5, atol=1e-5)
    # complex -> real: torch's "discards the imaginary part" warning. Through torch.ops (for
    # aten ops too) a TORCH_WARN reaches the C++ log on stderr, not Python's warnings.
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        for dt in (f32, f64):
            capfd.readouterr()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = ops.cumsum(xc, 1, dtype=dt)
            err = capfd.readouterr().err
            assert any("discards the imaginary part" in str(w.message) for w in caught) or \
                "discards the imaginary part" in err, (err, [str(w.message) for w in caught])
            assert got.dtype == dt
            with pytest.warns(UserWarning, match="discards the imaginary part"):
                want = torch.cumsum(xc, 1, dtype=dt)  # (torch's Python binding: a warning)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    finally:
        torch.set_warn_always(warn_always)


# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------

any_device_p = pytest.mark.parametrize("device", DEVICES + ["meta"])


@any_device_p
@minmax_p
@pytest.mark.parametrize("dtype,name", [(c64, "ComplexFloat"), (c128, "ComplexDouble")])
def test_minmax_complex_rejected(device, op, dtype, name):
    x = torch.ones(3, 4, dtype=dtype, device=device)
    with pytest.raises(RuntimeError, match=rf"scanops\.{op}: argument 'self' has dtype {name}; "
                       rf"{op} needs a real or bool dtype"):
        getattr(ops, op)(x, 1)
    x.requires_grad_()
    with pytest.raises(RuntimeError, match=rf"scanops\.{op}: argument 'self' has dtype {name}"):
        getattr(ops, op)(x, 1, exclusive=True)


@any_device_p
@pytest.mark.parametrize("dtype,name", [(i64, "Long"), (i32, "Int"), (i16, "Short"), (i8, "Char"),
                                        (u8, "Byte"), (b, "Bool")])
def test_logcumsumexp_integral_rejected(device, dtype, name):
    x = torch.ones(3, 4, device=device).to(dtype)
    with pytest.raises(RuntimeError, match=rf"scanops\.logcumsumexp: argument 'self' has dtype {name}; "
                       r"logcumsumexp needs a floating or complex dtype"):
        ops.logcumsumexp(x, 1)


DIM_CASES = [((3, 4), 2), ((3, 4), -3), ((5,), 1), ((), 1), ((), -2), ((2, 0, 3), 3)]


@any_device_p
@pytest.mark.parametrize("op", ["logcumsumexp", "cummax", "cummin"])
@pytest.mark.parametrize("shape,dim", DIM_CASES)
def test_new_ops_dim_out_of_range(device, op, shape, dim):
    x = torch.randn(shape, device=device)
    nd = len(shape)
    n = max(nd, 1)
    msg = (rf"scanops\.{op}: argument 'dim' = {dim} is out of range for a tensor of {nd} "
           rf"dimension\(s\) \(expected a dim in \[{-n}, {n - 1}\]\)")
    with pytest.raises(RuntimeError, match=msg):
        getattr(ops, op)(x, dim)
    x.requires_grad_()
    with pytest.raises(RuntimeError, match=msg):
        getattr(ops, op)(x, dim, reverse=True)


@any_device_p
@pytest.mark.parametrize("op", ["logcumsumexp", "cummax", "cummin"])
def test_new_ops_have_no_dtype_argument(device, op):
    x = torch.ones(3, 5, device=device)
    with pytest.raises((RuntimeError, TypeError), match="dtype"):
        getattr(ops, op)(x, 1, dtype=f64)


@any_device_p
def test_new_ops_meta_shapes_and_dtypes(device):
    for dtype in LCSE_DTYPES:
        x = torch.empty(4, 7, dtype=dtype, device=device).t()
        y = ops.logcumsumexp(x, 0, exclusive=True)
        assert y.shape == (7, 4) and y.dtype == dtype and y.is_contiguous() and y.device == x.device
    for dtype in MINMAX_DTYPES:
        x = torch.zeros(4, 7, dtype=dtype, device=device).t()
        for op in ("cummax", "cummin"):
            v, i = getattr(ops, op)(x, 1, reverse=True)
            assert v.shape == i.shape == (7, 4) and v.dtype == dtype and i.dtype == i64
            assert v.device == i.device == x.device


# ------------------------------------------------------------------------------------------
# Autograd
# ------------------------------------------------------------------------------------------

def _drop_identity(y, dim, exclusive, reverse):
    """An exclusive scan's first position (in scan order) is a constant -inf: numerical
    differentiation there gives NaN (-inf - -inf), so gradcheck sees the rest."""
    if not exclusive or y.dim() == 0 or y.shape[dim] == 0:
        return y
    n = y.shape[dim]
    return y.narrow(dim, 0, n - 1) if reverse else y.narrow(dim, 1, n - 1)


def distinct(shape, gen, device, dtype=f64):
    """Values at least 1 apart (a permutation plus noise below 0.5): max / min are locally
    differentiable, gradcheck's perturbations never change a winner."""
    n = math.prod(shape)
    v = torch.randperm(n, generator=gen).to(dtype) * 1.0
    v = v + 0.4 * torch.rand(n, generator=gen, dtype=dtype) - 20
    return v.reshape(shape).to(device)


@device_p
@flags_p
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_logcumsumexp_gradcheck(device, dim, exclusive, reverse, seed):
    gen = make_gen(seed, "cpu")
    x = (2 * torch.randn(3, 5, 4, dtype=f64, generator=gen)).to(device).requires_grad_()

    def fn(t):
        y = ops.logcumsumexp(t, dim, exclusive=exclusive, reverse=reverse)
        return _drop_identity(y, dim % 3, exclusive, reverse)

    assert gradcheck(fn, (x,), nondet_tol=_nondet(device))
    assert gradgradcheck(fn, (x,), nondet_tol=_nondet(device))


@device_p
@flags_p
@minmax_p
@pytest.mark.parametrize("dim", [0, -1])
def test_minmax_gradcheck(device, op, dim, exclusive, reverse, seed):
    gen = make_gen(seed, "cpu")
    for shape in [(4, 6), (2, 3, 5)]:
        x = distinct(shape, gen, device).requires_grad_()
        d = dim % len(shape)

        def fn(t):
            v, i = getattr(ops, op)(t, dim, exclusive=exclusive, reverse=reverse)
            assert not i.requires_grad and i.dtype == i64
            return _drop_identity(v, d, exclusive, reverse)

        assert gradcheck(fn, (x,), nondet_tol=_nondet(device))
        assert gradgradcheck(fn, (x,), nondet_tol=_nondet(device))


@device_p
@flags_p
def test_logcumsumexp_gradients_match_torch(device, exclusive, reverse, seed):
    """First and second order against autograd through torch.logcumsumexp (compositions),
    including -inf inputs, with a gradient on every position (the -inf identity too)."""
    gen = make_gen(seed, "cpu")
    cases = [((4, 33), 1), ((33, 4), 0), ((2, 3, 50), -1), ((300,), 0), ((), 0)]
    for shape, dim in cases:
        for kind in ("random", "neginf"):
            x = 2 * torch.randn(shape, dtype=f64, generator=gen)
            if kind == "neginf":
                if not shape:
                    continue
                x = torch.where(torch.rand(shape, generator=gen) < 0.2, -INF, x)
            x = x.to(device).requires_grad_()
            ours = ops.logcumsumexp(x, dim, exclusive=exclusive, reverse=reverse)
            ref = lcse_ref(x, dim, exclusive, reverse)
            torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
            g = torch.randn(shape, dtype=f64, generator=gen).to(device)
            (got,) = torch.autograd.grad(ours, x, g, create_graph=True)
            (want,) = torch.autograd.grad(ref, x, g, create_graph=True)
            # torch's gradient is NaN for an element whose every prefix (in scan order) up to
            # some output is all -inf (exp(-inf - -inf)); elsewhere (-inf after a finite
            # value: the usual masking) it is finite, and so must ours be.
            fin = torch.isfinite(want)
            assert torch.isfinite(got[fin]).all(), f"{kind} {shape}: non-finite gradient {got}"
            torch.testing.assert_close(got[fin], want[fin], rtol=1e-9, atol=1e-9)
            if kind == "random":
                v = torch.randn(shape, dtype=f64, generator=gen).to(device)
                # (A gradient that does not depend on x, e.g. of a 0-dim input, has no graph:
                # its derivative is zero.)
                got2 = torch.autograd.grad((got * v).sum(), x)[0] if got.requires_grad else None
                want2 = torch.autograd.grad((want * v).sum(), x)[0] if want.requires_grad else None
                got2 = torch.zeros_like(x) if got2 is None else got2
                want2 = torch.zeros_like(x) if want2 is None else want2
                torch.testing.assert_close(got2, want2, rtol=1e-9, atol=1e-9)


@device_p
@flags_p
@minmax_p
@pytest.mark.parametrize("dtype", [f64, f32, bf16], ids=_id)
def test_minmax_gradients_match_torch(device, op, dtype, exclusive, reverse, seed):
    """With ties (small integers) and NaN too: the gradient goes to the selected elements,
    exactly as autograd through torch.cummax / torch.cummin (sums of a few grads: exact
    with small-integer grads)."""
    gen = make_gen(seed, "cpu")
    cases = [((4, 33), 1), ((33, 4), 0), ((2, 3, 50), -1), ((), 0)]
    if dtype != bf16:  # bfloat16 holds integers up to 256 exactly: short lines only
        cases.append(((3000,), 0))
    for shape, dim in cases:
        for kind in ("ties", "special", "random"):
            x = minmax_data(kind, shape, dtype, gen).to(device).requires_grad_()
            v, i = getattr(ops, op)(x, dim, exclusive=exclusive, reverse=reverse)
            assert v.requires_grad and not i.requires_grad
            rv, _ = minmax_ref(op, x, dim, exclusive, reverse)
            lim = 2 if dtype == bf16 else 5
            g = torch.randint(-lim, lim + 1, shape, generator=gen).to(dtype).to(device)
            (got,) = torch.autograd.grad(v, x, g)
            (want,) = torch.autograd.grad(rv, x, g)
            assert got.dtype == dtype and got.shape == x.shape
            assert torch.equal(got, want), (kind, shape, dim, got, want)
            # Run to run: the segmented sum is deterministic.
            (again,) = torch.autograd.grad(getattr(ops, op)(x, dim, exclusive=exclusive,
                                                            reverse=reverse)[0], x, g)
            assert same_bits(got, again)


def lcse_grad_data(shape, gen):
    """Complex data whose exponentials lie in a half plane (phases in [-1, 1]): the partial
    sums never cancel, so log is well conditioned and finite differences are accurate."""
    re = torch.randn(shape, dtype=f64, generator=gen)
    im = torch.rand(shape, dtype=f64, generator=gen) * 2 - 1
    return torch.complex(re, im)


@device_p
@flags_p
@pytest.mark.parametrize("op", ["cumsum", "masked_cumsum", "cumprod", "linear_recurrence",
                                "logcumsumexp"])
def test_complex_gradcheck(device, op, exclusive, reverse, seed):
    gen = make_gen(seed, "cpu")
    shape, dim = (3, 6), 1
    x = complex_data("prod" if op == "cumprod" else "sum", shape, c128, gen, 6).to(device)
    if op == "logcumsumexp":
        x = lcse_grad_data(shape, gen).to(device)
    m = (torch.rand(shape, generator=gen) < 0.6).to(device)
    kw = dict(exclusive=exclusive, reverse=reverse)
    nd = _nondet(device)
    if op == "linear_recurrence":
        a = complex_data("coef", shape, c128, gen, 6).to(device).requires_grad_()
        fn = lambda a_, x_: ops.linear_recurrence(a_, x_, dim, **kw)  # noqa: E731
        inputs = (a, x.requires_grad_())
    else:
        def fn(x_):
            if op == "masked_cumsum":
                y = ops.masked_cumsum(x_, m, dim, **kw)
            else:
                y = getattr(ops, op)(x_, dim, **kw)
            return _drop_identity(y, dim, exclusive, reverse) if op == "logcumsumexp" else y
        inputs = (x.requires_grad_(),)
    assert gradcheck(fn, inputs, nondet_tol=nd)
    assert gradgradcheck(fn, inputs, nondet_tol=nd)


@device_p
@flags_p
@pytest.mark.parametrize("op", ["cumsum", "masked_cumsum", "cumprod", "linear_recurrence",
                                "logcumsumexp"])
def test_complex_gradients_match_torch(device, op, exclusive, reverse, seed):
    """PyTorch's conjugate convention: the same gradient as autograd through torch's own
    complex functions, for a complex grad_output."""
    gen = make_gen(seed, "cpu")
    for shape, dim in [((4, 17), 1), ((17, 4), 0), ((2, 3, 20), -1)]:
        n = shape[dim]
        x = complex_data("prod" if op == "cumprod" else "sum", shape, c128, gen, n).to(device)
        if op == "logcumsumexp":
            x = lcse_grad_data(shape, gen).to(device)
        x.requires_grad_()
        m = (torch.rand(shape, generator=gen) < 0.6).to(device)
        a = complex_data("coef", shape, c128, gen, n).to(device).requires_grad_()
        kw = dict(exclusive=exclusive, reverse=reverse)
        if op == "cumsum":
            ours, ref, inputs = ops.cumsum(x, dim, **kw), scan_ref("sum", x, dim, exclusive, reverse), (x,)
        elif op == "masked_cumsum":
            ours = ops.masked_cumsum(x, m, dim, **kw)
            ref, inputs = scan_ref("sum", x * m, dim, exclusive, reverse), (x,)
        elif op == "cumprod":
            ours, ref, inputs = ops.cumprod(x, dim, **kw), scan_ref("prod", x, dim, exclusive, reverse), (x,)
        elif op == "linear_recurrence":
            ours = ops.linear_recurrence(a, x, dim, **kw)
            ref, inputs = linrec_ref(a, x, dim, exclusive, reverse), (a, x)
        else:
            ours, ref, inputs = ops.logcumsumexp(x, dim, **kw), lcse_ref(x, dim, exclusive, reverse), (x,)
        if op == "logcumsumexp":
            torch.testing.assert_close(torch.exp(ours), torch.exp(ref), rtol=1e-10, atol=1e-10)
        else:
            torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
        g = complex_data("sum", shape, c128, gen).to(device)
        got = torch.autograd.grad(ours, inputs, g)
        want = torch.autograd.grad(ref, inputs, g)
        for gg, ww in zip(got, want):
            assert gg.dtype == c128
            torch.testing.assert_close(gg, ww, rtol=1e-9, atol=1e-9)


@device_p
@pytest.mark.parametrize("dtype", [f64, c128], ids=_id)
def test_logcumsumexp_double_backward_with_zero_grads(device, dtype, seed):
    """grad_output with exact zeros (a masked loss, an unused output): the double backward
    must stay finite and agree with finite differences. (torch.logcumsumexp's own complex
    double backward gives NaN here, torch 2.11: its formula takes the log of the grad.)"""
    gen = make_gen(seed, "cpu")
    shape = (3, 6)
    x = (lcse_grad_data(shape, gen) if dtype.is_complex else torch.randn(shape, dtype=f64, generator=gen))
    x = x.to(device).requires_grad_()
    keep = torch.ones(shape, dtype=torch.bool)
    keep[:, -1] = False
    keep[1, 2] = False
    keep = keep.to(device)
    for e, r in FLAGS:
        def fn(t):
            y = ops.logcumsumexp(t, 1, exclusive=e, reverse=r)
            return torch.where(keep, y, torch.zeros((), dtype=dtype, device=device)) if not e \
                else _drop_identity(y, 1, e, r)[:, 1:]
        g = torch.zeros(fn(x).shape, dtype=dtype, device=device).requires_grad_()
        (gx,) = torch.autograd.grad(fn(x), x, g, create_graph=True)
        (ggx,) = torch.autograd.grad(gx, x, torch.ones_like(gx), allow_unused=True)
        assert ggx is None or torch.isfinite(torch.view_as_real(ggx) if ggx.is_complex() else ggx).all(), \
            (e, r, ggx)
        assert gradgradcheck(fn, (x,), nondet_tol=_nondet(device)), (e, r)


@device_p
@pytest.mark.parametrize("dtype", [f32, bf16, c64], ids=_id)
def test_logcumsumexp_low_precision_gradient(device, dtype, seed):
    gen = make_gen(seed, "cpu")
    x = lcse_data("random", (5, 64), dtype, gen).to(device).requires_grad_()
    g = lcse_data("random", (5, 64), dtype, gen).to(device)
    for e, r in FLAGS:
        (got,) = torch.autograd.grad(ops.logcumsumexp(x, 1, exclusive=e, reverse=r), x, g)
        wide = c128 if dtype.is_complex else f64
        x64 = x.detach().to(wide).requires_grad_()
        (want,) = torch.autograd.grad(lcse_ref(x64, 1, e, r), x64, g.to(wide))
        assert got.dtype == dtype
        tol = 64 * torch.finfo(dtype.to_real() if dtype.is_complex else dtype).eps
        torch.testing.assert_close(got.to(wide), want, rtol=tol, atol=tol * want.abs().max().item())


@device_p
def test_new_ops_zero_dim_and_empty_gradients(device):
    for shape, dim in [((), 0), ((0,), 0), ((3, 0), 1), ((0, 3), 1)]:
        for e, r in FLAGS:
            x = torch.full(shape, 0.5, dtype=f64, device=device, requires_grad=True)
            y = ops.logcumsumexp(x, dim, exclusive=e, reverse=r)
            (gx,) = torch.autograd.grad(y, x, torch.ones_like(y))
            assert gx.shape == x.shape and torch.isfinite(gx).all()
            if not shape:
                assert gx.item() == (0.0 if e else 1.0)
            for op in ("cummax", "cummin"):
                v, _ = getattr(ops, op)(x, dim, exclusive=e, reverse=r)
                (gv,) = torch.autograd.grad(v, x, torch.ones_like(v))
                assert gv.shape == x.shape
                if not shape:
                    assert gv.item() == (0.0 if e else 1.0)


# ------------------------------------------------------------------------------------------
# Run-to-run reproducibility
# ------------------------------------------------------------------------------------------

@device_p
def test_run_to_run_bitwise(device, seed):
    gen = make_gen(seed, "cpu")
    for shape, dim in [((2, 100_000), 1), ((70_001, 3), 0), ((64, 2000), 1), ((3, 5000, 4), 1)]:
        for dtype in (f32, bf16, c64):
            x = lcse_data("random", shape, dtype, gen).to(device)
            for e, r in ((False, False), (True, True)):
                y1 = ops.logcumsumexp(x, dim, exclusive=e, reverse=r)
                y2 = ops.logcumsumexp(x, dim, exclusive=e, reverse=r)
                assert _same(y1, y2), ("logcumsumexp", shape, dtype, e, r)
                if dtype.is_complex:
                    s1 = ops.cumsum(x, dim, exclusive=e, reverse=r)
                    s2 = ops.cumsum(x, dim, exclusive=e, reverse=r)
                    assert _same(s1, s2), ("cumsum", shape, dtype, e, r)
                else:
                    for op in ("cummax", "cummin"):
                        v1, i1 = getattr(ops, op)(x, dim, exclusive=e, reverse=r)
                        v2, i2 = getattr(ops, op)(x, dim, exclusive=e, reverse=r)
                        assert same_bits(v1, v2) and torch.equal(i1, i2), (op, shape, dtype, e, r)
        xg = lcse_data("random", shape, f32, gen).to(device).requires_grad_()
        g = torch.randn(shape, generator=gen).to(device)
        grads = [torch.autograd.grad(ops.logcumsumexp(xg, dim, reverse=True), xg, g)[0]
                 for _ in range(2)]
        assert same_bits(grads[0], grads[1])


# ------------------------------------------------------------------------------------------
# CUDA: big shapes for every kernel family
# ------------------------------------------------------------------------------------------

BIG_CASES = [((1 << 20, 4), 1), ((1 << 20, 4), 0), ((1 << 14, 64), 1), ((64, 1 << 20), 1),
             ((4, 1 << 20), 1), ((2**24 + 3,), 0), ((4096, 4096), 0), ((8, 4096, 512), 1),
             ((3, 5_000_000), 1)]


@needs_cuda
@pytest.mark.large
@pytest.mark.parametrize("shape,dim", BIG_CASES, ids=[shape_id(s, d) for s, d in BIG_CASES])
def test_cuda_big_new_ops(shape, dim, seed):
    gen = make_gen(seed, "cpu")
    x = minmax_data("ties", shape, f32, gen).cuda()
    for op in ("cummax", "cummin"):
        for e, r in ((False, False), (True, True), (False, True)):
            check_minmax(op, x, dim, e, r)
    xl = lcse_data("random", shape, f32, gen).cuda()
    for e, r in ((False, False), (True, False), (False, True)):
        check_lcse(xl, dim, e, r)
    xc = complex_data("int", shape, c64, gen).cuda()
    got = ops.cumsum(xc, dim, reverse=True)
    want = scan_ref("sum", xc.cpu().to(c128), dim, False, True).to(c64)
    assert torch.equal(got.cpu(), want)


PARTIAL_TILE_LENGTHS = sorted({n for _, n in PARTIAL_TILE_SHAPES})


@needs_cuda
@pytest.mark.parametrize("exclusive,reverse", FLAGS, ids=FLAG_IDS)
@pytest.mark.parametrize("op", ["cummax", "logcumsumexp"])
@pytest.mark.parametrize("length", PARTIAL_TILE_LENGTHS)
def test_cuda_partial_row_tiles_family(length, op, exclusive, reverse, seed):
    """Row tiles that are not full (packed rows leaving a tile's end empty, a row's last tile):
    test_ops.py's test_cuda_partial_row_tiles for the family ops, over the row lengths of its
    shapes (here with about 60000 elements a shape)."""
    gen = make_gen(seed, "cuda")
    shape = (max(2, 60000 // length), length)
    if op == "cummax":
        x = minmax_data("ties", shape, f32, gen, "cuda")
        v, i = check_minmax(op, x, 1, exclusive, reverse)
        v2, i2 = ops.cummax(x, 1, exclusive=exclusive, reverse=reverse)
        assert torch.equal(v, v2) and torch.equal(i, i2)
    else:
        x = lcse_data("random", shape, f32, gen, "cuda")
        y = check_lcse(x, 1, exclusive, reverse)
        assert torch.equal(y, ops.logcumsumexp(x, 1, exclusive=exclusive, reverse=reverse))
