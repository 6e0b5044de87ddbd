"""Loads libscanops.so for the Python test suite.

The library is looked up in the environment variable ``SCANOPS_LIBRARY`` (a path to the .so),
falling back to ``<repo>/build/libscanops.so``. If the ``scanops`` ops are already registered
(e.g. ``import scanops`` ran first in the same process), nothing is loaded again.

``SCANOPS_TEST_SEED`` (default 0) changes every random draw of the suite.
"""
from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(HERE) not in sys.path:  # `import reference` from the test modules (importlib mode)
    sys.path.insert(0, str(HERE))


def _ops_registered() -> bool:
    try:
        torch.ops.scanops.cumsum.default  # noqa: B018
        return True
    except (AttributeError, RuntimeError):
        return False


def library_path() -> Path:
    env = os.environ.get("SCANOPS_LIBRARY")
    return Path(env) if env else REPO / "build" / "libscanops.so"


def _load() -> None:
    if _ops_registered():
        return
    path = library_path()
    if not path.is_file():
        raise pytest.UsageError(
            f"scanops library not found at {path} (set SCANOPS_LIBRARY or build it: "
            "cmake --build build)")
    torch.ops.load_library(str(path))
    if not _ops_registered():
        raise pytest.UsageError(f"{path} was loaded but registered no torch.ops.scanops ops")


_load()

BASE_SEED = int(os.environ.get("SCANOPS_TEST_SEED", "0"))


def pytest_report_header(config):
    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CUDA tests skip)"
    return [f"scanops library: {library_path()}", f"torch {torch.__version__}, CUDA device: {cuda}",
            f"SCANOPS_TEST_SEED={BASE_SEED}"]


@pytest.fixture
def seed(request) -> int:
    """A seed per test (stable across runs, different per test id and SCANOPS_TEST_SEED)."""
    return (zlib.crc32(request.node.nodeid.encode()) + 1000003 * BASE_SEED) % (2**31)


@pytest.fixture(autouse=True)
def _restore_num_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)
