"""`initial=` against no initial: every op on every shape class, the same op timed with and
without a per-line initial value, interleaved round by round, best of `--reps`.

ratio = time with initial / time without (1.00: free; the target is <= 1.03): on the GPU the
best of each over the rounds; on the CPU the median over the rounds of each round's ratio
(the two calls of a round, in alternating order, see the same machine state). Both calls
write fresh outputs the same way; the initial values are one per line (x's shape without the
scan dim), of the result dtype.

Usage: python bench/bench_initial.py [--device cpu|cuda] [--threads 1,2,16] [--elems N]
                                     [--reps R] [--ops A,B] [--json F] [--md F]
Loads the library like the tests: SCANOPS_LIBRARY, else build/libscanops.so (python/scanops).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401

ops = torch.ops.scanops


def shapes(n, device):
    rows = 1 << 12
    s = [("rows", (rows, n // rows), 1), ("dim 0", (rows, n // rows), 0), ("1-D", (n,), 0),
         ("few long rows", (8, n // 8), 1), ("narrow columns", (n // 8, 8), 0),
         ("3-d middle", (16, n // (16 * 64), 64), 1)]
    s.append(("short rows", (n // 64, 64), 1))
    if device == "cpu":  # (the CPU's one-vector rows: rows4_impl)
        s.append(("rows of 4", (n // 4, 4), 1))
    return s


def cases():
    return [
        ("cumsum", lambda t, d, **k: ops.cumsum(t["x"], d, **k)),
        ("cumsum exclusive reverse", lambda t, d, **k: ops.cumsum(t["x"], d, exclusive=True, reverse=True, **k)),
        ("masked_cumsum", lambda t, d, **k: ops.masked_cumsum(t["x"], t["m"], d, **k)),
        ("cumprod", lambda t, d, **k: ops.cumprod(t["p"], d, **k)),
        ("linear_recurrence", lambda t, d, **k: ops.linear_recurrence(t["a"], t["x"], d, **k)),
        ("linear_recurrence reverse", lambda t, d, **k: ops.linear_recurrence(t["a"], t["x"], d, reverse=True, **k)),
        ("logcumsumexp", lambda t, d, **k: ops.logcumsumexp(t["x"], d, **k)),
        ("cummax", lambda t, d, **k: ops.cummax(t["x"], d, **k)),
        ("cummin exclusive", lambda t, d, **k: ops.cummin(t["x"], d, exclusive=True, **k)),
    ]


def timer(device):
    if device == "cuda":
        def timed(fn, reps):
            # `reps` calls between two events, per call: the host's launch work overlaps the
            # GPU's (one call a time, the host time of the dispatcher and the argument checks,
            # ~20 us, would count in the time of a 0.2 ms scan)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / reps
    else:
        def timed(fn, reps):
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                best = min(best, (time.perf_counter() - t0) * 1e3)
            return best
    return timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--elems", type=int, default=1 << 24)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ops", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    dev = args.device
    timed = timer(dev)
    threads = [int(t) for t in args.threads.split(",")] if dev == "cpu" else [0]
    gen = torch.Generator().manual_seed(0)
    rows = []
    name_dev = torch.cuda.get_device_name() if dev == "cuda" else f"CPU, {os.cpu_count()} logical CPUs"
    print(f"device: {name_dev}, torch {torch.__version__}, {args.elems} float32 elements per tensor")
    hdr = ("| workload | threads | without ms | with initial ms | ratio of bests | median of round ratios |\n"
           "|---|---|---|---|---|---|")
    print(hdr, flush=True)
    want = args.ops.split(",") if args.ops else None
    for sname, shape, dim in shapes(args.elems, dev):
        t = {"x": torch.randn(shape, generator=gen).to(dev),
             "p": (torch.rand(shape, generator=gen) * 0.02 + 0.99).to(dev),
             "m": (torch.rand(shape, generator=gen) < 0.5).to(dev),
             "a": (torch.rand(shape, generator=gen) * 0.5 + 0.5).to(dev)}
        line = [s for k, s in enumerate(shape) if k != dim]
        init = {"x": torch.randn(line, generator=gen).to(dev),
                "p": (torch.rand(line, generator=gen) * 0.02 + 0.99).to(dev)}
        for name, fn in cases():
            if want and name not in want:
                continue
            c = init["p"] if name == "cumprod" else init["x"]
            for th in threads:
                if th:
                    torch.set_num_threads(th)
                f0 = lambda: fn(t, dim)  # noqa: E731
                f1 = lambda: fn(t, dim, initial=c)  # noqa: E731
                f0(), f1()
                per = 10 if dev == "cuda" else 1
                best0 = best1 = float("inf")
                pairs = []
                for k in range(args.reps):  # interleaved rounds, the order alternating
                    if k % 2 == 0:
                        t0 = timed(f0, per)
                        t1 = timed(f1, per)
                    else:
                        t1 = timed(f1, per)
                        t0 = timed(f0, per)
                    best0, best1 = min(best0, t0), min(best1, t1)
                    pairs.append(t1 / t0)
                paired = statistics.median(pairs)
                r = dict(workload=f"{name} {sname} {tuple(shape)}", threads=th, without_ms=best0,
                         with_ms=best1, best_ratio=best1 / best0, paired_median=paired)
                # The figure judged: on the GPU the ratio of the bests; on the CPU the median
                # of the rounds' ratios (a round's two calls see the same machine state: the
                # VMs' CPU speed drifts between rounds by more than 3%)
                r["ratio"] = r["best_ratio"] if dev == "cuda" else paired
                rows.append(r)
                print(f"| {r['workload']} | {th or '-'} | {best0:.3f} | {best1:.3f} | "
                      f"{r['best_ratio']:.3f} | {paired:.3f} |", flush=True)
        del t
    ratios = sorted(r["ratio"] for r in rows)
    within = sum(x <= 1.03 for x in ratios)
    print(f"\nrows: {len(rows)}, within 3%: {within}, ratio median {ratios[len(ratios) // 2]:.3f}, "
          f"max {ratios[-1]:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=name_dev, torch=torch.__version__, elems=args.elems,
                           reps=args.reps, rows=rows), f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(f"device: {name_dev}, torch {torch.__version__}, {args.elems} elements, best of "
                    f"{args.reps} interleaved rounds\n\n{hdr}\n")
            for r in rows:
                f.write(f"| {r['workload']} | {r['threads'] or '-'} | {r['without_ms']:.3f} | "
                        f"{r['with_ms']:.3f} | {r['best_ratio']:.3f} | {r['paired_median']:.3f} |\n")


if __name__ == "__main__":
    main()
