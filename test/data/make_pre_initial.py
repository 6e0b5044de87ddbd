"""Writes the programs of test_initial.py's compatibility tests, with a scanops library built
from a commit before `initial` (9b0e09b): a TorchScript module and a torch.export program that
call every op with the schemas of then, and their inputs and outputs.

    SCANOPS_LIBRARY=<old build>/libscanops.so python test/data/make_pre_initial.py test/data

Kept for the record: rerunning it with today's library writes programs with today's schemas.
"""
import sys
from pathlib import Path
from typing import Tuple

import torch

import scanops  # noqa: F401


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor, a: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                           torch.Tensor, torch.Tensor, torch.Tensor]:
        s = torch.ops.scanops.cumsum(x, -1, exclusive=True, reverse=True)
        m = torch.ops.scanops.masked_cumsum(x, mask, -1)
        p = torch.ops.scanops.cumprod(1.0 + 0.01 * x, -1, reverse=True)
        h = torch.ops.scanops.linear_recurrence(a, x, -1, exclusive=True)
        l = torch.ops.scanops.logcumsumexp(x, 0)
        v, i = torch.ops.scanops.cummax(x, -1)
        w, j = torch.ops.scanops.cummin(x, 0, reverse=True)
        return s, m, p, h, l, v + w, i, j


def main(out: Path) -> None:
    torch.manual_seed(0)
    args = (torch.randn(3, 40), torch.rand(3, 40) > 0.3, torch.rand(3, 40))
    model = Model()
    scripted = torch.jit.script(model)
    scripted.save(str(out / "pre_initial_script.pt"))
    ep = torch.export.export(model, args)
    torch.export.save(ep, str(out / "pre_initial_export.pt2"))
    torch.save({"args": list(args), "script_out": list(scripted(*args)),
                "export_out": list(ep.module()(*args))}, out / "pre_initial_io.pt")
    print("written to", out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
