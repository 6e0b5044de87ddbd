"""logcumsumexp's backward on CUDA, float32: the one-scan kernel of the internal op
scanops::_logcumsumexp_backward (ops/cuda/lse_grad.cu, since 2026-11-29) against the formula it
replaced along rows (registration/autograd.cpp's composite, written out here with the same ops:
a clamp of y, the factors exp(y[k-1] - y[k]) and exp(x - y), then _linear_recurrence_fused
accumulating in float64), in one process, interleaved, best of --rounds. Floors: a device copy
of the bytes each must move (backward: x, y, g in, dx out, 16 bytes an element; fwd+bwd: 24).
Also fwd+bwd through autograd (the library's path), and both backward outputs' largest error
against the composite run in float64 on the same data, relative to the largest gradient.

    SCANOPS_LIBRARY=... python bench/lse_backward_ab.py [--elems N] [--rounds R] [--md FILE]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401

ops = torch.ops.scanops


def old_backward(x, y, g, dim):
    """The composite fused backward (inclusive, forward direction), as registration/autograd.cpp
    ran it along rows before 2026-11-29."""
    lowest = torch.finfo(y.dtype).min
    yc = y.clamp(lowest, -lowest)
    n = y.shape[dim]
    coef = torch.empty_like(y)
    torch.sub(yc.narrow(dim, 0, n - 1), yc.narrow(dim, 1, n - 1), out=coef.narrow(dim, 1, n - 1))
    coef.narrow(dim, 1, n - 1).exp_()
    coef.narrow(dim, 0, 1).fill_(0)
    f = torch.sub(x, y).exp_()
    return ops._linear_recurrence_fused(coef, g, dim, exclusive=True, reverse=True, scale_x=True,
                                        add=g, mul=f, wide_acc=True)


def timed(fn, reps):
    fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elems", type=int, default=1 << 28)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--md", default=None)
    ap.add_argument("--dim", type=int, default=None, help="only the shapes scanned along DIM")
    args = ap.parse_args()
    n = args.elems
    gen = torch.Generator(device="cuda").manual_seed(0)
    flat = 3 * torch.randn(n, device="cuda", generator=gen)
    gflat = torch.randn(n, device="cuda", generator=gen)
    shapes = [((n // 64, 64), -1), ((n // 4096, 4096), -1), ((n // 16384, 16384), -1),
              ((64, n // 64), -1), ((n,), -1), ((16384, n // 16384), 0), ((n // 64, 64), 0)]
    lines = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, float32, "
             f"{n} elements, best of {args.rounds} rounds x {args.reps} calls", "",
             "| shape, dim | bwd floor ms | new bwd ms (share) | old bwd ms (share) | "
             "old / new | fwd+bwd floor ms | fwd+bwd ms (share) | new error | old error |",
             "|---|---|---|---|---|---|---|---|---|"]
    print(lines[0], flush=True)
    for shape, dim in shapes:
        if args.dim is not None and dim != args.dim:
            continue
        x = flat.view(shape)
        g = gflat.view(shape)
        y = ops.logcumsumexp(x, dim)
        xr = x.clone().requires_grad_()
        src = torch.empty(8 * n, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        src3 = torch.empty(12 * n, dtype=torch.uint8, device="cuda")
        dst3 = torch.empty_like(src3)
        best = {}

        def keep(k, t):
            best[k] = min(best.get(k, 1e30), t)

        new = lambda: ops._logcumsumexp_backward(x, y, g, dim, exclusive=False, reverse=False)  # noqa
        old = lambda: old_backward(x, y, g, dim)  # noqa: E731
        both = lambda: torch.autograd.grad(ops.logcumsumexp(xr, dim), xr, g)[0]  # noqa: E731
        for _ in range(args.rounds):
            keep("floor", timed(lambda: dst.copy_(src), args.reps))
            keep("new", timed(new, args.reps))
            keep("old", timed(old, args.reps))
            keep("floor3", timed(lambda: dst3.copy_(src3), args.reps))
            keep("both", timed(both, args.reps))
        # errors against the composite run in float64 on the same float32 data (its factors'
        # roundings, 1e-16 each, compound along a line: ~3e-8 worst case over 2^28 of them)
        ref = ops._logcumsumexp_backward(x.double(), y.double(), g.double(), dim,
                                         exclusive=False, reverse=False)
        top = ref.abs().max()
        err_new = ((new().double() - ref).abs().max() / top).item()
        err_old = ((old().double() - ref).abs().max() / top).item()
        del ref
        f, f3 = best["floor"], best["floor3"]
        line = (f"| {shape}, {dim} | {f:.3f} | {best['new']:.3f} ({100 * f / best['new']:.0f}%) | "
                f"{best['old']:.3f} ({100 * f / best['old']:.0f}%) | "
                f"{best['old'] / best['new']:.2f} | {f3:.3f} | {best['both']:.3f} "
                f"({100 * f3 / best['both']:.0f}%) | {err_new:.2e} | {err_old:.2e} |")
        lines.append(line)
        print(line, flush=True)
        del src, dst, src3, dst3, xr
    if args.md:
        with open(args.md, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
