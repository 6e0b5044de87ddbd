"""docs/recipes.md runs: every ```python block of it is executed, each in a fresh namespace,
so the recipes cannot rot. A block that picks its device with the line

    device = "cuda" if torch.cuda.is_available() else "cpu"

runs once per device here (that line replaced by `device = "cpu"` / `device = "cuda"`; the
CUDA run skips without a GPU). Then a few direct checks of the recipes' identities against
float64 references (loops written out), on the same devices.

The package is imported from the source tree (python/ on sys.path) after conftest.py has
loaded the library (SCANOPS_LIBRARY, else build/libscanops.so), as in
test/consumers/test_python_package.py.
"""
from __future__ import annotations

import contextlib
import io
import re
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "recipes.md"
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))
import scanops  # noqa: E402

DEVICE_LINE = 'device = "cuda" if torch.cuda.is_available() else "cpu"'
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))]


def doc_blocks():
    return [m.group(1) for m in _FENCE.finditer(DOC.read_text())]


BLOCKS = doc_blocks()


def test_doc_has_the_recipes():
    text = DOC.read_text()
    assert len(BLOCKS) >= 4, f"{DOC} has {len(BLOCKS)} python blocks"
    for op in ("linear_recurrence", "cumsum", "cummax", "logcumsumexp"):
        assert any(f"scanops.{op}(" in b for b in BLOCKS), op
    assert "SPEED_" not in text, "a speed line placeholder was left in docs/recipes.md"
    for b in BLOCKS:
        assert "import torch, scanops" in b, b[:200]
    for link in re.findall(r"\]\(([^)#]+\.md)", text):  # the records the speed lines quote
        assert (DOC.parent / link).is_file(), f"docs/recipes.md links to missing {link}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_doc_block_runs(index, device):
    src = BLOCKS[index]
    if DEVICE_LINE in src:
        src = src.replace(DEVICE_LINE, f'device = "{device}"')
    elif device != "cpu":
        pytest.skip("block has no device line")
    namespace = {"__name__": f"recipes_block_{index}"}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(src, f"docs/recipes.md block {index}", "exec"), namespace)
    except Exception:  # noqa: BLE001 -- any failure is the doc's
        pytest.fail(f"docs/recipes.md python block {index} (device {device}) raised:\n"
                    f"{traceback.format_exc()}\n--- block {index} ---\n{BLOCKS[index]}",
                    pytrace=False)


# Direct checks against float64 references.

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [0, 1])
def test_gae_matches_float64_loop(device, dim):
    g = torch.Generator().manual_seed(1)
    T, envs, gamma, lam = 300, 5, 0.99, 0.9
    r, v = torch.randn(T, envs, generator=g), torch.randn(T, envs, generator=g)
    last = torch.randn(envs, generator=g)
    done = (torch.rand(T, envs, generator=g) < 0.05).double()
    done[-1, 0] = 1  # an episode ending on the last step: no bootstrap for that env
    ref = torch.zeros(T, envs, dtype=torch.float64)
    acc = torch.zeros(envs, dtype=torch.float64)
    for t in reversed(range(T)):
        nv = last.double() if t == T - 1 else v[t + 1].double()
        nd = 1 - done[t]
        acc = r[t].double() + gamma * nd * nv - v[t].double() + gamma * lam * nd * acc
        ref[t] = acc
    f = (lambda x: x.to(device)) if dim == 0 else (lambda x: x.T.contiguous().to(device))
    rr, vv, dd = f(r), f(v), f(done.float())
    nd = 1 - dd
    nxt = torch.cat([vv.narrow(dim, 1, T - 1), last.to(device).unsqueeze(dim)], dim)
    adv = scanops.linear_recurrence(gamma * lam * nd, rr + gamma * nd * nxt - vv, dim,
                                    reverse=True)
    got = adv.cpu().double() if dim == 0 else adv.T.cpu().double()
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_top_p_mask_is_the_shifted_cumsum(device):
    g = torch.Generator().manual_seed(2)
    probs = (3 * torch.randn(6, 5000, generator=g, dtype=torch.float64)).softmax(-1)
    probs = probs.sort(-1, descending=True).values
    before = torch.cat([torch.zeros(6, 1, dtype=torch.float64), probs.cumsum(-1)[:, :-1]], 1)
    got = scanops.cumsum(probs.float().to(device), -1, exclusive=True).cpu()
    torch.testing.assert_close(got, before.float(), rtol=1e-5, atol=1e-6)
    assert (got[:, 0] == 0).all()
    for top_p in (0.5, 0.9, 0.99):  # a float64 mass tied with top_p to 1e-5 is out of reach
        far = (before - top_p).abs() > 1e-5
        assert torch.equal((got > top_p)[far], (before > top_p)[far])


@pytest.mark.parametrize("device", DEVICES)
def test_drawdown_matches_float64(device):
    g = torch.Generator().manual_seed(3)
    price = 100 * (0.01 * torch.randn(3, 20000, generator=g, dtype=torch.float64)).cumsum(1).exp()
    peak, at = scanops.cummax(price.float().to(device), 1)
    ref_peak = torch.from_numpy(np.maximum.accumulate(price.float().numpy(), 1))
    assert torch.equal(peak.cpu(), ref_peak)
    assert torch.equal(price.float().gather(1, at.cpu()), peak.cpu())  # positions hold the peak
    dd = (1 - price.float().to(device) / peak).max(1).values.cpu().double()
    ref_dd = (1 - price / price.cummax(1).values).max(1).values
    torch.testing.assert_close(dd, ref_dd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_log_cdf_matches_float64(device):
    g = torch.Generator().manual_seed(4)
    logp = (5 * torch.randn(4, 3000, generator=g, dtype=torch.float64)).log_softmax(-1) - 400
    logp = logp.float()
    ref = torch.logcumsumexp(logp.double(), -1)  # float64: exp(-420) ~ 1e-183 does not underflow
    got = scanops.logcumsumexp(logp.to(device), -1).cpu().double()
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=2e-5)
    assert logp.exp().cumsum(-1).log().isneginf().all()  # the naive float32 way fails
