"""scanops: scan (prefix) operators for PyTorch, on CPU and CUDA.

Importing this package loads the scanops shared library (``libscanops.so``) into PyTorch
with :func:`torch.ops.load_library`, which registers the ops ``torch.ops.scanops.*``. The
functions below are thin, typed wrappers around those ops: they run through the PyTorch
dispatcher, so they work in eager mode, under autograd, ``torch.compile``, ``torch.export``
and AOTInductor. TorchScript code calls ``torch.ops.scanops.*`` directly.

Where the library is looked for, first match wins:

1. the environment variable ``SCANOPS_LIBRARY`` (a path to the ``.so``);
2. inside this package: ``scanops/lib/libscanops.so`` is where ``pip install .`` (a wheel)
   puts it;
3. next to this package: ``<prefix>/lib/python/scanops`` is where ``cmake --install`` puts
   it, with the library two levels up in ``<prefix>/lib``;
4. the source tree's default build directory, ``<repo>/build/libscanops.so``.

An installed package (pip or ``cmake --install``) records the torch it was built against
(``scanops._build_info``); importing it with another torch major.minor raises ImportError
(libtorch has no stable C++ ABI: rebuild scanops), or only warns with
``SCANOPS_ALLOW_TORCH_MISMATCH=1``.

If the ``scanops`` ops are already registered (another copy of the library was loaded
first), nothing is loaded again.

Semantics, for a line ``x[0..n-1]`` taken along ``dim``:

* inclusive (default): ``y[i] = x[0] (+) ... (+) x[i]``
* ``exclusive=True``: ``y[i] = x[0] (+) ... (+) x[i-1]``, ``y[0]`` = identity (0 or 1)
* ``reverse=True``: runs from the end, ``y[i] = x[i] (+) ... (+) x[n-1]``

Result dtype as :func:`torch.cumsum`: ``dtype`` if given, else int64 for integral and bool
inputs, else the input's dtype.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import List, Optional

import torch

__all__ = [
    "cumsum",
    "masked_cumsum",
    "cumprod",
    "linear_recurrence",
    "logcumsumexp",
    "cummax",
    "cummin",
    "segment_cumsum",
    "segment_masked_cumsum",
    "segment_cumprod",
    "segment_linear_recurrence",
    "segment_logcumsumexp",
    "segment_cummax",
    "segment_cummin",
    "library_path",
    "cmake_prefix_path",
    "build_info",
    "__version__",
]

_LIB_NAME = "libscanops.so"
_OPS = ("cumsum", "masked_cumsum", "cumprod", "linear_recurrence")


def _candidates() -> List[Path]:
    here = Path(__file__).resolve().parent
    found = []
    env = os.environ.get("SCANOPS_LIBRARY")
    if env:
        found.append(Path(env))
    found += [
        here / "lib" / _LIB_NAME,  # pip install . / a wheel: site-packages/scanops/lib
        here / _LIB_NAME,  # the library copied into the package
        here.parent / _LIB_NAME,  # <prefix>/lib/scanops + <prefix>/lib/libscanops.so
        here.parent.parent / _LIB_NAME,  # <prefix>/lib/python/scanops (cmake --install)
        here.parent.parent / "build" / _LIB_NAME,  # <repo>/python/scanops -> <repo>/build
    ]
    return found


def _ops_registered() -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw("scanops::cumsum", "")
        return True
    except RuntimeError:
        return False


def _load() -> Optional[str]:
    if _ops_registered():
        # Loaded already (by another import path or by torch.ops.load_library directly).
        for lib in getattr(torch.ops, "loaded_libraries", ()):
            if "scanops" in os.path.basename(lib):
                return str(lib)
        return None
    candidates = _candidates()
    if os.environ.get("SCANOPS_LIBRARY"):
        candidates = candidates[:1]  # an explicit choice is not second-guessed
    for path in candidates:
        if path.is_file():
            path = path.absolute()
            torch.ops.load_library(str(path))
            return str(path)
    tried = "\n  ".join(str(p) for p in candidates)
    raise ImportError(
        "scanops: cannot find the scanops library (libscanops.so). Looked in:\n  "
        + tried
        + "\nBuild it (cmake --build build) or set SCANOPS_LIBRARY=/path/to/libscanops.so."
    )


try:
    from . import _build_info  # written by CMake into installed packages only
except ImportError:
    _build_info = None


def _major_minor(version: str) -> tuple:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else ()


def _check_torch_version() -> None:
    if _build_info is None or not _build_info.TORCH_VERSION:
        return
    built, running = _build_info.TORCH_VERSION, torch.__version__
    if _major_minor(built) == _major_minor(running):
        if _build_info.WITH_CUDA and torch.version.cuda is None:
            raise ImportError(
                f"scanops {_build_info.VERSION} was built with its CUDA back end against torch "
                f"{built} (CUDA {_build_info.TORCH_CUDA}), but the installed torch {running} is a "
                "CPU-only build: rebuild scanops against this torch (pip install "
                "--no-build-isolation --force-reinstall <scanops source>)")
        return
    message = (
        f"scanops {_build_info.VERSION} was built against torch {built}, but torch "
        f"{running} is installed. libtorch has no stable C++ ABI across minor versions: "
        f"rebuild scanops against this torch (pip install --no-build-isolation "
        f"--force-reinstall <scanops source>), or install torch=={'.'.join(map(str, _major_minor(built)))}.*")
    if os.environ.get("SCANOPS_ALLOW_TORCH_MISMATCH") == "1":
        warnings.warn(message + " (loading anyway: SCANOPS_ALLOW_TORCH_MISMATCH=1)",
                      RuntimeWarning, stacklevel=3)
        return
    raise ImportError(message + ". Set SCANOPS_ALLOW_TORCH_MISMATCH=1 to try anyway.")


_check_torch_version()
_LIBRARY_PATH = _load()


def _library_version(path: Optional[str]) -> str:
    # libscanops.so -> libscanops.so.0 -> libscanops.so.0.1.0 (CMake's VERSION property)
    if path:
        m = re.search(r"\.so\.(\d+\.\d+\.\d+)$", os.path.realpath(path))
        if m:
            return m.group(1)
    # A wheel holds one libscanops.so (wheels have no symbolic links); an installed package
    # records its version.
    if _build_info is not None and path:
        return _build_info.VERSION
    return "unknown"


__version__ = _library_version(_LIBRARY_PATH)


def build_info() -> dict:
    """What the installed library was built against: scanops version, torch version,
    torch's CUDA version, whether the CUDA back end is in, the CUDA architectures. Empty for
    the source tree's package (no install step wrote it)."""
    if _build_info is None:
        return {}
    return {k.lower(): getattr(_build_info, k) for k in
            ("VERSION", "TORCH_VERSION", "TORCH_CUDA", "WITH_CUDA", "CUDA_ARCHS")}


def cmake_prefix_path() -> Optional[str]:
    """The prefix holding ``lib/cmake/scanops`` (the CMake package, for
    ``find_package(scanops)``) and ``include/scanops``: the package directory itself for a
    pip install, ``<prefix>`` for ``cmake --install``; ``None`` for the source tree."""
    here = Path(__file__).resolve().parent
    for prefix in (here, here.parent.parent.parent):
        if (prefix / "lib" / "cmake" / "scanops" / "scanopsConfig.cmake").is_file():
            return str(prefix)
    return None


def library_path() -> Optional[str]:
    """The path of the loaded scanops library (``None`` if it was loaded by someone else
    without going through :func:`torch.ops.load_library`)."""
    return _LIBRARY_PATH


def _lower_dtype(op, x: torch.Tensor, dim: int, exclusive: bool, reverse: bool,
                 dtype: Optional[torch.dtype], *extra: torch.Tensor,
                 initial: Optional[torch.Tensor] = None,
                 reset: Optional[torch.Tensor] = None) -> torch.Tensor:
    # While torch.export traces, express `dtype=` as explicit casts. Exact same result
    # (the input is converted to `dtype` before the scan; integers wrap, so an int64
    # accumulation cast down equals a narrower one), and it keeps `dtype` out of the
    # serialized op call: AOTInductor's proxy executor in torch 2.11 decodes a ScalarType
    # argument with the wrong numbering (float32 arrives as float64, float64 as complex32).
    # An integral `dtype` scans in int64 here, so `initial` (of `dtype`) is widened to it.
    if initial is not None and not (dtype.is_floating_point or dtype.is_complex):
        initial = initial.to(torch.int64)
    y = op(x.to(dtype), *extra, dim, exclusive=exclusive, reverse=reverse, initial=initial,
           reset=reset)
    return y if y.dtype == dtype else y.to(dtype)


def cumsum(x: torch.Tensor, dim: int, *, exclusive: bool = False, reverse: bool = False,
           dtype: Optional[torch.dtype] = None,
           initial: Optional[torch.Tensor] = None,
           reset: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cumulative sum of ``x`` along ``dim``.

    Args:
        x: input tensor, any shape and strides; float32/64, float16, bfloat16, complex64/128,
            int8/16/32/64, uint8 or bool.
        dim: the dimension to scan (negative counts from the end).
        exclusive: ``y[i]`` sums ``x[0..i-1]`` (``y[0] = 0``) instead of ``x[0..i]``.
        reverse: scan from the end of the dimension.
        dtype: result dtype; ``x`` is converted to it first. Default: int64 for integral and
            bool inputs, else ``x.dtype``.
        initial: the value each line starts from (``y[i] = initial + x[0] + ... + x[i]``;
            exclusive scans return it first; reverse scans take it in at the end of the line):
            the result dtype, ``x``'s shape without ``dim`` or broadcastable to it. Default:
            0. Continue a scan in chunks by passing the last value of the previous chunk's
            result.
        reset: segments (every op takes it): a bool tensor broadcastable to ``x``'s shape,
            ``True`` where a new segment starts along ``dim`` (positions in the forward order,
            whatever ``reverse``). Each segment is scanned as a line of its own (restarting from
            0; ``exclusive`` gives its first element 0; ``reverse`` runs it from its end);
            ``initial`` applies to the line's first segment in scan order. For jagged tensors
            (values and offsets) see :func:`segment_cumsum`.

    Returns:
        A new contiguous tensor of ``x``'s shape. Differentiable in ``x`` and ``initial``.
    """
    if dtype is not None and torch.compiler.is_exporting():
        return _lower_dtype(torch.ops.scanops.cumsum, x, dim, exclusive, reverse, dtype,
                            initial=initial, reset=reset)
    return torch.ops.scanops.cumsum(x, dim, exclusive=exclusive, reverse=reverse, dtype=dtype,
                                    initial=initial, reset=reset)


def masked_cumsum(x: torch.Tensor, mask: torch.Tensor, dim: int, *, exclusive: bool = False,
                  reverse: bool = False, dtype: Optional[torch.dtype] = None,
                  initial: Optional[torch.Tensor] = None,
                  reset: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cumulative sum of ``x * mask`` along ``dim``, without materialising the product.

    Args:
        x: input tensor (dtypes as :func:`cumsum`).
        mask: bool tensor broadcastable to ``x``'s shape, on ``x``'s device. Masked-off
            elements contribute 0.
        dim, exclusive, reverse, dtype, initial, reset: as :func:`cumsum` (``initial`` is
            never masked; a masked-off element may still start a segment).

    Returns:
        A new tensor of ``x``'s shape. Differentiable in ``x`` and ``initial``.
    """
    if dtype is not None and torch.compiler.is_exporting():
        return _lower_dtype(torch.ops.scanops.masked_cumsum, x, dim, exclusive, reverse, dtype,
                            mask, initial=initial, reset=reset)
    return torch.ops.scanops.masked_cumsum(x, mask, dim, exclusive=exclusive, reverse=reverse,
                                           dtype=dtype, initial=initial, reset=reset)


def cumprod(x: torch.Tensor, dim: int, *, exclusive: bool = False, reverse: bool = False,
            dtype: Optional[torch.dtype] = None,
            initial: Optional[torch.Tensor] = None,
            reset: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cumulative product of ``x`` along ``dim``.

    Args and result as :func:`cumsum` (``exclusive`` puts 1, or ``initial``, first;
    ``initial`` multiplies every product; ``reset`` restarts the product at 1). The gradient is exact when ``x`` contains zeros,
    O(n), and needs no host synchronisation.
    """
    if dtype is not None and torch.compiler.is_exporting():
        return _lower_dtype(torch.ops.scanops.cumprod, x, dim, exclusive, reverse, dtype,
                            initial=initial, reset=reset)
    return torch.ops.scanops.cumprod(x, dim, exclusive=exclusive, reverse=reverse, dtype=dtype,
                                     initial=initial, reset=reset)


def linear_recurrence(a: torch.Tensor, x: torch.Tensor, dim: int, *, exclusive: bool = False,
                      reverse: bool = False,
                      initial: Optional[torch.Tensor] = None,
                      reset: Optional[torch.Tensor] = None) -> torch.Tensor:
    """First-order linear recurrence along ``dim``: ``h[t] = a[t] * h[t-1] + x[t]``,
    ``h[-1] = initial`` (default 0).

    Args:
        a: coefficients, ``x``'s dtype (float32/64, float16, bfloat16, complex64/128),
            broadcastable to
            ``x``'s shape, on ``x``'s device.
        x: inputs.
        dim: the time dimension (negative counts from the end).
        exclusive: return ``h[t-1]`` (0 first) instead of ``h[t]``.
        reverse: run from the end: ``h[t] = a[t] * h[t+1] + x[t]`` (``initial`` is then
            ``h[n]``).
        initial: the state before the first step (an SSM's ``h0``; continue a recurrence in
            chunks with the previous chunk's last ``h``): ``x``'s dtype, ``x``'s shape without
            ``dim`` or broadcastable to it.
        reset: segments, as :func:`cumsum`: ``h[t-1]`` is 0 at a segment's first step (an
            episode start; ``a`` there is not used).

    Returns:
        ``h``, with ``x``'s shape and dtype. Differentiable in ``a``, ``x`` and ``initial``.
    """
    return torch.ops.scanops.linear_recurrence(a, x, dim, exclusive=exclusive, reverse=reverse,
                                               initial=initial, reset=reset)


def logcumsumexp(x: torch.Tensor, dim: int, *, exclusive: bool = False,
                 reverse: bool = False,
                 initial: Optional[torch.Tensor] = None,
                 reset: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cumulative log-sum-exp along ``dim``: ``y[i] = log(exp(x[0]) + ... + exp(x[i]))``,
    computed stably, as :func:`torch.logcumsumexp`.

    Args:
        x: floating or complex tensor (float32/64, float16, bfloat16, complex64/128).
        dim, exclusive, reverse: as :func:`cumsum`; ``exclusive`` puts ``-inf`` first.
        initial: a log-space value log-added before the first element (default ``-inf``):
            ``x``'s dtype, ``x``'s shape without ``dim`` or broadcastable to it.
        reset: segments, as :func:`cumsum` (each restarts from ``-inf``).

    Returns:
        A new tensor of ``x``'s shape and dtype. Differentiable in ``x`` and ``initial``
        (twice and more).
    """
    return torch.ops.scanops.logcumsumexp(x, dim, exclusive=exclusive, reverse=reverse,
                                          initial=initial, reset=reset)


def cummax(x: torch.Tensor, dim: int, *, exclusive: bool = False, reverse: bool = False,
           initial: Optional[torch.Tensor] = None,
           reset: Optional[torch.Tensor] = None):
    """Running maximum along ``dim`` and its position, as :func:`torch.cummax`.

    Of equal values the latest in scan order wins; NaN propagates, with the index of the
    latest NaN. ``reverse`` scans from the end; indices are positions in the original order.
    ``exclusive``: the first position in scan order holds ``-inf`` (the dtype's lowest value
    for integers, ``False`` for bool) with index ``-1``.

    Args:
        x: real or bool tensor (complex numbers have no order).
        initial: the running maximum each line starts from (``x``'s dtype, ``x``'s shape
            without ``dim`` or broadcastable to it); positions where it is still the maximum
            get index ``-1`` (an element equal to it wins, as later elements do).
        reset: segments, as :func:`cumsum`; indices stay positions along the whole line.

    Returns:
        ``(values, indices)``: ``x``'s dtype and int64, ``x``'s shape. Differentiable in
        ``x`` (the gradient goes to the selected elements).
    """
    return torch.ops.scanops.cummax(x, dim, exclusive=exclusive, reverse=reverse,
                                    initial=initial, reset=reset)


def cummin(x: torch.Tensor, dim: int, *, exclusive: bool = False, reverse: bool = False,
           initial: Optional[torch.Tensor] = None,
           reset: Optional[torch.Tensor] = None):
    """Running minimum along ``dim`` and its position, as :func:`torch.cummin`; see
    :func:`cummax` (``exclusive`` puts ``+inf``, the dtype's highest value or ``True``
    first, with index ``-1``)."""
    return torch.ops.scanops.cummin(x, dim, exclusive=exclusive, reverse=reverse,
                                    initial=initial, reset=reset)


# ---- Jagged tensors: segments given by offsets ----------------------------------------------

def _jagged(values, offsets, op):
    """(values, offsets, nested): a torch.nested jagged tensor's values and offsets, or the
    arguments as given."""
    if getattr(values, "is_nested", False):
        if offsets is not None:
            raise ValueError(f"scanops.{op}: argument 'offsets' must be None when the values "
                             "are a nested (jagged) tensor: its offsets are used")
        if values.layout != torch.jagged or values.dim() < 2 or values._ragged_idx != 1:
            raise ValueError(f"scanops.{op}: a nested tensor must have layout=torch.jagged and "
                             "its ragged dim at dim 1")
        return values.values(), values.offsets(), values
    if offsets is None:
        raise ValueError(f"scanops.{op}: argument 'offsets' is required unless the values are a "
                         "nested (jagged) tensor")
    return values, offsets, None


def _plain(t):
    return t.values() if getattr(t, "is_nested", False) else t


def _nest(out, like):
    if like is None:
        return out
    return torch.nested.nested_tensor_from_jagged(out, like.offsets())


def segment_cumsum(values: torch.Tensor, offsets: Optional[torch.Tensor] = None, *,
                   exclusive: bool = False, reverse: bool = False,
                   dtype: Optional[torch.dtype] = None,
                   initial: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cumulative sum within each segment of a jagged tensor.

    Args:
        values: ``(total, *features)``, scanned along dim 0 within each segment
            ``values[offsets[b]:offsets[b+1]]``; or a ``torch.nested`` tensor with
            ``layout=torch.jagged`` (then ``offsets`` is None and the result is nested too).
        offsets: int64 (or int32), 1-D, ``B + 1`` entries from 0 to ``total``,
            non-decreasing (empty segments allowed). Checked; on CUDA that costs one host
            synchronisation.
        exclusive, reverse, dtype: as :func:`cumsum`, per segment.
        initial: ``(B, *features)`` or broadcastable to it, the result dtype: segment ``b``
            starts from ``initial[b]`` (an SSM's per-sequence ``h0``). With it the values are
            gathered into a joined tensor and back (two more passes over the data).

    Returns:
        ``values``' shape (nested if the input was). Differentiable in ``values`` and
        ``initial``.
    """
    v, o, like = _jagged(values, offsets, "segment_cumsum")
    return _nest(torch.ops.scanops.segment_cumsum(v, o, exclusive=exclusive, reverse=reverse,
                                                  dtype=dtype, initial=initial), like)


def segment_masked_cumsum(values: torch.Tensor, mask: torch.Tensor,
                          offsets: Optional[torch.Tensor] = None, *, exclusive: bool = False,
                          reverse: bool = False, dtype: Optional[torch.dtype] = None,
                          initial: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`segment_cumsum` of ``values * mask`` (``mask`` bool, broadcastable to
    ``values``, or nested like it)."""
    v, o, like = _jagged(values, offsets, "segment_masked_cumsum")
    return _nest(torch.ops.scanops.segment_masked_cumsum(
        v, _plain(mask), o, exclusive=exclusive, reverse=reverse, dtype=dtype,
        initial=initial), like)


def segment_cumprod(values: torch.Tensor, offsets: Optional[torch.Tensor] = None, *,
                    exclusive: bool = False, reverse: bool = False,
                    dtype: Optional[torch.dtype] = None,
                    initial: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cumulative product within each segment; arguments as :func:`segment_cumsum`."""
    v, o, like = _jagged(values, offsets, "segment_cumprod")
    return _nest(torch.ops.scanops.segment_cumprod(v, o, exclusive=exclusive, reverse=reverse,
                                                   dtype=dtype, initial=initial), like)


def segment_linear_recurrence(a: torch.Tensor, x: torch.Tensor,
                              offsets: Optional[torch.Tensor] = None, *,
                              exclusive: bool = False, reverse: bool = False,
                              initial: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``h[t] = a[t] * h[t-1] + x[t]`` within each segment (variable-length sequences packed
    along dim 0, the ``cu_seqlens`` layout of SSM libraries), ``h[-1] = initial[b]`` (default
    0) for segment ``b``. ``a``: broadcastable to ``x`` (or nested like it); ``x`` and the other
    arguments as :func:`segment_cumsum`."""
    v, o, like = _jagged(x, offsets, "segment_linear_recurrence")
    return _nest(torch.ops.scanops.segment_linear_recurrence(
        _plain(a), v, o, exclusive=exclusive, reverse=reverse, initial=initial), like)


def segment_logcumsumexp(values: torch.Tensor, offsets: Optional[torch.Tensor] = None, *,
                         exclusive: bool = False, reverse: bool = False,
                         initial: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cumulative log-sum-exp within each segment; arguments as :func:`segment_cumsum`."""
    v, o, like = _jagged(values, offsets, "segment_logcumsumexp")
    return _nest(torch.ops.scanops.segment_logcumsumexp(v, o, exclusive=exclusive,
                                                        reverse=reverse, initial=initial), like)


def segment_cummax(values: torch.Tensor, offsets: Optional[torch.Tensor] = None, *,
                   exclusive: bool = False, reverse: bool = False,
                   initial: Optional[torch.Tensor] = None):
    """Running maximum within each segment: ``(values, indices)``, the indices counted from
    each segment's first row (``-1`` for ``initial[b]`` or the exclusive identity)."""
    v, o, like = _jagged(values, offsets, "segment_cummax")
    y, i = torch.ops.scanops.segment_cummax(v, o, exclusive=exclusive, reverse=reverse,
                                            initial=initial)
    return _nest(y, like), _nest(i, like)


def segment_cummin(values: torch.Tensor, offsets: Optional[torch.Tensor] = None, *,
                   exclusive: bool = False, reverse: bool = False,
                   initial: Optional[torch.Tensor] = None):
    """Running minimum within each segment; see :func:`segment_cummax`."""
    v, o, like = _jagged(values, offsets, "segment_cummin")
    y, i = torch.ops.scanops.segment_cummin(v, o, exclusive=exclusive, reverse=reverse,
                                            initial=initial)
    return _nest(y, like), _nest(i, like)


# DTensor support (scanops.distributed, docs/distributed.md): the ops' rules for DTensor are
# registered when torch.distributed.tensor is imported (now, if it is already); importing
# scanops never imports it, and works where torch has no distributed support.
try:
    from . import distributed  # noqa: E402
    distributed._register_lazily()
except Exception as _error:  # pragma: no cover
    warnings.warn(f"scanops: DTensor support unavailable: {_error!r}", RuntimeWarning)
