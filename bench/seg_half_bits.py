"""Bit comparison of the CPU segmented scans on float16 / bfloat16 (and int64 sums) (issue #34).

Runs a fixed list of random cases (rows and columns, per-element / broadcast / strided resets,
the offsets form, exclusive / reverse / initial, masked_cumsum, linear_recurrence, cummax /
cummin with indices, logcumsumexp, inf / -inf / NaN (payloads too) / -0.0 among the values,
lines long enough to be cut into chunks, exponents spread wider than float64's 53 bits) at 1
and 2 threads with the library named by
SCANOPS_LIBRARY, checks that the two thread counts give the same bits, and saves the outputs:

    SCANOPS_LIBRARY=build/libscanops.so python bench/seg_half_bits.py run new.pt
    SCANOPS_CPU_KERNELS=generic SCANOPS_LIBRARY=build/libscanops.so python bench/seg_half_bits.py run gen.pt
    python bench/seg_half_bits.py compare new.pt gen.pt

`compare` counts the cases whose outputs differ in any bit, and those that differ beyond the
sign of NaN outputs (see bits_nan_unsigned); logcumsumexp cases that differ beyond it are also
compared within a tolerance (the vector kernels' online form associates differently).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))


def special_values(x, g, frac):
    """Put inf / -inf / NaN (canonical and with payloads, both signs) / -0.0 at a fraction of x."""
    if frac <= 0:
        return x
    n = x.numel()
    flat = x.reshape(-1).clone()
    k = max(1, int(n * frac))
    idx = torch.randint(0, n, (k,), generator=g)
    kind = torch.randint(0, 6, (k,), generator=g)
    bits = flat.view(torch.int16)
    if x.dtype == torch.float16:
        specials = [0x7C00, 0xFC00 - 65536, 0x7E00, 0x7E35, 0xFE01 - 65536, 0x8000 - 65536]
    else:
        specials = [0x7F80, 0xFF80 - 65536, 0x7FC0, 0x7FC3, 0xFFA1 - 65536, 0x8000 - 65536]
    for s in range(6):
        bits[idx[kind == s]] = specials[s]
    return flat.view(x.shape)


def make_cases():
    cases = []
    g = torch.Generator().manual_seed(1234)
    ops = ["cumsum", "cumprod", "masked_cumsum", "linear_recurrence", "cummax", "cummin",
           "logcumsumexp", "segment_cumsum"]
    lengths_short = [1, 2, 3, 7, 8, 9, 16, 33, 100, 257]
    for dt in (torch.float16, torch.bfloat16, torch.int64):
        for op in (ops if dt != torch.int64 else ["cumsum", "masked_cumsum", "segment_cumsum"]):
            for rep in range(40):
                r = int(torch.randint(0, 1 << 30, (1,), generator=g))
                long = rep % 8 == 7
                layout = ["row1d", "rows", "cols", "cols3", "cols_wide"][rep % 5]
                cases.append(dict(dt=dt, op=op, seed=r, long=long, layout=layout,
                                  exclusive=bool(rep % 2), reverse=bool((rep // 2) % 2),
                                  initial=(rep % 3 == 0), reset_kind=["elem", "bcast", "dense",
                                  "sparse", "strided"][(rep // 3) % 5],
                                  special=[0.0, 0.02, 0.2][rep % 3],
                                  n_short=lengths_short[rep % len(lengths_short)],
                                  wide=(rep % 4 == 1)))
    return cases


def run_case(c, ops):
    g = torch.Generator().manual_seed(c["seed"])
    dt = c["dt"]
    L = (200_000 if c["layout"] in ("row1d",) else 5000) if c["long"] else c["n_short"]
    if c["layout"] == "row1d":
        shape, dim = (L,), 0
    elif c["layout"] == "rows":
        shape, dim = (3, L), 1
    elif c["layout"] == "cols":
        shape, dim = (L, 64), 0
    elif c["layout"] == "cols3":
        shape, dim = (2, L, 13), 1
    else:
        shape, dim = (L, 150), 0
    op = c["op"]
    scale = 0.05 if op in ("cumprod", "linear_recurrence") else 1.0
    x = torch.randn(shape, generator=g)
    if op == "cumprod":
        x = 1.0 + scale * x
    elif op == "logcumsumexp":
        x = 3 * x
    else:
        # a wide exponent range on every fourth case: float64 sums round, the order shows
        # (bfloat16; float16's range holds 40 bits of exponents: its sums stay exact)
        span = ((-60, 60) if dt == torch.bfloat16 else (-14, 14)) if c["wide"] else (-6, 8)
        x = x * torch.exp2(torch.randint(span[0], span[1], shape, generator=g).float())
    if dt == torch.int64:  # wrapping sums: values up to 2^62
        x = torch.randint(-2 ** 62, 2 ** 62, shape, generator=g)
    else:
        x = special_values(x.to(dt), g, c["special"])
    rk = c["reset_kind"]
    if rk == "bcast" and len(shape) > 1:
        rshape = list(shape)
        if dim == len(shape) - 1:
            rshape[0] = 1  # rows: one flag a position, broadcast over the rows
        else:
            rshape[-1] = 1  # columns: one flag a row
        reset = (torch.rand(rshape, generator=g) < 0.05).expand(shape)
    elif rk == "dense":
        reset = torch.rand(shape, generator=g) < 0.5
    elif rk == "sparse":
        reset = torch.rand(shape, generator=g) < 0.002
    elif rk == "strided" and len(shape) > 1:
        reset = (torch.rand(tuple(reversed(shape)), generator=g) < 0.05).transpose(0, -1)
        if reset.shape != shape:
            reset = torch.rand(shape, generator=g) < 0.05
    else:
        reset = torch.rand(shape, generator=g) < 0.05
    kw = dict(exclusive=c["exclusive"], reverse=c["reverse"])
    init_shape = list(shape)
    del init_shape[dim]
    if c["initial"] and op != "segment_cumsum":
        init = torch.randn(init_shape, generator=g).to(dt)
        kw["initial"] = init
    if op == "segment_cumsum":
        # values (total, features...) scanned along dim 0: the columns form of the offsets
        v = x if dim == 0 else x.movedim(dim, 0).contiguous()
        total = v.shape[0]
        nb = max(1, total // 37)
        cuts = torch.sort(torch.randint(0, total + 1, (nb,), generator=g)).values
        offsets = torch.cat([torch.tensor([0]), cuts, torch.tensor([total])])
        if c["initial"]:
            kw["initial"] = torch.randn((nb + 1,) + tuple(v.shape[1:]), generator=g).to(dt)
        return [ops.segment_cumsum(v, offsets, **kw)]
    if op == "masked_cumsum":
        m = torch.rand(shape, generator=g) < 0.7
        return [ops.masked_cumsum(x, m, dim, reset=reset, **kw)]
    if op == "linear_recurrence":
        a = (0.9 + 0.1 * torch.rand(shape, generator=g)).to(dt)
        a = special_values(a, g, c["special"] / 4)
        return [ops.linear_recurrence(a, x, dim, reset=reset, **kw)]
    f = getattr(ops, op)
    out = f(x, dim, reset=reset, **kw)
    return list(out) if isinstance(out, tuple) else [out]


def run(path):
    import scanops
    res = []
    diff_threads = 0
    cases = make_cases()
    for c in cases:
        outs = {}
        for nt in (1, 2):
            torch.set_num_threads(nt)
            outs[nt] = run_case(c, scanops)
        if not all(torch.equal(a.view(torch.int16) if a.is_floating_point() else a,
                               b.view(torch.int16) if b.is_floating_point() else b)
                   for a, b in zip(outs[1], outs[2])):
            diff_threads += 1
            print("threads differ:", {k: v for k, v in c.items() if k != "dt"}, c["dt"])
        res.append(outs[1])
    torch.save({"cases": cases, "outs": res}, path)
    print(f"{len(cases)} cases, 1 and 2 threads differ in {diff_threads}")


def bits(t):
    return t.view(torch.int16) if t.is_floating_point() else t


def bits_nan_unsigned(t):
    """bits() with the sign bit of NaNs cleared: a float64 NaN's sign depends on which NaN
    operand x86 propagates (the first source), which is the compiler's choice of operand order
    in the generic walk (two builds of the same source differ)."""
    if not t.is_floating_point():
        return t
    b = t.view(torch.int16).clone()
    b[torch.isnan(t)] &= 0x7FFF
    return b


def compare(pa, pb):
    A, B = torch.load(pa, weights_only=False), torch.load(pb, weights_only=False)
    per = {}
    nsd = {}  # cases that differ only in the sign of NaN outputs
    worst = {}
    for c, a, b in zip(A["cases"], A["outs"], B["outs"]):
        key = (str(c["dt"])[6:], c["op"])
        n, d = per.get(key, (0, 0))
        same = all(torch.equal(bits(u), bits(v)) for u, v in zip(a, b))
        same_ns = all(torch.equal(bits_nan_unsigned(u), bits_nan_unsigned(v)) for u, v in zip(a, b))
        per[key] = (n + 1, d + (not same))
        nsd[key] = nsd.get(key, 0) + (not same and same_ns)
        if same_ns:
            continue
        if not same and c["op"] == "logcumsumexp":
            u, v = a[0].double(), b[0].double()
            fin = torch.isfinite(u) & torch.isfinite(v)
            same_nonfinite = torch.equal(torch.isnan(u), torch.isnan(v)) and torch.equal(
                u[~torch.isnan(u) & ~fin], v[~torch.isnan(v) & ~fin])
            eps = torch.finfo(a[0].dtype).eps
            rel = ((u - v).abs()[fin] / u.abs()[fin].clamp(min=1)).max().item() / eps if fin.any() else 0.0
            w = worst.get(key, [0.0, True])
            worst[key] = [max(w[0], rel), w[1] and same_nonfinite]
        elif not same:
            print("differs:", {k: v for k, v in c.items()})
    total = sum(n for n, _ in per.values())
    ndiff = sum(d for _, d in per.values())
    for k in sorted(per):
        n, d = per[k]
        extra = ""
        if k in worst:
            extra = (f"  (max |diff| / max(|y|, 1) = {worst[k][0]:.2f} eps of the dtype;"
                     f" non-finite outputs the same: {worst[k][1]})")
        print(f"{k[0]:9s} {k[1]:18s} {n:4d} cases, {d:3d} differ, {d - nsd[k]:3d} beyond the sign of NaNs{extra}")
    print(f"total {total} cases, {ndiff} differ, {ndiff - sum(nsd.values())} beyond the sign of NaNs")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2])
    else:
        compare(sys.argv[2], sys.argv[3])
