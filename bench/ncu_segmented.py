# A target for ncu: the segmented flat kernel (float32 cumsum reset=, uniform 1..4096 segments)
# and the packed row kernel (rows of 64), each launched 4 times, 2^26 elements. On the GPU machine:
#   ncu -k regex:flat_kernel -s 2 -c 1 --section SourceCounters --section InstructionStats \
#       -o prof python3 bench/ncu_segmented.py
#   ncu -i prof.ncu-rep --page source --csv --print-source sass   (counts per SASS instruction)
import os
import sys

import torch
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa
ops = torch.ops.scanops
n = 1 << 26
g = torch.Generator().manual_seed(0)
x = torch.randn(n, device="cuda")
ls = torch.randint(1, 4097, (n // 1024,), generator=g)
st = torch.cumsum(ls, 0) - ls
st = st[st < n]
r = torch.zeros(n, dtype=torch.bool)
r[st] = True
r = r.cuda()
for _ in range(4):
    ops.cumsum(x, 0, reset=r)
for _ in range(4):
    ops.cumsum(x.view(-1, 64), 1)
torch.cuda.synchronize()
