"""Accuracy of CUDA float32 linear recurrences along long lines whose coefficients are just
below 1 (skipped without a GPU): every kernel family that folds the totals of runs of
elements across chunks or tiles, against a float64 reference, no worse than 4x a sequential
float32 loop (h = a * h + x, a multiply then an add, computed here on the CPU).

Float32 products of factors 1 - k 2^-24 drop their positive term k m 2^-48 at every rounding
while it is under half an ulp, so runs' products reduced in float32 are biased low and the
bias compounds along the chain of carries: fuzz seed 101 case 12366 ((98303, 5) along dim 0,
reverse, the three passes) was 23x the loop's error. The row kernels and the three-pass column
scan now reduce runs and fold carries in float64 (Carry in ops/cuda/common.cuh) and rescan
each run in float32 from its carry. Coefficients a = exp(-U(0, 8e-5)): a numpy emulation of the
kernels' association put the float32 carries at 8-19x the loop's error on 2^17-element lines,
the float64 ones at 0.1x. The column tile, warp-tile and vector-tile kernels still carry in
float32 (float64 cost their speed a quarter: docs/benchmarks/test-runs.md), so they are not
cases here. The segmented kernels (ops/cuda/segmented.cuh: the flat row tiles with their
look-back, the column chunks) carry in float64 too: the offsets form of case 12366 was 0.055
off before they did; their cases scan long segments, each against the loop over its segment.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

ops = torch.ops.scanops
BOUND = 4.0  # x the sequential float32 loop's max error


def _loop_f32(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The sequential float32 recurrence along axis 0 (every other axis at once)."""
    h = np.zeros(a.shape[1:], np.float32)
    out = np.empty_like(x)
    for t in range(a.shape[0]):
        h = a[t] * h + x[t]
        out[t] = h
    return out


# (name, shape, dim, reverse): one kernel family each (ops/cuda/launch_scan.cuh's choice by
# shape on a GPU of 100+ SMs, float32 inputs).
CASES = [
    ("three passes", (1 << 18, 5), 0, True),         # 5 columns: chunks of 32, scanned totals
    ("row look-back", (1 << 20,), 0, False),          # one line: chunks chained by look-back
    ("rows tile by tile", (4096, 1 << 15), 1, False),  # many rows: a block walks a row's tiles
]


@pytest.mark.parametrize("name,shape,dim,reverse", CASES, ids=[c[0] for c in CASES])
def test_long_line_near_one(name, shape, dim, reverse):
    g = torch.Generator().manual_seed(12366)
    x = torch.randn(shape, generator=g)
    a = torch.exp(-torch.rand(shape, generator=g, dtype=torch.float64) * 8e-5).float()
    dev = torch.device("cuda")
    got = ops.linear_recurrence(a.to(dev), x.to(dev), dim, reverse=reverse).double()
    ref = ops.linear_recurrence(a.to(dev).double(), x.to(dev).double(), dim, reverse=reverse)
    err = (got - ref).abs().max().item()
    # The loop along the same lines, in scan order (axis 0 of a contiguous copy).
    def lines(t):
        t = t.movedim(dim, 0)
        return (t.flip(0) if reverse else t).contiguous().numpy()
    loop = torch.from_numpy(_loop_f32(lines(a), lines(x))).double()
    ref_lines = ref.cpu().movedim(dim, 0)
    if reverse:
        ref_lines = ref_lines.flip(0)
    loop_err = (loop - ref_lines).abs().max().item()
    assert loop_err > 0
    assert err <= BOUND * loop_err, (
        f"{name}: max error {err:.3g} against float64, {err / loop_err:.1f}x the sequential "
        f"float32 loop's {loop_err:.3g} (max |h| {ref.abs().max().item():.3g})")


def _seg_loop(a: np.ndarray, x: np.ndarray, bounds, reverse: bool) -> np.ndarray:
    """The sequential float32 recurrence along axis 0 within each segment [bounds[k],
    bounds[k + 1]), from its end for a reverse scan."""
    out = np.empty_like(x)
    for s, e in zip(bounds[:-1], bounds[1:]):
        if reverse:
            out[s:e] = _loop_f32(a[s:e][::-1], x[s:e][::-1])[::-1]
        else:
            out[s:e] = _loop_f32(a[s:e], x[s:e])
    return out


# (name, shape, reverse, form): the flat row kernel (1-D: chunks chained by look-back, a
# thread's run folded before the block scan) and the column chunks (few columns: chunk totals,
# carries, rescan), long segments.
SEG_CASES = [
    ("segmented flat rows", (1 << 20,), False, "reset"),
    ("segmented flat rows reverse", (1 << 20,), True, "reset"),
    ("segmented columns reverse", (98303, 5), True, "offsets"),
    ("segmented columns", (1 << 18, 5), False, "offsets"),
]


@pytest.mark.parametrize("name,shape,reverse,form", SEG_CASES, ids=[c[0] for c in SEG_CASES])
def test_segmented_long_segments_near_one(name, shape, reverse, form):
    g = torch.Generator().manual_seed(12366)
    x = torch.randn(shape, generator=g)
    a = torch.exp(-torch.rand(shape, generator=g, dtype=torch.float64) * 8e-5).float()
    n = shape[0]
    bounds = [0, n * 3 // 20, n * 2 // 5 + 1, n]  # three long segments, one short
    dev = torch.device("cuda")
    ad, xd = a.to(dev), x.to(dev)
    if form == "reset":
        r = torch.zeros(n, dtype=torch.bool)
        r[bounds[1:-1]] = True
        rd = r.to(dev)
        got = ops.linear_recurrence(ad, xd, 0, reverse=reverse, reset=rd).double()
        ref = ops.linear_recurrence(ad.double(), xd.double(), 0, reverse=reverse, reset=rd)
    else:
        off = torch.tensor(bounds, dtype=torch.int64, device=dev)
        got = ops.segment_linear_recurrence(ad, xd, off, reverse=reverse).double()
        ref = ops.segment_linear_recurrence(ad.double(), xd.double(), off, reverse=reverse)
    err = (got - ref).abs().max().item()
    loop = torch.from_numpy(_seg_loop(a.numpy(), x.numpy(), bounds, reverse)).double()
    loop_err = (loop - ref.cpu()).abs().max().item()
    assert loop_err > 0
    assert err <= BOUND * loop_err, (
        f"{name}: max error {err:.3g} against float64, {err / loop_err:.1f}x the sequential "
        f"float32 loop's {loop_err:.3g} (max |h| {ref.abs().max().item():.3g})")
