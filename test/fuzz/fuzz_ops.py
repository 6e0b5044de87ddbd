#!/usr/bin/env python3
"""Seeded fuzz of the scanops ops against float64 / complex128 / int64 references.

Every case is drawn from (seed, case number) alone: a random op (cumsum, masked_cumsum,
cumprod, linear_recurrence, logcumsumexp, cummax, cummin), input dtype, `dtype=` conversion,
flags (exclusive, reverse), shape (0-d to 5-d, empty dims, length 1, sizes around the CPU back
end's 128 KiB blocks and around the CUDA tiles' powers of two, long lines up to 2^20 elements),
dim (negative too), memory layout of each operand (contiguous, transposed, permuted, step-2/3
slices from an offset along one or two dims, expanded along the scan dim or another, an offset
flat slice, a slice of a wider last dim, flipped copies, lazily conjugated complex views;
torch has no negative strides, so a flip is a copy), broadcast masks and
coefficients, special values (NaN, +-inf, -0.0) where the ops define them, the CPU thread
count (1-4), and about 1 case in 10 a bad input, which must raise a RuntimeError whose message
names the op (`scanops.<op>: `) and the argument. A valid case checks, against its own
references (this file; the tolerances follow test/python/reference.py's analysis):
  * the result's dtype, shape, device, contiguity, and that it does not alias an input;
  * values: floating within a rounding-error bound of the float64 (complex128) reference,
    exact non-finite values where the reference has them; integers exactly (wrapping as
    torch); cummax / cummin values bit for bit as torch.cummax / torch.cummin (NaN as any
    NaN) and their indices exactly;
  * that no input, nor any byte of the storage under it, was modified;
  * sometimes: the same bits at another CPU thread count (run to run on CUDA), the reverse
    flag against a flipped input, the Meta kernel's shape, dtype and strides, an inclusive
    scan continued from an initial state, a segmented scan (`reset=`) cut at a random
    position against the references of its two segments, and the offsets form
    (`segment_<op>`, the scan dim moved first) cut into random segments against theirs.

Usage (the library: $SCANOPS_LIBRARY, else `import scanops` from python/, which finds
build/libscanops.so):
  python test/fuzz/fuzz_ops.py                      # a fresh seed (printed), 30 s
  python test/fuzz/fuzz_ops.py --seed 7 --seconds 120
  python test/fuzz/fuzz_ops.py --seed 7 --cases 500 # cases 0-499 of seed 7, no time limit
  python test/fuzz/fuzz_ops.py --seed 7 --case 123 -v   # replay one case
  python test/fuzz/fuzz_ops.py --device cuda        # on the GPU (same cases, same data)
A failure prints the case, the error and the command that replays it, and the exit status
is 1. A crash (a sanitizer report, a signal) ends the process at once: the traceback that
faulthandler prints names the case (a frame `seed_<S>_case_<N>`), and -v prints every case
before it runs.
"""
from __future__ import annotations

import argparse
import faulthandler
import math
import os
import random
import shlex
import sys
import time
import traceback
import types
import warnings
from collections import Counter
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
c64, c128 = torch.complex64, torch.complex128
i8, i16, i32, i64, u8, b = torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool
FLOATS = (f32, f64, f16, bf16)
COMPLEX = (c64, c128)
INTS = (i8, i16, i32, i64, u8)
SUM_OPS = ("cumsum", "masked_cumsum", "cumprod")  # the ops with dtype=
OPS = SUM_OPS + ("linear_recurrence", "logcumsumexp", "cummax", "cummin")
IN_DTYPES = {
    "cumsum": FLOATS + COMPLEX + INTS + (b,),
    "masked_cumsum": FLOATS + COMPLEX + INTS + (b,),
    "cumprod": FLOATS + COMPLEX + INTS + (b,),
    "linear_recurrence": FLOATS + COMPLEX,
    "logcumsumexp": FLOATS + COMPLEX,
    "cummax": FLOATS + INTS + (b,),
    "cummin": FLOATS + INTS + (b,),
}
# Elements per block of the CPU back end (128 KiB of input) by element size; the CUDA tiles are
# 256 threads x a few items (powers of two), which the generic boundary sizes cover.
CPU_BLOCK_ELEMS = {1: 131072, 2: 65536, 4: 32768, 8: 16384, 16: 8192}
MAX_NUMEL = 1 << 19   # most cases
BIG_NUMEL = 1 << 20   # 1 case in 25: long lines over many blocks
LAYOUTS = ("contiguous", "transposed", "permuted", "strided", "expanded_scan", "expanded_other",
           "offset", "sliced", "flipped", "conj")
INF, NAN = float("inf"), float("nan")


def dname(d) -> str:
    return str(d).replace("torch.", "") if d is not None else "None"


# ------------------------------------------------------------------------------------------
# The library
# ------------------------------------------------------------------------------------------

def _registered() -> bool:
    try:
        torch.ops.scanops.cumsum.default  # noqa: B018
        return True
    except (AttributeError, RuntimeError):
        return False


def load_library() -> str:
    """Loads libscanops.so unless the ops are registered already; returns where from."""
    if _registered():
        return "already loaded"
    path = os.environ.get("SCANOPS_LIBRARY")
    if path:
        torch.ops.load_library(path)
        return path
    sys.path.insert(0, str(REPO / "python"))
    import scanops  # noqa: F401,E402

    return str(scanops.library_path()) if hasattr(scanops, "library_path") else "import scanops"


# ------------------------------------------------------------------------------------------
# Cases: a dict of plain values drawn from (seed, number) alone
# ------------------------------------------------------------------------------------------

def _boundary(rng: random.Random, esize: int) -> int:
    """A length at a power-of-two boundary (CUDA tiles, warps, vector widths) or at a multiple
    of the CPU block for this element size, give or take a few."""
    if rng.random() < 0.4:
        base = CPU_BLOCK_ELEMS[esize] * rng.choice([1, 1, 2, 3])
    else:
        base = rng.choice([1, 1, 2, 3]) * (1 << rng.randint(3, 17))
    return max(1, base + rng.randint(-3, 3))


def _other_size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.04:
        return 0
    if r < 0.2:
        return 1
    if r < 0.6:
        return rng.randint(2, 9)
    if r < 0.85:
        return rng.randint(10, 70)
    return max(1, (1 << rng.randint(3, 11)) + rng.randint(-2, 2))


def _scan_len(rng: random.Random, esize: int) -> int:
    r = rng.random()
    if r < 0.05:
        return 0
    if r < 0.15:
        return 1
    if r < 0.35:
        return rng.randint(2, 9)
    if r < 0.6:
        return rng.randint(10, 400)
    return _boundary(rng, esize)


def _esize(d) -> int:
    return torch.empty((), dtype=d).element_size()


def make_case(seed: int, i: int, device: str = "cpu") -> dict:
    """Case i of a seed. The draws do not depend on the device (a case replays on both)."""
    rng = random.Random(f"scanops-fuzz-{seed}-{i}")
    op = rng.choice(OPS)
    dtype = rng.choice(IN_DTYPES[op])
    dtype_arg = None
    if op in SUM_OPS and rng.random() < 0.25:
        choices = [d for d in FLOATS + COMPLEX + INTS
                   if not (dtype.is_complex and not (d.is_complex or d.is_floating_point))]
        dtype_arg = rng.choice(choices)
    nd = rng.choices([0, 1, 2, 3, 4, 5], weights=[6, 20, 30, 22, 12, 10])[0]
    acc_dtype = dtype_arg or dtype
    esize = _esize(dtype if dtype != b else u8)
    shape, dim = [], 0
    if nd:
        dim = rng.randrange(nd)
        shape = [_other_size(rng) for _ in range(nd)]
        shape[dim] = _scan_len(rng, esize)
        cap = BIG_NUMEL if rng.random() < 0.04 else MAX_NUMEL
        # (sizes counted as at least 1: a strided layout of an empty tensor allocates a buffer
        # of the other dims' size)
        while math.prod(max(s, 1) for s in shape) > cap:  # shrink the other dims first, then the line
            others = [k for k in range(nd) if k != dim and shape[k] > 1]
            k = max(others, key=lambda j: shape[j]) if others else dim
            shape[k] = max(1, shape[k] // 2) if k != dim else max(1, cap // max(1, math.prod(
                max(s, 1) for j, s in enumerate(shape) if j != dim)))
        if rng.random() < 0.5:
            dim -= nd  # a negative dim
    else:
        dim = rng.choice([0, -1])
    layout = rng.choice(LAYOUTS) if rng.random() < 0.6 else "contiguous"
    companion = None
    if op in ("masked_cumsum", "linear_recurrence"):
        if nd and rng.random() < 0.35:  # broadcast: size-1 dims, maybe fewer leading dims
            cs = [1 if rng.random() < 0.5 else s for s in shape]
            companion = tuple(cs[rng.randint(0, nd):])
        c_layout = layout if rng.random() < 0.4 else rng.choice(LAYOUTS)
    else:
        c_layout = None
    floating = (acc_dtype.is_floating_point or acc_dtype.is_complex)
    special = False
    if op in ("cumsum", "masked_cumsum", "cumprod") and acc_dtype.is_floating_point and dtype_arg is None:
        special = rng.random() < 0.15
    elif op == "logcumsumexp":
        special = not dtype.is_complex and rng.random() < 0.3
    elif op in ("cummax", "cummin"):
        special = rng.random() < 0.4
    bad = None
    if rng.random() < 0.1:
        kinds = ["dim_high", "dim_low"]
        if op == "masked_cumsum":
            kinds += ["mask_dtype", "mask_shape", "mask_device"]
        if op == "linear_recurrence":
            kinds += ["a_dtype", "a_shape", "x_integral", "a_device"]
        if op == "logcumsumexp":
            kinds += ["integral"]
        if op in ("cummax", "cummin"):
            kinds += ["complex", "dtype_kwarg"]
        if op in SUM_OPS:
            kinds += ["dtype_bool", "dtype_unsupported", "input_unsupported"]
        bad = rng.choice(kinds)
    return dict(
        seed=seed, case=i, op=op, dtype=dtype, dtype_arg=dtype_arg, shape=tuple(shape), dim=dim,
        exclusive=rng.random() < 0.5, reverse=rng.random() < 0.5, layout=layout,
        companion=companion, c_layout=c_layout, special=special, floating=floating,
        minmax_kind=rng.choice(["ties", "random"]), lcse_scale=rng.choice([1.0, 3.0, 30.0]),
        threads=rng.choice([1, 2, 3, 4]), other_threads=rng.choice([1, 2, 3, 4]),
        recheck=rng.random() < 0.25, flip_check=rng.random() < 0.2, meta_check=rng.random() < 0.2,
        bad=bad, data_seed=rng.randrange(2**62), layout_seed=rng.randrange(2**62))


def describe(c: dict) -> str:
    fl = "+".join(f for f, on in (("exclusive", c["exclusive"]), ("reverse", c["reverse"])) if on) or "inclusive"
    s = (f"{c['op']}(shape={list(c['shape'])}, dim={c['dim']}, {dname(c['dtype'])}"
         f"{', dtype=' + dname(c['dtype_arg']) if c['dtype_arg'] is not None else ''}, {fl}, "
         f"layout={c['layout']}")
    if c["c_layout"] is not None:
        s += f", companion={'same shape' if c['companion'] is None else list(c['companion'])}/{c['c_layout']}"
    if c["special"]:
        s += ", special values"
    s += f", threads={c['threads']})"
    if c["bad"]:
        s += f" [bad input: {c['bad']}]"
    return s


# ------------------------------------------------------------------------------------------
# Data and layouts (drawn on the CPU from the case's seeds, then moved to the device)
# ------------------------------------------------------------------------------------------

def rand_values(role: str, shape, dtype, g: torch.Generator, n_scan: int, c: dict) -> torch.Tensor:
    """Contiguous CPU values of a role: 'sum', 'prod', 'coef', 'mask', 'lcse', 'minmax'."""
    shape = tuple(shape)
    n = max(1, n_scan)
    if role == "mask":
        return torch.rand(shape, generator=g) < 0.6
    if dtype == b:
        return torch.rand(shape, generator=g) < (0.97 if role == "prod" else 0.5)
    if dtype.is_complex:
        real = torch.float64 if dtype == c128 else torch.float32
        if role in ("prod", "coef"):
            if role == "prod":
                mag = torch.exp(min(0.5, 2.5 / math.sqrt(n)) * torch.randn(shape, generator=g, dtype=real))
            else:
                mag = torch.exp(-min(1.0, 4.0 / n) * torch.rand(shape, generator=g, dtype=real))
            ph = torch.rand(shape, generator=g, dtype=real) * (2 * math.pi)
            return torch.polar(mag, ph).to(dtype)
        scale = c["lcse_scale"] if role == "lcse" else 1.0
        return torch.complex(torch.randn(shape, generator=g, dtype=real) * scale,
                             torch.randn(shape, generator=g, dtype=real) * scale).to(dtype)
    if dtype.is_floating_point:
        base = f64 if dtype == f64 else f32
        if role == "lcse":
            x = torch.randn(shape, generator=g, dtype=base) * c["lcse_scale"]
            if c["special"]:  # -inf runs and scattered, +inf, NaN (docs/ops.md's rules)
                r = torch.rand(shape, generator=g)
                x = torch.where(r < 0.25, -INF, x)
                x = torch.where((r >= 0.25) & (r < 0.253), INF, x)
                x = torch.where((r >= 0.253) & (r < 0.256), NAN, x)
            return x.to(dtype)
        if role == "minmax":
            if c["minmax_kind"] == "ties":
                x = torch.randint(-3, 4, shape, generator=g).to(base)
            else:
                x = torch.randn(shape, generator=g, dtype=base)
            if c["special"]:
                r = torch.rand(shape, generator=g)
                x = torch.where(x == 0, torch.where(r < 0.5, -0.0, 0.0), x)
                x = torch.where(r < 0.03, NAN, x)
                x = torch.where((r >= 0.03) & (r < 0.06), INF, x)
                x = torch.where((r >= 0.06) & (r < 0.09), -INF, x)
            return x.to(dtype)
        if role == "sum":
            x = torch.randn(shape, generator=g, dtype=base)
        else:
            sign = torch.where(torch.rand(shape, generator=g) < (0.25 if role == "coef" else 0.3), -1.0, 1.0)
            if role == "prod":
                mag = torch.exp(min(0.5, 2.5 / math.sqrt(n)) * torch.randn(shape, generator=g, dtype=base))
            else:
                mag = torch.exp(-min(1.0, 4.0 / n) * torch.rand(shape, generator=g, dtype=base))
            x = sign.to(base) * mag
        if c["special"] and role in ("sum", "prod"):
            r = torch.rand(shape, generator=g)
            x = torch.where(r < 0.003, NAN, x)
            x = torch.where((r >= 0.003) & (r < 0.006), INF, x)
            x = torch.where((r >= 0.006) & (r < 0.009), -INF, x)
            x = torch.where((r >= 0.009) & (r < 0.015), -0.0, x)
        return x.to(dtype)
    # integers
    if role == "minmax" and c["minmax_kind"] == "ties":
        lo, hi = (0, 7) if dtype == u8 else (-3, 4)
        return torch.randint(lo, hi, shape, generator=g).to(dtype)
    if role == "prod":
        table = torch.tensor([1, 2, 3, 5, 7] if dtype == u8 else [-3, -2, -1, 1, 2, 3])
        v = table[torch.randint(0, len(table), shape, generator=g)]
        v = torch.where(torch.rand(shape, generator=g) < 0.01, torch.zeros_like(v), v)
        return v.to(dtype)
    if dtype == i64:
        return torch.randint(-(2**62), 2**62, shape, generator=g, dtype=i64)
    ii = torch.iinfo(dtype)
    return torch.randint(ii.min, ii.max + 1, shape, generator=g, dtype=i64).to(dtype)


def shape_for_dtype_arg(x: torch.Tensor, c: dict, role: str) -> torch.Tensor:
    """Keeps a conversion by dtype= defined and the results finite (as test_random.py)."""
    src, dst = c["dtype"], c["dtype_arg"]
    if dst is None:
        return x
    if (src.is_floating_point or src.is_complex) and not (dst.is_floating_point or dst.is_complex):
        x = x.real if x.is_complex() else x
        if role == "sum":
            x = x.float() * 20  # fractional values: truncated by the conversion, before the scan
        lim = 200.0 if dst == u8 else 100.0
        x = x.float().clamp(-lim, lim)
        if dst == u8:
            x = x.abs()  # a negative float to uint8 is undefined behaviour
        return x.to(src)
    if not (src.is_floating_point or src.is_complex) and src != b and (dst.is_floating_point or dst.is_complex):
        xl = x.long()
        if role == "prod":
            xl = xl.remainder(2) if src == u8 else xl.remainder(3) - 1
        elif dst in (f16, bf16) or role == "sum":
            xl = xl.remainder(9)
        return xl.to(src)
    return x


def build(shape, dim: int, layout: str, fill, rng: random.Random, dtype) -> torch.Tensor:
    """A tensor of logical shape `shape` in `layout`; fill(shape) gives contiguous values."""
    shape = tuple(shape)
    nd = len(shape)
    d = dim % nd if nd else 0
    if layout == "conj" and not dtype.is_complex:
        layout = "contiguous"
    if layout in ("transposed", "permuted", "expanded_other") and nd < 2:
        layout = "contiguous"
    if layout in ("expanded_scan", "sliced") and nd < 1:
        layout = "contiguous"
    if layout == "contiguous":
        return fill(shape)
    if layout == "transposed":
        i, j = rng.sample(range(nd), 2)
        s = list(shape)
        s[i], s[j] = s[j], s[i]
        return fill(tuple(s)).transpose(i, j)
    if layout == "permuted":
        perm = list(range(nd))
        rng.shuffle(perm)
        inv = [0] * nd
        for k, p in enumerate(perm):
            inv[p] = k
        return fill(tuple(shape[p] for p in perm)).permute(inv)
    if layout == "strided":  # steps of 2 or 3 from an offset along at most two dims
        steps = [1] * nd
        for k in rng.sample(range(nd), min(nd, 2)):
            steps[k] = rng.choice([2, 3])
        big = fill(tuple(st * s + (st > 1) for s, st in zip(shape, steps)))
        return big[tuple(slice(st > 1, (st > 1) + st * s, st) for s, st in zip(shape, steps))]
    if layout == "expanded_scan":
        small = list(shape)
        small[d] = 1
        return fill(tuple(small)).expand(shape)
    if layout == "expanded_other":
        o = rng.choice([k for k in range(nd) if k != d])
        small = list(shape)
        small[o] = 1
        return fill(tuple(small)).expand(shape)
    if layout == "offset":
        off = rng.randint(1, 7)
        return fill((math.prod(shape) + off,))[off:].view(shape)
    if layout == "sliced":
        extra, start = rng.randint(1, 9), rng.randint(0, 1)
        big = fill(shape[:-1] + (shape[-1] + extra,))
        return big[..., start:start + shape[-1]]
    if layout == "flipped":  # torch has no negative strides: flip copies
        dims = [k for k in range(nd) if rng.random() < 0.5] or list(range(nd))
        return fill(shape).flip(dims) if nd else fill(shape)
    if layout == "conj":
        return fill(shape).conj()  # a lazily conjugated view (the conj bit)
    raise ValueError(layout)


def operands(c: dict, device: str):
    """dict(x=..., mask=..., a=...) on the device."""
    g = torch.Generator().manual_seed(c["data_seed"])
    rng = random.Random(c["layout_seed"])
    shape, dim, op, dtype = c["shape"], c["dim"], c["op"], c["dtype"]
    nd = len(shape)
    n_scan = shape[dim % nd] if nd else 1
    role = {"cumprod": "prod", "logcumsumexp": "lcse", "cummax": "minmax", "cummin": "minmax"}.get(op, "sum")
    n_x = n_scan * n_scan if c["layout"] == "expanded_scan" else n_scan  # one repeated factor

    def fill_x(s):
        return shape_for_dtype_arg(rand_values(role, s, dtype, g, n_x, c), c, role).to(device)

    out = {"x": build(shape, dim, c["layout"], fill_x, rng, dtype)}
    if op in ("masked_cumsum", "linear_recurrence"):
        cshape = shape if c["companion"] is None else c["companion"]
        cdim = (dim % nd) - (nd - len(cshape)) if nd else 0
        cdim = cdim if 0 <= cdim < len(cshape) else 0
        crole = "mask" if op == "masked_cumsum" else "coef"
        cdt = b if op == "masked_cumsum" else dtype

        def fill_c(s):
            return rand_values(crole, s, cdt, g, n_scan, c).to(device)

        key = "mask" if op == "masked_cumsum" else "a"
        out[key] = build(cshape, cdim, c["c_layout"], fill_c, rng, cdt)
    return out


# ------------------------------------------------------------------------------------------
# References (CPU, float64 / complex128 / int64) and tolerances
# ------------------------------------------------------------------------------------------

def _shift(y: torch.Tensor, d: int, identity) -> torch.Tensor:
    n = y.shape[d]
    if n == 0:
        return y
    return torch.cat([torch.full_like(y.narrow(d, 0, 1), identity), y.narrow(d, 0, n - 1)], d)


def _lines(fn, v: torch.Tensor, dim: int, excl: bool, rev: bool, identity):
    """fn (an inclusive scan along d) composed with flip (reverse) and shift (exclusive)."""
    zero_d = v.dim() == 0
    if zero_d:
        v = v.reshape(1)
    d = dim % v.dim()
    if rev:
        v = v.flip(d)
    y = fn(v, d)
    if excl:
        y = _shift(y, d, identity)
    if rev:
        y = y.flip(d)
    return y.reshape(()) if zero_d else y


def _linrec_incl(a: torch.Tensor, x: torch.Tensor, d: int) -> torch.Tensor:
    """h[t] = a[t] h[t-1] + x[t] along d: a log-depth scan over affine maps (A, B)."""
    A, B = a.movedim(d, -1), x.movedim(d, -1)
    n, s = B.shape[-1], 1
    while s < n:
        B = torch.cat([B[..., :s], A[..., s:] * B[..., :n - s] + B[..., s:]], -1)
        A = torch.cat([A[..., :s], A[..., s:] * A[..., :n - s]], -1)
        s *= 2
    return B.movedim(-1, d)


def _count(shape, dim, excl, rev):
    """Terms / factors of each element (float64, broadcastable along dim)."""
    nd = len(shape)
    if nd == 0:
        return torch.tensor(0.0 if excl else 1.0, dtype=f64)
    d = dim % nd
    k = torch.arange(shape[d], dtype=f64)
    if rev:
        k = k.flip(0)
    if not excl:
        k = k + 1
    view = [1] * nd
    view[d] = shape[d]
    return k.reshape(view)


def _constant_along(dim: int, *ts) -> bool:
    """An operand repeats one value along the scan (stride 0, or a size-1 broadcast): its
    rounding errors do not cancel, so the worst-case bound (linear in the position) applies."""
    for t, full in ts:
        if t is None or len(full) == 0:
            continue
        d = dim % len(full)
        k = d - (len(full) - t.dim())
        if full[d] <= 1:
            continue
        if k < 0 or t.shape[k] == 1 or t.stride(k) == 0:
            return True
    return False


def _eps(dtype):
    real = {c64: f32, c128: f64}.get(dtype, dtype)
    e_out = torch.finfo(real).eps
    e_acc = torch.finfo(f64).eps if real == f64 else torch.finfo(f32).eps
    return real, e_out, e_acc


def reference(c: dict, x: torch.Tensor, mask, a):
    """(expected values, tolerance or None (exact), result dtype[, expected indices])."""
    op, dim, excl, rev = c["op"], c["dim"], c["exclusive"], c["reverse"]
    shape = tuple(x.shape)
    if op in ("cummax", "cummin"):
        xc = x.cpu()
        n = shape[dim % len(shape)] if shape else 1
        dt = xc.dtype
        if dt == b:
            ident = op == "cummin"
        elif dt.is_floating_point:
            ident = -INF if op == "cummax" else INF
        else:
            ii = torch.iinfo(dt)
            ident = ii.min if op == "cummax" else ii.max
        v = xc.reshape(1) if xc.dim() == 0 else xc
        d = dim % v.dim()
        vs = v.flip(d) if rev else v
        rv, ri = getattr(torch, op)(vs, d)
        if excl:
            rv, ri = _shift(rv, d, ident), _shift(ri, d, -1)
        if rev:
            rv, ri = rv.flip(d), ri.flip(d)
            ri = torch.where(ri >= 0, n - 1 - ri, ri)
        if xc.dim() == 0:
            rv, ri = rv.reshape(()), ri.reshape(())
        return rv, None, dt, ri
    if op == "logcumsumexp":
        xr = x.cpu().to(c128 if x.is_complex() else f64)
        ident = complex(-INF, 0.0) if x.is_complex() else -INF
        ref = _lines(torch.logcumsumexp, xr, dim, excl, rev, ident)
        real, e_out, e_acc = _eps(x.dtype)
        k = _count(shape, dim, excl, rev)
        mag = xr.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
        bound = _lines(lambda v, d: torch.cummax(v, d)[0], mag, dim, excl, rev, 0.0) + torch.log(k + 1)
        cc = 16 + k if real == f64 else 16 + 4 * k.sqrt()
        if x.is_complex():
            cc = 2 * cc
            re = _lines(torch.logcumsumexp, xr.real, dim, excl, rev, -INF)
            cond = torch.exp((re - ref.real).nan_to_num(0.0, posinf=0.0, neginf=0.0).clamp(max=600))
            bound = bound + cond + math.pi
        tol = cc * e_acc * bound + e_out * ref.abs().nan_to_num(0.0, posinf=0.0) + 2 * torch.finfo(real).tiny * e_out
        return ref, tol, x.dtype
    # sums, products, recurrences
    if op == "linear_recurrence":
        out_dtype = x.dtype
    elif c["dtype_arg"] is not None:
        out_dtype = c["dtype_arg"]
    elif x.dtype.is_floating_point or x.dtype.is_complex:
        out_dtype = x.dtype
    else:
        out_dtype = i64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xc = (x.to(c["dtype_arg"]) if c["dtype_arg"] is not None else x).cpu()
    floating = out_dtype.is_floating_point or out_dtype.is_complex
    wide = c128 if out_dtype.is_complex else f64
    if not floating:
        v = xc.long()
        if op == "masked_cumsum":
            v = torch.where(mask.cpu(), v, 0)
        fn = torch.cumprod if op == "cumprod" else torch.cumsum
        ref = _lines(fn, v, dim, excl, rev, 1 if op == "cumprod" else 0)
        return ref, None, out_dtype
    real, e_out, e_acc = _eps(out_dtype)
    k = _count(shape, dim, excl, rev)
    worst = real == f64 or _constant_along(dim, (x, shape), (a, shape))
    floor = 2 * torch.finfo(real).tiny * e_out
    # Products that underflow: a multiplication whose result is subnormal rounds with an
    # absolute error of up to half the smallest subnormal of the accumulation type, in any
    # association order (float64 on the CPU, and for cumprod everywhere; else float32), so
    # the k-th partial product may be off by about k of them: relative bounds say nothing
    # there. The output's own rounding stays bounded by floor.
    acc_real = f64 if (real == f64 or op == "cumprod" or x.device.type == "cpu") else f32
    under = (k + 1) * torch.finfo(acc_real).tiny * torch.finfo(acc_real).eps
    cplx = 2.0 if out_dtype.is_complex else 1.0
    if op == "linear_recurrence":
        ac = a.cpu().to(wide).expand(shape)
        xw = xc.to(wide)
        ref = _linrec_ref(ac, xw, dim, excl, rev)
        bound = _linrec_ref(ac.abs(), xw.abs(), dim, excl, rev)
        cc = 16.0 + (k if worst else 0.0)
        return ref, cplx * cc * e_acc * bound + e_out * ref.abs() + floor + under, out_dtype
    v = xc.to(wide)
    if op == "masked_cumsum":  # a masked-off element counts 0, even a NaN or inf
        v = torch.where(mask.cpu(), v, torch.zeros((), dtype=wide))
    if op == "cumprod":
        ref = _lines(torch.cumprod, v, dim, excl, rev, 1.0)
        cc = 16.0 + k if worst else 16 + 4 * k.sqrt()
        return ref, ref.abs() * (2 * e_out + cplx * e_acc * cc) + floor + under, out_dtype
    ref = _lines(torch.cumsum, v, dim, excl, rev, 0.0)
    bound = _lines(torch.cumsum, v.abs(), dim, excl, rev, 0.0)
    cc = 16.0 + (k if worst else 0.0)
    return ref, cplx * cc * e_acc * bound + e_out * ref.abs() + floor, out_dtype


def _linrec_ref(a: torch.Tensor, x: torch.Tensor, dim: int, excl: bool, rev: bool) -> torch.Tensor:
    zero_d = x.dim() == 0
    if zero_d:
        a, x = a.reshape(1), x.reshape(1)
    d = dim % x.dim()
    if rev:
        a, x = a.flip(d), x.flip(d)
    y = _linrec_incl(a, x, d)
    if excl:
        y = _shift(y, d, 0.0)
    if rev:
        y = y.flip(d)
    return y.reshape(()) if zero_d else y


# ------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------

class CaseFailure(AssertionError):
    pass


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu().resolve_conj()
    t = torch.empty(t.shape, dtype=t.dtype).copy_(t)  # standard strides, size-1 dims included
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == b or t.numel() == 0:
        return t
    return t.view(-1).view(torch.uint8)


def same_bits(u: torch.Tensor, v: torch.Tensor) -> bool:
    return u.shape == v.shape and u.dtype == v.dtype and torch.equal(_bits(u), _bits(v))


def storage_snapshot(t: torch.Tensor) -> torch.Tensor:
    """Every byte of the storage under t (not only the view's elements)."""
    s = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(s).clone()


def _first(bad: torch.Tensor, got, want, n=4) -> str:
    idx = bad.nonzero()[:n].tolist()
    return ", ".join(f"{tuple(i)}: got {got[tuple(i)].item()!r} want {want[tuple(i)].item()!r}" for i in idx)


def compare(c: dict, got: torch.Tensor, ref, tol, out_dtype, what="result"):
    if got.dtype != out_dtype:
        raise CaseFailure(f"{what}: dtype {got.dtype}, expected {out_dtype}")
    if tuple(got.shape) != tuple(ref.shape):
        raise CaseFailure(f"{what}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    if got.numel() == 0:
        return
    g = got.detach().cpu()
    if tol is None:
        if g.dtype.is_floating_point:  # cummax / cummin values: bit for bit, NaN as any NaN
            view = {2: i16, 4: i32, 8: i64}[g.element_size()]
            bad = (g.view(view) != ref.view(view)) & ~(torch.isnan(g) & torch.isnan(ref))
        else:
            want = ref.to(out_dtype)
            bad = g != want
            ref = want
        if bool(bad.any()):
            raise CaseFailure(f"{what}: {int(bad.sum())}/{g.numel()} elements differ; {_first(bad, g, ref)}")
        return
    tol = tol.expand(ref.shape)
    if g.is_complex():
        g = g.resolve_conj().to(c128)
        if c["op"] == "logcumsumexp":
            finite = torch.isfinite(ref.real)
            d_re = (g.real - ref.real).abs()
            d_im = torch.remainder(g.imag - ref.imag + math.pi, 2 * math.pi) - math.pi  # modulo 2 pi
            ok = torch.where(finite, torch.hypot(d_re, d_im.abs()) <= tol, torch.zeros_like(finite))
            ok |= (ref.real == -INF) & (g.real == -INF) & ~torch.isnan(g.imag)
            ok |= ((ref.real == INF) | torch.isnan(ref.real)) & ~torch.isfinite(g.real)
        else:
            ok = (g - ref).abs() <= tol
            ok |= ~torch.isfinite(ref) & ~torch.isfinite(g)
    else:
        g = g.double()
        finite = torch.isfinite(ref)
        ok = (g - ref).abs() <= tol
        # beyond the output dtype's range: an infinity of the reference's sign
        over = (ref.abs() + tol) >= torch.finfo(out_dtype).max
        ok |= over & torch.isinf(g) & (torch.sign(g) == torch.sign(ref))
        ok = torch.where(finite, ok, (g == ref) | (torch.isnan(g) & torch.isnan(ref)))
    if not bool(ok.all()):
        bad = ~ok
        first = tuple(bad.nonzero()[0].tolist())
        raise CaseFailure(f"{what}: {int(bad.sum())}/{g.numel()} elements off; {_first(bad, g, ref)}; "
                          f"tol at the first {tol[first].item():.3g}")


def call(c: dict, x, mask, a, exclusive=None, reverse=None, dim=None, **extra):
    op = c["op"]
    kw = dict(exclusive=c["exclusive"] if exclusive is None else exclusive,
              reverse=c["reverse"] if reverse is None else reverse)
    if c["dtype_arg"] is not None:
        kw["dtype"] = c["dtype_arg"]
    kw.update(extra)
    dim = c["dim"] if dim is None else dim
    f = getattr(torch.ops.scanops, op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex -> real dtype= warns, as torch.cumsum does
        if op == "masked_cumsum":
            return f(x, mask, dim, **kw)
        if op == "linear_recurrence":
            return f(a, x, dim, **kw)
        return f(x, dim, **kw)


def _poison(device: str, nbytes: int):
    """Hands back a freed block full of NaN, so an output element never written shows."""
    t = torch.full((max(nbytes // 4, 1),), NAN, dtype=f32, device=device)
    del t


def check_valid(c: dict, device: str):
    ins = operands(c, device)
    x, mask, a = ins["x"], ins.get("mask"), ins.get("a")
    snaps = {k: (storage_snapshot(t), t.clone()) for k, t in ins.items()}
    if device == "cpu":
        torch.set_num_threads(c["threads"])
    _poison(device, max(x.numel(), 1) * 16)
    res = call(c, x, mask, a)
    indexed = c["op"] in ("cummax", "cummin")
    outs = list(res) if indexed else [res]
    for o in outs:
        if o.device != x.device:
            raise CaseFailure(f"result on {o.device}, input on {x.device}")
        if not o.is_contiguous():
            raise CaseFailure(f"result not contiguous: strides {o.stride()}")
        for k, t in ins.items():
            if o.numel() and t.numel() and o.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
                raise CaseFailure(f"the result shares storage with the input '{k}'")
    exp = reference(c, x, mask, a)
    compare(c, outs[0], exp[0], exp[1], exp[2], "values" if indexed else "result")
    if indexed:
        compare(c, outs[1], exp[3], None, i64, "indices")
    for k, t in ins.items():
        st, val = snaps[k]
        if not torch.equal(storage_snapshot(t), st) or not same_bits(t, val):
            raise CaseFailure(f"the input '{k}' (or the storage under it) was modified")
    if c["recheck"]:  # the same bits at another thread count (CPU) / run to run (CUDA)
        if device == "cpu":
            torch.set_num_threads(c["other_threads"])
        again = call(c, x, mask, a)
        again = list(again) if indexed else [again]
        for u, v in zip(outs, again):
            if not same_bits(u, v):
                where = (f"at {c['threads']} and {c['other_threads']} threads" if device == "cpu"
                         else "run to run")
                uc, vc = u.detach().cpu(), v.detach().cpu()
                detail = ""
                if uc.is_floating_point() or uc.is_complex():
                    differ = ~((uc == vc) | (torch.isnan(uc) & torch.isnan(vc)))
                    rel = ((uc - vc).abs() / uc.abs()).nan_to_num(0.0, posinf=0.0)
                    detail = (f": {int(differ.sum())}/{uc.numel()} elements, the largest relative "
                              f"difference {rel.max().item():.3g}")
                raise CaseFailure(f"different bits {where}{detail}")
        if device == "cpu":
            torch.set_num_threads(c["threads"])
    if c["flip_check"] and x.dim() > 0:  # reverse=r on x against reverse=!r on flip(x)
        d = c["dim"] % x.dim()
        xf = x.flip(d)
        mf = mask.expand(x.shape).flip(d) if mask is not None else None
        af = a.expand(x.shape).flip(d) if a is not None else None
        rf = call(c, xf, mf, af, reverse=not c["reverse"])
        if indexed:
            n = x.shape[d]
            vf, jf = rf[0].flip(d), rf[1].flip(d)
            jf = torch.where(jf >= 0, n - 1 - jf, jf)
            compare(c, vf, exp[0], None, exp[2], "values (flipped input, reverse toggled)")
            compare(c, jf, exp[3], None, i64, "indices (flipped input, reverse toggled)")
        else:
            compare(c, rf.flip(d), exp[0], exp[1], exp[2], "result (flipped input, reverse toggled)")
    check_continuation(c, x, mask, a, exp, outs)
    check_segments(c, x, mask, a)
    check_jagged(c, x, mask, a)
    if c["meta_check"]:
        def meta(t):
            return None if t is None else torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mres = call(c, meta(x), meta(mask), meta(a))
        mouts = list(mres) if indexed else [mres]
        for o, m in zip(outs, mouts):
            if o.shape != m.shape or o.dtype != m.dtype or (o.numel() > 1 and o.stride() != m.stride()):
                raise CaseFailure(f"Meta kernel: {tuple(m.shape)} {m.dtype} strides {m.stride()}; real: "
                                  f"{tuple(o.shape)} {o.dtype} strides {o.stride()}")


def check_continuation(c: dict, x, mask, a, exp, outs):
    """`initial`: an inclusive scan cut at a random position k of its line (about one valid case
    in three) and scanned in two calls, the second from the first's final state (its last value
    in scan order), must give the whole line's result (the reference's tolerance; exact where
    the whole scan is). cummax / cummin: the second call's -1 indices are the carried value's
    position."""
    rng = random.Random(c["layout_seed"] ^ 0xC0471)
    if c["exclusive"] or x.dim() == 0 or rng.random() > 0.35:
        return
    d = c["dim"] % x.dim()
    n = x.shape[d]
    if n < 2 or x.numel() == 0:
        return
    k = rng.randint(1, n - 1)
    rev = c["reverse"]
    full = lambda t: None if t is None else t.expand(x.shape)  # noqa: E731
    xs, ms, as_ = x, full(mask), full(a)
    # scan order: [0, k) then [k, n); reverse: [k, n) then [0, k)
    first, second = ((k, n - k), (0, k)) if rev else ((0, k), (k, n - k))
    part = lambda t, r: None if t is None else t.narrow(d, r[0], r[1])  # noqa: E731
    y1 = call(c, part(xs, first), part(ms, first), part(as_, first))
    indexed = c["op"] in ("cummax", "cummin")
    v1 = y1[0] if indexed else y1
    last = 0 if rev else first[1] - 1  # the first chunk's last position in scan order
    state = v1.select(d, last)
    y2 = call(c, part(xs, second), part(ms, second), part(as_, second), initial=state)
    v2 = y2[0] if indexed else y2
    pieces = (v2, v1) if rev else (v1, v2)
    got = torch.cat(pieces, d)
    tol = exp[1]
    if tol is not None and (state.is_floating_point() or state.is_complex()):
        # The carried state is rounded to the result dtype (eps_out |state|); that error reaches
        # the second chunk times the op's gain: 1 for sums and log-sum-exps, |y| / |state| for
        # products, prod |a| over the chunk so far for the recurrence.
        _, e_out, _ = _eps(state.dtype)
        ref = exp[0].to(torch.complex128 if exp[0].is_complex() else f64).abs()
        s_abs = state.detach().cpu().to(torch.complex128 if state.is_complex() else f64).abs().unsqueeze(d)
        ref2 = ref.narrow(d, second[0], second[1])
        if c["op"] == "cumprod":
            extra = e_out * ref2
        elif c["op"] == "linear_recurrence":
            a2 = part(as_, second).detach().cpu().to(torch.complex128 if as_.is_complex() else f64).abs()
            gain = a2.flip(d).cumprod(d).flip(d) if rev else a2.cumprod(d)
            extra = e_out * s_abs * gain
        else:
            extra = (e_out * s_abs).expand_as(ref2)
        zeros = torch.zeros_like(ref.narrow(d, first[0], first[1]))
        extra = torch.cat((extra, zeros) if rev else (zeros, extra), d)
        tol = tol.expand(ref.shape) + 2 * extra
    compare(c, got, exp[0], tol, exp[2], f"values continued from an initial state (cut at {k})")
    if indexed:
        i1 = y1[1] + first[0]
        carried = i1.select(d, last).unsqueeze(d)
        i2 = torch.where(y2[1] >= 0, y2[1] + second[0], carried.expand_as(y2[1]))
        gi = torch.cat((i2, i1) if rev else (i1, i2), d)
        compare(c, gi, exp[3], None, i64, f"indices continued from an initial state (cut at {k})")


def check_segments(c: dict, x, mask, a):
    """`reset`: a reset at a random position k of every line (about one valid case in three;
    sometimes with a reset at position 0 too, which changes nothing, and as a dense mask or one
    broadcast along the other dims) must give, on [0, k) and [k, n), what the references of
    the two pieces give (exclusive: each piece starts from the identity; reverse: each runs
    from its end); cummax / cummin indices stay positions along the whole line."""
    rng = random.Random(c["layout_seed"] ^ 0x5E6)
    if x.dim() == 0 or rng.random() > 0.35:
        return
    d = c["dim"] % x.dim()
    n = x.shape[d]
    if n < 2 or x.numel() == 0:
        return
    k = rng.randint(1, n - 1)
    pos = torch.arange(n, device=x.device)
    r = (pos == k) | ((pos == 0) & (rng.random() < 0.3))
    shape = [1] * x.dim()
    shape[d] = n
    reset = r.view(shape)
    if rng.random() < 0.3:
        reset = reset.expand(x.shape).contiguous()
    got = call(c, x, mask, a, reset=reset)
    full = lambda t: None if t is None else t.expand(x.shape)  # noqa: E731
    part = lambda t, s, m: None if t is None else t.narrow(d, s, m)  # noqa: E731
    pieces = [(0, k), (k, n - k)]
    refs = [reference(c, part(x, s, m), part(full(mask), s, m), part(full(a), s, m))
            for s, m in pieces]
    indexed = c["op"] in ("cummax", "cummin")
    v = got[0] if indexed else got
    want = torch.cat([e[0] for e in refs], d)
    tols = [e[1] for e in refs]
    tol = None if any(t is None for t in tols) else torch.cat(
        [t.expand(e[0].shape) for t, e in zip(tols, refs)], d)
    compare(c, v, want, tol, refs[0][2], f"values of a segmented scan (reset at {k})")
    if indexed:
        wi = torch.cat([torch.where(e[3] >= 0, e[3] + s, e[3]) for e, (s, _m) in zip(refs, pieces)], d)
        compare(c, got[1], wi, None, i64, f"indices of a segmented scan (reset at {k})")


def check_jagged(c: dict, x, mask, a):
    """The offsets form (`segment_<op>`, about one valid case in four): the scan dim moved to
    dim 0 and cut into 1-6 segments at random offsets (empty segments too; int64 or int32
    offsets) must give, on each segment, what the reference of that piece gives; cummax /
    cummin indices count from the segment's start."""
    rng = random.Random(c["layout_seed"] ^ 0x1A66)
    if x.dim() == 0 or rng.random() > 0.25:
        return
    d = c["dim"] % x.dim()
    n = x.shape[d]
    full = lambda t: None if t is None else t.expand(x.shape).movedim(d, 0)  # noqa: E731
    xv, mv, av = x.movedim(d, 0), full(mask), full(a)
    cuts = sorted(rng.randint(0, n) for _ in range(rng.randint(0, 5)))
    bounds = [0] + cuts + [n]
    offsets = torch.tensor(bounds, dtype=rng.choice((i64, torch.int32)), device=x.device)
    op = c["op"]
    kw = dict(exclusive=c["exclusive"], reverse=c["reverse"])
    if c["dtype_arg"] is not None:
        kw["dtype"] = c["dtype_arg"]
    f = getattr(torch.ops.scanops, "segment_" + op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if op == "masked_cumsum":
            got = f(xv, mv, offsets, **kw)
        elif op == "linear_recurrence":
            got = f(av, xv, offsets, **kw)
        else:
            got = f(xv, offsets, **kw)
    c0 = dict(c, dim=0)
    part = lambda t, s, m: None if t is None else t.narrow(0, s, m)  # noqa: E731
    pieces = [(s, e - s) for s, e in zip(bounds[:-1], bounds[1:]) if e > s]
    indexed = op in ("cummax", "cummin")
    v = got[0] if indexed else got
    if not pieces:
        if v.shape != xv.shape:
            raise CaseFailure(f"offsets form with no rows: shape {tuple(v.shape)}, expected {tuple(xv.shape)}")
        return
    refs = [reference(c0, part(xv, s, m), part(mv, s, m), part(av, s, m)) for s, m in pieces]
    want = torch.cat([e[0] for e in refs], 0)
    tols = [e[1] for e in refs]
    tol = None if any(t is None for t in tols) else torch.cat(
        [t.expand(e[0].shape) for t, e in zip(tols, refs)], 0)
    compare(c, v, want, tol, refs[0][2], f"values of the offsets form (offsets {bounds})")
    if indexed:
        compare(c, got[1], torch.cat([e[3] for e in refs], 0), None, i64,
                f"indices of the offsets form (offsets {bounds})")


UNSUPPORTED = [d for d in (getattr(torch, n, None) for n in ("uint16", "uint32", "uint64", "float8_e4m3fn",
                                                               "float8_e5m2")) if d is not None]


def not_broadcastable_to(shape) -> tuple:
    """A shape that does not broadcast to `shape`: each size grown by one, except that an empty
    dim becomes 2 (a size of 1 would broadcast to 0). A 0-d shape gets (2,)."""
    return tuple(2 if s == 0 else s + 1 for s in shape) or (2,)


def check_bad(c: dict, device: str):
    """A bad input: RuntimeError naming the op and the argument; the inputs untouched."""
    rng = random.Random(c["layout_seed"] ^ 0x5EED)
    op, kind = c["op"], c["bad"]
    ins = operands(dict(c, bad=None), device)
    x, mask, a = ins["x"], ins.get("mask"), ins.get("a")
    nd = x.dim()
    n = max(nd, 1)
    dim, extra = None, {}
    arg = None
    expect_op = f"scanops.{op}: "
    if kind == "dim_high":
        dim, arg = rng.choice([n, n + 1, 100]), "'dim'"
    elif kind == "dim_low":
        dim, arg = rng.choice([-n - 1, -n - 2, -100]), "'dim'"
    elif kind == "mask_dtype":
        mask, arg = mask.to(rng.choice([u8, i8, f32, i64, f16])), "'mask'"
    elif kind == "mask_shape":
        mask, arg = torch.ones(not_broadcastable_to(x.shape), dtype=b, device=device), "'mask'"
    elif kind == "a_dtype":
        other = [d for d in FLOATS + COMPLEX if d != x.dtype]
        a, arg = a.to(rng.choice(other)), "'a'"
    elif kind == "a_shape":
        a, arg = torch.ones(not_broadcastable_to(x.shape), dtype=x.dtype, device=device), "'a'"
    elif kind == "x_integral":
        x = torch.ones(x.shape, dtype=rng.choice(INTS + (b,)), device=device)
        a, arg = x, "'x'"
    elif kind in ("mask_device", "a_device"):
        if device == "cpu" or not torch.cuda.is_available():
            kind, dim, arg = "dim_high", n, "'dim'"
        else:
            other = "cpu"
            if kind == "mask_device":
                mask, arg = mask.to(other), "'mask'"
            else:
                a, arg = a.to(other), "'a'"
    elif kind == "integral":
        x, arg = torch.ones(x.shape, dtype=rng.choice(INTS + (b,)), device=device), "'self'"
    elif kind == "complex":
        x, arg = torch.ones(x.shape, dtype=rng.choice(COMPLEX), device=device), "'self'"
    elif kind == "dtype_kwarg":  # no dtype= in the schema: the dispatcher's error
        extra, arg, expect_op = {"dtype": f64}, f"scanops::{op}(", f"scanops::{op}"
    elif kind == "dtype_bool":
        extra, arg = {"dtype": b}, "'dtype'"
    elif kind == "dtype_unsupported":
        extra, arg = {"dtype": rng.choice(UNSUPPORTED)}, "'dtype'"
    elif kind == "input_unsupported":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ComplexHalf support is experimental
            x, arg = torch.zeros(x.shape, device=device).to(rng.choice(UNSUPPORTED + [torch.complex32])), "'self'"
        if op == "masked_cumsum" and mask is None:
            mask = torch.ones(x.shape, dtype=b, device=device)
    cc = dict(c, dtype_arg=None)
    targets = {"x": x, "mask": mask, "a": a}
    snaps = {k: storage_snapshot(t) for k, t in targets.items() if t is not None}
    devices = [device] + (["meta"] if rng.random() < 0.5 and "device" not in kind else [])
    for dev in devices:
        if dev == "meta":
            def meta(t):
                return None if t is None else torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
            args = (meta(x), meta(mask), meta(a))
        else:
            args = (x, mask, a)
        try:
            call(cc, *args, dim=dim, **extra)
        except RuntimeError as e:
            full = str(e)
            if expect_op not in full or arg not in full:
                raise CaseFailure(f"bad input ({kind}) on {dev}: the error does not name {expect_op!r} and "
                                  f"the argument {arg}: {full[:400]!r}") from None
        except Exception as e:  # noqa: BLE001
            raise CaseFailure(f"bad input ({kind}) on {dev}: {type(e).__name__} instead of RuntimeError: "
                              f"{str(e)[:400]}") from None
        else:
            raise CaseFailure(f"bad input ({kind}) on {dev}: no error")
    for k, t in targets.items():
        if t is not None and not torch.equal(storage_snapshot(t), snaps[k]):
            raise CaseFailure(f"bad input ({kind}): the input '{k}' was modified")


def _run_case(c: dict, device: str):
    if c["bad"]:
        check_bad(c, device)
    else:
        check_valid(c, device)


def run_case(c: dict, device: str):
    """Runs one case in a frame named after it (seed_<S>_case_<N>), so that a crash's
    faulthandler traceback says which case it was."""
    code = _run_case.__code__
    name = f"seed_{c['seed']}_case_{c['case']}"
    kw = {"co_name": name}
    if hasattr(code, "co_qualname"):
        kw["co_qualname"] = name
    fn = types.FunctionType(code.replace(**kw), _run_case.__globals__, name)
    fn(c, device)


# ------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------

def replay_command(seed: int, case: int, device: str) -> str:
    cmd = ["python", "test/fuzz/fuzz_ops.py", "--seed", str(seed), "--case", str(case)]
    if device != "cpu":
        cmd += ["--device", device]
    env = ""
    if os.environ.get("SCANOPS_LIBRARY"):
        env = f"SCANOPS_LIBRARY={shlex.quote(os.environ['SCANOPS_LIBRARY'])} "
    return env + " ".join(cmd)


def run(seed: int, device: str = "cpu", seconds: float | None = None, cases: int | None = None,
        first: int = 0, verbose: bool = False, keep_going: bool = False, out=None) -> dict:
    """Runs cases first, first+1, ... until `cases` ran or `seconds` passed (at least one).
    Returns {'ran': n, 'failures': [(case, description, error, replay)], 'stats': Counter}."""
    out = out or sys.stdout
    t0 = time.monotonic()
    threads0 = torch.get_num_threads()
    failures, stats = [], Counter()
    slowest = (0.0, first)
    i = first
    try:
        while True:
            if cases is not None and i - first >= cases:
                break
            if seconds is not None and i > first and time.monotonic() - t0 >= seconds:
                break
            c = make_case(seed, i, device)
            if verbose:
                print(f"case {i}: {describe(c)}", file=out, flush=True)
            stats[f"op {c['op']}"] += 1
            stats["bad input" if c["bad"] else "valid"] += 1
            stats[f"rank {len(c['shape'])}"] += 1
            stats[f"layout {c['layout']}"] += 1
            tc = time.monotonic()
            try:
                run_case(c, device)
            except Exception as e:  # noqa: BLE001
                err = e if isinstance(e, CaseFailure) else "".join(
                    traceback.format_exception(type(e), e, e.__traceback__)[-3:])
                rep = replay_command(seed, i, device)
                failures.append((i, describe(c), str(err), rep))
                print(f"\nFAILED: case {i} of seed {seed}: {describe(c)}\n  {err}\n  replay: {rep}\n",
                      file=out, flush=True)
                if not keep_going:
                    i += 1
                    break
            dt = time.monotonic() - tc
            if dt > slowest[0]:
                slowest = (dt, i)
            i += 1
    finally:
        torch.set_num_threads(threads0)
    return {"ran": i - first, "failures": failures, "stats": stats, "seconds": time.monotonic() - t0,
            "slowest": slowest}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=None, help="default: fresh from os.urandom (printed)")
    p.add_argument("--seconds", type=float, default=None, help="time budget (default 30 unless --cases)")
    p.add_argument("--cases", type=int, default=None, help="number of cases (from --first)")
    p.add_argument("--first", type=int, default=0, help="first case number")
    p.add_argument("--case", type=int, default=None, help="run this one case only (replay)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--keep-going", action="store_true", help="do not stop at the first failure")
    p.add_argument("-v", "--verbose", action="store_true", help="print every case before it runs")
    args = p.parse_args(argv)
    faulthandler.enable()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(8), "little") % (2**63)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("fuzz_ops: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    lib = load_library()
    first, cases, seconds = args.first, args.cases, args.seconds
    if args.case is not None:
        first, cases, seconds = args.case, 1, None
    elif cases is None and seconds is None:
        seconds = 30.0
    print(f"fuzz_ops: seed {seed}, device {args.device}, library {lib}, torch {torch.__version__}; "
          f"{'case ' + str(first) if cases == 1 else f'cases from {first}'}"
          f"{'' if seconds is None else f', {seconds:g} s'}{'' if cases in (None, 1) else f', at most {cases}'}",
          flush=True)
    generic = replay_command(seed, first, args.device).replace(f"--case {first}", "--case N")
    print(f"fuzz_ops: replay a case with: {generic} -v", flush=True)
    if args.case is not None:
        print(f"case {args.case}: {describe(make_case(seed, args.case, args.device))}", flush=True)
    r = run(seed, args.device, seconds=seconds, cases=cases, first=first, verbose=args.verbose,
            keep_going=args.keep_going)
    st = r["stats"]
    ops_line = ", ".join(f"{k[3:]} {v}" for k, v in sorted(st.items()) if k.startswith("op "))
    print(f"fuzz_ops: seed {seed}: {r['ran']} cases in {r['seconds']:.1f} s ({st['valid']} valid, "
          f"{st['bad input']} bad inputs; {ops_line}; slowest: case {r['slowest'][1]}, "
          f"{r['slowest'][0]:.1f} s); {len(r['failures'])} failed", flush=True)
    for i, desc, err, rep in r["failures"]:
        print(f"  case {i}: {desc}\n    replay: {rep}")
    return 1 if r["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
