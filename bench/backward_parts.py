"""The parts of cumprod's and linear_recurrence's fused backward on CUDA, timed one by one.

Each backward scan of (16384, 32768) float32 rows, as a multiple of a device copy of one such
tensor (x.clone(): 2 tensors' traffic), best of 10 (CUDA events). The minimal multiples are
half the tensors each reads and writes: a plain linear recurrence 1.5, with a `mul` 2.0,
_linear_recurrence_backward 2.5. Shows what the epilogue's operands and the shifted store
(shift_mul) cost.

Usage: python bench/backward_parts.py   (with the library loadable: SCANOPS_LIBRARY or
build/libscanops.so, and PYTHONPATH=python)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401
from bench_gpu import time_once_ms  # noqa: E402  (one CUDA-event timing helper)

ops = torch.ops.scanops
R, N = 16384, 32768


def best_ms(fn, k=10):
    fn()
    torch.cuda.synchronize()
    return min(time_once_ms(fn, 1) for _ in range(k))


def main():
    x = 0.5 + torch.rand(R, N, device="cuda")
    g = torch.randn(R, N, device="cuda")
    y = ops.cumprod(x, 1)
    fused = ops._linear_recurrence_fused
    kw = dict(exclusive=True, reverse=True, scale_x=True)
    cases = {
        "copy (2 arrays)": lambda: x.clone(),
        "linrec(x, g) plain (3 arrays)":
            lambda: ops.linear_recurrence(x, g, 1, exclusive=True, reverse=True),
        "fused scale, no epilogue (3)": lambda: fused(x, g, 1, **kw, add=None, mul=None),
        "fused scale + add g (3 + g again)": lambda: fused(x, g, 1, **kw, add=g, mul=None),
        "fused scale + mul y (4)": lambda: fused(x, g, 1, **kw, add=None, mul=y),
        "fused scale + add g + mul y (4 + g)": lambda: fused(x, g, 1, **kw, add=g, mul=y),
        "fused scale + add g + shifted y (cumprod bwd)":
            lambda: fused(x, g, 1, **kw, add=g, mul=y, shift_mul=True),
        "_linear_recurrence_backward (5)":
            lambda: ops._linear_recurrence_backward(x, g, y, 1, reverse=False),
    }
    copy = best_ms(cases["copy (2 arrays)"])
    for name, fn in cases.items():
        ms = best_ms(fn)
        print(f"{name:50s} {ms:7.3f} ms  = {ms / copy:5.2f} copies")


if __name__ == "__main__":
    main()
