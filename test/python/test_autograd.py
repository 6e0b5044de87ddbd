"""Autograd of every scanops op: gradcheck / gradgradcheck (float64), gradients against
PyTorch's own (autograd through the compositions of reference.py), cumprod with zeros,
broadcast coefficients, the dtype= argument and non-differentiable integral results."""
from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from reference import (DEVICES, FLAG_IDS, FLAGS, OPS, SCAN_OPS, dtype_id, linrec_ref,
                       make_gen, ops, rand_data, scan_ref)

f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64

device_p = pytest.mark.parametrize("device", DEVICES)
flags_p = pytest.mark.parametrize("exclusive,reverse", FLAGS, ids=FLAG_IDS)


def _nondet(device) -> float:
    return 0.0 if str(device) == "cpu" else 1e-12


def scanops_fn(op, dim, exclusive, reverse, mask=None, dtype=None):
    """f(*differentiable inputs) calling the op: (x,) or, for the recurrence, (a, x)."""
    kw = dict(exclusive=exclusive, reverse=reverse)
    if dtype is not None:
        kw["dtype"] = dtype
    if op == "cumsum":
        return lambda x: ops.cumsum(x, dim, **kw)
    if op == "masked_cumsum":
        return lambda x: ops.masked_cumsum(x, mask, dim, **kw)
    if op == "cumprod":
        return lambda x: ops.cumprod(x, dim, **kw)
    return lambda a, x: ops.linear_recurrence(a, x, dim, **kw)


def reference_fn(op, dim, exclusive, reverse, mask=None):
    """The same function as a differentiable PyTorch composition (float64)."""
    if op == "cumsum":
        return lambda x: scan_ref("sum", x, dim, exclusive, reverse)
    if op == "masked_cumsum":
        return lambda x: scan_ref("sum", x * mask, dim, exclusive, reverse)
    if op == "cumprod":
        return lambda x: scan_ref("prod", x, dim, exclusive, reverse)
    return lambda a, x: linrec_ref(a, x, dim, exclusive, reverse)


def make_inputs(op, shape, dim, device, gen, dtype=f64, requires_grad=True, a_shape=None):
    n = shape[dim] if len(shape) else 1
    role = "prod" if op == "cumprod" else "sum"
    x = rand_data(role, shape, dtype, device, gen, n)
    if op == "linear_recurrence":
        a = rand_data("coef", shape if a_shape is None else a_shape, dtype, device, gen, n)
        return (a.requires_grad_(requires_grad), x.requires_grad_(requires_grad))
    return (x.requires_grad_(requires_grad),)


# ------------------------------------------------------------------------------------------
# gradcheck / gradgradcheck
# ------------------------------------------------------------------------------------------

@device_p
@flags_p
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("op", OPS)
def test_gradcheck(device, op, dim, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    shape = (3, 5, 4)
    inputs = make_inputs(op, shape, dim, device, gen)
    mask = rand_data("mask", shape, torch.bool, device, gen)
    fn = scanops_fn(op, dim, exclusive, reverse, mask)
    nd = _nondet(device)
    assert gradcheck(fn, inputs, nondet_tol=nd)
    assert gradgradcheck(fn, inputs, nondet_tol=nd)


@device_p
@pytest.mark.parametrize("op", OPS)
def test_gradcheck_noncontiguous_and_small(device, op, seed):
    gen = make_gen(seed, device)
    for shape, dim in [((6, 5), 0), ((), 0), ((1,), 0), ((4, 1), 1), ((2, 3, 7), 1)]:
        inputs = make_inputs(op, shape, dim, device, gen, requires_grad=False)
        if len(shape) >= 2:  # transposed views
            inputs = tuple(t.transpose(0, -1).contiguous().transpose(0, -1) for t in inputs)
            assert not inputs[0].is_contiguous() or inputs[0].numel() <= 1 or 1 in shape
        inputs = tuple(t.requires_grad_() for t in inputs)
        mask = rand_data("mask", shape, torch.bool, device, gen)
        for e, r in FLAGS:
            fn = scanops_fn(op, dim, e, r, mask)
            assert gradcheck(fn, inputs, nondet_tol=_nondet(device))
            assert gradgradcheck(fn, inputs, nondet_tol=_nondet(device))


# ------------------------------------------------------------------------------------------
# cumprod with zeros
# ------------------------------------------------------------------------------------------

ZERO_PATTERNS = {
    "one": [3],
    "run": [2, 3, 4],
    "first": [0],
    "last": [6],
    "two_apart": [1, 4],
    "first_and_last": [0, 6],
    "all": list(range(7)),
}


@device_p
@flags_p
@pytest.mark.parametrize("pattern", list(ZERO_PATTERNS))
def test_cumprod_zeros_gradient(device, pattern, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    x = rand_data("prod", (3, 7), f64, device, gen, 7)
    x[:, ZERO_PATTERNS[pattern]] = 0
    x[2] = rand_data("prod", (7,), f64, device, gen, 7)  # a row without zeros too
    x.requires_grad_()
    fn = scanops_fn("cumprod", 1, exclusive, reverse)
    assert gradcheck(fn, (x,), nondet_tol=_nondet(device))
    assert gradgradcheck(fn, (x,), nondet_tol=_nondet(device))
    # Against torch.cumprod's backward (which handles zeros) on the same compositions.
    g = torch.randn(x.shape, dtype=f64, generator=gen, device=device)
    (got,) = torch.autograd.grad(fn(x), x, g)
    (want,) = torch.autograd.grad(reference_fn("cumprod", 1, exclusive, reverse)(x), x, g)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(got).all()


@device_p
def test_cumprod_zero_gradient_known_values(device):
    # y = [x0, x0 x1, x0 x1 x2]; at x = [2, 0, 3]: dy/dx1 summed with g = 1: x0 + x0 x2 = 8.
    x = torch.tensor([2.0, 0.0, 3.0], dtype=f64, device=device, requires_grad=True)
    ops.cumprod(x, 0).sum().backward()
    assert x.grad.tolist() == [1.0, 8.0, 0.0]
    x.grad = None
    # exclusive y = [1, x0, x0 x1]: d/dx0 = 1 + x1 = 1, d/dx1 = x0 = 2, d/dx2 = 0
    ops.cumprod(x, 0, exclusive=True).sum().backward()
    assert x.grad.tolist() == [1.0, 2.0, 0.0]


# ------------------------------------------------------------------------------------------
# Gradients equal PyTorch's on random data (first and second order)
# ------------------------------------------------------------------------------------------

@device_p
@flags_p
@pytest.mark.parametrize("op", OPS)
def test_gradients_match_torch(device, op, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    for shape, dim in [((4, 33), 1), ((33, 4), 0), ((2, 3, 50), -1), ((300,), 0)]:
        inputs = make_inputs(op, shape, dim, device, gen)
        mask = rand_data("mask", shape, torch.bool, device, gen)
        ours = scanops_fn(op, dim, exclusive, reverse, mask)(*inputs)
        ref = reference_fn(op, dim, exclusive, reverse, mask)(*inputs)
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
        g = torch.randn(shape, dtype=f64, generator=gen, device=device)
        got = torch.autograd.grad(ours, inputs, g, create_graph=True)
        want = torch.autograd.grad(ref, inputs, g, create_graph=True)
        for gg, ww in zip(got, want):
            torch.testing.assert_close(gg, ww, rtol=1e-9, atol=1e-9)
        # second order: d/d(inputs) of <grad, v>
        vs = [torch.randn(t.shape, dtype=f64, generator=gen, device=device) for t in inputs]
        s_got = sum((gg * v).sum() for gg, v in zip(got, vs))
        s_want = sum((ww * v).sum() for ww, v in zip(want, vs))
        if s_want.requires_grad:
            got2 = torch.autograd.grad(s_got, inputs, allow_unused=True)
            want2 = torch.autograd.grad(s_want, inputs, allow_unused=True)
            for g2, w2, t in zip(got2, want2, inputs):
                g2 = torch.zeros_like(t) if g2 is None else g2
                w2 = torch.zeros_like(t) if w2 is None else w2
                torch.testing.assert_close(g2, w2, rtol=1e-9, atol=1e-9)


@device_p
@flags_p
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [f32, f16, bf16], ids=dtype_id)
def test_low_precision_gradients(device, op, dtype, exclusive, reverse, seed):
    """Gradients keep the input dtype and are close to the float64 gradient of the same values."""
    gen = make_gen(seed, device)
    shape, dim = (5, 64), 1
    inputs = make_inputs(op, shape, dim, device, gen, dtype=dtype)
    mask = rand_data("mask", shape, torch.bool, device, gen)
    g = torch.randn(shape, generator=gen, device=device).to(dtype)
    got = torch.autograd.grad(scanops_fn(op, dim, exclusive, reverse, mask)(*inputs), inputs, g)
    ref = reference_fn(op, dim, exclusive, reverse, mask)
    inputs64 = tuple(t.detach().double().requires_grad_() for t in inputs)
    want = torch.autograd.grad(ref(*inputs64), inputs64, g.double())
    # Every gradient here is a sum of products of inputs and grad entries; the same gradient at
    # |inputs|, |g| is the sum of the terms' magnitudes, which bounds the rounding error of a
    # backward pass that runs its scans and elementwise ops in float32 / `dtype`.
    abs64 = tuple(t.detach().double().abs().requires_grad_() for t in inputs)
    bound = torch.autograd.grad(ref(*abs64), abs64, g.double().abs())
    eps = torch.finfo(dtype).eps
    for gg, ww, bb in zip(got, want, bound):
        assert gg.dtype == dtype and gg.shape == ww.shape
        tol = 16 * eps * bb + 1e-30
        err = (gg.double() - ww).abs()
        assert (err <= tol).all(), f"worst err/tol {(err / tol).max().item():.3g}"


# ------------------------------------------------------------------------------------------
# Linear recurrence: broadcast a, one input at a time
# ------------------------------------------------------------------------------------------

@device_p
@flags_p
@pytest.mark.parametrize("a_shape", [(), (1,), (7,), (4, 1), (1, 7), (2, 4, 1), (1, 1, 7)],
                         ids=lambda s: "a" + "x".join(map(str, s)))
def test_linear_recurrence_broadcast_a_gradient(device, a_shape, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    shape = (2, 4, 7)
    for dim in (2, 1):
        a, x = make_inputs("linear_recurrence", shape, dim, device, gen, a_shape=a_shape)
        fn = scanops_fn("linear_recurrence", dim, exclusive, reverse)
        assert gradcheck(fn, (a, x), nondet_tol=_nondet(device))
        assert gradgradcheck(fn, (a, x), nondet_tol=_nondet(device))
        g = torch.randn(shape, dtype=f64, generator=gen, device=device)
        da, dx = torch.autograd.grad(fn(a, x), (a, x), g)
        assert da.shape == a.shape and dx.shape == x.shape
        ra, rx = torch.autograd.grad(reference_fn("linear_recurrence", dim, exclusive, reverse)(a, x),
                                     (a, x), g)
        torch.testing.assert_close(da, ra, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(dx, rx, rtol=1e-10, atol=1e-10)


@device_p
@flags_p
def test_linear_recurrence_one_input_requires_grad(device, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    shape, dim = (3, 20), 1
    a, x = make_inputs("linear_recurrence", shape, dim, device, gen, requires_grad=False)
    g = torch.randn(shape, dtype=f64, generator=gen, device=device)
    ref = reference_fn("linear_recurrence", dim, exclusive, reverse)
    # only x
    xr = x.clone().requires_grad_()
    (dx,) = torch.autograd.grad(ops.linear_recurrence(a, xr, dim, exclusive=exclusive, reverse=reverse), xr, g)
    (rx,) = torch.autograd.grad(ref(a, xr), xr, g)
    torch.testing.assert_close(dx, rx, rtol=1e-10, atol=1e-10)
    # only a
    ar = a.clone().requires_grad_()
    (da,) = torch.autograd.grad(ops.linear_recurrence(ar, x, dim, exclusive=exclusive, reverse=reverse), ar, g)
    (ra,) = torch.autograd.grad(ref(ar, x), ar, g)
    torch.testing.assert_close(da, ra, rtol=1e-10, atol=1e-10)
    assert gradcheck(lambda x_: ops.linear_recurrence(a, x_, dim, exclusive=exclusive, reverse=reverse),
                     (x.clone().requires_grad_(),))
    assert gradgradcheck(lambda a_: ops.linear_recurrence(a_, x, dim, exclusive=exclusive, reverse=reverse),
                         (a.clone().requires_grad_(),))


# ------------------------------------------------------------------------------------------
# masked_cumsum: gradient wrt self only
# ------------------------------------------------------------------------------------------

@device_p
@flags_p
@pytest.mark.parametrize("mask_shape", [(4, 9), (9,), (4, 1), ()], ids=lambda s: "m" + "x".join(map(str, s)))
def test_masked_cumsum_gradient(device, mask_shape, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    x = torch.randn(4, 9, dtype=f64, generator=gen, device=device, requires_grad=True)
    mask = rand_data("mask", mask_shape, torch.bool, device, gen)
    fn = scanops_fn("masked_cumsum", 1, exclusive, reverse, mask)
    assert gradcheck(fn, (x,), nondet_tol=_nondet(device))
    assert gradgradcheck(fn, (x,), nondet_tol=_nondet(device))
    g = torch.randn(4, 9, dtype=f64, generator=gen, device=device)
    (dx,) = torch.autograd.grad(fn(x), x, g)
    # closed form: cumsum(g; exclusive, !reverse) * mask; zero where the mask is False
    want = scan_ref("sum", g, 1, exclusive, not reverse) * mask
    torch.testing.assert_close(dx, want, rtol=1e-12, atol=1e-12)
    assert (dx[~mask.expand(4, 9)] == 0).all()


# ------------------------------------------------------------------------------------------
# dtype= argument and non-differentiable results
# ------------------------------------------------------------------------------------------

@device_p
@flags_p
@pytest.mark.parametrize("op", SCAN_OPS)
@pytest.mark.parametrize("src,dst", [(f32, f64), (f64, f32), (f16, f32), (bf16, f64)],
                         ids=lambda d: dtype_id(d))
def test_dtype_argument_gradient(device, op, src, dst, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    shape, dim = (3, 17), 1
    role = "prod" if op == "cumprod" else "sum"
    x = rand_data(role, shape, src, device, gen, 17).requires_grad_()
    mask = rand_data("mask", shape, torch.bool, device, gen)
    out = scanops_fn(op, dim, exclusive, reverse, mask, dtype=dst)(x)
    assert out.dtype == dst and out.requires_grad
    g = torch.randn(shape, dtype=dst, generator=gen, device=device)
    (dx,) = torch.autograd.grad(out, x, g)
    assert dx.dtype == src, "gradient must come back in the input's dtype"
    x64 = x.detach().to(dst).double().requires_grad_()
    (want,) = torch.autograd.grad(reference_fn(op, dim, exclusive, reverse, mask)(x64), x64, g.double())
    eps = max(torch.finfo(src).eps, torch.finfo(dst).eps)
    scale = want.abs().mean() + want.abs()
    assert ((dx.double() - want).abs() <= 8 * eps * scale + 1e-12).all(), (dx, want)


@device_p
def test_dtype_argument_gradcheck(device, seed):
    """float64 input scanned as float64 via dtype= (no-op conversion) and float64->float32->
    float64 round trips keep gradcheck exact in float64."""
    gen = make_gen(seed, device)
    x = torch.randn(3, 6, dtype=f64, generator=gen, device=device, requires_grad=True)
    for op in SCAN_OPS:
        mask = rand_data("mask", (3, 6), torch.bool, device, gen)
        assert gradcheck(scanops_fn(op, 1, True, True, mask, dtype=f64), (x,))


@device_p
@pytest.mark.parametrize("op", SCAN_OPS)
def test_integral_results_not_differentiable(device, op, seed):
    gen = make_gen(seed, device)
    x = torch.randn(4, 6, generator=gen, device=device, requires_grad=True)
    mask = rand_data("mask", (4, 6), torch.bool, device, gen)
    for dt in (torch.int64, torch.int32, torch.int8, torch.uint8):
        out = scanops_fn(op, 1, False, False, mask, dtype=dt)(x)
        assert out.dtype == dt and not out.requires_grad and out.grad_fn is None
    for in_dt in (torch.int32, torch.int64, torch.bool, torch.uint8):
        xi = torch.randint(0, 3, (4, 6), generator=gen, device=device).to(in_dt)
        out = scanops_fn(op, 1, True, True, mask)(xi)
        assert out.dtype == torch.int64 and not out.requires_grad
    # A float result of the same graph still differentiates.
    y = scanops_fn(op, 1, False, False, mask)(x)
    assert y.requires_grad
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


@device_p
@pytest.mark.parametrize("op", OPS)
def test_zero_dim_and_empty_gradients(device, op, seed):
    gen = make_gen(seed, device)
    for shape, dim in [((), 0), ((0,), 0), ((3, 0), 1), ((0, 3), 1)]:
        inputs = make_inputs(op, shape, dim, device, gen)
        mask = torch.ones(shape, dtype=torch.bool, device=device)
        for e, r in FLAGS:
            out = scanops_fn(op, dim, e, r, mask)(*inputs)
            grads = torch.autograd.grad(out, inputs, torch.ones_like(out), allow_unused=True)
            for gg, t in zip(grads, inputs):
                assert gg is not None and gg.shape == t.shape and gg.dtype == t.dtype
            if len(shape) == 0:
                want = reference_fn(op, dim, e, r, mask)(*inputs)
                wgrads = torch.autograd.grad(want, inputs, torch.ones_like(want), allow_unused=True)
                for gg, ww in zip(grads, wgrads):
                    ww = torch.zeros_like(gg) if ww is None else ww
                    torch.testing.assert_close(gg, ww)
