"""scanops from Python: every op, on the GPU if there is one (else the CPU), checked against
PyTorch's own ops, with autograd and torch.compile. Exits 1 on a mismatch.

    PYTHONPATH=python python examples/python_demo.py      # from a source checkout
    PYTHONPATH=<prefix>/lib/python python python_demo.py  # from an install
"""
import sys

import torch

import scanops

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
x = torch.randn(8, 1000, device=device)
mask = torch.rand(8, 1000, device=device) > 0.5
p = 1 + 0.01 * torch.randn(8, 300, device=device, dtype=torch.float64)
a = torch.rand(8, 64, device=device, dtype=torch.float64)
u = torch.randn(8, 64, device=device, dtype=torch.float64)


def loop_recurrence(a, u):  # h[t] = a[t] * h[t-1] + u[t]
    h, hs = torch.zeros_like(u[:, 0]), []
    for t in range(u.shape[1]):
        h = a[:, t] * h + u[:, t]
        hs.append(h)
    return torch.stack(hs, 1)


# Gradient of cumprod with a zero in the input, against torch.cumprod's.
q = torch.rand(4, 50, device=device, dtype=torch.float64)
q[1, 10] = 0
q1, q2 = q.clone().requires_grad_(), q.clone().requires_grad_()
scanops.cumprod(q1, 1).sum().backward()
torch.cumprod(q2, 1).sum().backward()

compiled = torch.compile(lambda x, m: scanops.masked_cumsum(x.sin(), m, 1, reverse=True) * 2)

checks = [
    ("cumsum(x, 1)", scanops.cumsum(x, 1), x.cumsum(1)),
    ("cumsum(x, 1, exclusive=True)", scanops.cumsum(x, 1, exclusive=True), x.cumsum(1) - x),
    ("cumsum(x, 0, dtype=float64)", scanops.cumsum(x, 0, dtype=torch.float64),
     x.double().cumsum(0)),
    ("masked_cumsum(x, mask, 1)", scanops.masked_cumsum(x, mask, 1), (x * mask).cumsum(1)),
    ("cumprod(p, 1, reverse=True)", scanops.cumprod(p, 1, reverse=True),
     p.flip(1).cumprod(1).flip(1)),
    ("linear_recurrence(a, u, 1)", scanops.linear_recurrence(a, u, 1), loop_recurrence(a, u)),
    ("grad of cumprod (a zero inside)", q1.grad, q2.grad),
    ("torch.compile(masked_cumsum)", compiled(x, mask),
     (x.sin() * mask).flip(1).cumsum(1).flip(1) * 2),
]

print(f"scanops {scanops.__version__} from {scanops.library_path()}, torch {torch.__version__}")
failures = 0
for name, got, want in checks:
    ok = got.dtype == want.dtype and torch.allclose(got, want, rtol=1e-4, atol=1e-3)
    err = (got.double() - want.double()).abs().max().item()
    print(f"{name:34s} {device:5s} {str(got.dtype):14s} max|err| {err:.1e}  "
          f"{'ok' if ok else 'MISMATCH'}")
    failures += not ok
print("all checks passed" if not failures else f"{failures} check(s) FAILED")
sys.exit(1 if failures else 0)
