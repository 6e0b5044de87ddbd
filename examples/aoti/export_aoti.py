"""Exports a model that calls the scanops ops with torch.export, compiles it ahead of time with
AOTInductor into a .pt2 package, and saves test inputs with expected outputs for C++
(run_aoti.cpp).

    python examples/aoti/export_aoti.py OUT_DIR [--device cuda]

writes OUT_DIR/scan_model.pt2 and OUT_DIR/scan_model_io.pt ({"inputs": [...],
"expected": [...]}, on the CPU). Needs a C++ compiler (the package holds a shared object
compiled for this machine's CPU, or GPU with --device cuda).
"""
import argparse
import time
from pathlib import Path

import torch

import scanops  # loads libscanops.so and gives the typed wrappers


class ScanModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, a: torch.Tensor):
        y = self.proj(x)  # inductor fuses and compiles the ordinary ops around the scans
        s = scanops.cumsum(y, 1, exclusive=True, reverse=True)
        m = scanops.masked_cumsum(y, mask, 1, dtype=torch.float64)
        p = scanops.cumprod(1.0 + 0.01 * y.tanh(), 1)
        # the ops work directly too; `initial`: the recurrence continues from a state h[-1]
        h = torch.ops.scanops.linear_recurrence(a.sigmoid(), y, 1, initial=y[:, 0] * 0.5)
        l = scanops.logcumsumexp(y, 1, reverse=True)
        v, i = scanops.cummax(y, 1)  # values and int64 indices
        return s.relu(), m, p, h, l, v, i


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)

    torch.manual_seed(0)
    model = ScanModel().to(device).eval()
    example = (torch.randn(4, 64, 16, device=device),
               torch.rand(4, 64, 16, device=device) > 0.5,
               torch.randn(4, 64, 16, device=device))
    # The batch (dim 0) and sequence (dim 1) sizes stay symbolic in the compiled model.
    batch, seq = torch.export.Dim("batch", max=4096), torch.export.Dim("seq", max=1 << 20)
    dims = {0: batch, 1: seq}

    t0 = time.time()
    with torch.no_grad():
        exported = torch.export.export(model, example,
                                       dynamic_shapes={"x": dims, "mask": dims, "a": dims})
    t1 = time.time()
    package = torch._inductor.aoti_compile_and_package(
        exported, package_path=str(args.out_dir / "scan_model.pt2"))
    t2 = time.time()
    print(f"torch.export {t1 - t0:.1f} s, AOTInductor compile {t2 - t1:.1f} s -> {package}")

    # Test data of other sizes than the example: expected outputs from the eager model.
    inputs = [torch.randn(3, 100, 16, device=device),
              torch.rand(3, 100, 16, device=device) > 0.5,
              torch.randn(3, 100, 16, device=device)]
    with torch.no_grad():
        expected = model(*inputs)
    torch.save({"inputs": [t.cpu() for t in inputs], "expected": [t.cpu() for t in expected]},
               args.out_dir / "scan_model_io.pt")
    print(f"saved {args.out_dir / 'scan_model_io.pt'}")

    # The package runs in Python too (import scanops first, so the ops exist).
    compiled = torch._inductor.aoti_load_package(package)
    with torch.no_grad():
        for got, want in zip(compiled(*inputs), expected):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    print("the package's outputs match the eager model's")


if __name__ == "__main__":
    main()
