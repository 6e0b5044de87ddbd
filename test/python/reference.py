"""Shared references and helpers of the scanops Python tests.

References are plain PyTorch compositions evaluated in float64 (floating results) or int64
(integral results, wrapping like the library):

* ``scan_ref``: cumsum / cumprod with flip (reverse) and shift (exclusive) compositions;
* ``linrec_loop``: the defining loop ``h[t] = a[t] * h[t-1] + x[t]``, vectorised over the
  other dims (small lengths only);
* ``linrec_ref``: the same recurrence as a log-depth (Hillis-Steele) scan over affine maps,
  in float64, for long lines (checked against ``linrec_loop`` in test_ops.py).

All references are differentiable (no in-place ops), so test_autograd.py uses them for
reference gradients.

Tolerances: a floating result is compared with the float64 reference of the *same* input
values (after any ``dtype=`` conversion), allowing for float32 accumulation (float64 for
float64 results) and then rounding to the output dtype:

* sums and linear recurrences: ``|got - ref| <= C * eps_acc * B + eps_out * |ref| + floor``,
  where ``B`` is the same scan over absolute values (``cumsum |x|``, ``linrec(|a|, |x|)``),
  a bound on every partial result that any summation order can produce;
* products: ``|got - ref| <= |ref| * (2 eps_out + eps_acc * C') + floor``;

see ``expected`` for C and C'.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import pytest
import torch

OPS = ("cumsum", "masked_cumsum", "cumprod", "linear_recurrence")
SCAN_OPS = ("cumsum", "masked_cumsum", "cumprod")  # the ops with a dtype= argument
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES
FLAGS = ((False, False), (True, False), (False, True), (True, True))  # (exclusive, reverse)
FLAG_IDS = ["incl", "excl", "incl-rev", "excl-rev"]
HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
ops = torch.ops.scanops


def dtype_id(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def flags_id(exclusive: bool, reverse: bool) -> str:
    return FLAG_IDS[FLAGS.index((exclusive, reverse))]


def result_dtype(op: str, in_dtype: torch.dtype, dtype: Optional[torch.dtype] = None):
    if op == "linear_recurrence":
        return in_dtype
    if dtype is not None:
        return dtype
    if not in_dtype.is_floating_point:
        return torch.int64  # integral and bool
    return in_dtype


def call(op: str, dim: int, exclusive: bool = False, reverse: bool = False, *, x, mask=None,
         a=None, dtype=None, poison: bool = True, flags_as_kwargs: bool = True):
    """Runs torch.ops.scanops.<op>, after poisoning the allocator so that an output element the
    kernel forgets to write holds garbage (NaN) rather than a lucky zero."""
    if poison:
        poison_allocator(x.device, max(x.numel(), 1) * 8)
    kw = {}
    if exclusive or flags_as_kwargs:
        kw["exclusive"] = exclusive
    if reverse or flags_as_kwargs:
        kw["reverse"] = reverse
    if dtype is not None:
        kw["dtype"] = dtype
    if op == "cumsum":
        return ops.cumsum(x, dim, **kw)
    if op == "masked_cumsum":
        return ops.masked_cumsum(x, mask, dim, **kw)
    if op == "cumprod":
        return ops.cumprod(x, dim, **kw)
    if op == "linear_recurrence":
        assert dtype is None
        return ops.linear_recurrence(a, x, dim, **kw)
    raise ValueError(op)


def poison_allocator(device, nbytes: int) -> None:
    """Allocates, fills with NaN (0xFF for the bytes past a float) and frees a block of
    `nbytes`, so the caching allocator (CUDA) / malloc (CPU) hands it back next."""
    n = max(nbytes // 4, 1)
    t = torch.full((n,), float("nan"), dtype=torch.float32, device=device)
    del t


# ------------------------------------------------------------------------------------------
# References
# ------------------------------------------------------------------------------------------

def _shift(y: torch.Tensor, dim: int, identity: float) -> torch.Tensor:
    """Exclusive from inclusive, in scan order (not flipped): [identity, y[0], ..., y[n-2]]."""
    n = y.shape[dim]
    if n == 0:
        return y
    first = torch.full_like(y.narrow(dim, 0, 1), identity)
    return torch.cat([first, y.narrow(dim, 0, n - 1)], dim)


def scan_ref(kind: str, v: torch.Tensor, dim: int, exclusive: bool = False,
             reverse: bool = False) -> torch.Tensor:
    """kind 'sum' or 'prod' of v (already float64 / int64) along dim; differentiable."""
    zero_d = v.dim() == 0
    if zero_d:
        v = v.reshape(1)
    dim = dim % v.dim()
    if reverse:
        v = v.flip(dim)
    y = torch.cumsum(v, dim) if kind == "sum" else torch.cumprod(v, dim)
    if exclusive:
        y = _shift(y, dim, 0 if kind == "sum" else 1)
    if reverse:
        y = y.flip(dim)
    return y.reshape(()) if zero_d else y


def linrec_loop(a: torch.Tensor, x: torch.Tensor, dim: int, exclusive: bool = False,
                reverse: bool = False) -> torch.Tensor:
    """The defining loop, vectorised over the other dims; a broadcasts to x."""
    a = a.expand(x.shape)
    zero_d = x.dim() == 0
    if zero_d:
        a, x = a.reshape(1), x.reshape(1)
    dim = dim % x.dim()
    a_, x_ = a.movedim(dim, 0), x.movedim(dim, 0)
    n = x_.shape[0]
    outs = [None] * n
    h = torch.zeros_like(x_[0]) if n else None
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
        if exclusive:
            outs[t] = h
        h = a_[t] * h + x_[t]
        if not exclusive:
            outs[t] = h
    y = torch.stack(outs, 0) if n else torch.empty_like(x_)
    y = y.movedim(0, dim)
    return y.reshape(()) if zero_d else y


def linrec_ref(a: torch.Tensor, x: torch.Tensor, dim: int, exclusive: bool = False,
               reverse: bool = False) -> torch.Tensor:
    """Log-depth inclusive scan over affine maps (A, B) (Hillis-Steele), then flip/shift.
    Evaluate it in float64: combine(earlier e, later l) = (l.A * e.A, l.A * e.B + l.B)."""
    a = a.expand(x.shape)
    zero_d = x.dim() == 0
    if zero_d:
        a, x = a.reshape(1), x.reshape(1)
    dim = dim % x.dim()
    A, B = a.movedim(dim, -1), x.movedim(dim, -1)
    if reverse:
        A, B = A.flip(-1), B.flip(-1)
    n = B.shape[-1]
    s = 1
    while s < n:
        A_prev, B_prev = A[..., : n - s], B[..., : n - s]
        A_cur, B_cur = A[..., s:], B[..., s:]
        B = torch.cat([B[..., :s], A_cur * B_prev + B_cur], -1)
        A = torch.cat([A[..., :s], A_cur * A_prev], -1)
        s *= 2
    y = _shift(B, -1 % B.dim(), 0) if exclusive else B
    if reverse:
        y = y.flip(-1)
    y = y.movedim(-1, dim)
    return y.reshape(()) if zero_d else y


# ------------------------------------------------------------------------------------------
# Expected results and tolerances
# ------------------------------------------------------------------------------------------

def eps_acc(out_dtype: torch.dtype) -> float:
    """Accumulation precision the library promises (at worst): float64 for float64, else float32."""
    return torch.finfo(torch.float64).eps if out_dtype == torch.float64 else torch.finfo(
        torch.float32).eps


def _floor(out_dtype: torch.dtype) -> float:
    fi = torch.finfo(out_dtype)
    return 2 * fi.tiny * fi.eps  # a couple of subnormal spacings of the output dtype


def factor_count(shape: Sequence[int], dim: int, exclusive: bool, reverse: bool, device):
    """Number of factors of each element of a product scan (float64, broadcastable)."""
    nd = max(len(shape), 1)
    dim = dim % nd
    n = shape[dim] if len(shape) else 1
    k = torch.arange(n, dtype=torch.float64, device=device)
    if reverse:
        k = k.flip(0)
    if not exclusive:
        k = k + 1
    if len(shape) == 0:
        return k.reshape(())
    view = [1] * len(shape)
    view[dim] = n
    return k.reshape(view)


def _constant_along(dim: int, *ts) -> bool:
    """True when an operand repeats one value along the scan (stride 0 there): rounding errors
    then do not cancel, so the worst-case (linear in the position) error growth applies."""
    for t in ts:
        if t is None or t.dim() == 0:
            continue
        d = dim % t.dim()
        if t.shape[d] > 1 and t.stride(d) == 0:
            return True
    return False


def expected(op: str, dim: int, exclusive: bool = False, reverse: bool = False, *, x, mask=None,
             a=None, dtype=None):
    """(reference, absolute tolerance tensor or None for exact, result dtype).

    Floating tolerance, with k the number of terms / factors of an element (its position in
    scan order) and B the scan of absolute values (a bound on every partial result):
      sums, recurrences:  C * eps_acc * B + eps_out * |ref|
      products:           |ref| * (2 eps_out + eps_acc * C')
    C = 16 and C' = 16 + 4 sqrt(k) for random data (rounding errors behave like a random walk);
    C = C' = 16 + k (the worst-case bound, any summation order) when an operand is constant
    along the scan (errors correlate), and for float64 accumulation (the reference itself is
    only float64 there).
    """
    out_dtype = result_dtype(op, x.dtype, dtype)
    if out_dtype.is_floating_point:
        e_out, e_acc = torch.finfo(out_dtype).eps, eps_acc(out_dtype)
    worst = out_dtype == torch.float64 or _constant_along(dim, x, a)
    if op == "linear_recurrence":
        a64, x64 = a.double(), x.double()
        ref = linrec_ref(a64, x64, dim, exclusive, reverse)
        bound = linrec_ref(a64.abs(), x64.abs(), dim, exclusive, reverse)
        c = 16.0
        if worst:
            c = c + factor_count(tuple(ref.shape), dim, exclusive, reverse, ref.device)
        tol = c * e_acc * bound + e_out * ref.abs()
        return ref, tol + _floor(out_dtype), out_dtype
    xc = x.to(dtype) if dtype is not None else x
    floating = out_dtype.is_floating_point
    v = xc.double() if floating else xc.long()
    if op == "masked_cumsum":
        v = v * mask.to(v.dtype)
    kind = "prod" if op == "cumprod" else "sum"
    ref = scan_ref(kind, v, dim, exclusive, reverse)
    if not floating:
        return ref, None, out_dtype
    k = factor_count(tuple(v.shape), dim, exclusive, reverse, v.device)
    if kind == "sum":
        bound = scan_ref("sum", v.abs(), dim, exclusive, reverse)
        c = 16.0 + k if worst else 16.0
        tol = c * e_acc * bound + e_out * ref.abs()
    else:
        c = 16.0 + k if worst else 16 + 4 * k.sqrt()
        tol = ref.abs() * (2 * e_out + e_acc * c)
    return ref, tol + _floor(out_dtype), out_dtype


def assert_close_to_ref(got: torch.Tensor, ref: torch.Tensor, tol: Optional[torch.Tensor],
                        out_dtype: torch.dtype, ctx: str = "") -> None:
    assert got.dtype == out_dtype, f"{ctx}: dtype {got.dtype}, expected {out_dtype}"
    assert tuple(got.shape) == tuple(ref.shape), f"{ctx}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    if got.numel() == 0:
        return
    if tol is None:  # integral: exact, with the library's wrapping (int64 ref cast down)
        want = ref.to(out_dtype)
        bad = got != want
        if bool(bad.any()):
            idx = bad.nonzero()[:5].tolist()
            detail = ", ".join(
                f"{tuple(i)}: got {got[tuple(i)].item()} want {want[tuple(i)].item()}" for i in idx)
            raise AssertionError(f"{ctx}: {int(bad.sum())}/{got.numel()} mismatches; {detail}")
        return
    g = got.double()
    finite_ref = torch.isfinite(ref)
    diff = (g - ref).abs()
    ok = diff <= tol.expand(ref.shape)
    # Results beyond the output dtype's range legitimately overflow to an infinity of the
    # reference's sign (float16 products, for instance).
    overflow = (ref.abs() + tol) >= torch.finfo(out_dtype).max
    ok = ok | (overflow & torch.isinf(g) & (torch.sign(g) == torch.sign(ref)))
    # Exact infinities / NaNs must match where the reference has them.
    ok = torch.where(finite_ref, ok, (g == ref) | (torch.isnan(g) & torch.isnan(ref)))
    if not bool(ok.all()):
        bad = ~ok
        idx = bad.nonzero()[:5].tolist()
        t = tol.expand(ref.shape)
        detail = ", ".join(
            f"{tuple(i)}: got {g[tuple(i)].item()!r} want {ref[tuple(i)].item()!r} "
            f"(tol {t[tuple(i)].item():.3g})" for i in idx)
        ratio = (diff / t.clamp_min(1e-300)).nan_to_num(float("inf")).max().item()
        raise AssertionError(
            f"{ctx}: {int(bad.sum())}/{got.numel()} elements off (worst err/tol {ratio:.3g}); "
            f"{detail}")


def same_bits(u: torch.Tensor, v: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe)."""
    if u.shape != v.shape or u.dtype != v.dtype:
        return False
    if u.is_floating_point():
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[u.element_size()]
        return torch.equal(u.view(view), v.view(view))
    return torch.equal(u, v)


def check_op(op: str, dim: int, exclusive: bool = False, reverse: bool = False, *, x, mask=None,
             a=None, dtype=None, ctx: str = "", got=None) -> torch.Tensor:
    """Runs the op (unless `got` is given) and compares it with the reference; also checks the
    result's shape, dtype, device and contiguity and that the inputs were left untouched."""
    before = [t.clone() for t in (x, mask, a) if t is not None]
    if got is None:
        got = call(op, dim, exclusive, reverse, x=x, mask=mask, a=a, dtype=dtype)
    ctx = (f"{op}(shape={tuple(x.shape)}, strides={x.stride()}, dtype={dtype_id(x.dtype)}, "
           f"dim={dim}, exclusive={exclusive}, reverse={reverse}, dtype_arg={dtype}) {ctx}")
    assert got.device == x.device, f"{ctx}: result on {got.device}"
    assert got.is_contiguous(), f"{ctx}: result not contiguous, strides {got.stride()}"
    assert got.data_ptr() != x.data_ptr() or x.numel() == 0, f"{ctx}: result aliases the input"
    ref, tol, out_dtype = expected(op, dim, exclusive, reverse, x=x, mask=mask, a=a, dtype=dtype)
    assert_close_to_ref(got, ref, tol, out_dtype, ctx)
    after = [t for t in (x, mask, a) if t is not None]
    for b, t in zip(before, after):
        assert same_bits(b, t), f"{ctx}: an input was modified"
    return got


# ------------------------------------------------------------------------------------------
# Random inputs and layouts
# ------------------------------------------------------------------------------------------

def make_gen(seed: int, device) -> torch.Generator:
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(seed)
    return g


_INT_RANGES = {
    torch.int8: (-128, 128),
    torch.uint8: (0, 256),
    torch.int16: (-(2**15), 2**15),
    torch.int32: (-(2**31), 2**31),
    torch.int64: (-(2**62), 2**62),  # sums wrap around 2^64 on long lines: exact either way
}


def rand_data(role: str, shape, dtype: torch.dtype, device, gen: torch.Generator,
              n_scan: int = 16) -> torch.Tensor:
    """Random values for an operand.

    role: 'sum' (cumsum / masked_cumsum input, linear recurrence x), 'prod' (cumprod input:
    magnitudes near 1 so long products stay in range; small integers), 'coef' (recurrence
    coefficients: |a| <= 1 close enough to 1 that the carry still matters after n_scan steps,
    random signs), 'mask' (bool), 'sign' (+-1).
    """
    shape = tuple(shape)
    kw = dict(generator=gen, device=device)
    n = max(int(n_scan), 1)
    if role == "mask":
        return torch.rand(shape, **kw) < 0.6
    if role == "sign":  # +-1: products are exact, a lost or repeated factor flips a sign
        v = torch.where(torch.rand(shape, **kw) < 0.5, -1, 1)
        return v.to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, **kw) < (0.97 if role == "prod" else 0.5)
    if dtype.is_floating_point:
        base = torch.float64 if dtype == torch.float64 else torch.float32
        if role == "sum":
            return torch.randn(shape, dtype=base, **kw).to(dtype)
        sign = torch.where(torch.rand(shape, **kw) < (0.25 if role == "coef" else 0.3), -1.0, 1.0)
        if role == "prod":
            sigma = min(0.5, 2.5 / math.sqrt(n))
            mag = torch.exp(sigma * torch.randn(shape, dtype=base, **kw))
        elif role == "coef":
            mag = torch.exp(-min(1.0, 4.0 / n) * torch.rand(shape, dtype=base, **kw))
        else:
            raise ValueError(role)
        return (sign.to(base) * mag).to(dtype)
    if role == "prod":
        table = torch.tensor([1, 2, 3, 5, 7] if dtype == torch.uint8 else [-3, -2, -1, 1, 2, 3],
                             device=device)
        idx = torch.randint(0, len(table), shape, **kw)
        v = table[idx]
        v = torch.where(torch.rand(shape, **kw) < 0.01, torch.zeros_like(v), v)
        return v.to(dtype)
    lo, hi = _INT_RANGES[dtype]
    return torch.randint(lo, hi, shape, dtype=torch.int64 if dtype == torch.int64 else dtype, **kw)


LAYOUTS = ("contiguous", "transposed", "permuted", "strided", "expanded_scan", "expanded_other",
           "offset")


def layout_applies(layout: str, shape, dim: int) -> bool:
    nd = len(shape)
    if layout in ("transposed", "permuted"):
        return nd >= 2
    if layout == "expanded_other":
        return nd >= 2
    if layout == "expanded_scan":
        return nd >= 1
    return True


def make_layout(shape, dim: int, layout: str, fill: Callable) -> torch.Tensor:
    """A tensor of logical shape `shape` with the given memory layout; fill(shape) returns a
    fresh contiguous random tensor."""
    shape = tuple(shape)
    nd = len(shape)
    if layout == "contiguous" or not layout_applies(layout, shape, dim):
        return fill(shape)
    if layout == "transposed":  # last two dims swapped in memory
        t = fill(shape[:-2] + (shape[-1], shape[-2]))
        return t.transpose(-1, -2)
    if layout == "permuted":  # every dim reversed in memory (column-major)
        t = fill(shape[::-1])
        return t.permute(tuple(range(nd))[::-1])
    if layout == "strided":  # step-2 slices of a bigger tensor, starting at 1 (offset too)
        big = fill(tuple(2 * s + 1 for s in shape))
        return big[tuple(slice(1, 2 * s + 1, 2) for s in shape)]
    if layout == "expanded_scan":  # stride 0 along the scan dim
        d = dim % nd
        small = list(shape)
        small[d] = 1
        return fill(tuple(small)).expand(shape)
    if layout == "expanded_other":  # stride 0 along another dim
        d = dim % nd
        o = 0 if d != 0 else 1
        small = list(shape)
        small[o] = 1
        return fill(tuple(small)).expand(shape)
    if layout == "offset":
        numel = math.prod(shape)
        flat = fill((numel + 5,))
        return flat[5:].view(shape)
    raise ValueError(layout)


def make_operands(op: str, shape, dim: int, dtype: torch.dtype, device, gen, layout="contiguous"):
    """dict(x=..., mask=..., a=...) for op, with random values of the right role."""
    shape = tuple(shape)
    n_scan = shape[dim % len(shape)] if len(shape) else 1
    if op == "cumprod":
        role = "prod"
        if layout == "expanded_scan":  # one factor repeated n times: keep c^n in range
            n_scan = n_scan * n_scan
    else:
        role = "sum"
    out = {"x": make_layout(shape, dim, layout,
                            lambda s: rand_data(role, s, dtype, device, gen, n_scan))}
    if op == "masked_cumsum":
        out["mask"] = make_layout(shape, dim, layout,
                                  lambda s: rand_data("mask", s, torch.bool, device, gen))
    if op == "linear_recurrence":
        out["a"] = make_layout(shape, dim, layout,
                               lambda s: rand_data("coef", s, dtype, device, gen, n_scan))
    return out


def extremum_ref(op, x, dim, excl, rev):
    """torch.cummax / torch.cummin (op names the torch function) with scanops' flags:
    exclusive writes the identity (-inf / +inf, index -1) first; reverse scans from the end
    with positions in the original order."""
    n = x.shape[dim]
    v, i = getattr(torch, op)(x.flip(dim) if rev else x, dim)
    if excl:
        ident = -float("inf") if op == "cummax" else float("inf")
        v = torch.cat([torch.full_like(v.narrow(dim, 0, 1), ident), v.narrow(dim, 0, n - 1)], dim)
        i = torch.cat([torch.full_like(i.narrow(dim, 0, 1), -1), i.narrow(dim, 0, n - 1)], dim)
    if rev:
        v, i = v.flip(dim), i.flip(dim)
        i = torch.where(i >= 0, n - 1 - i, i)
    return v, i
