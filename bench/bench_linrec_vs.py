"""linear_recurrence against accelerated-scan (issue #36), side by side on one GPU.

accelerated-scan (pip install accelerated-scan; MIT) solves h[t] = gate[t] * h[t-1] + token[t]
along the last dim of (B, C, T) float32 tensors with a Triton kernel (`accelerated_scan.scalar`)
and a CUDA warp kernel (`accelerated_scan.warp`, built by torch's load_inline at import, T a
power of 2 in 32..65536), forward and backward. scanops' op for the same recurrence is
`linear_recurrence(gates, tokens, dim=2)`.

Shapes: the README's (8, 1536, T) for T = 128 .. 65536, and few long channels. Inputs as in
the README: gates 0.999 + 0.001 * U(0, 1), tokens U(0, 1). For each shape, forward and forward +
backward (torch.autograd.grad of the states with respect to gates and tokens), timed in
interleaved rounds with a device copy of the case's minimal bytes (forward: gates and tokens
in, states out, 12 bytes an element; forward + backward: 32, the forward's plus the backward's
gradient, gates and states in and two gradients out), best of --rounds.
Share = floor time / op time. Also each forward's largest error against a float64 scan of the
same inputs (scanops' float64 linear_recurrence), relative to the largest |h|.

    PYTHONPATH=python python bench/bench_linrec_vs.py --md out.md [--warp-lib LIB.so]

--warp-lib: the warp kernels built ahead as torch ops (bench/build_accscan_warp.sh: the
package's warp.cuh with its own nvcc flags); without it the package builds its extension at
import (needs nvcc, ninja and Python headers). Each candidate runs each shape first in a child
process: one that cannot load, refuses a shape or faults is reported and not timed there.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401

ops = torch.ops.scanops
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import time_once_ms as time_ms  # noqa: E402  (median of CUDA-event timings)


def load_accelerated_scan(warp_lib, only=None):
    """{name: scan(gates, tokens)} of the accelerated-scan kernels that load."""
    out = {}
    if only in (None, "acc-scan triton"):
        try:
            from accelerated_scan import scalar
            out["acc-scan triton"] = scalar.scan
        except Exception as e:  # noqa: BLE001
            print(f"accelerated_scan.scalar: {type(e).__name__}: {e}"[:300], file=sys.stderr)
    if only not in (None, "acc-scan warp"):
        return out
    try:
        if warp_lib:
            # The package builds its extension at import (load_inline: nvcc, ninja and a
            # pybind11 module for one Python version). Hand its warp.py the same kernels built
            # ahead as torch ops instead (bench/build_accscan_warp.sh: its warp.cuh with the
            # flags of its load_inline call).
            import torch.utils.cpp_extension as ce
            torch.ops.load_library(warp_lib)
            w = torch.ops.accscan_warp

            class Mod:
                warpscan_forward = staticmethod(w.forward)
                warpscan_backward = staticmethod(w.backward)
            real = ce.load_inline
            ce.load_inline = lambda *a, **kw: Mod
            try:
                from accelerated_scan import warp
            finally:
                ce.load_inline = real
        else:
            from accelerated_scan import warp
        out["acc-scan warp"] = warp.scan
    except Exception as e:  # noqa: BLE001
        print(f"accelerated_scan.warp: {type(e).__name__}: {e}"[:300], file=sys.stderr)
    return out


def inputs(shape, dev):
    g = torch.Generator(device=dev).manual_seed(0)
    gates = 0.999 + 0.001 * torch.rand(shape, device=dev, generator=g)
    tokens = torch.rand(shape, device=dev, generator=g)
    gy = torch.rand(shape, device=dev, generator=g)
    return gates, tokens, gy


def probe(name, shapes, warp_lib):
    """Runs `name` forward and forward + backward on each shape, synchronizing after each, and
    prints "ok <shape>" per shape it survives (a kernel fault kills the process: the parent
    reads how far it got)."""
    dev = torch.device("cuda")
    f = (lambda a, x: ops.linear_recurrence(a, x, 2)) if name == "scanops" else \
        load_accelerated_scan(warp_lib, name)[name]
    for shape in shapes:
        gates, tokens, gy = inputs(shape, dev)
        ag = gates.clone().requires_grad_()
        xg = tokens.clone().requires_grad_()
        try:
            f(gates, tokens)
            torch.autograd.grad(f(ag, xg), (ag, xg), gy)
            torch.cuda.synchronize()
        except RuntimeError as e:  # (a refusal, not a fault: the process goes on)
            if "illegal" in str(e) or "CUDA error" in str(e):
                raise
            print(f"refused {list(shape)} {type(e).__name__}: {str(e)[:200]!r}", flush=True)
            continue
        print(f"ok {list(shape)}", flush=True)


def probe_all(names, shapes, warp_lib):
    """{(name, shape): None if it ran, else why not}, each candidate probed in child processes
    (CUDA_LAUNCH_BLOCKING=1) so that a kernel fault costs only the shape it hit."""
    import json
    import subprocess
    res = {}
    for name in names:
        todo = list(shapes)
        while todo:
            env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
            cmd = [sys.executable, os.path.abspath(__file__), "--probe", name,
                   "--probe-shapes", json.dumps(todo), "--warp-lib", warp_lib]
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            done = 0
            for line in r.stdout.splitlines():
                if line.startswith("ok "):
                    res[(name, tuple(todo[done]))] = None
                    done += 1
                elif line.startswith("refused "):
                    res[(name, tuple(todo[done]))] = line[len("refused "):]
                    done += 1
            if done < len(todo):  # the process died on todo[done]
                err = (r.stderr.strip().splitlines() or ["?"])[-1]
                res[(name, tuple(todo[done]))] = f"fault (exit {r.returncode}): {err[:200]}"
                print(f"{name} {todo[done]}: {res[(name, tuple(todo[done]))]}", file=sys.stderr)
                done += 1
            todo = todo[done:]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--md", default="")
    ap.add_argument("--warp-lib", default="", help="bench/build_accscan_warp.sh's library")
    ap.add_argument("--quick", action="store_true", help="the README's T up to 4096 only")
    ap.add_argument("--probe", default="", help=argparse.SUPPRESS)
    ap.add_argument("--probe-shapes", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        import json
        probe(args.probe, [tuple(x) for x in json.loads(args.probe_shapes)], args.warp_lib)
        return
    dev = torch.device("cuda")
    acc = load_accelerated_scan(args.warp_lib)
    try:
        import importlib.metadata as md
        acc_version = md.version("accelerated-scan")
    except Exception:  # noqa: BLE001
        acc_version = "?"

    shapes = [(8, 1536, 1 << k) for k in range(7, 17 if not args.quick else 13)]
    if not args.quick:
        shapes += [(1, 64, 65536), (1, 8, 65536), (4, 16, 65536), (1, 16, 1 << 20)]
    names = ["scanops"] + list(acc)
    # Each candidate on each shape first in a child process: a kernel fault there (it
    # happened) leaves this process's CUDA context intact; faulting pairs are not timed.
    failed = {k: v for k, v in probe_all(names, shapes, args.warp_lib).items() if v}
    rows = []
    for shape in shapes:
        B, C, T = shape
        n = B * C * T
        gates, tokens, gy = inputs(shape, dev)
        ref = ops.linear_recurrence(gates[:1].double(), tokens[:1].double(), 2)
        scale = ref.abs().max().item()
        fns = {}
        for k, f in [("scanops", lambda a, x: ops.linear_recurrence(a, x, 2))] + list(acc.items()):
            if (k, shape) not in failed:
                fns[k] = f
        cands = {}  # (name, fwd_bwd) -> callable
        errs = {}
        ag = gates.clone().requires_grad_()
        xg = tokens.clone().requires_grad_()
        for k, f in fns.items():
            try:
                h = f(gates, tokens)
                errs[k] = (h[:1].double() - ref).abs().max().item() / scale
                del h
                torch.autograd.grad(f(ag, xg), (ag, xg), gy)
            except Exception as e:  # noqa: BLE001
                print(f"{shape} {k}: {type(e).__name__}: {e}"[:300], file=sys.stderr)
                continue
            cands[(k, False)] = (lambda f=f: f(gates, tokens))
            cands[(k, True)] = (lambda f=f: torch.autograd.grad(f(ag, xg), (ag, xg), gy))
        floors = {}
        for fb, elems in ((False, 3), (True, 8)):
            src = torch.empty(n * 4 * elems // 2, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            floors[fb] = (lambda s=src, d=dst: d.copy_(s))
        if not cands:
            continue
        t1 = max(time_ms(fn, 1) for key, fn in cands.items() if key[1])
        reps = max(3, min(200, int(100 / max(t1, 1e-3))))
        best = {}
        for r in range(args.rounds + 1):  # round 0 untimed
            for fb, fl in floors.items():
                t = time_ms(fl, reps)
                if r:
                    best[("floor", fb)] = min(best.get(("floor", fb), 1e30), t)
            for key, fn in cands.items():
                t = time_ms(fn, reps)
                if r:
                    best[key] = min(best.get(key, 1e30), t)
        for fb in (False, True):
            row = dict(shape=shape, fwd_bwd=fb, floor=best[("floor", fb)])
            for k in names:
                row[k] = best.get((k, fb), float("nan"))
                row["err " + k] = errs.get(k, float("nan"))
            rows.append(row)
            print(f"{shape} {'fwd+bwd' if fb else 'fwd'}: floor {row['floor']:.3f} ms  "
                  + "  ".join(f"{k} {row[k]:.3f} ({100 * row['floor'] / row[k]:.0f}%)"
                              for k in names), flush=True)
        del gates, tokens, gy, ag, xg, cands, floors, src, dst, ref
        torch.cuda.empty_cache()

    head = (f"Device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
            f"accelerated-scan {acc_version}, {time.strftime('%Y-%m-%d')}, commit "
            f"{os.environ.get('SCANOPS_COMMIT', '?')}, float32, best of {args.rounds} rounds\n\n")
    cols = " | ".join(f"{k} ms (share)" for k in names)
    lines = [head, f"| (B, C, T) | pass | floor ms | {cols} | fastest other's time / scanops' | "
             + " | ".join(f"fwd err {k}" for k in names) + " |",
             "|" + "---|" * (4 + 2 * len(names))]
    for row in rows:
        others = [row[k] for k in names[1:] if row[k] == row[k]]
        ratio = f"{min(others) / row['scanops']:.2f}x" if others else "-"
        cells = " | ".join(f"{row[k]:.3f} ({100 * row['floor'] / row[k]:.0f}%)"
                           if row[k] == row[k] else "-" for k in names)
        errc = " | ".join(f"{row['err ' + k]:.1e}" if row["err " + k] == row["err " + k] else "-"
                          for k in names)
        lines.append(f"| {row['shape']} | {'fwd+bwd' if row['fwd_bwd'] else 'fwd'} | "
                     f"{row['floor']:.3f} | {cells} | {ratio} | {errc} |")
    if failed:
        lines.append("")
        lines.append("Not timed (the probe's finding):")
        for (k, shape), why in failed.items():
            lines.append(f"- {k} {list(shape)}: {why}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
