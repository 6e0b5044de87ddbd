"""CPU benchmark: every scanops op x shape class against clone() and torch eager, per thread count.

share = floor time / op time. The floor moves the op's minimal bytes (every input read once,
the outputs written once) the fastest way torch can: for one input and one output of its size,
the faster of clone() and a copy into a fresh tensor whose pages are populated first (madvise
MADV_POPULATE_WRITE: since ba6c296 scanops populates its output's pages ahead of its stores and
beats clone(), whose pages fault one by one); for linear_recurrence (two inputs read, one
output written) a + x into a fresh or a populated output (a copy of the same total bytes was no
floor: reads are cheaper than writes, and linear_recurrence measured 125% of it); masked_cumsum
(1-byte mask) and cummax (8-byte indices written too) the copy of x scaled to their bytes, an
approximation that may overstate their shares (see floor_fns). The floor is
measured interleaved with the op and eager runs (round-robin, `--reps` rounds (default 3) after
a warm-up, best of each), so machine noise hits all three alike; the floor's spread
((max - min) / min over the rounds) is reported with it.

Ops: cumsum (inclusive, exclusive, reverse), masked_cumsum, cumprod, linear_recurrence on every
shape class; logcumsumexp, cummax and "cumsum complex64" (a complex64 input: the clone floor is
taken of that input) on the first three shape classes (rows, dim 0, 1-D) unless --shapes says
otherwise. Those three run the portable scalar kernel; the others the AVX2 kernels where the
CPU has AVX2 + FMA.

Usage:
  python bench/bench_cpu.py [--threads 1,2,16] [--elems N] [--reps R] [--ops A,B]
                            [--shapes 0,2] [--json F] [--md F]
Default threads: 1, 2 and all (os.cpu_count()); default size: 2^26 float32 elements per tensor.
--ops takes op names as printed (e.g. --ops logcumsumexp,cummax,"cumsum complex64").
Loads the library like the tests: SCANOPS_LIBRARY, else build/libscanops.so (through python/scanops).
"""
import argparse
import concurrent.futures
import ctypes
import json
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401

ops = torch.ops.scanops


def shapes(n):
    """Shape classes (each with n elements): name, shape, dim."""
    side = 1 << (n.bit_length() // 2 - 1)  # 2^26 -> 4096 x 16384
    return [
        (f"({side}, {n // side}) dim 1", (side, n // side), 1),
        (f"({side}, {n // side}) dim 0", (side, n // side), 0),
        ("1-D", (n,), 0),
        ("(N/64, 64) dim 1", (n // 64, 64), 1),
        ("(N/4, 4) dim 1", (n // 4, 4), 1),
        ("(16, 4096, N/2^16) dim 1", (16, 4096, n // 65536), 1),
        ("(N/64, 64) dim 0", (n // 64, 64), 0),
    ]


# Ops that run on the first few shape classes only by default (see the module docstring), and
# the input tensor (key of the inputs dict) an op reads, when not the float32 "x".
FEW_SHAPES = {"logcumsumexp", "cummax", "cumsum complex64"}
DEFAULT_FEW_SHAPES = 3
MAIN_INPUT = {"cumsum complex64": "c"}


def cases():
    """op name, scanops fn, eager fn (or None)."""
    def eager_excl(x, d):
        return torch.cumsum(x, d) - x  # one more pass than a fused exclusive scan

    return [
        ("cumsum", lambda t, d: ops.cumsum(t["x"], d), lambda t, d: torch.cumsum(t["x"], d)),
        ("cumsum exclusive", lambda t, d: ops.cumsum(t["x"], d, exclusive=True),
         lambda t, d: eager_excl(t["x"], d)),
        ("cumsum reverse", lambda t, d: ops.cumsum(t["x"], d, reverse=True),
         lambda t, d: torch.cumsum(t["x"].flip(d), d).flip(d)),
        ("masked_cumsum", lambda t, d: ops.masked_cumsum(t["x"], t["m"], d),
         lambda t, d: torch.cumsum(torch.where(t["m"], t["x"], 0.0), d)),
        ("cumprod", lambda t, d: ops.cumprod(t["x"], d), lambda t, d: torch.cumprod(t["x"], d)),
        ("linear_recurrence", lambda t, d: ops.linear_recurrence(t["a"], t["x"], d), None),
        ("logcumsumexp", lambda t, d: ops.logcumsumexp(t["x"], d),
         lambda t, d: torch.logcumsumexp(t["x"], d)),
        ("cummax", lambda t, d: ops.cummax(t["x"], d), lambda t, d: torch.cummax(t["x"], d)),
        ("cumsum complex64", lambda t, d: ops.cumsum(t["c"], d),
         lambda t, d: torch.cumsum(t["c"], d)),
    ]


def op_bytes(name, x):
    """Minimal bytes of op `name` on its main input x: x read, the output (x's size) written,
    plus the other inputs and outputs."""
    b = 2 * x.numel() * x.element_size()
    if name == "masked_cumsum":
        b += x.numel()  # bool mask
    if name == "linear_recurrence":
        b += x.numel() * x.element_size()  # the coefficients a
    if name == "cummax":
        b += x.numel() * 8  # the int64 indices
    return b


def timed(fn):
    t = time.perf_counter()
    r = fn()
    dt = time.perf_counter() - t
    del r
    return dt * 1e3


_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MADV_POPULATE_WRITE = 23  # Linux >= 5.14
PAGE = os.sysconf("SC_PAGE_SIZE")


_pool = {}


def populated_copy(x):
    """A fresh tensor like x, its pages populated by torch.get_num_threads() threads at once
    (madvise releases the GIL), then x copied into it (first-touch faults instead where
    madvise(MADV_POPULATE_WRITE) is not supported)."""
    y = populated_empty(x)
    y.copy_(x)
    return y


def populated_empty(x):
    """A fresh tensor like x whose pages are populated (see populated_copy)."""
    y = torch.empty_like(x)
    nbytes = y.numel() * y.element_size()
    start = y.data_ptr() // PAGE * PAGE
    end = y.data_ptr() + nbytes
    nt = torch.get_num_threads()
    step = -(-(end - start) // nt // PAGE) * PAGE
    spans = [(a, min(step, end - a)) for a in range(start, end, step)]
    if nt == 1 or len(spans) == 1:
        _libc.madvise(start, end - start, MADV_POPULATE_WRITE)
    else:
        if nt not in _pool:
            _pool[nt] = concurrent.futures.ThreadPoolExecutor(nt)
        list(_pool[nt].map(lambda s: _libc.madvise(s[0], s[1], MADV_POPULATE_WRITE), spans))
    return y


def floor_fns(name, t, x):
    """The floor candidates of op `name`, and whether their times are to be scaled by the op's
    bytes over 2 x x's bytes. linear_recurrence reads two tensors and writes one: a + x has
    its traffic exactly (into a fresh output, and into one whose pages are populated); a copy
    of the same total bytes is no floor for it (reads are cheaper than writes: it measured
    125% of that on the Xeon). Every other op: a copy of x (clone() and a populated copy),
    scaled for masked_cumsum (its 1-byte mask; eager's x * m or where() are compute bound,
    2-3x slower than the copy, so no floor) and cummax (8-byte indices): approximations that
    may overstate those shares by up to 9/8 and 2x."""
    if name == "linear_recurrence":
        a = t["a"]
        return [lambda: torch.add(a, x), lambda: torch.add(a, x, out=populated_empty(x))], False
    return [lambda: x.clone(), lambda: populated_copy(x)], True


def measure(floors, sc, eager, reps, slow_ms=300.0):
    """Best of `reps` interleaved rounds after a warm-up call. A function slower than `slow_ms`
    (torch eager along an outer dim takes seconds) keeps its warm-up time as a sample and runs
    in the first round only, to bound the run time (~4 minutes on 16 cores)."""
    # The floor: the fastest of the candidates `floors` (floor_fns: into a fresh output whose
    # pages fault one by one on first touch, and into one whose pages are populated first, as
    # scanops does since ba6c296).
    fns = list(floors) + [sc] + ([eager] if eager else [])
    warm = [timed(f) for f in fns]
    nf = len(floors)
    samples = [[w] if i >= nf and w >= slow_ms else [] for i, w in enumerate(warm)]
    for r in range(reps):
        for i, f in enumerate(fns):
            if i < nf or r < 1 or warm[i] < slow_ms:
                samples[i].append(timed(f))
    floor = min(samples[:nf], key=min)
    spread = (max(floor) - min(floor)) / min(floor)
    return min(floor), spread, min(samples[nf]), (min(samples[nf + 1]) if eager else None)


def device_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} logical CPUs"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default=None, help="comma list (default: 1, 2, all)")
    ap.add_argument("--elems", type=int, default=1 << 26, help="elements per tensor (power of 2)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved rounds (best of)")
    ap.add_argument("--ops", default=None, help="comma list of op names to run (default: all)")
    ap.add_argument("--shapes", default=None, help="comma list of shape indices (default: all)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    args = ap.parse_args()

    all_threads = os.cpu_count() or torch.get_num_threads()
    if args.threads:
        threads_list = [int(t) for t in args.threads.split(",")]
    else:
        threads_list = sorted({1, min(2, all_threads), all_threads})
    shape_list = shapes(args.elems)
    few = range(DEFAULT_FEW_SHAPES)  # the shape classes of the FEW_SHAPES ops
    if args.shapes:
        shape_list = [shape_list[int(i)] for i in args.shapes.split(",")]
        few = range(len(shape_list))  # shapes chosen explicitly: every op runs on them
    case_list = cases()
    if args.ops:
        want = args.ops.split(",")
        case_list = [c for c in case_list if c[0] in want]

    gen = torch.Generator().manual_seed(0)
    rows = []
    print(f"device: {device_name()}, torch {torch.__version__}, threads {threads_list}", flush=True)
    hdr = "| workload | threads | floor ms (spread) | scanops ms | eager ms | scanops share | eager share |"
    print(hdr + "\n|---|---|---|---|---|---|---|", flush=True)
    for k, (sname, shape, dim) in enumerate(shape_list):
        t = {"x": torch.rand(shape, generator=gen)}
        for name, sc, eager in case_list:
            if name in FEW_SHAPES and k not in few:
                continue
            if name == "cumprod":
                t["x"] = torch.rand(shape, generator=gen) * 0.02 + 0.99
            if name == "masked_cumsum" and "m" not in t:
                t["m"] = torch.rand(shape, generator=gen) < 0.5
            if name == "linear_recurrence" and "a" not in t:
                t["a"] = torch.rand(shape, generator=gen) * 0.5 + 0.5
            if name == "cumsum complex64" and "c" not in t:
                t["c"] = torch.randn(shape, generator=gen, dtype=torch.complex64)
            x = t[MAIN_INPUT.get(name, "x")]
            nbytes = op_bytes(name, x)
            for th in threads_list:
                torch.set_num_threads(th)
                floors, scaled = floor_fns(name, t, x)
                floor_ms, spread, sc_ms, eg_ms = measure(
                    floors, lambda: sc(t, dim), (lambda: eager(t, dim)) if eager else None,
                    args.reps)
                if scaled:
                    floor_ms *= nbytes / (2 * x.numel() * x.element_size())
                row = {
                    "workload": f"{name} {sname}", "op": name, "shape": list(shape), "dim": dim,
                    "threads": th, "bytes": nbytes, "floor_ms": round(floor_ms, 3),
                    "floor_spread": round(spread, 3), "scanops_ms": round(sc_ms, 3),
                    "eager_ms": round(eg_ms, 3) if eg_ms is not None else None,
                    "scanops_share": round(floor_ms / sc_ms, 3),
                    "eager_share": round(floor_ms / eg_ms, 3) if eg_ms is not None else None,
                }
                rows.append(row)
                eg = f"{eg_ms:.1f}" if eg_ms is not None else "-"
                egs = f"{100 * row['eager_share']:.0f}%" if eg_ms is not None else "-"
                print(f"| {row['workload']} | {th} | {floor_ms:.1f} ({100 * spread:.0f}%) | {sc_ms:.1f} | "
                      f"{eg} | {100 * row['scanops_share']:.0f}% | {egs} |", flush=True)
            if name == "cumprod":
                t["x"] = torch.rand(shape, generator=gen)
        del t

    out = {"device": device_name(), "torch": torch.__version__, "threads_list": threads_list,
           "elems": args.elems, "reps": args.reps, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(f"device: {out['device']}, torch {out['torch']}, float32 (cumsum complex64: "
                    f"complex64), {args.elems} elements per tensor, best of {args.reps} "
                    "interleaved rounds\n\n")
            f.write(hdr + "\n|---|---|---|---|---|---|---|\n")
            for r in rows:
                eg = f"{r['eager_ms']:.1f}" if r["eager_ms"] is not None else "-"
                egs = f"{100 * r['eager_share']:.0f}%" if r["eager_share"] is not None else "-"
                f.write(f"| {r['workload']} | {r['threads']} | {r['floor_ms']:.1f} "
                        f"({100 * r['floor_spread']:.0f}%) | {r['scanops_ms']:.1f} | {eg} | "
                        f"{100 * r['scanops_share']:.0f}% | {egs} |\n")


if __name__ == "__main__":
    main()
