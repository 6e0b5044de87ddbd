"""CPU benchmark: scanops ops against clone() of the same bytes and torch eager.

"share of clone" = time of x.clone() scaled to the op's minimal bytes / op time. Uses all
torch threads (torch.get_num_threads()). Usage: python bench/bench_cpu.py [--size N]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401

ops = torch.ops.scanops


def bench(fn, reps=7):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096, help="side of the square workload")
    args = ap.parse_args()
    s = args.size
    cases = [
        ("cumsum dim 1", (s, s), lambda x: ops.cumsum(x, 1), lambda x: torch.cumsum(x, 1)),
        ("cumsum dim 0", (s, s), lambda x: ops.cumsum(x, 0), lambda x: torch.cumsum(x, 0)),
        ("cumprod dim 1", (s, s), lambda x: ops.cumprod(x, 1), lambda x: torch.cumprod(x, 1)),
        ("reverse cumsum", (s, s), lambda x: ops.cumsum(x, 1, reverse=True),
         lambda x: torch.cumsum(x.flip(1), 1).flip(1)),
        ("(s*s/4, 4) dim 1", (s * s // 4, 4), lambda x: ops.cumsum(x, 1), lambda x: torch.cumsum(x, 1)),
        ("1-D s*s", (s * s,), lambda x: ops.cumsum(x, 0), lambda x: torch.cumsum(x, 0)),
    ]
    print(f"threads: {torch.get_num_threads()}, torch {torch.__version__}")
    print("| workload | clone ms | scanops ms | scanops % of clone | eager ms | eager % |")
    print("|---|---|---|---|---|---|")
    for name, shape, sc, tf in cases:
        x = torch.rand(shape) * 0.02 + 0.99
        t_clone = bench(lambda: x.clone())
        t_sc = bench(lambda: sc(x))
        t_tf = bench(lambda: tf(x))
        print(f"| {name} | {t_clone:.2f} | {t_sc:.2f} | {100 * t_clone / t_sc:.0f}% | "
              f"{t_tf:.2f} | {100 * t_clone / t_tf:.0f}% |")


if __name__ == "__main__":
    main()
