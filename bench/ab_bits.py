"""Same bits? Runs a fixed set of scans (every op x exclusive x reverse x dtype x layout, CPU
thread counts 1 and 2) with the library it loads and writes one SHA-256 of every output per
case; `--compare A.json B.json` lists the cases whose outputs differ. For A/B checks of two
builds (an engine change that must not change a bit): run it once per library, then compare.

  SCANOPS_LIBRARY=old/libscanops.so python bench/ab_bits.py --device cpu --out a.json
  SCANOPS_LIBRARY=new/libscanops.so python bench/ab_bits.py --device cpu --out b.json
  python bench/ab_bits.py --compare a.json b.json

Only the calls of the schemas both builds have (no `initial`). `--reset`: every call also
with a reset mask (segmented scans; heads at ~1% of the positions, and a mask broadcast from
one flag a position along dim).
"""
import argparse
import hashlib
import itertools
import json
import zlib
import os
import sys


def run(device, out, small=False, reset=False):
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import scanops  # noqa: F401
    ops = torch.ops.scanops
    shapes = [((4097,), 0), ((3, 1000), 1), ((1000, 3), 0), ((64, 33, 17), 1), ((2, 70000), 1),
              ((70000, 5), 0), ((1 << 20,), 0), ((16, 4096), 1), ((4096, 64), 0), ((8, 2000, 8), 1)]
    if small:  # the kernel families in a minute: fewer dtypes and no large shapes
        shapes = [s for s in shapes if s[0] not in ((2, 70000), (70000, 5), (1 << 20,))]
        shapes += [((1 << 18,), 0), ((4, 1 << 16), 1)]
    elif device == "cuda":
        shapes += [((1 << 22,), 0), ((1 << 14, 1024), 1), ((1 << 12, 4096), 0), ((2, 1 << 21), 1),
                   ((1 << 20, 3), 0), ((1 << 16, 32), 1)]
    dtypes = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
              "float16": torch.float16, "complex64": torch.complex64, "int32": torch.int32,
              "uint8": torch.uint8}
    if small:
        dtypes = {k: dtypes[k] for k in ("float32", "bfloat16", "int32")}
    res = {}
    threads = [1, 2] if device == "cpu" else [0]
    for (shape, dim), (dn, dt), (ex, rv) in itertools.product(
            shapes, dtypes.items(), itertools.product([False, True], [False, True])):
        g = torch.Generator().manual_seed(zlib.crc32(repr((shape, dn, ex, rv)).encode()))
        if dt.is_floating_point or dt.is_complex:
            x = torch.randn(shape, generator=g, dtype=torch.float64).to(dt)
        else:
            x = torch.randint(0, 7, shape, generator=g).to(dt)
        m = torch.rand(shape, generator=g) < 0.5
        r = torch.rand(shape, generator=g) < 0.01
        rshape = [1] * len(shape)
        rshape[dim] = shape[dim]
        rb = torch.rand(rshape, generator=g) < 0.003
        a = (torch.rand(shape, generator=g, dtype=torch.float64) * 0.5 + 0.5).to(dt)
        p = (torch.rand(shape, generator=g, dtype=torch.float64) * 0.02 + 0.99).to(dt)
        x, m, a, p, r, rb = (t.to(device) for t in (x, m, a, p, r, rb))
        kw = dict(exclusive=ex, reverse=rv)
        calls = {"cumsum": lambda **k: ops.cumsum(x, dim, **kw, **k),
                 "masked_cumsum": lambda **k: ops.masked_cumsum(x, m, dim, **kw, **k),
                 "cumprod": lambda **k: ops.cumprod(p, dim, **kw, **k)}
        if dt.is_floating_point or dt.is_complex:
            calls["linear_recurrence"] = lambda **k: ops.linear_recurrence(a, x, dim, **kw, **k)
            calls["logcumsumexp"] = lambda **k: ops.logcumsumexp(x, dim, **kw, **k)
        if not dt.is_complex:
            calls["cummax"] = lambda **k: ops.cummax(x, dim, **kw, **k)
            calls["cummin"] = lambda **k: ops.cummin(x, dim, **kw, **k)
        if reset:
            for name, fn in list(calls.items()):
                for rn, rs in (("reset", r), ("reset-bcast", rb)):
                    calls[f"{name} {rn}"] = (lambda fn=fn, rs=rs: fn(reset=rs))
        for name, fn in calls.items():
            for th in threads:
                if th:
                    torch.set_num_threads(th)
                y = fn()
                ys = y if isinstance(y, tuple) else (y,)
                h = hashlib.sha256()
                for t in ys:
                    h.update(t.contiguous().cpu().view(torch.uint8).numpy().tobytes())
                res[f"{name} {shape} dim {dim} {dn} excl={ex} rev={rv} threads={th}"] = h.hexdigest()
    with open(out, "w") as f:
        json.dump(dict(device=device, torch=torch.__version__, cases=res), f, indent=0)
    print(f"{len(res)} cases written to {out}")


def compare(a, b):
    A, B = json.load(open(a))["cases"], json.load(open(b))["cases"]
    common = sorted(set(A) & set(B))
    diff = [k for k in common if A[k] != B[k]]
    for k in diff[:50]:
        print("DIFFERENT:", k)
    print(f"{len(common)} cases compared, {len(diff)} differ, {len(set(A) ^ set(B))} in one only")
    return 1 if diff else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="bits.json")
    ap.add_argument("--compare", nargs=2)
    ap.add_argument("--small", action="store_true", help="fewer dtypes, no large shapes")
    ap.add_argument("--reset", action="store_true", help="every call also segmented (reset=)")
    args = ap.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare))
    run(args.device, args.out, args.small, args.reset)
