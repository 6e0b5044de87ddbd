"""Small CUDA cases covering every path of the segmented scans' kernels (ops/cuda/segmented.cuh)
for compute-sanitizer (memcheck, racecheck, synccheck, initcheck): rows a warp per whole rows
and rows cut into chunks (three passes, carries by a thread per line and by a block per line),
columns whole, cut into chunks and on the vector column tiles, a middle dim, every combine
kind, the four flag combinations, with and without initial, dense and broadcast resets. Each
result is compared with the CPU back end's (the same walk; floating results to rounding, the
rest exactly), so the run fails loudly too: it prints `mismatches: N`.

Usage: compute-sanitizer --tool memcheck python test/sanitize_segmented_cases.py
       SCANOPS_SANITIZE_SUBSET=1 (racecheck etc.): two of the four flag combinations, the
       dense reset only.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401

ops = torch.ops.scanops
subset = os.environ.get("SCANOPS_SANITIZE_SUBSET") == "1"
g = torch.Generator().manual_seed(0)
# (shape, dim): rows whole (>= 16 rows per SM on an H100 / H200), rows cut (few long rows,
# 1-D long: many chunks, a block per line for the carries), columns whole (many lines or
# short), columns cut (a thread per line for the carries, and a block per line), a middle
# dim; the sums of (5000, 8), (2100, 64) and (4, 3000, 16) take the vector column tiles
# (dense resets, a flag a row, a flag a row broadcast over the outer indices, one flag a
# token of (4, 3000, 16)), the other ops there the columns cut
shapes = [((2200, 40), 1), ((3, 70001), 1), ((300001,), 0), ((40, 70000), 0), ((300, 3), 0),
          ((5000, 8), 0), ((2100, 64), 0), ((4, 3000, 16), 1), ((7,), 0)]
flags = [(False, False), (True, True)] if subset else [(e, r) for e in (False, True) for r in (False, True)]
bad = 0


def same(got, want, what):
    global bad
    got = got.cpu()
    if got.is_floating_point() or got.is_complex():
        ok = torch.allclose(got.to(want.dtype), want, rtol=1e-4, atol=1e-4, equal_nan=True)
    else:
        ok = torch.equal(got, want)
    if not ok:
        bad += 1
        print("MISMATCH", what)


for shape, dim in shapes:
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    a = torch.rand(shape, generator=g, dtype=torch.float64)
    m = torch.rand(shape, generator=g) > 0.3
    dense = torch.rand(shape, generator=g) < 0.01
    bshape = [1] * len(shape)
    bshape[dim] = shape[dim]
    broad = torch.rand(bshape, generator=g) < 0.02
    line = list(shape)
    del line[dim]
    init = torch.randn(line, generator=g, dtype=torch.float64)
    resets = [dense] if subset else [dense, broad]
    if len(shape) == 3 and not subset:  # one flag a token under several outer indices
        resets.append(torch.rand(shape[:2] + (1,), generator=g) < 0.02)
    for reset in resets:
        for e, r in flags:
            for with_init in (False, True):
                kw = dict(exclusive=e, reverse=r, reset=reset)
                kc = dict(kw, reset=reset.cuda())
                it = init if with_init else None
                name = f"{shape} dim {dim} excl {e} rev {r} init {with_init} reset {tuple(reset.shape)}"
                cases = [
                    ("cumsum f64", lambda k, d, i: ops.cumsum(x.to(d), dim, initial=i, **k), torch.float64),
                    ("cumsum f32", lambda k, d, i: ops.cumsum(x.float().to(d), dim,
                                                              initial=None if i is None else i.float(), **k), None),
                    ("masked_cumsum", lambda k, d, i: ops.masked_cumsum(x.to(d), m.to(d), dim, initial=i, **k), None),
                    ("cumprod f32", lambda k, d, i: ops.cumprod((1 + a / 8).float().to(d), dim,
                                                                initial=None if i is None else i.float(), **k), None),
                    ("cumsum int8", lambda k, d, i: ops.cumsum((x * 10).to(torch.int8).to(d), dim,
                                                               initial=None if i is None else (i * 10).long(), **k), None),
                    ("linear_recurrence", lambda k, d, i: ops.linear_recurrence(a.to(d), x.to(d), dim, initial=i, **k), None),
                    ("logcumsumexp c64", lambda k, d, i: ops.logcumsumexp(x.to(torch.complex64).to(d), dim,
                                                                         initial=None if i is None else i.to(torch.complex64), **k), None),
                ]
                for cname, fn, _ in cases:
                    want = fn(kw, "cpu", it)
                    got = fn(kc, "cuda", None if it is None else it.cuda())
                    same(got, want, f"{cname} {name}")
                xi = x.float()
                ii = None if it is None else it.float()
                wv, wi = ops.cummax(xi, dim, initial=ii, **kw)
                gv, gi = ops.cummax(xi.cuda(), dim, initial=None if ii is None else ii.cuda(), **kc)
                same(gv, wv, f"cummax values {name}")
                same(gi, wi, f"cummax indices {name}")
# the jagged form: the offsets' pass (jagged_offsets.cu: the mask, or the int64 copy with
# initial) over long and empty segments, int32 and int64 offsets, and bad offsets of
# overlapping long segments (an error)
lens = torch.tensor([3, 2049, (1 << 20) + 7, 0, 5, 2048, 1])
offs = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)])
# (float64: a float32 running sum over 2^20 rows is off by float32 rounding of ~1e3 against
# the CPU's float64 accumulation, beyond `same`'s absolute tolerance)
xj = torch.randn(int(offs[-1]), generator=g, dtype=torch.float64)
init = torch.randn(len(lens), generator=g, dtype=torch.float64)
for dt in (torch.long, torch.int32):
    for it in (None, init):
        want = ops.segment_cumsum(xj, offs.to(dt), initial=it)
        got = ops.segment_cumsum(xj.cuda(), offs.to(dt).cuda(),
                                 initial=None if it is None else it.cuda())
        same(got, want, f"segment_cumsum {dt} initial {it is not None}")
overlap = torch.tensor([0, 3 << 20] * 20 + [3 << 20]).cuda()
try:
    ops.segment_cumsum(torch.zeros(3 << 20, device="cuda"), overlap)
    same(torch.zeros(1), torch.ones(1), "overlapping bad offsets accepted")
except RuntimeError as err:
    if "non-decreasing" not in str(err):
        same(torch.zeros(1), torch.ones(1), f"overlapping bad offsets: {err}")
torch.cuda.synchronize()
print(f"segmented cases: {len(shapes)} shapes and the jagged form; mismatches: {bad}")
sys.exit(1 if bad else 0)
