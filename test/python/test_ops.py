"""Forward values of every scanops op against PyTorch compositions (reference.py).

Axes covered: op x dtype x (exclusive, reverse) x dim (negative too) x shape class x memory
layout, plus broadcast masks / coefficients, the dtype= argument, integer wrap-around, CPU
thread counts (the chunked CPU path), NaN/inf propagation and, on CUDA, big shapes that
reach every kernel family.
"""
from __future__ import annotations

import pytest
import torch

from reference import (ALL_DTYPES, DEVICES, FLAG_IDS, FLAGS, FLOAT_DTYPES, LAYOUTS,
                       OPS, SCAN_OPS, assert_close_to_ref, call, check_op, dtype_id, expected,
                       linrec_loop, linrec_ref, make_gen, make_layout, make_operands, needs_cuda,
                       ops, rand_data, same_bits, scan_ref)

f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
i8, i16, i32, i64, u8, b = torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool

device_p = pytest.mark.parametrize("device", DEVICES)
flags_p = pytest.mark.parametrize("exclusive,reverse", FLAGS, ids=FLAG_IDS)


def _id(v):
    if isinstance(v, torch.dtype):
        return dtype_id(v)
    return None


# ------------------------------------------------------------------------------------------
# Known values, independent of the references
# ------------------------------------------------------------------------------------------

@device_p
def test_documented_examples(device):
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device)
    m = torch.tensor([True, False, True, True], device=device)
    a = torch.full((4,), 0.5, device=device)
    want = {
        ("cumsum", False, False): [1, 3, 6, 10],
        ("cumsum", True, False): [0, 1, 3, 6],
        ("cumsum", False, True): [10, 9, 7, 4],
        ("cumsum", True, True): [9, 7, 4, 0],
        ("masked_cumsum", False, False): [1, 1, 4, 8],
        ("masked_cumsum", True, False): [0, 1, 1, 4],
        ("masked_cumsum", False, True): [8, 7, 7, 4],
        ("masked_cumsum", True, True): [7, 7, 4, 0],
        ("cumprod", False, False): [1, 2, 6, 24],
        ("cumprod", True, False): [1, 1, 2, 6],
        ("cumprod", False, True): [24, 24, 12, 4],
        ("cumprod", True, True): [24, 12, 4, 1],
        ("linear_recurrence", False, False): [1, 2.5, 4.25, 6.125],
        ("linear_recurrence", True, False): [0, 1, 2.5, 4.25],
        ("linear_recurrence", False, True): [3.25, 4.5, 5, 4],
        ("linear_recurrence", True, True): [4.5, 5, 4, 0],
    }
    for (op, e, r), w in want.items():
        got = call(op, 0, e, r, x=x, mask=m, a=a)
        assert got.dtype == f32
        assert got.tolist() == w, (op, e, r, got.tolist())
        # Same through dim=-1 and on ints (-> int64) for the integral-capable ops.
        assert call(op, -1, e, r, x=x, mask=m, a=a).tolist() == w
        if op != "linear_recurrence":
            gi = call(op, 0, e, r, x=x.to(i32), mask=m)
            assert gi.dtype == i64 and gi.tolist() == w, (op, e, r, gi)


@device_p
def test_known_values_2d(device):
    x = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=i16, device=device)
    assert ops.cumsum(x, 0).tolist() == [[1, 2, 3], [5, 7, 9]]
    assert ops.cumsum(x, 1).tolist() == [[1, 3, 6], [4, 9, 15]]
    assert ops.cumsum(x, -1, reverse=True).tolist() == [[6, 5, 3], [15, 11, 6]]
    assert ops.cumsum(x, -2, exclusive=True).tolist() == [[0, 0, 0], [1, 2, 3]]
    assert ops.cumprod(x, 1).tolist() == [[1, 2, 6], [4, 20, 120]]
    assert ops.cumprod(x, 0, exclusive=True, reverse=True).tolist() == [[4, 5, 6], [1, 1, 1]]
    m = torch.tensor([True, False, True], device=device)
    assert ops.masked_cumsum(x, m, 1).tolist() == [[1, 1, 4], [4, 4, 10]]
    xf = x.to(f64)
    a = torch.tensor([[2.0], [-1.0]], dtype=f64, device=device)
    # row 0: h = 1, 2*1+2 = 4, 2*4+3 = 11; row 1: 4, -4+5 = 1, -1+6 = 5
    assert ops.linear_recurrence(a, xf, 1).tolist() == [[1, 4, 11], [4, 1, 5]]
    assert ops.linear_recurrence(a, xf, 1, exclusive=True).tolist() == [[0, 1, 4], [0, 4, 1]]


@device_p
def test_dtype_converts_before_the_scan(device):
    x = torch.full((4,), 0.5, device=device)
    # Converted first: every element truncates to 0; a scan in float then a cast gives 0,1,1,2.
    assert ops.cumsum(x, 0, dtype=i64).tolist() == [0, 0, 0, 0]
    m = torch.ones(4, dtype=b, device=device)
    assert ops.masked_cumsum(x, m, 0, dtype=i32).tolist() == [0, 0, 0, 0]
    y = torch.tensor([2.5, 2.5, 2.5], device=device)
    assert ops.cumprod(y, 0, dtype=i64).tolist() == [2, 4, 8]
    # float16 conversion first: 1 + 2^-12 rounds to 1 in float16.
    z = torch.full((4,), 1 + 2**-12, dtype=f64, device=device)
    assert ops.cumsum(z, 0, dtype=f16).tolist() == [1, 2, 3, 4]


@device_p
def test_integer_widening_and_wraparound(device):
    big = 2**31 - 1
    x = torch.tensor([big, big, big], dtype=i32, device=device)
    assert ops.cumsum(x, 0).tolist() == [big, 2 * big, 3 * big]  # int64, no 32-bit wrap
    x8 = torch.tensor([100, 100, 100], dtype=i8, device=device)
    assert ops.cumsum(x8, 0).tolist() == [100, 200, 300]
    assert ops.cumsum(x8, 0, dtype=i8).tolist() == [100, -56, 44]  # wraps in the dtype asked
    assert ops.cumprod(x8, 0).tolist() == [100, 10_000, 1_000_000]
    xu = torch.tensor([200, 200], dtype=u8, device=device)
    assert ops.cumsum(xu, 0).tolist() == [200, 400]
    assert ops.cumsum(torch.ones(1000, dtype=b, device=device), 0)[-1].item() == 1000

    def wrap(v):
        v %= 2**64
        return v - 2**64 if v >= 2**63 else v

    vals = [2**62, 2**62, 2**62, -5, 2**62 + 7]
    t = torch.tensor(vals, dtype=i64, device=device)
    acc, want = 0, []
    for v in vals:
        acc = wrap(acc + v)
        want.append(acc)
    assert ops.cumsum(t, 0).tolist() == want
    pv = [2**32 + 1, 2**32 + 1, 3, -(2**40)]
    acc, want = 1, []
    for v in pv:
        acc = wrap(acc * v)
        want.append(acc)
    assert ops.cumprod(torch.tensor(pv, dtype=i64, device=device), 0).tolist() == want
    rev = ops.cumprod(torch.tensor(pv, dtype=i64, device=device), 0, reverse=True).tolist()
    acc, want_r = 1, []
    for v in reversed(pv):
        acc = wrap(acc * v)
        want_r.append(acc)
    assert rev == want_r[::-1]


@device_p
@pytest.mark.parametrize("op", SCAN_OPS)
def test_zero_dim_and_empty_behave_as_torch(device, op):
    tfn = torch.cumprod if op == "cumprod" else torch.cumsum
    for dtype in (f32, f64, f16, i8, u8, i64, b):
        for shape, dim in [((), 0), ((), -1), ((0,), 0), ((0,), -1), ((3, 0), 1), ((3, 0), 0),
                           ((0, 4), 1), ((2, 0, 3), -1)]:
            x = torch.ones(shape, dtype=dtype, device=device) * (3 if dtype != b else 1)
            x = x.to(dtype)
            m = torch.ones(shape, dtype=b, device=device)
            want = tfn(x, dim)
            got = call(op, dim, x=x, mask=m)
            assert got.dtype == want.dtype and got.shape == want.shape, (op, dtype, shape, dim)
            assert torch.equal(got, want), (op, dtype, shape, dim)
            for e, r in FLAGS:
                g = call(op, dim, e, r, x=x, mask=m)
                assert g.shape == want.shape and g.dtype == want.dtype
                if len(shape) == 0:  # a 0-dim line has one element
                    ident = 1 if op == "cumprod" else 0
                    assert g.item() == (ident if e else want.item())
            gd = call(op, dim, x=x, mask=m, dtype=f64)
            assert gd.dtype == f64 and gd.shape == want.shape
    for shape, dim in [((), 0), ((), -1), ((0,), 0), ((3, 0), 1), ((0, 4), 1)]:
        for dtype in FLOAT_DTYPES:
            xx = torch.full(shape, 2.0, dtype=dtype, device=device)
            a = torch.full(shape, 0.5, dtype=dtype, device=device)
            for e, r in FLAGS:
                got = ops.linear_recurrence(a, xx, dim, exclusive=e, reverse=r)
                assert got.shape == xx.shape and got.dtype == dtype
                if len(shape) == 0:
                    assert got.item() == (0.0 if e else 2.0)


# ------------------------------------------------------------------------------------------
# Every dtype x every flag combination, a few small shapes, dims and layouts
# ------------------------------------------------------------------------------------------

DTYPE_CASES = [(op, dt) for op in SCAN_OPS for dt in ALL_DTYPES] + [
    ("linear_recurrence", dt) for dt in FLOAT_DTYPES]
DTYPE_SHAPES = [((6, 37), 1, "contiguous"), ((6, 37), -2, "contiguous"), ((2, 3, 17), 1, "transposed"),
                ((129,), -1, "strided"), ((5, 300), 0, "permuted"), ((4, 1, 5), 1, "contiguous"),
                ((9, 600), -1, "offset")]


@device_p
@flags_p
@pytest.mark.parametrize("op,dtype", DTYPE_CASES, ids=[f"{o}-{dtype_id(d)}" for o, d in DTYPE_CASES])
def test_dtypes(device, op, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    for shape, dim, layout in DTYPE_SHAPES:
        operands = make_operands(op, shape, dim, dtype, device, gen, layout)
        check_op(op, dim, exclusive, reverse, **operands, ctx=f"[{layout}]")


# ------------------------------------------------------------------------------------------
# Shape classes (float32 / int32 and float32 / float64 for the recurrence)
# ------------------------------------------------------------------------------------------

SHAPES = [
    ((), 0), ((), -1),
    ((0,), 0), ((4, 0), 1), ((4, 0), 0), ((0, 5), 1), ((3, 0, 5), 2), ((3, 0, 5), -2),
    ((1,), 0), ((17,), 0), ((1000,), -1), ((4097,), 0),
    ((5000, 3), 1), ((3, 70000), 1), ((70000, 3), 0),
    ((300, 257), 0), ((257, 300), -1),
    ((4, 1, 6), 1), ((4, 6, 1), -1), ((1, 6), 0),
    ((2, 5, 7, 3), 1), ((2, 5, 7, 3), -2), ((3, 4, 129), -2), ((2, 3, 2000, 2), 2),
    ((6, 8, 10), 0),
]
SHAPE_OPS = [("cumsum", f32), ("cumsum", i32), ("masked_cumsum", f32), ("masked_cumsum", i32),
             ("cumprod", f32), ("cumprod", i32), ("linear_recurrence", f32),
             ("linear_recurrence", f64)]


@device_p
@flags_p
@pytest.mark.parametrize("op,dtype", SHAPE_OPS, ids=[f"{o}-{dtype_id(d)}" for o, d in SHAPE_OPS])
@pytest.mark.parametrize("shape,dim", SHAPES, ids=[f"{'x'.join(map(str, s)) or 'scalar'}-d{d}" for s, d in SHAPES])
def test_shapes(device, shape, dim, op, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    operands = make_operands(op, shape, dim, dtype, device, gen)
    check_op(op, dim, exclusive, reverse, **operands)


# ------------------------------------------------------------------------------------------
# Memory layouts: transposed, column-major, step slices, stride 0, storage offset
# ------------------------------------------------------------------------------------------

LAYOUT_SHAPES = [((7, 9, 13), 0), ((7, 9, 13), 1), ((7, 9, 13), -1), ((40, 33), 1), ((33, 40), 0),
                 ((300,), 0)]


@device_p
@flags_p
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts(device, layout, op, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    dtypes = (f32, f64) if op == "linear_recurrence" else (f32, i16)
    for dtype in dtypes:
        for shape, dim in LAYOUT_SHAPES:
            operands = make_operands(op, shape, dim, dtype, device, gen, layout)
            x = operands["x"]
            if layout == "offset":
                assert x.storage_offset() > 0
            elif layout.startswith("expanded") and len(shape) >= (2 if layout == "expanded_other" else 1):
                assert 0 in x.stride()
            elif layout != "contiguous" and (len(shape) >= 2 or layout == "strided"):
                assert not x.is_contiguous()
            check_op(op, dim, exclusive, reverse, **operands, ctx=f"[{layout}]")


MIXED = [("transposed", "contiguous"), ("contiguous", "strided"), ("permuted", "expanded_other"),
         ("offset", "transposed"), ("expanded_scan", "strided")]


@device_p
@flags_p
@pytest.mark.parametrize("op", ["masked_cumsum", "linear_recurrence"])
@pytest.mark.parametrize("x_layout,c_layout", MIXED)
def test_mixed_layouts(device, op, x_layout, c_layout, exclusive, reverse, seed):
    """self and its companion (mask / a) in different layouts."""
    gen = make_gen(seed, device)
    dtype = f32
    for shape, dim in [((11, 23), 1), ((11, 23), 0), ((3, 5, 31), -1)]:
        n = shape[dim]
        role = "sum"
        x = make_layout(shape, dim, x_layout, lambda s: rand_data(role, s, dtype, device, gen, n))
        if op == "masked_cumsum":
            m = make_layout(shape, dim, c_layout, lambda s: rand_data("mask", s, b, device, gen))
            check_op(op, dim, exclusive, reverse, x=x, mask=m)
        else:
            a = make_layout(shape, dim, c_layout, lambda s: rand_data("coef", s, dtype, device, gen, n))
            check_op(op, dim, exclusive, reverse, x=x, a=a)


# ------------------------------------------------------------------------------------------
# Broadcast masks and coefficients
# ------------------------------------------------------------------------------------------

BCAST = [((6, 50), (50,), 1), ((6, 50), (50,), 0), ((6, 50), (6, 1), 1), ((6, 50), (6, 1), 0),
         ((6, 50), (1, 50), -1), ((6, 50), (), 1), ((6, 50), (1,), 0), ((6, 50), (1, 1), 1),
         ((3, 4, 50), (4, 1), 2), ((3, 4, 50), (3, 1, 50), 1), ((3, 4, 50), (50,), -3),
         ((2, 3, 4, 5), (3, 1, 5), 1), ((), (), 0), ((4000, 3), (3,), 0), ((3, 5000), (3, 1), 1)]


@device_p
@flags_p
@pytest.mark.parametrize("dtype", [f32, i64, bf16, u8], ids=_id)
@pytest.mark.parametrize("xshape,mshape,dim", BCAST, ids=[f"{x}-{m}-d{d}" for x, m, d in BCAST])
def test_masked_cumsum_broadcast_mask(device, xshape, mshape, dim, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    n = xshape[dim] if xshape else 1
    x = rand_data("sum", xshape, dtype, device, gen, n)
    m = rand_data("mask", mshape, b, device, gen)
    if len(mshape) >= 1 and mshape[-1] > 1:  # also a non-contiguous mask
        m2 = rand_data("mask", mshape[:-1] + (2 * mshape[-1],), b, device, gen)[..., ::2]
        check_op("masked_cumsum", dim, exclusive, reverse, x=x, mask=m2, ctx="[strided mask]")
    check_op("masked_cumsum", dim, exclusive, reverse, x=x, mask=m)
    # All-False and all-True masks.
    zeros = call("masked_cumsum", dim, exclusive, reverse, x=x, mask=torch.zeros(mshape, dtype=b, device=device))
    assert zeros.shape == x.shape and not zeros.any()
    ones = torch.ones(mshape, dtype=b, device=device)
    got = check_op("masked_cumsum", dim, exclusive, reverse, x=x, mask=ones, ctx="[all True]")
    if not dtype.is_floating_point:
        assert torch.equal(got, call("cumsum", dim, exclusive, reverse, x=x))


@device_p
def test_masked_off_nonfinite_contributes_zero(device):
    """Header: masked-off elements contribute 0 (the product is never formed), so NaN / inf
    under a False mask do not leak into the result."""
    x = torch.tensor([1.0, float("nan"), 2.0, float("inf"), 4.0], device=device)
    m = torch.tensor([True, False, True, False, True], device=device)
    assert ops.masked_cumsum(x, m, 0).tolist() == [1, 1, 3, 3, 7]
    assert ops.masked_cumsum(x, m, 0, exclusive=True, reverse=True).tolist() == [6, 6, 4, 4, 0]


ABCAST = [((6, 50), (50,), 1), ((6, 50), (6, 1), 1), ((6, 50), (6, 1), 0), ((6, 50), (1, 50), 0),
          ((6, 50), (), 1), ((6, 50), (1,), -1), ((3, 4, 50), (4, 1), 2), ((3, 4, 50), (3, 1, 50), 1),
          ((3, 4, 50), (1, 1, 1), 0), ((3, 9000), (9000,), 1)]


@device_p
@flags_p
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
@pytest.mark.parametrize("xshape,ashape,dim", ABCAST, ids=[f"{x}-{a}-d{d}" for x, a, d in ABCAST])
def test_linear_recurrence_broadcast_a(device, xshape, ashape, dim, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    n = xshape[dim]
    x = rand_data("sum", xshape, dtype, device, gen, n)
    a = rand_data("coef", ashape, dtype, device, gen, n)
    check_op("linear_recurrence", dim, exclusive, reverse, x=x, a=a)
    # Same as with a materialised, full-shape a.
    full = ops.linear_recurrence(a.expand(xshape).contiguous(), x, dim, exclusive=exclusive,
                                 reverse=reverse)
    got = ops.linear_recurrence(a, x, dim, exclusive=exclusive, reverse=reverse)
    if dtype == f64:
        torch.testing.assert_close(got, full, rtol=1e-12, atol=1e-12)
    else:
        check_op("linear_recurrence", dim, exclusive, reverse, x=x, a=a, got=full, ctx="[full a]")


@device_p
@flags_p
@pytest.mark.parametrize("shape,dim", [((), 0), ((1,), 0), ((9,), 0), ((5, 7), 1), ((5, 7), 0),
                                       ((2, 6, 3), -2), ((3, 0), 1), ((0, 3), 1)])
def test_linear_recurrence_matches_loop(device, shape, dim, exclusive, reverse, seed):
    """The op and the log-depth reference against the defining loop (float64, tight)."""
    gen = make_gen(seed, device)
    a = torch.rand(shape, dtype=f64, generator=gen, device=device) * 4 - 2  # |a| up to 2
    x = torch.randn(shape, dtype=f64, generator=gen, device=device)
    want = linrec_loop(a, x, dim, exclusive, reverse)
    torch.testing.assert_close(linrec_ref(a, x, dim, exclusive, reverse), want, rtol=1e-12, atol=1e-12)
    got = ops.linear_recurrence(a, x, dim, exclusive=exclusive, reverse=reverse)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # a == 1 is cumsum, a == 0 is x (inclusive) / 0 (exclusive).
    one = torch.ones_like(x)
    torch.testing.assert_close(ops.linear_recurrence(one, x, dim, exclusive=exclusive, reverse=reverse),
                               ops.cumsum(x, dim, exclusive=exclusive, reverse=reverse), rtol=1e-12, atol=1e-12)
    zero = ops.linear_recurrence(torch.zeros_like(x), x, dim, exclusive=exclusive, reverse=reverse)
    if not exclusive:
        assert torch.equal(zero, x)
    elif x.dim() > 0 and x.numel() > 0:
        n = x.shape[dim]
        want0 = torch.zeros_like(x)
        if reverse:  # y[t] = h[t+1] = x[t+1]
            want0.narrow(dim, 0, n - 1).copy_(x.narrow(dim, 1, n - 1))
        else:  # y[t] = h[t-1] = x[t-1]
            want0.narrow(dim, 1, n - 1).copy_(x.narrow(dim, 0, n - 1))
        assert torch.equal(zero, want0)
    else:
        assert not zero.any()


# ------------------------------------------------------------------------------------------
# dtype= argument
# ------------------------------------------------------------------------------------------

DTYPE_ARG = [(f32, f64), (f64, f32), (f32, f16), (f32, bf16), (f16, f32), (bf16, f64), (f16, bf16),
             (i32, f32), (b, f32), (b, i32), (u8, i16), (i64, i8), (i8, i64), (f32, i32), (f64, i64),
             (i16, f16), (u8, bf16), (f32, u8), (i32, f64)]


@device_p
@flags_p
@pytest.mark.parametrize("op", SCAN_OPS)
@pytest.mark.parametrize("src,dst", DTYPE_ARG, ids=[f"{dtype_id(s)}-to-{dtype_id(d)}" for s, d in DTYPE_ARG])
def test_dtype_argument(device, src, dst, op, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    role = "prod" if op == "cumprod" else "sum"
    for shape, dim in [((5, 41), 1), ((41, 5), 0), ((3, 2, 9), -1)]:
        n = shape[dim]
        if src.is_floating_point:
            x = rand_data(role, shape, src, device, gen, n)
            if not dst.is_floating_point and role == "sum":
                x = (x.float() * 20).to(src)  # fractional values: truncation happens first
            if dst == u8:
                x = x.abs()  # negative float -> uint8 is undefined behaviour in C++
        elif dst in (f16, bf16):  # keep low-precision results finite
            x = torch.randint(-20 if src != u8 else 0, 20, shape, generator=gen, device=device).to(src)
            if role == "prod":  # +-1 with a few 2s: products stay well inside float16
                x = torch.where(torch.rand(shape, generator=gen, device=device) < 0.5, 1, -1)
                if src == u8:
                    x = x.abs()
                x.narrow(dim, 0, n).select(dim, 0).fill_(2)
                x = x.to(src)
        else:
            x = rand_data(role, shape, src, device, gen, n)
        m = rand_data("mask", shape, b, device, gen) if op == "masked_cumsum" else None
        check_op(op, dim, exclusive, reverse, x=x, mask=m, dtype=dst)
        # dtype equal to the natural result dtype is the default.
        natural = call(op, dim, exclusive, reverse, x=x, mask=m)
        same = call(op, dim, exclusive, reverse, x=x, mask=m, dtype=natural.dtype)
        assert torch.equal(natural, same) or (natural.is_floating_point() and torch.allclose(
            natural, same, equal_nan=True))


# ------------------------------------------------------------------------------------------
# Agreement with torch.cumsum / torch.cumprod themselves (second oracle, inclusive forward)
# ------------------------------------------------------------------------------------------

@device_p
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", [f32, f64, i8, i16, i32, i64, u8, b], ids=_id)
def test_matches_torch_functions(device, op, dtype, seed):
    gen = make_gen(seed, device)
    tfn = getattr(torch, op)
    for shape, dim in [((13,), 0), ((7, 19), 1), ((7, 19), -2), ((3, 4, 5), 1), ((), 0)]:
        x = rand_data("prod" if op == "cumprod" else "sum", shape, dtype, device, gen, 19)
        for dt in (None, f64, i64):
            want = tfn(x, dim, dtype=dt)
            got = getattr(ops, op)(x, dim, dtype=dt)
            assert got.dtype == want.dtype and got.shape == want.shape
            if want.is_floating_point():
                torch.testing.assert_close(got, want, rtol=1e-5 if want.dtype == f32 else 1e-12, atol=1e-5)
            else:
                assert torch.equal(got, want), (shape, dim, dt)
            # reverse = flip . scan . flip (the contract's definition)
            if x.dim() > 0:
                want_r = tfn(x.flip(dim), dim, dtype=dt).flip(dim)
                got_r = getattr(ops, op)(x, dim, reverse=True, dtype=dt)
                if want_r.is_floating_point():
                    torch.testing.assert_close(got_r, want_r, rtol=1e-5 if want_r.dtype == f32 else 1e-12, atol=1e-5)
                else:
                    assert torch.equal(got_r, want_r)


# ------------------------------------------------------------------------------------------
# Non-finite values, zeros in products
# ------------------------------------------------------------------------------------------

@device_p
@flags_p
@pytest.mark.parametrize("dtype", [f32, f64, f16, bf16], ids=_id)
def test_nonfinite_propagation(device, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    x = rand_data("sum", (4, 12), dtype, device, gen, 12)
    x[0, 3] = float("nan")
    x[1, 5] = float("inf")
    x[2, 2] = float("-inf")
    x[2, 8] = float("inf")  # -inf + inf = nan downstream
    for op in ("cumsum", "cumprod", "masked_cumsum"):
        m = torch.ones_like(x, dtype=b)
        m[3, 0] = False
        check_op(op, 1, exclusive, reverse, x=x, mask=m)
    a = rand_data("coef", (4, 12), dtype, device, gen, 12)
    check_op("linear_recurrence", 1, exclusive, reverse, x=x, a=a)


@device_p
@flags_p
@pytest.mark.parametrize("dtype", [f32, f64, bf16, i32], ids=_id)
def test_cumprod_zeros(device, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, device)
    x = rand_data("prod", (6, 9), dtype, device, gen, 9)
    x[0, 4] = 0          # one zero
    x[1, 3:6] = 0        # zeros in a row
    x[2, 0] = 0          # first
    x[3, -1] = 0         # last
    x[4, :] = 0          # all
    got = check_op("cumprod", 1, exclusive, reverse, x=x)
    # Everything after (in scan order) a zero is exactly zero.
    assert (got[4] == 0).sum() == (8 if exclusive else 9)


# ------------------------------------------------------------------------------------------
# CPU: thread counts (the chunked three-phase path for few long lines)
# ------------------------------------------------------------------------------------------

THREAD_OPS = [("cumsum", f32), ("cumsum", i64), ("masked_cumsum", f64), ("cumprod", f32),
              ("cumprod", i8), ("linear_recurrence", f32), ("cumsum", bf16)]


@pytest.mark.parametrize("threads", [1, 3, 8])
@pytest.mark.parametrize("op,dtype", THREAD_OPS, ids=[f"{o}-{dtype_id(d)}" for o, d in THREAD_OPS])
def test_cpu_thread_counts(threads, op, dtype, seed):
    torch.set_num_threads(threads)
    gen = make_gen(seed, "cpu")
    cases = [((2, 200_001), 1), ((150_000,), 0), ((70_000, 3), 0), ((3, 70_000, 2), 1),
             ((5, 40_000), -1)]
    for shape, dim in cases:
        operands = make_operands(op, shape, dim, dtype, "cpu", gen)
        for e, r in FLAGS:
            check_op(op, dim, e, r, **operands, ctx=f"[threads={threads}]")


@pytest.mark.parametrize("threads", [1, 4])
def test_cpu_cumprod_signs_exact(threads, seed):
    """Products of +-1 are exact: a lost or repeated factor in the chunked path flips signs."""
    torch.set_num_threads(threads)
    gen = make_gen(seed, "cpu")
    for shape, dim in [((3, 200_001), 1), ((150_003,), 0), ((70_001, 3), 0)]:
        for dtype in (f32, i8):
            x = rand_data("sign", shape, dtype, "cpu", gen)
            for e, r in FLAGS:
                got = call("cumprod", dim, e, r, x=x)
                assert torch.equal(got.long(), scan_ref("prod", x.long(), dim, e, r)), (shape, dtype, e, r)


def test_cpu_result_independent_of_thread_count(seed):
    """Integer results are exact whatever the chunking; float ones agree to rounding."""
    gen = make_gen(seed, "cpu")
    x = rand_data("sum", (3, 300_000), i64, "cpu", gen)
    outs = []
    for t in (1, 2, 5):
        torch.set_num_threads(t)
        outs.append(ops.cumsum(x, 1, reverse=True))
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


# ------------------------------------------------------------------------------------------
# CUDA: big shapes for every kernel family, streams, devices, 64-bit indexing
# ------------------------------------------------------------------------------------------

BIG_SHAPES = [((1 << 20, 4), 1), ((1 << 20, 4), 0), ((1 << 14, 64), 1), ((64, 1 << 20), 1),
              ((2**24 + 3,), 0), ((4096, 4096), 0), ((4096, 4096), 1), ((8, 4096, 512), 1),
              ((3, 5_000_000), 1)]
BIG_COMBOS = [
    ("cumsum", f32, False, False), ("cumsum", f32, True, False), ("cumsum", f32, False, True),
    ("cumsum", f32, True, True), ("cumsum", i32, True, True), ("cumsum", u8, False, False),
    ("cumsum", f64, False, True), ("cumsum", f16, True, False), ("cumsum", bf16, False, True),
    ("masked_cumsum", f32, False, False), ("masked_cumsum", i8, True, True),
    ("cumprod", f32, False, False), ("cumprod", f32, True, True), ("cumprod", i16, False, True),
    ("linear_recurrence", f32, False, False), ("linear_recurrence", f32, True, True),
    ("linear_recurrence", bf16, False, True), ("linear_recurrence", f64, True, False),
]


@needs_cuda
@pytest.mark.large
@pytest.mark.parametrize("op,dtype,exclusive,reverse", BIG_COMBOS,
                         ids=[f"{o}-{dtype_id(d)}-{FLAG_IDS[FLAGS.index((e, r))]}" for o, d, e, r in BIG_COMBOS])
@pytest.mark.parametrize("shape,dim", BIG_SHAPES, ids=[f"{'x'.join(map(str, s))}-d{d}" for s, d in BIG_SHAPES])
def test_cuda_big(shape, dim, op, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, "cuda")
    operands = make_operands(op, shape, dim, dtype, "cuda", gen)
    check_op(op, dim, exclusive, reverse, **operands)


# Row tiles that are not full (ops/cuda/row_scan.cuh: packed rows that leave a tile's end
# empty, a row's last tile), forward and reverse: linear recurrences load and store the tile's
# whole vectors (RowTile::kPartialVec), tiles whose length is not a multiple of the vector
# width and every other combine element by element. Lengths around the tile sizes (4096
# elements for float32 linear_recurrence, 8192 for float32 sums).
PARTIAL_TILE_SHAPES = [(300, 37), (64, 1024), (300, 1025), (200, 1100), (96, 1366), (64, 1536),
                       (70, 2048), (40, 2049), (30, 3000), (20, 8191), (9, 50257)]
PARTIAL_TILE_OPS = [("cumsum", f32), ("cumsum", f16), ("masked_cumsum", f32), ("cumprod", f64),
                    ("linear_recurrence", f32), ("cumsum", i32)]  # (cummax, logcumsumexp:
# test_family.py's test_cuda_partial_row_tiles_family; linear_recurrence with initial:
# test_initial.py's test_cuda_partial_row_tiles_initial)


@needs_cuda
@pytest.mark.parametrize("exclusive,reverse", FLAGS, ids=FLAG_IDS)
@pytest.mark.parametrize("op,dtype", PARTIAL_TILE_OPS,
                         ids=[f"{o}-{dtype_id(d)}" for o, d in PARTIAL_TILE_OPS])
@pytest.mark.parametrize("shape", PARTIAL_TILE_SHAPES,
                         ids=[f"{r}x{n}" for r, n in PARTIAL_TILE_SHAPES])
def test_cuda_partial_row_tiles(shape, op, dtype, exclusive, reverse, seed):
    gen = make_gen(seed, "cuda")
    operands = make_operands(op, shape, 1, dtype, "cuda", gen)
    got = check_op(op, 1, exclusive, reverse, **operands)
    assert torch.equal(got, call(op, 1, exclusive, reverse, **operands)), "not run-to-run"


@needs_cuda
@pytest.mark.large
@pytest.mark.parametrize("dtype", [f32, i8, f64], ids=_id)
@pytest.mark.parametrize("shape,dim", BIG_SHAPES, ids=[f"{'x'.join(map(str, s))}-d{d}" for s, d in BIG_SHAPES])
def test_cuda_big_cumprod_signs(shape, dim, dtype, seed):
    """Products of +-1 are exact in any order: every lost, repeated or misplaced factor flips
    signs, which near-1 random factors (test_cuda_big) could hide within rounding."""
    gen = make_gen(seed, "cuda")
    x = rand_data("sign", shape, dtype, "cuda", gen)
    for e, r in FLAGS:
        got = call("cumprod", dim, e, r, x=x)
        want = scan_ref("prod", x.long(), dim, e, r)
        bad = got.long() != want
        assert not bool(bad.any()), (
            f"cumprod(+-1, shape={shape}, dim={dim}, {dtype}, exclusive={e}, reverse={r}): "
            f"{int(bad.sum())} wrong signs, first at {bad.nonzero()[0].tolist()}")


@needs_cuda
@pytest.mark.large
@pytest.mark.parametrize("layout", ["transposed", "strided", "expanded_scan", "offset"])
def test_cuda_big_noncontiguous(layout, seed):
    gen = make_gen(seed, "cuda")
    for op, dtype in (("cumsum", f32), ("cumprod", f32), ("linear_recurrence", f32), ("masked_cumsum", i32)):
        for shape, dim in (((2048, 1500), 1), ((1500, 2048), 0), ((4, 300_000), -1)):
            operands = make_operands(op, shape, dim, dtype, "cuda", gen, layout)
            check_op(op, dim, True, False, **operands)
            check_op(op, dim, False, True, **operands)


# 2-8 columns along a long dim: rows of lanes (ops/cuda/lanes_scan.cuh) for floating sums and
# products, one line (look-back chunks), a few lines, short lines (packed rows).
NARROW_SHAPES = [((300_001, 2), 0), ((200_003, 3), 0), ((150_000, 4), 0), ((100_001, 5), 0),
                 ((90_000, 6), 0), ((80_001, 7), 0), ((70_000, 8), 0), ((3, 50_001, 4), 1),
                 ((5, 30_000, 3), 1), ((2000, 9, 6), 1)]


@needs_cuda
@pytest.mark.parametrize("op,dtype", [("cumsum", f32), ("cumsum", f64), ("cumsum", f16),
                                      ("cumsum", bf16), ("cumprod", f32), ("cumprod", f64)],
                         ids=lambda v: v if isinstance(v, str) else dtype_id(v))
@pytest.mark.parametrize("shape,dim", NARROW_SHAPES, ids=[f"{'x'.join(map(str, s))}-d{d}" for s, d in NARROW_SHAPES])
def test_cuda_narrow_columns(shape, dim, op, dtype, seed):
    """Every flag against the float64 reference, the same bits run to run; the same columns
    at an element offset (rows not aligned to their vector: the column kernels) to the same
    tolerance."""
    gen = make_gen(seed, "cuda")
    operands = make_operands(op, shape, dim, dtype, "cuda", gen)
    x = operands["x"]
    flat = torch.empty(x.numel() + 1, dtype=dtype, device="cuda")
    shifted = flat[1:].view(x.shape)
    shifted.copy_(x)
    for e, r in FLAGS:
        got = check_op(op, dim, e, r, **operands)
        assert same_bits(call(op, dim, e, r, x=x), got), "not reproducible"
        check_op(op, dim, e, r, x=shifted)


# Long narrow columns of float32 sums: blocks of at least 2^26 elements of 2, 3, 5, 6 or 7
# columns take one line of column tuples through CCCL's DeviceScan when the library is built
# with it (cub_lanes_sum, ops/cuda/cub_line_scan.h: forward scans of at most 4 such blocks),
# the rest (reverse, 4 columns, 5 blocks) the rows of lanes. Views at an element offset: the
# same paths from an unaligned start.
LONG_NARROW_SHAPES = [((2 ** 25 + 3, 2), 0), ((22_369_622, 3), 0), ((16_777_217, 4), 0),
                      ((13_421_773, 5), 0), ((11_184_811, 6), 0), ((9_586_981, 7), 0),
                      ((2, 22_369_622, 3), 1), ((5, 300_000, 3), 1)]


@needs_cuda
@pytest.mark.large
@pytest.mark.parametrize("shape,dim", LONG_NARROW_SHAPES,
                         ids=[f"{'x'.join(map(str, s))}-d{d}" for s, d in LONG_NARROW_SHAPES])
def test_cuda_long_narrow_columns(shape, dim, seed):
    """Every flag against the float64 reference, without and with a per-column initial value
    (the reference plus it, to the same tolerance), the same bits run to run, the same columns
    at an element offset (an unaligned start), inputs untouched."""
    dtype = f32
    gen = make_gen(seed, "cuda")
    x = make_operands("cumsum", shape, dim, dtype, "cuda", gen)["x"]
    shifted = torch.empty(x.numel() + 1, dtype=dtype, device="cuda")[1:].view(x.shape)
    shifted.copy_(x)
    line = [s for k, s in enumerate(shape) if k != dim]
    h0 = torch.randn(line, generator=gen, device="cuda", dtype=dtype)
    h0_before = h0.clone()
    for e, r in FLAGS:
        got = check_op("cumsum", dim, e, r, x=x)
        assert same_bits(call("cumsum", dim, e, r, x=x), got), "not reproducible"
        check_op("cumsum", dim, e, r, x=shifted)
        ref, tol, out_dtype = expected("cumsum", dim, e, r, x=x)
        gi = ops.cumsum(x, dim, exclusive=e, reverse=r, initial=h0)
        assert same_bits(ops.cumsum(x, dim, exclusive=e, reverse=r, initial=h0), gi), \
            "not reproducible with initial"
        assert_close_to_ref(gi, ref + h0.double().unsqueeze(dim), tol, out_dtype,
                            f"cumsum{tuple(shape)} dim {dim} exclusive={e} reverse={r} initial")
        assert same_bits(h0, h0_before), "initial modified"


@needs_cuda
@pytest.mark.parametrize("dtype", [f32, f64, f16, bf16, i32, i64, i16, i8, u8, b], ids=_id)
@pytest.mark.parametrize("exclusive", [False, True], ids=["incl", "excl"])
@pytest.mark.parametrize("length,offset", [(100_003, 0), (100_003, 1), (1_000_001, 3), (40_000, 0)],
                         ids=["100003", "100003-off1", "1000001-off3", "40000"])
def test_cuda_line_sum(length, offset, dtype, exclusive, seed):
    """One long dense line of a floating, integer or bool cumsum (1-D, a (1, N) row, an (N, 1)
    column): the path that takes CCCL's DeviceScan when the library is built with it
    (ops/cuda/cub_line_scan.h), else the row kernel's look-back. Against the float64
    reference, the same bits on every run and for the three views of the same line, input
    untouched; views at an element offset test unaligned starts."""
    gen = make_gen(seed, "cuda")
    base = rand_data("sum", (length + offset,), dtype, "cuda", gen, length)
    x = base[offset:]
    got = check_op("cumsum", 0, exclusive, False, x=x)
    for _ in range(3):
        assert same_bits(call("cumsum", 0, exclusive, False, x=x), got), "not reproducible"
    assert same_bits(call("cumsum", 1, exclusive, False, x=x.unsqueeze(0)).squeeze(0), got)
    assert same_bits(call("cumsum", 0, exclusive, False, x=x.unsqueeze(1)).squeeze(1), got)
    # the reverse, a masked line and the fused backward take the row kernel: same values
    check_op("cumsum", 0, exclusive, True, x=x)


@needs_cuda
def test_cuda_matches_cpu(seed):
    """Integral results are bit-identical on both devices."""
    gen = make_gen(seed, "cpu")
    for op in SCAN_OPS:
        for dtype in (i8, i32, i64, u8, b):
            for shape, dim in (((33, 1000), 1), ((1000, 33), 0), ((70_001,), 0)):
                x = rand_data("prod" if op == "cumprod" else "sum", shape, dtype, "cpu", gen, shape[dim])
                m = rand_data("mask", shape, b, "cpu", gen)
                for e, r in FLAGS:
                    c = call(op, dim, e, r, x=x, mask=m)
                    g = call(op, dim, e, r, x=x.cuda(), mask=m.cuda())
                    assert torch.equal(c, g.cpu()), (op, dtype, shape, dim, e, r)


@needs_cuda
def test_cuda_side_stream(seed):
    gen = make_gen(seed, "cuda")
    s = torch.cuda.Stream()
    x = rand_data("sum", (64, 100_000), f32, "cuda", gen)
    a = rand_data("coef", (64, 100_000), f32, "cuda", gen, 100_000)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        # Work queued on the side stream only; a kernel on the default stream would race.
        torch.cuda._sleep(50_000_000)
        xs = x * 1.0
        y = ops.cumsum(xs, 1, reverse=True)
        h = ops.linear_recurrence(a, xs, 1, exclusive=True)
    s.synchronize()
    check_op("cumsum", 1, False, True, x=x, got=y)
    check_op("linear_recurrence", 1, True, False, x=x, a=a, got=h)


@needs_cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_cuda_second_device(seed):
    gen = make_gen(seed, "cuda:1")
    for op in OPS:
        operands = make_operands(op, (17, 40_000), 1, f32, "cuda:1", gen)
        got = call(op, 1, True, True, **operands)
        assert got.device == torch.device("cuda:1")
        check_op(op, 1, True, True, **operands, got=got)


@needs_cuda
@pytest.mark.large
def test_cuda_64bit_indexing():
    """More than 2^31 elements: the last elements must be right too."""
    n = 2**30 + 64
    free, _ = torch.cuda.mem_get_info()
    need = 2 * n * (1 + 8) + 2**30
    if free < need:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of free GPU memory")
    x = torch.ones((2, n), dtype=i8, device="cuda")
    y = ops.cumsum(x, 1)
    assert y.dtype == i64
    for row in range(2):
        for start in (0, n // 2, n - 2**20):
            chunk = y[row, start:start + 2**20]
            want = torch.arange(start + 1, start + 1 + chunk.numel(), device="cuda")
            assert torch.equal(chunk, want), (row, start)
    del y
    y = ops.cumsum(x, 1, exclusive=True, reverse=True)
    assert y[0, 0].item() == n - 1 and y[1, -1].item() == 0 and y[1, 0].item() == n - 1
    del y
    # float32 along a 2^31+ line: compare a sum of small integers exactly (counts < 2^24).
    del x
    xf = torch.zeros(2 * n, dtype=f16, device="cuda")
    xf[:: 2**8] = 1
    yf = ops.cumsum(xf, 0, dtype=f32)  # counts < 2^24: exact in float32 in any order
    for start in (0, n, 2 * n - 2**20):
        idx = torch.arange(start, start + 2**20, device="cuda")
        assert torch.equal(yf[start:start + 2**20], (idx // 2**8 + 1).float()), start
