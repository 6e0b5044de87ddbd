"""CUDA back end: scans that start from a per-line initial value (`initial=`, LineState).

For every op x {inclusive, exclusive} x {forward, reverse} x dtype x shape, on shapes chosen to
reach every CUDA kernel family (packed short rows, a block per row, the look-back rows and
1-D lines, CUB's 1-D line path of floating sums, and along dim 0 / a middle dim: a thread per
column, the vector column tiles, the warp column tiles, the column tiles, the three passes
with both a row-mode and a look-back-mode scan of the chunk totals), the CUDA result with an
initial value is compared with
  (a) the same op on the CPU with the same initial value,
  (b) the op without an initial value on the CPU over the lines with the initial value put
      first in scan order (torch.cat), the extra position dropped (exclusive: the initial value
      followed by all but the line's last element in scan order, scanned inclusively),
  (c) itself, run a second time (bitwise),
and the CUDA result without an initial value with the CPU's (the CUDA back end's own
no-initial results are checked against their previous bits by test/cuda_exact_check.py).

Data are small integers (sums), +-1 and 0 (products, linear_recurrence's coefficients) so that
every association gives the same values: (a) and (b) are exact there and for cummax / cummin
(values and indices); logcumsumexp is compared within a dtype's tolerance.

  python test/cuda_line_state_check.py            # the checks; prints 'N passed, M failed'
  python test/cuda_line_state_check.py --quick    # the small shapes only
  python test/cuda_line_state_check.py --ops cumsum,cummax   # some ops only
  python test/cuda_line_state_check.py --bench    # timings with and without initial values
Library: the scanops package (SCANOPS_LIBRARY=/path/to/libscanops.so to pick a build).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401

ops = torch.ops.scanops
# SCANOPS_CHECK_DEV=cpu runs the checks with the CPU back end in the device's place (a check
# of this script's own logic on a machine without a GPU).
DEV = os.environ.get("SCANOPS_CHECK_DEV", "cuda")

passed = 0
failed = 0
failures = []


def record(ok, name, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        failures.append(name)
        print("FAIL", name, detail, flush=True)


def bits_equal(a, b):
    """Bitwise equality (NaN payloads and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a, b = a.contiguous(), b.contiguous()
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if a.is_floating_point():
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.view(view), b.view(view))
    return torch.equal(a, b)


def values_equal(a, b):
    """Equal values (NaN == NaN, -0.0 == 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_complex():
        return values_equal(a.real, b.real) and values_equal(a.imag, b.imag)
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)


TOL = {
    torch.float32: (2e-5, 2e-5),
    torch.float64: (1e-12, 1e-12),
    torch.float16: (4e-3, 4e-3),
    torch.bfloat16: (2e-2, 2e-2),
    torch.complex64: (2e-5, 2e-5),
    torch.complex128: (1e-12, 1e-12),
}


def close(a, b, exact):
    if exact:
        return values_equal(a, b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    rtol, atol = TOL[a.dtype]
    return torch.allclose(a.to(torch.complex128 if a.is_complex() else torch.float64),
                          b.to(torch.complex128 if b.is_complex() else torch.float64),
                          rtol=rtol, atol=atol, equal_nan=True)


def describe(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
    if a.is_complex() or a.is_floating_point():
        d = (a.to(torch.complex128 if a.is_complex() else torch.float64)
             - b.to(torch.complex128 if b.is_complex() else torch.float64)).abs()
        d = torch.where(torch.isnan(d), torch.zeros_like(d), d)
        bad = torch.nonzero(d > 0)
        return f"{bad.shape[0]} differ, max {d.max().item():.3g}, first at " \
               f"{bad[0].tolist() if bad.numel() else None}"
    bad = torch.nonzero(a != b)
    return f"{bad.shape[0]} differ, first at {bad[0].tolist() if bad.numel() else None}"


# ---- the ops -------------------------------------------------------------------------------
# Each op: which dtypes it takes, how to make its inputs and initial values, and how it is
# called. result dtype: sums / products of integers and bool give int64.
def result_dtype(op, dt):
    if op in ("cumsum", "masked_cumsum", "cumprod") and not (dt.is_floating_point or dt.is_complex):
        return torch.int64
    return dt


def make_inputs(op, shape, dim, dt, gen):
    """The op's tensors (CPU): a dict with x (and mask / a)."""
    def ints(lo, hi, s=shape):
        return torch.randint(lo, hi, s, generator=gen)
    if op in ("cumsum", "masked_cumsum"):
        if dt == torch.uint8:
            x = ints(0, 3).to(dt)
        else:
            x = ints(-1, 2).to(dt)
        if dt.is_complex:
            x = torch.complex(ints(-1, 2).float(), ints(-1, 2).float()).to(dt)
        d = {"x": x}
        if op == "masked_cumsum":
            d["mask"] = ints(0, 2).bool()
        return d
    if op == "cumprod":
        v = ints(0, 8)  # mostly +-1, sometimes 0 (a 0 makes the rest of the line 0)
        x = torch.where(v == 0, torch.zeros_like(v), torch.where(v % 2 == 0, 1, -1))
        # a 0 in 1 of 8 elements zeroes long lines early: keep zeros rare
        x = torch.where((v == 0) & (ints(0, 64) != 0), torch.ones_like(x), x)
        if dt == torch.uint8:
            x = x.abs()
        if dt.is_complex:
            return {"x": torch.complex(x.float(), torch.zeros_like(x.float())).to(dt)}
        return {"x": x.to(dt)}
    if op == "linear_recurrence":
        av = ints(0, 8)
        a = torch.where(av == 0, 0, torch.where(av % 2 == 0, 1, -1))
        # long lines: mostly 1 with a few -1 and 0 (values stay small integers)
        x = ints(-1, 2)
        if dt.is_complex:
            return {"a": torch.complex(a.float(), torch.zeros_like(a.float())).to(dt),
                    "x": torch.complex(x.float(), ints(-1, 2).float()).to(dt)}
        return {"a": a.to(dt), "x": x.to(dt)}
    if op == "logcumsumexp":
        if dt.is_complex:
            return {"x": torch.complex(torch.randn(shape, generator=gen),
                                       torch.randn(shape, generator=gen)).to(dt)}
        return {"x": torch.randn(shape, generator=gen).to(dt)}
    if op in ("cummax", "cummin"):
        if dt == torch.bool:
            return {"x": ints(0, 2).bool()}
        if dt == torch.uint8:
            return {"x": ints(0, 6).to(dt)}
        return {"x": ints(-5, 6).to(dt)}  # many ties (with each other and the initial)
    raise ValueError(op)


def make_initial(op, line_shape, dt, gen):
    rd = result_dtype(op, dt)
    s = line_shape
    if op in ("cumsum", "masked_cumsum"):
        if rd.is_complex:
            return torch.complex(torch.randint(-3, 4, s, generator=gen).float(),
                                 torch.randint(-3, 4, s, generator=gen).float()).to(rd)
        if rd == torch.uint8:
            return torch.randint(0, 4, s, generator=gen).to(rd)
        return torch.randint(-3, 4, s, generator=gen).to(rd)
    if op == "cumprod":
        v = torch.randint(0, 3, s, generator=gen)
        t = torch.where(v == 0, 1, torch.where(v == 1, -1, 2))
        if rd == torch.uint8:
            t = t.abs()
        return t.to(rd) if not rd.is_complex else torch.complex(t.float(), 0 * t.float()).to(rd)
    if op == "linear_recurrence":
        t = torch.randint(-3, 4, s, generator=gen)
        return t.to(rd) if not rd.is_complex else torch.complex(t.float(), t.float()).to(rd)
    if op == "logcumsumexp":
        if rd.is_complex:
            return torch.complex(torch.randn(s, generator=gen), torch.randn(s, generator=gen)).to(rd)
        return torch.randn(s, generator=gen).to(rd)
    if op in ("cummax", "cummin"):
        if rd == torch.bool:
            return torch.randint(0, 2, s, generator=gen).bool()
        if rd == torch.uint8:
            return torch.randint(0, 6, s, generator=gen).to(rd)
        return torch.randint(-5, 6, s, generator=gen).to(rd)
    raise ValueError(op)


def call(op, t, dim, excl, rev, initial=None):
    kw = {"exclusive": excl, "reverse": rev}
    if initial is not None:
        kw["initial"] = initial
    if op == "cumsum":
        return ops.cumsum(t["x"], dim, **kw)
    if op == "masked_cumsum":
        return ops.masked_cumsum(t["x"], t["mask"], dim, **kw)
    if op == "cumprod":
        return ops.cumprod(t["x"], dim, **kw)
    if op == "linear_recurrence":
        return ops.linear_recurrence(t["a"], t["x"], dim, **kw)
    if op == "logcumsumexp":
        return ops.logcumsumexp(t["x"], dim, **kw)
    if op == "cummax":
        return ops.cummax(t["x"], dim, **kw)
    if op == "cummin":
        return ops.cummin(t["x"], dim, **kw)
    raise ValueError(op)


def prepended(op, t, dim, excl, rev, init):
    """(b): the op without an initial value over the lines with `init` first in scan order."""
    n = t["x"].shape[dim]
    head = init.unsqueeze(dim)
    rd = result_dtype(op, t["x"].dtype)

    def with_head(h, body):
        if excl:
            body = body.narrow(dim, 1, n - 1) if rev else body.narrow(dim, 0, n - 1)
        return torch.cat([body, h], dim) if rev else torch.cat([h, body], dim)

    tp = {}
    # the data in the result dtype, so that the head (of the result dtype) concatenates
    tp["x"] = with_head(head, t["x"].to(rd))
    if "mask" in t:
        tp["mask"] = with_head(torch.ones_like(head, dtype=torch.bool), t["mask"])
    if "a" in t:
        tp["a"] = with_head(torch.ones_like(head), t["a"])
    out = call(op, tp, dim, False, rev)
    off = 0 if (excl or rev) else 1
    if isinstance(out, tuple):
        return out[0].narrow(dim, off, n)
    return out.narrow(dim, off, n)


def index_consistent(x, init, vals, idx, dim):
    """cummax / cummin indices: -1 where the value is still the initial one, else the
    position along dim of an element equal to the value."""
    if bool((idx < -1).any()) or bool((idx >= x.shape[dim]).any()):
        return False
    g = torch.gather(x, dim, idx.clamp(min=0))
    from_init = init.unsqueeze(dim).expand_as(x)
    want = torch.where(idx >= 0, g, from_init)
    return values_equal(want, vals)


def run_case(op, shape, dim, dt, excl, rev, gen, tag, init_shape=None):
    name = f"{op} {tag} {tuple(shape)} dim={dim} {str(dt).replace('torch.', '')} " \
           f"{'excl' if excl else 'incl'} {'rev' if rev else 'fwd'}"
    t = make_inputs(op, shape, dim, dt, gen)
    line_shape = [s for k, s in enumerate(shape) if k != dim]
    if init_shape is None:
        init_shape = line_shape
    init = make_initial(op, init_shape, dt, gen)
    init_full = init.expand(line_shape).contiguous() if list(init.shape) != line_shape else init
    tc = {k: v.to(DEV) for k, v in t.items()}
    exact = op != "logcumsumexp"
    try:
        got = call(op, tc, dim, excl, rev, init.to(DEV))
        again = call(op, tc, dim, excl, rev, init.to(DEV))
        cpu = call(op, t, dim, excl, rev, init)
        ref_b = prepended(op, t, dim, excl, rev, init_full)
        plain = call(op, tc, dim, excl, rev)
        plain_cpu = call(op, t, dim, excl, rev)
    except Exception as e:  # noqa: BLE001
        record(False, name, f"raised {type(e).__name__}: {str(e).splitlines()[0]}")
        return
    if isinstance(got, tuple):
        gv, gi = got[0].cpu(), got[1].cpu()
        record(values_equal(gv, cpu[0]) and torch.equal(gi, cpu[1]), name + " [a: CPU]",
               describe(gv, cpu[0]) + " / indices " + describe(gi, cpu[1]))
        record(values_equal(gv, ref_b), name + " [b: prepended]", describe(gv, ref_b))
        record(index_consistent(t["x"], init_full, gv, gi, dim), name + " [indices]")
        record(bits_equal(got[0], again[0]) and torch.equal(got[1], again[1]),
               name + " [c: run to run]")
        record(values_equal(plain[0].cpu(), plain_cpu[0]) and torch.equal(plain[1].cpu(), plain_cpu[1]),
               name + " [no initial: CPU]")
        return
    g = got.cpu()
    record(close(g, cpu, exact), name + " [a: CPU]", describe(g, cpu))
    record(close(g, ref_b, exact), name + " [b: prepended]", describe(g, ref_b))
    record(bits_equal(got, again), name + " [c: run to run]")
    record(close(plain.cpu(), plain_cpu, exact), name + " [no initial: CPU]",
           describe(plain.cpu(), plain_cpu))


OPS = ["cumsum", "masked_cumsum", "cumprod", "linear_recurrence", "logcumsumexp", "cummax",
       "cummin"]
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def dtypes_of(op, full):
    if op in ("cumsum", "masked_cumsum", "cumprod"):
        d = FLOATS + [torch.complex64, torch.int32, torch.int64, torch.uint8]
    elif op in ("linear_recurrence", "logcumsumexp"):
        d = FLOATS + [torch.complex64]
    else:
        d = FLOATS + [torch.int32, torch.int64, torch.uint8, torch.bool]
    return d if full else d[:1]


# (shape, dim, tag, all dtypes?) - the tags name the kernel family each is meant to reach on
# an H100 (132 SMs; float32 row tiles of 8192 elements).
SMALL = [
    ((1000, 64), 1, "packed rows"),
    ((4096, 7), 1, "packed rows < items per thread"),
    ((37, 1), 1, "rows of one element"),
    ((300, 8192), 1, "packed, one row per tile"),
    ((64, 30000), 1, "block per row"),
    ((4, 200000), 1, "look-back rows"),
    ((1 << 20,), 0, "1-D 2^20 (look-back / CUB)"),
    ((5000, 1), 0, "dim 0, inner 1"),
    ((20000, 2), 0, "dim 0, inner 2 (three passes)"),
    ((20000, 7), 0, "dim 0, inner 7 (three passes)"),
    ((8192, 32), 0, "dim 0, inner 32 (vector tiles)"),
    ((2048, 1000), 0, "dim 0, inner 1000 (vector tiles)"),
    ((4096, 1001), 0, "dim 0, inner 1001 (column tiles)"),
    ((1024, 2050), 0, "dim 0, inner 2050 (warp tiles)"),
    ((16, 300000), 0, "dim 0, many columns (thread per column)"),
    ((8, 4096, 64), 1, "3-d middle dim"),
    ((3, 5000, 33), 1, "3-d middle dim, inner 33"),
]
# Long lines: a few dtypes each (float32 everywhere; the others where they reach another path).
BIG = [
    ((1 << 26,), 0, "1-D 2^26 (look-back / CUB)"),
    ((1 << 22, 2), 0, "few very long columns, inner 2 (three passes, look-back totals)"),
    ((1 << 20, 8), 0, "few very long columns, inner 8 (vector tiles, one band)"),
    ((1 << 19, 64), 0, "long columns, inner 64"),
    ((2, 1 << 22), 1, "few very long rows (look-back)"),
    ((2200, 8300), 1, "block per row, many rows"),
]


def checks(quick, only):
    gen = torch.Generator().manual_seed(1234)
    flags = [(e, r) for e in (False, True) for r in (False, True)]
    for op in OPS:
        if only and op not in only:
            continue
        for shape, dim, tag in SMALL:
            for dt in dtypes_of(op, True):
                for excl, rev in flags:
                    run_case(op, shape, dim, dt, excl, rev, gen, tag)
        # a broadcast initial value (one per outer index / a scalar)
        for excl, rev in flags:
            run_case(op, (6, 3000, 5), 1, torch.float32, excl, rev, gen, "broadcast initial",
                     init_shape=[1, 5])
            run_case(op, (70, 1000), 1, torch.float32, excl, rev, gen, "scalar initial",
                     init_shape=[])
        if quick:
            continue
        for shape, dim, tag in BIG:
            dts = [torch.float32]
            if op in ("cumsum", "masked_cumsum") and len(shape) == 1:
                dts += [torch.float64, torch.bfloat16, torch.float16, torch.int32]
            elif op in ("cummax", "cummin"):
                dts += [torch.int32]
            elif op == "logcumsumexp" and len(shape) == 1:
                dts += [torch.float64]
            for dt in dts:
                for excl, rev in flags:
                    run_case(op, shape, dim, dt, excl, rev, gen, tag)
            if DEV == "cuda":
                torch.cuda.empty_cache()


# ---- timing --------------------------------------------------------------------------------
def best_ms(fn, reps=10):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e))
    return best


def bench():
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}")
    cases = [
        ("cumsum (32768, 32768) dim 1", "cumsum", (32768, 32768), 1),
        ("cumsum 1-D 2^28", "cumsum", (1 << 28,), 0),
        ("cumsum (32768, 32768) dim 0", "cumsum", (32768, 32768), 0),
        ("logcumsumexp (16384, 32768) dim 1", "logcumsumexp", (16384, 32768), 1),
        ("cummax (32768, 32768) dim 1", "cummax", (32768, 32768), 1),
        ("linear_recurrence (16384, 32768) dim 1", "linear_recurrence", (16384, 32768), 1),
    ]
    print(f"{'problem':44s} {'flags':10s} {'no initial ms':>14s} {'initial ms':>11s} {'ratio':>7s}")
    for label, op, shape, dim in cases:
        x = torch.randn(shape, device=DEV)
        t = {"x": x}
        if op == "linear_recurrence":
            t["a"] = torch.rand(shape, device=DEV)
        line = [s for k, s in enumerate(shape) if k != dim]
        init = torch.randn(line, device=DEV)
        for excl, rev in ((False, False), (True, False), (False, True)):
            f = f"{'excl' if excl else 'incl'} {'rev' if rev else 'fwd'}"
            t0 = best_ms(lambda: call(op, t, dim, excl, rev))
            t1 = best_ms(lambda: call(op, t, dim, excl, rev, init))
            print(f"{label:44s} {f:10s} {t0:14.3f} {t1:11.3f} {t1 / t0:7.3f}", flush=True)
        del x, t, init
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", action="store_true", help="timings with and without initial")
    ap.add_argument("--quick", action="store_true", help="small shapes only")
    ap.add_argument("--ops", default="", help="comma-separated ops to check (default: all)")
    args = ap.parse_args()
    if DEV == "cuda" and not torch.cuda.is_available():
        print("no CUDA device")
        return 2
    if args.bench:
        bench()
        return 0
    checks(args.quick, [o for o in args.ops.split(",") if o])
    print(f"{passed} passed, {failed} failed")
    if failures:
        print("failed:", *failures[:50], sep="\n  ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
