"""Small CUDA cases covering every kernel family, flag and op (the scan family and complex too,
the backward fusions and broadcast companions read in place), for compute-sanitizer memcheck
and racecheck (scripts/gpu_session.sh sanitize). Compares with float64 references so it fails loudly too."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401

ops = torch.ops.scanops
dev = "cuda"
shapes = [((1,), 0), ((7,), 0), ((100003,), 0), ((33, 5), 1), ((5000, 3), 1), ((3, 70001), 1),
          ((4, 1 << 18), 1), ((257, 129), 0), ((8, 300, 64), 1), ((2, 3, 1), 2), ((1 << 12, 64), 1),
          ((600, 40), 0), ((2, 700, 96), 1), ((300, 3), 0),
          ((333, 520), 0), ((5000, 8), 0), ((5, 2100, 12), 1),  # column vector tiles (wide, narrow)
          ((40, 1100), 1), ((9, 3000), 1)]  # row tiles that are not full, of whole vectors
# SCANOPS_SANITIZE_SUBSET=1 (racecheck, ~100x slower than a plain run): one shape per kernel
# family (packed rows, look-back 1-D and rows, block per row, columns: whole, warp tiles,
# three passes) and two of the four flag combinations.
subset = os.environ.get("SCANOPS_SANITIZE_SUBSET") == "1"
if subset:
    shapes = [((100003,), 0), ((33, 5), 1), ((3, 70001), 1), ((257, 129), 0), ((8, 300, 64), 1),
              ((600, 40), 0), ((300, 3), 0), ((333, 520), 0), ((5000, 8), 0), ((40, 1100), 1)]
bad = 0
for shape, dim in shapes:
    x = torch.randn(shape, device=dev, dtype=torch.float64)
    m = torch.rand(shape, device=dev) > 0.5
    a = torch.rand(shape, device=dev, dtype=torch.float64)
    for e in (False, True):
        for r in (False, True):
            if subset and e != r:
                continue
            xs = x.flip(dim) if r else x
            ref = torch.cumsum(xs, dim)
            if e:
                ref = torch.cat([torch.zeros_like(xs.narrow(dim, 0, 1)), ref.narrow(dim, 0, xs.size(dim) - 1)], dim)
            ref = ref.flip(dim) if r else ref
            got = ops.cumsum(x, dim, exclusive=e, reverse=r)
            ok = torch.allclose(got, ref, 1e-9, 1e-9)
            ops.masked_cumsum(x, m, dim, exclusive=e, reverse=r)
            ops.cumsum(x.float(), dim, exclusive=e, reverse=r)  # packed look-back status
            ops.cumprod(x.float(), dim, exclusive=e, reverse=r)
            ops.cumsum(x.to(torch.int8), dim, exclusive=e, reverse=r)
            ops.cumsum(x.to(torch.bfloat16), dim, exclusive=e, reverse=r)
            ops.linear_recurrence(a, x, dim, exclusive=e, reverse=r)
            ops.logcumsumexp(x.float(), dim, exclusive=e, reverse=r)
            ops.logcumsumexp(x.to(torch.complex64), dim, exclusive=e, reverse=r)
            ops.cumprod(x.to(torch.complex128), dim, exclusive=e, reverse=r)
            v, i = ops.cummax(x.float(), dim, exclusive=e, reverse=r)
            tv, ti = torch.cummax((x.flip(dim) if r else x).float(), dim)
            if not e:  # indices against torch's (reverse: positions in the original order)
                ti = (x.size(dim) - 1 - ti).flip(dim) if r else ti
                ok = ok and torch.equal(i, ti)
            ops.cummin(x.to(torch.int16), dim, exclusive=e, reverse=r)
            ops.cummin(x.to(torch.bfloat16), dim, exclusive=e, reverse=r)
            # the backward fusions (output epilogue, scaled input) and broadcast companions
            # read in place (a row and a column of the last two dims)
            got = ops._cumsum_fused(x, dim, exclusive=e, reverse=r, add=x, mul=m)
            ok = ok and torch.allclose(got, m * (ops.cumsum(x, dim, exclusive=e, reverse=r) + x))
            ops._linear_recurrence_fused(a, x.float().double(), dim, exclusive=e, reverse=r,
                                         scale_x=True, add=x, mul=a)
            # mul read one position on (cumprod's backward), in place by the row kernels
            xf = x.float()
            ops._linear_recurrence_fused(xf, xf, dim, exclusive=e, reverse=r, scale_x=not e,
                                         add=xf, mul=xf, shift_mul=True)
            ops._linear_recurrence_backward(xf, xf, xf, dim, reverse=r)  # (a second output)
            if x.dim() >= 2:
                for cs in (x.shape[-1:], x.shape[:-1] + (1,)):
                    mb = torch.rand(cs, device=dev) > 0.5
                    ab = torch.rand(cs, device=dev, dtype=torch.float64)
                    got = ops.masked_cumsum(x, mb, dim, exclusive=e, reverse=r)
                    want = ops.masked_cumsum(x, mb.expand(shape).contiguous(), dim, exclusive=e,
                                             reverse=r)
                    ok = ok and torch.equal(got, want)
                    got = ops.linear_recurrence(ab, x, dim, exclusive=e, reverse=r)
                    want = ops.linear_recurrence(ab.expand(shape).contiguous(), x, dim,
                                                 exclusive=e, reverse=r)
                    ok = ok and torch.equal(got, want)
            if not ok:
                bad += 1
                print("MISMATCH", shape, dim, e, r)
torch.cuda.synchronize()
print("sanitize cases done, mismatches:", bad)
sys.exit(1 if bad else 0)
