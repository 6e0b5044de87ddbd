"""Scripts a module that calls the scanops ops and saves it for C++ (run_scripted.cpp).

    python examples/torchscript/export_module.py OUT_DIR

writes OUT_DIR/scan_model.pt (the TorchScript module) and OUT_DIR/scan_model_io.pt (a dict
{"inputs": [...], "expected": [...]} that C++ reads with torch::jit::pickle_load). The expected
outputs come from PyTorch's own ops, not from scanops.
"""
import sys
from pathlib import Path
from typing import Tuple

import torch

import scanops  # noqa: F401  (loads libscanops.so: registers torch.ops.scanops.*)


class ScanModel(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor, a: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                           torch.Tensor, torch.Tensor]:
        # TorchScript calls the ops directly, keyword arguments included.
        s = torch.ops.scanops.cumsum(x, -1, exclusive=True, reverse=True)
        m = torch.ops.scanops.masked_cumsum(x, mask, -1, dtype=torch.float64)
        p = torch.ops.scanops.cumprod(1.0 + 0.01 * x, -1)
        # a recurrence continued from a state h[-1] (every op takes `initial`)
        h = torch.ops.scanops.linear_recurrence(a, x, -1, initial=0.5 * x.select(-1, 0))
        l = torch.ops.scanops.logcumsumexp(x, -1, reverse=True)
        v, i = torch.ops.scanops.cummax(x, -1)  # values and int64 indices
        return s, m, p, h, l, v, i


def reference(x, mask, a):
    s = x.flip(-1).cumsum(-1).flip(-1) - x  # exclusive + reverse
    m = (x.double() * mask).cumsum(-1)
    p = (1.0 + 0.01 * x).cumprod(-1)
    h, hs = 0.5 * x[..., 0], []
    for t in range(x.shape[-1]):
        h = a[..., t] * h + x[..., t]
        hs.append(h)
    lse = torch.logcumsumexp(x.flip(-1), -1).flip(-1)
    v, i = torch.cummax(x, -1)
    return s, m, p, torch.stack(hs, -1), lse, v, i


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(3, 100)
    mask = torch.rand(3, 100) > 0.3
    a = torch.rand(3, 100)

    scripted = torch.jit.script(ScanModel())
    expected = reference(x, mask, a)
    for got, want in zip(scripted(x, mask, a), expected):  # check before saving
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    scripted.save(str(out_dir / "scan_model.pt"))
    torch.save({"inputs": [x, mask, a], "expected": list(expected)},
               out_dir / "scan_model_io.pt")
    print(f"saved {out_dir / 'scan_model.pt'} and {out_dir / 'scan_model_io.pt'}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
