"""CPU benchmark: every scanops op x shape class against clone() and torch eager, per thread count.

share = floor time / op time. The floor moves the op's minimal bytes (every input read once,
the outputs written once) into fresh outputs the fastest way measured (floor_fns), the fastest
of: clone() (pages faulted one by one); a copy into a buffer populated first (madvise
MADV_POPULATE_WRITE); and bench/floor.c, compiled here and run on as many native threads as the
op, each over one contiguous span, chunk by chunk (256 KiB and 1 MiB of output), each chunk's
pages populated just before memcpy, or a plain vector loop, writes it (all four tried), and
with 1 MiB chunks the same two into outputs advised huge pages first (MADV_HUGEPAGE: scanops
advises its large outputs so by default, ops/cpu/scan_cpu_memory.cpp advise_huge_pages; a floor of
4 KiB pages alone would be no floor for those), and the plain loops prefetching their inputs 2
KiB ahead as the scan kernels do (the op measured up to 114% of the copies without: the
hardware prefetchers stop at page boundaries), and torch's own parallel copy / add into
outputs advised huge pages. The chunked copies are scanops' own schedule
for large outputs without the scan: before it was a candidate scanops measured up to 112% of
the other two on the 2-core VM, and with Python threads driving it up to 136% at 16 threads.
Other ops' traffic: linear_recurrence a + x (two reads, one write: a copy of the same total
bytes was no floor, reads are cheaper than writes, and it measured 125% of that); cummax a
copy of x plus an int64 tensor written (memset); masked_cumsum the faster of a copy of x plus
its 1-byte mask read and the copies of x scaled to its bytes (an approximation that may
overstate its share by up to 9/8). Without a C compiler the chunked floors run on Python
threads (numpy for a + x and the mask). The floor is measured interleaved with the op and
eager runs (round-robin, `--reps` rounds (default 3) after a warm-up, best of each), so machine
noise hits all alike; the floor's spread ((max - min) / min over the rounds of the fastest
candidate) is reported with it. "clone share" is torch's own way's time (clone(); a + x;
clone() and an int64 fill for cummax) over the op's: issue 12's reference.

Ops: cumsum (inclusive, exclusive, reverse), masked_cumsum, cumprod, linear_recurrence on every
shape class; logcumsumexp, cummax and "cumsum complex64" (a complex64 input: the floor is taken
of that input) on the first three shape classes (rows, dim 0, 1-D) unless --shapes says
otherwise. The AVX2 kernels run where the CPU has AVX2 + FMA.

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


_libc = ctypes.CDLL(None, use_errno=True)  # ctypes calls release the GIL
MADV_HUGEPAGE = 14  # Linux
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_libc.memcpy.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
_libc.memset.restype = ctypes.c_void_p
MADV_POPULATE_WRITE = 23  # Linux >= 5.14
PAGE = os.sysconf("SC_PAGE_SIZE")
CHUNK_BYTES = 1 << 20  # the chunked floors' chunk (256 KiB and 4 MiB measured within 5% of it)

try:
    import numpy as np
except ImportError:  # the chunked a + x floor needs it; the others do not
    np = None

_pool = {}


def _in_threads(fn, items):
    """fn over items, on torch.get_num_threads() threads (a pool kept per count)."""
    nt = torch.get_num_threads()
    if nt == 1 or len(items) == 1:
        for i in items:
            fn(i)
        return
    if nt not in _pool:
        _pool[nt] = concurrent.futures.ThreadPoolExecutor(nt)
    list(_pool[nt].map(fn, items))


def _populate(ptr, nbytes):
    start = ptr // PAGE * PAGE
    _libc.madvise(start, ptr + nbytes - start, MADV_POPULATE_WRITE)


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
    nt = torch.get_num_threads()
    step = -(-nbytes // nt // PAGE) * PAGE
    _in_threads(lambda a: _populate(y.data_ptr() + a, min(step, nbytes - a)), list(range(0, nbytes, step)))
    return y


def huge_empty(shape, dtype):
    """A fresh tensor whose 2 MiB-aligned interior is advised MADV_HUGEPAGE (as scanops advises
    its large outputs), its pages left to be faulted by the writes: with torch's own parallel
    copy / add (its thread pool, as the op's), the floor candidate closest to the op's own
    schedule since huge pages became its default."""
    y = torch.empty(shape, dtype=dtype)
    p, n, h = y.data_ptr(), y.numel() * y.element_size(), 2 << 20
    a, e = (p + h - 1) & ~(h - 1), (p + n) & ~(h - 1)
    if e > a:
        _libc.madvise(a, e - a, MADV_HUGEPAGE)
    return y


def huge_copy(x):
    return huge_empty(x.shape, x.dtype).copy_(x)


def chunked_write(outs, body):
    """Fills the fresh contiguous tensors `outs` (same numel) the way scanops writes a large
    output: elements [0, n) split into one contiguous span per thread, each span walked a chunk
    of CHUNK_BYTES (of outs[0]) at a time, the chunk's pages of every output populated just
    before body(e0, e1) writes them, so the zeroed lines are still in cache at the stores."""
    n = outs[0].numel()
    ce = max(1, CHUNK_BYTES // outs[0].element_size())
    nt = torch.get_num_threads()
    step = -(-n // nt // ce) * ce

    def span(a):
        for e0 in range(a, min(n, a + step), ce):
            e1 = min(n, e0 + ce, a + step)
            for y in outs:
                s = y.element_size()
                _populate(y.data_ptr() + e0 * s, (e1 - e0) * s)
            body(e0, e1)

    _in_threads(span, list(range(0, n, step)))
    return outs


def chunked_copy(x):
    """x copied into a fresh tensor chunk by chunk (chunked_write; libc memcpy)."""
    y = torch.empty_like(x)
    s, yp, xp = x.element_size(), y.data_ptr(), x.data_ptr()
    chunked_write([y], lambda e0, e1: _libc.memcpy(yp + e0 * s, xp + e0 * s, (e1 - e0) * s))
    return y


def chunked_copy_and_fill(x):
    """cummax's traffic: x copied into a fresh values tensor and a fresh int64 tensor written
    (memset), chunk by chunk (chunked_write)."""
    y = torch.empty_like(x)
    i = torch.empty(x.shape, dtype=torch.int64)
    s, yp, xp, ip = x.element_size(), y.data_ptr(), x.data_ptr(), i.data_ptr()

    def body(e0, e1):
        _libc.memcpy(yp + e0 * s, xp + e0 * s, (e1 - e0) * s)
        _libc.memset(ip + e0 * 8, 0, (e1 - e0) * 8)

    chunked_write([y, i], body)
    return y, i


def chunked_copy_and_read(x, m):
    """masked_cumsum's traffic: x copied into a fresh tensor and the bool mask m read (numpy's
    count_nonzero, which releases the GIL), chunk by chunk (chunked_write)."""
    y = torch.empty_like(x)
    s, yp, xp = x.element_size(), y.data_ptr(), x.data_ptr()
    mn = m.reshape(-1).numpy()

    def body(e0, e1):
        _libc.memcpy(yp + e0 * s, xp + e0 * s, (e1 - e0) * s)
        np.count_nonzero(mn[e0:e1])

    chunked_write([y], body)
    return y


def chunked_add(a, x):
    """a + x into a fresh tensor chunk by chunk (chunked_write; numpy's add, which releases
    the GIL)."""
    y = torch.empty_like(x)
    an, xn, yn = a.reshape(-1).numpy(), x.reshape(-1).numpy(), y.view(-1).numpy()
    chunked_write([y], lambda e0, e1: np.add(an[e0:e1], xn[e0:e1], out=yn[e0:e1]))
    return y


def _native_floor():
    """bench/floor.c compiled with the system C compiler (cc, -O3 -march=native) into a cache
    file beside the temp dir, and loaded; None where that fails (the Python floors remain)."""
    import hashlib
    import subprocess
    import tempfile
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor.c")
    try:
        with open(src, "rb") as f:
            tag = hashlib.sha1(f.read() + platform.node().encode()).hexdigest()[:12]
        so = os.path.join(tempfile.gettempdir(), f"scanops-bench-floor-{tag}.so")
        if not os.path.exists(so):
            cc = os.environ.get("CC", "cc")
            subprocess.run([cc, "-O3", "-march=native", "-fno-tree-loop-distribute-patterns", "-shared", "-fPIC",
                            "-pthread", "-o", so + ".tmp", src],
                           check=True, capture_output=True)
            os.replace(so + ".tmp", so)
        lib = ctypes.CDLL(so)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"note: the native floor is not available ({e}); Python-threaded floors only", flush=True)
        return None
    lib.scanops_floor.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.scanops_floor.restype = ctypes.c_uint64
    return lib


_floor_lib = _native_floor()
# (output bytes a chunk, flags: + 8 plain loops instead of memcpy / memset, + 16 the output
# advised huge pages first, as scanops advises its large outputs, + 32 the loops' inputs
# prefetched 2 KiB ahead, as the scan kernels' walks do): every pair a candidate
NATIVE_VARIANTS = ([(c, v) for c in (256 << 10, 1 << 20) for v in (0, 8)] +
                   [(1 << 20, 16), (1 << 20, 24), (1 << 20, 56), (256 << 10, 56)])


def native_floor(kind, x, variant, in2=None):
    """bench/floor.c's kind (0 copy, 1 copy + int64 fill, 2 copy + mask read, 3 add) into fresh
    outputs, on torch.get_num_threads() native threads; variant: (output bytes a chunk, flags:
    8 plain loops instead of memcpy / memset, 16 huge pages advised, 32 the loops' inputs
    prefetched)."""
    chunk, flags = variant
    y = torch.empty_like(x)
    y2 = torch.empty(x.shape, dtype=torch.int64) if kind == 1 else None
    kind |= flags & 48 if kind == 3 else flags  # (a + x is a loop either way)
    _floor_lib.scanops_floor(kind, torch.get_num_threads(), chunk, x.numel(), x.element_size(), y.data_ptr(),
                             x.data_ptr(), y2.data_ptr() if y2 is not None else None,
                             in2.data_ptr() if in2 is not None else None)
    return y, y2


def floor_fns(name, t, x, nbytes):
    """The floor candidates of op `name` on its main input x (nbytes: the op's minimal bytes),
    as (fn, scale) pairs: fn's time times scale is a candidate; the floor is the fastest. A
    fresh output is filled three ways: its pages faulted one by one; populated all first;
    populated a chunk at a time just before the chunk's writes, as scanops does.
    linear_recurrence reads two tensors and writes one: a + x has its traffic exactly; a copy
    of the same total bytes is no floor for it (reads are cheaper than writes: it measured
    125% of that on the Xeon). cummax: a copy of x into a fresh values tensor plus an int64
    tensor written (chunked). masked_cumsum: a chunked copy of x plus its mask read, and the
    copies of x scaled to its bytes (an approximation that may overstate its share by up to
    9/8; on the 2-core VM it was the faster one); eager's x * m or where() are compute bound,
    2-3x slower than the copy, so no floor. Every other op: a copy of x.
    The first candidate is torch's own way (the issue's reference, reported as "clone share"):
    clone() (scaled where the op has more bytes), a + x for linear_recurrence, clone() plus
    an int64 tensor filled for cummax."""
    nat = _floor_lib is not None and x.is_contiguous()
    chunks = NATIVE_VARIANTS if nat else ()
    adds = [v for v in chunks if not v[1] & 8 or v[1] & 32]  # a + x is a loop either way
    if name == "linear_recurrence":
        a = t["a"]
        fl = [lambda: torch.add(a, x), lambda: torch.add(a, x, out=populated_empty(x)),
              lambda: torch.add(a, x, out=huge_empty(x.shape, x.dtype))]
        if nat and x.dtype == torch.float32 and a.is_contiguous():
            fl += [lambda c=c: native_floor(3, x, c, a) for c in adds]
        elif np is not None:
            fl.append(lambda: chunked_add(a, x))
        return [(f, 1.0) for f in fl]
    if name == "cummax":
        fl = [lambda: (x.clone(), torch.empty(x.shape, dtype=torch.int64).fill_(0)),
              lambda: (huge_copy(x), huge_empty(x.shape, torch.int64).fill_(0))]
        fl += [lambda c=c: native_floor(1, x, c) for c in chunks] or [lambda: chunked_copy_and_fill(x)]
        return [(f, 1.0) for f in fl]
    scale = nbytes / (2 * x.numel() * x.element_size())
    fl = [(lambda: x.clone(), scale), (lambda: populated_copy(x), scale), (lambda: huge_copy(x), scale)]
    if nat:
        fl += [(lambda c=c: native_floor(0, x, c), scale) for c in chunks]
    else:
        fl.append((lambda: chunked_copy(x), scale))
    if name == "masked_cumsum":
        m = t["m"]
        if nat:
            fl += [(lambda c=c: native_floor(2, x, c, m), 1.0) for c in chunks]
        elif np is not None:
            fl.append((lambda: chunked_copy_and_read(x, m), 1.0))
    return fl


def measure(floors, sc, eager, reps, slow_ms=300.0):
    """Best of `reps` interleaved rounds after a warm-up call. A function slower than `slow_ms`
    (torch eager along an outer dim takes seconds) keeps its warm-up time as a sample and runs
    in the first round only, to bound the run time (~4 minutes on 16 cores). `floors`: the
    (fn, scale) candidates of floor_fns; the floor is the one with the least scaled best time,
    its spread that candidate's (max - min) / min."""
    fns = [f for f, _ in floors] + [sc] + ([eager] if eager else [])
    warm = [timed(f) for f in fns]
    nf = len(floors)
    samples = [[w] if i >= nf and w >= slow_ms else [] for i, w in enumerate(warm)]
    for r in range(reps):
        for i, f in enumerate(fns):
            if i < nf or r < 1 or warm[i] < slow_ms:
                samples[i].append(timed(f))
    floor = min(([v * sc_ for v in samples[i]] for i, (_, sc_) in enumerate(floors)), key=min)
    spread = (max(floor) - min(floor)) / min(floor)
    ref = min(samples[0]) * floors[0][1]
    return min(floor), spread, min(samples[nf]), (min(samples[nf + 1]) if eager else None), ref


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
    hdr = ("| workload | threads | floor ms (spread) | scanops ms | eager ms | scanops share | eager share "
           "| clone ms | clone share |")
    print(hdr + "\n|---|---|---|---|---|---|---|---|---|", flush=True)
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
                floors = floor_fns(name, t, x, nbytes)
                floor_ms, spread, sc_ms, eg_ms, ref_ms = measure(
                    floors, lambda: sc(t, dim), (lambda: eager(t, dim)) if eager else None,
                    args.reps)
                row = {
                    "workload": f"{name} {sname}", "op": name, "shape": list(shape), "dim": dim,
                    "threads": th, "bytes": nbytes, "floor_ms": round(floor_ms, 3),
                    "floor_spread": round(spread, 3), "scanops_ms": round(sc_ms, 3),
                    "eager_ms": round(eg_ms, 3) if eg_ms is not None else None,
                    "scanops_share": round(floor_ms / sc_ms, 3),
                    "eager_share": round(floor_ms / eg_ms, 3) if eg_ms is not None else None,
                    "clone_ms": round(ref_ms, 3), "clone_share": round(ref_ms / sc_ms, 3),
                }
                rows.append(row)
                eg = f"{eg_ms:.1f}" if eg_ms is not None else "-"
                egs = f"{100 * row['eager_share']:.0f}%" if eg_ms is not None else "-"
                print(f"| {row['workload']} | {th} | {floor_ms:.1f} ({100 * spread:.0f}%) | {sc_ms:.1f} | "
                      f"{eg} | {100 * row['scanops_share']:.0f}% | {egs} | {ref_ms:.1f} | "
                      f"{100 * row['clone_share']:.0f}% |", flush=True)
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
            f.write(hdr + "\n|---|---|---|---|---|---|---|---|---|\n")
            for r in rows:
                eg = f"{r['eager_ms']:.1f}" if r["eager_ms"] is not None else "-"
                egs = f"{100 * r['eager_share']:.0f}%" if r["eager_share"] is not None else "-"
                f.write(f"| {r['workload']} | {r['threads']} | {r['floor_ms']:.1f} "
                        f"({100 * r['floor_spread']:.0f}%) | {r['scanops_ms']:.1f} | {eg} | "
                        f"{100 * r['scanops_share']:.0f}% | {egs} | {r['clone_ms']:.1f} | "
                        f"{100 * r['clone_share']:.0f}% |\n")


if __name__ == "__main__":
    main()
