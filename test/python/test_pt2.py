"""PT2: torch.library.opcheck, meta / fake tensors, torch.compile (fullgraph, forward and
backward, dynamic shapes), torch.export, and CUDA graph capture of forward + backward."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from reference import (DEVICES, FLAGS, OPS, check_op, make_gen, needs_cuda, ops,
                       rand_data, result_dtype)

f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
device_p = pytest.mark.parametrize("device", DEVICES)


# ------------------------------------------------------------------------------------------
# opcheck
# ------------------------------------------------------------------------------------------

def _samples(op, device, gen):
    """(args, kwargs) samples for an op: dtypes, flags, dtype=, grads, layouts, 0-dim, empty."""
    def rn(*shape, dtype=f32, grad=False, role="sum"):
        t = rand_data(role, shape, dtype, device, gen, shape[-1] if shape else 1)
        return t.requires_grad_(grad)

    def mask(*shape):
        return rand_data("mask", shape, torch.bool, device, gen)

    if op == "linear_recurrence":
        def coef(*shape, dtype=f64, grad=True):
            return rand_data("coef", shape, dtype, device, gen, 8).requires_grad_(grad)
        return [
            ((coef(3, 8), rn(3, 8, dtype=f64, grad=True), 1), {}),
            ((coef(3, 8), rn(3, 8, dtype=f64, grad=True), 0), {"exclusive": True, "reverse": True}),
            ((coef(1, 8), rn(4, 8, dtype=f64, grad=True), -1), {"reverse": True}),
            ((coef(4, 1, dtype=f32), rn(4, 8, grad=True), 1), {"exclusive": True}),
            ((coef(8, 4, grad=False).t(), rn(4, 8, dtype=f64, grad=True), 1), {}),
            ((coef(), rn(dtype=f64, grad=True), 0), {"exclusive": False}),
            ((coef(2, 8, dtype=bf16, grad=False), rn(2, 8, dtype=bf16), 1), {"reverse": True}),
            ((coef(0, 3, grad=False), rn(0, 3, dtype=f64), 1), {}),
        ]
    role = "prod" if op == "cumprod" else "sum"
    xs = [
        ((rn(3, 8, role=role), 1), {}),
        ((rn(3, 5, 4, dtype=f64, grad=True, role=role), -1), {"exclusive": True, "reverse": True}),
        ((rn(6, 4, dtype=f64, grad=True, role=role).t(), 0), {"reverse": True}),
        ((rn(4, 6, grad=True, role=role), 1), {"dtype": f64, "exclusive": True}),
        ((torch.randint(-3, 4, (4, 6), generator=gen, device=device, dtype=torch.int32), 0), {}),
        ((torch.randint(-3, 4, (4, 6), generator=gen, device=device).to(torch.int8), 1),
         {"dtype": f32, "reverse": True}),
        ((rn(dtype=f64, grad=True, role=role), 0), {"exclusive": True}),
        ((rn(0, 3, role=role), 1), {}),
        ((rn(5, 7, dtype=f16, role=role), 1), {"dtype": torch.int64}),
        ((mask(4, 9), -1), {}),
    ]
    if op == "masked_cumsum":
        out = []
        for (args, kw) in xs:
            x = args[0]
            shapes = [tuple(x.shape)]
            if x.dim() >= 2:
                shapes.append(tuple(x.shape[-1:]))  # broadcast mask
            m = mask(*shapes[len(out) % len(shapes)])
            out.append(((x, m) + args[1:], kw))
        return out
    return xs


@device_p
@pytest.mark.parametrize("op", OPS)
def test_opcheck(device, op, seed):
    gen = make_gen(seed, device)
    overload = getattr(ops, op).default
    for args, kwargs in _samples(op, device, gen):
        torch.library.opcheck(overload, args, kwargs, raise_exception=True)


def test_ops_are_pt2_compliant():
    for op in OPS:
        assert torch.Tag.pt2_compliant_tag in getattr(ops, op).default.tags, op


# ------------------------------------------------------------------------------------------
# Meta and fake tensors
# ------------------------------------------------------------------------------------------

META_CASES = [((3, 5), 1, f32, None), ((3, 5), -2, f64, None), ((2, 3, 4), 1, torch.int8, None),
              ((2, 3, 4), 2, torch.bool, None), ((7,), 0, f16, f32), ((7, 2), 0, torch.int32, bf16),
              ((), 0, f32, None), ((), -1, torch.uint8, torch.int16), ((0, 4), 1, bf16, None),
              ((4, 0), 1, torch.int64, f64)]


META_PARAMS = [(op,) + c for op in OPS for c in META_CASES
               if op != "linear_recurrence" or (c[2].is_floating_point and c[3] is None)]


@pytest.mark.parametrize("op,shape,dim,dtype,dtype_arg", META_PARAMS)
def test_meta_tensors(op, shape, dim, dtype, dtype_arg):
    # A non-contiguous meta input: the result is still contiguous.
    x = torch.empty(tuple(reversed(shape)), dtype=dtype, device="meta").permute(
        tuple(reversed(range(len(shape)))))
    m = torch.empty(shape, dtype=torch.bool, device="meta")
    a = torch.empty(shape[-1:] if shape else (), dtype=dtype, device="meta")
    for e, r in FLAGS:
        kw = dict(exclusive=e, reverse=r)
        if dtype_arg is not None:
            kw["dtype"] = dtype_arg
        if op == "cumsum":
            y = ops.cumsum(x, dim, **kw)
        elif op == "masked_cumsum":
            y = ops.masked_cumsum(x, m, dim, **kw)
        elif op == "cumprod":
            y = ops.cumprod(x, dim, **kw)
        else:
            y = ops.linear_recurrence(a, x, dim, **kw)
        assert y.device.type == "meta"
        assert tuple(y.shape) == tuple(shape)
        assert y.dtype == result_dtype(op, dtype, dtype_arg)
        assert y.is_contiguous()


def test_meta_errors_match_real():
    x = torch.empty(3, 4, device="meta")
    with pytest.raises(RuntimeError, match=r"scanops\.cumsum.*'dim'"):
        ops.cumsum(x, 2)
    with pytest.raises(RuntimeError, match=r"scanops\.masked_cumsum.*'mask'"):
        ops.masked_cumsum(x, torch.empty(5, dtype=torch.bool, device="meta"), 1)
    with pytest.raises(RuntimeError, match=r"scanops\.cumprod.*'dtype'"):
        ops.cumprod(x, 1, dtype=torch.bool)
    with pytest.raises(RuntimeError, match=r"scanops\.linear_recurrence.*'a'"):
        ops.linear_recurrence(torch.empty(3, 4, dtype=f64, device="meta"), x, 1)


@device_p
def test_fake_tensors(device):
    with FakeTensorMode():
        x = torch.empty(6, 10, device=device)
        xi = torch.empty(6, 10, dtype=torch.int16, device=device)
        m = torch.empty(10, dtype=torch.bool, device=device)
        a = torch.empty(6, 1, device=device)
        outs = [ops.cumsum(x, 1, exclusive=True), ops.cumsum(xi, 0),
                ops.masked_cumsum(x, m, -1, dtype=f64), ops.cumprod(xi, 1, dtype=f16),
                ops.linear_recurrence(a, x, 1, reverse=True)]
        dtypes = [f32, torch.int64, f64, f16, f32]
        for y, dt in zip(outs, dtypes):
            assert tuple(y.shape) == (6, 10) and y.dtype == dt and y.device.type == device


# ------------------------------------------------------------------------------------------
# torch.compile
# ------------------------------------------------------------------------------------------

def all_ops_fn(x, m, a, xi):
    """Every op, with kwargs, dtype= and broadcast operands."""
    y1 = ops.cumsum(x, 1, exclusive=True)
    y2 = ops.masked_cumsum(x, m, 0, reverse=True)
    y3 = ops.cumprod(x, -1, exclusive=True, reverse=True)
    y4 = ops.linear_recurrence(a, x, 1)
    y5 = ops.cumsum(x, 0, dtype=torch.float64).to(x.dtype)
    y6 = ops.cumsum(xi, 1, reverse=True).to(x.dtype)  # integral, not differentiable
    y7 = ops.cumprod(xi, 0, dtype=x.dtype)
    return (y1 * 0.5 + y2.sin() + y3 + y4 * y1 + y5 - y6 * 0.01 + y7).sum(), (y1, y2, y3, y4, y5,
                                                                              y6, y7)


def _compile_inputs(device, gen, shape=(6, 9), dtype=f64):
    x = rand_data("prod", shape, dtype, device, gen, shape[1]).requires_grad_()
    m = rand_data("mask", shape[1:], torch.bool, device, gen)  # broadcast mask
    a = rand_data("coef", (shape[0], 1), dtype, device, gen, shape[1]).requires_grad_()
    xi = torch.randint(-2, 3, shape, generator=gen, device=device, dtype=torch.int32)
    return x, m, a, xi


def _check_against_eager(fn_compiled, inputs):
    x, m, a, xi = inputs
    loss_c, outs_c = fn_compiled(x, m, a, xi)
    gx_c, ga_c = torch.autograd.grad(loss_c, (x, a))
    loss_e, outs_e = all_ops_fn(x, m, a, xi)
    gx_e, ga_e = torch.autograd.grad(loss_e, (x, a))
    tol = dict(rtol=1e-10, atol=1e-10) if x.dtype == f64 else dict(rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(loss_c, loss_e, **tol)
    for oc, oe in zip(outs_c, outs_e):
        assert oc.dtype == oe.dtype and oc.shape == oe.shape
        torch.testing.assert_close(oc, oe, **tol)
    torch.testing.assert_close(gx_c, gx_e, **tol)
    torch.testing.assert_close(ga_c, ga_e, **tol)


class GraphRecorder:
    """A torch.compile backend that records the Dynamo graphs and runs them eagerly."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def test_compile_captures_ops_without_graph_breaks(seed):
    torch._dynamo.reset()
    rec = GraphRecorder()
    fn = torch.compile(all_ops_fn, backend=rec, fullgraph=True)
    inputs = _compile_inputs("cpu", make_gen(seed, "cpu"))
    _check_against_eager(fn, inputs)
    assert len(rec.graphs) == 1
    targets = {str(n.target) for n in rec.graphs[0].graph.nodes if n.op == "call_function"}
    for op in OPS:
        assert any(f"scanops.{op}" in t for t in targets), (op, targets)


@device_p
def test_compile_inductor_fullgraph_forward_backward(device, seed):
    torch._dynamo.reset()
    fn = torch.compile(all_ops_fn, fullgraph=True)  # inductor
    gen = make_gen(seed, device)
    _check_against_eager(fn, _compile_inputs(device, gen))
    # Fresh data, same shapes: no recompilation needed, still right.
    _check_against_eager(fn, _compile_inputs(device, gen))


@device_p
def test_compile_aot_eager_float32(device, seed):
    torch._dynamo.reset()
    fn = torch.compile(all_ops_fn, backend="aot_eager", fullgraph=True)
    _check_against_eager(fn, _compile_inputs(device, make_gen(seed, device), dtype=f32))


def _dynamic_inputs(device, gen, shape, grad):
    x, m, a, xi = _compile_inputs(device, gen, shape)
    if not grad:
        x, a = x.detach(), a.detach()
    return x, m, a, xi


def _forward_only(x, m, a, xi):
    return all_ops_fn(x, m, a, xi)[1]


@device_p
@pytest.mark.parametrize("backend,grad", [("aot_eager", False), ("aot_eager", True),
                                          ("inductor", False)])
def test_compile_dynamic_shapes(device, backend, grad, seed):
    """dynamic=True: one compilation serves every shape (the Meta kernels and the backward
    formulas must keep sizes symbolic), and results match eager."""
    torch._dynamo.reset()
    from torch._dynamo.testing import CompileCounterWithBackend
    counter = CompileCounterWithBackend(backend)
    gen = make_gen(seed, device)
    shapes = [(6, 9), (3, 17), (11, 4), (5, 30)]
    if grad:
        fn = torch.compile(all_ops_fn, backend=counter, fullgraph=True, dynamic=True)
        for shape in shapes:
            _check_against_eager(fn, _dynamic_inputs(device, gen, shape, grad))
    else:
        fn = torch.compile(_forward_only, backend=counter, fullgraph=True, dynamic=True)
        for shape in shapes:
            inputs = _dynamic_inputs(device, gen, shape, grad)
            for got, want in zip(fn(*inputs), _forward_only(*inputs)):
                assert got.dtype == want.dtype and got.shape == want.shape
                torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    assert counter.frame_count == 1, (
        f"torch.compile(dynamic=True) compiled {counter.frame_count} times for {len(shapes)} "
        "shapes: sizes were specialised")


@device_p
def test_compile_dynamic_backward_values(device, seed):
    """Forward + backward under dynamic=True give eager's values (whatever the recompiles)."""
    torch._dynamo.reset()
    fn = torch.compile(all_ops_fn, backend="aot_eager", fullgraph=True, dynamic=True)
    gen = make_gen(seed, device)
    for shape in [(6, 9), (3, 17), (2, 2)]:
        _check_against_eager(fn, _compile_inputs(device, gen, shape))


# ------------------------------------------------------------------------------------------
# torch.export
# ------------------------------------------------------------------------------------------

class ScanModule(torch.nn.Module):
    def forward(self, x, m, a, xi):
        return (ops.cumsum(x, 1, exclusive=True),
                ops.masked_cumsum(x, m, -1, reverse=True, dtype=torch.float64),
                ops.cumprod(x, 0, exclusive=True, reverse=True),
                ops.linear_recurrence(a, x, 1, reverse=True),
                ops.cumsum(xi, 0),
                ops.cumprod(xi, 1, dtype=torch.float32))


def _export_inputs(device, gen, rows=6, cols=9):
    x = rand_data("prod", (rows, cols), f32, device, gen, cols)
    m = rand_data("mask", (rows, cols), torch.bool, device, gen)
    a = rand_data("coef", (rows, cols), f32, device, gen, cols)
    xi = torch.randint(-3, 4, (rows, cols), generator=gen, device=device, dtype=torch.int16)
    return x, m, a, xi


def _compare_module_outputs(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.is_floating_point():
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(g, w)


@device_p
def test_export_and_run(device, seed, tmp_path):
    gen = make_gen(seed, device)
    mod = ScanModule()
    inputs = _export_inputs(device, gen)
    ep = torch.export.export(mod, inputs)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    for op in OPS:
        assert any(f"scanops.{op}" in t for t in targets), (op, targets)
    new = _export_inputs(device, gen)
    _compare_module_outputs(ep.module()(*new), mod(*new))
    # Checked against the references, not only against eager.
    x, m, a, xi = new
    outs = ep.module()(*new)
    check_op("cumsum", 1, True, False, x=x, got=outs[0])
    check_op("masked_cumsum", -1, False, True, x=x, mask=m, dtype=torch.float64, got=outs[1])
    check_op("cumprod", 0, True, True, x=x, got=outs[2])
    check_op("linear_recurrence", 1, False, True, x=x, a=a, got=outs[3])
    check_op("cumsum", 0, x=xi, got=outs[4])
    check_op("cumprod", 1, x=xi, dtype=torch.float32, got=outs[5])
    # Serialise / deserialise round trip.
    path = tmp_path / "scan.pt2"
    torch.export.save(ep, path)
    ep2 = torch.export.load(path)
    _compare_module_outputs(ep2.module()(*new), mod(*new))


@device_p
def test_export_dynamic_shapes(device, seed):
    gen = make_gen(seed, device)
    rows, cols = torch.export.Dim("rows", min=2, max=1024), torch.export.Dim("cols", min=2, max=4096)
    spec = {name: {0: rows, 1: cols} for name in ("x", "m", "a", "xi")}
    ep = torch.export.export(ScanModule(), _export_inputs(device, gen), dynamic_shapes=spec)
    for r, c in [(3, 5), (17, 300), (2, 2)]:
        new = _export_inputs(device, gen, r, c)
        _compare_module_outputs(ep.module()(*new), ScanModule()(*new))


# ------------------------------------------------------------------------------------------
# logcumsumexp, cummax, cummin and complex inputs: opcheck, compile, export
# ------------------------------------------------------------------------------------------

NEW_OPS = ("logcumsumexp", "cummax", "cummin")
c64, c128 = torch.complex64, torch.complex128


def _distinct(shape, gen, device, dtype=f64, grad=False):
    """Values at least 1 apart: max / min are differentiable there (no ties)."""
    n = 1
    for s in shape:
        n *= s
    v = torch.randperm(n, generator=gen).to(dtype) + 0.3 * torch.rand(n, generator=gen).to(dtype)
    return v.reshape(shape).to(device).requires_grad_(grad)


def _new_samples(op, device, gen):
    def rn(*shape, dtype=f64, grad=False):
        t = torch.randn(shape, generator=gen, dtype=f64).to(dtype) if not dtype.is_complex else \
            torch.complex(torch.randn(shape, generator=gen, dtype=f64),
                          torch.rand(shape, generator=gen, dtype=f64) * 2 - 1).to(dtype)
        return t.to(device).requires_grad_(grad)

    if op == "logcumsumexp":
        return [
            ((rn(3, 8, dtype=f32), 1), {}),
            ((rn(3, 5, 4, grad=True), -1), {"exclusive": True, "reverse": True}),
            ((rn(6, 4, grad=True).t(), 0), {"reverse": True}),
            ((rn(grad=True), 0), {"exclusive": True}),
            ((rn(0, 3), 1), {}),
            ((rn(5, 7, dtype=bf16), 1), {"exclusive": True}),
            ((rn(4, 6, dtype=c128, grad=True), 1), {"reverse": True}),
            ((rn(4, 6, dtype=c64), 0), {"exclusive": True}),
        ]
    return [
        ((_distinct((3, 8), gen, device, grad=True), 1), {}),
        ((_distinct((3, 5, 4), gen, device, grad=True), -1), {"exclusive": True, "reverse": True}),
        ((_distinct((6, 4), gen, device, grad=True).t(), 0), {"reverse": True}),
        ((torch.randint(-3, 4, (4, 6), generator=gen, dtype=torch.int32).to(device), 0), {}),
        ((torch.randint(0, 2, (4, 9), generator=gen).bool().to(device), -1), {"exclusive": True}),
        ((_distinct((), gen, device, grad=True), 0), {"exclusive": False}),
        ((rn(0, 3, dtype=f32), 1), {}),
        ((torch.randint(-2, 3, (5, 7), generator=gen).to(f16).to(device), 1), {"reverse": True}),
        ((torch.randint(0, 5, (5, 7), generator=gen, dtype=torch.uint8).to(device), 1),
         {"exclusive": True, "reverse": True}),
    ]


@device_p
@pytest.mark.parametrize("op", NEW_OPS)
def test_opcheck_new_ops(device, op, seed):
    gen = make_gen(seed, "cpu")
    overload = getattr(ops, op).default
    for args, kwargs in _new_samples(op, device, gen):
        torch.library.opcheck(overload, args, kwargs, raise_exception=True)


@device_p
def test_opcheck_complex(device, seed):
    gen = make_gen(seed, "cpu")

    def cz(*shape, dtype=c128, grad=True):
        t = torch.complex(torch.randn(shape, generator=gen, dtype=f64),
                          torch.randn(shape, generator=gen, dtype=f64)).to(dtype)
        return t.to(device).requires_grad_(grad)

    m = torch.rand(4, 6, generator=gen).lt(0.5).to(device)
    cases = [
        (ops.cumsum, (cz(4, 6), 1), {"exclusive": True}),
        (ops.cumsum, (cz(4, 6, dtype=c64, grad=False), 0), {"reverse": True}),
        (ops.cumsum, (torch.randn(4, 6, generator=gen).to(device), 1), {"dtype": c128}),
        (ops.cumprod, (cz(4, 6), 1), {"reverse": True}),
        (ops.cumprod, (cz(4, 6, dtype=c64, grad=False), 0), {"exclusive": True}),
        (ops.masked_cumsum, (cz(4, 6), m, 1), {"exclusive": True, "reverse": True}),
        (ops.linear_recurrence, (cz(4, 6), cz(4, 6), 1), {}),
        (ops.logcumsumexp, (cz(4, 6), 1), {}),
    ]
    for op, args, kwargs in cases:
        torch.library.opcheck(op.default, args, kwargs, raise_exception=True)


def test_new_ops_are_pt2_compliant():
    for op in NEW_OPS:
        assert torch.Tag.pt2_compliant_tag in getattr(ops, op).default.tags, op


@device_p
def test_fake_tensors_new_ops(device):
    with FakeTensorMode():
        x = torch.empty(6, 10, device=device)
        xc = torch.empty(6, 10, dtype=c64, device=device)
        xi = torch.empty(6, 10, dtype=torch.int16, device=device)
        y = ops.logcumsumexp(x, 1, exclusive=True)
        yc = ops.logcumsumexp(xc, 0)
        v, i = ops.cummax(xi, 0, reverse=True)
        w, j = ops.cummin(x, -1)
        assert y.dtype == f32 and yc.dtype == c64 and v.dtype == torch.int16 and w.dtype == f32
        assert i.dtype == j.dtype == torch.int64
        for t in (y, yc, v, i, w, j):
            assert tuple(t.shape) == (6, 10) and t.device.type == device


def family_fn(x):
    v, i = ops.cummax(x, 1)
    w, j = ops.cummin(x, 0, reverse=True)
    u, k = ops.cummax(x, -1, exclusive=True)  # -inf first: only indices / finite values used
    l1 = ops.logcumsumexp(x, 1, reverse=True)
    l2 = ops.logcumsumexp(x, 0, exclusive=True)  # -inf first
    loss = (v * l1 + w.sin() + l2.exp() + torch.where(k >= 0, u, 0.0)).sum()
    return loss, (v, i, w, j, u, k, l1, l2)


def _check_family_against_eager(fn_compiled, x):
    loss_c, outs_c = fn_compiled(x)
    (gx_c,) = torch.autograd.grad(loss_c, x)
    loss_e, outs_e = family_fn(x)
    (gx_e,) = torch.autograd.grad(loss_e, x)
    tol = dict(rtol=1e-10, atol=1e-10) if x.dtype == f64 else dict(rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(loss_c, loss_e, **tol)
    for oc, oe in zip(outs_c, outs_e):
        assert oc.dtype == oe.dtype and oc.shape == oe.shape
        if oc.dtype == torch.int64:
            assert torch.equal(oc, oe)
        else:
            torch.testing.assert_close(oc, oe, **tol)
    torch.testing.assert_close(gx_c, gx_e, **tol)
    # And eager against torch's own ops.
    tv, ti = torch.cummax(x.detach(), 1)
    assert torch.equal(outs_c[0], tv) and torch.equal(outs_c[1], ti)
    torch.testing.assert_close(outs_c[6], torch.logcumsumexp(x.detach().flip(1), 1).flip(1), **tol)


@device_p
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_new_ops(device, backend, seed):
    torch._dynamo.reset()
    rec = GraphRecorder()

    def recording(gm, example_inputs):
        rec(gm, example_inputs)
        if backend == "inductor":
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)
        from torch._dynamo.backends.debugging import aot_eager
        return aot_eager(gm, example_inputs)

    fn = torch.compile(family_fn, backend=recording, fullgraph=True)
    gen = make_gen(seed, "cpu")
    for dtype in (f64, f32):
        x = _distinct((6, 9), gen, device, dtype=dtype, grad=True)
        _check_family_against_eager(fn, x)
    assert rec.graphs, "nothing was compiled"
    targets = {str(n.target) for n in rec.graphs[0].graph.nodes if n.op == "call_function"}
    for op in NEW_OPS:
        assert any(f"scanops.{op}" in t for t in targets), (op, targets)


class FamilyModule(torch.nn.Module):
    def forward(self, x, xc):
        v, i = ops.cummax(x, 1, exclusive=True)
        w, j = ops.cummin(x, 0, reverse=True)
        return (v, i, w, j, ops.logcumsumexp(x, -1, exclusive=True, reverse=True),
                ops.cumsum(xc, 1), ops.cumprod(xc, 0, reverse=True))


def _family_inputs(device, gen, rows=6, cols=9):
    x = torch.randint(-3, 4, (rows, cols), generator=gen).to(f32).to(device)  # ties
    xc = torch.complex(torch.randn(rows, cols, generator=gen), torch.randn(rows, cols, generator=gen))
    return x, xc.to(device)


@device_p
def test_export_new_ops(device, seed, tmp_path):
    gen = make_gen(seed, "cpu")
    mod = FamilyModule()
    ep = torch.export.export(mod, _family_inputs(device, gen))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    for op in NEW_OPS + ("cumsum", "cumprod"):
        assert any(f"scanops.{op}" in t for t in targets), (op, targets)

    def compare(got, want):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            if g.dtype == torch.int64 or not (g.is_floating_point() or g.is_complex()):
                assert torch.equal(g, w)
            else:
                torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)

    new = _family_inputs(device, gen)
    compare(ep.module()(*new), mod(*new))
    path = tmp_path / "family.pt2"
    torch.export.save(ep, path)
    compare(torch.export.load(path).module()(*new), mod(*new))
    # dynamic shapes
    rows, cols = torch.export.Dim("rows", min=2, max=512), torch.export.Dim("cols", min=2, max=512)
    spec = {"x": {0: rows, 1: cols}, "xc": {0: rows, 1: cols}}
    ep2 = torch.export.export(mod, _family_inputs(device, gen), dynamic_shapes=spec)
    for r, c in [(3, 5), (17, 300)]:
        new = _family_inputs(device, gen, r, c)
        compare(ep2.module()(*new), mod(*new))


# ------------------------------------------------------------------------------------------
# CUDA graphs
# ------------------------------------------------------------------------------------------

@needs_cuda
@pytest.mark.parametrize("dtype", [f32, f64])
def test_cuda_graph_forward_backward(dtype, seed):
    gen = make_gen(seed, "cuda")
    shape = (64, 5000)

    def fresh():
        x = rand_data("prod", shape, dtype, "cuda", gen, shape[1])
        m = rand_data("mask", shape, torch.bool, "cuda", gen)
        a = rand_data("coef", shape, dtype, "cuda", gen, shape[1])
        xi = torch.randint(-2, 3, shape, generator=gen, device="cuda", dtype=torch.int32)
        g = torch.randn(shape, generator=gen, device="cuda", dtype=dtype)
        return x, m, a, xi, g

    def step(x, m, a, xi, g):
        y1 = ops.cumsum(x, 1, exclusive=True)
        y2 = ops.masked_cumsum(x, m, 0, reverse=True)
        y3 = ops.cumprod(x, 1, reverse=True)
        y4 = ops.linear_recurrence(a, x, 1, exclusive=True)
        y5 = ops.cumsum(xi, 1)
        out = y1 + y2 + y3 + y4 + y5.to(dtype)
        gx, ga = torch.autograd.grad(out, (x, a), g)
        return out, gx, ga

    static = list(fresh())
    static[0].requires_grad_()
    static[2].requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step(*static)
    for _ in range(3):
        new = fresh()
        with torch.no_grad():
            for s, n in zip(static, new):
                s.copy_(n)
        graph.replay()
        torch.cuda.synchronize()
        x = new[0].clone().requires_grad_()
        a = new[2].clone().requires_grad_()
        want = step(x, new[1], a, new[3], new[4])
        tol = dict(rtol=1e-10, atol=1e-10) if dtype == f64 else dict(rtol=1e-4, atol=1e-3)
        for got, w in zip(static_out, want):
            torch.testing.assert_close(got, w, **tol)
        # And the graph's forward is right in absolute terms, not only equal to eager.
        check_op("linear_recurrence", 1, True, False, x=new[0], a=new[2],
                 got=ops.linear_recurrence(new[2], new[0], 1, exclusive=True))


@needs_cuda
def test_compile_reduce_overhead_cuda(seed):
    torch._dynamo.reset()
    fn = torch.compile(all_ops_fn, mode="reduce-overhead", fullgraph=True)
    gen = make_gen(seed, "cuda")
    for _ in range(3):  # warm-up, record, replay
        _check_against_eager(fn, _compile_inputs("cuda", gen, dtype=f32))
