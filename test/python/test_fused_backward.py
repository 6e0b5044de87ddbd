"""The backward passes' fused scans (internal ops scanops::_cumsum_fused and
scanops::_linear_recurrence_fused): a scan whose output y is written as mul * (y + add), and a
linear recurrence whose input may be scaled by its coefficient on load.

masked_cumsum, cumprod and linear_recurrence use them in their backward when no graph of the
backward is recorded; a double backward takes the composite formulas. Checked here:
- each fused op against the composite expression it replaces, on every kernel path's shape
  class, every flag, CPU and CUDA: bit for bit for float32 / float64 / complex64 (the same
  scan of the same lifted values, then the same elementwise arithmetic), within a tolerance
  for bfloat16 (the CUDA kernels lift a * x in float32 before rounding) and for complex
  products on CUDA (their contraction into FMAs is the compiler's);
- gradients of the three ops with create_graph=False (fused) and True (composite) agree bit for
  bit (but linear_recurrence's da on CUDA: to rounding, its h[t-1] is the forward's output), and
  against a float64 autograd reference;
- the shifted epilogue (shift_mul: cumprod's exclusive products from the forward's output) and
  _linear_recurrence_backward (dx and da of an inclusive linear_recurrence in one scan);
- logcumsumexp's, cummax's and cummin's backward (one fused linear recurrence each) against
  autograd through torch's own functions, special values too;
- wide_acc (float32 / half accumulating in float64 on CUDA too);
- _logcumsumexp_backward, logcumsumexp's backward as one internal op: its CUDA one-scan kernel
  (float32 rows) against the CPU's composite in float64;
- opcheck of the internal ops, and their argument errors.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from reference import DEVICES, make_gen

ops = torch.ops.scanops
device_p = pytest.mark.parametrize("device", DEVICES)

# (shape, dim): packed short rows, block-per-row rows, few long rows (look-back), 1-D,
# columns (thread per column, tiles, vector tiles), narrow tall columns (three passes, vector
# tiles).
SHAPES = [((9, 300), 1), ((5, 20000), 1), ((2, 150000), 1), ((70001,), 0), ((300, 9), 0),
          ((3, 2100, 40), 1), ((4000, 70), 0), ((20000, 3), 0), ((300, 520), 0), ((5000, 8), 0)]
SMALL = SHAPES[:1] + SHAPES[4:5]


def same(a, b):
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    return torch.equal(a, b) or bool(((a == b) | (a.isnan() & b.isnan())).all())


def data(shape, dtype, device, gen, kind="x"):
    t = torch.randn(shape, generator=gen, device=device, dtype=torch.float64)
    if kind == "a":  # coefficients near 1, some exact zeros
        t = 0.5 + 0.6 * torch.rand(shape, generator=gen, device=device, dtype=torch.float64)
        t[torch.rand(shape, generator=gen, device=device) < 0.01] = 0
    if dtype.is_complex:
        ph = torch.rand(shape, generator=gen, device=device, dtype=torch.float64)
        t = t * torch.exp(1j * ph if kind == "a" else 2j * torch.pi * ph)
    return t.to(dtype)


def expected_linrec(a, x, dim, e, r, scale, add, mul):
    y = ops.linear_recurrence(a, a * x if scale else x, dim, exclusive=e, reverse=r)
    if add is not None:
        y = y + add
    if mul is not None:
        y = mul * y  # (the backward formulas' order: before * s, lam * h)
    return y


@device_p
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", SHAPES)
def test_linear_recurrence_fused(device, dtype, shape, dim, seed):
    gen = make_gen(seed, device)
    a = data(shape, dtype, device, gen, "a")
    x = data(shape, dtype, device, gen)
    add = data(shape, dtype, device, gen)
    mul = data(shape, dtype, device, gen)
    for (e, r), scale, use_add, use_mul in itertools.product(
            itertools.product((False, True), repeat=2), (False, True), (False, True),
            (False, True)):
        if shape not in (s for s, _ in SMALL) and (use_add != use_mul):
            continue  # the big shapes: epilogue all or nothing
        ad = add if use_add else None
        mu = mul if use_mul else None
        got = ops._linear_recurrence_fused(a, x, dim, exclusive=e, reverse=r, scale_x=scale,
                                           add=ad, mul=mu)
        check_linrec(got, a, x, dim, e, r, scale, ad, mu, device, (e, r, scale, use_add, use_mul))


def check_linrec(got, a, x, dim, e, r, scale, ad, mu, device, what):
    """got against expected_linrec: bit for bit, but bfloat16 (the fused lift keeps a * x in
    float32: against the float32 computation) and complex on CUDA (products contracted into
    FMAs as the compiler chooses)."""
    dtype = got.dtype
    if dtype == torch.bfloat16:
        want32 = expected_linrec(a.float(), x.float(), dim, e, r, scale,
                                 None if ad is None else ad.float(),
                                 None if mu is None else mu.float())
        torch.testing.assert_close(got.float(), want32, rtol=0.05, atol=0.05 * (
            1 + want32.abs().amax().item()))
        return
    want = expected_linrec(a, x, dim, e, r, scale, ad, mu)
    if dtype.is_complex and device == "cuda":
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * (
            1 + want.abs().amax().item()))
    else:
        assert same(got, want), what


def shifted_on(m, dim, r, fill=1):
    """m read one scan position on (shift_mul): position k takes m's element at k + 1 in scan
    order (reverse: the memory element before), the last position of each line `fill`."""
    if m.dim() == 0:
        return torch.full_like(m, fill)
    n = m.shape[dim]
    one = torch.full_like(m.narrow(dim, 0, 1), fill)
    if r:
        return torch.cat([one, m.narrow(dim, 0, n - 1)], dim)
    return torch.cat([m.narrow(dim, 1, n - 1), one], dim)


# shift_mul: the CUDA row kernels read mul in place (packed rows, rows spanning a vector,
# block-per-row rows, look-back rows, 1-D, partial tiles), the others take it shifted by the
# engine; lines of one element, a 0-dim tensor.
SHIFT_SHAPES = SHAPES + [((7, 333), 1), ((3, 8193), 1), ((4, 1), 1), ((), 0), ((1,), 0)]


@device_p
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", SHIFT_SHAPES)
def test_linear_recurrence_fused_shift_mul(device, dtype, shape, dim, seed):
    gen = make_gen(seed, device)
    a = data(shape, dtype, device, gen, "a")
    x = data(shape, dtype, device, gen)
    add = data(shape, dtype, device, gen)
    mul = data(shape, dtype, device, gen)
    for (e, r), scale, use_add in itertools.product(
            itertools.product((False, True), repeat=2), (False, True), (False, True)):
        ad = add if use_add else None
        got = ops._linear_recurrence_fused(a, x, dim, exclusive=e, reverse=r, scale_x=scale,
                                           add=ad, mul=mul, shift_mul=True)
        check_linrec(got, a, x, dim, e, r, scale, ad, shifted_on(mul, dim, r), device,
                     (e, r, scale, use_add))


@device_p
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", SHIFT_SHAPES)
def test_linear_recurrence_backward_op(device, dtype, shape, dim, seed):
    """_linear_recurrence_backward(a, g, h; r) = (lam, lam * h[t-1]): lam the fused scan of
    the backward, h[t-1] read one position on against the backward's order, 0 at the first."""
    gen = make_gen(seed, device)
    a = data(shape, dtype, device, gen, "a")
    g = data(shape, dtype, device, gen)
    h = data(shape, dtype, device, gen)
    for r in (False, True):
        dx, da = ops._linear_recurrence_backward(a, g, h, dim, reverse=r)
        lam = ops._linear_recurrence_fused(a, g, dim, exclusive=True, reverse=not r,
                                           scale_x=True, add=g, mul=None)
        assert dx.dtype == da.dtype == dtype and dx.shape == da.shape == g.shape
        assert same(dx, lam), r
        want = lam * shifted_on(h, dim, not r, fill=0)
        if dtype.is_complex and device == "cuda":
            torch.testing.assert_close(da, want, rtol=1e-5, atol=1e-5 * (
                1 + want.abs().amax().item()))
        else:
            assert same(da, want), r


@device_p
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.int32,
                                   torch.bfloat16])
@pytest.mark.parametrize("shape,dim", SHAPES)
def test_cumsum_fused(device, dtype, shape, dim, seed):
    gen = make_gen(seed, device)
    if dtype == torch.int32:
        x = torch.randint(-5, 6, shape, generator=gen, device=device, dtype=dtype)
    else:
        x = data(shape, dtype, device, gen)
    out_dtype = torch.int64 if dtype == torch.int32 else dtype
    add = torch.randint(-5, 6, shape, generator=gen, device=device).to(out_dtype)
    keep = torch.rand(shape, generator=gen, device=device) > 0.3
    mul = torch.randint(-3, 4, shape, generator=gen, device=device).to(out_dtype)
    # a mask one byte off its vector alignment (the row kernels' pre-loaded mask vectors
    # need it aligned; else the element-wise stores)
    n = keep.numel()
    odd = (torch.rand(n + 1, generator=gen, device=device) > 0.3)[1:].view(shape)
    for e, r in itertools.product((False, True), repeat=2):
        for ad, mu in ((None, keep), (add, None), (add, mul), (None, keep[..., :1]), (None, odd)):
            got = ops._cumsum_fused(x, dim, exclusive=e, reverse=r, add=ad, mul=mu)
            want = ops.cumsum(x, dim, exclusive=e, reverse=r)
            if ad is not None:
                want = want + ad
            if mu is not None:
                want = mu * want
            assert got.dtype == out_dtype
            # (one 1-D line of a forward floating sum: the plain cumsum takes CCCL's
            # DeviceScan, the fused ones the row kernel: the same values to rounding)
            cub_line = (device == "cuda" and not r and x.numel() == shape[dim] and
                        dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16))
            if cub_line or (mu is odd and device == "cuda" and math.prod(shape[dim + 1:]) > 1):
                # (columns: the vector column tiles need every operand aligned to its
                # vector; the odd mask's problem takes another column kernel, whose
                # association differs from cumsum's: the same values to rounding)
                tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
                torch.testing.assert_close(got, want, rtol=tol, atol=tol * (
                    1 + want.abs().amax().item()))
                continue
            assert same(got, want), (e, r, ad is None, mu is None)


def _grads(fn, inputs, g, create_graph):
    ins = [t.detach().clone().requires_grad_() for t in inputs]
    y = fn(*ins)
    return torch.autograd.grad(y, ins, g, create_graph=create_graph)


@device_p
@pytest.mark.parametrize("op", ["masked_cumsum", "cumprod", "linear_recurrence"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("shape,dim", SHAPES[:3] + SHAPES[4:6])
def test_backward_fused_matches_composite(device, op, dtype, shape, dim, seed):
    gen = make_gen(seed, device)
    x = data(shape, dtype, device, gen, "a" if op == "cumprod" else "x")
    g = data(shape, dtype, device, gen)
    for e, r in itertools.product((False, True), repeat=2):
        if op == "masked_cumsum":
            m = torch.rand(shape, generator=gen, device=device) > 0.5
            fn = lambda t: ops.masked_cumsum(t, m, dim, exclusive=e, reverse=r)  # noqa: E731
            inputs = [x]
        elif op == "cumprod":
            fn = lambda t: ops.cumprod(t, dim, exclusive=e, reverse=r)  # noqa: E731
            inputs = [x]
        else:
            a = data(shape, dtype, device, gen, "a")
            fn = lambda aa, t: ops.linear_recurrence(aa, t, dim, exclusive=e, reverse=r)  # noqa: E731
            inputs = [a, x]
        fused = _grads(fn, inputs, g, create_graph=False)
        composite = _grads(fn, inputs, g, create_graph=True)
        for f, c in zip(fused, composite):
            # linear_recurrence (inclusive, real): da's h[t-1] is the forward's output, whose
            # rounding may differ from the composite's exclusive recurrence (a tile's carry and
            # the last output before it associate differently on CUDA)
            h_from_output = op == "linear_recurrence" and not e and not dtype.is_complex
            if (dtype.is_complex or h_from_output) and device == "cuda":  # (and FMA contraction)
                torch.testing.assert_close(f, c.detach(), rtol=1e-5, atol=1e-5 * (
                    1 + c.abs().amax().item()))
            else:
                assert same(f, c.detach()), (op, e, r)
        # and against float64 / complex128 autograd
        wide = torch.complex128 if dtype.is_complex else torch.float64
        ref = _grads(fn, [t.to(wide) for t in inputs], g.to(wide), create_graph=False)
        for f, w in zip(fused, ref):
            scale = 1 + w.abs().amax().item()
            assert (f.to(wide) - w).abs().amax().item() <= 1e-3 * scale, (op, e, r)


@device_p
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", SHAPES)
def test_linear_recurrence_fused_wide_acc(device, dtype, shape, dim, seed):
    """wide_acc: float32 / bfloat16 inputs accumulate in float64, on CUDA too (the CPU always
    does: the same bits there). Coefficients 1 - 1/k (logcumsumexp's backward's kind), whose
    float32 products drift on CUDA: within 1 ulp of the float64 recurrence rounded once."""
    gen = make_gen(seed, device)
    n = shape[dim]
    k = torch.arange(1, n + 1, device=device, dtype=torch.float64)
    view = [1] * len(shape)
    view[dim] = n
    a = (1 - 1 / (k + 1)).view(view).expand(shape).to(dtype)
    x = torch.rand(shape, generator=gen, device=device, dtype=torch.float64).to(dtype)
    for e, r in itertools.product((False, True), repeat=2):
        kw = dict(exclusive=e, reverse=r, add=None, mul=None)
        wide = ops._linear_recurrence_fused(a, x, dim, scale_x=True, wide_acc=True, **kw)
        narrow = ops._linear_recurrence_fused(a, x, dim, scale_x=True, **kw)
        want = ops.linear_recurrence(a.double(), a.double() * x.double(), dim, exclusive=e,
                                     reverse=r)
        assert wide.dtype == dtype
        ulp = torch.finfo(dtype).eps * want.abs()
        assert ((wide.double() - want).abs() <= ulp + 1e-30).all(), (e, r)
        if device == "cpu":
            assert same(wide, narrow)
        elif n > 100_000 and dtype == torch.float32:  # (float32 products drift visibly)
            assert (wide.double() - want).abs().amax() < (narrow.double() - want).abs().amax()


def _torch_family(op, x, dim, e, r):
    """The op by torch's own (differentiable) functions, flipped / shifted for the flags."""
    n = x.shape[dim]
    xs = x.flip(dim) if r else x
    if op == "logcumsumexp":
        y = torch.logcumsumexp(xs, dim)
        fill = float("-inf")
    else:
        y = getattr(torch, op)(xs, dim).values
        fill = float("-inf") if op == "cummax" else float("inf")
    if e:
        y = torch.cat([torch.full_like(y.narrow(dim, 0, 1), fill), y.narrow(dim, 0, n - 1)], dim)
    return y.flip(dim) if r else y


# logcumsumexp, cummax and cummin take one fused linear recurrence in their backward when no
# graph is recorded (registration/autograd.cpp): every kernel path's shape class, every flag.
@device_p
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", SHAPES)
def test_logcumsumexp_backward_fused(device, dtype, shape, dim, seed):
    gen = make_gen(seed, device)
    x = (3 * torch.randn(shape, generator=gen, device=device, dtype=torch.float64)).to(dtype)
    g = torch.randn(shape, generator=gen, device=device, dtype=torch.float64).to(dtype)
    n = shape[dim]
    for e, r in itertools.product((False, True), repeat=2):
        fn = lambda t: ops.logcumsumexp(t, dim, exclusive=e, reverse=r)  # noqa: E731
        (got,) = _grads(fn, [x], g, create_graph=False)
        (again,) = _grads(fn, [x], g, create_graph=False)
        assert got.dtype == dtype and same(got, again), (e, r)  # run to run
        (want,) = _grads(lambda t: _torch_family("logcumsumexp", t, dim, e, r),
                         [x.double()], g.double(), create_graph=False)
        if e:  # the last element in scan order reaches no output: torch's composition gives
            last = 0 if r else n - 1  # exp(-inf + x) there, 0 unless x = +inf
            want.narrow(dim, last, 1).zero_()
        # against torch's formula in float64: no worse than 4x torch's own error in dtype (a
        # sum of up to n rounded terms; measured on the CPU: 5.8e-6 / 5.8e-12 / 0.042 at most)
        (theirs,) = _grads(lambda t: _torch_family("logcumsumexp", t, dim, e, r), [x], g,
                           create_graph=False)
        if e:
            theirs.narrow(dim, last, 1).zero_()
        scale = 1 + want.abs().amax().item()
        err = (got.double() - want).abs().amax().item() / scale
        err_torch = (theirs.double() - want).abs().amax().item() / scale
        floor = {torch.float32: 2e-5, torch.float64: 2e-11, torch.bfloat16: 0.15}[dtype]
        assert err <= max(floor, 4 * err_torch), (e, r, err, err_torch)


@device_p
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logcumsumexp_backward_fused_special(device, dtype, seed):
    """-inf (often, and all -inf prefixes), +inf and NaN inputs: torch's gradient where it is
    finite, NaN where it is NaN (but at an exclusive scan's last element, which reaches no
    output: 0)."""
    gen = make_gen(seed, device)
    inf = float("inf")
    for shape, dim in [((6, 300), 1), ((300, 5), 0), ((2, 150000), 1)]:
        for kind in ("neginf", "prefix", "posinf", "nan"):
            x = 2 * torch.randn(shape, generator=gen, device=device, dtype=torch.float64)
            u = torch.rand(shape, generator=gen, device=device)
            if kind == "neginf":
                x[u < 0.3] = -inf
            elif kind == "prefix":
                x.narrow(dim, 0, 7).fill_(-inf)
                x.narrow(dim, shape[dim] - 7, 7).fill_(-inf)
            elif kind == "posinf":
                x[u < 0.01] = inf
            else:
                x[u < 0.003] = float("nan")
            x = x.to(dtype)
            g = torch.randn(shape, generator=gen, device=device, dtype=dtype)
            for e, r in itertools.product((False, True), repeat=2):
                fn = lambda t: ops.logcumsumexp(t, dim, exclusive=e, reverse=r)  # noqa: E731
                (got,) = _grads(fn, [x], g, create_graph=False)
                (want,) = _grads(lambda t: _torch_family("logcumsumexp", t, dim, e, r),
                                 [x.double()], g.double(), create_graph=False)
                (theirs,) = _grads(lambda t: _torch_family("logcumsumexp", t, dim, e, r), [x],
                                   g, create_graph=False)
                if e:
                    want.narrow(dim, 0 if r else shape[dim] - 1, 1).zero_()
                    theirs.narrow(dim, 0 if r else shape[dim] - 1, 1).zero_()
                fin = torch.isfinite(want)
                assert torch.equal(torch.isnan(got), torch.isnan(want)), (kind, e, r)
                if not fin.any():
                    continue
                scale = 1 + want[fin].abs().amax().item()
                err = (got[fin].double() - want[fin]).abs().amax().item() / scale
                err_torch = (theirs[fin].double() - want[fin]).abs().amax().item() / scale
                floor = 2e-5 if dtype == torch.float32 else 2e-11  # as above
                assert err <= max(floor, 4 * err_torch), (kind, e, r, err, err_torch)


# The internal op itself (_logcumsumexp_backward): on CUDA, float32 takes the one-scan kernel
# (ops/cuda/lse_grad.cu; every mode of the row kernels: packed rows, a block a row, look-back
# lines; the column kernels) and float64 the composite formula, as the CPU does. Checked
# against the CPU's composite in float64 on the same float32 data (the CPU float64 run is the
# reference: both compute the same sum), with an expanded (stride-0) g and a transposed x (the
# kernel takes contiguous copies), special values, and bit for bit run to run.
@pytest.mark.parametrize("shape,dim", [((300, 64), 1), ((37, 1000), 1), ((3, 9000), 1),
                                       ((2, 150000), 1), ((70001,), 0), ((4, 1, 2500, 1), 2),
                                       ((2000, 7), 0), ((5, 3000, 40), 1), ((20000, 3), 0),
                                       ((300, 520), 0)],
                         ids=["packed", "packed-odd", "rows", "lookback", "1d", "unit-dims",
                              "columns", "columns-3d", "narrow-columns", "wide-columns"])
def test_logcumsumexp_backward_op_cuda(shape, dim, seed):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    gen = make_gen(seed, "cpu")
    x = (3 * torch.randn(shape, generator=gen, dtype=torch.float64)).float()
    u = torch.rand(shape, generator=gen)
    x[u < 0.002] = float("-inf")
    x[(u > 0.5) & (u < 0.5005)] = float("inf")
    gs = {"dense": torch.randn(shape, generator=gen).float(),
          "expanded": torch.full((1,) * len(shape), 0.75).expand(shape)}
    gs["dense"][torch.rand(shape, generator=gen) < 0.0005] = float("nan")
    for (gname, g), e, r in itertools.product(gs.items(), (False, True), (False, True)):
        y = ops.logcumsumexp(x, dim, exclusive=e, reverse=r)
        want = ops._logcumsumexp_backward(x.double(), y.double(), g.double(), dim, exclusive=e,
                                          reverse=r)
        xc, yc, gc = x.cuda(), y.cuda(), g.cuda()
        got = ops._logcumsumexp_backward(xc, yc, gc, dim, exclusive=e, reverse=r)
        again = ops._logcumsumexp_backward(xc, yc, gc, dim, exclusive=e, reverse=r)
        what = (gname, e, r)
        assert got.dtype == torch.float32 and got.shape == x.shape, what
        assert same(got, again), what
        got = got.cpu().double()
        assert torch.equal(torch.isnan(got), torch.isnan(want)), what
        fin = torch.isfinite(want)
        inf = torch.isinf(want)
        assert torch.equal(got[inf], want[inf]), what
        scale = 1 + want[fin].abs().amax().item()
        err = (got[fin] - want[fin]).abs().amax().item() / scale
        assert err <= 2e-5, (what, err)
    # a transposed (non-contiguous) x and y along the last dim
    xt = x.movedim(dim, -1).reshape(-1, shape[dim]).t().contiguous().t()
    y = ops.logcumsumexp(xt, 1)
    g = torch.randn(xt.shape, generator=gen)
    want = ops._logcumsumexp_backward(xt.double(), y.double(), g.double(), 1, exclusive=False,
                                      reverse=False)
    got = ops._logcumsumexp_backward(xt.cuda(), y.cuda(), g.cuda(), 1, exclusive=False,
                                     reverse=False).cpu().double()
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    fin = torch.isfinite(want)
    assert (got[fin] - want[fin]).abs().amax().item() / (1 + want[fin].abs().amax().item()) <= 2e-5


@device_p
@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", SHAPES)
def test_cum_extremum_backward_fused(device, op, dtype, shape, dim, seed):
    """Exactly torch's gradient (small-integer data: ties, runs of every length; small-integer
    grads: exact sums), bit for bit run to run."""
    gen = make_gen(seed, device)
    x = torch.randint(-40, 41, shape, generator=gen, device=device).to(dtype)
    lim = 2 if dtype == torch.bfloat16 else 5
    g = torch.randint(-lim, lim + 1, shape, generator=gen, device=device).to(dtype)
    if dtype == torch.bfloat16 and shape[dim] > 256:  # bfloat16 sums of integers: exact to 256
        g = (torch.rand(shape, generator=gen, device=device) < 0.01).to(dtype)
    for e, r in itertools.product((False, True), repeat=2):
        fn = lambda t: getattr(ops, op)(t, dim, exclusive=e, reverse=r)[0]  # noqa: E731
        (got,) = _grads(fn, [x], g, create_graph=False)
        (again,) = _grads(fn, [x], g, create_graph=False)
        (want,) = _grads(lambda t: _torch_family(op, t, dim, e, r), [x], g, create_graph=False)
        assert got.dtype == dtype and torch.equal(got, want), (e, r)
        assert same(got, again), (e, r)


@device_p
def test_opcheck_fused(device, seed):
    gen = make_gen(seed, device)
    f64 = torch.float64
    x = data((3, 8), f64, device, gen)
    a = data((3, 8), f64, device, gen, "a")
    m = torch.rand((3, 8), generator=gen, device=device) > 0.5
    samples = [
        (ops._cumsum_fused.default, (x, 1), dict(exclusive=False, reverse=True, add=None, mul=m)),
        (ops._cumsum_fused.default, (x, 0), dict(exclusive=True, reverse=False, add=x, mul=x)),
        (ops._cumsum_fused.default, (x, 1), dict(exclusive=False, reverse=False, add=None,
                                                 mul=m[:1])),
        (ops._linear_recurrence_fused.default, (a, x, 1),
         dict(exclusive=True, reverse=True, scale_x=True, add=x, mul=None)),
        (ops._linear_recurrence_fused.default, (a[:1], x, 0),
         dict(exclusive=True, reverse=False, scale_x=False, add=None, mul=a)),
        (ops._linear_recurrence_fused.default, (a, x, 1),
         dict(exclusive=True, reverse=True, scale_x=True, add=x, mul=a, shift_mul=True)),
        (ops._linear_recurrence_fused.default, (a.float(), x.float(), 0),
         dict(exclusive=False, reverse=True, scale_x=True, add=x.float(), mul=m, wide_acc=True)),
        (ops._logcumsumexp_backward.default,
         (x, ops.logcumsumexp(x, 1, exclusive=True), a, 1), dict(exclusive=True, reverse=False)),
        (ops._logcumsumexp_backward.default,
         (x.float(), ops.logcumsumexp(x.float(), 0, reverse=True), a.float(), 0),
         dict(exclusive=False, reverse=True)),
        (ops._logcumsumexp_backward.default,
         (x.float(), ops.logcumsumexp(x.float(), -1), a.float(), -1),
         dict(exclusive=False, reverse=False)),
        (ops._linear_recurrence_backward.default, (a, x, a, 1), dict(reverse=False)),
        (ops._linear_recurrence_backward.default, (a, x, a, 0), dict(reverse=True)),
    ]
    for op, args, kwargs in samples:
        torch.library.opcheck(op, args, kwargs, raise_exception=True,
                              test_utils=("test_schema", "test_faketensor",
                                          "test_aot_dispatch_static"))


def test_fused_errors():
    x = torch.randn(4, 5)
    lb = ops._logcumsumexp_backward
    with pytest.raises(RuntimeError, match=r"scanops\._logcumsumexp_backward: y must have x's shape"):
        lb(x, x[:, :2], x, 1, exclusive=False, reverse=False)
    with pytest.raises(RuntimeError, match=r"scanops\._logcumsumexp_backward: g must have x's dtype"):
        lb(x, x, x.double(), 1, exclusive=False, reverse=False)
    with pytest.raises(RuntimeError, match=r"scanops\._logcumsumexp_backward: x must be float32"):
        lb(x.half(), x.half(), x.half(), 1, exclusive=False, reverse=False)
    with pytest.raises(RuntimeError, match=r"scanops\._logcumsumexp_backward: x must have at least"):
        lb(x[0, 0], x[0, 0], x[0, 0], 0, exclusive=False, reverse=False)
    with pytest.raises(IndexError):
        lb(x, x, x, 2, exclusive=False, reverse=False)
    with pytest.raises(RuntimeError, match=r"scanops\._cumsum_fused: argument 'add' has dtype"):
        ops._cumsum_fused(x, 1, exclusive=False, reverse=False, add=x.double(), mul=None)
    with pytest.raises(RuntimeError, match=r"scanops\._cumsum_fused: argument 'mul' of shape"):
        ops._cumsum_fused(x, 1, exclusive=False, reverse=False, add=None, mul=x[:, :2])
    with pytest.raises(RuntimeError, match=r"scanops\._linear_recurrence_fused: argument 'mul'"):
        ops._linear_recurrence_fused(x, x, 1, exclusive=False, reverse=False, scale_x=True,
                                     add=None, mul=x.int())
    with pytest.raises(RuntimeError,
                       match=r"scanops\._linear_recurrence_fused: shift_mul needs a tensor 'mul'"):
        ops._linear_recurrence_fused(x, x, 1, exclusive=False, reverse=False, scale_x=True,
                                     add=None, mul=None, shift_mul=True)
