"""Every path of the CPU back end once, compactly: the driver of the sanitizer runs
(scripts/sanitize.sh; docs/reliability.md). The test files check values in depth and take an
hour under AddressSanitizer on 2 cores; this reaches the same kernels, schedules and memory
modes in a few minutes, so that a sanitizer can watch each of them.

Kernels (ops/cpu/scan_cpu_kernels.h): the AVX2 kernels (sum / product / affine of float32 and
float64, cummax / cummin, logcumsumexp, complex sums along rows) and the portable kernel
(float16, bfloat16, integers, bool, complex columns, complex products and recurrences, and
every dtype with SCANOPS_CPU_KERNELS=generic). Schedules: short rows (one block), rows of 4,
many long rows, few long rows and 1-D lines (the chained scan over 128 KiB blocks: one block a
claim, runs of blocks from 3 threads, the carry-in kernels, logcumsumexp's block totals),
columns in items (narrow, wide, middle and outer dims), few columns along long lines (blocked,
sequential and chained); 1, 2 and 3 threads. Memory and store modes, each in a process of its
own (they are read once per process): output pages populated ahead of the stores
(SCANOPS_CPU_POPULATE, SCANOPS_CPU_RUN_BYTES, SCANOPS_CPU_PF_NEXT), streaming stores
(SCANOPS_CPU_STREAM), transparent huge pages (SCANOPS_CPU_HUGEPAGES) on outputs of 16 MiB and
more. Also: every flag combination (exclusive-forward and inclusive-reverse scans with a
per-line `initial`, the other two without), non-contiguous inputs, broadcast masks and coefficients,
dtype= conversions, the fused backward scans (gradients without create_graph), and bad inputs.
Segmented scans (`reset=`, ops/cpu/scan_cpu_segmented.cpp): units of whole lines, and lines cut
into chunks (the totals pass, the carries, the second walk) along rows, columns and more than
64 columns, with dense and broadcast resets.

Checks: the sanitizer watches; besides, every multi-thread result must have the bits of the
one-thread result, and no output may be NaN where the input has none (a cheap guard against
unwritten outputs: the allocator is poisoned with NaN first).

  python test/sanitize/cpu_paths.py               # every mode, each in a subprocess
  python test/sanitize/cpu_paths.py --mode stream # one mode, in this process
The library: $SCANOPS_LIBRARY, else `import scanops` (python/).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
f32, f64, f16, bf16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
c64, c128, i32, u8, b = torch.complex64, torch.complex128, torch.int32, torch.uint8, torch.bool

# mode -> (environment, sections, thread counts). Each mode runs in a process of its own. Three
# threads matter only where outputs are populated ahead of the stores (the populate modes and
# outputs of 16 MiB or more: the whole output populated first, runs of blocks); elsewhere 1 and
# 2 take every schedule.
MODES = {
    "default": ({}, ("avx2", "portable", "layouts", "segmented", "backward", "dtype_arg", "bad", "big"),
                [1, 2]),
    "populate-runs": ({"SCANOPS_CPU_POPULATE": "1", "SCANOPS_CPU_RUN_BYTES": "400000"}, ("avx2",), [1, 2, 3]),
    "populate-all": ({"SCANOPS_CPU_POPULATE": "1", "SCANOPS_CPU_RUN_BYTES": "0", "SCANOPS_CPU_PF_NEXT": "0"},
                     ("avx2",), [1, 3]),
    "stream": ({"SCANOPS_CPU_STREAM": "1"}, ("avx2",), [1, 2]),
    "hugepages": ({"SCANOPS_CPU_HUGEPAGES": "1"}, ("big",), [1, 3]),
    "generic": ({"SCANOPS_CPU_KERNELS": "generic"}, ("avx2",), [1, 2]),
}

# (shape, dim): the schedules of scan_cpu_kernels.h (blocks: 32768 float32 / 16384 float64
# elements of input; kFewColumns 4096; kTotalsLines 16).
SHAPES = [
    ((64, 1000), 1),        # short rows: one block each
    ((1000, 4), 1),         # rows of 4
    ((7,), 0),              # a line shorter than a vector group
    ((3, 70_001), 1),       # few long rows: the chained scan from 2 threads, ragged tails
    ((13, 40_001), 1),      # many long rows at 3 threads (outer >= 4 * threads)
    ((100_003,), 0),        # 1-D: the chained scan
    ((70_001, 5), 0),       # few narrow columns, long lines: blocked, chained from 2 threads
    ((2, 40_001, 3), 1),    # middle dim, few columns: blocked
    ((300, 50, 37), 1),     # middle dim, many columns: items
    ((257, 1031), 0),       # outer dim
    ((40, 4100), 0),        # wide columns (items of up to 2048 columns)
]
# (shape, dim): the segmented runner's splits (kMinUnits 64 units of whole lines, else chunks of
# 65536 elements of a unit; units of up to 64 columns).
SEG_SHAPES = [
    ((3, 140_001), 1),      # few long rows: 3 chunks a row, the carries
    ((40_001, 5), 0),       # few columns along long lines: 4 chunks, the carries
    ((2, 1500, 100), 1),    # more than 64 columns: two column blocks, 2 chunks
    ((500, 300), 1),        # many rows: whole lines, several units a task
]
BIG = [(((1 << 22) + 5,), 0), (((1 << 16), 64), 0), ((64, 1 << 16), 1)]  # outputs of 16 MiB and more
FLAGS = [(False, False), (True, False), (False, True), (True, True)]
ops = None


def load_library() -> None:
    global ops
    try:
        torch.ops.scanops.cumsum.default  # noqa: B018
    except (AttributeError, RuntimeError):
        if os.environ.get("SCANOPS_LIBRARY"):
            torch.ops.load_library(os.environ["SCANOPS_LIBRARY"])
        else:
            sys.path.insert(0, str(REPO / "python"))
            import scanops  # noqa: F401
    ops = torch.ops.scanops


def data(shape, dtype, g, role="x"):
    if dtype == b:
        return torch.rand(shape, generator=g) < 0.5
    if dtype in (i32, u8):
        return torch.randint(0, 5, shape, generator=g).to(dtype)
    base = torch.randn(shape, generator=g, dtype=f64)
    if role == "a":
        base = torch.rand(shape, generator=g, dtype=f64) * 0.2 + 0.8
    elif role == "p":
        base = 1 + 0.01 * base
    if dtype.is_complex:
        return torch.complex(base, 0.1 * torch.randn(shape, generator=g, dtype=f64)).to(dtype)
    return base.to(dtype)


def line_initial(op, x, dim, g):
    """A per-line initial value of op's result dtype (x's shape without dim)."""
    d = dim % max(x.dim(), 1)
    line = [s for k, s in enumerate(x.shape) if k != d]
    rd = x.dtype
    if op in ("cumsum", "masked_cumsum", "cumprod") and not (rd.is_floating_point or rd.is_complex):
        rd = torch.int64
    return data(line, rd, g, "p" if op == "cumprod" else "x") if rd != torch.int64 else \
        torch.randint(0, 5, line, generator=g)


def calls(op, x, m, a, p, dim, excl, rev, initial=None, reset=None):
    kw = dict(exclusive=excl, reverse=rev, initial=initial)
    if reset is not None:
        kw["reset"] = reset
    if op == "cumsum":
        return ops.cumsum(x, dim, **kw)
    if op == "masked_cumsum":
        return ops.masked_cumsum(x, m, dim, **kw)
    if op == "cumprod":
        return ops.cumprod(p, dim, **kw)
    if op == "linear_recurrence":
        return ops.linear_recurrence(a, x, dim, **kw)
    if op == "logcumsumexp":
        return ops.logcumsumexp(x, dim, **kw)
    return getattr(ops, op)(x, dim, **kw)


OPS = ["cumsum", "masked_cumsum", "cumprod", "linear_recurrence", "logcumsumexp", "cummax", "cummin"]
TAKES = {"linear_recurrence": (f32, f64, f16, bf16, c64, c128), "logcumsumexp": (f32, f64, f16, bf16, c64, c128),
         "cummax": (f32, f64, f16, bf16, i32, u8, b), "cummin": (f32, f64, f16, bf16, i32, u8, b)}


class Counter:
    def __init__(self):
        self.calls = 0


def bits(t):
    t = t.contiguous()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(-1).view(torch.uint8) if t.dtype != b and t.numel() else t


def run_case(cnt, op, shape, dim, dtype, flags, threads, g, layout="contiguous"):
    x, m = data(shape, dtype, g), torch.rand(shape, generator=g) < 0.6
    a, p = data(shape, dtype, g, "a"), data(shape, dtype, g, "p")
    if layout == "transposed" and len(shape) >= 2:  # the engine's contiguous copy
        x = data(shape[::-1], dtype, g).t() if len(shape) == 2 else x.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "broadcast" and len(shape) >= 2:  # a (1, ..., N) mask and coefficient
        m = m[:1].expand(shape)
        a = a[:1].expand(shape)
    reset = None
    if layout == "reset":  # segmented: a dense reset, about one position in 2000, and position 0
        reset = torch.rand(shape, generator=g) < 5e-4
        reset.select(dim, 0).fill_(True)
    if layout == "reset-broadcast":  # segmented: the same resets on every line, read in place
        d = dim % len(shape)
        line = [1] * len(shape)
        line[d] = shape[d]
        reset = (torch.rand(shape[d], generator=g) < 5e-4).view(line).expand(shape)
    for excl, rev in flags:
        # exclusive-forward and inclusive-reverse scans start each line from an initial value
        # (the kernels' line starts on every schedule), the other two from the identity
        init = line_initial(op, p if op == "cumprod" else x, dim, g) if excl != rev else None
        outs = {}
        for t in threads:
            torch.set_num_threads(t)
            torch.full((max(x.numel(), 1) * 2,), float("nan"))  # poison the next allocation
            r = calls(op, x, m, a, p, dim, excl, rev, init, reset)
            r = list(r) if isinstance(r, tuple) else [r]
            cnt.calls += 1
            outs[t] = r
            if not (dtype.is_floating_point or dtype.is_complex) or op == "logcumsumexp":
                continue
            for y in r:
                if y.is_floating_point() and bool(torch.isnan(y).any()) and not bool(torch.isnan(x).any()):
                    raise AssertionError(f"{op}{tuple(shape)} dim {dim} {dtype} e={excl} r={rev} "
                                         f"threads {t}: NaN in the output")
        for t in threads[1:]:
            for u, v in zip(outs[threads[0]], outs[t]):
                if not torch.equal(bits(u), bits(v)):
                    raise AssertionError(f"{op}{tuple(shape)} dim {dim} {dtype} e={excl} r={rev}: "
                                         f"{t} threads differ from {threads[0]}")


def backward_case(cnt, shape, dim, dtype, threads, g):
    """The fused backward scans: gradients without create_graph."""
    for t in threads:
        torch.set_num_threads(t)
        x = data(shape, dtype, g).requires_grad_()
        a = data(shape, dtype, g, "a").requires_grad_()
        p = data(shape, dtype, g, "p").requires_grad_()
        m = torch.rand(shape, generator=g) < 0.6
        for excl, rev in ((False, False), (True, True)):
            kw = dict(exclusive=excl, reverse=rev)
            outs = [ops.cumsum(x, dim, **kw), ops.masked_cumsum(x, m, dim, **kw), ops.cumprod(p, dim, **kw),
                    ops.linear_recurrence(a, x, dim, **kw), ops.logcumsumexp(x, dim, **kw),
                    ops.cummax(x, dim, **kw)[0]]
            gs = torch.autograd.grad([o.sum() for o in outs], [x, a, p], allow_unused=True)
            cnt.calls += 2 * len(outs)
            for gr in gs:
                if gr is not None and bool(torch.isnan(gr).any()):
                    raise AssertionError(f"backward {tuple(shape)} dim {dim} {dtype}: NaN gradient")


def bad_inputs(cnt):
    x = torch.randn(3, 5)
    for f in (lambda: ops.cumsum(x, 2), lambda: ops.masked_cumsum(x, torch.ones(3, 4, dtype=b), 1),
              lambda: ops.linear_recurrence(x.double(), x, 1), lambda: ops.logcumsumexp(x.long(), 1),
              lambda: ops.cummax(x.to(c64), 1), lambda: ops.cumsum(x, 1, dtype=b)):
        try:
            f()
        except RuntimeError:
            cnt.calls += 1
            continue
        raise AssertionError("a bad input raised no error")


def run_mode(name: str) -> int:
    load_library()
    env, sections, thr = MODES[name]
    cnt = Counter()
    g = torch.Generator().manual_seed(1)
    times = {}
    for sec in sections:
        t0, n0 = time.monotonic(), cnt.calls
        if sec == "avx2":  # float32 / float64: the AVX2 kernels (the portable ones with generic)
            for shape, dim in SHAPES:
                for op in OPS:
                    for dt in (f32, f64):
                        run_case(cnt, op, shape, dim, dt, FLAGS, thr, g)
        elif sec == "portable":  # the portable kernel's dtypes (2-, 4-, 1-byte, complex), two flag sets
            for shape, dim in SHAPES:
                for op in OPS:
                    for dt in (bf16, i32, b, c64, c128):
                        if dt in TAKES.get(op, (bf16, i32, b, c64, c128)):
                            run_case(cnt, op, shape, dim, dt, [(False, False), (True, True)], thr, g)
        elif sec == "layouts":  # non-contiguous input, broadcast mask / coefficient
            for shape, dim in SHAPES[3:8]:
                for op in ("cumsum", "masked_cumsum", "linear_recurrence", "cummax"):
                    run_case(cnt, op, shape, dim, f32, [(False, True)], thr, g, layout="transposed")
                    run_case(cnt, op, shape, dim, f64, [(True, False)], thr, g, layout="broadcast")
        elif sec == "segmented":  # reset=: the segmented runner, float and integer kernels
            for shape, dim in SEG_SHAPES:
                for op in OPS:
                    for dt in (f32, f64):
                        run_case(cnt, op, shape, dim, dt, FLAGS, thr, g, layout="reset")
                    if i32 in TAKES.get(op, (i32,)):
                        run_case(cnt, op, shape, dim, i32, [(True, False)], thr, g, layout="reset")
                    run_case(cnt, op, shape, dim, f32, [(False, True)], thr, g, layout="reset-broadcast")
        elif sec == "backward":  # the fused backward scans
            for shape, dim in SHAPES:
                for dt in (f32, f64):
                    backward_case(cnt, shape, dim, dt, thr, g)
        elif sec == "dtype_arg":  # dtype= conversions
            for dt_in, dt_out in ((i32, f32), (f32, f64), (f16, c64), (u8, i32)):
                x = data((3, 70_001), dt_in, g)
                for t in thr:
                    torch.set_num_threads(t)
                    ops.cumsum(x, 1, dtype=dt_out)
                    ops.cumprod(x, 1, exclusive=True, dtype=dt_out)
                    cnt.calls += 2
        elif sec == "bad":
            bad_inputs(cnt)
        elif sec == "big":  # outputs of 16 MiB and more (populated, huge pages), 1 and 3 threads
            for shape, dim in BIG:
                for op in ("cumsum", "cummax", "logcumsumexp"):  # (linear_recurrence: cumsum's kernel)
                    run_case(cnt, op, shape, dim, f32, [(False, False), (True, True)], [1, 3], g)
        times[sec] = (cnt.calls - n0, time.monotonic() - t0)
    torch.set_num_threads(1)
    total = sum(t for _, t in times.values())
    detail = ", ".join(f"{k} {n} in {t:.1f} s" for k, (n, t) in times.items())
    print(f"cpu_paths: mode {name} ({' '.join(f'{k}={v}' for k, v in env.items()) or 'defaults'}; threads "
          f"{thr}): {cnt.calls} calls in {total:.1f} s ({detail})", flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=sorted(MODES), help="one mode, in this process (default: all, each in a subprocess)")
    args = p.parse_args(argv)
    if args.mode:
        return run_mode(args.mode)
    rc = 0
    for name, (env, _, _) in MODES.items():
        e = dict(os.environ)
        for k in ("SCANOPS_CPU_POPULATE", "SCANOPS_CPU_RUN_BYTES", "SCANOPS_CPU_PF_NEXT", "SCANOPS_CPU_STREAM",
                  "SCANOPS_CPU_HUGEPAGES", "SCANOPS_CPU_KERNELS"):
            e.pop(k, None)
        e.update(env)
        r = subprocess.run([sys.executable, __file__, "--mode", name], env=e)
        if r.returncode != 0:
            print(f"cpu_paths: mode {name} FAILED (exit status {r.returncode})", flush=True)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
