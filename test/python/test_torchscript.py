"""TorchScript: scripted modules / functions calling torch.ops.scanops.* (keyword arguments,
dtype=, flags as run-time values), run, save / load round trip, autograd through them."""
from __future__ import annotations

from typing import List, Optional, Tuple

import pytest
import torch

from reference import DEVICES, FLAGS, check_op, make_gen, ops, rand_data

device_p = pytest.mark.parametrize("device", DEVICES)
f32, f64 = torch.float32, torch.float64


class ScanModule(torch.nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor, m: torch.Tensor, a: torch.Tensor,
                xi: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                           torch.Tensor, torch.Tensor]:
        y1 = torch.ops.scanops.cumsum(x, self.dim, exclusive=True)
        y2 = torch.ops.scanops.masked_cumsum(x, m, 0, reverse=True, dtype=torch.float64)
        y3 = torch.ops.scanops.cumprod(x, -1, exclusive=True, reverse=True)
        y4 = torch.ops.scanops.linear_recurrence(a, x, self.dim, exclusive=False, reverse=True)
        y5 = torch.ops.scanops.cumsum(xi, 1)
        y6 = torch.ops.scanops.cumprod(xi, 0, dtype=torch.float32)
        return y1, y2, y3, y4, y5, y6


class FlagsModule(torch.nn.Module):
    """Flags, dim and dtype arrive at run time."""

    def forward(self, x: torch.Tensor, m: torch.Tensor, a: torch.Tensor, dim: int,
                exclusive: bool, reverse: bool, dtype: Optional[torch.dtype]) -> List[torch.Tensor]:
        return [
            torch.ops.scanops.cumsum(x, dim, exclusive=exclusive, reverse=reverse, dtype=dtype),
            torch.ops.scanops.masked_cumsum(x, m, dim, exclusive=exclusive, reverse=reverse,
                                            dtype=dtype),
            torch.ops.scanops.cumprod(x, dim, exclusive=exclusive, reverse=reverse, dtype=dtype),
            torch.ops.scanops.linear_recurrence(a, x, dim, exclusive=exclusive, reverse=reverse),
        ]


def _inputs(device, gen, shape=(5, 12)):
    x = rand_data("prod", shape, f32, device, gen, shape[-1])
    m = rand_data("mask", shape, torch.bool, device, gen)
    a = rand_data("coef", shape, f32, device, gen, shape[-1])
    xi = torch.randint(-3, 4, shape, generator=gen, device=device, dtype=torch.int32)
    return x, m, a, xi


def _check_scan_module(outs, x, m, a, xi, dim=1):
    check_op("cumsum", dim, True, False, x=x, got=outs[0])
    check_op("masked_cumsum", 0, False, True, x=x, mask=m, dtype=f64, got=outs[1])
    check_op("cumprod", -1, True, True, x=x, got=outs[2])
    check_op("linear_recurrence", dim, False, True, x=x, a=a, got=outs[3])
    check_op("cumsum", 1, x=xi, got=outs[4])
    check_op("cumprod", 0, x=xi, dtype=f32, got=outs[5])


@device_p
def test_script_module_runs_and_round_trips(device, seed, tmp_path):
    gen = make_gen(seed, device)
    scripted = torch.jit.script(ScanModule(1))
    graph = str(scripted.graph)
    for op in ("cumsum", "masked_cumsum", "cumprod", "linear_recurrence"):
        assert f"scanops::{op}" in graph, graph
    inputs = _inputs(device, gen)
    outs = scripted(*inputs)
    _check_scan_module(outs, *inputs)
    eager = ScanModule(1)(*inputs)
    for s, e in zip(outs, eager):
        assert torch.equal(s, e)

    path = tmp_path / "scan_module.pt"
    torch.jit.save(scripted, str(path))
    loaded = torch.jit.load(str(path), map_location=device)
    new = _inputs(device, gen, (7, 9))
    outs2 = loaded(*new)
    _check_scan_module(outs2, *new)
    for s, e in zip(outs2, scripted(*new)):
        assert torch.equal(s, e)
    if device != "cpu":  # a CPU-saved module loaded onto the GPU and back
        cpu_loaded = torch.jit.load(str(path), map_location="cpu")
        cpu_in = tuple(t.cpu() for t in new)
        _check_scan_module(cpu_loaded(*cpu_in), *cpu_in)


@device_p
def test_script_runtime_flags_and_dtype(device, seed, tmp_path):
    gen = make_gen(seed, device)
    scripted = torch.jit.script(FlagsModule())
    path = tmp_path / "flags.pt"
    torch.jit.save(scripted, str(path))
    loaded = torch.jit.load(str(path), map_location=device)
    x, m, a, _ = _inputs(device, gen, (4, 3, 10))
    for mod in (scripted, loaded):
        for dim in (0, 2, -2):
            for e, r in FLAGS:
                for dt in (None, f64):
                    outs = mod(x, m, a, dim, e, r, dt)
                    check_op("cumsum", dim, e, r, x=x, dtype=dt, got=outs[0])
                    check_op("masked_cumsum", dim, e, r, x=x, mask=m, dtype=dt, got=outs[1])
                    check_op("cumprod", dim, e, r, x=x, dtype=dt, got=outs[2])
                    check_op("linear_recurrence", dim, e, r, x=x, a=a, got=outs[3])


@torch.jit.script
def scripted_fn(x: torch.Tensor, a: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    s = torch.ops.scanops.cumsum(x, -1, reverse=True)
    p = torch.ops.scanops.cumprod(x, 0, exclusive=True)
    h = torch.ops.scanops.linear_recurrence(a, x, -1)
    q = torch.ops.scanops.masked_cumsum(x, m, -1, exclusive=True)
    return (s * p + h - q).sum()


@device_p
def test_script_autograd(device, seed):
    gen = make_gen(seed, device)
    x = rand_data("prod", (4, 8), f64, device, gen, 8).requires_grad_()
    a = rand_data("coef", (8,), f64, device, gen, 8).requires_grad_()  # broadcast a
    m = rand_data("mask", (4, 8), torch.bool, device, gen)
    gx, ga = torch.autograd.grad(scripted_fn(x, a, m), (x, a))

    def eager(x, a, m):
        s = ops.cumsum(x, -1, reverse=True)
        p = ops.cumprod(x, 0, exclusive=True)
        h = ops.linear_recurrence(a, x, -1)
        q = ops.masked_cumsum(x, m, -1, exclusive=True)
        return (s * p + h - q).sum()

    ex, ea = torch.autograd.grad(eager(x, a, m), (x, a))
    torch.testing.assert_close(gx, ex, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ga, ea, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x_, a_: scripted_fn(x_, a_, m), (x, a))


@device_p
def test_trace_round_trip(device, seed, tmp_path):
    gen = make_gen(seed, device)
    inputs = _inputs(device, gen)
    traced = torch.jit.trace(ScanModule(0), inputs)
    path = tmp_path / "traced.pt"
    torch.jit.save(traced, str(path))
    loaded = torch.jit.load(str(path), map_location=device)
    new = _inputs(device, gen)  # same shapes, new values
    _check_scan_module(loaded(*new), *new, dim=0)


# ------------------------------------------------------------------------------------------
# logcumsumexp, cummax, cummin (and complex inputs)
# ------------------------------------------------------------------------------------------

@torch.jit.script
def scripted_family(x: torch.Tensor, xc: torch.Tensor, exclusive: bool, reverse: bool
                    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                               torch.Tensor, torch.Tensor]:
    v, i = torch.ops.scanops.cummax(x, 1, exclusive=exclusive, reverse=reverse)
    w, j = torch.ops.scanops.cummin(x, 0, exclusive=exclusive, reverse=reverse)
    lse = torch.ops.scanops.logcumsumexp(x, -1, exclusive=exclusive, reverse=reverse)
    cs = torch.ops.scanops.cumsum(xc, 1, exclusive=exclusive, reverse=reverse)
    return v, i, w, j, lse, cs


class FamilyModule(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        v, i = torch.ops.scanops.cummax(x, -1)
        return v, i, torch.ops.scanops.logcumsumexp(x, 0, reverse=True)


@device_p
def test_script_new_ops(device, seed, tmp_path):
    gen = make_gen(seed, device)
    graph = str(scripted_family.graph)
    for op in ("cummax", "cummin", "logcumsumexp", "cumsum"):
        assert f"scanops::{op}" in graph, graph
    x = torch.randint(-3, 4, (5, 12), generator=gen, device=device).to(f32)  # ties
    xc = torch.complex(torch.randn(5, 12, generator=gen, device=device),
                       torch.randn(5, 12, generator=gen, device=device))
    for e, r in FLAGS:
        outs = scripted_family(x, xc, e, r)
        eager = (*ops.cummax(x, 1, exclusive=e, reverse=r), *ops.cummin(x, 0, exclusive=e, reverse=r),
                 ops.logcumsumexp(x, -1, exclusive=e, reverse=r), ops.cumsum(xc, 1, exclusive=e, reverse=r))
        for s, w in zip(outs, eager):
            assert s.dtype == w.dtype and torch.equal(s, w), (e, r)
        if not e and not r:  # against torch's own ops
            tv, ti = torch.cummax(x, 1)
            assert torch.equal(outs[0], tv) and torch.equal(outs[1], ti)
            tv, ti = torch.cummin(x, 0)
            assert torch.equal(outs[2], tv) and torch.equal(outs[3], ti)
            torch.testing.assert_close(outs[4], torch.logcumsumexp(x, -1))
            torch.testing.assert_close(outs[5], torch.cumsum(xc, 1))
    scripted = torch.jit.script(FamilyModule())
    path = tmp_path / "family.pt"
    torch.jit.save(scripted, str(path))
    loaded = torch.jit.load(str(path), map_location=device)
    v, i, lse = loaded(x)
    tv, ti = torch.cummax(x, -1)
    assert torch.equal(v, tv) and torch.equal(i, ti)
    torch.testing.assert_close(lse, torch.logcumsumexp(x.flip(0), 0).flip(0))
    # Autograd through the scripted module.
    xd = torch.randperm(60, generator=torch.Generator().manual_seed(seed)).to(f64).reshape(5, 12)
    xd = (xd * 0.1).to(device).requires_grad_()  # distinct values: max is differentiable
    assert torch.autograd.gradcheck(lambda t: (loaded(t)[0], loaded(t)[2]), (xd,))
