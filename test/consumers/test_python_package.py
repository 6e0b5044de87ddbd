"""The pure-Python package python/scanops: library lookup, the typed wrappers, torch.compile
and torch.export behaviour. Uses the source tree's package and build (SCANOPS_LIBRARY or
<repo>/build/libscanops.so)."""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
BUILD_LIB = Path(os.environ.get("SCANOPS_BUILD_DIR", REPO / "build")) / "libscanops.so"
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))
try:
    import scanops
except ImportError as e:  # the library is not built
    pytest.skip(f"scanops package cannot load its library: {e}", allow_module_level=True)

WRAPPERS = ("cumsum", "masked_cumsum", "cumprod", "linear_recurrence")


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("SCANOPS_LIBRARY", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**base, **env}, timeout=300)


def test_signatures_and_docstrings():
    for name in WRAPPERS:
        fn = getattr(scanops, name)
        params = inspect.signature(fn).parameters
        assert fn.__doc__ and len(fn.__doc__) > 80, name
        for flag in ("exclusive", "reverse"):
            assert params[flag].kind is inspect.Parameter.KEYWORD_ONLY, (name, flag)
            assert params[flag].default is False
        assert ("dtype" in params) == (name != "linear_recurrence")
    assert set(scanops.__all__) >= set(WRAPPERS) | {"library_path"}


def test_library_path_and_version():
    assert scanops.library_path() and Path(scanops.library_path()).exists()
    version = re.search(r"project\(scanops VERSION (\S+)", (REPO / "CMakeLists.txt").read_text())
    assert scanops.__version__ == version.group(1)


def test_wrappers_against_torch():
    torch.manual_seed(0)
    x = torch.randn(5, 40, dtype=torch.float64)
    mask = torch.rand(1, 40) > 0.5
    a = torch.rand(5, 40, dtype=torch.float64)
    torch.testing.assert_close(scanops.cumsum(x, -1), x.cumsum(-1))
    torch.testing.assert_close(scanops.cumsum(x, 1, exclusive=True, reverse=True),
                               x.flip(1).cumsum(1).flip(1) - x)
    torch.testing.assert_close(scanops.masked_cumsum(x, mask, 1), (x * mask).cumsum(1))
    torch.testing.assert_close(scanops.cumprod(x, 0, dtype=torch.float32),
                               x.float().cumprod(0))
    h = scanops.linear_recurrence(a, x, 1, reverse=True)
    ref, acc = torch.empty_like(x), torch.zeros(5, dtype=torch.float64)
    for t in reversed(range(40)):
        acc = a[:, t] * acc + x[:, t]
        ref[:, t] = acc
    torch.testing.assert_close(h, ref)
    assert scanops.cumsum(torch.ones(3, dtype=torch.bool), 0).dtype == torch.int64


@pytest.mark.parametrize("op", ["cumsum", "masked_cumsum", "cumprod"])
@pytest.mark.parametrize("src,dst", [
    (torch.float32, torch.float64), (torch.float64, torch.float16),
    (torch.float32, torch.bfloat16), (torch.int64, torch.int8), (torch.int32, torch.int16),
    (torch.bool, torch.int32), (torch.int16, torch.uint8), (torch.uint8, torch.float32)])
def test_export_lowering_of_dtype_is_exact(op, src, dst):
    """While exporting, the wrappers pass `dtype` as casts (see scanops._lower_dtype). Same
    result, bit for bit: integers wrap, so an int64 scan cast down equals a narrower one."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 300, generator=g) * 50).to(src)
    mask = torch.rand(4, 300, generator=g) > 0.3
    extra = (mask,) if op == "masked_cumsum" else ()
    for exclusive, reverse in ((False, False), (True, True)):
        direct = getattr(torch.ops.scanops, op)(x, *extra, 1, exclusive=exclusive,
                                                reverse=reverse, dtype=dst)
        lowered = scanops._lower_dtype(getattr(torch.ops.scanops, op), x, 1, exclusive,
                                       reverse, dst, *extra)
        assert lowered.dtype == direct.dtype == dst
        torch.testing.assert_close(lowered, direct, rtol=0, atol=0, equal_nan=True)


def test_export_graph_has_no_dtype_argument():
    class M(torch.nn.Module):
        def forward(self, x, m):
            return (scanops.cumsum(x, 1, dtype=torch.float64),
                    scanops.masked_cumsum(x, m, 1, dtype=torch.int32),
                    scanops.cumprod(x, 1, exclusive=True))

    x, m = torch.randn(3, 8), torch.rand(3, 8) > 0.5
    ep = torch.export.export(M(), (x, m))
    scans = [n for n in ep.graph.nodes if "scanops" in str(n.target)]
    assert len(scans) == 3
    assert all(n.kwargs.get("dtype") is None for n in scans), [n.kwargs for n in scans]
    for got, want in zip(ep.module()(x, m), M()(x, m)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


def test_torch_compile_fullgraph():
    """The wrappers trace into the graph (no graph break) with their keyword arguments."""
    def f(x, m, a):
        return (scanops.cumsum(x, 1, exclusive=True, dtype=torch.float64),
                scanops.masked_cumsum(x, m, 1, reverse=True),
                scanops.cumprod(x, 0),
                scanops.linear_recurrence(a, x, 1))

    x, m, a = torch.randn(4, 16), torch.rand(4, 16) > 0.5, torch.rand(4, 16)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    for got, want in zip(compiled(x, m, a), f(x, m, a)):
        torch.testing.assert_close(got, want)


def test_autograd_through_wrappers():
    x = torch.rand(3, 7, dtype=torch.float64, requires_grad=True)
    a = torch.rand(3, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: scanops.cumprod(x, 1, reverse=True), (x,))
    assert torch.autograd.gradcheck(lambda a, x: scanops.linear_recurrence(a, x, 1), (a, x))


@pytest.mark.skipif(not BUILD_LIB.exists(), reason=f"no {BUILD_LIB}")
def test_lookup_install_layout(tmp_path):
    """<prefix>/lib/python/scanops finds <prefix>/lib/libscanops.so (cmake --install's layout)
    before the source tree's build."""
    pkg = tmp_path / "lib" / "python" / "scanops"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text((REPO / "python" / "scanops" / "__init__.py").read_text())
    (tmp_path / "lib" / "libscanops.so").symlink_to(BUILD_LIB.resolve())
    r = python("import scanops; print(scanops.library_path())",
               PYTHONPATH=str(tmp_path / "lib" / "python"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "lib" / "libscanops.so")


def test_lookup_env_and_error_message(tmp_path):
    missing = tmp_path / "nowhere" / "libscanops.so"
    r = python("import scanops", SCANOPS_LIBRARY=str(missing),
               PYTHONPATH=str(REPO / "python"))
    assert r.returncode != 0
    assert "ImportError" in r.stderr and str(missing) in r.stderr
    assert "SCANOPS_LIBRARY" in r.stderr


@pytest.mark.skipif(not BUILD_LIB.exists(), reason=f"no {BUILD_LIB}")
def test_already_loaded_library_is_reused():
    """If the ops are registered already (torch.ops.load_library by hand), importing the
    package loads nothing more (a second copy would register the namespace twice)."""
    code = ("import torch; torch.ops.load_library(%r); import scanops; "
            "print(scanops.library_path())" % str(BUILD_LIB))
    r = python(code, SCANOPS_LIBRARY="/nonexistent/libscanops.so",
               PYTHONPATH=str(REPO / "python"))
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(BUILD_LIB)


def test_export_save_load_dynamic(tmp_path):
    """An ExportedProgram using the ops (dynamic batch size) survives torch.export.save/load."""
    class M(torch.nn.Module):
        def forward(self, x, a):
            return (torch.ops.scanops.cumsum(x, 1, dtype=torch.float64, reverse=True),
                    scanops.linear_recurrence(a, x, 1, exclusive=True))

    x, a = torch.randn(3, 8), torch.rand(3, 8)
    batch = torch.export.Dim("batch")
    ep = torch.export.export(M(), (x, a), dynamic_shapes={"x": {0: batch}, "a": {0: batch}})
    torch.export.save(ep, tmp_path / "m.pt2")
    loaded = torch.export.load(tmp_path / "m.pt2")
    x, a = torch.randn(5, 8), torch.rand(5, 8)
    for got, want in zip(loaded.module()(x, a), M()(x, a)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


@pytest.mark.skipif(not BUILD_LIB.exists(), reason=f"no {BUILD_LIB}")
def test_torch_version_mismatch_is_refused(tmp_path):
    """An installed package records the torch it was built against (_build_info.py, written
    by CMake); under another torch major.minor the import fails clearly, or only warns with
    SCANOPS_ALLOW_TORCH_MISMATCH=1."""
    pkg = tmp_path / "scanops"
    pkg.mkdir()
    for src in (REPO / "python" / "scanops").glob("*.py"):  # the package as installed
        (pkg / src.name).write_text(src.read_text())
    (pkg / "_build_info.py").write_text(
        'VERSION = "0.1.0"\nTORCH_VERSION = "1.0.0+cu999"\nTORCH_CUDA = ""\n'
        'WITH_CUDA = False\nCUDA_ARCHS = ""\n')
    code = "import scanops; print(scanops.library_path(), scanops.build_info()['torch_version'])"
    r = python(code, PYTHONPATH=str(tmp_path), SCANOPS_LIBRARY=str(BUILD_LIB))
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "built against torch 1.0.0+cu999" in r.stderr, r.stderr
    assert f"but torch {torch.__version__} is installed" in r.stderr, r.stderr
    r = python(code, PYTHONPATH=str(tmp_path), SCANOPS_LIBRARY=str(BUILD_LIB),
               SCANOPS_ALLOW_TORCH_MISMATCH="1")
    assert r.returncode == 0, r.stderr
    assert "RuntimeWarning" in r.stderr and r.stdout.split()[-1] == "1.0.0+cu999"
    # the same major.minor: no complaint
    (pkg / "_build_info.py").write_text(
        f'VERSION = "0.1.0"\nTORCH_VERSION = "{torch.__version__}"\nTORCH_CUDA = ""\n'
        'WITH_CUDA = False\nCUDA_ARCHS = ""\n')
    r = python(code, PYTHONPATH=str(tmp_path), SCANOPS_LIBRARY=str(BUILD_LIB))
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


@pytest.mark.skipif(not BUILD_LIB.exists(), reason=f"no {BUILD_LIB}")
def test_main_without_cmake_package():
    """python -m scanops from the source tree: the summary works; --cmake-prefix-path says
    there is no CMake package (the source tree's package has none)."""
    env = dict(PYTHONPATH=str(REPO / "python"), SCANOPS_LIBRARY=str(BUILD_LIB))
    r = python("import sys; from scanops.__main__ import main; sys.exit(main([]))", **env)
    assert r.returncode == 0, r.stderr
    assert "scanops " in r.stdout and "library:" in r.stdout
    r = python("import sys; from scanops.__main__ import main; "
               "sys.exit(main(['--cmake-prefix-path']))", **env)
    assert r.returncode != 0 and "no CMake package" in r.stderr
