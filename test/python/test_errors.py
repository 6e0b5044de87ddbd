"""Bad inputs raise RuntimeError naming the op and the argument (on every device)."""
from __future__ import annotations

import pytest
import torch

from reference import DEVICES, OPS, SCAN_OPS, needs_cuda, ops

device_p = pytest.mark.parametrize("device", DEVICES)
# The Meta kernels (torch.compile / export / FakeTensor) run the same checks as the real ones.
any_device_p = pytest.mark.parametrize("device", DEVICES + ["meta"])


def run(op, x, dim, mask=None, a=None, **kw):
    if op == "cumsum":
        return ops.cumsum(x, dim, **kw)
    if op == "masked_cumsum":
        if mask is None:
            mask = torch.ones(x.shape, dtype=torch.bool, device=x.device)
        return ops.masked_cumsum(x, mask, dim, **kw)
    if op == "cumprod":
        return ops.cumprod(x, dim, **kw)
    if a is None:
        a = torch.ones(x.shape, dtype=x.dtype, device=x.device)
    return ops.linear_recurrence(a, x, dim, **kw)


def prefix(op):
    return rf"scanops\.{op}: "


# ------------------------------------------------------------------------------------------
# dim
# ------------------------------------------------------------------------------------------

DIM_CASES = [((3, 4), 2), ((3, 4), -3), ((3, 4), 100), ((3, 4), -100), ((5,), 1), ((5,), -2),
             ((), 1), ((), -2), ((2, 0, 3), 3), ((2, 0, 3), -4)]


@any_device_p
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape,dim", DIM_CASES)
def test_dim_out_of_range(device, op, shape, dim):
    x = torch.randn(shape, device=device)
    nd = len(shape)
    n = max(nd, 1)
    msg = (prefix(op) + rf"argument 'dim' = {dim} is out of range for a tensor of {nd} "
           rf"dimension\(s\) \(expected a dim in \[{-n}, {n - 1}\]\)")
    with pytest.raises(RuntimeError, match=msg):
        run(op, x, dim)
    x.requires_grad_()
    with pytest.raises(RuntimeError, match=msg):  # through the autograd kernel too
        run(op, x, dim)


@any_device_p
@pytest.mark.parametrize("op", OPS)
def test_valid_dims_accepted(device, op):
    # Every dim in [-n, n-1] works, 0-dim accepts 0 and -1 (control for the errors above).
    for shape in [(), (4,), (2, 3), (2, 3, 4)]:
        x = torch.randn(shape, device=device)
        n = max(len(shape), 1)
        for d in range(-n, n):
            assert run(op, x, d).shape == x.shape


# ------------------------------------------------------------------------------------------
# mask
# ------------------------------------------------------------------------------------------

@any_device_p
@pytest.mark.parametrize("xshape,mshape", [((3, 5), (3, 4)), ((3, 5), (5, 3)), ((3, 5), (2, 3, 5)),
                                           ((3, 5), (4,)), ((3, 5), (3,)), ((), (1,)), ((0, 5), (2, 5)),
                                           ((2, 3, 4), (2, 1, 5))])
def test_mask_wrong_shape(device, xshape, mshape):
    x = torch.randn(xshape, device=device)
    m = torch.ones(mshape, dtype=torch.bool, device=device)
    sq = lambda s: r"\[" + ", ".join(map(str, s)) + r"\]"  # noqa: E731
    msg = (prefix("masked_cumsum") + rf"argument 'mask' of shape {sq(mshape)} is not broadcastable "
           rf"to the shape of argument 'self', {sq(xshape)}")
    with pytest.raises(RuntimeError, match=msg):
        ops.masked_cumsum(x, m, 0 if xshape else -1)


@any_device_p
@pytest.mark.parametrize("mdtype", [torch.uint8, torch.int8, torch.float32, torch.int64, torch.float16])
def test_mask_wrong_dtype(device, mdtype):
    x = torch.randn(3, 5, device=device)
    m = torch.ones(3, 5, dtype=mdtype, device=device)
    with pytest.raises(RuntimeError, match=prefix("masked_cumsum") + r"argument 'mask' must be a bool tensor"):
        ops.masked_cumsum(x, m, 1)


@needs_cuda
def test_mask_on_other_device():
    x = torch.randn(3, 5, device="cuda")
    m = torch.ones(3, 5, dtype=torch.bool)
    with pytest.raises(RuntimeError, match=prefix("masked_cumsum") +
                       r"argument 'mask' is on cpu but argument 'self' is on cuda:0; both must be on the same device"):
        ops.masked_cumsum(x, m, 1)
    with pytest.raises(RuntimeError, match=prefix("masked_cumsum") +
                       r"argument 'mask' is on cuda:0 but argument 'self' is on cpu"):
        ops.masked_cumsum(x.cpu(), m.cuda(), 1)
    # A 0-dim CPU mask is still another device (no implicit scalar promotion).
    with pytest.raises(RuntimeError, match=prefix("masked_cumsum") + r"argument 'mask' is on cpu"):
        ops.masked_cumsum(x, torch.tensor(True), 1)


# ------------------------------------------------------------------------------------------
# linear_recurrence: a and x
# ------------------------------------------------------------------------------------------

@any_device_p
@pytest.mark.parametrize("adtype,xdtype", [(torch.float64, torch.float32), (torch.float32, torch.float64),
                                           (torch.float16, torch.float32), (torch.bfloat16, torch.float16),
                                           (torch.int32, torch.float32), (torch.bool, torch.float32)])
def test_linear_recurrence_a_wrong_dtype(device, adtype, xdtype):
    a = torch.ones(3, 5, device=device).to(adtype)
    x = torch.randn(3, 5, device=device).to(xdtype)
    with pytest.raises(RuntimeError, match=prefix("linear_recurrence") + r"argument 'a' has dtype \w+ but "
                       r"argument 'x' has dtype \w+; they must match"):
        ops.linear_recurrence(a, x, 1)


@any_device_p
@pytest.mark.parametrize("ashape,xshape", [((3, 4), (3, 5)), ((5, 3), (3, 5)), ((2, 3, 5), (3, 5)),
                                           ((4,), (3, 5)), ((3,), (3, 5)), ((1,), ())])
def test_linear_recurrence_a_wrong_shape(device, ashape, xshape):
    a = torch.ones(ashape, device=device)
    x = torch.randn(xshape, device=device)
    with pytest.raises(RuntimeError, match=prefix("linear_recurrence") +
                       r"argument 'a' of shape \[[\d, ]*\] is not broadcastable to the shape of argument 'x'"):
        ops.linear_recurrence(a, x, -1 if xshape else 0)


@any_device_p
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool, torch.int16])
def test_linear_recurrence_integer_input(device, dtype):
    x = torch.ones(3, 5, device=device, dtype=dtype)
    with pytest.raises(RuntimeError, match=prefix("linear_recurrence") + r"argument 'x' has dtype \w+; a linear "
                       r"recurrence needs a floating or complex dtype"):
        ops.linear_recurrence(x, x, 1)


@needs_cuda
def test_linear_recurrence_a_on_other_device():
    with pytest.raises(RuntimeError, match=prefix("linear_recurrence") +
                       r"argument 'a' is on cpu but argument 'x' is on cuda:0"):
        ops.linear_recurrence(torch.ones(3, 5), torch.ones(3, 5, device="cuda"), 1)


def test_linear_recurrence_has_no_dtype_argument():
    x = torch.ones(3, 5)
    with pytest.raises((RuntimeError, TypeError), match="dtype"):
        ops.linear_recurrence(x, x, 1, dtype=torch.float64)


# ------------------------------------------------------------------------------------------
# dtypes
# ------------------------------------------------------------------------------------------

COMPLEX = [torch.complex64, torch.complex128, torch.complex32]
UNSUPPORTED = [d for d in (getattr(torch, n, None) for n in (
    "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"))
    if d is not None]


def _make(shape, dtype, device):
    try:
        return torch.ones(shape, device=device).to(dtype)
    except (RuntimeError, TypeError) as e:  # dtype not creatable on this device / build
        pytest.skip(f"cannot create a {dtype} tensor on {device}: {e}")


@any_device_p
@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_input_cummax_cummin(device, dtype):
    x = _make((3, 4), dtype, device)
    for op in ("cummax", "cummin"):
        with pytest.raises(RuntimeError, match=prefix(op) + r"argument 'self' has dtype Complex\w*; " + op
                           + r" needs a real or bool dtype"):
            getattr(ops, op)(x, 1)
    if dtype == torch.complex32:  # no complex32 kernels (torch's cumsum has none either)
        with pytest.raises(RuntimeError, match=prefix("cumsum") + r"argument 'self' has unsupported dtype"):
            ops.cumsum(x, 1)


@any_device_p
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool], ids=str)
def test_logcumsumexp_integer_input(device, dtype):
    x = torch.ones(3, 4, device=device, dtype=dtype)
    with pytest.raises(RuntimeError, match=prefix("logcumsumexp") + r"argument 'self' has dtype \w+; logcumsumexp "
                       r"needs a floating or complex dtype"):
        ops.logcumsumexp(x, 1)


@any_device_p
@pytest.mark.parametrize("op", SCAN_OPS)
@pytest.mark.parametrize("dtype", UNSUPPORTED, ids=str)
def test_unsupported_input_dtype(device, op, dtype):
    x = _make((3, 4), dtype, device)
    with pytest.raises(RuntimeError, match=prefix(op) + r"argument 'self' has unsupported dtype \w+ "
                       r"\(supported: float32, float64, float16, bfloat16, complex64, complex128, int8, int16, int32, int64, "
                       r"uint8, bool\)"):
        run(op, x, 1)


@any_device_p
@pytest.mark.parametrize("dtype", UNSUPPORTED, ids=str)
def test_unsupported_linear_recurrence_dtype(device, dtype):
    """Only float32, float64, float16, bfloat16 and complex64/128: other dtypes (float8 included)
    are rejected by the argument check naming 'x', on the real and the Meta kernels alike."""
    x = _make((3, 4), dtype, device)
    with pytest.raises(RuntimeError, match=prefix("linear_recurrence") + r"argument 'x' has dtype \w+; a "
                       r"linear recurrence needs a floating or complex dtype \(float32, float64, float16, "
                       r"bfloat16, complex64, complex128\)"):
        ops.linear_recurrence(x, x, 1)


@any_device_p
@pytest.mark.parametrize("op", SCAN_OPS)
@pytest.mark.parametrize("in_dtype", [torch.float32, torch.int32, torch.bool])
def test_dtype_bool(device, op, in_dtype):
    x = torch.ones(3, 4, device=device).to(in_dtype)
    with pytest.raises(RuntimeError, match=prefix(op) + r"argument 'dtype' = Bool cannot hold the result of a scan"):
        run(op, x, 1, dtype=torch.bool)


@any_device_p
@pytest.mark.parametrize("op", SCAN_OPS)
@pytest.mark.parametrize("dtype", UNSUPPORTED, ids=str)
def test_dtype_unsupported(device, op, dtype):
    x = torch.ones(3, 4, device=device)
    with pytest.raises(RuntimeError, match=prefix(op) + r"argument 'dtype' = \w+ is not supported"):
        run(op, x, 1, dtype=dtype)


@any_device_p
def test_input_dtype_checked_before_dim(device):
    """Two problems: the message still names the op (either check may win, but it must be one
    of them)."""
    x = torch.ones(3, device=device, dtype=torch.complex64)
    with pytest.raises(RuntimeError, match=prefix("cumsum") + r"argument '(self|dim)'"):
        ops.cumsum(x, 5)


@device_p
def test_errors_leave_no_partial_state(device):
    """After a failed call the op still works."""
    x = torch.arange(1.0, 5.0, device=device)
    with pytest.raises(RuntimeError):
        ops.cumsum(x, 3)
    assert ops.cumsum(x, 0).tolist() == [1, 3, 6, 10]
