"""The fuzz (fuzz_ops.py) in the test suite: fixed seeds, the same cases every run, and one
fresh seed per run, which CI has never seen (printed; a failure's message holds the command
that replays the case). About 15-20 s on a 2-core machine per device.

SCANOPS_FUZZ_SECONDS: the fresh seed's time budget (default 5); SCANOPS_FUZZ_SEED: use this
seed instead of a fresh one (to replay a run whose fresh seed failed).
"""
from __future__ import annotations

import io
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_ops  # noqa: E402

fuzz_ops.load_library()

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# (seed, cases): 140 cases, every op (15-25 each), every input dtype, every layout, ranks 0-5,
# 13 bad inputs, 15 with an empty dim, 17 lines of 16384 elements or more.
FIXED = [(1, 40), (2, 60), (3, 40)]


def _run(seed, device, **kw):
    buf = io.StringIO()
    r = fuzz_ops.run(seed, device, out=buf, keep_going=True, **kw)
    assert r["ran"] > 0
    assert not r["failures"], (f"fuzz seed {seed} on {device}: {len(r['failures'])} of {r['ran']} cases failed\n"
                               + buf.getvalue())
    return r


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed,cases", FIXED, ids=[f"seed{s}" for s, _ in FIXED])
def test_fuzz_fixed_seed(seed, cases, device):
    _run(seed, device, cases=cases)


@pytest.mark.parametrize("device", DEVICES)
def test_fuzz_fresh_seed(device):
    env = os.environ.get("SCANOPS_FUZZ_SEED")
    seed = int(env) if env else int.from_bytes(os.urandom(8), "little") % (2**63)
    seconds = float(os.environ.get("SCANOPS_FUZZ_SECONDS", "5"))
    print(f"fuzz: fresh seed {seed} on {device} ({seconds:g} s); replay a case: "
          f"{fuzz_ops.replay_command(seed, 0, device).replace('--case 0', '--case N')}")
    r = _run(seed, device, seconds=seconds)
    print(f"fuzz: seed {seed}: {r['ran']} cases passed")
