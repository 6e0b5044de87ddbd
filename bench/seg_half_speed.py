"""Timings of CPU segmented scans on float16 / bfloat16 / float32 (issue #34), best of 5, ms.

    SCANOPS_LIBRARY=<lib> python bench/seg_half_speed.py <tag> <threads>

Run the libraries to compare alternately (A, B, A, B) on an idle machine; 2^22 elements,
resets at 1/64 of the positions (rows: a flag an element; columns: a flag a row).
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402

tag, nt = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(nt)
N = 1 << 22
g = torch.Generator().manual_seed(0)


def best(f, reps=5):
    f()
    b = 1e9
    for _ in range(reps):
        t = time.perf_counter()
        f()
        b = min(b, time.perf_counter() - t)
    return b * 1e3


x1 = torch.randn(N, generator=g)
r1 = torch.rand(N, generator=g) < 1 / 64
a1 = 0.9 + 0.1 * torch.rand(N, generator=g)
x2 = torch.randn(N // 64, 64, generator=g)
r2 = (torch.rand(N // 64, generator=g) < 1 / 64)[:, None]
cuts = torch.sort(torch.randint(0, N // 64 + 1, (N // 64 // 64,), generator=g)).values
offsets = torch.cat([torch.tensor([0]), cuts, torch.tensor([N // 64])])
for dt in (torch.float16, torch.bfloat16, torch.float32):
    x, a, xc = x1.to(dt), a1.to(dt), x2.to(dt)
    cases = [
        ("cumsum reset rows (N,)", lambda: scanops.cumsum(x, 0, reset=r1)),
        ("cumsum reset cols (N/64, 64) dim 0", lambda: scanops.cumsum(xc, 0, reset=r2)),
        ("segment_cumsum (N/64, 64)", lambda: scanops.segment_cumsum(xc, offsets)),
        ("cummax reset rows (N,)", lambda: scanops.cummax(x, 0, reset=r1)),
        ("linear_recurrence reset rows (N,)", lambda: scanops.linear_recurrence(a, x, 0, reset=r1)),
    ]
    if dt != torch.float32:
        cases.append(("cumsum rows (N,) no reset", lambda: scanops.cumsum(x, 0)))
    for name, f in cases:
        print(f"{tag}\tt{nt}\t{str(dt)[6:]}\t{name}\t{best(f):.2f}", flush=True)
xi = torch.randint(-1000, 1000, (N // 64, 64), generator=g)
for name, f in (("cumsum reset cols (N/64, 64) dim 0", lambda: scanops.cumsum(xi, 0, reset=r2)),
                ("segment_cumsum (N/64, 64)", lambda: scanops.segment_cumsum(xi, offsets))):
    print(f"{tag}\tt{nt}\tint64\t{name}\t{best(f):.2f}", flush=True)
