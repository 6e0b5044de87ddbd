"""Segmented scans: scanops' reset form and jagged (offsets) form against their byte floor and
the usual PyTorch way, for segment-length classes, interleaved round by round, best of `--reps`.

floor: a copy of a uint8 buffer of half the scan's bytes (read + write = the scan's bytes: the
input read, the output written, the reset mask read (1 byte an element, or one per row of
features), the offsets read). share = floor / scanops time (1.00: at the floor).
torch way (reset form, sums): cumsum of everything, minus the running sum at each segment's
start gathered back (cummax of the start positions): several passes, and it cancels
(`err` columns: max relative error against a float64 segmented reference, scaled by the
segment's running sum of |x|). `cumsum, no segments`: the unsegmented op on the same data.
The CPU floor (a fresh clone) takes 4 KiB page faults that scanops' outputs do not (huge
pages): compare CPU rows with the unsegmented op's row instead.

Usage: python bench/bench_segmented.py [--device cpu|cuda] [--elems N] [--reps R]
                                       [--threads T] [--md F] [--json F]
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
    """cumsum minus the running sum before each segment's start (1-D)."""
    n = x.shape[0]
    pos = torch.arange(n, device=x.device)
    start = torch.where(reset, pos, torch.zeros_like(pos)).cummax(0).values
    c = x.cumsum(0)
    return c - (c.gather(0, start) - x.gather(0, start))


def ref64(x, offsets):
    """Per-segment cumsum in float64: scanops' CPU back end in float64 (checked against
    Python-loop references by test/python/test_segmented.py). A global float64 cumsum minus its
    value at each start would cancel: its own error exceeds float32 rounding for small
    segments next to a large running total."""
    xd = x.double().cpu()
    o = offsets.cpu()
    reset = torch.zeros(xd.shape[0], dtype=torch.bool)
    reset[o[:-1][o[1:] > o[:-1]]] = True
    return ops.cumsum(xd, 0, reset=reset)


def rel_err(got, ref, x, offsets):
    scale = ref64(x.abs(), offsets).clamp_min(1e-30)
    return float(((got.double().cpu() - ref).abs() / scale).max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--elems", type=int, default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    n = args.elems or ((1 << 26) if dev == "cuda" else (1 << 22))
    gen = torch.Generator().manual_seed(0)
    timed = timer(dev)
    rows = []

    def floor_fn(nbytes):
        buf = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device=dev)
        return lambda: buf.clone()

    kinds = ["one segment", "length 1", "uniform 1..64", "fixed 256", "uniform 1..4096",
             "power law"]
    x = torch.randn(n, generator=gen).to(dev)
    for kind in kinds:
        ls = lengths(kind, n, gen)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), ls.cumsum(0)]).to(dev)
        reset = torch.zeros(n, dtype=torch.bool, device=dev)
        reset[offsets[:-1]] = True
        ref = ref64(x, offsets.cpu())
        cases = [
            ("cumsum reset=", lambda: ops.cumsum(x, 0, reset=reset), n * 9),
            ("segment_cumsum", lambda: ops.segment_cumsum(x, offsets), n * 9 + offsets.numel() * 8),
            ("torch way", lambda: torch_way(x, reset), None),
            ("cumsum, no segments", lambda: ops.cumsum(x, 0), n * 8),
        ]
        fl = floor_fn(n * 9)
        best = {}
        for _ in range(args.reps):  # interleaved rounds
            for name, fn, _b in cases:
                fn()
                best[name] = min(best.get(name, 1e30), timed(fn))
            fl()
            best["floor"] = min(best.get("floor", 1e30), timed(fl))
        errs = {name: rel_err(fn(), ref, x, offsets.cpu()) for name, fn, _b in cases
                if "no segments" not in name}
        for name, _fn, _b in cases:
            rows.append({"segments": kind, "B": int(ls.numel()), "case": name,
                         "ms": best[name], "floor_ms": best["floor"],
                         "share": best["floor"] / best[name], "err": errs.get(name)})
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

    dev_name = torch.cuda.get_device_name(0) if dev == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    lines = [f"device: {dev_name}; float32, {n} elements; best of {args.reps} interleaved rounds",
             "", "| segments | B | case | ms | floor ms | share of floor | max rel err |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        err = "" if r["err"] is None else f"{r['err']:.1e}"
        lines.append(f"| {r['segments']} | {r['B'] or ''} | {r['case']} | {r['ms']:.3f} | "
                     f"{r['floor_ms']:.3f} | {r['share']:.2f} | {err} |")
    text = "\n".join(lines)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev_name, "elems": n, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
