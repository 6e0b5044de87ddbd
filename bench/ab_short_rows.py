"""Old / new library, interleaved: cummax / cummin / logcumsumexp on short CPU rows, without
`initial`, with initial -inf (+inf for cummin) and with a random initial, plus rows of 8 and
(4096, 4096) as controls. Each round runs one process per library (A B A B ...); a case's time
is the best over rounds of (wall time of `calls` repeated calls) / calls, at one thread.

  python bench/ab_short_rows.py OLD.so NEW.so [--rounds 5] [--ops cummax,cummin] [--md F]
"""
import argparse
import json
import os
import subprocess
import sys
import time


def cases(ops_wanted):
    import torch
    ops = torch.ops.scanops
    g = torch.Generator().manual_seed(0)
    shapes = [((65536, 4), 20), ((1 << 20, 4), 2), ((65536, 8), 10), ((4096, 4096), 1)]
    out = []
    for op in ops_wanted:
        f = getattr(ops, op)
        for shape, calls in shapes:
            x = torch.randn(shape, generator=g)
            lines = shape[0]
            inits = [("none", None)]
            if shape[1] <= 8:
                ident = float("inf") if op == "cummin" else float("-inf")
                inits += [("identity", torch.full((lines,), ident)), ("random", torch.randn(lines, generator=g))]
            for iname, init in inits:
                kw = {} if init is None else {"initial": init}
                out.append((f"{op} {tuple(shape)} initial={iname}", calls,
                            lambda f=f, x=x, kw=kw: f(x, 1, **kw)))
    return out


def worker(ops_wanted):
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import scanops  # noqa: F401
    torch.set_num_threads(1)
    res = {}
    for name, calls, fn in cases(ops_wanted):
        fn()
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter() - t) / calls)
        res[name] = best * 1e3
    print(json.dumps(res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="*")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", default="cummax,cummin")
    ap.add_argument("--md", default=None)
    ap.add_argument("--worker", action="store_true")
    a = ap.parse_args()
    ops_wanted = a.ops.split(",")
    if a.worker:
        return worker(ops_wanted)
    best = [{} for _ in a.libs]
    for _ in range(a.rounds):
        for k, lib in enumerate(a.libs):
            env = dict(os.environ, SCANOPS_LIBRARY=lib)
            r = json.loads(subprocess.check_output([sys.executable, __file__, "--worker", "--ops", a.ops],
                                                   env=env).decode().strip().splitlines()[-1])
            for name, t in r.items():
                best[k][name] = min(best[k].get(name, float("inf")), t)
    lines = ["| case | " + " | ".join(f"{os.path.basename(lib)} ms" for lib in a.libs) +
             (" | new / old |" if len(a.libs) == 2 else " |"),
             "|---|" + "---|" * (len(a.libs) + (len(a.libs) == 2))]
    for name in best[0]:
        row = f"| {name} | " + " | ".join(f"{b[name]:.3f}" for b in best)
        lines.append(row + (f" | {best[1][name] / best[0][name]:.3f} |" if len(a.libs) == 2 else " |"))
    print("\n".join(lines))
    if a.md:
        with open(a.md, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
