"""CPU back end: results are bitwise identical run to run and for every thread count, accurate
(float32 accumulates in float64), and calls from several Python threads at once are safe.

The shapes drive every scheduling path of ops/cpu/scan_cpu_kernels.h: many short rows, rows of 4,
few long rows (the chained scan over fixed blocks, with a tail), a 1-D line, blocked column
scans (few columns, long lines), middle-dim and outer-dim column scans.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import conftest
from reference import extremum_ref, linrec_ref, scan_ref

ops = torch.ops.scanops

# (shape, dim): chosen so that lines span several fixed blocks (32768 float32 elements) with
# a ragged tail, and column scans are long enough to be blocked along the length.
SHAPES = [
    ((100_003,), 0),          # 1-D: chained scan over blocks
    ((3, 70_001), 1),         # few long rows
    ((64, 1000), 1),          # many short rows (one block each)
    ((1000, 4), 1),           # rows of 4
    ((70_001, 5), 0),         # few columns, long lines: blocked column scan
    ((2, 40_001, 3), 1),      # middle dim, few columns
    ((300, 50, 37), 1),       # middle dim, many columns
    ((257, 1031), 0),         # outer dim
]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int32]
THREADS = [1, 2, 3, 4]
FLAGS = [(False, False), (True, False), (False, True), (True, True)]
CASES = [("cumsum", False, False), ("cumsum", True, False), ("cumsum", False, True),
         ("cumsum", True, True), ("masked_cumsum", False, False), ("masked_cumsum", True, True),
         ("cumprod", False, False), ("cumprod", True, True), ("linear_recurrence", False, False),
         ("linear_recurrence", True, True)]


def _inputs(op, shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        if op == "cumprod":
            x = (torch.rand(shape, generator=g, dtype=torch.float64) * 0.02 + 0.99).to(dtype)
        else:
            x = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)
    else:
        x = torch.randint(-100, 100, shape, generator=g, dtype=dtype)
    m = torch.rand(shape, generator=g) < 0.7
    a = (torch.rand(shape, generator=g, dtype=torch.float64) * 0.2 + 0.8).to(dtype) \
        if dtype.is_floating_point else None
    return x, m, a


def _run(op, dim, excl, rev, x, m, a):
    if op == "cumsum":
        return ops.cumsum(x, dim, exclusive=excl, reverse=rev)
    if op == "masked_cumsum":
        return ops.masked_cumsum(x, m, dim, exclusive=excl, reverse=rev)
    if op == "cumprod":
        return ops.cumprod(x, dim, exclusive=excl, reverse=rev)
    return ops.linear_recurrence(a, x, dim, exclusive=excl, reverse=rev)


def _same_bits(a, b):
    if a.dtype.is_floating_point:
        return torch.equal(a.view(-1).view(torch.uint8 if a.element_size() == 1 else {
            2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]),
            b.view(-1).view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[b.element_size()]))
    return torch.equal(a, b)


@pytest.mark.parametrize("op,excl,rev", CASES, ids=[f"{o}-{'x' if e else 'i'}{'r' if r else ''}" for o, e, r in CASES])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_bitwise_independent_of_threads(op, excl, rev, dtype, seed):
    if op == "linear_recurrence" and not dtype.is_floating_point:
        pytest.skip("linear_recurrence takes floating types")
    for i, (shape, dim) in enumerate(SHAPES):
        x, m, a = _inputs(op, shape, dtype, seed + i)
        torch.set_num_threads(1)
        want = _run(op, dim, excl, rev, x, m, a)
        assert _same_bits(_run(op, dim, excl, rev, x, m, a), want), ("run to run", shape, dim)
        for t in THREADS[1:]:
            torch.set_num_threads(t)
            for _ in range(2):
                got = _run(op, dim, excl, rev, x, m, a)
                assert _same_bits(got, want), (shape, dim, t)
        # and the result is right
        if dtype.is_floating_point:
            xd = x.double()
            if op == "linear_recurrence":
                ref = linrec_ref(a.double(), xd, dim, excl, rev)
            elif op == "cumprod":
                ref = scan_ref("prod", xd, dim, excl, rev)
            else:
                v = torch.where(m, xd, 0.0) if op == "masked_cumsum" else xd
                ref = scan_ref("sum", v, dim, excl, rev)
            tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2}[dtype]
            torch.testing.assert_close(want.double(), ref, rtol=tol, atol=tol * 10)
        else:
            v = torch.where(m, x.long(), 0) if op == "masked_cumsum" else x.long()
            assert torch.equal(want, scan_ref("prod" if op == "cumprod" else "sum", v, dim, excl, rev))


# Complex sums (the AVX2 complex row kernel where the CPU has AVX2): rows crossing the fixed
# blocks (16384 complex64 / 8192 complex128 elements) with ragged tails, odd and tiny lengths,
# rows of 2 and 4, a start that is not 16-byte aligned, columns.
COMPLEX_SHAPES = [((100_003,), 0), ((3, 40_001), 1), ((64, 1001), 1), ((1000, 4), 1), ((999, 2), 1),
                  ((7, 3), 1), ((5, 1), 1), ((70_001, 5), 0), ((257, 1031), 0)]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=["complex64", "complex128"])
@pytest.mark.parametrize("masked", [False, True], ids=["cumsum", "masked"])
def test_complex_sums_bitwise_independent_of_threads(dtype, masked, seed):
    g = torch.Generator().manual_seed(seed)
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    for shape, dim in COMPLEX_SHAPES + [((40_003,), 0)]:
        unaligned = shape == (40_003,)
        n_alloc = (shape[0] + 1,) if unaligned else shape
        for kind in ("int", "randn"):
            if kind == "int":  # small integers: every partial sum is exact, any order
                x = torch.complex(torch.randint(-3, 4, n_alloc, generator=g).to(real),
                                  torch.randint(-3, 4, n_alloc, generator=g).to(real))
            else:
                x = torch.complex(torch.randn(n_alloc, generator=g, dtype=real),
                                  torch.randn(n_alloc, generator=g, dtype=real))
            if unaligned:
                x = x[1:]  # data pointer 8 (complex64) / 16 (complex128) bytes past the allocation
            m = torch.rand(shape, generator=g) < 0.6
            for excl, rev in FLAGS:
                def f():
                    if masked:
                        return ops.masked_cumsum(x, m, dim, exclusive=excl, reverse=rev)
                    return ops.cumsum(x, dim, exclusive=excl, reverse=rev)
                torch.set_num_threads(1)
                want = f()
                assert torch.equal(torch.view_as_real(f()), torch.view_as_real(want)), (shape, dim)
                for t in THREADS[1:]:
                    torch.set_num_threads(t)
                    assert torch.equal(torch.view_as_real(f()), torch.view_as_real(want)), (shape, dim, t)
                v = x.to(torch.complex128) * (m if masked else 1)
                ref = scan_ref("sum", v, dim, excl, rev)
                ctx = (dtype, masked, shape, dim, kind, excl, rev)
                if kind == "int":
                    assert torch.equal(want, ref.to(dtype)), ctx
                else:
                    # complex<double> accumulation, one rounding to the output type
                    eps = torch.finfo(real).eps
                    bound = scan_ref("sum", v.abs().to(torch.complex128), dim, excl, rev).real
                    tol = eps * ref.abs() + (1e-12 if real == torch.float32 else 64 * eps) * bound + 1e-30
                    assert bool(((want.to(torch.complex128) - ref).abs() <= tol).all()), ctx
    torch.set_num_threads(1)


# cummax / cummin along rows of float32 / float64 (the AVX2 walk: broadcast groups, in-register
# (value, offset) scans of groups with a winner): data kinds that take each path, rows across
# the fixed blocks (32768 float32 / 16384 float64 elements), odd and short rows, an unaligned
# start; values bit for bit (NaN payloads, signed zeros) and indices equal to torch's.
EXTREMUM_SHAPES = [((100_003,), 0), ((3, 70_001), 1), ((64, 1001), 1), ((1000, 4), 1), ((99, 17), 1),
                   ((5, 3), 1), ((4, 1), 1), ((40_003,), 0)]


def _extremum_data(kind, shape, dtype, g):
    if kind == "rand":
        return torch.rand(shape, generator=g, dtype=dtype)
    if kind == "inc":
        return torch.arange(shape[-1], dtype=dtype).expand(shape).contiguous()
    if kind == "dec":
        return -torch.arange(shape[-1], dtype=dtype).expand(shape).contiguous()
    if kind == "ties":  # few values, +0.0 and -0.0 among them
        return torch.tensor([0.0, -0.0, 1.0, -1.0], dtype=dtype)[torch.randint(0, 4, shape, generator=g)]
    x = torch.randn(shape, generator=g, dtype=dtype)  # "special": NaN (two payloads), +-inf
    r = torch.rand(shape, generator=g)
    x[r < 0.01] = float("nan")
    x[(r >= 0.01) & (r < 0.011)] = -float("nan")
    x[(r >= 0.02) & (r < 0.03)] = float("inf")
    x[(r >= 0.03) & (r < 0.04)] = -float("inf")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_extremum_rows_match_torch_for_every_thread_count(op, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    iv = torch.int32 if dtype == torch.float32 else torch.int64
    for shape, dim in EXTREMUM_SHAPES:
        unaligned = shape == (40_003,)
        for kind in ("rand", "inc", "dec", "ties", "special"):
            x = _extremum_data(kind, (shape[0] + 1,) if unaligned else shape, dtype, g)
            if unaligned:
                x = x[1:]
            for excl, rev in FLAGS:
                wv, wi = extremum_ref(op, x, dim, excl, rev)
                for t in THREADS:
                    torch.set_num_threads(t)
                    v, i = getattr(ops, op)(x, dim, exclusive=excl, reverse=rev)
                    ctx = (op, dtype, shape, kind, excl, rev, t)
                    assert torch.equal(i, wi), ctx
                    assert torch.equal(v.view(iv), wv.view(iv)), ctx
    torch.set_num_threads(1)


# cummax / cummin along columns (inner > 1) of float32 / float64 (the AVX2 column walk: each
# SIMD lane one column, (value, int64 position) per lane, whole vectors of 8 floats / 4 doubles
# then single remainder columns): dim 0 and a middle dim, every inner width 1..20 and 67 (the
# remainders of both vector widths), data that changes the winner often (monotone along the
# scan dim), ties with +0.0 / -0.0, NaN with two payloads and +-inf, long columns (the blocked
# and chained column scans with carries), non-contiguous and offset inputs.
def _extremum_col_data(kind, shape, dim, dtype, g):
    if kind in ("inc", "dec"):
        n = shape[dim]
        r = torch.arange(n, dtype=dtype) * (1 if kind == "inc" else -1)
        view = [1] * len(shape)
        view[dim] = n
        return r.view(view).expand(shape).contiguous()
    return _extremum_data(kind, shape, dtype, g)


def _check_extremum(op, x, dim, dtype, ctx):
    iv = torch.int32 if dtype == torch.float32 else torch.int64
    for excl, rev in FLAGS:
        wv, wi = extremum_ref(op, x, dim, excl, rev)
        for t in THREADS:
            torch.set_num_threads(t)
            v, i = getattr(ops, op)(x, dim, exclusive=excl, reverse=rev)
            c = ctx + (excl, rev, t)
            assert torch.equal(i, wi), c
            assert torch.equal(v.view(iv), wv.view(iv)), c


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_extremum_columns_match_torch_for_every_thread_count(op, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    kinds = ("rand", "inc", "dec", "ties", "special")
    for inner in list(range(1, 21)) + [67]:
        for shape, dim in (((29, inner), 0), ((3, 13, inner), 1)):
            for kind in kinds:
                x = _extremum_col_data(kind, shape, dim, dtype, g)
                _check_extremum(op, x, dim, dtype, (op, dtype, shape, dim, kind))
    # long columns: blocked along the length (few columns), chained across threads; many
    # columns (several work items per outer index); a middle dim with few columns
    for shape, dim in (((70_001, 5), 0), ((20_003, 8), 0), ((9_001, 3, 7), 0), ((2, 40_001, 3), 1),
                       ((2, 20_001, 12), 1), ((300, 2_053), 0), ((5, 70, 1_031), 1)):
        for kind in ("rand", "inc", "ties", "special"):
            x = _extremum_col_data(kind, shape, dim, dtype, g)
            _check_extremum(op, x, dim, dtype, (op, dtype, shape, dim, kind))
    # non-contiguous inputs (a strided inner dim, a transposed tensor) and an offset start
    for kind in ("rand", "ties", "special"):
        x = _extremum_col_data(kind, (61, 2 * 19), 0, dtype, g)[:, ::2]
        _check_extremum(op, x, 0, dtype, (op, dtype, "strided", kind))
        x = _extremum_col_data(kind, (23, 41), 0, dtype, g).t()
        _check_extremum(op, x, 1, dtype, (op, dtype, "transposed", kind))
        x = _extremum_col_data(kind, (47 * 24 + 1,), 0, dtype, g)[1:].view(47, 24)
        _check_extremum(op, x, 0, dtype, (op, dtype, "offset", kind))
    torch.set_num_threads(1)


STREAM_SCRIPT = textwrap.dedent("""
    import sys, torch
    torch.ops.load_library(sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from reference import extremum_ref as ref
    ops = torch.ops.scanops

    g = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.float64):
        iv = torch.int32 if dtype == torch.float32 else torch.int64
        for shape, dim in [((300, 64), 0), ((300, 67), 0), ((7, 50, 32), 1), ((20_003, 8), 0), ((1000, 12), 0)]:
            x = torch.randn(shape, generator=g, dtype=dtype)
            r = torch.rand(shape, generator=g)
            x[r < 0.02] = float("nan")
            x[(r >= 0.02) & (r < 0.03)] = -float("nan")
            for op in ("cummax", "cummin"):
                for excl in (False, True):
                    for rev in (False, True):
                        wv, wi = ref(op, x, dim, excl, rev)
                        for t in (1, 2, 3):
                            torch.set_num_threads(t)
                            v, i = getattr(ops, op)(x, dim, exclusive=excl, reverse=rev)
                            ctx = (dtype, shape, dim, op, excl, rev, t)
                            assert torch.equal(i, wi), ctx
                            assert torch.equal(v.view(iv), wv.view(iv)), ctx
    print("ok")
""")


def test_extremum_columns_streaming_stores():
    """The streaming-store column walk (SCANOPS_CPU_STREAM=1 forces it at every size), in a
    fresh process: aligned rows of whole vectors and rows with a remainder."""
    e = dict(os.environ, SCANOPS_CPU_STREAM="1")
    r = subprocess.run([sys.executable, "-c", STREAM_SCRIPT, str(conftest.library_path()),
                        os.path.dirname(os.path.abspath(__file__))],
                       env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


STORES_SCRIPT = textwrap.dedent("""
    import hashlib, json, sys, torch
    torch.ops.load_library(sys.argv[1])
    ops = torch.ops.scanops

    # Every scheduling path that writes outputs: many short rows, rows of 4, few long rows
    # (chained), many long rows, 1-D, blocked columns (w == inner), middle dims, outer dims whose
    # items a thread walks side by side (at 2 threads 4 x 2048 float32 columns = 32 KiB a row:
    # the per-row populate calls), ragged tails; chained scans of 64 blocks or more (1-D and
    # blocked columns).
    shapes = [((64, 1000), 1), ((1000, 4), 1), ((3, 70_001), 1), ((13, 70_001), 1), ((100_003,), 0),
              ((70_001, 5), 0), ((2, 40_001, 3), 1), ((300, 50, 37), 1), ((257, 1031), 0),
              ((100, 16384), 0), ((3, 50, 2000), 1), ((2_100_007,), 0), ((430_001, 5), 0)]
    g = torch.Generator().manual_seed(5)
    out = {}

    def check(key, f):
        torch.set_num_threads(1)
        want = f()
        for t in (2, 3):
            torch.set_num_threads(t)
            assert torch.equal(f().view(-1).view(torch.int8), want.view(-1).view(torch.int8)), (key, t)
        # the digest of the bits, not the outputs: 7 modes' outputs took 13.8 GB of disk
        out[repr(key)] = hashlib.sha256(want.contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()

    for shape, dim in shapes:
        for dtype in (torch.float32, torch.float64):
            x = torch.rand(shape, generator=g, dtype=dtype) * 2 - 1
            a = torch.rand(shape, generator=g, dtype=dtype) * 0.2 + 0.8
            m = torch.rand(shape, generator=g) < 0.7
            xc = torch.complex(x, a) if x.dim() == 2 and dim == 1 else None
            for excl, rev in ((False, False), (True, True), (True, False), (False, True)):
                kw = dict(exclusive=excl, reverse=rev)
                k = (shape, dim, str(dtype), excl, rev)
                check(k + ("cumsum",), lambda: ops.cumsum(x, dim, **kw))
                check(k + ("linrec",), lambda: ops.linear_recurrence(a, x, dim, **kw))
                if excl != rev:
                    continue
                check(k + ("masked",), lambda: ops.masked_cumsum(x, m, dim, **kw))
                check(k + ("cumprod",), lambda: ops.cumprod(x, dim, **kw))
                check(k + ("cummax",), lambda: torch.cat([v.view(-1).double() for v in ops.cummax(x, dim, **kw)]))
                if dtype == torch.float32:
                    check(k + ("lcse",), lambda: ops.logcumsumexp(x, dim, **kw))
                if xc is not None:
                    check(k + ("c-cumsum",), lambda: torch.view_as_real(ops.cumsum(xc, dim, **kw)))
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
    print("ok")
""")


def test_store_modes_same_bits(tmp_path):
    """Output pages populated ahead of the stores (SCANOPS_CPU_POPULATE=1: at every size, the
    walks then go a range of rows at a time; from 3 threads the chained scans claim runs of
    blocks, each populated by its worker, or with SCANOPS_CPU_RUN_BYTES=0 single blocks with the
    whole output populated first), the chained scans' prefetch of the next run, and streaming stores
    (SCANOPS_CPU_STREAM=1 / -1) give the bits of plain stores, for every thread count: each mode
    in a fresh process."""
    modes = [{"SCANOPS_CPU_POPULATE": "0", "SCANOPS_CPU_STREAM": "0"}, {"SCANOPS_CPU_POPULATE": "1"},
             {"SCANOPS_CPU_POPULATE": "1", "SCANOPS_CPU_STREAM": "1"}, {"SCANOPS_CPU_STREAM": "1"},
             # chained scans from 3 threads: one block a claim with the whole output populated
             # first; runs of 3 blocks (ragged last runs); rescans prefetching 2 KiB ahead
             {"SCANOPS_CPU_POPULATE": "1", "SCANOPS_CPU_RUN_BYTES": "0"},
             {"SCANOPS_CPU_POPULATE": "1", "SCANOPS_CPU_RUN_BYTES": "400000"},
             {"SCANOPS_CPU_POPULATE": "1", "SCANOPS_CPU_PF_NEXT": "0"}]
    results = []
    for i, mode in enumerate(modes):
        e = dict(os.environ, **mode)
        f = tmp_path / f"out{i}.json"
        r = subprocess.run([sys.executable, "-c", STORES_SCRIPT, str(conftest.library_path()), str(f)],
                           env=e, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0 and "ok" in r.stdout, (mode, r.stdout + r.stderr)
        results.append(json.loads(f.read_text()))
    assert len(results[0]) == 406, len(results[0])  # 13 shapes x 2 dtypes: every (op, flags) checked
    for mode, res in zip(modes[1:], results[1:]):
        assert res.keys() == results[0].keys()
        for k, v in res.items():
            assert v == results[0][k], (mode, k)


HUGE_SCRIPT = textwrap.dedent("""
    import hashlib, json, sys, torch
    torch.ops.load_library(sys.argv[1])
    ops = torch.ops.scanops
    # outputs of at least 16 MiB: the sizes whose pages advise_huge_pages considers
    g = torch.Generator().manual_seed(11)
    x = torch.rand((1 << 22) + 5, generator=g)
    a = torch.rand((1 << 22) + 5, generator=g) * 0.2 + 0.8
    before = x.clone()
    out = {}
    for t in (1, 3):
        torch.set_num_threads(t)
        out[f"1d-{t}"] = ops.cumsum(x, 0)
        out[f"rows-{t}"] = ops.linear_recurrence(a[:1 << 22].view(64, -1), x[:1 << 22].view(64, -1), 1)
        out[f"dim0-{t}"] = ops.cumsum(x[:1 << 22].view(-1, 64), 0, reverse=True)
        out[f"cmaxv-{t}"], out[f"cmaxi-{t}"] = ops.cummax(x, 0)  # (values and indices advised)
    assert torch.equal(x, before)
    # digests of the bits (not the outputs: disk), and the 1-D sum's error against float64
    ref = torch.cumsum(x.double(), 0)
    rel = ((out["1d-1"].double() - ref).abs() / ref.abs()).max().item()
    bits = {k: hashlib.sha256(v.contiguous().view(-1).view(torch.uint8).numpy()).hexdigest() for k, v in out.items()}
    with open(sys.argv[2], "w") as f:
        json.dump({"bits": bits, "rel": rel}, f)
    print("ok")
""")


def test_huge_page_modes_same_bits(tmp_path):
    """Outputs (cummax: values and indices) of 16 MiB and more with transparent huge pages never advised
    (SCANOPS_CPU_HUGEPAGES=0), always (1) and by default (advised while free 2 MiB blocks
    cover the output): the same bits, at 1 and 3 threads, and the float64 reference's values."""
    results = []
    for i, mode in enumerate(("0", "1", None)):
        e = dict(os.environ)
        e.pop("SCANOPS_CPU_HUGEPAGES", None)
        if mode is not None:
            e["SCANOPS_CPU_HUGEPAGES"] = mode
        f = tmp_path / f"huge{i}.json"
        r = subprocess.run([sys.executable, "-c", HUGE_SCRIPT, str(conftest.library_path()), str(f)],
                           env=e, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0 and "ok" in r.stdout, (mode, r.stdout + r.stderr)
        results.append(json.loads(f.read_text()))
    base = results[0]["bits"]
    assert len(base) == 10, base.keys()
    for mode, res in zip(("1", None), results[1:]):
        assert res["bits"] == base, mode
    for k in [k for k in base if k.endswith("-3")]:  # every output: 3 threads as 1
        assert base[k] == base[k[:-2] + "-1"], k
    assert results[0]["rel"] <= 1e-7, results[0]["rel"]


def test_float32_accuracy_matches_float64_accumulation():
    """32768 uniform [0, 1) values: max relative error <= 1e-7 (float64 accumulation, one
    rounding to float32), at every thread count, for rows and columns."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(32768, generator=g)
    ref = torch.cumsum(x.double(), 0)
    for t in THREADS:
        torch.set_num_threads(t)
        for got in (ops.cumsum(x, 0), ops.cumsum(x.view(-1, 1), 0).view(-1),
                    ops.cumsum(x.flip(0), 0, reverse=True).flip(0)):
            rel = ((got.double() - ref).abs() / ref.abs()).max().item()
            assert rel <= 1e-7, (t, rel)
    # a long line split across threads
    x = torch.rand(1 << 20, generator=g)
    ref = torch.cumsum(x.double(), 0)
    torch.set_num_threads(4)
    rel = ((ops.cumsum(x, 0).double() - ref).abs() / ref.abs()).max().item()
    assert rel <= 1e-7, rel


def test_concurrent_calls_from_python_threads():
    """Several Python threads calling ops on chained-scan shapes at once: correct results,
    no deadlock (the chained scan never waits on a block that no running worker holds)."""
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(1)
    xs = [torch.rand(200_003, generator=g) for _ in range(4)] + [torch.rand(70_001, 5, generator=g)]
    want = [ops.cumsum(x, 0) for x in xs]
    errors = []

    def work(i):
        try:
            for _ in range(5):
                for x, w in zip(xs, want):
                    if not torch.equal(ops.cumsum(x, 0), w):
                        errors.append(i)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in ts), "deadlock"
    assert not errors, errors


GENERIC_SCRIPT = textwrap.dedent("""
    import sys, torch
    torch.ops.load_library(sys.argv[1])
    ops = torch.ops.scanops
    g = torch.Generator().manual_seed(2)
    for shape, dim in [((100_003,), 0), ((3, 70_001), 1), ((70_001, 5), 0), ((1000, 4), 1)]:
        x = torch.rand(shape, generator=g)
        a = torch.rand(shape, generator=g) * 0.2 + 0.8
        fns = [lambda: ops.cumsum(x, dim), lambda: ops.cumsum(x, dim, exclusive=True, reverse=True),
               lambda: ops.linear_recurrence(a, x, dim)]
        for f in fns:
            torch.set_num_threads(1)
            want = f()
            for t in (2, 3):
                torch.set_num_threads(t)
                assert torch.equal(f().view(torch.int32), want.view(torch.int32)), (shape, dim, t)
        ref = torch.cumsum(x.double(), dim)
        torch.testing.assert_close(ops.cumsum(x, dim).double(), ref, rtol=1e-6, atol=1e-5)
    print("ok")
""")


@pytest.mark.parametrize("env", [{"SCANOPS_CPU_KERNELS": "generic"}, {"ATEN_CPU_CAPABILITY": "default"}],
                         ids=["generic", "aten-default"])
def test_portable_kernel_path(env):
    """The portable (non-AVX2) kernels, forced through the environment, in a fresh process."""
    e = dict(os.environ, **env)
    r = subprocess.run([sys.executable, "-c", GENERIC_SCRIPT, str(conftest.library_path())],
                       env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------------------------------
# logcumsumexp of float32 / float64: the AVX2 kernel (ops/cpu/scan_cpu_lse_avx2.h, where the
# CPU has AVX2 + FMA). Every block is walked from its carry-in, so the bits must not depend on
# the thread count: rows of one block, long rows and 1-D lines split across threads (the
# chained scan: blocks of 32768 float32 / 16384 float64 elements, ragged tails), many long
# rows, columns with remainder lanes, blocked columns (few columns, long lines), middle dims;
# rows of 1-7 elements (the padded last group) and an unaligned start (a view at offset 1).
# ------------------------------------------------------------------------------------------
INF, NAN = float("inf"), float("nan")
LCSE_SHAPES = SHAPES + [((5, 100_003), 1), ((9, 7), 1), ((11, 3), 1), ((6, 1), 1), ((40, 2), 1),
                        ((33, 5), 1), ((3, 9), 0), ((2, 40_001, 6), 1)]


def _lcse_input(shape, dim, dtype, kind, seed):
    """'random': randn * 10; 'special' (lines along `dim`): a leading -inf run over the first
    40% (crossing the first block on long lines), then values with 30% -inf, one +inf in the
    odd lines at 70% and one NaN in the lines 1 mod 3 at 90%."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 10
    if kind == "special":
        xl = x.movedim(dim, -1).reshape(-1, shape[dim])  # a copy: lines as rows
        n = xl.shape[1]
        r = torch.rand(xl.shape, generator=g, dtype=torch.float64)
        xl = torch.where(r < 0.3, -INF, xl)
        xl[:, : (4 * n) // 10] = -INF
        xl[1::2, (7 * n) // 10] = INF
        xl[1::3, (9 * n) // 10] = NAN
        moved = list(x.movedim(dim, -1).shape)
        x = xl.reshape(moved).movedim(-1, dim).contiguous()
    return x.to(dtype)


def _lcse_ref(x, dim, excl, rev):
    """torch.logcumsumexp in float64, composed with flip / shift."""
    xs = x.double().flip(dim) if rev else x.double()
    y = torch.logcumsumexp(xs, dim)
    if excl:
        y = torch.cat([torch.full_like(y.narrow(dim, 0, 1), -INF), y.narrow(dim, 0, y.shape[dim] - 1)], dim)
    return y.flip(dim) if rev else y


def _assert_lcse_near(got, ref, dtype, ctx):
    g = got.double()
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(g), fin), ctx
    same = (g == ref) | (torch.isnan(g) & torch.isnan(ref))
    assert bool(same[~fin].all()), ctx
    if dtype == torch.float32:  # float64 arithmetic, one rounding: within half an ulp and a bit
        tol = 0.51 * torch.finfo(torch.float32).eps * ref.abs() + 1e-12
    else:  # the float64 reference (sequential log-add-exp) has errors of its own
        tol = 1e-11 * (ref.abs() + 1)
    err = (g - ref).abs()
    assert bool((err[fin] <= tol[fin]).all()), (ctx, (err[fin] - tol[fin]).max().item())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["random", "special"])
def test_logcumsumexp_bitwise_independent_of_threads(dtype, kind, seed):
    for i, (shape, dim) in enumerate(LCSE_SHAPES):
        x = _lcse_input(shape, dim, dtype, kind, seed + i)
        if shape == (100_003,):  # unaligned start: a view at element offset 1
            x = torch.cat([x[:1], x])[1:]
        for excl, rev in FLAGS:
            torch.set_num_threads(1)
            want = ops.logcumsumexp(x, dim, exclusive=excl, reverse=rev)
            ctx = (dtype, kind, shape, dim, excl, rev)
            assert _same_bits(ops.logcumsumexp(x, dim, exclusive=excl, reverse=rev), want), ("run to run",) + ctx
            for t in THREADS[1:]:
                torch.set_num_threads(t)
                got = ops.logcumsumexp(x, dim, exclusive=excl, reverse=rev)
                assert _same_bits(got, want), ctx + (t,)
            _assert_lcse_near(want, _lcse_ref(x, dim, excl, rev), dtype, ctx)
            if excl:  # the first position in scan order is exactly -inf
                first = want.narrow(dim, shape[dim] - 1 if rev else 0, 1)
                assert bool((first == -INF).all()), ctx


def test_logcumsumexp_semantics_as_torch():
    """-inf as the identity (an all -inf prefix stays -inf, never NaN), +inf, NaN propagation,
    both infinities, in rows, columns and a 1-D line, at every thread count: the same non-finite
    positions as torch.logcumsumexp and the finite values within float32 rounding."""
    rows = [[-INF] * 6, [-INF, -INF, 0.5, -INF, 1.0, -INF], [0.0, INF, 1.0, -INF, 2.0, 3.0],
            [1.0, NAN, -INF, 2.0, 0.0, 1.0], [INF, -INF, INF, -INF, 0.0, 0.0],
            [-INF, -INF, -INF, -INF, -INF, 7.0], [3.0, 2.0, 1.0, 0.0, -1.0, 1000.0],
            [-1e30, 1e30, -INF, 0.0, 1e30, 1e30]]
    for dtype in (torch.float32, torch.float64):
        x = torch.tensor(rows, dtype=dtype)
        for t in (1, 3):
            torch.set_num_threads(t)
            for xx, dim in ((x, 1), (x.t().contiguous(), 0), (x.reshape(-1), 0)):
                want = torch.logcumsumexp(xx, dim)
                got = ops.logcumsumexp(xx, dim)
                assert torch.equal(torch.isnan(got), torch.isnan(want)), (dtype, dim)
                assert torch.equal(torch.isinf(got), torch.isinf(want)) and bool(
                    (got[torch.isinf(want)] == want[torch.isinf(want)]).all()), (dtype, dim)
                fin = torch.isfinite(want)
                torch.testing.assert_close(got[fin], want[fin], rtol=1e-7, atol=1e-7)


def _ulp_err(got, ref, dtype):
    """|got - ref| in units of the spacing of `dtype` at ref (ref float64, finite)."""
    sp = torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(torch.finfo(dtype).tiny))))
    return ((got.double() - ref).abs() / sp).max().item()


def test_logcumsumexp_float32_accuracy_as_torch():
    """2^20 float32 elements in one line (split across threads) and in rows: the error against
    the float64 reference is at most torch's CPU kernel's (float64 accumulation, one rounding:
    half an ulp)."""
    g = torch.Generator().manual_seed(5)
    n = 1 << 20
    for data in (torch.randn(n, generator=g) * 10, torch.rand(n, generator=g)):
        ref = torch.logcumsumexp(data.double(), 0)
        e_torch = _ulp_err(torch.logcumsumexp(data, 0), ref, torch.float32)
        for t in (1, 2):
            torch.set_num_threads(t)
            e = _ulp_err(ops.logcumsumexp(data, 0), ref, torch.float32)
            assert e <= max(e_torch, 0.5) + 1e-3, (t, e, e_torch)
        rows = data.view(256, -1)
        e_rows = _ulp_err(ops.logcumsumexp(rows, 1), torch.logcumsumexp(rows.double(), 1), torch.float32)
        assert e_rows <= 0.501, e_rows


def test_logcumsumexp_float64_accuracy_as_torch():
    """2^20 float64 elements in one line: the error against a long-double reference (prefix sums
    of exp in x86 extended precision) is at most torch's."""
    np = pytest.importorskip("numpy")
    if np.finfo(np.longdouble).eps > 1e-18:
        pytest.skip("long double is not wider than double here")
    g = torch.Generator().manual_seed(6)
    n = 1 << 20
    for data in (torch.randn(n, generator=g, dtype=torch.float64) * 10, torch.rand(n, generator=g, dtype=torch.float64)):
        ref = np.log(np.cumsum(np.exp(data.numpy().astype(np.longdouble))))
        err = lambda y: float(np.max(np.abs(y.numpy().astype(np.longdouble) - ref)))  # noqa: E731
        e_torch = err(torch.logcumsumexp(data, 0))
        for t in (1, 2):
            torch.set_num_threads(t)
            e = err(ops.logcumsumexp(data, 0))
            assert e <= e_torch, (t, e, e_torch)


# ------------------------------------------------------------------------------------------
# Row walks prefetch their inputs 2 KiB ahead in scan order (ops/cpu/scan_cpu_avx2.h,
# kPrefetchBytes), past the end of a row and of the tensor: a prefetch never faults, but a
# load that strayed there would. Inputs placed against inaccessible pages (a mapping whose
# first and last pages are PROT_NONE, the tensors ending at the last and starting at the
# first accessible byte), forward and reverse, in a fresh process (a fault would kill it);
# the results bit for bit those of the same data in ordinary tensors, and right.
# ------------------------------------------------------------------------------------------
GUARD_SCRIPT = textwrap.dedent("""
    import ctypes, mmap, sys, torch
    torch.ops.load_library(sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from reference import linrec_ref, scan_ref
    ops = torch.ops.scanops
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    PAGE = mmap.PAGESIZE
    keep = []

    def guarded(t, at_end):
        # a copy of t in the middle of a fresh mapping, against its last (at_end) or first
        # accessible byte; the pages before and after are PROT_NONE
        nbytes = t.numel() * t.element_size()
        body = (nbytes + PAGE - 1) // PAGE * PAGE
        mm = mmap.mmap(-1, body + 2 * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        keep.append(mm)
        assert libc.mprotect(base, PAGE, 0) == 0 and libc.mprotect(base + PAGE + body, PAGE, 0) == 0
        off = PAGE + (body - nbytes if at_end else 0)
        g = torch.frombuffer(mm, dtype=t.dtype, count=t.numel(), offset=off).view(t.shape)
        g.copy_(t)
        return g

    gen = torch.Generator().manual_seed(5)
    for dtype in (torch.float32, torch.float64):
        for shape, dim in [((100_003,), 0), ((40_000,), 0), ((37,), 0), ((3, 5_003), 1), ((64, 100), 1)]:
            x = torch.rand(shape, generator=gen, dtype=torch.float64).to(dtype)
            a = (torch.rand(shape, generator=gen, dtype=torch.float64) * 0.2 + 0.8).to(dtype)
            m = torch.rand(shape, generator=gen) < 0.5
            xp = x * 0.02 + 0.99  # cumprod's factors
            for at_end in (True, False):
                gx, ga, gxp = guarded(x, at_end), guarded(a, at_end), guarded(xp, at_end)
                for t in (1, 2):
                    torch.set_num_threads(t)
                    for excl in (False, True):
                        for rev in (False, True):
                            kw = dict(exclusive=excl, reverse=rev)
                            for name, f, ref in [
                                    ("cumsum", lambda u, v: ops.cumsum(u, dim, **kw),
                                     lambda: scan_ref("sum", x.double(), dim, excl, rev)),
                                    ("masked", lambda u, v: ops.masked_cumsum(u, m, dim, **kw),
                                     lambda: scan_ref("sum", torch.where(m, x.double(), 0.0), dim, excl, rev)),
                                    ("cumprod", lambda u, v: ops.cumprod(u, dim, **kw),
                                     lambda: scan_ref("prod", xp.double(), dim, excl, rev)),
                                    ("linrec", lambda u, v: ops.linear_recurrence(v, u, dim, **kw),
                                     lambda: linrec_ref(a.double(), x.double(), dim, excl, rev))]:
                                u, gu = (xp, gxp) if name == "cumprod" else (x, gx)
                                got, want = f(gu, ga), f(u, a)
                                ctx = (dtype, shape, at_end, t, excl, rev, name)
                                assert torch.equal(got, want), ctx
                                tol = 1e-5 if dtype == torch.float32 else 1e-12
                                torch.testing.assert_close(got.double(), ref(), rtol=tol, atol=tol * 10)
    print("ok")
""")


def test_row_walks_stay_within_their_inputs():
    r = subprocess.run([sys.executable, "-c", GUARD_SCRIPT, str(conftest.library_path()),
                        str(conftest.HERE)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout + r.stderr)


def _payload_data(shape, dtype, gen):
    """randn with NaNs (half of them carrying a payload), +-inf (so inf - inf and inf * 0
    make the default NaN in the scans too) and zeros."""
    x = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    r = torch.rand(shape, generator=gen)
    x[r < 0.004] = float("nan")
    x[(r >= 0.004) & (r < 0.008)] = float("inf")
    x[(r >= 0.008) & (r < 0.012)] = -float("inf")
    x[(r >= 0.012) & (r < 0.016)] = 0.0
    bits = x.view(torch.int32 if dtype == torch.float32 else torch.int64)
    tagged = r < 0.002
    bits[tagged] = bits[tagged] | (0x1234 if dtype == torch.float32 else 0x123456789)
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_nan_payloads_independent_of_threads(dtype, seed):
    """Every bit, NaN payloads included, the same at 1-4 threads: a NaN carry of a block is
    the canonical NaN whichever walk computed the block's total (scan_cpu_kernels.h, settle_nan).
    Before, 1-D lines, few long rows and blocked columns with NaNs from two sources gave
    other NaN payloads at 1 thread than at 2-3."""
    gen = torch.Generator().manual_seed(seed)
    for shape, dim in SHAPES + [(((1 << 18) + 5,), 0), ((4, 1 << 17), 1)]:
        x = _payload_data(shape, dtype, gen)
        a = x.tanh()
        m = x > -1
        for excl, rev in FLAGS:
            kw = dict(exclusive=excl, reverse=rev)
            outs = {}
            for t in THREADS:
                torch.set_num_threads(t)
                outs[t] = [ops.cumsum(x, dim, **kw), ops.cumprod(x, dim, **kw),
                           ops.masked_cumsum(x, m, dim, **kw), ops.linear_recurrence(a, x, dim, **kw)]
            view = torch.int32 if dtype == torch.float32 else torch.int64
            for t in THREADS[1:]:
                for k, name in enumerate(["cumsum", "cumprod", "masked_cumsum", "linear_recurrence"]):
                    u, v = outs[THREADS[0]][k].view(view), outs[t][k].view(view)
                    bad = u != v
                    assert not bool(bad.any()), (
                        f"{name}({dtype}, shape={shape}, dim={dim}, {kw}): {int(bad.sum())} outputs "
                        f"differ between 1 and {t} threads, first at {bad.nonzero()[0].tolist()}")
