"""Same speed? Times a fixed set of scans (no `initial`, so any two builds run it) with the
library it loads, best of --reps, at each thread count, and writes the times as JSON;
--compare A.json B.json ... prints each case's best time per file and B/A. For A/B checks of
two builds: run it alternately with each library (A B A B ...) and compare the files.

  SCANOPS_LIBRARY=old/libscanops.so python bench/ab_speed.py --out a1.json
  SCANOPS_LIBRARY=new/libscanops.so python bench/ab_speed.py --out b1.json
  python bench/ab_speed.py --compare a1.json b1.json a2.json b2.json
"""
import argparse
import json
import os
import sys
import time


def run(out, threads, elems, reps, device):
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import scanops  # noqa: F401
    ops = torch.ops.scanops
    n = elems
    g = torch.Generator().manual_seed(0)
    cases = []
    for sname, shape, dim in [("rows", (4096, n // 4096), 1), ("dim 0", (4096, n // 4096), 0),
                              ("1-D", (n,), 0), ("(2^k, 4) rows", (n // 4, 4), 1)]:
        x = torch.randn(shape, generator=g).to(device)
        a = (torch.rand(shape, generator=g) * 0.5 + 0.5).to(device)
        m = (torch.rand(shape, generator=g) < 0.5).to(device)
        p = (torch.rand(shape, generator=g) * 0.02 + 0.99).to(device)
        cases += [(f"cumsum {sname}", lambda x=x, d=dim: ops.cumsum(x, d)),
                  (f"cumsum exclusive reverse {sname}", lambda x=x, d=dim: ops.cumsum(x, d, exclusive=True, reverse=True)),
                  (f"masked_cumsum {sname}", lambda x=x, m=m, d=dim: ops.masked_cumsum(x, m, d)),
                  (f"cumprod {sname}", lambda p=p, d=dim: ops.cumprod(p, d)),
                  (f"linear_recurrence {sname}", lambda a=a, x=x, d=dim: ops.linear_recurrence(a, x, d)),
                  (f"logcumsumexp {sname}", lambda x=x, d=dim: ops.logcumsumexp(x, d)),
                  (f"cummax {sname}", lambda x=x, d=dim: ops.cummax(x, d))]
    res = {}
    for th in threads:
        torch.set_num_threads(th)
        for name, fn in cases:
            fn()
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                if device == "cuda":
                    torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t0)
            res[f"{name} threads={th}"] = best * 1e3
    json.dump(res, open(out, "w"), indent=0)
    print(f"{len(res)} cases written to {out}")


def compare(files):
    data = [json.load(open(f)) for f in files]
    keys = list(data[0])
    print("| case | " + " | ".join(os.path.basename(f) for f in files) + " | B/A (best of each) |")
    print("|---" * (len(files) + 2) + "|")
    for k in keys:
        v = [d[k] for d in data]
        a, b = min(v[0::2]), min(v[1::2])
        print(f"| {k} | " + " | ".join(f"{t:.2f}" for t in v) + f" | {b / a:.3f} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="speed.json")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--elems", type=int, default=1 << 24)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compare", nargs="+")
    a = ap.parse_args()
    if a.compare:
        compare(a.compare)
    else:
        run(a.out, [int(t) for t in a.threads.split(",")], a.elems, a.reps, a.device)
