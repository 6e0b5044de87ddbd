"""Seeded randomized differential test: random op / dtype / dtype= / flags / rank 0-4 / sizes
(0 and 1 included) / dim / memory layout / broadcast companions, against reference.py.

Case i is generated from (SCANOPS_TEST_SEED, i) alone, so a failure is reproduced with
``pytest test/python/test_random.py -k 'case17'``. SCANOPS_RANDOM_CASES changes the count.
"""
from __future__ import annotations

import math
import os
import random

import pytest
import torch

from reference import (ALL_DTYPES, DEVICES, FLOAT_DTYPES, LAYOUTS, OPS, check_op, dtype_id, make_gen,
                       make_layout, rand_data)

BASE_SEED = int(os.environ.get("SCANOPS_TEST_SEED", "0"))
N_CASES = int(os.environ.get("SCANOPS_RANDOM_CASES", "200"))
MAX_NUMEL = 200_000
LOW = (torch.float16, torch.bfloat16)


def _size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.06:
        return 0
    if r < 0.22:
        return 1
    if r < 0.65:
        return rng.randint(2, 9)
    if r < 0.92:
        return rng.randint(10, 130)
    return rng.randint(131, 5000)


def make_case(i: int) -> dict:
    rng = random.Random(f"{BASE_SEED}-{i}")
    op = rng.choice(OPS)
    ndim = rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4])
    shape = [_size(rng) for _ in range(ndim)]
    while math.prod(shape) > MAX_NUMEL:
        k = max(range(ndim), key=lambda j: shape[j])
        shape[k] = max(1, shape[k] // 3)
    n = max(ndim, 1)
    dim = rng.randint(-n, n - 1)
    dtype = rng.choice(FLOAT_DTYPES if op == "linear_recurrence" else ALL_DTYPES)
    dtype_arg = None
    if op != "linear_recurrence" and rng.random() < 0.25:
        dtype_arg = rng.choice([d for d in ALL_DTYPES if d != torch.bool])
    companion_shape = None
    if op in ("masked_cumsum", "linear_recurrence") and ndim and rng.random() < 0.4:
        cs = [1 if rng.random() < 0.5 else s for s in shape]
        companion_shape = cs[rng.randint(0, ndim):]  # maybe fewer leading dims
    return dict(op=op, shape=tuple(shape), dim=dim, dtype=dtype, dtype_arg=dtype_arg,
                exclusive=rng.random() < 0.5, reverse=rng.random() < 0.5,
                layout=rng.choice(LAYOUTS), c_layout=rng.choice(LAYOUTS),
                companion_shape=None if companion_shape is None else tuple(companion_shape),
                seed=rng.randrange(2**31))


def _fill(case, role, dtype, device, gen, n_scan):
    op, dt_arg = case["op"], case["dtype_arg"]

    def fill(shape):
        if role in ("mask", "coef"):
            return rand_data(role, shape, dtype, device, gen, n_scan)
        r = "prod" if op == "cumprod" else "sum"
        x = rand_data(r, shape, dtype, device, gen, n_scan)
        if dt_arg is not None:
            if dtype.is_floating_point and not dt_arg.is_floating_point and r == "sum":
                x = (x.float() * 20).to(dtype)  # fractional: truncation happens before the scan
            if dt_arg == torch.uint8 and dtype.is_floating_point:
                x = x.abs()  # negative float -> uint8 is undefined behaviour
            if dt_arg.is_floating_point and not dtype.is_floating_point and dtype != torch.bool:
                # keep floating results finite: products of -1/0/1 (0/1 unsigned), small sums
                xl = x.long()
                if r == "prod":
                    xl = xl.remainder(2) if dtype == torch.uint8 else xl.remainder(3) - 1
                elif dt_arg in LOW:
                    xl = xl.remainder(9)
                x = xl.to(dtype)
        return x
    return fill


CASES = [make_case(i) for i in range(N_CASES)]


def _case_id(i):
    c = CASES[i]
    fl = ("e" if c["exclusive"] else "") + ("r" if c["reverse"] else "")
    dt = f"->{dtype_id(c['dtype_arg'])}" if c["dtype_arg"] is not None else ""
    shape = "x".join(map(str, c["shape"])) or "scalar"
    return f"case{i}-{c['op']}-{dtype_id(c['dtype'])}{dt}-{shape}-d{c['dim']}-{fl or 'i'}-{c['layout']}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("i", range(N_CASES), ids=_case_id)
def test_random_case(i, device):
    c = CASES[i]
    gen = make_gen(c["seed"], device)
    shape, dim = c["shape"], c["dim"]
    n_scan = shape[dim % len(shape)] if shape else 1
    n_x = n_scan * n_scan if c["layout"] == "expanded_scan" else n_scan  # c^n stays in range
    x = make_layout(shape, dim, c["layout"], _fill(c, "x", c["dtype"], device, gen, n_x))
    mask = a = None
    cshape = shape if c["companion_shape"] is None else c["companion_shape"]
    cdim = dim if len(cshape) == len(shape) else 0
    if c["op"] == "masked_cumsum":
        lay = c["c_layout"] if len(cshape) == len(shape) else "contiguous"
        mask = make_layout(cshape, cdim, lay, _fill(c, "mask", torch.bool, device, gen, n_scan))
    if c["op"] == "linear_recurrence":
        lay = c["c_layout"] if len(cshape) == len(shape) else "contiguous"
        a = make_layout(cshape, cdim, lay, _fill(c, "coef", c["dtype"], device, gen, n_scan))
    check_op(c["op"], dim, c["exclusive"], c["reverse"], x=x, mask=mask, a=a, dtype=c["dtype_arg"],
             ctx=f"[random case {i}: {c}]")


def test_random_cases_cover_the_space():
    """The generator really mixes ops, dtypes, ranks, flags, layouts and empty / size-1 dims."""
    if N_CASES < 100:
        pytest.skip("too few cases to judge coverage")
    seen = lambda key: {c[key] for c in CASES}  # noqa: E731
    assert seen("op") == set(OPS)
    assert len(seen("dtype")) == len(ALL_DTYPES)
    assert {len(c["shape"]) for c in CASES} == {0, 1, 2, 3, 4}
    assert seen("layout") == set(LAYOUTS)
    assert {(c["exclusive"], c["reverse"]) for c in CASES} == {(a, b) for a in (0, 1) for b in (0, 1)}
    assert any(0 in c["shape"] for c in CASES) and any(1 in c["shape"] for c in CASES)
    assert any(c["dtype_arg"] is not None for c in CASES)
    assert any(c["companion_shape"] is not None for c in CASES)
