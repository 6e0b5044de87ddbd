"""GPU benchmark: every scanops op on every shape class, as a share of copy speed.

For each workload it times, in one run on one GPU (CUDA events, median of repeats after
warm-up): a device-to-device copy of the workload's bytes, the scanops op, the same
expression in torch eager, and torch.compile of it (dynamo reset and dynamic=False per
shape). "share of copy" = (time a copy of the op's minimal bytes takes) / (op's time):
100% means the op moves its bytes as fast as a copy.

Usage: python bench/bench_gpu.py [--quick] [--no-compile] [--json out.json] [--md out.md]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402

ops = torch.ops.scanops


def bench(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def excl_torch(x, d):
    y = torch.cumsum(x.narrow(d, 0, x.size(d) - 1), d)
    return torch.cat([torch.zeros_like(x.narrow(d, 0, 1)), y], d)


def workloads(quick):
    big = (8192, 8192) if quick else (32768, 32768)
    f32 = torch.float32
    W = []
    # name, shape, dtype, dim, scanops fn, torch fn, bytes moved (minimal)
    def add(name, shape, dim, sc, tf, dtype=f32, extra_in=0, bwd=False):
        W.append(dict(name=name, shape=shape, dim=dim, sc=sc, tf=tf, dtype=dtype,
                      extra_in=extra_in, bwd=bwd))
    add("cumsum dim 1", big, 1, lambda x, m: ops.cumsum(x, 1), lambda x, m: torch.cumsum(x, 1))
    add("cumprod dim 1", big, 1, lambda x, m: ops.cumprod(x, 1), lambda x, m: torch.cumprod(x, 1))
    add("reverse cumsum", big, 1, lambda x, m: ops.cumsum(x, 1, reverse=True),
        lambda x, m: torch.cumsum(x.flip(1), 1).flip(1))
    add("exclusive cumsum", big, 1, lambda x, m: ops.cumsum(x, 1, exclusive=True),
        lambda x, m: excl_torch(x, 1))
    add("masked cumsum", big, 1, lambda x, m: ops.masked_cumsum(x, m, 1),
        lambda x, m: torch.cumsum(x * m, 1), extra_in=1)
    add("cumsum fwd+bwd", big, 1, lambda x, m: ops.cumsum(x, 1), lambda x, m: torch.cumsum(x, 1),
        bwd=True)
    add("bf16 cumsum", big, 1, lambda x, m: ops.cumsum(x, 1), lambda x, m: torch.cumsum(x, 1),
        dtype=torch.bfloat16)
    add("(2^20, 64) dim 1", (1 << 20 if not quick else 1 << 18, 64), 1,
        lambda x, m: ops.cumsum(x, 1), lambda x, m: torch.cumsum(x, 1))
    add("(2^24, 4) dim 1", (1 << 24 if not quick else 1 << 22, 4), 1,
        lambda x, m: ops.cumsum(x, 1), lambda x, m: torch.cumsum(x, 1))
    add("(64, 2^22) dim 1", (64, 1 << 22 if not quick else 1 << 20), 1,
        lambda x, m: ops.cumsum(x, 1), lambda x, m: torch.cumsum(x, 1))
    add("big dim 0", big, 0, lambda x, m: ops.cumsum(x, 0), lambda x, m: torch.cumsum(x, 0))
    add("(8, 32768, 4096) dim 1", (8, 32768 if not quick else 8192, 4096), 1,
        lambda x, m: ops.cumsum(x, 1), lambda x, m: torch.cumsum(x, 1))
    add("1-D 2^30", (1 << 30 if not quick else 1 << 26,), 0,
        lambda x, m: ops.cumsum(x, 0), lambda x, m: torch.cumsum(x, 0))
    add("(128, 4000) latency", (128, 4000), 1,
        lambda x, m: ops.cumsum(x, 1), lambda x, m: torch.cumsum(x, 1))
    add("linear_recurrence dim 1", big, 1, lambda x, m: ops.linear_recurrence(m, x, 1),
        None, extra_in=4)
    return W


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--md", default="")
    args = ap.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    rows = []
    for w in workloads(args.quick):
        if args.only and args.only not in w["name"]:
            continue
        torch.cuda.empty_cache()
        shape, dtype, dim = w["shape"], w["dtype"], w["dim"]
        x = torch.randn(shape, device=dev, dtype=torch.float32).to(dtype)
        if w["name"].startswith("cumprod"):
            x = torch.rand(shape, device=dev) * 0.02 + 0.99
        if w["name"].startswith("linear"):
            m = torch.rand(shape, device=dev)
        elif w["extra_in"]:
            m = torch.rand(shape, device=dev) > 0.5
        else:
            m = None
        esz = x.element_size()
        n = x.numel()
        nbytes = n * esz * 2 + n * w["extra_in"]  # read + write (+ mask / coefficients)
        if w["bwd"]:
            nbytes *= 2
        reps = 5 if n >= (1 << 28) else 20 if n >= (1 << 22) else 200
        # Copy baseline: a device-to-device copy moving nbytes (read + write).
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        t_copy = bench(lambda: dst.copy_(src), reps)
        del src, dst
        if w["bwd"]:
            xg = x.clone().requires_grad_()
            g = torch.randn_like(x)
            sc = lambda: w["sc"](xg, m).backward(g)  # noqa: E731
            tf = lambda: w["tf"](xg, m).backward(g)  # noqa: E731
        else:
            sc = lambda: w["sc"](x, m)  # noqa: E731
            tf = (lambda: w["tf"](x, m)) if w["tf"] else None  # noqa: E731
        t_sc = bench(sc, reps)
        t_eager = bench(tf, reps) if tf else float("nan")
        t_comp = float("nan")
        if tf and not args.no_compile and not w["bwd"]:
            torch._dynamo.reset()
            cf = torch.compile(w["tf"], dynamic=False)
            try:
                t_comp = bench(lambda: cf(x, m), reps)
            except Exception as e:  # noqa: BLE001
                print(f"compile failed for {w['name']}: {e}", file=sys.stderr)
        row = dict(workload=w["name"], shape=list(shape), dtype=str(dtype), dim=dim,
                   bytes=nbytes, copy_ms=t_copy, scanops_ms=t_sc, eager_ms=t_eager,
                   compile_ms=t_comp, scanops_share=t_copy / t_sc,
                   eager_share=t_copy / t_eager, compile_share=t_copy / t_comp)
        rows.append(row)
        print(f"{w['name']:26s} copy {t_copy:8.3f} ms  scanops {t_sc:8.3f} ms "
              f"({100 * t_copy / t_sc:5.1f}%)  eager {t_eager:8.3f} ms ({100 * t_copy / t_eager:5.1f}%)"
              f"  compile {t_comp:8.3f} ms ({100 * t_copy / t_comp:5.1f}%)", flush=True)
        del x, m
    head = (f"Device: {props.name}, torch {torch.__version__}, "
            f"{time.strftime('%Y-%m-%d')}, float32 unless noted\n\n"
            "| workload | bytes | copy ms | scanops ms | scanops % of copy | eager % | compile % |\n"
            "|---|---|---|---|---|---|---|\n")
    md = head + "".join(
        f"| {r['workload']} | {r['bytes'] / 2**20:.0f} MiB | {r['copy_ms']:.3f} | {r['scanops_ms']:.3f} "
        f"| {100 * r['scanops_share']:.0f}% | {100 * r['eager_share']:.0f}% | {100 * r['compile_share']:.0f}% |\n"
        for r in rows)
    print()
    print(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=props.name, torch=torch.__version__, rows=rows), f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
