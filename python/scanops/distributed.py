"""scanops.distributed: scans along a dimension sharded across devices (DTensor), without
gathering the data (issue #35; docs/distributed.md).

A scan never needs the data to move: each rank scans its own shard, the ranks exchange one
state per line (the shard's total: a sum, a product, a log-sum, an affine map ``(A, H)``, an
extremum and its position), and each rank starts its local scan from the combination of the
states of the ranks before it in scan order, through the ops' ``initial=``. One all_gather of
``lines x state`` elements over the mesh dim that shards the scan dim; the data stays put.

Two entry points, one implementation:

* ``torch.ops.scanops.<op>`` (and so ``scanops.<op>``) on DTensor arguments: a
  ``__torch_dispatch__`` rule for ``DTensor`` registered with the public
  :func:`torch.library.register_torch_dispatch` (see :func:`register`). It runs below
  autograd: gradients come from the ops' C++ backward formulas, which call scanops ops on
  the DTensor gradients again (cumsum's backward is a reverse cumsum: its carry flows from
  the higher ranks to the lower ones). Rules for the three internal ops of those formulas
  (``_cumsum_fused``, ``_linear_recurrence_fused``, ``_linear_recurrence_backward``,
  ``_logcumsumexp_backward``) make the gradients of ``cumsum``, ``masked_cumsum``,
  ``cumprod``, ``linear_recurrence`` and ``logcumsumexp`` work; the backward formulas of
  ``cummax`` and ``cummin`` and the ``initial`` composite use aten slicing along the scan dim
  that DTensor cannot run on a sharded dim without gathering: use the functions below for
  those gradients.
* :func:`cumsum`, :func:`masked_cumsum`, ... of this module: the same exchange, run above
  autograd from differentiable pieces (``DTensor.to_local`` / ``from_local``, the local ops,
  a differentiable all_gather): gradients for every op, in ``x``, ``a`` and ``initial``.

Placements of ``x`` (per mesh dim):

* ``Shard(d)``, ``d`` not the scan dim, and ``Replicate``: the scan runs locally; the output
  keeps the placement.
* ``Shard(dim)`` (the scan dim, on one mesh dim): the carry exchange above; uneven shards and
  empty shards are fine. cummax / cummin indices are global positions along ``dim``.
* ``Partial("sum")`` / ``Partial("avg")``: kept (the output is Partial) for the linear ops
  ``cumsum`` and ``masked_cumsum``; a replicated ``initial`` is then taken in by the rank at
  coordinate 0 of that mesh dim only for "sum" (so the reduced result counts it once; exact
  for integers), by every rank for "avg"; an ``initial`` that is itself Partial on that mesh
  dim is taken as each rank's share. Every other op, and every other Partial, is first
  redistributed to ``Replicate`` (an all-reduce of the data: a non-linear scan of a sum is
  not the sum of the scans).

``mask`` / ``a``: a DTensor of ``x``'s shape is redistributed to ``x``'s placements (no
communication when they already match, which is the case to aim for); a plain tensor, or a
replicated DTensor, broadcastable to ``x`` is taken as the global value and each rank reads
its own chunk (no communication). ``initial``: a plain tensor is the global value (every rank
takes the part of its lines, no communication); a DTensor of the line shape is redistributed
to the lines' placements.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
import warnings
from typing import List, Optional, Sequence

import torch

__all__ = [
    "cumsum",
    "masked_cumsum",
    "cumprod",
    "linear_recurrence",
    "logcumsumexp",
    "cummax",
    "cummin",
    "register",
    "is_registered",
]

OPS = ("cumsum", "masked_cumsum", "cumprod", "linear_recurrence", "logcumsumexp", "cummax",
       "cummin")
_LINEAR = ("cumsum", "masked_cumsum")  # Partial(sum/avg) inputs stay Partial
_EXTREMUM = ("cummax", "cummin")
_DTENSOR_MODULE = "torch.distributed.tensor"


def _dt():
    # (sys.modules' entry: also while the import hook below runs, before the parent package
    # has the attribute)
    return importlib.import_module(_DTENSOR_MODULE)


def _is_dtensor(t) -> bool:
    # Never imports torch.distributed.tensor: a DTensor can only exist once it is imported.
    mod = sys.modules.get(_DTENSOR_MODULE)
    return mod is not None and isinstance(t, mod.DTensor)


# ---- the one collective: all_gather of per-line states ------------------------------------

def _all_gather(t: torch.Tensor, mesh, mesh_dim: int) -> torch.Tensor:
    """``[W, *t.shape]``: ``t`` from every rank along mesh dim ``mesh_dim``, in mesh order.
    Differentiable (the backward is a reduce_scatter of the gradient: the same small size).
    Every exchange of this module goes through here (the tests wrap it to count bytes)."""
    from torch.distributed import _functional_collectives as funcol

    dtype = t.dtype
    if dtype == torch.bool:
        t = t.to(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    t = t.unsqueeze(0).contiguous()
    # Waited for here: a rank may not read the result (rank 0 of a forward scan), and an
    # unwaited collective stays pending.
    if torch.is_grad_enabled() and t.requires_grad:
        out = funcol.all_gather_tensor_autograd(t, 0, (mesh, mesh_dim))
        out = out.clone()  # (waits; a copy of the few states, in the graph)
    else:  # (also below autograd, in the DTensor rules: the autograd op has no CPU kernel)
        out = funcol.all_gather_tensor(t, 0, (mesh, mesh_dim))
        if isinstance(out, funcol.AsyncCollectiveTensor):
            out = out.wait()
    if dtype.is_complex:
        out = torch.view_as_complex(out)
    elif dtype == torch.bool:
        out = out.to(torch.bool)
    return out


class _Tie(torch.autograd.Function):
    """``out`` (a view), with ``deps`` in its graph: their backward runs on every rank. A rank
    that uses no state of the others (rank 0 of a forward scan) still has to take part in the
    backward's collective of the all_gather (a reduce_scatter), or the others wait for it."""

    @staticmethod
    def forward(ctx, out, *deps):
        ctx.metas = [(d.shape, d.dtype, d.device) for d in deps]
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        return (grad, *[torch.zeros(s, dtype=t, device=d) for s, t, d in ctx.metas])


def _tie(out, dep):
    if not (torch.is_grad_enabled() and dep.requires_grad):
        return out
    if isinstance(out, tuple):
        return (_Tie.apply(out[0], dep),) + tuple(out[1:])
    return _Tie.apply(out, dep)


def _redistribute(t, mesh, placements):
    if tuple(t.placements) == tuple(placements):
        return t
    return t.redistribute(mesh, placements)


# ---- layouts -------------------------------------------------------------------------------

def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return dim % n


def _shard_dim(p, ndim: int) -> Optional[int]:
    if not p.is_shard():
        return None
    return p.dim % max(ndim, 1)


class _Layout:
    """How ``x`` is laid out on its mesh, after the Partial placements a non-linear op cannot
    keep were redistributed to Replicate."""

    def __init__(self, op: str, x, dim: int):
        dt = _dt()
        self.mesh = x.device_mesh
        self.dim = dim
        placements = list(x.placements)
        scan_dims = []
        self.partial = {}  # mesh dim -> reduce op ("sum" / "avg"), Partial kept
        changed = False
        for i, p in enumerate(placements):
            if p.is_partial():
                if op in _LINEAR and type(p) is dt.Partial and p.reduce_op in ("sum", "avg"):
                    self.partial[i] = p.reduce_op
                else:
                    placements[i] = dt.Replicate()
                    changed = True
            elif _shard_dim(p, x.ndim) == dim:
                if type(p) is not dt.Shard:
                    raise NotImplementedError(
                        f"scanops.{op}: the scan dim {dim} has the placement {p} on mesh dim "
                        f"{i}; only Shard({dim}) is supported there: redistribute it first")
                scan_dims.append(i)
        if len(scan_dims) > 1:
            raise NotImplementedError(
                f"scanops.{op}: the scan dim {dim} is sharded over mesh dims {scan_dims}; "
                "sharding it over one mesh dim is supported: redistribute it first")
        self.scan_mesh_dim = scan_dims[0] if scan_dims else None
        self.x = x.redistribute(self.mesh, placements) if changed else x
        self.placements = tuple(placements)
        self.shape = tuple(x.shape)
        self.stride = torch.empty(self.shape, device="meta").stride()
        if self.scan_mesh_dim is not None:
            self.world = self.mesh.size(self.scan_mesh_dim)
            self.rank = self.mesh.get_local_rank(self.scan_mesh_dim)

    def operand_placements(self):
        dt = _dt()
        return [dt.Replicate() if p.is_partial() else p for p in self.placements]

    def line_placements(self):
        """The placements of a per-line tensor (x's shape without dim)."""
        dt = _dt()
        out = []
        for p in self.placements:
            d = _shard_dim(p, len(self.shape))
            if d is not None and d != self.dim:
                out.append(type(p)(d - (d > self.dim)) if type(p) is dt.Shard else p)
            else:
                out.append(dt.Replicate())
        return out

    def wrap(self, local: torch.Tensor):
        dt = _dt()
        return dt.DTensor.from_local(local, self.mesh, self.placements, run_check=False,
                                     shape=torch.Size(self.shape), stride=self.stride)


def _as_local_operand(o, lay: _Layout, name: str, op: str):
    """``mask`` / ``a`` as the local chunk that goes with x's local shard."""
    if o is None:
        return None
    dt = _dt()
    target = lay.operand_placements()
    if _is_dtensor(o):
        if o.device_mesh != lay.mesh:
            raise ValueError(f"scanops.{op}: '{name}' is on another device mesh than the input")
        if tuple(o.shape) == lay.shape:
            return _redistribute(o, lay.mesh, target).to_local()
        # Another (broadcast) shape: its global value, then each rank's chunk.
        o = (o.to_local() if all(p.is_replicate() for p in o.placements) else o.full_tensor())
    try:
        full = o.expand(lay.shape)
    except RuntimeError as e:
        raise ValueError(f"scanops.{op}: '{name}' of shape {tuple(o.shape)} does not broadcast "
                         f"to the input's shape {lay.shape}") from e
    rep = [dt.Replicate()] * lay.mesh.ndim
    return _redistribute(dt.DTensor.from_local(full, lay.mesh, rep, run_check=False),
                         lay.mesh, target).to_local()


def _initial_grad_placements(lay: _Layout, target, own_share=()):
    """The placements of the gradient of the local initial: every rank of the scan mesh dim
    uses it for a different part of the result (rank 0 in its scan, the others in the fold
    of the states), so the gradients there are partial sums (reduced by the backward of the
    redistribution: one value per line); likewise on a Partial("sum") mesh dim where one rank
    took it in."""
    dt = _dt()
    out = list(target)
    if lay.scan_mesh_dim is not None:
        out[lay.scan_mesh_dim] = dt.Partial()
    for i, reduce_op in lay.partial.items():
        if reduce_op == "sum" and i not in own_share:
            out[i] = dt.Partial()
    return out


def _as_local_initial(initial, lay: _Layout, op: str):
    """The user's ``initial`` as the local per-line tensor of this rank's lines."""
    if initial is None:
        return None
    dt = _dt()
    line = lay.shape[:lay.dim] + lay.shape[lay.dim + 1:]
    target = lay.line_placements()
    own_share = set()  # Partial mesh dims where initial is this rank's share already
    if _is_dtensor(initial):
        if initial.device_mesh != lay.mesh:
            raise ValueError(f"scanops.{op}: 'initial' is on another device mesh than the input")
        if tuple(initial.shape) == line:
            for i, p in enumerate(initial.placements):
                if p.is_partial() and lay.partial.get(i) == getattr(p, "reduce_op", None):
                    target[i] = p
                    own_share.add(i)
            local = _redistribute(initial, lay.mesh, target).to_local(
                grad_placements=_initial_grad_placements(lay, target, own_share))
        else:
            initial = initial.full_tensor()  # a broadcast shape: small (at most one per line)
            local = None
    else:
        local = None
    if local is None:
        try:
            full = initial.expand(line)
        except RuntimeError as e:
            raise ValueError(
                f"scanops.{op}: 'initial' of shape {tuple(initial.shape)} does not broadcast to "
                f"the input's shape without dim {lay.dim}, {line}") from e
        rep = [dt.Replicate()] * lay.mesh.ndim
        local = _redistribute(dt.DTensor.from_local(full, lay.mesh, rep, run_check=False),
                              lay.mesh, target).to_local(
            grad_placements=_initial_grad_placements(lay, target))
    # Partial("sum") input: one rank of the mesh dim takes a replicated initial in, so the sum
    # over the ranks counts it once.
    for i, reduce_op in lay.partial.items():
        if reduce_op == "sum" and i not in own_share and lay.mesh.get_local_rank(i) != 0:
            local = torch.zeros_like(local)
    return local


# ---- the exchange --------------------------------------------------------------------------

def _result_dtype(x: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.dtype:
    if dtype is not None:
        return dtype
    if x.is_floating_point() or x.is_complex():
        return x.dtype
    return torch.int64


def _is_inexact(d: torch.dtype) -> bool:
    return d.is_floating_point or d.is_complex


def _converted(t: torch.Tensor, rd: torch.dtype) -> torch.Tensor:
    if t.dtype == rd:
        return t
    if t.is_complex() and not rd.is_complex:
        t = t.real  # as the ops' dtype= conversion (which also warns)
    return t.to(rd)


def _sum(t: torch.Tensor, dim: int, rd: torch.dtype) -> torch.Tensor:
    if _is_inexact(rd) or _is_inexact(t.dtype):
        return _converted(t, rd).sum(dim)
    return t.sum(dim, dtype=rd)  # integers: int64 sums wrap as the scan's do


def _prod(t: torch.Tensor, dim: int, rd: torch.dtype) -> torch.Tensor:
    if not _is_inexact(rd) and not _is_inexact(t.dtype):
        return t.prod(dim, dtype=rd)
    t = _converted(t, rd)
    # in double precision, as the ops' cumprod (a float32 tree of products is biased)
    wide = torch.complex128 if rd.is_complex else torch.float64
    return t.prod(dim, dtype=wide).to(rd)


def _last(t: torch.Tensor, dim: int, reverse: bool) -> torch.Tensor:
    return t.select(dim, 0 if reverse else -1)


def _line_shape(t: torch.Tensor, dim: int):
    return t.shape[:dim] + t.shape[dim + 1:]


def _local_call(op, xl, ol, dim, exclusive, reverse, dtype, init):
    ops = torch.ops.scanops
    kw = dict(exclusive=exclusive, reverse=reverse, initial=init)
    if op == "cumsum":
        return ops.cumsum(xl, dim, dtype=dtype, **kw)
    if op == "masked_cumsum":
        return ops.masked_cumsum(xl, ol, dim, dtype=dtype, **kw)
    if op == "cumprod":
        return ops.cumprod(xl, dim, dtype=dtype, **kw)
    if op == "linear_recurrence":
        return ops.linear_recurrence(ol, xl, dim, **kw)
    if op == "logcumsumexp":
        return ops.logcumsumexp(xl, dim, **kw)
    return getattr(ops, op)(xl, dim, **kw)


def _scan_order_before(lay: _Layout, reverse: bool) -> List[int]:
    """The ranks (coordinates along the scan mesh dim) before this one in scan order,
    earliest first."""
    if reverse:
        return list(range(lay.world - 1, lay.rank, -1))
    return list(range(lay.rank))


def _rows(g: torch.Tensor, ranks: Sequence[int]) -> torch.Tensor:
    return g.index_select(0, torch.tensor(list(ranks), dtype=torch.long, device=g.device))


def _exchange(op, lay: _Layout, xl, ol, dim, exclusive, reverse, dtype, init):
    """The local result of this rank, its scan started from the states of the ranks before
    it in scan order (and the user's initial before those)."""
    ops = torch.ops.scanops
    mesh, mdim = lay.mesh, lay.scan_mesh_dim
    n = xl.shape[dim]
    line = _line_shape(xl, dim)
    before = _scan_order_before(lay, reverse)

    if op in _EXTREMUM:
        # (value, global index) of the shard's final extremum; an empty shard has none.
        if n > 0:
            v, i = getattr(ops, op)(xl, dim, reverse=reverse)
            v, i = _last(v, dim, reverse), _last(i, dim, reverse)
        else:
            v = torch.zeros(line, dtype=xl.dtype, device=xl.device)
            i = torch.full(line, -1, dtype=torch.int64, device=xl.device)
        gv = _all_gather(v, mesh, mdim)
        size = torch.tensor([n], dtype=torch.int64, device=xl.device)
        gi = _all_gather(torch.cat([i.reshape(-1), size]), mesh, mdim)
        sizes = gi[:, -1].tolist()  # tiny host read: the shard sizes, for the offsets
        offsets = [sum(sizes[:q]) for q in range(lay.world)]
        nonempty = [q for q in before if sizes[q] > 0]
        carry, carry_i = init, None
        if nonempty:
            rows_v = _rows(gv, nonempty)
            off = torch.tensor([offsets[q] for q in nonempty], dtype=torch.int64,
                               device=xl.device)
            rows_i = (_rows(gi, nonempty)[:, :-1] + off[:, None]).reshape(rows_v.shape)
            fv, fi = getattr(ops, op)(rows_v, 0, initial=init)
            carry, pos = fv[-1], fi[-1]
            taken = rows_i.gather(0, pos.clamp(min=0).unsqueeze(0)).squeeze(0)
            carry_i = torch.where(pos >= 0, taken, torch.full_like(taken, -1))
        yv, yi = _local_call(op, xl, None, dim, exclusive, reverse, None, carry)
        if not nonempty:
            yv = _tie(yv, gv)
        glob = yi + offsets[lay.rank]
        if carry_i is None:  # -1 (no element yet / the user's initial) stays -1
            yi = torch.where(yi < 0, yi, glob)
        else:  # -1: the carried extremum, at its global position
            yi = torch.where(yi < 0, carry_i.unsqueeze(dim).expand_as(yi), glob)
        return yv, yi

    rd = _result_dtype(xl, dtype)
    if op == "cumsum":
        state = _sum(xl, dim, rd)
    elif op == "masked_cumsum":
        state = _sum(torch.where(ol, xl, torch.zeros((), dtype=xl.dtype, device=xl.device)),
                     dim, rd)
    elif op == "cumprod":
        state = _prod(xl, dim, rd)
    elif op == "logcumsumexp":
        if xl.is_complex() or n == 0:
            # (complex: the op's own state, whose imaginary part is on the op's branch)
            state = (_last(ops.logcumsumexp(xl, dim, reverse=reverse), dim, reverse) if n
                     else torch.full(line, float("-inf"), dtype=xl.dtype, device=xl.device))
        else:
            state = torch.logsumexp(xl, dim)
    elif op == "linear_recurrence":
        # The shard as one affine map h -> A h + H: A the product of its a, H its final h
        # from h = 0.
        af = ol.expand(xl.shape)
        if n > 0:
            A = _prod(af, dim, xl.dtype)
            H = _last(ops.linear_recurrence(ol, xl, dim, reverse=reverse), dim, reverse)
        else:
            A = torch.ones(line, dtype=xl.dtype, device=xl.device)
            H = torch.zeros(line, dtype=xl.dtype, device=xl.device)
        state = torch.stack([A, H])
    else:
        raise AssertionError(op)

    g = _all_gather(state, mesh, mdim)  # [W, *line] (linear_recurrence: [W, 2, *line])
    carry = init
    if before:
        rows = _rows(g, before)
        if op == "linear_recurrence":
            carry = ops.linear_recurrence(rows[:, 0], rows[:, 1], 0, initial=init)[-1]
        else:
            carry = getattr(ops, "cumsum" if op == "masked_cumsum" else op)(
                rows, 0, initial=init)[-1]
    out = _local_call(op, xl, ol, dim, exclusive, reverse, dtype, carry)
    return out if before else _tie(out, g)


def _scan(op: str, x, other, dim: int, exclusive: bool = False, reverse: bool = False,
          dtype: Optional[torch.dtype] = None, initial=None):
    """``op`` on DTensor ``x`` (``other``: ``mask`` or ``a``); the result as DTensor(s)."""
    if not _is_dtensor(x):
        # linear_recurrence(a=DTensor, x=tensor), masked_cumsum(x, mask=DTensor): x takes the
        # other's mesh, as a global value.
        ref = other if _is_dtensor(other) else initial
        dt = _dt()
        rep = [dt.Replicate()] * ref.device_mesh.ndim
        x = dt.DTensor.from_local(x, ref.device_mesh, rep, run_check=False)
        if _is_dtensor(other) and tuple(other.shape) == tuple(x.shape):
            x = _redistribute(x, other.device_mesh,
                               [dt.Replicate() if p.is_partial() else p for p in other.placements])
    dim = _wrap_dim(dim, x.ndim)
    lay = _Layout(op, x, dim)
    xl = lay.x.to_local()
    ol = _as_local_operand(other, lay, "mask" if op == "masked_cumsum" else "a", op)
    init = _as_local_initial(initial, lay, op)
    if lay.scan_mesh_dim is None or x.ndim == 0:
        out = _local_call(op, xl, ol, dim, exclusive, reverse, dtype, init)
    else:
        out = _exchange(op, lay, xl, ol, dim, exclusive, reverse, dtype, init)
    if isinstance(out, tuple):
        return tuple(lay.wrap(t) for t in out)
    return lay.wrap(out)


# ---- helpers of the internal ops' rules (the backward formulas) ----------------------------

def _like(t, ref):
    """t as a DTensor laid out as ``ref`` (a plain tensor: the global value)."""
    if t is None or _is_dtensor(t):
        return t
    dt = _dt()
    rep = [dt.Replicate()] * ref.device_mesh.ndim
    full = t.expand(ref.shape) if t.dim() <= ref.dim() else t
    d = dt.DTensor.from_local(full, ref.device_mesh, rep, run_check=False)
    return _redistribute(d, ref.device_mesh,
                          [dt.Replicate() if p.is_partial() else p for p in ref.placements])


def _shift_next(t, dim: int, reverse: bool, fill):
    """u[k] = t[next(k)] along dim, next(k) = k + 1 (k - 1 for reverse), ``fill`` at the last
    position in that order: a shift by one, with one slice per line from the neighbouring
    shard when dim is sharded."""
    dim = _wrap_dim(dim, t.ndim)
    lay = _Layout("shift", t, dim)
    tl = lay.x.to_local()
    n = tl.shape[dim]
    line = _line_shape(tl, dim)
    boundary = torch.full(line, fill, dtype=tl.dtype, device=tl.device)
    if lay.scan_mesh_dim is not None:
        # Every rank's first slice in this order (k = 0 forward, n - 1 reverse) and its size.
        first = tl.select(dim, n - 1 if reverse else 0) if n else torch.zeros_like(boundary)
        g = _all_gather(first, lay.mesh, lay.scan_mesh_dim)
        sizes = _all_gather(torch.tensor([n], device=tl.device), lay.mesh,
                            lay.scan_mesh_dim)[:, 0].tolist()
        after = (range(lay.rank - 1, -1, -1) if reverse else range(lay.rank + 1, lay.world))
        nxt = [q for q in after if sizes[q] > 0]
        if nxt:
            boundary = g[nxt[0]]
    if n == 0:
        out = tl
    elif reverse:
        out = torch.cat([boundary.unsqueeze(dim), tl.narrow(dim, 0, n - 1)], dim)
    else:
        out = torch.cat([tl.narrow(dim, 1, n - 1), boundary.unsqueeze(dim)], dim)
    return lay.wrap(out)


def _cumsum_fused(g, dim, *, exclusive, reverse, add=None, mul=None):
    y = _scan("cumsum", g, None, dim, exclusive, reverse)
    if add is not None:
        y = y + _like(add, y)
    if mul is not None:
        y = y * _like(mul, y)
    return y


def _linear_recurrence_fused(a, x, dim, *, exclusive, reverse, scale_x, add=None, mul=None,
                             shift_mul=False, wide_acc=False):
    ref = x if _is_dtensor(x) else a
    a, x = _like(a, ref), _like(x, ref)
    dtype = x.dtype
    if wide_acc and dtype in (torch.float32, torch.float16, torch.bfloat16):
        a, x = a.to(torch.float64), x.to(torch.float64)
    y = _scan("linear_recurrence", a * x if scale_x else x, a, dim, exclusive, reverse)
    if add is not None:
        y = y + _like(add, y).to(y.dtype)
    if mul is not None:
        m = _like(mul, y)
        if shift_mul:
            m = _shift_next(m, dim, reverse, 1)
        y = y * m.to(y.dtype)
    return y.to(dtype)


def _linear_recurrence_backward(a, g, h, dim, *, reverse):
    # (dx, da) = (lam, lam * h[t-1]), lam = g + linear_recurrence(a, a * g; exclusive, !reverse)
    ref = g if _is_dtensor(g) else (h if _is_dtensor(h) else a)
    a, g, h = _like(a, ref), _like(g, ref), _like(h, ref)
    lam = g + _scan("linear_recurrence", a * g, a, dim, True, not reverse)
    h_prev = _shift_next(h, dim, not reverse, 0)  # h[t-1] in the forward's order, h[-1] = 0
    return lam, lam * h_prev


def _logcumsumexp_backward(x, y, g, dim, *, exclusive, reverse):
    """dx = exp(x) S, S[j] the sum of g[k] exp(-y[k]) over the outputs k after j in scan order
    (ops/lse_grad.h): each rank's own part from the local op; the part of the ranks after it in
    scan order as one pair (Y, Q) per line, S = Q exp(-Y), combined from an all_gather of every
    rank's total (the smallest reference, each Q scaled to it), then exp(x - Y) Q added."""
    ref = next(t for t in (x, g, y) if _is_dtensor(t))
    dim = _wrap_dim(dim, ref.ndim)
    lay = _Layout("_logcumsumexp_backward", _like(x, ref), dim)
    pl = lay.operand_placements()
    xl = lay.x.to_local()
    yl = _redistribute(_like(y, ref), lay.mesh, pl).to_local()
    gl = _redistribute(_like(g, ref), lay.mesh, pl).to_local()
    out = torch.ops.scanops._logcumsumexp_backward(xl, yl, gl, dim, exclusive=exclusive,
                                                   reverse=reverse)
    if lay.scan_mesh_dim is None or xl.ndim == 0:
        return lay.wrap(out)

    def scaled(q, yr, to):  # q exp(to - yr), equal references (infinities too) scaled by 1
        return q * torch.exp(torch.where(yr == to, torch.zeros_like(yr), to - yr))

    line = _line_shape(xl, dim)
    if xl.shape[dim]:
        ymin = yl.amin(dim, keepdim=True)
        tot_y, tot_q = ymin.squeeze(dim), scaled(gl, yl, ymin).sum(dim)
    else:  # an empty shard: the identity (+inf, 0)
        tot_y = torch.full(line, float("inf"), dtype=xl.dtype, device=xl.device)
        tot_q = torch.zeros(line, dtype=xl.dtype, device=xl.device)
    ys = _all_gather(tot_y, lay.mesh, lay.scan_mesh_dim)
    qs = _all_gather(tot_q, lay.mesh, lay.scan_mesh_dim)
    after = list(range(lay.rank - 1, -1, -1) if reverse else range(lay.rank + 1, lay.world))
    if after and xl.shape[dim]:
        ya, qa = ys[after], qs[after]
        yc = ya.amin(0, keepdim=True)
        qc = scaled(qa, ya, yc).sum(0).unsqueeze(dim)
        yc = yc.squeeze(0).unsqueeze(dim)
        none = (qc == 0) & (yc == float("inf"))  # nothing after (empty shards): add 0 exactly
        out = out + torch.where(none, torch.zeros_like(qc), torch.exp(xl - yc) * qc)
    return lay.wrap(out)


# ---- the DTensor rules ---------------------------------------------------------------------

def _rule_scan(op):
    if op == "masked_cumsum":
        def call(x, mask, dim, exclusive=False, reverse=False, dtype=None, initial=None):
            return _scan(op, x, mask, dim, exclusive, reverse, dtype, initial)
    elif op == "linear_recurrence":
        def call(a, x, dim, exclusive=False, reverse=False, initial=None):
            return _scan(op, x, a, dim, exclusive, reverse, None, initial)
    elif op in ("cumsum", "cumprod"):
        def call(x, dim, exclusive=False, reverse=False, dtype=None, initial=None):
            return _scan(op, x, None, dim, exclusive, reverse, dtype, initial)
    else:
        def call(x, dim, exclusive=False, reverse=False, initial=None):
            return _scan(op, x, None, dim, exclusive, reverse, None, initial)
    return call


_RULES = {op: _rule_scan(op) for op in OPS}
_RULES["_cumsum_fused"] = _cumsum_fused
_RULES["_linear_recurrence_fused"] = _linear_recurrence_fused
_RULES["_linear_recurrence_backward"] = _linear_recurrence_backward
_RULES["_logcumsumexp_backward"] = _logcumsumexp_backward


def _make_rule(name):
    impl = _RULES[name]

    def rule(cls, func, types, args=(), kwargs=None):
        # Below autograd (the ops' C++ autograd kernels have run on the DTensors already):
        # record nothing here.
        with torch.no_grad():
            return impl(*args, **(kwargs or {}))

    rule.__name__ = f"scanops_dtensor_{name}"
    return rule


_lock = threading.RLock()
_registered = False
_library = None


def is_registered() -> bool:
    """Whether the DTensor rules of the scanops ops are registered."""
    return _registered


def register() -> bool:
    """Registers the DTensor rules of the scanops ops (imports ``torch.distributed.tensor``).
    Idempotent; ``import scanops`` arranges for it to run by itself when
    ``torch.distributed.tensor`` is imported. Returns whether the rules are registered (False
    when torch has no distributed support).

    The hook: :func:`torch.library.register_torch_dispatch` (public, torch >= 2.4; 2.11 to
    2.15 dispatch DTensor ops from C++ and consult these rules first). DTensor's public
    :func:`~torch.distributed.tensor.experimental.register_sharding` only chooses placements
    for the inputs and outputs of a local call; the carry exchange is a communication pattern
    of its own, which no placement choice expresses. Where ``register_torch_dispatch`` is
    missing, the fallback is DTensor's private ``_op_dispatcher._custom_op_handlers`` table
    (the hook torch's own loss_parallel and context parallel use).
    """
    global _registered, _library
    with _lock:
        if _registered:
            return True
        if not torch.distributed.is_available():
            return False
        dt = _dt()
        names = [n for n in _RULES if _has_op(n)]
        if hasattr(torch.library, "register_torch_dispatch"):
            _library = torch.library.Library("scanops", "FRAGMENT")
            for name in names:
                torch.library.register_torch_dispatch(f"scanops::{name}", dt.DTensor,
                                                      _make_rule(name), lib=_library)
        else:  # pragma: no cover  (torch < 2.4)
            handlers = dt.DTensor._op_dispatcher._custom_op_handlers
            for name in names:
                rule = _make_rule(name)
                handlers[getattr(torch.ops.scanops, name).default] = (
                    lambda op_call, args, kwargs, rule=rule: rule(dt.DTensor, op_call, (),
                                                                  args, kwargs))
        _registered = True
        _remove_hook()
        return True


def _has_op(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"scanops::{name}", "")
        return True
    except RuntimeError:
        return False


# ---- registering lazily: when torch.distributed.tensor is imported --------------------------

class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            register()
        except Exception as e:  # never break the user's import
            warnings.warn(f"scanops: could not register the DTensor rules: {e!r}",
                          RuntimeWarning, stacklevel=2)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _DTENSOR_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


_hook: Optional[_RegisterOnImport] = None


def _remove_hook() -> None:
    global _hook
    with _lock:
        if _hook is not None and _hook in sys.meta_path:
            sys.meta_path.remove(_hook)
        _hook = None


def _register_lazily() -> None:
    """Registers now if ``torch.distributed.tensor`` is imported already, else when it is
    (an import hook; importing scanops never imports it: it takes ~0.5 s)."""
    global _hook
    if _registered or not torch.distributed.is_available():
        return
    if _DTENSOR_MODULE in sys.modules:
        register()
        return
    with _lock:
        if _hook is None:
            _hook = _RegisterOnImport()
            sys.meta_path.insert(0, _hook)


# ---- the differentiable entry points -------------------------------------------------------

def _entry(op, x, other, dim, exclusive, reverse, dtype, initial):
    if not any(_is_dtensor(t) for t in (x, other, initial)):
        return _local_call(op, x, other, dim, exclusive, reverse, dtype, initial)
    register()  # (DTensors exist: torch.distributed.tensor is imported; cheap once done)
    return _scan(op, x, other, dim, exclusive, reverse, dtype, initial)


def cumsum(x, dim: int, *, exclusive: bool = False, reverse: bool = False,
           dtype: Optional[torch.dtype] = None, initial=None):
    """:func:`scanops.cumsum` of a DTensor, differentiable in ``x`` and ``initial`` through
    the exchange (module docstring). Plain tensors: :func:`scanops.cumsum` itself."""
    return _entry("cumsum", x, None, dim, exclusive, reverse, dtype, initial)


def masked_cumsum(x, mask, dim: int, *, exclusive: bool = False, reverse: bool = False,
                  dtype: Optional[torch.dtype] = None, initial=None):
    """:func:`scanops.masked_cumsum` of a DTensor (``mask`` laid out as ``x``)."""
    return _entry("masked_cumsum", x, mask, dim, exclusive, reverse, dtype, initial)


def cumprod(x, dim: int, *, exclusive: bool = False, reverse: bool = False,
            dtype: Optional[torch.dtype] = None, initial=None):
    """:func:`scanops.cumprod` of a DTensor."""
    return _entry("cumprod", x, None, dim, exclusive, reverse, dtype, initial)


def linear_recurrence(a, x, dim: int, *, exclusive: bool = False, reverse: bool = False,
                      initial=None):
    """:func:`scanops.linear_recurrence` of DTensors (``a`` laid out as ``x``): the ranks
    exchange each shard's affine map ``(prod a, final h)``; differentiable in ``a``, ``x`` and
    ``initial``."""
    return _entry("linear_recurrence", x, a, dim, exclusive, reverse, None, initial)


def logcumsumexp(x, dim: int, *, exclusive: bool = False, reverse: bool = False, initial=None):
    """:func:`scanops.logcumsumexp` of a DTensor (the ranks exchange log-space totals)."""
    return _entry("logcumsumexp", x, None, dim, exclusive, reverse, None, initial)


def cummax(x, dim: int, *, exclusive: bool = False, reverse: bool = False, initial=None):
    """:func:`scanops.cummax` of a DTensor: ``(values, indices)``, the indices global
    positions along ``dim`` (-1 where the user's ``initial`` holds)."""
    return _entry("cummax", x, None, dim, exclusive, reverse, None, initial)


def cummin(x, dim: int, *, exclusive: bool = False, reverse: bool = False, initial=None):
    """:func:`scanops.cummin` of a DTensor; see :func:`cummax`."""
    return _entry("cummin", x, None, dim, exclusive, reverse, None, initial)
