"""`initial=`: every op starting each line from a given value (the stateful scans).

- every op x exclusive x reverse x dtype x layout against a sequential float64 loop that
  starts from the initial value (exact for integer sums and cummax / cummin), CPU and CUDA;
- broadcast initial values (a scalar for every line, a partial shape), 0-d and empty inputs;
- a line scanned in chunks, each from the previous chunk's final state, equals the whole line
  (exactly for integer sums and cummax / cummin);
- gradients to x, a and initial: gradcheck and gradgradcheck (real and complex), and
  the gradient of a broadcast initial;
- bad `initial` (shape, dtype, device): an error naming the op and the argument; inputs are
  never modified; bitwise the same run to run;
- opcheck, torch.compile(fullgraph), torch.export and TorchScript with `initial`;
- programs saved before `initial` existed (test/data/) still load and run.
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

import scanops  # noqa: F401  (the wrappers; the ops are loaded by conftest)
from test_ops import PARTIAL_TILE_SHAPES

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
OPS = ["cumsum", "masked_cumsum", "cumprod", "linear_recurrence", "logcumsumexp", "cummax",
       "cummin"]
FLAGS = list(itertools.product([False, True], [False, True]))


def flag_id(f):
    return ("excl" if f[0] else "incl") + ("-rev" if f[1] else "")


# ---- a sequential float64 (complex128) reference ------------------------------------------

def combine64(op, s, e, pos):
    """s: the running state (dict of tensors), e: the element at `pos` (dict)."""
    if op in ("cumsum", "masked_cumsum"):
        return {"v": s["v"] + e["v"]}
    if op == "cumprod":
        return {"v": s["v"] * e["v"]}
    if op == "linear_recurrence":
        return {"v": e["a"] * s["v"] + e["v"]}
    if op == "logcumsumexp":
        a, b = s["v"], e["v"]
        if a.is_complex():
            return {"v": torch.log(torch.exp(a) + torch.exp(b))}
        return {"v": torch.logaddexp(a, b)}
    # cummax / cummin: the later wins ties and NaN; NaN stays
    a, b = s["v"], e["v"]
    if op == "cummax":
        win = torch.isnan(b) | (~torch.isnan(a) & (b >= a))
    else:
        win = torch.isnan(b) | (~torch.isnan(a) & (b <= a))
    return {"v": torch.where(win, b, a), "i": torch.where(win, torch.full_like(s["i"], pos), s["i"])}


def reference(op, x, dim, exclusive, reverse, initial, mask=None, a=None):
    """The scan of x along dim from `initial`, one step at a time, in float64 / complex128
    (int64 for integer sums, x's dtype for cummax / cummin)."""
    xd = x.movedim(dim, -1) if x.dim() else x.reshape(1)
    n = xd.shape[-1]
    if op in ("cummax", "cummin"):
        wide = xd.dtype
    elif xd.is_complex():
        wide = torch.complex128
    elif xd.is_floating_point():
        wide = torch.float64
    else:
        wide = torch.int64
    lines = xd.shape[:-1]
    init = initial.to(wide).expand(lines) if x.dim() else initial.to(wide).reshape(())
    s = {"v": init.clone()}
    if op in ("cummax", "cummin"):
        s["i"] = torch.full(lines, -1, dtype=torch.int64)
    md = None if mask is None else mask.expand(x.shape).movedim(dim, -1) if x.dim() else mask.reshape(1)
    ad = None if a is None else (a.expand(x.shape).movedim(dim, -1) if x.dim() else a.reshape(1))
    outs, idxs = [None] * n, [None] * n
    order = range(n - 1, -1, -1) if reverse else range(n)
    for k in order:
        if exclusive:
            outs[k] = s["v"].clone()
            if "i" in s:
                idxs[k] = s["i"].clone()
        e = {"v": xd[..., k].to(wide)}
        if ad is not None:
            e["a"] = ad[..., k].to(wide)
        if md is not None:
            e["v"] = torch.where(md[..., k], e["v"], torch.zeros_like(e["v"]))
        s = combine64(op, s, e, k)
        if not exclusive:
            outs[k] = s["v"].clone()
            if "i" in s:
                idxs[k] = s["i"].clone()
    y = torch.stack(outs, -1) if n else torch.empty(lines + (0,), dtype=wide)
    y = y.movedim(-1, dim) if x.dim() else y.reshape(())
    if op in ("cummax", "cummin"):
        i = torch.stack(idxs, -1) if n else torch.empty(lines + (0,), dtype=torch.int64)
        i = i.movedim(-1, dim) if x.dim() else i.reshape(())
        return y, i
    return y


def result_dtype(op, dt):
    if op in ("cumsum", "masked_cumsum", "cumprod") and not (dt.is_floating_point or dt.is_complex):
        return torch.int64
    return dt


def dtypes_of(op):
    floats = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
    if op in ("cummax", "cummin"):
        return floats + [torch.int32, torch.int64, torch.uint8, torch.bool]
    if op in ("linear_recurrence", "logcumsumexp"):
        return floats + [torch.complex64]
    return floats + [torch.complex64, torch.int32, torch.int64, torch.uint8, torch.bool]


def rand(shape, dtype, gen, op, role="x"):
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if not (dtype.is_floating_point or dtype.is_complex):
        lo, hi = (0, 5) if dtype == torch.uint8 else (-20, 20)
        return torch.randint(lo, hi, shape, generator=gen).to(dtype)
    if dtype.is_complex:
        r = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.5
        i = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.5
        t = torch.complex(r, i)
        if op == "cumprod" or role == "a":
            t = t / t.abs().clamp(min=1e-3) * (0.9 + 0.2 * torch.rand(shape, generator=gen, dtype=torch.float64))
        return t.to(dtype)
    if op == "cumprod" or role == "a":
        t = (0.8 + 0.4 * torch.rand(shape, generator=gen, dtype=torch.float64))
        t = t * torch.where(torch.rand(shape, generator=gen) < 0.2, -1.0, 1.0)
        return t.to(dtype)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def call(op, x, dim, exclusive, reverse, initial, mask=None, a=None):
    kw = dict(exclusive=exclusive, reverse=reverse, initial=initial)
    if op == "masked_cumsum":
        return torch.ops.scanops.masked_cumsum(x, mask, dim, **kw)
    if op == "linear_recurrence":
        return torch.ops.scanops.linear_recurrence(a, x, dim, **kw)
    return getattr(torch.ops.scanops, op)(x, dim, **kw)


def tolerance(op, dtype, n):
    if op in ("cummax", "cummin") or not (dtype.is_floating_point or dtype.is_complex):
        return 0.0, 0.0
    eps = {torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7}.get(dtype, None)
    if eps is None:
        eps = 1.2e-7 if dtype in (torch.float32, torch.complex64) else 2.3e-16
    grow = math.sqrt(max(n, 1)) * 4 + 4
    if op in ("cumprod", "linear_recurrence"):
        grow *= 4
    return eps * grow, eps * grow


def check(op, shape, dim, dtype, exclusive, reverse, device, seed, init_shape=None):
    gen = torch.Generator().manual_seed(seed)
    x = rand(shape, dtype, gen, op)
    d = dim % max(len(shape), 1)
    line = tuple(s for k, s in enumerate(shape) if k != d) if shape else ()
    rd = result_dtype(op, dtype)
    ishape = line if init_shape is None else init_shape
    init = rand(ishape, rd, gen, "cumprod" if op == "cumprod" else "x")
    mask = (torch.rand(shape, generator=gen) < 0.7) if op == "masked_cumsum" else None
    a = rand(shape, dtype, gen, op, role="a") if op == "linear_recurrence" else None
    dev = lambda t: None if t is None else t.to(device)  # noqa: E731
    xs, ms, as_, cs = dev(x), dev(mask), dev(a), dev(init)
    before = [t.clone() for t in (xs, ms, as_, cs) if t is not None]
    got = call(op, xs, dim, exclusive, reverse, cs, ms, as_)
    again = call(op, xs, dim, exclusive, reverse, cs, ms, as_)
    after = [t for t in (xs, ms, as_, cs) if t is not None]
    for b, t in zip(before, after):
        assert torch.equal(b, t), "an input was modified"
    ref = reference(op, x, d if shape else 0, exclusive, reverse, init, mask, a)
    if op in ("cummax", "cummin"):
        (gv, gi), (av, ai) = got, again
        assert torch.equal(gv, av) and torch.equal(gi, ai), "not reproducible"
        rv, ri = ref
        assert gv.dtype == dtype and gi.dtype == torch.int64
        assert torch.equal(gv.cpu(), rv), f"values differ: {gv.cpu()} vs {rv}"
        assert torch.equal(gi.cpu(), ri), f"indices differ: {gi.cpu()} vs {ri}"
        return
    assert torch.equal(got.view(-1).view(torch.uint8) if got.numel() else got,
                       again.view(-1).view(torch.uint8) if again.numel() else again), "not reproducible"
    assert got.dtype == rd and got.shape == x.shape
    n = shape[d] if shape else 1
    rtol, atol = tolerance(op, dtype, n)
    g = got.cpu().to(ref.dtype)
    if rtol == 0:
        assert torch.equal(g, ref)
    else:
        scale = ref.abs().amax() if ref.numel() else 1.0
        torch.testing.assert_close(g, ref, rtol=rtol, atol=atol * max(float(scale), 1.0),
                                   equal_nan=True)


SHAPES = [((7,), 0), ((3, 50), 1), ((50, 3), 0), ((4, 33, 5), 1), ((2, 300), -1), ((1,), 0),
          ((), 0), ((3, 0), 1), ((0, 4), 1)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
@pytest.mark.parametrize("op", OPS)
def test_against_sequential_reference(op, flags, device):
    exclusive, reverse = flags
    for k, dtype in enumerate(dtypes_of(op)):
        for j, (shape, dim) in enumerate(SHAPES):
            check(op, shape, dim, dtype, exclusive, reverse, device, seed=100 * k + j)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_broadcast_initial(op, device):
    dt = torch.float32 if op != "cummax" else torch.int32
    for flags in FLAGS:
        check(op, (4, 6, 5), 1, dt, *flags, device, seed=7, init_shape=())  # one for all lines
        check(op, (4, 6, 5), 1, dt, *flags, device, seed=8, init_shape=(5,))
        check(op, (4, 6, 5), 1, dt, *flags, device, seed=9, init_shape=(4, 1))


# Long lines and wide layouts: every back-end path (row blocks, chained multi-block scans,
# column walks, few columns), against the scan of the line with the initial value prepended
# (the same combine, so the tolerance is that of two associations of one sum).
LONG = [((1 << 18,), 0), ((3, 40000), 1), ((40000, 3), 0), ((2000, 70), 0), ((6, 3000, 5), 1)]


def prepended(op, x, dim, exclusive, reverse, init, mask=None, a=None):
    d = dim % x.dim()
    head = init.expand(tuple(s for k, s in enumerate(x.shape) if k != d)).unsqueeze(d)
    n = x.shape[d]

    def join(h, t):
        t = t.expand(x.shape)
        if exclusive:
            t = t.narrow(d, 1, n - 1) if reverse else t.narrow(d, 0, n - 1)
        return torch.cat([t, h], d) if reverse else torch.cat([h, t], d)
    rd = init.dtype
    xp = join(head, x.to(rd))
    kw = dict(exclusive=False, reverse=reverse)
    if op == "masked_cumsum":
        y = torch.ops.scanops.masked_cumsum(xp, join(torch.ones_like(head, dtype=torch.bool), mask), d, **kw)
    elif op == "linear_recurrence":
        y = torch.ops.scanops.linear_recurrence(join(torch.ones_like(head), a), xp, d, **kw)
    else:
        y = getattr(torch.ops.scanops, op)(xp, d, **kw)
    off = 0 if (exclusive or reverse) else 1
    if op in ("cummax", "cummin"):
        v, i = y
        v, i = v.narrow(d, off, n), i.narrow(d, off, n)
        if not reverse:
            i = i - 1
        elif not exclusive:
            i = torch.where(i == n, -1, i)
        else:
            i = torch.where(i == n - 1, -1, i + 1)
        return v, i
    return y.narrow(d, off, n)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_long_lines_and_layouts(op, device):
    gen = torch.Generator().manual_seed(11)
    dts = [torch.float32, torch.int64] if op in ("cumsum", "masked_cumsum", "cummax", "cummin") \
        else [torch.float32]
    for dt in dts:
        for (shape, dim), (excl, rev) in itertools.product(LONG, FLAGS):
            x = rand(shape, dt, gen, op).to(device)
            d = dim % len(shape)
            line = tuple(s for k, s in enumerate(shape) if k != d)
            init = rand(line, result_dtype(op, dt), gen, op).to(device)
            mask = (torch.rand(shape, generator=gen) < 0.5).to(device) if op == "masked_cumsum" else None
            a = rand(shape, dt, gen, op, role="a").to(device) if op == "linear_recurrence" else None
            if op == "cumprod":  # keep long products finite
                x = torch.where(torch.rand(shape, generator=gen).to(device) < 0.5, 1.0, x.clamp(0.999, 1.001))
            got = call(op, x, dim, excl, rev, init, mask, a)
            ref = prepended(op, x, dim, excl, rev, init, mask, a)
            if op in ("cummax", "cummin"):
                assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
            elif dt == torch.int64:
                assert torch.equal(got, ref)
            else:
                torch.testing.assert_close(got, ref, rtol=2e-4, atol=2e-4 * max(1.0, float(ref.abs().max())))
            assert torch.equal(got if op not in ("cummax", "cummin") else got[0],
                               call(op, x, dim, excl, rev, init, mask, a)
                               if op not in ("cummax", "cummin") else call(op, x, dim, excl, rev, init, mask, a)[0])


# Rows of more than half a row tile and at most one or two (the row tiles hold 2048-16384
# elements by op and dtype): the CUDA row kernel scans such a row alone, a block a row (rows
# mode), while two or more shorter rows share a packed tile. Every op and flag with an initial
# value, against the CPU scan in float64 of the line with the initial value prepended.
ONE_TILE = [1025, 2048, 2049, 4096, 4097, 6000, 8192, 8193, 12000, 16384]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op", OPS)
def test_cuda_rows_of_about_one_tile(op):
    gen = torch.Generator().manual_seed(12)
    dts = [torch.float32, torch.float64]
    if op in ("cumsum", "masked_cumsum", "logcumsumexp", "cummax", "cummin"):
        dts.append(torch.float16)
    for dt, n, (excl, rev) in itertools.product(dts, ONE_TILE, FLAGS):
        shape = (3, n)
        x = rand(shape, dt, gen, op)
        if op == "cumprod":  # keep long products finite
            x = torch.where(torch.rand(shape, generator=gen) < 0.5, 1.0, x.clamp(0.999, 1.001)).to(dt)
        init = rand((3,), result_dtype(op, dt), gen, op)
        mask = torch.rand(shape, generator=gen) < 0.5 if op == "masked_cumsum" else None
        a = rand(shape, dt, gen, op, role="a") if op == "linear_recurrence" else None
        cuda = lambda t: None if t is None else t.cuda()  # noqa: E731
        got = call(op, cuda(x), 1, excl, rev, cuda(init), cuda(mask), cuda(a))
        again = call(op, cuda(x), 1, excl, rev, cuda(init), cuda(mask), cuda(a))
        ctx = (op, dt, n, excl, rev)
        if op in ("cummax", "cummin"):
            ref = prepended(op, x, 1, excl, rev, init, mask, a)
            assert torch.equal(got[0].cpu(), ref[0]) and torch.equal(got[1].cpu(), ref[1]), ctx
            assert torch.equal(got[1], again[1]), ctx
            got, again = got[0], again[0]
        else:
            wide = lambda t: None if t is None else t.double()  # noqa: E731
            ref = prepended(op, x.double(), 1, excl, rev, init.double(), mask, wide(a))
            tol = 2e-3 if dt == torch.float16 else 2e-4
            torch.testing.assert_close(got.cpu().double(), ref, rtol=tol,
                                       atol=tol * max(1.0, float(ref.abs().max())), msg=str(ctx))
        assert got.dtype == result_dtype(op, dt), ctx
        assert torch.equal(got.view(-1).view(torch.uint8), again.view(-1).view(torch.uint8)), ctx


# Row tiles that are not full (RowTile::kPartialVec in ops/cuda/row_scan.cuh: float32
# linear_recurrence loads and stores their whole vectors, the rest element by element) with
# initial values: test_ops.py's shapes, against the step-by-step float64 reference.
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
@pytest.mark.parametrize("shape", PARTIAL_TILE_SHAPES,
                         ids=[f"{r}x{n}" for r, n in PARTIAL_TILE_SHAPES])
def test_cuda_partial_row_tiles_initial(shape, flags, seed):
    exclusive, reverse = flags
    check("linear_recurrence", shape, 1, torch.float32, exclusive, reverse, "cuda", seed)


def final_state(op, y, x, dim, exclusive, reverse, mask=None, a=None):
    """The state after a chunk: the last value in scan order of an inclusive scan; for an
    exclusive one, that value combined with the chunk's last element."""
    n = x.shape[dim]
    last = 0 if reverse else n - 1
    yl = (y[0] if op in ("cummax", "cummin") else y).select(dim, last)
    if not exclusive:
        return yl
    xl = x.select(dim, last).to(yl.dtype)
    if op == "cumsum":
        return yl + xl
    if op == "masked_cumsum":
        return yl + torch.where(mask.select(dim, last), xl, torch.zeros_like(xl))
    if op == "cumprod":
        return yl * xl
    if op == "linear_recurrence":
        return a.select(dim, last) * yl + xl
    if op == "logcumsumexp":
        return torch.logaddexp(yl, xl)
    if op == "cummax":
        return torch.where(torch.isnan(xl) | (xl >= yl), xl, yl) if yl.is_floating_point() else torch.maximum(yl, xl)
    return torch.where(torch.isnan(xl) | (xl <= yl), xl, yl) if yl.is_floating_point() else torch.minimum(yl, xl)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
@pytest.mark.parametrize("op", OPS)
def test_chunked_equals_whole(op, flags, device):
    exclusive, reverse = flags
    gen = torch.Generator().manual_seed(5)
    exact_dt = {"cumsum": torch.int64, "masked_cumsum": torch.int32, "cumprod": torch.int64,
                "cummax": torch.float32, "cummin": torch.int32}
    dts = [torch.float64] + ([exact_dt[op]] if op in exact_dt else [])
    for dt in dts:
        shape, dim = (3, 1000, 2), 1
        x = rand(shape, dt, gen, op).to(device)
        if op == "cumprod" and dt == torch.int64:
            x = torch.randint(-1, 2, shape, generator=gen).to(device)
        mask = (torch.rand(shape, generator=gen) < 0.6).to(device) if op == "masked_cumsum" else None
        a = rand(shape, dt, gen, op, role="a").to(device) if op == "linear_recurrence" else None
        whole = call(op, x, dim, exclusive, reverse, None, mask, a)
        bounds = [0, 1, 250, 251, 600, 1000]
        pieces = list(zip(bounds[:-1], bounds[1:]))
        if reverse:
            pieces = pieces[::-1]
        state, outs = None, {}
        for lo, hi in pieces:
            sl = lambda t: None if t is None else t.narrow(dim, lo, hi - lo)  # noqa: E731
            y = call(op, sl(x), dim, exclusive, reverse, state, sl(mask), sl(a))
            if op in ("cummax", "cummin"):
                v, i = y
                i = torch.where(i >= 0, i + lo, -1)
                if state is not None:  # positions still holding the carried state: the earlier ones
                    i = torch.where(i < 0, carried_idx.unsqueeze(dim).expand_as(i), i)
                outs[lo] = (v, i)
                carried_idx = i.select(dim, 0 if reverse else hi - lo - 1)
                if exclusive:
                    xl = sl(x).select(dim, 0 if reverse else hi - lo - 1)
                    vl = v.select(dim, 0 if reverse else hi - lo - 1)
                    win = (torch.isnan(xl) | (xl >= vl)) if op == "cummax" else (torch.isnan(xl) | (xl <= vl))
                    if not xl.is_floating_point():
                        win = (xl >= vl) if op == "cummax" else (xl <= vl)
                    carried_idx = torch.where(win, torch.full_like(carried_idx, (lo if reverse else hi - 1)), carried_idx)
            else:
                outs[lo] = y
            state = final_state(op, y, sl(x), dim, exclusive, reverse, sl(mask), sl(a))
        los = sorted(outs)
        if op in ("cummax", "cummin"):
            v = torch.cat([outs[k][0] for k in los], dim)
            i = torch.cat([outs[k][1] for k in los], dim)
            assert torch.equal(v, whole[0]) and torch.equal(i, whole[1])
        elif dt in (torch.int64, torch.int32):
            assert torch.equal(torch.cat([outs[k] for k in los], dim), whole)
        else:
            torch.testing.assert_close(torch.cat([outs[k] for k in los], dim), whole,
                                       rtol=1e-12, atol=1e-12 * float(whole.abs().max()))


# ---- autograd ---------------------------------------------------------------------------

def grad_fn(op, exclusive, reverse, dim=1):
    if op == "masked_cumsum":
        def f(x, c):
            m = torch.arange(x.numel(), device=x.device).reshape(x.shape) % 3 != 1
            return torch.ops.scanops.masked_cumsum(x, m, dim, exclusive=exclusive, reverse=reverse, initial=c)
    elif op in ("cummax", "cummin"):
        def f(x, c):
            return getattr(torch.ops.scanops, op)(x, dim, exclusive=exclusive, reverse=reverse, initial=c)[0]
    else:
        def f(x, c):
            return getattr(torch.ops.scanops, op)(x, dim, exclusive=exclusive, reverse=reverse, initial=c)
    return f


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
@pytest.mark.parametrize("op", [o for o in OPS if o != "linear_recurrence"])
def test_gradcheck(op, flags, device):
    gen = torch.Generator().manual_seed(3)
    dts = [torch.float64] + ([torch.complex128] if op in ("cumsum", "masked_cumsum", "cumprod", "logcumsumexp") else [])
    for dt in dts:
        x = rand((3, 6), dt, gen, op).to(device).requires_grad_()
        for ishape in [(3,), ()]:
            c = rand(ishape, dt, gen, op).to(device).requires_grad_()
            f = grad_fn(op, *flags)
            assert torch.autograd.gradcheck(f, (x, c))
            assert torch.autograd.gradgradcheck(f, (x, c))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAGS, ids=flag_id)
def test_gradcheck_linear_recurrence(flags, device):
    gen = torch.Generator().manual_seed(4)
    for dt in (torch.float64, torch.complex128):
        a = rand((2, 5), dt, gen, "linear_recurrence", role="a").to(device).requires_grad_()
        x = rand((2, 5), dt, gen, "linear_recurrence").to(device).requires_grad_()
        for ishape in [(2,), ()]:
            c = rand(ishape, dt, gen, "x").to(device).requires_grad_()

            def f(a, x, c):
                return torch.ops.scanops.linear_recurrence(a, x, 1, exclusive=flags[0],
                                                           reverse=flags[1], initial=c)
            assert torch.autograd.gradcheck(f, (a, x, c))
            assert torch.autograd.gradgradcheck(f, (a, x, c))


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_of_initial_only(device):
    # a gradient wanted for `initial` alone (x a constant): cumsum's dc is the sum of g
    x = torch.randn(4, 9, dtype=torch.float64, device=device)
    c = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)
    g = torch.randn(4, 9, dtype=torch.float64, device=device)
    (dc,) = torch.autograd.grad(torch.ops.scanops.cumsum(x, 1, initial=c), c, g)
    torch.testing.assert_close(dc, g.sum(1))
    (dc,) = torch.autograd.grad(torch.ops.scanops.cumsum(x, 1, exclusive=True, initial=c), c, g)
    torch.testing.assert_close(dc, g.sum(1))
    # h = linrec(a, x; h0): dh[t]/dh0 = prod(a[0..t])
    a = torch.rand(4, 9, dtype=torch.float64, device=device)
    (dc,) = torch.autograd.grad(torch.ops.scanops.linear_recurrence(a, x, 1, initial=c), c, g)
    torch.testing.assert_close(dc, (g * torch.cumprod(a, 1)).sum(1))


# ---- errors, entry points --------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_bad_initial(op, device):
    x = torch.randn(3, 4, device=device)
    if op in ("cummax", "cummin", "cumsum", "cumprod", "masked_cumsum"):
        pass
    mask = torch.ones(3, 4, dtype=torch.bool, device=device)
    a = torch.rand(3, 4, device=device)
    bad = [(torch.zeros(4, device=device), "not broadcastable"),
           (torch.zeros(3, 4, device=device), "not broadcastable"),
           (torch.zeros(3, dtype=torch.float64, device=device), "dtype")]
    if device == "cuda":
        bad.append((torch.zeros(3), "device"))
    for c, what in bad:
        for meta in ((False,) if what == "device" else (False, True)):  # (meta: one device)
            args = [t.to("meta") if meta else t for t in (x, mask, a, c)]
            with pytest.raises(RuntimeError) as e:
                call(op, args[0], 1, False, False, args[3], args[1], args[2])
            msg = str(e.value)
            assert f"scanops.{op}" in msg and "'initial'" in msg and what in msg, msg
    # nothing modified, no error for a right one
    c = torch.zeros(3, device=device)
    call(op, x, 1, False, False, c, mask, a)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x = torch.randn(3, 8, device=device, dtype=torch.float64, requires_grad=True)
    c = torch.randn(3, device=device, dtype=torch.float64, requires_grad=True)
    m = torch.rand(3, 8, device=device) < 0.5
    a = torch.rand(3, 8, device=device, dtype=torch.float64, requires_grad=True)
    for excl, rev in FLAGS:
        kw = dict(exclusive=excl, reverse=rev, initial=c)
        cases = [(torch.ops.scanops.cumsum.default, (x, 1)),
                 (torch.ops.scanops.masked_cumsum.default, (x, m, 1)),
                 (torch.ops.scanops.cumprod.default, (x, 1)),
                 (torch.ops.scanops.linear_recurrence.default, (a, x, 1)),
                 (torch.ops.scanops.logcumsumexp.default, (x, 1)),
                 (torch.ops.scanops.cummax.default, (x, 1)),
                 (torch.ops.scanops.cummin.default, (x, 1))]
        for op, args in cases:
            torch.library.opcheck(op, args, kw, raise_exception=True)


def _carry_step(a, x, h0):
    h = torch.ops.scanops.linear_recurrence(a, x, 1, initial=h0)
    s = torch.ops.scanops.cumsum(x, 1, exclusive=True, initial=h0)
    m, i = torch.ops.scanops.cummax(x, 1, reverse=True, initial=h0)
    return h, h.select(1, -1), s, m, i


@pytest.mark.parametrize("device", DEVICES)
def test_compile_and_export(device):
    a = torch.rand(4, 64, device=device)
    x = torch.randn(4, 64, device=device)
    h0 = torch.randn(4, device=device)
    want = _carry_step(a, x, h0)
    got = torch.compile(_carry_step, fullgraph=True, dynamic=True)(a, x, h0)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w)

    class M(torch.nn.Module):
        def forward(self, a, x, h0):
            return _carry_step(a, x, h0)
    ep = torch.export.export(M(), (a, x, h0))
    for w, g in zip(want, ep.module()(a, x, h0)):
        torch.testing.assert_close(g, w)


def test_torchscript():
    @torch.jit.script
    def f(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor):
        return (torch.ops.scanops.linear_recurrence(a, x, 1, initial=h0),
                torch.ops.scanops.cumsum(x, 1, reverse=True, initial=h0))
    a, x, h0 = torch.rand(2, 9), torch.randn(2, 9), torch.randn(2)
    h, s = f(a, x, h0)
    torch.testing.assert_close(h, reference("linear_recurrence", x, 1, False, False, h0, a=a).float())
    torch.testing.assert_close(s, reference("cumsum", x, 1, False, True, h0).float())


# ---- programs saved before `initial` -----------------------------------------------------

def test_old_torchscript_file_loads():
    """test/data/pre_initial_script.pt: a TorchScript module saved with the schemas before
    `initial` (every op called positionally, as TorchScript serialises them)."""
    m = torch.jit.load(str(DATA / "pre_initial_script.pt"))
    inputs = torch.load(DATA / "pre_initial_io.pt")
    outs = m(*inputs["args"])
    for got, want in zip(outs, inputs["script_out"]):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_old_exported_program_loads():
    """test/data/pre_initial_export.pt2: a torch.export program saved before `initial`."""
    ep = torch.export.load(str(DATA / "pre_initial_export.pt2"))
    inputs = torch.load(DATA / "pre_initial_io.pt")
    outs = ep.module()(*inputs["args"])
    for got, want in zip(outs, inputs["export_out"]):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_engine_fallback_without_line_state():
    """The engine's prepend (a back end without BackendCaps::line_state): the CPU back end with
    SCANOPS_CPU_LINE_STATE=0 (read once per process), against the sequential reference."""
    import os
    import subprocess
    import sys
    code = (
        "import sys; sys.path.insert(0, %r); import conftest; conftest._load()\n"
        "import test_initial as t\n"
        "for k, op in enumerate(t.OPS):\n"
        "    for j, (shape, dim) in enumerate(t.SHAPES + [((3, 5000), 1), ((2000, 3), 0)]):\n"
        "        for f in t.FLAGS:\n"
        "            t.check(op, shape, dim, t.dtypes_of(op)[k %% 2], *f, 'cpu', seed=10 * k + j)\n"
        "print('fallback ok')\n" % str(HERE))
    env = dict(os.environ, SCANOPS_CPU_LINE_STATE="0")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=str(HERE.parents[1]), timeout=600)
    assert r.returncode == 0 and "fallback ok" in r.stdout, r.stderr[-3000:]


# ---- an exclusive scan's first output is the initial value itself, bitwise (CPU) ---------
# The CPU kernels' layouts: blocked columns (few columns, long lines: the first block once
# added the initial value to the identity there, v + 0.0 = +0.0 for v = -0.0), columns not cut
# into blocks, long rows (blocks with carries), one-block rows, rows of 4, 1-D; at 1 thread and
# at 2 (the chained scans, column chunks split across the threads).
FIRST_LAYOUTS = [((70001, 5), 0), ((4000, 64), 0), ((2, 40001, 3), 1), ((5, 70001), 1),
                 ((4000, 4), 1), ((300000,), 0), ((40, 3), 0)]


def _special_initial(line, dtype, kind):
    """-0.0 (every floating and complex dtype) or a quiet NaN with a payload (float32 /
    float64 / complex64: half and bfloat16 lose payloads in their conversions to and from
    float, as every torch op on them does)."""
    if kind == "negzero":
        return torch.full(line, complex(-0.0, -0.0) if dtype.is_complex else -0.0, dtype=dtype)
    if dtype == torch.float64:
        return torch.full(line, 0x7FF8000000012345, dtype=torch.int64).view(torch.float64)
    pattern = torch.full(tuple(line) + ((2,) if dtype.is_complex else ()), 0x7FC01234, dtype=torch.int32)
    return torch.view_as_complex(pattern.view(torch.float32)) if dtype.is_complex else pattern.view(torch.float32)


def _bits(t):
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.contiguous().view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])


def _first_output_mismatches(kind, device, skip_long_narrow):
    """The (op, layout, dtype, direction) cases whose exclusive first output with an initial
    value of `kind` is not that value bit for bit, on `device`."""
    cases = [(dt, op) for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.complex64)
             for op in OPS
             if not (kind == "nanpayload" and dt in (torch.bfloat16, torch.float16))
             and not (dt.is_complex and op in ("cummax", "cummin"))]
    bad = []
    for shape, dim in FIRST_LAYOUTS:
        gen = torch.Generator().manual_seed(3)
        line = [s for k, s in enumerate(shape) if k != dim]
        for dt, op in cases:
            if (skip_long_narrow and dt in (torch.bfloat16, torch.float16, torch.complex64)
                    and shape[dim] > 70000 and len(shape) == 1):
                continue  # (the 1-D line: float32 / float64 are enough)
            x = rand(shape, dt, gen, op).to(device)
            mask = (torch.rand(shape, generator=gen) < 0.5).to(device) if op == "masked_cumsum" else None
            a = rand(shape, dt, gen, op, role="a").to(device) if op == "linear_recurrence" else None
            init = _special_initial(line, dt, kind).to(device)
            for rev in (False, True):
                y = call(op, x, dim, True, rev, init, mask, a)
                if op in ("cummax", "cummin"):
                    y = y[0]
                first = y.select(dim, shape[dim] - 1 if rev else 0)
                if not torch.equal(_bits(first), _bits(init)):
                    bad.append((op, shape, dim, str(dt), "reverse" if rev else "forward"))
    return bad


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["negzero", "nanpayload"])
def test_exclusive_first_output_is_initial_bitwise(kind, threads):
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        bad = _first_output_mismatches(kind, "cpu", skip_long_narrow=True)
        assert not bad, f"{len(bad)} cases whose exclusive first output is not the initial value: {bad[:8]}"
    finally:
        torch.set_num_threads(saved)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_exclusive_first_output_is_initial_bitwise_cuda():
    """The CUDA kernels' exclusive first output is the initial value bit for bit (-0.0, every
    floating dtype and op, every kernel family the layouts reach: packed and long rows, the
    look-back of one line, column tiles and the three-pass columns)."""
    bad = _first_output_mismatches("negzero", "cuda", skip_long_narrow=False)
    assert not bad, f"{len(bad)} cases whose exclusive first output is not the initial value: {bad[:8]}"


_GENERIC_FIRST = """
import sys, torch
torch.ops.load_library(sys.argv[1])
ops = torch.ops.scanops
bad = []
for shape, dim in [((70001, 5), 0), ((4000, 64), 0), ((2, 40001, 3), 1), ((5, 70001), 1), ((4000, 4), 1)]:
    line = [s for k, s in enumerate(shape) if k != dim]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    a = torch.rand(shape, generator=torch.Generator().manual_seed(1))
    init = torch.full(line, -0.0)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name, f in [("cumsum", lambda r: ops.cumsum(x, dim, exclusive=True, reverse=r, initial=init)),
                        ("linear_recurrence", lambda r: ops.linear_recurrence(a, x, dim, exclusive=True, reverse=r, initial=init)),
                        ("logcumsumexp", lambda r: ops.logcumsumexp(x, dim, exclusive=True, reverse=r, initial=init))]:
            for r in (False, True):
                first = f(r).select(dim, shape[dim] - 1 if r else 0)
                if not torch.equal(first.contiguous().view(torch.int32), init.view(torch.int32)):
                    bad.append((name, shape, threads, r))
print("bad", bad)
"""


def test_exclusive_first_output_is_initial_portable_kernel():
    """As above with the portable kernels (SCANOPS_CPU_KERNELS=generic), in a fresh process."""
    import os
    import subprocess
    import sys

    import conftest
    env = dict(os.environ, SCANOPS_CPU_KERNELS="generic")
    r = subprocess.run([sys.executable, "-c", _GENERIC_FIRST, str(conftest.library_path())], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "bad []" in r.stdout, r.stdout + r.stderr


def test_initial_bits_independent_of_threads():
    """With an initial value the CPU outputs are the same bits at 1, 2 and 3 threads (the first
    block of a blocked column is walked from the start states in every schedule)."""
    saved = torch.get_num_threads()
    try:
        bad = []
        for shape, dim in FIRST_LAYOUTS:
            gen = torch.Generator().manual_seed(4)
            line = tuple(s for k, s in enumerate(shape) if k != dim)
            for op in OPS:
                x = rand(shape, torch.float32, gen, op)
                mask = torch.rand(shape, generator=gen) < 0.5 if op == "masked_cumsum" else None
                a = rand(shape, torch.float32, gen, op, role="a") if op == "linear_recurrence" else None
                init = rand(line, torch.float32, gen, "cumprod" if op == "cumprod" else "x")
                for excl, rev in FLAGS:
                    outs = []
                    for threads in (1, 2, 3):
                        torch.set_num_threads(threads)
                        y = call(op, x, dim, excl, rev, init, mask, a)
                        outs.append(torch.cat([y[0].view(-1).view(torch.int32), y[1].view(-1).view(torch.int32)])
                                    if op in ("cummax", "cummin") else y.view(-1).view(torch.int32))
                    if not (torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])):
                        bad.append((op, shape, dim, excl, rev))
        assert not bad, bad
    finally:
        torch.set_num_threads(saved)
