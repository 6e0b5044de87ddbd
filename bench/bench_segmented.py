"""Segmented scans: scanops' reset form and jagged (offsets) form against their byte floor,
the usual PyTorch way and (with --cub) cub::DeviceSegmentedScan, for segment-length classes,
interleaved round by round, best of `--reps`.

floor: a copy of a uint8 buffer of half the case's bytes (read + write = the bytes the op must
move), per case: the reset form reads the values and the reset mask (1 byte an element, or one
per row of features) and writes the values (9 bytes an element in 1-D); the offsets form
(`segment_cumsum`, CUB) reads the values and the offsets (8 bytes a segment) and writes the
values; the unsegmented op moves 8 bytes an element. share = floor / the case's time (1.00: at
the floor). Both forms' floors are timed in every round.
torch way (reset form, sums): cumsum of everything, minus the running sum at each segment's
start gathered back (cummax of the start positions): several passes, and it cancels
(`err` columns: max relative error against a float64 segmented reference, scaled by the
segment's running sum of |x|). `cumsum, no segments`: the unsegmented op on the same data.
CUB (--cub LIB.so, built by bench/build_cub_segmented.sh): cub::DeviceSegmentedScan's
InclusiveSegmentedSum on the offsets form, on torch's current stream; 1-D classes only (its
segments are contiguous runs, not rows of features). Its result is compared with
segment_cumsum's once per class (`vs scanops`: max difference relative to the running sum of
|x|, and whether bitwise equal).
Calls slower than 20 ms are timed one at a time (else 10 calls between two events).
CPU floor: bench_cpu.py's native copy (bench/floor.c on torch's thread count, the fastest of
its chunked / huge-page variants: scanops' outputs are advised huge pages); without a C
compiler, a torch clone(), which takes 4 KiB page faults: then compare CPU rows with the
unsegmented op's row instead.

Classes: one segment, length 1, uniform 1..64, fixed 256, uniform 1..4096, power law (lengths
floor(u^-0.8), u uniform: a Zipf law, P(L >= l) ~ l^-1.25) and `64 features`: values
(N/64, 64), segments of 4 rows (N/256 segments: 2^20 at N = 2^28).

Usage: python bench/bench_segmented.py [--device cpu|cuda] [--elems N] [--reps R]
                                       [--threads T] [--md F] [--json F] [--cub LIB.so]
                                       [--classes-only] [--no-torch-way]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402

ops = torch.ops.scanops


def lengths(kind, n, gen):
    """Segment lengths summing to n."""
    if kind == "one segment":
        return torch.tensor([n])
    if kind == "length 1":
        return torch.ones(n, dtype=torch.long)
    if kind.startswith("fixed "):
        k = int(kind.split()[1])
        return torch.full((n // k,), k, dtype=torch.long)
    if kind.startswith("uniform 1.."):
        hi = int(kind.split("..")[1])
        ls = torch.randint(1, hi + 1, (4 * n // hi + 16,), generator=gen)
    elif kind == "power law":
        u = torch.rand(n // 4 + 16, generator=gen)
        ls = (1.0 / (u + 1e-6) ** 0.8).long().clamp(1, n)  # Pareto-like, heavy tail
    else:
        raise ValueError(kind)
    while int(ls.sum()) < n:  # (draw more until they cover n)
        ls = torch.cat([ls, ls])
    c = ls.cumsum(0)
    k = int((c < n).sum())  # segments wholly before n; segment k is cut at n
    ls = ls[: k + 1].clone()
    ls[k] = n - (int(c[k - 1]) if k > 0 else 0)
    assert int(ls.sum()) == n
    return ls[ls > 0]


def timer(device):
    if device == "cuda":
        def timed(fn, reps=10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / reps
    else:
        def timed(fn, reps=1):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            return (time.perf_counter() - t0) * 1e3 / reps
    return timed


def torch_way(x, reset):
    """cumsum minus the running sum before each segment's start, along dim 0 (reset: one bool
    a row of x)."""
    n = x.shape[0]
    pos = torch.arange(n, device=x.device)
    start = torch.where(reset, pos, torch.zeros_like(pos)).cummax(0).values
    c = x.cumsum(0)
    return c - (c.index_select(0, start) - x.index_select(0, start))


def ref64(x, offsets):
    """Per-segment cumsum in float64 along dim 0: scanops' CPU back end in float64 (checked
    against Python-loop references by test/python/test_segmented.py). A global float64 cumsum
    minus its value at each start would cancel: its own error exceeds float32 rounding for
    small segments next to a large running total."""
    xd = x.double().cpu()
    o = offsets.cpu()
    reset = torch.zeros(xd.shape[0], dtype=torch.bool)
    reset[o[:-1][o[1:] > o[:-1]]] = True
    if xd.dim() > 1:
        reset = reset.view(-1, *([1] * (xd.dim() - 1)))
    return ops.cumsum(xd, 0, reset=reset)


def rel_err(got, ref, scale):
    """max |got - ref| / scale (ref, scale: float64, on got's device)."""
    return float(((got.double() - ref).abs() / scale).max())


def load_cub(path):
    """bench/cub_segmented.cu's library: fn(x, offsets) -> inclusive segmented sum."""
    import ctypes
    lib = ctypes.CDLL(path)
    lib.cub_segscan_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
    lib.cub_segscan_f32.restype = ctypes.c_int
    lib.cub_segscan_error_string.argtypes = [ctypes.c_int]
    lib.cub_segscan_error_string.restype = ctypes.c_char_p
    version = lib.cub_segscan_version()

    def cub_cumsum(x, offsets):
        assert x.is_cuda and x.dtype == torch.float32 and x.dim() == 1 and x.is_contiguous()
        assert offsets.dtype == torch.int64 and offsets.is_contiguous()
        out = torch.empty_like(x)
        rc = lib.cub_segscan_f32(x.data_ptr(), out.data_ptr(), offsets.data_ptr(),
                                 offsets.numel() - 1, 0, torch.cuda.current_stream().cuda_stream)
        if rc != 0:
            raise RuntimeError("cub_segscan_f32: " + lib.cub_segscan_error_string(rc).decode())
        return out
    return cub_cumsum, version


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--elems", type=int, default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--cub", default=None, help="bench/cub_segmented.cu's .so (CUDA only)")
    ap.add_argument("--no-torch-way", action="store_true",
                    help="skip the torch way (~0.8 s a call at 2^28 on the H100)")
    ap.add_argument("--classes-only", action="store_true",
                    help="only the segment-length classes (not the other ops and shapes)")
    args = ap.parse_args()
    dev = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    n = args.elems or ((1 << 26) if dev == "cuda" else (1 << 22))
    gen = torch.Generator().manual_seed(0)
    timed = timer(dev)
    rows = []
    cub_cumsum, cub_version = load_cub(args.cub) if args.cub else (None, None)
    if cub_cumsum is not None and dev != "cuda":
        raise SystemExit("--cub needs --device cuda")

    # CPU: bench_cpu.py's native floor (bench/floor.c, on as many native threads as torch's),
    # the fastest of its variants (chunked, huge pages advised as scanops advises its outputs),
    # picked once per byte count: a torch clone() takes 4 KiB page faults and was slower than
    # the unsegmented cumsum itself (16-core Xeon, 2026-11-27).
    native = None
    if dev == "cpu":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bench_cpu  # noqa: E402  (compiles bench/floor.c once, cached)
        if bench_cpu._floor_lib is not None:
            native = bench_cpu

    def floor_fn(nbytes):
        buf = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device=dev)
        if native is None:
            return lambda: buf.clone()
        fns = [lambda v=v: native.native_floor(0, buf, v) for v in native.NATIVE_VARIANTS]
        best = []
        for fn in fns:
            fn()
            best.append(min(timed(fn) for _ in range(3)))
        return fns[best.index(min(best))]

    def run_rounds(cases):
        """cases: (name, fn, floor bytes). Interleaved rounds, best of args.reps; slow calls
        (> 20 ms) timed one at a time. Returns {name: ms}, {floor bytes: ms}."""
        floors = {nb: floor_fn(nb) for nb in sorted({c[2] for c in cases})}
        every = [(name, fn) for name, fn, _b in cases] + [(("floor", nb), fl)
                                                          for nb, fl in floors.items()]
        inner = {}
        for name, fn in every:  # warm up, and pick the calls per timing
            fn()
            inner[name] = 10 if timed(fn, 1) < 20 else 1
        best = {}
        for _ in range(args.reps):  # interleaved rounds
            for name, fn in every:
                if inner[name] > 1:
                    fn()
                best[name] = min(best.get(name, 1e30), timed(fn, inner[name]))
        return ({name: best[name] for name, _f, _b in cases},
                {nb: best[("floor", nb)] for nb in floors})

    kinds = ["one segment", "length 1", "uniform 1..64", "fixed 256", "uniform 1..4096",
             "power law", "64 features"]
    x = torch.randn(n, generator=gen).to(dev)
    for kind in kinds:
        if kind == "64 features":
            D = 64
            xk = x[: (n // (4 * D)) * 4 * D].view(-1, D)
            ls = lengths("fixed 4", xk.shape[0], gen)
        else:
            D = 1
            xk = x
            ls = lengths(kind, n, gen)
        rows_k = xk.shape[0]
        ne = xk.numel()
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), ls.cumsum(0)]).to(dev)
        reset = torch.zeros(rows_k, dtype=torch.bool, device=dev)
        reset[offsets[:-1]] = True
        rk = reset if D == 1 else reset.view(-1, 1)
        reset_bytes = ne * 8 + rows_k  # values read and written, the mask read
        offs_bytes = ne * 8 + offsets.numel() * 8  # values read and written, the offsets read
        cases = [
            ("cumsum reset=", lambda: ops.cumsum(xk, 0, reset=rk), reset_bytes),
            ("segment_cumsum", lambda: ops.segment_cumsum(xk, offsets), offs_bytes),
        ]
        if cub_cumsum is not None and D == 1:
            cases.append(("cub DeviceSegmentedScan", lambda: cub_cumsum(xk, offsets),
                          offs_bytes))
        if not args.no_torch_way:
            cases.append(("torch way", lambda: torch_way(xk, reset), reset_bytes))
        cases.append(("cumsum, no segments", lambda: ops.cumsum(xk, 0), ne * 8))
        best, floors = run_rounds(cases)
        ref = ref64(xk, offsets).to(dev)
        scale = ref64(xk.abs(), offsets).clamp_min(1e-30).to(dev)
        outs = {name: fn() for name, fn, _b in cases if "no segments" not in name}
        errs = {name: rel_err(out, ref, scale) for name, out in outs.items()}
        vs = {}
        if "cub DeviceSegmentedScan" in outs:
            c, s_ = outs["cub DeviceSegmentedScan"], outs["segment_cumsum"]
            vs = {"bitwise": bool(torch.equal(c, s_)),
                  "max_rel_diff": float(((c.double() - s_.double()).abs() / scale).max())}
            if not vs["max_rel_diff"] < 1e-5:
                print(f"WARNING {kind}: CUB and segment_cumsum differ: {vs}", file=sys.stderr)
        del ref, scale, outs
        for name, _fn, nb in cases:
            rows.append({"segments": kind, "B": int(ls.numel()), "case": name,
                         "ms": best[name], "floor_ms": floors[nb], "floor_bytes": nb,
                         "share": floors[nb] / best[name], "err": errs.get(name),
                         "vs_scanops": vs if name.startswith("cub") else None})
        del offsets, reset, rk

    def other_ops():
        # other ops, one class, and a (B, L, D) per-token reset broadcast over the features
        ls = lengths("uniform 1..4096", n, gen)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), ls.cumsum(0)]).to(dev)
        reset = torch.zeros(n, dtype=torch.bool, device=dev)
        reset[offsets[:-1]] = True
        a = torch.rand(n, generator=gen).to(dev)
        more = [
            ("linear_recurrence reset=", lambda: ops.linear_recurrence(a, x, 0, reset=reset), n * 13),
            ("linear_recurrence reverse reset=",
             lambda: ops.linear_recurrence(a, x, 0, reverse=True, reset=reset), n * 13),
            ("cummax reset=", lambda: ops.cummax(x, 0, reset=reset), n * 17),
            ("logcumsumexp reset=", lambda: ops.logcumsumexp(x, 0, reset=reset), n * 9),
            ("cumsum exclusive reverse reset=",
             lambda: ops.cumsum(x, 0, exclusive=True, reverse=True, reset=reset), n * 9),
        ]
        B, D = 8, 64
        L = n // (B * D)
        x3 = x[: B * L * D].view(B, L, D)
        a3 = a[: B * L * D].view(B, L, D)
        r3 = (torch.rand(B, L, 1, generator=gen) < 1 / 512).to(dev)
        more += [("linear_recurrence (8, L, 64) dim 1, reset (8, L, 1)",
                  lambda: ops.linear_recurrence(a3, x3, 1, reset=r3), B * L * D * 12 + B * L),
                 ("cumsum (8, L, 64) dim 1, reset (8, L, 1)",
                  lambda: ops.cumsum(x3, 1, reset=r3), B * L * D * 8 + B * L)]
        xs = x[: (n // 4096) * 4096].view(-1, 4096)
        rs = (torch.rand(xs.shape, generator=gen) < 1 / 64).to(dev)
        more += [("cumsum (N/4096, 4096) rows, dense reset", lambda: ops.cumsum(xs, 1, reset=rs),
                  xs.numel() * 9)]
        xc = x[: (n // 32) * 32].view(-1, 32)
        rc = (torch.rand(xc.shape, generator=gen) < 1 / 64).to(dev)
        more += [("cumsum (N/32, 32) dim 0, dense reset", lambda: ops.cumsum(xc, 0, reset=rc),
                  xc.numel() * 9)]
        for name, fn, nbytes in more:
            fl = floor_fn(nbytes)
            best = {}
            for _ in range(args.reps):
                fn()
                best["op"] = min(best.get("op", 1e30), timed(fn))
                fl()
                best["floor"] = min(best.get("floor", 1e30), timed(fl))
            rows.append({"segments": "uniform 1..4096" if "(" not in name else "per-token",
                         "B": None, "case": name, "ms": best["op"], "floor_ms": best["floor"],
                         "share": best["floor"] / best["op"], "err": None})

    if not args.classes_only:
        other_ops()

    # A byte count's floor is the fastest of its timings in every class (the reset rows of
    # the 1-D classes share one): one slow floor round (a page-fault burst) cannot lift a share.
    fastest = {}
    for r in rows:
        if r.get("floor_bytes") is not None:
            fastest[r["floor_bytes"]] = min(fastest.get(r["floor_bytes"], 1e30), r["floor_ms"])
    for r in rows:
        if r.get("floor_bytes") is not None:
            r["floor_ms"] = fastest[r["floor_bytes"]]
            r["share"] = r["floor_ms"] / r["ms"]

    dev_name = torch.cuda.get_device_name(0) if dev == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    head = f"device: {dev_name}; float32, {n} elements; best of {args.reps} interleaved rounds"
    if cub_version is not None:
        head += f"; CUB {cub_version}"
    lines = [head, "", "| segments | B | case | ms | floor ms | share of floor | max rel err "
             "| vs scanops |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        err = "" if r["err"] is None else f"{r['err']:.1e}"
        vs = r.get("vs_scanops")
        vs = "" if not vs else (f"{vs['max_rel_diff']:.1e}"
                                + (", bitwise equal" if vs["bitwise"] else ", not bitwise"))
        lines.append(f"| {r['segments']} | {r['B'] or ''} | {r['case']} | {r['ms']:.3f} | "
                     f"{r['floor_ms']:.3f} | {r['share']:.2f} | {err} | {vs} |")
    # per class: the shares side by side, and the composition's time over scanops'
    by = {}
    for r in rows:
        if r["B"] is not None:
            by.setdefault(r["segments"], {})[r["case"]] = r
    names = [("cumsum reset=", "reset="), ("segment_cumsum", "segment_cumsum"),
             ("cub DeviceSegmentedScan", "CUB"), ("torch way", "torch way")]
    lines += ["", "share of floor per class; `torch / scanops`: the torch way's time over the "
              "faster scanops form's", "",
              "| segments | B | " + " | ".join(s for _c, s in names) + " | torch / scanops |",
              "|---|---|" + "---|" * (len(names) + 1)]
    for kind, cs in by.items():
        cells = [f"{cs[c]['share']:.2f}" if c in cs else "n/a" for c, _s in names]
        fast = min(cs[c]["ms"] for c in ("cumsum reset=", "segment_cumsum"))
        B = next(iter(cs.values()))["B"]
        ratio = f"{cs['torch way']['ms'] / fast:.0f}x" if "torch way" in cs else "n/a"
        lines.append(f"| {kind} | {B} | " + " | ".join(cells) + f" | {ratio} |")
    text = "\n".join(lines)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev_name, "elems": n, "cub_version": cub_version, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
