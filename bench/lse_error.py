"""logcumsumexp error against a float64 reference: scanops (the library loaded) and torch's own
CUDA logcumsumexp, on the same inputs.

The reference is torch.logcumsumexp of the input converted to float64, on the CPU. Per case and
implementation: the largest absolute error over the finite reference values, the largest error
relative to max(|ref|, 1), and the count of non-finite reference values not matched exactly
(-inf / +inf the same, NaN for NaN).

Usage (one library per process: the ops register under one name):
  SCANOPS_LIBRARY=old.so python bench/lse_error.py --tag old --torch --json old.json
  SCANOPS_LIBRARY=new.so python bench/lse_error.py --tag new --json new.json
  python bench/lse_error.py --table old.json new.json      (markdown table)
"""
import argparse
import json
import os
import sys
import time

import torch

SHAPES = [("rows (4096, 16384) dim 1", (4096, 16384), 1),
          ("1-D 2^24", (1 << 24,), 0)]
if os.environ.get("LSE_COLUMNS"):
    SHAPES.append(("columns (16384, 4096) dim 0", (16384, 4096), 0))
DATA = ["N(0,1)", "N(0,10^2)", "N(0,100^2)", "U(-80,80)", "N(0,1), 10% -inf, -inf first 1000"]


def make(kind, shape, dim, gen):
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if kind == "N(0,10^2)":
        x *= 10
    elif kind == "N(0,100^2)":
        x *= 100
    elif kind == "U(-80,80)":
        x = torch.rand(shape, generator=gen, dtype=torch.float32) * 160 - 80
    elif kind.startswith("N(0,1), 10%"):
        x[torch.rand(shape, generator=gen) < 0.1] = float("-inf")
        x.narrow(dim, 0, 1000).fill_(float("-inf"))
    return x


def errors(got, ref):
    """(max abs error over finite ref, max error / max(|ref|, 1), non-finite mismatches)."""
    g = got.to(torch.float64)
    fin = torch.isfinite(ref)
    d = (g - ref).abs().where(fin, torch.zeros((), dtype=torch.float64, device=ref.device))
    rel = d / ref.abs().clamp_min(1.0).where(fin, torch.ones((), dtype=torch.float64, device=ref.device))
    nf = ~fin
    bad = nf & ~((g == ref) | (torch.isnan(g) & torch.isnan(ref)))
    return d.max().item(), rel.max().item(), int(bad.sum().item())


def run(args):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import scanops  # noqa: F401

    torch.set_num_threads(os.cpu_count() or 1)
    dev = torch.device("cuda")
    out = {"tag": args.tag, "device": torch.cuda.get_device_name(dev), "cases": []}
    t0 = time.time()
    for dtype in (torch.float32, torch.bfloat16):
        for sname, shape, dim in SHAPES:
            if dtype != torch.float32 and sname.startswith("columns"):
                continue
            for kind in DATA:
                gen = torch.Generator().manual_seed(1234)
                x = make(kind, shape, dim, gen).to(dtype)
                ref = torch.logcumsumexp(x.to(torch.float64), dim).to(dev)
                xd = x.to(dev)
                case = {"dtype": str(dtype).replace("torch.", ""), "shape": sname, "data": kind}
                case[args.tag] = errors(torch.ops.scanops.logcumsumexp(xd, dim), ref)
                if args.torch:
                    case["torch"] = errors(torch.logcumsumexp(xd, dim), ref)
                out["cases"].append(case)
                print(json.dumps(case), flush=True)
                del ref, xd
    out["seconds"] = time.time() - t0
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


def table(paths):
    runs = [json.load(open(p)) for p in paths]
    tags = []
    for r in runs:
        for c in r["cases"]:
            for k in c:
                if k not in ("dtype", "shape", "data") and k not in tags:
                    tags.append(k)
    merged = {}
    for r in runs:
        for c in r["cases"]:
            merged.setdefault((c["dtype"], c["shape"], c["data"]), {}).update(
                {k: v for k, v in c.items() if k in tags})
    head = "| dtype | shape | data | " + " | ".join(
        f"{t} max abs | {t} max rel" for t in tags) + " | non-finite mismatches |"
    print(head)
    print("|" + "---|" * (3 + 2 * len(tags) + 1))
    for (dt, sh, da), v in merged.items():
        cells = []
        for t in tags:
            e = v.get(t)
            cells += [f"{e[0]:.3g}", f"{e[1]:.3g}"] if e else ["", ""]
        nf = ", ".join(f"{t} {v[t][2]}" for t in tags if t in v)
        print(f"| {dt} | {sh} | {da} | " + " | ".join(cells) + f" | {nf} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", default="scanops")
    ap.add_argument("--torch", action="store_true", help="measure torch.logcumsumexp on CUDA too")
    ap.add_argument("--json", default="")
    ap.add_argument("--table", nargs="*")
    a = ap.parse_args()
    if a.table:
        table(a.table)
    else:
        run(a)
