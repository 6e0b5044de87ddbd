"""Where the jagged form's time goes on CUDA: segment_cumsum against its parts.

    SCANOPS_LIBRARY=<lib> PYTHONPATH=python python bench/jagged_parts.py [--elems N] [--reps R]

Per segment-length class (bench_segmented.py's), float32 values of N elements, ms (CUDA
events, best of R rounds, the cases interleaved in each round):
  copy            values.clone(): the floor's copy of the values
  zeros(total)    the mask's fresh zeroed allocation alone
  _segment_heads  the check and the mask (one kernel, one read of its fault word back)
  cumsum reset=   the scan of the reset form on that mask
  segment_cumsum  the whole jagged form (_segment_heads, then the scan)
Not a test: it checks nothing but that the two forms agree.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401
from bench_segmented import lengths  # noqa: E402

ops = torch.ops.scanops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elems", type=int, default=1 << 28)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--kinds", default="one segment,length 1,uniform 1..64,fixed 256,"
                    "uniform 1..4096,power law")
    args = ap.parse_args()
    dev = "cuda"
    n = args.elems
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=gen).to(dev)
    print(f"# {torch.cuda.get_device_name()}, float32, {n} elements, best of {args.reps}")
    print("| segments | B | copy | zeros(total) | _segment_heads | cumsum reset= | segment_cumsum |"
          " jagged - reset= |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        ls = lengths(kind, n, gen)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), ls.cumsum(0)]).to(dev)
        heads = ops._segment_heads(offsets, n, "bench")
        cases = {
            "copy": lambda: x.clone(),
            "zeros": lambda: torch.zeros(n, dtype=torch.bool, device=dev),
            "heads": lambda: ops._segment_heads(offsets, n, "bench"),
            "reset": lambda: ops.cumsum(x, 0, reset=heads),
            "jagged": lambda: ops.segment_cumsum(x, offsets),
        }
        assert torch.equal(cases["reset"](), cases["jagged"]())
        best = {k: float("inf") for k in cases}
        for _ in range(args.reps):
            for k, f in cases.items():
                f()
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(3):
                    f()
                e.record()
                torch.cuda.synchronize()
                best[k] = min(best[k], s.elapsed_time(e) / 3)
        b = best
        print(f"| {kind} | {ls.numel()} | {b['copy']:.3f} | {b['zeros']:.3f} | {b['heads']:.3f} |"
              f" {b['reset']:.3f} | {b['jagged']:.3f} | {b['jagged'] - b['reset']:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()
