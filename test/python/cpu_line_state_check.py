"""Checks of the CPU back end's native `initial` (BackendCaps::line_state, ops/cpu).

Modes (run with SCANOPS_LIBRARY pointing at the library under test; PYTHONPATH=python):

  check [--quick]     every op x {exclusive, reverse} x dtypes x layouts (rows of 1, 4, 7, 1000,
                      100000; dim 0 of (n, inner) with inner 1, 3, 16, 1000 (the blocked
                      few-columns paths) and 5000 (plain column walks); 3-d middle dims; a 1-D
                      line of 2^22 and (2^20, 3) along dim 0 for the chained multi-thread
                      scans) x threads {1, 2, 3} (and 5 for the few-lines logcumsumexp paths):
                        * the results at every thread count are the same bits;
                        * they match a reference: the same op without `initial` on the
                          initial value concatenated before the input in scan order (in the
                          result dtype, computed in float64 / complex128 for floating types;
                          for exclusive scans cat(init, x[:-1]) scanned inclusively; cummax /
                          cummin indices shifted so that the initial value's is -1): exact for
                          integer sums / products and cummax / cummin, allclose otherwise.
  dump OUT            the results of a fixed set of problems, with and without `initial`, to
                      OUT (torch.save): bitwise hashes of the no-initial results, the values
                      of the initial ones (every 97th of those over 2^16 elements).
  compare A B         two dumps (A: the library under test, B: a library built from the tree
                      before the change, or SCANOPS_CPU_LINE_STATE=0, i.e. the engine's
                      fallback): no-initial results bitwise equal, initial results allclose
                      (exact for integer and cummax / cummin results).
  bench               with / without `initial`, best of 5 interleaved, 1 and 2 threads.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import scanops  # noqa: E402,F401  (loads the library: SCANOPS_LIBRARY)

ops = torch.ops.scanops

F32, F64, BF16, F16, C64 = torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.complex64
I32, I64, U8, BOOL = torch.int32, torch.int64, torch.uint8, torch.bool
FLOATS = (F32, F64, BF16, F16)

DTYPES = {
    "cumsum": [F32, F64, BF16, F16, C64, I32, I64, U8, BOOL],
    "masked_cumsum": [F32, F64, F16, C64, I32],
    "cumprod": [F32, F64, BF16, F16, C64, I32, I64, U8, BOOL],
    "linear_recurrence": [F32, F64, BF16, F16, C64],
    "logcumsumexp": [F32, F64, BF16, F16, C64],
    "cummax": [F32, F64, BF16, F16, I32, I64, U8, BOOL],
    "cummin": [F32, F64, BF16, F16, I32, I64, U8, BOOL],
}

# (name, shape, dim, big): big layouts take fewer dtypes
LAYOUTS = [
    ("row1", (5, 1), -1, False),
    ("row4", (9, 4), -1, False),
    ("row7", (6, 7), -1, False),
    ("row1000", (13, 1000), -1, False),
    ("row1e5", (3, 100000), -1, False),
    ("rows40x1e5", (40, 40000), -1, False),
    ("d0_inner1", (3001, 1), 0, False),
    ("d0_inner3", (50000, 3), 0, False),
    ("d0_inner16", (10000, 16), 0, False),
    ("d0_inner1000", (200, 1000), 0, False),
    ("d0_inner5000", (64, 5000), 0, False),
    ("mid_small", (3, 500, 70), 1, False),
    ("mid_blocked", (2, 5000, 20), 1, False),
    ("mid_wide", (4, 300, 1500), 1, False),
    ("big_1d", (1 << 22,), 0, True),
    ("big_d0_inner3", (1 << 20, 3), 0, True),
    ("big_rows16", (16, 1 << 17), -1, True),
]
BIG_DTYPES = {F32, F64, I64}


def seed_of(*parts):
    h = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(h[:6], "little")


def make_inputs(op, dtype, shape, dim, seed):
    g = torch.Generator().manual_seed(seed)
    n = shape[dim]
    line_shape = tuple(s for k, s in enumerate(shape) if k != (dim % len(shape)))

    def rnd(shape_, kind):
        if dtype == BOOL:
            return torch.rand(shape_, generator=g) < (0.9 if kind == "prod" else 0.5)
        if not (dtype.is_floating_point or dtype.is_complex):
            if op.startswith("cum") and op in ("cummax", "cummin"):
                hi = 6 if dtype != U8 else 255
                return torch.randint(0, hi, shape_, generator=g).to(dtype)
            if kind == "prod":
                return torch.randint(1, 3, shape_, generator=g).to(dtype)
            return torch.randint(-5 if dtype != U8 else 0, 6, shape_, generator=g).to(dtype)
        if dtype.is_complex:
            re = torch.randn(shape_, generator=g, dtype=torch.float64)
            im = torch.randn(shape_, generator=g, dtype=torch.float64)
            z = torch.complex(re, im)
            if kind == "prod":
                z = 1 + 0.01 * z
            if kind == "coeff":
                z = 0.9 * torch.exp(1j * 0.3 * re)  # |a| = 0.9
            return z.to(dtype)
        if op in ("cummax", "cummin"):
            x = torch.randint(-8, 8, shape_, generator=g).to(torch.float64) / 2  # ties
            x[torch.rand(shape_, generator=g) < 0.001] = float("nan")
            return x.to(dtype)
        x = torch.randn(shape_, generator=g, dtype=torch.float64)
        if kind == "prod":
            x = 1 + 0.003 * x
        if kind == "coeff":
            x = 0.5 + 0.5 * torch.rand(shape_, generator=g, dtype=torch.float64)
        return x.to(dtype)

    kind = {"cumprod": "prod"}.get(op, "sum")
    x = rnd(shape, kind)
    args = {}
    if op == "masked_cumsum":
        args["mask"] = torch.rand(shape, generator=g) < 0.7
    if op == "linear_recurrence":
        args["a"] = rnd(shape, "coeff")
    out_dtype = result_dtype(op, dtype)
    # the initial value, of the result dtype
    if out_dtype == BOOL:
        init = torch.rand(line_shape, generator=g) < 0.5
    elif not (out_dtype.is_floating_point or out_dtype.is_complex):
        if op in ("cummax", "cummin"):
            init = torch.randint(0, 6 if dtype != U8 else 255, line_shape, generator=g).to(out_dtype)
        else:
            init = torch.randint(1 if op == "cumprod" else -9, 4, line_shape, generator=g).to(out_dtype)
    elif op in ("cummax", "cummin"):
        init = (torch.randint(-8, 8, line_shape, generator=g).to(torch.float64) / 2).to(out_dtype)
        if init.numel() > 2:
            init.view(-1)[1] = float("nan")
    elif op == "cumprod":
        init = (1 + 0.1 * torch.randn(line_shape, generator=g, dtype=torch.float64)).to(out_dtype)
    elif out_dtype.is_complex:
        init = torch.complex(torch.randn(line_shape, generator=g, dtype=torch.float64),
                             torch.randn(line_shape, generator=g, dtype=torch.float64)).to(out_dtype)
    else:
        init = (3 * torch.randn(line_shape, generator=g, dtype=torch.float64)).to(out_dtype)
        if op == "logcumsumexp" and init.numel() > 3:
            init.view(-1)[2] = float("-inf")
    return x, args, init


def result_dtype(op, dtype):
    if op in ("cumsum", "masked_cumsum", "cumprod") and not (dtype.is_floating_point or dtype.is_complex):
        return I64
    return dtype


def call(op, x, args, dim, excl, rev, init=None):
    kw = dict(exclusive=excl, reverse=rev)
    if init is not None:
        kw["initial"] = init
    if op == "masked_cumsum":
        return (ops.masked_cumsum(x, args["mask"], dim, **kw),)
    if op == "linear_recurrence":
        return (ops.linear_recurrence(args["a"], x, dim, **kw),)
    r = getattr(ops, op)(x, dim, **kw)
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


def reference(op, x, args, dim, excl, rev, init):
    """The op without `initial` on init prepended (in scan order) to the input."""
    d = dim % x.dim()
    n = x.shape[d]
    out_dtype = result_dtype(op, x.dtype)
    wide = {F32: F64, BF16: F64, F16: F64, C64: torch.complex128}
    cdt = out_dtype
    if op not in ("cummax", "cummin"):
        cdt = wide.get(out_dtype, out_dtype)
    xv = x.to(cdt)
    iv = init.to(cdt).unsqueeze(d)

    def with_head(head, t):
        body = t
        if excl:
            body = t.narrow(d, 1, n - 1) if rev else t.narrow(d, 0, n - 1)
        return torch.cat([body, head], d) if rev else torch.cat([head, body], d)

    xp = with_head(iv, xv)
    a2 = {}
    if op == "masked_cumsum":
        a2["mask"] = with_head(torch.ones_like(args["mask"].narrow(d, 0, 1)), args["mask"])
    if op == "linear_recurrence":
        a = args["a"].to(cdt)
        a2["a"] = with_head(torch.ones_like(a.narrow(d, 0, 1)), a)
    res = call(op, xp, a2, d, False, rev)
    off = 0 if (excl or rev) else 1
    vals = res[0].narrow(d, off, n)
    if op in ("cummax", "cummin"):
        pos = res[1].narrow(d, off, n)
        if not rev:
            idx = pos - 1
        elif not excl:
            idx = torch.where(pos == n, torch.full_like(pos, -1), pos)
        else:
            idx = torch.where(pos == n - 1, torch.full_like(pos, -1), pos + 1)
        return vals, idx
    return (vals,)


def bits(t):
    return t.contiguous().view(torch.uint8) if t.dtype != BOOL else t.contiguous().view(torch.uint8)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def tol(dtype):
    return {F32: 2e-6, F64: 1e-12, BF16: 1.6e-2, F16: 2e-3, C64: 2e-6, torch.complex128: 1e-12}.get(dtype, 0.0)


def close(got, ref, excl_line_scale=True):
    """allclose with a tolerance scaled to the magnitudes of the line (exact for integers)."""
    if not (got.dtype.is_floating_point or got.dtype.is_complex):
        return torch.equal(got, ref.to(got.dtype))
    r = ref.to(torch.complex128 if got.dtype.is_complex else torch.float64)
    gd = got.to(r.dtype)
    t = tol(got.dtype)
    nan_g = torch.isnan(gd) if not gd.is_complex() else (torch.isnan(gd.real) | torch.isnan(gd.imag))
    nan_r = torch.isnan(r) if not r.is_complex() else (torch.isnan(r.real) | torch.isnan(r.imag))
    if not torch.equal(nan_g, nan_r):
        return False
    fin = ~nan_r
    gv, rv = gd[fin], r[fin]
    inf_r = torch.isinf(rv) if not rv.is_complex() else torch.isinf(rv.real)
    if inf_r.any():
        if not torch.equal(gv[inf_r], rv[inf_r]):
            return False
        gv, rv = gv[~inf_r], rv[~inf_r]
    if rv.numel() == 0:
        return True
    scale = rv.abs().max().item()
    err = (gv - rv).abs()
    return bool((err <= t * rv.abs() + t * max(scale, 1.0) * 4).all())


def threads_for(layout, op):
    th = [1, 2, 3]
    if op == "logcumsumexp" and layout in ("rows40x1e5", "big_rows16"):
        th.append(5)  # 16 <= lines < 4 * threads: the chained walk-from-carry schedule
    return th


def cases(quick=False):
    for lname, shape, dim, big in LAYOUTS:
        if quick and big:
            continue
        for op, dts in DTYPES.items():
            for dt in dts:
                if big and dt not in BIG_DTYPES:
                    continue
                if big and op == "masked_cumsum" and dt != F32:
                    continue
                if op in ("linear_recurrence", "logcumsumexp") and dt == I64:
                    continue
                yield lname, shape, dim, op, dt


def run_check(quick=False):
    nfail = ncase = nruns = 0
    t0 = time.time()
    for lname, shape, dim, op, dt in cases(quick):
        x, args, init = make_inputs(op, dt, shape, dim, seed_of(lname, op, str(dt)))
        for excl in (False, True):
            for rev in (False, True):
                ncase += 1
                tag = f"{op} {dt} {lname}{shape} dim={dim} excl={excl} rev={rev}"
                ref = reference(op, x, args, dim, excl, rev, init)
                first = None
                for th in threads_for(lname, op):
                    torch.set_num_threads(th)
                    got = call(op, x, args, dim, excl, rev, init)
                    nruns += 1
                    if first is None:
                        first = got
                        ok = all(close(g, r) for g, r in zip(got, ref))
                        if not ok:
                            nfail += 1
                            g0, r0 = got[0], ref[0]
                            print(f"FAIL ref {tag} threads={th}", flush=True)
                            diff = (g0.to(torch.complex128 if g0.is_complex() else torch.float64)
                                    - r0.to(torch.complex128 if g0.is_complex() else torch.float64)).abs()
                            print("   max diff", diff.nan_to_num(0).max().item(),
                                  "idx equal" if len(got) == 1 or torch.equal(got[1], ref[1]) else "idx DIFFER")
                    else:
                        if not all(same_bits(a, b) for a, b in zip(first, got)):
                            nfail += 1
                            print(f"FAIL threads {tag}: threads={th} differs from threads=1", flush=True)
                torch.set_num_threads(1)
        # broadcast initial (one value for every line) on the first flags only
        if init.dim() > 0:
            i0 = init.reshape(-1)[:1].reshape(())
            got = call(op, x, args, dim, False, False, i0)
            ref = reference(op, x, args, dim, False, False, i0.expand(init.shape))
            ncase += 1
            if not all(close(g, r) for g, r in zip(got, ref)):
                nfail += 1
                print(f"FAIL broadcast initial {op} {dt} {lname}", flush=True)
    print(f"check: {ncase} cases, {nruns} runs, {nfail} failures, {time.time() - t0:.0f} s", flush=True)
    return nfail


def run_dump(path):
    out = {}
    for lname, shape, dim, op, dt in cases():
        x, args, init = make_inputs(op, dt, shape, dim, seed_of(lname, op, str(dt)))
        for excl in (False, True):
            for rev in (False, True):
                for th in (1, 2, 3):
                    torch.set_num_threads(th)
                    key = f"{op}|{dt}|{lname}|{excl}|{rev}|{th}"
                    got = call(op, x, args, dim, excl, rev)
                    out["noinit|" + key] = [hashlib.sha256(bits(g).numpy().tobytes()).hexdigest() for g in got]
                    if th == 1:  # (the thread counts agree bitwise: `check`)
                        r = call(op, x, args, dim, excl, rev, init)
                        if x.numel() > (1 << 16):  # (the dump's size) every 97th element
                            r = tuple(t.reshape(-1)[::97].clone() for t in r)
                        out["init|" + key] = r
        torch.set_num_threads(1)
    torch.save(out, path)
    print(f"dump: {len(out)} entries to {path}")


def run_compare(pa, pb):
    a, b = torch.load(pa), torch.load(pb)
    bad = 0
    nn = ni = 0
    for k, va in a.items():
        if k not in b:
            print("missing in B:", k)
            bad += 1
            continue
        vb = b[k]
        if k.startswith("noinit|"):
            nn += 1
            if va != vb:
                bad += 1
                print("no-initial results differ:", k)
        else:
            ni += 1
            if not all(close(x, y) for x, y in zip(va, vb)):
                bad += 1
                print("initial results differ:", k)
    print(f"compare: {nn} no-initial (bitwise), {ni} initial (allclose / exact), {bad} differences")
    return bad


def run_bench():
    # BENCH_CPU=1: process CPU time instead of wall time (a shared, loaded machine: preemption
    # by other processes is not counted; at 2 threads it adds both threads' time)
    clock = time.process_time if os.environ.get("BENCH_CPU") == "1" else time.perf_counter

    def timeit(f, reps=5):
        best = float("inf")
        for _ in range(reps):
            t = clock()
            f()
            best = min(best, clock() - t)
        return best

    g = torch.Generator().manual_seed(0)
    probs = [
        ("cumsum (4096,16384) dim1", lambda: torch.randn(4096, 16384, generator=g), 1, "cumsum"),
        ("cumsum (4096,16384) dim0", lambda: torch.randn(4096, 16384, generator=g), 0, "cumsum"),
        ("cumsum 1-D 2^26", lambda: torch.randn(1 << 26, generator=g), 0, "cumsum"),
        ("cumsum excl (4096,16384) dim1", lambda: torch.randn(4096, 16384, generator=g), 1, "cumsum_x"),
        ("cumsum (2^20,3) dim0", lambda: torch.randn(1 << 20, 3, generator=g), 0, "cumsum"),
        ("cumsum (2^22,4) rows of 4", lambda: torch.randn(1 << 22, 4, generator=g), 1, "cumsum"),
        ("cumsum (2^20,7) rows of 7", lambda: torch.randn(1 << 20, 7, generator=g), 1, "cumsum"),
        ("logcumsumexp (1024,16384) dim1", lambda: torch.randn(1024, 16384, generator=g), 1, "logcumsumexp"),
        ("logcumsumexp 1-D 2^24", lambda: torch.randn(1 << 24, generator=g), 0, "logcumsumexp"),
        ("cummax (4096,16384) dim1", lambda: torch.randn(4096, 16384, generator=g), 1, "cummax"),
        ("cummax (4096,16384) dim0", lambda: torch.randn(4096, 16384, generator=g), 0, "cummax"),
        ("linear_recurrence (4096,16384) dim1", lambda: torch.randn(4096, 16384, generator=g), 1, "linrec"),
        ("linear_recurrence 1-D 2^24", lambda: torch.randn(1 << 24, generator=g), 0, "linrec"),
        ("cumsum int32 (4096,4096) dim1", lambda: torch.randint(-9, 9, (4096, 4096), generator=g, dtype=torch.int32), 1, "cumsum"),
        ("cummax int32 (4096,4096) dim1", lambda: torch.randint(-99, 99, (4096, 4096), generator=g, dtype=torch.int32), 1, "cummax"),
        ("cumsum bf16 (4096,4096) dim0", lambda: torch.randn(4096, 4096, generator=g).bfloat16(), 0, "cumsum"),
    ]
    only = os.environ.get("BENCH_ONLY")
    for name, mk, dim, kind in probs:
        if only and only not in name:
            continue
        x = mk()
        a = (0.5 + 0.5 * torch.rand(x.shape, generator=g)).to(x.dtype) if kind == "linrec" else None
        odt = I64 if (kind.startswith("cumsum") and not x.dtype.is_floating_point) else x.dtype
        line = tuple(s for k, s in enumerate(x.shape) if k != dim)
        init = torch.randn(line, generator=g).to(odt) if odt.is_floating_point else torch.randint(0, 5, line, generator=g).to(odt)

        def f(with_init, x=x, a=a, kind=kind, dim=dim, init=init):
            kw = {"initial": init} if with_init else {}
            if kind == "cumsum":
                return ops.cumsum(x, dim, **kw)
            if kind == "cumsum_x":
                return ops.cumsum(x, dim, exclusive=True, **kw)
            if kind == "logcumsumexp":
                return ops.logcumsumexp(x, dim, **kw)
            if kind == "cummax":
                return ops.cummax(x, dim, **kw)
            return ops.linear_recurrence(a, x, dim, **kw)

        for th in (1, 2):
            torch.set_num_threads(th)
            f(False), f(True)
            tn, ti = [], []
            for _ in range(int(os.environ.get("BENCH_REPS", "5"))):  # interleaved rounds, best of them
                tn.append(timeit(lambda: f(False), 1))
                ti.append(timeit(lambda: f(True), 1))
            bn, bi = min(tn), min(ti)
            print(f"{name:40s} threads={th}: no initial {bn * 1e3:8.2f} ms  initial {bi * 1e3:8.2f} ms  "
                  f"ratio {bi / bn:.3f}", flush=True)
        del x, a


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    if mode == "check":
        sys.exit(1 if run_check("--quick" in sys.argv) else 0)
    elif mode == "dump":
        run_dump(sys.argv[2])
    elif mode == "compare":
        sys.exit(1 if run_compare(sys.argv[2], sys.argv[3]) else 0)
    elif mode == "bench":
        run_bench()
    else:
        print(__doc__)
        sys.exit(2)
