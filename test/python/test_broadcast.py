"""Broadcast masks and coefficients (a stride-0 dim): the same results as the materialised
(expanded, contiguous) companion on every kernel path, bit for bit; on CUDA they are read in
place (no full-size temporary), which the peak-memory test checks.

Patterns: a row of the last dims, a column, a scalar, middle-dim broadcasts, scanning along
each dim; one pattern whose dims do not merge into (outer, scan, inner) strides, which is
materialised (same results)."""
from __future__ import annotations

import itertools

import pytest
import torch

from reference import DEVICES, HAS_CUDA, make_gen

ops = torch.ops.scanops
device_p = pytest.mark.parametrize("device", DEVICES)

# (self shape, companion shape, dims to scan)
CASES = [
    ((9, 300), (300,), (0, 1)),
    ((9, 300), (9, 1), (0, 1)),
    ((9, 300), (1, 1), (0, 1)),
    ((5, 20000), (20000,), (1,)),          # block-per-row rows
    ((4096, 64), (64,), (1,)),             # packed rows filling whole tiles (vector loads)
    ((2, 150000), (2, 1), (1,)),           # look-back rows
    ((3000, 40), (1, 40), (0,)),           # columns
    ((3000, 40), (3000, 1), (0,)),
    ((40000, 3), (3,), (0,)),              # narrow tall columns (three passes)
    ((6, 700, 40), (1, 700, 1), (0, 1, 2)),
    ((6, 700, 40), (6, 1, 40), (0, 1, 2)),  # outer/inner groups do not merge for dim 1
    ((6, 700, 40), (700, 40), (1,)),
]


@device_p
@pytest.mark.parametrize("shape,cshape,dims", CASES)
def test_masked_cumsum_broadcast_mask(device, shape, cshape, dims, seed):
    gen = make_gen(seed, device)
    x = torch.randint(-4, 5, shape, generator=gen, device=device).float()
    m = torch.rand(cshape, generator=gen, device=device) > 0.4
    for dim, (e, r) in itertools.product(dims, itertools.product((False, True), repeat=2)):
        got = ops.masked_cumsum(x, m, dim, exclusive=e, reverse=r)
        want = ops.masked_cumsum(x, m.expand(shape).contiguous(), dim, exclusive=e, reverse=r)
        assert torch.equal(got, want), (dim, e, r)


@device_p
@pytest.mark.parametrize("shape,cshape,dims", CASES)
def test_linear_recurrence_broadcast_coeff(device, shape, cshape, dims, seed):
    gen = make_gen(seed, device)
    x = torch.randint(-4, 5, shape, generator=gen, device=device).double()
    a = torch.randint(-1, 2, cshape, generator=gen, device=device).double()  # exact: 0, +-1
    for dim, (e, r) in itertools.product(dims, itertools.product((False, True), repeat=2)):
        got = ops.linear_recurrence(a, x, dim, exclusive=e, reverse=r)
        want = ops.linear_recurrence(a.expand(shape).contiguous(), x, dim, exclusive=e, reverse=r)
        assert torch.equal(got, want), (dim, e, r)


@device_p
def test_broadcast_views(device, seed):
    """Companions that are themselves views: a transposed one, an offset slice, a stride-2 one."""
    gen = make_gen(seed, device)
    x = torch.randint(-4, 5, (64, 33), generator=gen, device=device).float()
    base = torch.rand(3, 66, generator=gen, device=device) > 0.5
    for m in (base[1, ::2], base[2:3, 1:34], base[:, :1].t()[:, :1].expand(64, 1)):
        for dim in (0, 1):
            got = ops.masked_cumsum(x, m, dim)
            want = ops.masked_cumsum(x, m.expand(x.shape).contiguous(), dim)
            assert torch.equal(got, want), dim


def _check_rows_in_place(x, m, a):
    """masked_cumsum with mask m and linear_recurrence with coefficients a, both read in place
    along dim 1 of x, bit for bit as with the materialised companions, every flag."""
    for e, r in itertools.product((False, True), repeat=2):
        got = ops.masked_cumsum(x, m, 1, exclusive=e, reverse=r)
        want = ops.masked_cumsum(x, m.expand(x.shape).contiguous(), 1, exclusive=e, reverse=r)
        assert torch.equal(got, want), (m.stride(), m.storage_offset(), e, r)
        got = ops.linear_recurrence(a, x, 1, exclusive=e, reverse=r)
        want = ops.linear_recurrence(a.expand(x.shape).contiguous(), x, 1, exclusive=e, reverse=r)
        assert torch.equal(got, want), (a.stride(), a.storage_offset(), e, r)


@device_p
@pytest.mark.parametrize("shape", [(3, 20000), (2, 150000)])  # block-per-row rows, look-back rows
def test_broadcast_views_long_rows(device, shape, seed):
    """Long rows read a row companion at an offset of the tile's first element plus a step per
    element (the CUDA row tiles' cursor): a stride-2 row, a row starting at an odd offset
    (misaligned for vector loads), a column, with every flag."""
    gen = make_gen(seed, device)
    rows, n = shape
    x = torch.randint(-4, 5, shape, generator=gen, device=device).float()
    base = torch.rand(3, 2 * n + 2, generator=gen, device=device) > 0.5
    coeffs = torch.randint(-1, 2, (3, 2 * n + 2), generator=gen, device=device).float()
    views = lambda t: (t[0, ::2][:n], t[1:2, 1:n + 1], t[:rows, :1],  # noqa: E731
                       t[2:3, :n].clone())  # (an aligned row: the shifted vector loads)
    for m, a in zip(views(base), views(coeffs)):
        _check_rows_in_place(x, m, a)


@device_p
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(5, 20000), (2, 150000), (1, 70000), (300, 96), (4096, 64)])
def test_broadcast_row_dtypes(device, dtype, shape, seed):
    """A (1, N) row read in place by every row (the CUDA row tiles load it as a dense companion
    shifted by the row's offset, or at the row-local offset in packed tiles) for inputs of 8
    and 2 bytes (other vector widths), on block-per-row, look-back and packed rows (tiles of
    whole rows: (4096, 64)), aligned and at an odd offset."""
    gen = make_gen(seed, device)
    n = shape[1]
    x = torch.randint(-4, 5, shape, generator=gen, device=device).to(dtype)
    base = torch.rand(2, n + 1, generator=gen, device=device) > 0.5
    coeffs = torch.randint(-1, 2, (2, n + 1), generator=gen, device=device).to(dtype)
    for m, a in ((base[0, :n], coeffs[0, :n]), (base[1, 1:], coeffs[1, 1:])):
        _check_rows_in_place(x, m, a)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("cshape,dim", [((1, 4096), 1), ((4096, 1), 1), ((1, 4096), 0)])
def test_broadcast_read_in_place(cshape, dim):
    """A broadcast companion costs no memory beyond what the same op with a full-size (dense)
    companion allocates (the kernels' own scratch, e.g. the column look-back status along
    dim 0), and far less than a materialised copy of it."""
    x = torch.randn(4096, 4096, device="cuda")
    m = torch.rand(cshape, device="cuda") > 0.5
    a = torch.rand(cshape, device="cuda")
    m_full, a_full = m.expand(x.shape).contiguous(), a.expand(x.shape).contiguous()
    out_bytes = x.numel() * x.element_size()

    def extra_bytes(fn):
        fn()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        y = fn()
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base - out_bytes
        del y
        return extra

    for fn, dense, copy_bytes in (
        (lambda: ops.masked_cumsum(x, m, dim), lambda: ops.masked_cumsum(x, m_full, dim),
         m_full.numel()),
        (lambda: ops.linear_recurrence(a, x, dim), lambda: ops.linear_recurrence(a_full, x, dim),
         a_full.numel() * a_full.element_size()),
    ):
        extra, extra_dense = extra_bytes(fn), extra_bytes(dense)
        assert extra <= extra_dense + 4096, (extra, extra_dense)
        assert extra < copy_bytes, (extra, copy_bytes)
