"""logcumsumexp's backward: one rule for special values on every path, and the accuracy of its
low-precision gradients (docs/ops.md, "logcumsumexp"; registration/autograd.cpp).

Paths: the fused backward (real dtypes, no graph recorded), the composite formula
(``create_graph=True``), complex inputs; float16 / bfloat16 run either path in float32.
CPU and CUDA (skipped without a GPU).

* NaN in the incoming gradient: a NaN in ``g[k]`` makes NaN exactly the ``dx[j]`` it reaches
  (the ``j`` whose element output ``k`` includes: ``k`` at or after ``j`` in scan order,
  strictly after for exclusive scans), as cumsum's backward does; every other ``dx[j]`` is
  the gradient of the same input with that NaN replaced by anything. torch's formula drops
  NaN gradients (``g > 0`` and ``g < 0`` are both false for NaN): scanops differs on purpose.
* An element that reaches no output (an exclusive scan's last element in scan order, all of a
  length-1 exclusive line, a 0-dim exclusive input) gets exactly 0, whatever ``x`` and ``g``
  hold there (``+inf``, NaN), and so does its second derivative.
* Accuracy: on PyTorch's OpInfo samples for logcumsumexp and on long lines, every flag, the
  error of scanops' gradient against an extended-precision reference is no worse than that
  of torch's own gradient (torch.logcumsumexp composed with flip / shift for the flags) in
  the same dtype.

The reference (``ref_grad``) is the definition evaluated in numpy's long double (x86-64: 64
significant bits; the float64 comparisons skip where long double is no wider than double):
``dx[j] = conj(exp(x[j] - m)) * sum_k g[k] / conj(S[k])``, ``S[k]`` the sum of ``exp(x[i] -
m)`` over the inputs of output ``k`` and ``m`` the line's largest real part (long double's
exponent range, to 1e+-4932, holds every ``exp`` these data need). For real data ``S`` is a
sum of positive terms and every ``|g[k]| exp(x[j] - y[k]) <= |g[k]|``, so its error is below
``n * 1e-19 * max|g|``, far under float64's rounding of the result.
"""
from __future__ import annotations

import sys
import types
import unittest

import numpy as np
import pytest
import torch

from reference import FLAG_IDS, FLAGS, dtype_id, make_gen, needs_cuda, ops

DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
device_p = pytest.mark.parametrize("device", DEVICES)
flags_p = pytest.mark.parametrize("exclusive,reverse", FLAGS, ids=FLAG_IDS)
f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
c64, c128 = torch.complex64, torch.complex128
ALL_DTYPES = [f64, f32, f16, bf16, c128, c64]
WIDE_LONG_DOUBLE = np.finfo(np.longdouble).eps < 1e-18
INF, NAN = float("inf"), float("nan")


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------

def _lcse(x, dim, exclusive, reverse):
    return ops.logcumsumexp(x, dim, exclusive=exclusive, reverse=reverse)


def _torch_lcse(x, dim, exclusive, reverse):
    """torch.logcumsumexp composed with flip / shift for the flags (in x's dtype)."""
    if x.dim() == 0:
        return torch.full_like(x, -INF) + 0 * x if exclusive else torch.logcumsumexp(x, 0)
    n = x.shape[dim]
    xs = x.flip(dim) if reverse else x
    y = torch.logcumsumexp(xs, dim)
    if exclusive:
        y = torch.cat([torch.full_like(y.narrow(dim, 0, 1), -INF), y.narrow(dim, 0, n - 1)], dim)
    return y.flip(dim) if reverse else y


def grad_of(fn, x, g, create_graph=False):
    x = x.detach().requires_grad_()
    (dx,) = torch.autograd.grad(fn(x), x, g, create_graph=create_graph)
    return dx.detach()


def reference(x, g, dim, exclusive, reverse):
    """The gradient by its definition in long double (see the module's docstring), as float64
    / complex128 tensors: (grad, bound, ymax). bound[j] = sum of |g[k] exp(x[j] - y[k])| over
    the outputs k that x[j] reaches (a bound on every term of dx[j]); ymax = max |y[k]| over
    the finite outputs. NaN where an output that an element reaches is a sum of nothing but
    zeros (an all -inf prefix)."""
    cplx = x.is_complex() or g.is_complex()
    ld = np.clongdouble if cplx else np.longdouble
    wide = c128 if cplx else f64
    xs = x.detach().cpu().to(wide).numpy().astype(ld)
    gs = g.detach().cpu().to(wide).numpy().astype(ld)

    def back(a, real=False):
        return torch.from_numpy(np.asarray(a).astype(np.float64 if real or not cplx
                                                      else np.complex128))

    if xs.ndim == 0:
        out = np.zeros_like(gs) if exclusive else gs
        ymax = 0.0 if exclusive or not np.isfinite(xs) else float(abs(xs))
        return back(out), back(np.abs(out), real=True), ymax
    xs, gs = np.moveaxis(xs, dim, -1), np.moveaxis(gs, dim, -1)
    if reverse:
        xs, gs = xs[..., ::-1], gs[..., ::-1]
    m = np.max(xs.real, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    ex = np.exp(xs - m)
    s = np.cumsum(ex, axis=-1)
    outs = []
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        logs = np.log(s) + m
        ymax = np.abs(logs[np.isfinite(logs)]).max(initial=0.0)
        if exclusive:
            ymax = np.abs(logs[..., :-1][np.isfinite(logs[..., :-1])]).max(initial=0.0)
        for e, gg, ss in ((ex, gs, s), (np.abs(ex), np.abs(gs), np.abs(s))):
            if exclusive:  # output k + 1 holds the inputs up to k; the last input reaches none
                t = np.zeros_like(gg)
                t[..., :-1] = gg[..., 1:] / np.conj(ss[..., :-1])
            else:
                t = gg / np.conj(ss)
            r = np.cumsum(t[..., ::-1], axis=-1)[..., ::-1]  # the outputs at or after j
            out = np.conj(e) * r
            if exclusive:
                out[..., -1] = 0
            if reverse:
                out = out[..., ::-1]
            outs.append(np.ascontiguousarray(np.moveaxis(out, -1, dim)))
    return back(outs[0]), back(outs[1], real=True), float(ymax)


def ref_grad(x, g, dim, exclusive, reverse):
    return reference(x, g, dim, exclusive, reverse)[0]


def max_err(got, ref):
    """max |got - ref| over the elements where the reference is finite (complex: modulus)."""
    fin = torch.isfinite(ref)
    if not fin.any():
        return 0.0
    return (got.cpu().to(ref.dtype) - ref)[fin].abs().max().item()


def eps_of(dtype):
    return torch.finfo(dtype).eps


# ------------------------------------------------------------------------------------------
# NaN in the incoming gradient: NaN exactly where it reaches, on every path
# ------------------------------------------------------------------------------------------

def reached(nan_at, dim, exclusive, reverse):
    """Bool mask: the dx[j] that a NaN at the True positions of nan_at reaches."""
    along = nan_at.movedim(dim, -1).to(torch.int64)
    if reverse:
        along = along.flip(-1)
    # the number of NaNs at or after j in scan order (after j: exclusive)
    after = along.flip(-1).cumsum(-1).flip(-1)
    if exclusive:
        after = after - along
    hit = after > 0
    if reverse:
        hit = hit.flip(-1)
    return hit.movedim(-1, dim)


def finite_data(shape, dtype, gen):
    """Real data: 2 randn; complex: phases in [-1, 1] (well-conditioned partial sums)."""
    re = 2 * torch.randn(shape, dtype=f64, generator=gen)
    if dtype.is_complex:
        im = torch.rand(shape, dtype=f64, generator=gen) * 2 - 1
        return torch.complex(re, im).to(dtype)
    return re.to(dtype)


def tol(dtype):
    """For comparing a gradient with ref_grad on short lines of well-conditioned data."""
    return {f64: 1e-12, c128: 1e-12, f32: 1e-5, c64: 1e-5, f16: 4e-3, bf16: 3e-2}[dtype]


@device_p
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("create_graph", [False, True], ids=["plain", "create_graph"])
@flags_p
def test_nan_gradient_reaches_what_it_reaches(device, dtype, create_graph, exclusive, reverse,
                                              seed):
    gen = make_gen(seed, "cpu")
    for shape, dim in [((5, 9), 1), ((9, 5), 0), ((2, 3, 9), -1)]:
        n = shape[dim]
        x = finite_data(shape, dtype, gen)
        g = finite_data(shape, dtype, gen)
        # NaN positions along dim, one pattern per line: first / last in scan order, the
        # middle, two of them, none (the first in scan order of an exclusive scan feeds the
        # identity output, which includes no element: it reaches nothing)
        nan_at = torch.zeros(shape, dtype=torch.bool).movedim(dim, -1)
        lines = nan_at.reshape(-1, n)
        patterns = [[0], [n - 1], [n // 2], [1, n - 3], []]
        for i in range(lines.shape[0]):
            lines[i, patterns[i % len(patterns)]] = True
        nan_at = lines.reshape(nan_at.shape).movedim(-1, dim)
        nan_value = complex(NAN, 0.0) if dtype.is_complex else NAN
        if dtype.is_complex:  # a NaN in the imaginary part only, too
            g = torch.where(nan_at & (torch.rand(shape, generator=gen) < 0.5),
                            torch.tensor(complex(1.0, NAN), dtype=dtype), g)
        g = torch.where(nan_at & ~g.isnan(), torch.tensor(nan_value, dtype=dtype), g)
        got = grad_of(lambda t: _lcse(t, dim, exclusive, reverse), x.to(device), g.to(device),
                      create_graph).cpu()
        want_nan = reached(nan_at, dim, exclusive, reverse)
        assert torch.equal(got.isnan(), want_nan), (shape, got.isnan(), want_nan)
        # elsewhere: the gradient of the same data with the NaN replaced by 0
        ref = ref_grad(x, torch.where(nan_at, torch.zeros((), dtype=dtype), g), dim, exclusive,
                       reverse)
        assert torch.isfinite(got[~want_nan]).all()
        scale = 1 + ref.abs().max().item()
        assert max_err(got[~want_nan], ref[~want_nan]) <= tol(dtype) * scale, shape


@pytest.mark.parametrize("create_graph", [False, True], ids=["plain", "create_graph"])
def test_nan_gradient_issue_example(create_graph):
    """The example of issue 32: x = [0.5, 1, 2], g = [1, nan, 1]: NaN for the first two
    (reached by g[1]), exp(2 - y[2]) for the last (torch: [1.1402, 0.2312, 0.6285])."""
    x = torch.tensor([0.5, 1.0, 2.0], dtype=f64)
    g = torch.tensor([1.0, NAN, 1.0], dtype=f64)
    got = grad_of(lambda t: _lcse(t, 0, False, False), x, g, create_graph)
    assert got[:2].isnan().all()
    want = torch.exp(x[2] - torch.logsumexp(x, 0))
    torch.testing.assert_close(got[2], want, rtol=1e-14, atol=0)


# ------------------------------------------------------------------------------------------
# An element that reaches no output: exactly 0, also under double backward
# ------------------------------------------------------------------------------------------

@device_p
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("create_graph", [False, True], ids=["plain", "create_graph"])
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("last", ["+inf", "nan", "finite"])
def test_unreached_element_gets_zero(device, dtype, create_graph, reverse, last, seed):
    gen = make_gen(seed, "cpu")
    special = {"+inf": INF, "nan": NAN, "finite": 3.0}[last]
    for shape, dim in [((4, 7), 1), ((7, 4), 0), ((3, 1), 1), ((1, 3), 0)]:
        n = shape[dim]
        at_last = 0 if reverse else n - 1
        x = finite_data(shape, dtype, gen)
        x.narrow(dim, at_last, 1).fill_(special)
        g = finite_data(shape, dtype, gen)
        # and a NaN gradient of the identity output (the first in scan order, which includes
        # no element): it reaches nothing either
        g.narrow(dim, n - 1 - at_last, 1).fill_(NAN)
        xd = x.to(device).requires_grad_()
        y = _lcse(xd, dim, True, reverse)
        (dx,) = torch.autograd.grad(y, xd, g.to(device), create_graph=create_graph)
        unreached = dx.detach().cpu().narrow(dim, at_last, 1)
        assert (unreached == 0).all(), (shape, unreached)
        ref = ref_grad(x, g, dim, True, reverse)
        scale = 1 + ref[torch.isfinite(ref)].abs().max().item()
        assert max_err(dx.detach(), ref) <= tol(dtype) * scale, shape
        assert torch.isfinite(dx.detach()).all(), shape
        if create_graph:
            v = finite_data(shape, dtype, gen).to(device)
            (d2,) = torch.autograd.grad((dx * v).sum().real, xd)
            assert torch.isfinite(d2).all(), (shape, d2)
            assert (d2.cpu().narrow(dim, at_last, 1) == 0).all(), (shape, d2)


@device_p
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("create_graph", [False, True], ids=["plain", "create_graph"])
def test_zero_dim_exclusive_gets_zero(device, dtype, create_graph):
    for value in (INF, NAN, 1.5):
        x = torch.tensor(value, dtype=dtype, device=device)
        g = torch.tensor(NAN, dtype=dtype, device=device)
        dx = grad_of(lambda t: _lcse(t, 0, True, False), x, g, create_graph)
        assert dx.item() == 0
        dx = grad_of(lambda t: _lcse(t, 0, False, False), x, g, create_graph)
        assert torch.isnan(dx).item()  # inclusive: dx = g


# ------------------------------------------------------------------------------------------
# Accuracy against torch, both against the long-double reference
# ------------------------------------------------------------------------------------------

try:  # torch.testing._internal imports expecttest, a test-only dependency of PyTorch
    import expecttest  # noqa: F401
except ImportError:  # pragma: no cover
    _shim = types.ModuleType("expecttest")
    _shim.TestCase = unittest.TestCase
    sys.modules.setdefault("expecttest", _shim)


def opinfo_samples(device, dtype, seed):
    """(x, dim) of PyTorch's OpInfo samples for logcumsumexp, drawn under a fixed seed."""
    from torch.testing._internal.common_methods_invocations import op_db
    (info,) = [o for o in op_db if o.name == "logcumsumexp"]
    with torch.random.fork_rng(devices=[]):  # (drawn on the CPU: the same data everywhere)
        torch.manual_seed(seed)
        samples = list(info.sample_inputs("cpu", dtype, requires_grad=False))
    out = []
    for s in samples:
        (dim,) = s.args
        assert not s.kwargs
        out.append((s.input.detach().to(device), dim))
    return out


def errors(x, g, dim, exclusive, reverse):
    """Max errors against the reference of torch's gradient, scanops' (fused: no graph
    recorded) and scanops' with create_graph=True, and the reference itself."""
    ref = reference(x, g, dim, exclusive, reverse)
    theirs = grad_of(lambda t: _torch_lcse(t, dim, exclusive, reverse), x, g)
    ours = grad_of(lambda t: _lcse(t, dim, exclusive, reverse), x, g)
    ours_cg = grad_of(lambda t: _lcse(t, dim, exclusive, reverse), x, g, True)
    return max_err(theirs, ref[0]), max_err(ours, ref[0]), max_err(ours_cg, ref[0]), ref


def allowed(dtype, err_torch, ref):
    """The error scanops may have where torch's is err_torch (see SLACK)."""
    grad, bound, ymax = ref
    real = dtype.to_real() if dtype.is_complex else dtype
    work = f32 if real in (f16, bf16) else real  # the precision scanops computes in
    fin = torch.isfinite(grad)
    top = grad[fin].abs().max().item() if fin.any() else 0.0
    rounding = eps_of(real) / 2 * top
    noise = eps_of(work) * (2 + ymax) * (bound[fin].max().item() if fin.any() else 0.0)
    return (1 + SLACK) * max(err_torch, rounding) + noise


# scanops' gradient error may exceed torch's by SLACK (relative) plus a noise term, both
# against the long-double reference:
#   err_scanops <= (1 + SLACK) * max(err_torch, eps/2 * max|dx|)
#                  + eps_w * (2 + max|y|) * max_j sum_k |g[k] exp(x[j] - y[k])|.
# * eps/2 * max|dx| (eps of the gradient's dtype): the rounding of the result to its dtype,
#   which no method avoids; torch's error can fall below it only by luck.
# * the noise term (eps_w: the precision scanops computes in, float32 for float16 and
#   bfloat16): either method works from y, whose rounding (|y| eps_w / 2) makes every factor
#   exp(x[j] - y[k]) off by up to ~|y| eps_w relative, plus a few roundings of its own (the 2);
#   no formula undoes that, so where both errors sit at this floor (float32, float64, complex)
#   which one is smaller is chance: e.g. with create_graph, float64 near x = 10000 (|y| eps =
#   2.2e-12), 4.4e-12 where torch erred 1.3e-12 on one draw, less than torch on others. In
#   float16 / bfloat16 the term is 2^13 / 2^16 times smaller than the dtype's eps: it leaves
#   the comparison with torch's error intact where it matters.
# * SLACK = 0.1: measured on the CPU with SLACK = 0 over 12 draws of the OpInfo samples and 3
#   of the long lines (every flag), scanops' largest error was 0.49 of the allowance
#   (complex128, where scanops' and torch's gradients are the same bits), 0.40 in float32 /
#   float64, 0.24 in float16 / bfloat16; before float16 / bfloat16 ran in float32 it was 2.8
#   (bfloat16 4.13 where torch erred 1.48) and 2.65 (float16, create_graph, a 2^16 line). The
#   10% is for CUDA, whose scans associate differently from the CPU's and torch's.
SLACK = 0.1
ACC_DTYPES = [f16, bf16, f32, f64, c64, c128]


def _check_accuracy(what, dtype, x, g, dim, exclusive, reverse):
    err_torch, err, err_cg, ref = errors(x, g, dim, exclusive, reverse)
    limit = allowed(dtype, err_torch, ref)
    ctx = (f"{what} {dtype_id(dtype)} dim={dim} exclusive={exclusive} reverse={reverse}: "
           f"torch {err_torch:.3g}, scanops {err:.3g}, with create_graph {err_cg:.3g}, "
           f"allowed {limit:.3g}")
    assert err <= limit and err_cg <= limit, ctx


@device_p
@pytest.mark.parametrize("dtype", ACC_DTYPES, ids=dtype_id)
def test_opinfo_samples_accuracy(device, dtype, seed):
    """PyTorch's OpInfo samples for logcumsumexp (two draws, every flag), with a random g."""
    if dtype in (f64, c128) and not WIDE_LONG_DOUBLE:
        pytest.skip("long double is no wider than double here: no float64 reference")
    gen = make_gen(seed, "cpu")
    n = 0
    for draw in range(2):
        for x, dim in opinfo_samples(device, dtype, seed + draw):
            g = torch.randn(x.shape, dtype=f64, generator=gen).to(dtype).to(device)
            for exclusive, reverse in FLAGS:
                _check_accuracy(f"OpInfo sample {tuple(x.shape)}", dtype, x, g, dim, exclusive,
                                reverse)
                n += 1
    assert n >= 24  # (6 samples a draw in torch 2.11)


@device_p
@pytest.mark.parametrize("dtype", [f16, bf16, f32, f64], ids=dtype_id)
@pytest.mark.parametrize("shape,dim", [((1 << 16,), 0), ((8, 4096), 1), ((4096, 8), 0)],
                         ids=["1d-65536", "rows-8x4096", "cols-4096x8"])
def test_long_lines_accuracy(device, dtype, shape, dim, seed):
    if dtype == f64 and not WIDE_LONG_DOUBLE:
        pytest.skip("long double is no wider than double here: no float64 reference")
    gen = make_gen(seed, "cpu")
    x = (3 * torch.randn(shape, dtype=f64, generator=gen)).to(dtype).to(device)
    g = torch.randn(shape, dtype=f64, generator=gen).to(dtype).to(device)
    for exclusive, reverse in FLAGS:
        _check_accuracy(f"line {shape}", dtype, x, g, dim, exclusive, reverse)
