"""Run-to-run bitwise reproducibility of the CUDA look-back kernels (skipped without a GPU).

Every look-back path computes a tile's inclusive prefix at two kinds of site, its own
publication and the left fold of a later tile that walks over it (ops/cuda/lookback.cuh); which
one a tile continues from depends on timing, so both must give the same bits
(ops/cuda/pinned.cuh). They did not where a float64 add met two NaNs of different signs (the
GPU keeps float64 NaN payloads, and the sites may order the operands differently: fuzz seed
101 case 8586, masked_cumsum); a complex product contracted into FMAs differently at the two
sites is the candidate cause of fuzz seed 688027910 case 2316 (complex128 linear_recurrence),
hence the recurrences below. Each case runs RUNS times and every output must have the first
run's bits, NaN payloads and signs included. Before the fix (H100, 2026-11-27), 8 of these
configurations differed within 24 runs (every float64 / complex128 sum, cumprod and column case
with NaNs); the recurrences (no NaN) and the CUB line did not.
The inputs put NaNs of both signs and +-inf pairs (the GPU's own NaN) in every look-back chunk,
so that most chunk boundaries combine two NaNs of different payloads.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

ops = torch.ops.scanops
RUNS = 24


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    if t.is_complex():
        t = torch.view_as_real(t).contiguous()
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])


def _special(shape, dtype, g, rate=0.004):
    """randn with +NaN, -NaN, +inf and -inf each at about `rate` of the positions."""
    real = {torch.complex128: torch.float64, torch.complex64: torch.float32}.get(dtype, dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    r = torch.rand(shape, generator=g, dtype=torch.float64)
    nan = torch.tensor(float("nan"), dtype=torch.float64)
    x = torch.where(r < rate, nan, x)
    x = torch.where((r >= rate) & (r < 2 * rate), -nan, x)  # a NaN with its sign bit set
    x = torch.where((r >= 2 * rate) & (r < 3 * rate), float("inf"), x)
    x = torch.where((r >= 3 * rate) & (r < 4 * rate), float("-inf"), x)
    x = x.to(real)
    if dtype.is_complex:
        x = torch.complex(x, torch.randn(shape, generator=g, dtype=torch.float64).to(real))
    return x.cuda()


def _coef(shape, dtype, g):
    """Coefficients of modulus in (0.5, 1), a random phase for complex ones."""
    real = {torch.complex128: torch.float64, torch.complex64: torch.float32}.get(dtype, dtype)
    mag = 0.5 + 0.5 * torch.rand(shape, generator=g, dtype=torch.float64)
    if dtype.is_complex:
        ph = torch.rand(shape, generator=g, dtype=torch.float64) * 6.283185307179586
        return torch.polar(mag, ph).to(dtype).cuda()
    return (mag * torch.where(torch.rand(shape, generator=g) < 0.25, -1.0, 1.0)).to(real).cuda()


def _cases():
    g = torch.Generator().manual_seed(20261127)
    c = []
    # masked_cumsum float64, exclusive, rows of look-back chunks (the fuzz case's path).
    x = _special((3, 4, 32771), torch.float64, g)
    m = (torch.rand((3, 4, 32771), generator=g) < 0.6).cuda()
    c.append(("masked_cumsum f64 (3,4,32771) excl", lambda: ops.masked_cumsum(x, m, 2, exclusive=True)))
    # Long rows: hundreds of look-back chunks per line (not CUB's: several rows).
    y = _special((4, 1 << 20), torch.float64, g)
    c.append(("cumsum f64 (4,2^20)", lambda: ops.cumsum(y, 1)))
    c.append(("cumsum f64 (4,2^20) reverse excl", lambda: ops.cumsum(y, 1, reverse=True, exclusive=True)))
    y1 = y[0].clone()  # one line, reverse: the row kernel's look-back (forward: CUB)
    c.append(("cumsum f64 1-D 2^20 reverse", lambda: ops.cumsum(y1, 0, reverse=True)))
    c.append(("cumsum f64 1-D 2^20 (CUB line)", lambda: ops.cumsum(y1, 0)))
    z = _special((2, 1 << 19), torch.complex128, g)
    c.append(("cumsum c128 (2,2^19)", lambda: ops.cumsum(z, 1)))
    c.append(("cumprod f64 (4,2^20)", lambda: ops.cumprod(torch.where(y.isnan(), y, 1 + 1e-3 * y), 1)))
    # Column tiles chained by look-back (dim 0).
    yc = _special((1 << 16, 64), torch.float64, g)
    c.append(("cumsum f64 (2^16,64) dim 0", lambda: ops.cumsum(yc, 0)))
    yc2 = _special((1 << 15, 1024), torch.float64, g)
    c.append(("cumsum f64 (2^15,1024) dim 0", lambda: ops.cumsum(yc2, 0)))
    # Segmented: look-back over segment chunks.
    rs = (torch.rand(1 << 21, generator=g) < 1e-4).cuda()
    ys = _special((1 << 21,), torch.float64, g)
    c.append(("cumsum f64 1-D 2^21 reset=", lambda: ops.cumsum(ys, 0, reset=rs)))
    # Linear recurrences, complex and real: the fuzz case's shape and layout (a conjugated
    # input, coefficients read through strides), and long rows and columns.
    a = _coef((16, 2 * 24576, 1), torch.complex128, g)[:, ::2]
    xr = _special((16, 24576, 1), torch.complex128, g).conj()
    c.append(("linear_recurrence c128 (16,24576,1) conj, strided a",
              lambda: ops.linear_recurrence(a, xr, -2)))
    for dt in (torch.complex128, torch.complex64, torch.float64, torch.float32):
        al = _coef((4, 1 << 18), dt, g)
        xl = torch.randn((4, 1 << 18), generator=g, dtype=torch.float64).to(dt).cuda()
        c.append((f"linear_recurrence {dt} (4,2^18)", lambda al=al, xl=xl: ops.linear_recurrence(al, xl, 1)))
        ac = _coef((1 << 15, 64), dt, g)
        xc = torch.randn((1 << 15, 64), generator=g, dtype=torch.float64).to(dt).cuda()
        c.append((f"linear_recurrence {dt} (2^15,64) dim 0", lambda ac=ac, xc=xc: ops.linear_recurrence(ac, xc, 0)))
    return c


@pytest.fixture(scope="module")
def cases():
    return _cases()


def test_cuda_bits_run_to_run(cases):
    failures = []
    for name, fn in cases:
        first = _bits(fn())
        for run in range(1, RUNS):
            again = _bits(fn())
            if not torch.equal(first, again):
                failures.append(f"{name}: run {run} differs from run 0 in "
                                f"{int((first != again).sum())} of {first.numel()} words")
                break
    assert not failures, "\n".join(failures)
