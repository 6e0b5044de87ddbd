"""GPU benchmark: every scanops op on every shape class, as a share of copy speed.

What one run measures, per workload: the scanops op, the same expression in torch eager and
torch.compile of it (dynamo compiled once per workload, `dynamic=False`, a cache large enough
that no workload falls back to eager), and the *floor*: a device-to-device copy moving the
workload's minimal bytes (each input read once, each output written once; a bool mask is 1
byte per element, the int64 indices of cummax / cummin 8 bytes per element).

Trustworthy numbers:
- one floor per byte count: workloads moving the same bytes share one copy measurement;
- the floor is measured interleaved with the runs: every round times the copy, then every
  candidate of every workload of that byte count, and the rounds repeat (--rounds);
- each figure is the best (minimum) over rounds of the median of CUDA-event timings within a
  round; the floor's spread over rounds, (max - min) / min, is reported per byte count;
- a share over 100% or a floor spread over 3% is flagged in the output: such a run is not
  quoted;
- scanops is also run twice on the same input and the two outputs compared bit for bit
  ("bitwise" column);
- the GPU's SM clock is sampled every 100 ms (nvidia-smi, where present) and its minimum and
  median over each byte count's timed rounds go to the JSON (sm_mhz_min / sm_mhz_median) and
  the table: a compute-heavier kernel slows down when the GPU lowers its clock under a long
  run's power or heat, and the copy floor (memory bound) does not.

share = floor time / op time (100%: the op moves its bytes as fast as a copy).

Workloads: cumsum (flags, masked, dtypes, shape classes, dims), cumprod, linear_recurrence,
logcumsumexp, cummax, cummin, complex64 cumsum, and forward + backward of cumsum,
masked_cumsum, cumprod, linear_recurrence, logcumsumexp and cummax. --only SUBSTR keeps the
workloads whose name contains SUBSTR (e.g. --only logcumsumexp, --only cummax, --only c64).

--initial adds a candidate per forward workload: the same scanops op with a per-line
`initial` (one value per line, the result dtype), timed in the same rounds.

Usage: python bench/bench_gpu.py [--quick] [--no-compile] [--initial] [--only SUBSTR]
                                 [--rounds K] [--json out.json] [--md out.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401



class _Ops:
    """torch.ops.scanops with extra keyword arguments injected while `extra` is set: the
    workloads' own closures run with `initial=` for the "initial" candidate (both candidates
    go through this proxy, so they pay the same host cost)."""
    extra = {}

    def __getattr__(self, name):
        f = getattr(torch.ops.scanops, name)
        return lambda *a, **kw: f(*a, **kw, **_Ops.extra)


ops = _Ops()


def time_once_ms(fn, reps):
    """Median of `reps` CUDA-event timings of fn()."""
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def excl_torch(x, d):
    y = torch.cumsum(x.narrow(d, 0, x.size(d) - 1), d)
    return torch.cat([torch.zeros_like(x.narrow(d, 0, 1)), y], d)


# ---------------------------------------------------------------------------------------
# Workloads. Each: name, shape, dim, dtype, kind of inputs, scanops fn, torch fn (or None),
# minimal bytes as a multiple of (numel * element size) plus bytes per element of a bool
# mask and of int64 indices, and whether it is forward + backward. A forward + backward
# workload's fns return the one tensor the gradient flows from (cummax: the values).
def workloads(quick):
    big = (8192, 8192) if quick else (32768, 32768)
    half = (big[0] // 2, big[1])
    W = []

    def add(name, shape, dim, sc, tf, dtype=torch.float32, inputs="x", elems=2, mask_bytes=0,
            idx_bytes=0, bwd=False):
        W.append(dict(name=name, shape=shape, dim=dim, sc=sc, tf=tf, dtype=dtype, inputs=inputs,
                      elems=elems, mask_bytes=mask_bytes, idx_bytes=idx_bytes, bwd=bwd))

    cs = lambda d, **kw: (lambda x, m: ops.cumsum(x, d, **kw))  # noqa: E731
    tcs = lambda d: (lambda x, m: torch.cumsum(x, d))  # noqa: E731
    # Rows (inner == 1): every op and flag.
    add("cumsum", big, 1, cs(1), tcs(1))
    add("reverse cumsum", big, 1, cs(1, reverse=True),
        lambda x, m: torch.cumsum(x.flip(1), 1).flip(1))
    add("exclusive cumsum", big, 1, cs(1, exclusive=True), lambda x, m: excl_torch(x, 1))
    add("masked cumsum", big, 1, lambda x, m: ops.masked_cumsum(x, m, 1),
        lambda x, m: torch.cumsum(x * m, 1), inputs="xm", mask_bytes=1)
    add("cumprod", big, 1, lambda x, m: ops.cumprod(x, 1), lambda x, m: torch.cumprod(x, 1),
        inputs="p")
    add("linear_recurrence", big, 1, lambda x, a: ops.linear_recurrence(a, x, 1), None,
        inputs="xa", elems=3)
    add("bf16 cumsum", big, 1, cs(1), tcs(1), dtype=torch.bfloat16)
    add("fp16 cumsum", big, 1, cs(1), tcs(1), dtype=torch.float16)
    # Forward + backward (minimal bytes: forward in/out, backward grad in + saved inputs it
    # needs + grads out).
    add("cumsum fwd+bwd", big, 1, cs(1), tcs(1), elems=4, bwd=True)
    add("masked cumsum fwd+bwd", big, 1, lambda x, m: ops.masked_cumsum(x, m, 1),
        lambda x, m: torch.cumsum(x * m, 1), inputs="xm", elems=4, mask_bytes=2, bwd=True)
    add("cumprod fwd+bwd", big, 1, lambda x, m: ops.cumprod(x, 1),
        lambda x, m: torch.cumprod(x, 1), inputs="p", elems=5, bwd=True)
    add("linear_recurrence fwd+bwd", big, 1, lambda x, a: ops.linear_recurrence(a, x, 1), None,
        inputs="xa", elems=8, bwd=True)
    # (half the rows: next to the inclusive one's floor group the full size ran out of the
    # H100's memory)
    add(f"exclusive linear_recurrence fwd+bwd ({half[0]}, {half[1]})", half, 1,
        lambda x, a: ops.linear_recurrence(a, x, 1, exclusive=True), None, inputs="xa", elems=8,
        bwd=True)
    # Along dim 0 (the column kernels' fused backward epilogue).
    add("masked cumsum fwd+bwd dim 0", big, 0, lambda x, m: ops.masked_cumsum(x, m, 0),
        lambda x, m: torch.cumsum(x * m, 0), inputs="xm", elems=4, mask_bytes=2, bwd=True)
    # logcumsumexp, cummax, cummin, complex64 cumsum (torch: the torch op of the same name).
    # cummax / cummin write values (x's dtype) and int64 indices: 4 + 4 + 8 bytes per float32
    # element. complex64 rows of half the length move the bytes of the float32 cumsum rows
    # (same floor).
    add("logcumsumexp", big, 1, lambda x, m: ops.logcumsumexp(x, 1),
        lambda x, m: torch.logcumsumexp(x, 1))
    add("logcumsumexp dim 0", big, 0, lambda x, m: ops.logcumsumexp(x, 0),
        lambda x, m: torch.logcumsumexp(x, 0))
    add("cummax", big, 1, lambda x, m: ops.cummax(x, 1), lambda x, m: torch.cummax(x, 1),
        idx_bytes=8)
    add("cummin", big, 1, lambda x, m: ops.cummin(x, 1), lambda x, m: torch.cummin(x, 1),
        idx_bytes=8)
    # cummax over the shape classes of the cumsum workloads below (same floor per byte count).
    q0 = 4 if quick else 1
    cmx = lambda d: (lambda x, m: ops.cummax(x, d))  # noqa: E731
    tcmx = lambda d: (lambda x, m: torch.cummax(x, d))  # noqa: E731
    add("cummax (2^20, 64) dim 1", ((1 << 20) // q0, 64), 1, cmx(1), tcmx(1), idx_bytes=8)
    add("cummax (64, 2^22) dim 1", (64, (1 << 22) // q0), 1, cmx(1), tcmx(1), idx_bytes=8)
    add("cummax 1-D 2^28", ((1 << 28) // q0,), 0, cmx(0), tcmx(0), idx_bytes=8)
    add("cummax dim 0", big, 0, cmx(0), tcmx(0), idx_bytes=8)
    add("cummax (8, 32768, 4096) dim 1", (8, 32768 // q0, 4096), 1, cmx(1), tcmx(1), idx_bytes=8)
    add("cummax bf16", big, 1, cmx(1), tcmx(1), dtype=torch.bfloat16, idx_bytes=8)
    lcse = lambda d: (lambda x, m: ops.logcumsumexp(x, d))  # noqa: E731
    tlcse = lambda d: (lambda x, m: torch.logcumsumexp(x, d))  # noqa: E731
    add("logcumsumexp 1-D 2^28", ((1 << 28) // q0,), 0, lcse(0), tlcse(0))
    add("logcumsumexp (64, 2^22) dim 1", (64, (1 << 22) // q0), 1, lcse(1), tlcse(1))
    add(f"c64 cumsum ({big[0]}, {big[1] // 2})", (big[0], big[1] // 2), 1, cs(1), tcs(1),
        dtype=torch.complex64)
    # logcumsumexp forward + backward: forward x in, y out; backward g in, the saved x and y in
    # (dx_k = sum_{i>=k} g_i exp(x_k - y_i) reads both), dx out.
    # Half the rows: at full size the backward's temporaries (two reverse scans of log-gradients)
    # ran out of the H100's 80 GB next to the floor group's buffers (measured at bbddf67).
    add(f"logcumsumexp fwd+bwd ({half[0]}, {half[1]})", half, 1, lambda x, m: ops.logcumsumexp(x, 1),
        lambda x, m: torch.logcumsumexp(x, 1), elems=6, bwd=True)
    # cummax forward + backward: forward x in, values + indices out; backward g and the saved
    # indices in, dx out (4 float32 tensors, indices written once and read once). Half the
    # rows: at full size it moves 32 GiB, the byte count of linear_recurrence fwd+bwd, and one
    # group holding the floor's two 16 GiB buffers and both workloads' inputs (32 GiB) would
    # leave too little of an 80 GB GPU for the backward's temporaries.
    add(f"cummax fwd+bwd ({half[0]}, {half[1]})", half, 1, lambda x, m: ops.cummax(x, 1)[0],
        lambda x, m: torch.cummax(x, 1).values, elems=4, idx_bytes=16, bwd=True)
    # Row shape classes.
    q = 4 if quick else 1
    add("(2^20, 64) dim 1", ((1 << 20) // q, 64), 1, cs(1), tcs(1))
    add("(2^24, 4) dim 1", ((1 << 24) // q, 4), 1, cs(1), tcs(1))
    add("(64, 2^22) dim 1", (64, (1 << 22) // q), 1, cs(1), tcs(1))
    add("1-D 2^30", ((1 << 30) // (16 if quick else 1),), 0, cs(0), tcs(0))
    # 1-D lines of the other floating types and flags (forward sums: CCCL's DeviceScan, see
    # ops/cuda/cub_line_scan.h; reverse: the row kernel's look-back)
    # (2^28 elements, 2^30 for bfloat16: the byte-count groups of the 1-D logcumsumexp and of
    # the float16 / bfloat16 rows; in the 8 GiB group their inputs ran the H100 out of memory)
    n1 = (1 << 28) // (16 if quick else 1)
    add("1-D 2^28 exclusive", (n1,), 0, cs(0, exclusive=True), lambda x, m: excl_torch(x, 0))
    add("1-D 2^28 reverse", (n1,), 0, cs(0, reverse=True),
        lambda x, m: torch.cumsum(x.flip(0), 0).flip(0))
    add("1-D 2^28", (n1,), 0, cs(0), tcs(0))
    add("1-D 2^30 bf16", (4 * n1,), 0, cs(0), tcs(0), dtype=torch.bfloat16)
    add("1-D 2^28 float64", (n1,), 0, cs(0), tcs(0), dtype=torch.float64)
    add("(128, 4000) latency", (128, 4000), 1, cs(1), tcs(1))
    # Short wide rows (issue #36: 1-512 rows of 32k-256k, where a block per row leaves SMs
    # idle; a few rows of ~150k: top-p sampling over an LLM vocabulary).
    add("short wide (8, 151936) dim 1", (8, 151936), 1, cs(1), tcs(1))
    add("short wide (64, 32768) dim 1", (64, 32768), 1, cs(1), tcs(1))
    add("short wide (128, 131072) dim 1", (128, 131072), 1, cs(1), tcs(1))
    add("short wide (512, 65536) dim 1", (512, 65536), 1, cs(1), tcs(1))
    add("short wide (512, 262144) dim 1", (512, 262144), 1, cs(1), tcs(1))
    # Scans along an outer or middle dim (inner > 1).
    add("(32768, 32768) dim 0" if not quick else "big dim 0", big, 0, cs(0), tcs(0))
    add("(8, 32768, 4096) dim 1", (8, 32768 // q, 4096), 1, cs(1), tcs(1))
    add("(2^22, 64) dim 0", ((1 << 22) // q, 64), 0, cs(0), tcs(0))
    add("(2^24, 8) dim 0", ((1 << 24) // q, 8), 0, cs(0), tcs(0))
    # Narrow columns (2-8: rows of lanes, ops/cuda/lanes_scan.cuh). torch's eager cumsum
    # takes ~2 s a call on these (one thread a column): one timing a round.
    add("(2^25, 2) dim 0", ((1 << 25) // q, 2), 0, cs(0), tcs(0))
    add("(2^24, 4) dim 0", ((1 << 24) // q, 4), 0, cs(0), tcs(0))
    add("(4, 2^22, 4) dim 1", (4, (1 << 22) // q, 4), 1, cs(1), tcs(1))
    add("(2^20, 512) dim 0", ((1 << 20) // q, 512), 0, cs(0), tcs(0))
    add("(2^21, 128) dim 0", ((1 << 21) // q, 128), 0, cs(0), tcs(0))
    add("(4, 2^20, 64) dim 1", (4, (1 << 20) // q, 64), 1, cs(1), tcs(1))
    add("cumprod dim 0", big, 0, lambda x, m: ops.cumprod(x, 0), lambda x, m: torch.cumprod(x, 0),
        inputs="p")
    # Broadcast companions, read in place: a mask / coefficients of one row (1, N) and of one
    # column (M, 1) (their bytes are negligible: the floor is the input and the output).
    add("masked cumsum, (1, N) mask", big, 1, lambda x, m: ops.masked_cumsum(x, m, 1),
        lambda x, m: torch.cumsum(x * m, 1), inputs="xm_row")
    add("masked cumsum, (M, 1) mask", big, 1, lambda x, m: ops.masked_cumsum(x, m, 1),
        lambda x, m: torch.cumsum(x * m, 1), inputs="xm_col")
    add("linear_recurrence, (1, N) a", big, 1, lambda x, a: ops.linear_recurrence(a, x, 1), None,
        inputs="xa_row")
    return W


def make_inputs(w, dev):
    shape, dtype = w["shape"], w["dtype"]
    g = torch.Generator(device=dev).manual_seed(0)
    if w["inputs"] == "p":  # near-1 factors: the usual cumprod data
        x = (torch.rand(shape, device=dev, generator=g) * 0.02 + 0.99).to(dtype)
    elif dtype.is_complex:
        x = torch.randn(shape, device=dev, generator=g, dtype=dtype)
    else:
        x = torch.randn(shape, device=dev, generator=g).to(dtype)
    m = None
    if w["inputs"] == "xm":
        m = torch.rand(shape, device=dev, generator=g) > 0.5
    elif w["inputs"] == "xa":
        m = torch.rand(shape, device=dev, generator=g).to(dtype)
    elif w["inputs"] == "xm_row":
        m = torch.rand((1, shape[1]), device=dev, generator=g) > 0.5
    elif w["inputs"] == "xm_col":
        m = torch.rand((shape[0], 1), device=dev, generator=g) > 0.5
    elif w["inputs"] == "xa_row":
        m = torch.rand((1, shape[1]), device=dev, generator=g).to(dtype)
    return x, m


def line_init(w, x):
    """An `initial` for the workload: one value per line (x's shape without the scan dim),
    of the result dtype (the workloads' results have x's dtype)."""
    shape = [s for k, s in enumerate(x.shape) if k != w["dim"] % x.dim()]
    g = torch.Generator(device=x.device).manual_seed(1)
    if w["inputs"] == "p":
        return (torch.rand(shape, device=x.device, generator=g) * 0.02 + 0.99).to(x.dtype)
    if x.dtype.is_complex:
        return torch.randn(shape, device=x.device, generator=g, dtype=x.dtype)
    return torch.randn(shape, device=x.device, generator=g).to(x.dtype)


def with_extra(fn, extra):
    def run():
        _Ops.extra = extra
        try:
            return fn()
        finally:
            _Ops.extra = {}
    return run


def candidates(w, x, m, use_compile, initial=False):
    """name -> zero-argument callable. initial: also "initial", the scanops op with a
    per-line `initial` (forward workloads)."""
    c = {}
    if w["bwd"]:
        xg = x.clone().requires_grad_()
        mg = m.clone().requires_grad_() if (m is not None and m.is_floating_point()) else m
        gy = torch.randn_like(x)
        wrt = (xg, mg) if (mg is not None and mg.requires_grad) else (xg,)

        def fb(f):
            return lambda: torch.autograd.grad(f(xg, mg), wrt, gy)
        c["scanops"] = fb(w["sc"])
        if w["tf"]:
            c["eager"] = fb(w["tf"])
            if use_compile:
                c["compile"] = fb(torch.compile(w["tf"], dynamic=False))
    else:
        c["scanops"] = lambda: w["sc"](x, m)
        if initial:
            c["initial"] = with_extra(lambda: w["sc"](x, m), {"initial": line_init(w, x)})
        if w["tf"]:
            c["eager"] = lambda: w["tf"](x, m)
            if use_compile:
                cf = torch.compile(w["tf"], dynamic=False)
                c["compile"] = lambda: cf(x, m)
    return c


class ClockLog:
    """nvidia-smi sampling the SM clock every 100 ms in the background (nothing if absent)."""

    def __init__(self, index):
        self.samples = []  # (time.time(), MHz)
        self.proc = None
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--id={index}", "--query-gpu=clocks.sm",
                 "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        except OSError:
            return
        import threading
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.samples.append((time.time(), float(line.strip())))
            except ValueError:
                pass

    def between(self, t0, t1):
        v = sorted(m for t, m in self.samples if t0 <= t <= t1)
        return (v[0], v[len(v) // 2]) if v else (float("nan"), float("nan"))

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()


def split_names(text):
    """Splits --only at the commas outside parentheses: workload names such as
    "(32768, 32768) dim 0" contain commas themselves (a plain split once let "(2^20" select
    every (2^20, ...) workload)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--md", default="")
    ap.add_argument("--no-eager", action="store_true", help="skip torch eager")
    ap.add_argument("--exact", action="store_true", help="--only names whole workload names")
    ap.add_argument("--no-bitwise", action="store_true",
                    help="skip the run-to-run bitwise check (its host copies take seconds a workload)")
    ap.add_argument("--initial", action="store_true",
                    help="time every forward workload with a per-line `initial` too")
    args = ap.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    torch._dynamo.config.cache_size_limit = 1024
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 1024
    if hasattr(torch._dynamo.config, "accumulated_cache_size_limit"):
        torch._dynamo.config.accumulated_cache_size_limit = 4096

    only = split_names(args.only)  # comma-separated name substrings
    if args.exact:
        ws = [w for w in workloads(args.quick) if w["name"] in only]
    else:
        ws = [w for w in workloads(args.quick) if not only or any(o in w["name"] for o in only)]
    for w in ws:
        esz = torch.empty((), dtype=w["dtype"]).element_size()
        n = 1
        for s in w["shape"]:
            n *= s
        w["numel"] = n
        w["bytes"] = n * esz * w["elems"] + n * (w["mask_bytes"] + w["idx_bytes"])

    # Group by byte count: one floor per group, measured in the same rounds as its ops.
    groups = {}
    for w in ws:
        groups.setdefault(w["bytes"], []).append(w)
    rows = []
    t_start = time.time()
    clocks = ClockLog(dev.index if dev.index is not None else torch.cuda.current_device())
    for nbytes, group in sorted(groups.items()):
        torch.cuda.empty_cache()
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        copy = lambda: dst.copy_(src)  # noqa: E731
        n_el = max(w["numel"] for w in group)
        reps = 5 if n_el >= (1 << 28) else 20 if n_el >= (1 << 22) else 200
        prepared = []
        for w in group:
            x, m = make_inputs(w, dev)
            cands = candidates(w, x, m, not args.no_compile, args.initial)
            if args.no_eager:
                cands.pop("eager", None)
            creps = {}
            for name, fn in list(cands.items()):
                try:  # warm-up (and compilation), then one timed call
                    for _ in range(2):
                        fn()
                    t1 = time_once_ms(fn, 1)
                except Exception as e:  # noqa: BLE001
                    print(f"{w['name']}: {name} failed: {type(e).__name__}: {e}"[:300],
                          file=sys.stderr)
                    del cands[name]
                    continue
                # Slow candidates (torch eager on some shapes takes seconds) get fewer repeats:
                # about 150 ms of timing per round at most.
                creps[name] = max(1, min(reps, int(150 / max(t1, 1e-3))))
            if "scanops" not in cands:  # (it failed above: reported, the workload dropped)
                continue
            # Bitwise run-to-run check of scanops (forward: outputs; fwd+bwd: gradients).
            # The first run's results wait in host memory: a group's inputs stay resident on the
            # device, and two runs' outputs of a 16 GiB workload next to them (six such in the
            # 16 GiB group) ran out of an H100's 80 GB.
            as_tuple = lambda r: r if isinstance(r, (tuple, list)) else (r,)  # noqa: E731
            if args.no_bitwise:
                bitwise = None
            else:
                r1 = [t.cpu() for t in as_tuple(cands["scanops"]())]
                r2 = as_tuple(cands["scanops"]())
                bitwise = all(torch.equal(a, b.cpu()) for a, b in zip(r1, r2))
                del r1, r2
            torch.cuda.empty_cache()
            prepared.append((w, cands, creps, bitwise, (x, m)))
        torch.cuda.synchronize()
        best = {}
        floor_runs = []
        t_timed = None
        # One untimed round first: the GPU idles during the host copies of the bitwise check,
        # and the first copy after them ran ~15% slow in every group (the spread of the floor).
        for r in range(args.rounds + 1):
            t = time_once_ms(copy, reps)
            if r == 0:
                for _, cands, creps, _, _ in prepared:
                    for name, fn in cands.items():
                        time_once_ms(fn, 1)
                t_timed = time.time()
                continue
            floor_runs.append(t)
            for w, cands, creps, _, _ in prepared:
                for name, fn in cands.items():
                    t = time_once_ms(fn, creps[name])
                    key = (w["name"], name)
                    best[key] = min(best.get(key, float("inf")), t)
        floor = min(floor_runs)
        spread = (max(floor_runs) - floor) / floor
        time.sleep(0.15)  # (the last sample of the rounds)
        mhz_min, mhz_med = clocks.between(t_timed, time.time())
        for w, cands, _, bitwise, _ in prepared:
            get = lambda k: best.get((w["name"], k), float("nan"))  # noqa: E731
            row = dict(workload=w["name"], shape=list(w["shape"]), dtype=str(w["dtype"]),
                       dim=w["dim"], fwd_bwd=w["bwd"], bytes=nbytes, copy_ms=floor,
                       copy_spread=spread, scanops_ms=get("scanops"), eager_ms=get("eager"),
                       compile_ms=get("compile"), initial_ms=get("initial"),
                       bitwise_repro=bitwise,
                       sm_mhz_min=mhz_min, sm_mhz_median=mhz_med)
            for k in ("scanops", "eager", "compile", "initial"):
                row[k + "_share"] = floor / row[k + "_ms"]
            rows.append(row)
            flag = " FLOOR SPREAD > 3%" if spread > 0.03 else ""
            flag += " SHARE > 100%: measurement suspect" if row["scanops_share"] > 1.0 else ""
            print(f"{w['name']:28s} floor {floor:8.3f} ms (spread {100 * spread:4.1f}%)  "
                  f"scanops {row['scanops_ms']:8.3f} ({100 * row['scanops_share']:5.1f}%)  "
                  f"eager {100 * row['eager_share']:5.1f}%  compile "
                  f"{100 * row['compile_share']:5.1f}%  initial {100 * row['initial_share']:5.1f}%  "
                  f"bitwise {bitwise}  SM MHz "
                  f"{mhz_min:.0f}-{mhz_med:.0f}{flag}", flush=True)
        del prepared, src, dst

    clocks.stop()
    # SCANOPS_COMMIT names the commit where the working tree's git is not the source's (the GPU
    # machine runs a copy whose .git may be stale: it once labelled a run with an old commit).
    commit = os.environ.get("SCANOPS_COMMIT", "")
    try:
        commit = commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True,
                                          cwd=os.path.dirname(__file__)).stdout.strip()
    except OSError:
        commit = ""
    meta = dict(device=props.name, torch=torch.__version__, date=time.strftime("%Y-%m-%d"),
                commit=commit, rounds=args.rounds, quick=args.quick,
                seconds=round(time.time() - t_start, 1))
    head = (f"Device: {props.name}, torch {torch.__version__}, {meta['date']}, "
            f"commit {commit}, float32 unless noted, best of {args.rounds} rounds\n\n"
            "| workload | MiB moved | floor ms (spread) | scanops ms | scanops | eager | compile "
            "| with initial | bitwise | SM MHz (min / median) |\n|---|---|---|---|---|---|---|---|---|---|\n")

    def pct(v):
        return "-" if v != v else f"{100 * v:.0f}%"
    md = head + "".join(
        f"| {r['workload']} | {r['bytes'] / 2**20:.0f} | {r['copy_ms']:.3f} "
        f"({100 * r['copy_spread']:.1f}%) | {r['scanops_ms']:.3f} | {pct(r['scanops_share'])} "
        f"| {pct(r['eager_share'])} | {pct(r['compile_share'])} | {pct(r['initial_share'])} "
        f"| {'-' if r['bitwise_repro'] is None else 'yes' if r['bitwise_repro'] else 'NO'} "
        f"| {r['sm_mhz_min']:.0f} / {r['sm_mhz_median']:.0f} |\n" for r in rows)
    print()
    print(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta, rows=rows), f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
