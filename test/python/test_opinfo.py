"""PyTorch's own OpInfo samples (torch.testing._internal.common_methods_invocations.op_db) for
cumsum, cumprod, logcumsumexp, cummax, cummin, masked.cumsum and masked.cumprod, run through
scanops and compared with the torch op: every dtype the OpInfo lists for the device (complex
included), every sample (and its non-contiguous twin, as OpInfo makes it).

* cumsum / cumprod / logcumsumexp / cummax / cummin: the same input, dim and dtype= kwarg.
* masked.cumsum: ``masked_cumsum(input, mask, dim)`` (masked-off elements contribute 0, which
  is masked.cumsum's definition); no mask: ``cumsum``.
* masked.cumprod: masked-off elements count as 1 (the product's identity), expressed as
  ``cumprod(where(mask, input, 1), dim)``: no masked product op exists in scanops, so this
  checks cumprod on the masked data, not a masked kernel.

Values are compared with torch.testing.assert_close's dtype-based tolerances (rtol/atol of
the result dtype), cummax / cummin values and indices exactly. Samples with keyword arguments
scanops has no equivalent for are skipped and counted; each test asserts that at least 90% of
its samples ran (and at least one per dtype), so that it cannot pass by skipping everything.

torch.testing._internal imports ``expecttest`` (a test-only dependency of PyTorch, not a
requirement of scanops); when it is missing, a stand-in with the one name the import needs
(``TestCase``) is installed first.
"""
from __future__ import annotations

import sys
import types
import unittest

import pytest
import torch

from reference import DEVICES, dtype_id, ops

try:  # pragma: no cover - depends on the environment
    import expecttest  # noqa: F401
except ImportError:  # pragma: no cover
    _shim = types.ModuleType("expecttest")
    _shim.TestCase = unittest.TestCase
    sys.modules["expecttest"] = _shim

_IMPORT_ERROR = None
try:
    from torch.testing._internal.common_methods_invocations import op_db
except Exception as e:  # noqa: BLE001 - reported by the tests, not at collection
    op_db = []
    _IMPORT_ERROR = e

OP_NAMES = ("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "masked.cumsum",
            "masked.cumprod")
# Keyword arguments of the samples that scanops can express, per op.
SUPPORTED_KWARGS = {"cumsum": {"dtype"}, "cumprod": {"dtype"}, "logcumsumexp": set(),
                    "cummax": set(), "cummin": set(), "masked.cumsum": {"mask", "dtype"},
                    "masked.cumprod": {"mask", "dtype"}}
MIN_FRACTION = 0.9


def _opinfos(name):
    return [o for o in op_db if o.name == name]


class _Skip(Exception):
    pass


def run_scanops(name, sample):
    """The scanops call equivalent to the sample, or _Skip(reason)."""
    x, args, kwargs = sample.input, sample.args, dict(sample.kwargs)
    extra = set(kwargs) - SUPPORTED_KWARGS[name]
    if extra:
        raise _Skip(f"kwargs {sorted(extra)}")
    if "dim" in kwargs:
        dim = kwargs.pop("dim")
    elif len(args) == 1:
        dim = args[0]
    else:
        raise _Skip(f"positional args {args!r}")
    if not isinstance(x, torch.Tensor) or not isinstance(dim, int):
        raise _Skip("non-tensor input or non-int dim")
    dtype = kwargs.get("dtype")
    dkw = {} if dtype is None else {"dtype": dtype}
    if name in ("cumsum", "cumprod"):
        return getattr(ops, name)(x, dim, **dkw)
    if name == "logcumsumexp":
        return ops.logcumsumexp(x, dim)
    if name in ("cummax", "cummin"):
        return getattr(ops, name)(x, dim)
    # torch.masked's result dtype is `dtype`, by default the input's (unlike torch.cumsum,
    # which promotes integers to int64).
    dkw = {"dtype": dtype if dtype is not None else x.dtype}
    mask = kwargs.get("mask")
    if mask is not None and mask.dtype != torch.bool:
        raise _Skip(f"mask of dtype {mask.dtype}")
    if name == "masked.cumsum":
        if mask is None:
            return ops.cumsum(x, dim, **dkw)
        return ops.masked_cumsum(x, mask, dim, **dkw)
    assert name == "masked.cumprod"
    if mask is not None:
        x = torch.where(mask, x, torch.ones((), dtype=x.dtype, device=x.device))
    return ops.cumprod(x, dim, **dkw)


def compare(name, got, want, ctx, dtype, wide_ref=None):
    if name in ("cummax", "cummin"):
        gv, gi = got
        wv, wi = want
        assert gi.dtype == torch.int64, f"{ctx}: indices dtype {gi.dtype}"
        torch.testing.assert_close(gv, wv, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{ctx}: values: {m}")
        assert torch.equal(gi, wi), (f"{ctx}: indices differ: {gi.flatten()[:20].tolist()} vs "
                                     f"{wi.flatten()[:20].tolist()}")
        return
    assert got.dtype == want.dtype, f"{ctx}: dtype {got.dtype}, torch {want.dtype}"
    assert got.shape == want.shape, f"{ctx}: shape {tuple(got.shape)}, torch {tuple(want.shape)}"
    if name == "logcumsumexp" and got.is_complex():
        # The imaginary part of a logarithm is defined modulo 2 pi: compare exp of both.
        got, want = torch.exp(got.to(torch.complex128)), torch.exp(want.to(torch.complex128))
        tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.complex64 else {}
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{ctx}: {m}", **tol)
        return
    try:
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{ctx}: {m}")
    except AssertionError:
        if wide_ref is None or got.dtype not in _EPS:
            raise
        # torch's CUDA kernels accumulate float16 / bfloat16 in their own precision, scanops in
        # float32: where the two differ beyond the dtype tolerance, scanops must be at least as
        # close to the float64 result as torch is (up to rounding of the output).
        ref = wide_ref()
        eps = _EPS[got.dtype]
        err_got = (got.double() - ref).abs()
        err_want = (want.double() - ref).abs()
        ok = (err_got <= err_want + 2 * eps * ref.abs() + 1e-30) | (got.isnan() & ref.isnan())
        assert bool(ok.all()), (f"{ctx}: less accurate than torch vs float64: max error "
                                f"{err_got.max().item():.3g} vs torch's {err_want.max().item():.3g}")


_EPS = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", OP_NAMES)
def test_opinfo_samples(device, name):
    if _IMPORT_ERROR is not None:
        pytest.fail(f"cannot import torch's op_db: {_IMPORT_ERROR!r}")
    infos = _opinfos(name)
    if not infos:
        if name.startswith("masked."):
            pytest.skip(f"this torch has no OpInfo named {name}")
        pytest.fail(f"torch's op_db has no OpInfo named {name}")
    ran, skipped, reasons, per_dtype = 0, 0, {}, {}
    for info in infos:
        dtypes = sorted(info.supported_dtypes(device), key=str)
        assert dtypes, f"{name}: no dtypes for {device}"
        for dtype in dtypes:
            per_dtype.setdefault(dtype, 0)
            for sample in info.sample_inputs(device, dtype, requires_grad=False):
                for variant, s in (("contiguous", sample), ("noncontiguous", sample.noncontiguous())):
                    kw = {k: (tuple(v.shape) if isinstance(v, torch.Tensor) else v)
                          for k, v in s.kwargs.items()}
                    ctx = (f"{name} dtype={dtype_id(dtype)} {variant} input shape "
                           f"{tuple(s.input.shape)} strides {s.input.stride()} args {s.args} "
                           f"kwargs {kw}")
                    try:
                        before = s.input.clone()
                        got = run_scanops(name, s)
                    except _Skip as why:
                        skipped += 1
                        reasons[str(why)] = reasons.get(str(why), 0) + 1
                        continue
                    want = info(s.input, *s.args, **s.kwargs)

                    def wide_ref(info=info, s=s):
                        kw = {k: v for k, v in s.kwargs.items() if k != "dtype"}
                        return info(s.input.double(), *s.args, **kw).double()

                    compare(name, got, want, ctx, dtype,
                            wide_ref if s.input.is_floating_point() else None)
                    assert torch.equal(before, s.input) or (
                        before.is_floating_point() and torch.equal(before.isnan(), s.input.isnan())), \
                        f"{ctx}: the input was modified"
                    ran += 1
                    per_dtype[dtype] += 1
    total = ran + skipped
    assert total > 0, f"{name}: no samples at all"
    assert ran >= MIN_FRACTION * total, (
        f"{name} on {device}: only {ran}/{total} samples ran; skipped: {reasons}")
    missing = [dtype_id(d) for d, n in per_dtype.items() if n == 0]
    assert not missing, f"{name} on {device}: no sample ran for dtypes {missing}"
    print(f"{name} on {device}: {ran} samples ran, {skipped} skipped {reasons or ''}, "
          f"dtypes {sorted(dtype_id(d) for d in per_dtype)}")


def test_opinfo_coverage():
    """The OpInfos this file relies on exist and list complex dtypes for the complex-capable
    ops (so the complex paths are exercised here)."""
    if _IMPORT_ERROR is not None:
        pytest.fail(f"cannot import torch's op_db: {_IMPORT_ERROR!r}")
    for name in ("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"):
        infos = _opinfos(name)
        assert infos, name
        dts = infos[0].supported_dtypes("cpu")
        if name in ("cumsum", "cumprod", "logcumsumexp"):
            assert torch.complex64 in dts and torch.complex128 in dts, (name, dts)
