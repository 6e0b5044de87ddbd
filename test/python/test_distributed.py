"""scanops on DTensors (scanops.distributed, docs/distributed.md), 2 and 4 CPU processes (gloo).

Each world size is one launch of worker processes (this file run as a script, a file:// store
in a tmp dir) that runs every check below in the same order on every rank and writes one JSON
of results per rank; the tests read them. Every check compares with the same scan on one
process on the full tensor: exactly for integer sums and products and for cummax / cummin
(values and global indices), allclose otherwise. Covered:

- every op x exclusive x reverse, the scan dim sharded (Shard(dim)), through both entry points
  (``scanops.<op>`` = ``torch.ops.scanops.<op>`` on DTensors, and ``scanops.distributed.<op>``);
  along dim 1 and dim 0, uneven shards (10 over 4: 3, 3, 3, 1) and empty shards (3 over 4);
- Replicate and Shard(another dim) (local), Partial for cumsum / masked_cumsum (kept Partial,
  initial taken in once) and for cumprod (replicated first);
- a user ``initial`` (per line, broadcast) for every op;
- a 2-D mesh (4 processes as 2 x 2): the scan dim on one mesh dim, a batch dim on the other;
- autograd: gradients of sharded cumsum / linear_recurrence wrt the DTensor input and ``a``
  through both entry points, and every op (and ``initial``) through scanops.distributed,
  against the single-process gradients;
- bytes: every collective called from Python during a sharded scan (forward, and backward
  through the DTensor rules) moves O(lines x state) elements, never a tensor as large as the
  shard (and torch.cumsum on the same DTensor, DTensor's own strategy, is seen to gather the
  data: the recorder works). The reduce_scatter of all_gather_tensor_autograd's backward runs
  inside C++, unseen; it has the gather's size by construction.

CI: 2 cores, no GPU; both launches take ~30-40 s together. Skips where torch.distributed or
gloo is unavailable.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import traceback
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OPS = ["cumsum", "masked_cumsum", "cumprod", "linear_recurrence", "logcumsumexp", "cummax",
       "cummin"]
FLAGS = list(itertools.product([False, True], [False, True]))  # (exclusive, reverse)
TIMEOUT_S = 240


# ---- the checks (run in the workers) -------------------------------------------------------

def check_names(world: int):
    names = []
    for op in OPS:
        for api in ("ops", "dist"):
            names.append(f"shard_scan/{op}/{api}")
    names += [f"initial/{op}" for op in OPS]
    names += ["uneven_empty", "replicate_and_shard_other", "partial", "partial_initial",
              "partial_nonlinear", "operand_layouts", "registered_lazily"]
    names += ["grad/cumsum/ops", "grad/linear_recurrence/ops", "grad/masked_cumsum/ops",
              "grad/cumprod/ops", "grad/logcumsumexp/ops"]
    names += [f"grad/{op}/dist" for op in OPS]
    names += ["grad/initial/dist", "bytes/forward", "bytes/backward", "bytes/dtensor_cumsum"]
    if world == 4:
        names += ["mesh2d/scan_on_dim0", "mesh2d/scan_on_dim1", "mesh2d/grad"]
    return names


def _worker(rank: int, world: int, store: str, out_dir: str) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=90))
    import scanops
    import scanops.distributed as sd
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,
                                          distribute_tensor)

    assert_close = torch.testing.assert_close
    mesh = init_device_mesh("cpu", (world,))
    mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b")) if world == 4 else None

    def full(t):
        return t.full_tensor() if isinstance(t, DTensor) else t

    def same(got, want, exact):
        if isinstance(want, tuple):
            for g, w in zip(got, want):
                same(g, w, exact)
            return
        got = full(got)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        if exact:
            assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        else:
            assert_close(got, want, equal_nan=True)

    def call(api, op, x, other, dim, **kw):
        mod = scanops if api == "ops" else sd
        f = getattr(mod, op)
        if op == "masked_cumsum":
            return f(x, other, dim, **kw)
        if op == "linear_recurrence":
            return f(other, x, dim, **kw)
        return f(x, dim, **kw)

    def inputs(op, shape, variant=0):
        """(x, other, exact) on every rank alike."""
        g = torch.Generator().manual_seed(zlib.crc32(repr((op, shape, variant)).encode()))
        if op in ("cumsum", "cumprod"):
            if variant == 0:
                return torch.randint(-3, 4, shape, generator=g), None, True
            return torch.rand(shape, generator=g, dtype=torch.float64) + 0.5, None, False
        if op == "masked_cumsum":
            x = torch.randn(shape, generator=g, dtype=torch.float64)
            m = torch.rand(shape, generator=g) < 0.6
            x[~m] = float("nan")  # masked-off NaN counts 0
            return x, m, False
        if op == "linear_recurrence":
            a = torch.rand(shape, generator=g, dtype=torch.float64) * 0.5 + 0.5
            return torch.randn(shape, generator=g, dtype=torch.float64), a, False
        if op == "logcumsumexp":
            return torch.randn(shape, generator=g, dtype=torch.float64), None, False
        # cummax / cummin: few distinct values (ties), int64: exact values and indices
        if variant == 0:
            return torch.randint(0, 4, shape, generator=g), None, True
        x = torch.randint(0, 4, shape, generator=g).to(torch.float32)
        x.view(-1)[3] = float("nan")
        return x, None, True

    def sharded(t, placements, m=None):
        return None if t is None else distribute_tensor(t, m or mesh, placements)

    def initial_for(op, x, dim, broadcast=False):
        line = x.shape[:dim] + x.shape[dim + 1:]
        g = torch.Generator().manual_seed(7)
        rd = torch.int64 if not (x.is_floating_point() or x.is_complex()) else x.dtype
        shape = (1,) * len(line) if broadcast else line
        if rd == torch.int64:
            return torch.randint(-3, 4, shape, generator=g)
        v = torch.rand(shape, generator=g, dtype=rd) + 0.5
        return v

    checks = {}

    def check(name):
        def deco(fn):
            checks[name] = fn
            return fn
        return deco

    # -- every op x flags x entry point, Shard(scan dim) ----------------------------------
    for op in OPS:
        for api in ("ops", "dist"):
            @check(f"shard_scan/{op}/{api}")
            def _(op=op, api=api):
                n = 0
                for shape, dim, variant in [((3, 10), 1, 0), ((10, 3), 0, 1), ((3, 7), -1, 1)]:
                    x, o, exact = inputs(op, shape, variant)
                    xd, od = sharded(x, [Shard(dim % 2)]), sharded(o, [Shard(dim % 2)])
                    for ex, rv in FLAGS:
                        want = call("ops", op, x, o, dim, exclusive=ex, reverse=rv)
                        got = call(api, op, xd, od, dim, exclusive=ex, reverse=rv)
                        assert got[0].placements if isinstance(got, tuple) else True
                        outs = got if isinstance(got, tuple) else (got,)
                        for t in outs:
                            assert isinstance(t, DTensor) and t.placements == (Shard(dim % 2),)
                        same(got, want, exact)
                        n += 1
                return n

    # -- a user initial for every op ------------------------------------------------------
    for op in OPS:
        @check(f"initial/{op}")
        def _(op=op):
            for shape, dim, broadcast in [((3, 10), 1, False), ((10, 3), 0, True)]:
                x, o, exact = inputs(op, shape, 0)
                v = initial_for(op, x, dim, broadcast)
                xd, od = sharded(x, [Shard(dim)]), sharded(o, [Shard(dim)])
                for ex, rv in FLAGS:
                    want = call("ops", op, x, o, dim, exclusive=ex, reverse=rv, initial=v)
                    for api in ("ops", "dist"):
                        got = call(api, op, xd, od, dim, exclusive=ex, reverse=rv, initial=v)
                        same(got, want, exact)
                    # initial as a DTensor of the line shape (replicated)
                    if not broadcast:
                        vd = distribute_tensor(v, mesh, [Replicate()])
                        got = call("dist", op, xd, od, dim, exclusive=ex, reverse=rv,
                                   initial=vd)
                        same(got, want, exact)

    @check("uneven_empty")
    def _():
        # 10 over 4: 3, 3, 3, 1; 3 over 4: 1, 1, 1, 0 (an empty shard); 5 over 2: 3, 2
        for length in (10, 3, 5):
            for op in OPS:
                x, o, exact = inputs(op, (2, length), 0)
                xd, od = sharded(x, [Shard(1)]), sharded(o, [Shard(1)])
                sizes = [0] * world
                sizes[rank] = xd.to_local().shape[1]
                for ex, rv in FLAGS:
                    want = call("ops", op, x, o, 1, exclusive=ex, reverse=rv)
                    same(call("ops", op, xd, od, 1, exclusive=ex, reverse=rv), want, exact)
        # a 1-D input (one line, 0-d states) with an empty shard
        x = torch.randint(0, 5, (3,))
        for op in ("cumsum", "cummax"):
            for ex, rv in FLAGS:
                want = call("ops", op, x, None, 0, exclusive=ex, reverse=rv)
                same(call("dist", op, sharded(x, [Shard(0)]), None, 0, exclusive=ex,
                          reverse=rv), want, True)

    @check("replicate_and_shard_other")
    def _():
        for op in OPS:
            x, o, exact = inputs(op, (6, 5), 0)
            for pl in ([Replicate()], [Shard(0)]):
                xd, od = sharded(x, pl), sharded(o, pl)
                for ex, rv in FLAGS:
                    want = call("ops", op, x, o, 1, exclusive=ex, reverse=rv)
                    got = call("ops", op, xd, od, 1, exclusive=ex, reverse=rv)
                    for t in (got if isinstance(got, tuple) else (got,)):
                        assert t.placements == tuple(pl), t.placements
                    same(got, want, exact)

    def partial_of(x, m=None, mesh_dim_size=None):
        """x as a Partial(sum) DTensor: rank r holds a share, the shares sum to x."""
        m = m or mesh
        w = m.size(0)
        g = torch.Generator().manual_seed(11)
        shares = [torch.randint(-3, 4, x.shape, generator=g).to(x.dtype) for _ in range(w - 1)]
        shares.append(x - sum(shares))
        local = shares[m.get_local_rank(0)]
        return DTensor.from_local(local, m, [Partial()], run_check=False)

    @check("partial")
    def _():
        x = torch.randint(-5, 6, (3, 9))
        xd = partial_of(x)
        for ex, rv in FLAGS:
            y = scanops.cumsum(xd, 1, exclusive=ex, reverse=rv)
            assert y.placements == (Partial(),), y.placements
            same(y, scanops.cumsum(x, 1, exclusive=ex, reverse=rv), True)
            mask = torch.rand(3, 9, generator=torch.Generator().manual_seed(3)) < 0.5
            y = sd.masked_cumsum(xd, mask, 1, exclusive=ex, reverse=rv)
            assert y.placements == (Partial(),), y.placements
            same(y, scanops.masked_cumsum(x, mask, 1, exclusive=ex, reverse=rv), True)

    @check("partial_initial")
    def _():
        x = torch.randint(-5, 6, (3, 9))
        v = torch.tensor([10, -20, 30])
        xd = partial_of(x)
        for ex, rv in FLAGS:
            for api in ("ops", "dist"):
                y = call(api, "cumsum", xd, None, 1, exclusive=ex, reverse=rv, initial=v)
                assert y.placements == (Partial(),)
                same(y, scanops.cumsum(x, 1, exclusive=ex, reverse=rv, initial=v), True)

    @check("partial_nonlinear")
    def _():
        x = torch.randint(-2, 3, (3, 6))
        xd = partial_of(x)
        for ex, rv in FLAGS:
            y = scanops.cumprod(xd, 1, exclusive=ex, reverse=rv)
            assert y.placements == (Replicate(),), y.placements
            same(y, scanops.cumprod(x, 1, exclusive=ex, reverse=rv), True)
            v, i = scanops.cummax(xd, 1, exclusive=ex, reverse=rv)
            same((v, i), scanops.cummax(x, 1, exclusive=ex, reverse=rv), True)

    @check("operand_layouts")
    def _():
        # a / mask as plain tensors (global values), broadcast rows, and DTensors laid out
        # otherwise than x (redistributed to x's placements)
        x, a, _e = inputs("linear_recurrence", (4, 10), 0)
        xd = sharded(x, [Shard(1)])
        for aa in (a, a[:1], distribute_tensor(a, mesh, [Replicate()]),
                   distribute_tensor(a, mesh, [Shard(0)])):
            a_full = aa.full_tensor() if isinstance(aa, DTensor) else aa
            for ex, rv in FLAGS:
                want = scanops.linear_recurrence(a_full, x, 1, exclusive=ex, reverse=rv)
                same(scanops.linear_recurrence(aa, xd, 1, exclusive=ex, reverse=rv), want,
                     False)
        m = torch.rand(1, 10, generator=torch.Generator().manual_seed(5)) < 0.5
        want = scanops.masked_cumsum(x, m, 1)
        same(scanops.masked_cumsum(xd, m, 1), want, False)
        # dtype=, integer inputs widened to int64, bool input
        xi = torch.randint(-100, 100, (3, 10), dtype=torch.int32)
        same(scanops.cumsum(sharded(xi, [Shard(1)]), 1), scanops.cumsum(xi, 1), True)
        same(scanops.cumsum(sharded(xi, [Shard(1)]), 1, dtype=torch.float64),
             scanops.cumsum(xi, 1, dtype=torch.float64), False)
        xb = torch.rand(3, 10) < 0.5
        same(scanops.cumsum(sharded(xb, [Shard(1)]), 1, reverse=True),
             scanops.cumsum(xb, 1, reverse=True), True)
        same(scanops.cummax(sharded(xb, [Shard(1)]), 1), scanops.cummax(xb, 1), True)
        # complex and float32
        xc = torch.randn(3, 10, dtype=torch.complex128)
        for op in ("cumsum", "cumprod", "logcumsumexp"):
            same(getattr(scanops, op)(sharded(xc, [Shard(1)]), 1),
                 getattr(scanops, op)(xc, 1), False)
        xf = torch.randn(3, 10)
        same(scanops.logcumsumexp(sharded(xf, [Shard(1)]), 1, reverse=True),
             scanops.logcumsumexp(xf, 1, reverse=True), False)

    @check("registered_lazily")
    def _():
        assert sd.is_registered()

    # -- autograd -------------------------------------------------------------------------
    def grads_of(fn, leaves, gout):
        for t in leaves:
            t.grad = None
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        out.backward(gout)
        return [full(t.grad) for t in leaves]

    def grad_case(op, api, with_initial=False, shape=(3, 10), dim=1, m=None, pl=None):
        m = m or mesh
        pl = pl or [Shard(dim)]
        x, o, _e = inputs(op, shape, 1 if op in ("cumsum", "cumprod") else 0)
        x = torch.nan_to_num(x.to(torch.float64))  # (cummax: int ties, as float64)
        v = initial_for(op, x, dim) if with_initial else None
        gout = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        for ex, rv in FLAGS:
            lx = x.clone().requires_grad_()
            lo = o.clone().requires_grad_() if op == "linear_recurrence" else o
            lv = v.clone().requires_grad_() if v is not None else None
            leaves = [t for t in (lx, lo, lv) if t is not None and t.requires_grad]
            kw = dict(exclusive=ex, reverse=rv)
            want = grads_of(lambda: call("ops", op, lx, lo, dim, initial=lv, **kw), leaves,
                            gout)
            dx = distribute_tensor(x, m, pl).requires_grad_()
            do = None if o is None else distribute_tensor(o, m, pl)
            if op == "linear_recurrence":
                do.requires_grad_()
            dv = v.clone().requires_grad_() if v is not None else None
            dleaves = [t for t in (dx, do, dv) if t is not None and t.requires_grad]
            got = grads_of(lambda: call(api, op, dx, do, dim, initial=dv, **kw), dleaves,
                           distribute_tensor(gout, m, pl))
            if all(shape[p.dim] % m.size(i) == 0 for i, p in enumerate(pl)):
                # (uneven shards: DTensor itself accumulates a leaf's gradient as Replicate,
                # plain to_local() too, torch 2.11)
                assert dx.grad.placements == tuple(pl), dx.grad.placements
            for g, w in zip(got, want):
                assert_close(g, w)

    for op in ("cumsum", "linear_recurrence", "masked_cumsum", "cumprod", "logcumsumexp"):
        @check(f"grad/{op}/ops")
        def _(op=op):
            grad_case(op, "ops")
            grad_case(op, "ops", shape=(10, 3), dim=0)

    for op in OPS:
        @check(f"grad/{op}/dist")
        def _(op=op):
            grad_case(op, "dist")
            grad_case(op, "dist", shape=(10, 3), dim=0)

    @check("grad/initial/dist")
    def _():
        for op in OPS:
            grad_case(op, "dist", with_initial=True)

    # -- bytes ------------------------------------------------------------------------------
    class Recorder:
        """Wraps the functional collectives' ops (what funcol and DTensor call) and
        torch.distributed's collectives; records the numel of every tensor they move."""
        NAMES = ["all_gather_into_tensor", "all_reduce", "reduce_scatter_tensor",
                 "all_to_all_single", "broadcast", "all_gather_into_tensor_coalesced",
                 "reduce_scatter_tensor_coalesced", "all_reduce_coalesced"]
        DIST = ["all_gather_into_tensor", "all_reduce", "broadcast", "all_gather",
                "reduce_scatter_tensor", "all_to_all_single", "scatter", "gather"]

        def __enter__(self):
            self.sizes, self.saved = [], []
            for ns in (torch.ops._c10d_functional, torch.ops._c10d_functional_autograd):
                for name in self.NAMES:
                    try:
                        orig = getattr(ns, name)
                    except (AttributeError, RuntimeError):
                        continue
                    self._patch(ns, name, orig)
            for name in self.DIST:
                if hasattr(dist, name):
                    self._patch(dist, name, getattr(dist, name))
            return self

        def _patch(self, obj, name, orig):
            sizes = self.sizes

            def wrapped(*args, **kwargs):
                for a in list(args) + list(kwargs.values()):
                    for t in (a if isinstance(a, (list, tuple)) else [a]):
                        if isinstance(t, torch.Tensor):
                            sizes.append((name, t.numel()))
                return orig(*args, **kwargs)
            setattr(obj, name, wrapped)
            self.saved.append((obj, name, orig))

        def __exit__(self, *exc):
            for obj, name, orig in reversed(self.saved):
                setattr(obj, name, orig)

    gather_sizes = []
    orig_gather = sd._all_gather

    def counting_gather(t, m, d):
        gather_sizes.append(t.numel())
        return orig_gather(t, m, d)

    BIG = (4, 4096)  # a shard: 4 x 4096 / world elements; a state: 4 (lines) x 1 or 2

    def bytes_case(backward):
        lines = BIG[0]
        shard = BIG[0] * BIG[1] // world
        for op in OPS:
            x, o, _e = inputs(op, BIG, 1)
            x = x.to(torch.float64) if op != "masked_cumsum" else torch.nan_to_num(x)
            # (gradients through scanops.<op>: the ops whose backward formulas DTensor runs)
            apis = ("ops", "dist") if not backward or op in OPS[:4] else ("dist",)
            for api in apis:
                xd = distribute_tensor(x, mesh, [Shard(1)])
                od = None if o is None else distribute_tensor(o, mesh, [Shard(1)])
                if backward:
                    xd.requires_grad_()
                    if op == "linear_recurrence":
                        od.requires_grad_()
                gout = distribute_tensor(torch.ones(BIG, dtype=torch.float64), mesh,
                                         [Shard(1)])
                gather_sizes.clear()
                sd._all_gather = counting_gather
                try:
                    with Recorder() as rec:
                        y = call(api, op, xd, od, 1, reverse=True)
                        if backward:
                            (y[0] if isinstance(y, tuple) else y).backward(gout)
                finally:
                    sd._all_gather = orig_gather
                assert rec.sizes, "no collective recorded"
                assert gather_sizes, "no state exchange"
                # every collective: at most (world x lines x state) elements, state <= 2
                # (+1: the shard sizes ride with cummax's indices)
                limit = world * (2 * lines + 1)
                assert max(s for _n, s in rec.sizes) <= limit, (op, api, rec.sizes)
                assert limit * 8 <= shard
        return True

    @check("bytes/forward")
    def _():
        return bytes_case(False)

    @check("bytes/backward")
    def _():
        return bytes_case(True)

    @check("bytes/dtensor_cumsum")
    def _():
        # DTensor's own strategy for torch.cumsum along a sharded dim gathers the data: the
        # recorder sees it (a positive control), while scanops' exchange moves states only.
        x = torch.randn(BIG, dtype=torch.float64)
        xd = distribute_tensor(x, mesh, [Shard(1)])
        with Recorder() as rec:
            y = torch.cumsum(xd, 1)
        assert_close(full(y), torch.cumsum(x, 1))
        assert max(s for _n, s in rec.sizes) >= BIG[0] * BIG[1] // world, rec.sizes

    # -- 2-D mesh ---------------------------------------------------------------------------
    if world == 4:
        for scan_mesh_dim in (0, 1):
            @check(f"mesh2d/scan_on_dim{scan_mesh_dim}")
            def _(smd=scan_mesh_dim):
                # x (6, 9): dim 1 scanned, sharded on mesh dim smd; dim 0 on the other
                pl = [Shard(1), Shard(0)] if smd == 0 else [Shard(0), Shard(1)]
                for op in OPS:
                    x, o, exact = inputs(op, (6, 9), 0)
                    xd, od = sharded(x, pl, mesh2), sharded(o, pl, mesh2)
                    v = initial_for(op, x, 1)
                    for ex, rv in FLAGS:
                        for init in (None, v):
                            want = call("ops", op, x, o, 1, exclusive=ex, reverse=rv,
                                        initial=init)
                            got = call("ops", op, xd, od, 1, exclusive=ex, reverse=rv,
                                       initial=init)
                            for t in (got if isinstance(got, tuple) else (got,)):
                                assert t.placements == tuple(pl)
                            same(got, want, exact)
                # scan dim sharded, the other mesh dim replicated
                x = torch.randint(-5, 5, (6, 9))
                xd = distribute_tensor(x, mesh2, [Replicate(), Shard(1)] if smd else
                                       [Shard(1), Replicate()])
                same(scanops.cumsum(xd, 1, reverse=True), scanops.cumsum(x, 1, reverse=True),
                     True)
                # the scan dim sharded over both mesh dims: a clear error (no collective ran)
                xd = distribute_tensor(x, mesh2, [Shard(1), Shard(1)])
                try:
                    scanops.cumsum(xd, 1)
                except Exception as e:  # noqa: BLE001
                    assert "sharded over mesh dims" in str(e), e
                else:
                    raise AssertionError("no error")

        @check("mesh2d/grad")
        def _():
            for op in ("cumsum", "linear_recurrence"):
                for api in ("ops", "dist"):
                    grad_case(op, api, shape=(6, 9), dim=1, m=mesh2, pl=[Shard(0), Shard(1)])
                    grad_case(op, api, shape=(6, 9), dim=1, m=mesh2, pl=[Shard(1), Shard(0)])

    names = check_names(world)
    assert sorted(names) == sorted(checks), set(names) ^ set(checks)
    only = os.environ.get("SCANOPS_DIST_ONLY")  # (debugging: a prefix of the checks to run)
    if only:
        names = [n for n in names if n.startswith(only)]
    results = {}
    for name in names:
        t0 = time.perf_counter()
        print(f"[{rank}] {name}", flush=True)
        torch.manual_seed(zlib.crc32(name.encode()))  # the same draws on every rank
        try:
            checks[name]()
            results[name] = {"ok": True}
        except Exception:  # noqa: BLE001
            err = traceback.format_exc()
            if len(err) > 4000:
                err = err[:2000] + "\n...\n" + err[-2000:]
            results[name] = {"ok": False, "error": err}
            print(results[name]["error"], flush=True)
        results[name]["s"] = round(time.perf_counter() - t0, 3)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


# ---- the pytest side -----------------------------------------------------------------------

def _launch(world: int, tmp: Path):
    import torch  # noqa: F401

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("SCANOPS_LIBRARY", str(REPO / "build" / "libscanops.so"))
    env["SCANOPS_LIBRARY"] = str(Path(env["SCANOPS_LIBRARY"]).resolve())
    env["OMP_NUM_THREADS"] = "1"
    store = tmp / "store"
    logs = [open(tmp / f"rank{r}.log", "w") for r in range(world)]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), str(world),
                               str(store), str(tmp)], env=env, stdout=logs[r],
                              stderr=subprocess.STDOUT, cwd=str(REPO))
             for r in range(world)]
    deadline = time.monotonic() + TIMEOUT_S
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for f in logs:
        f.close()
    per_rank = []
    for r in range(world):
        path = tmp / f"rank{r}.json"
        if not path.is_file():
            log = (tmp / f"rank{r}.log").read_text()[-4000:]
            return {"__failed__": f"rank {r} wrote no results (exit {procs[r].returncode}):\n"
                                  f"{log}"}
        per_rank.append(json.loads(path.read_text()))
    merged = {}
    for name in per_rank[0]:
        errors = [f"rank {r}: {res[name].get('error')}" for r, res in enumerate(per_rank)
                  if not res[name]["ok"]]
        merged[name] = "\n".join(errors) if errors else None
    return merged


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--worker":
    _worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
    sys.exit(0)

import pytest  # noqa: E402
import torch  # noqa: E402


def _distributed_ok() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_gloo_available()


pytestmark = pytest.mark.skipif(not _distributed_ok(),
                                reason="torch.distributed with gloo is unavailable")

_RESULTS = {}


def _results(world, tmp_path_factory):
    if world not in _RESULTS:
        _RESULTS[world] = _launch(world, tmp_path_factory.mktemp(f"dist{world}"))
    return _RESULTS[world]


@pytest.mark.parametrize("world,name", [(w, n) for w in (2, 4) for n in check_names(w)])
def test_distributed(world, name, tmp_path_factory):
    res = _results(world, tmp_path_factory)
    if "__failed__" in res:
        pytest.fail(res["__failed__"])
    if res.get(name):
        pytest.fail(res[name])


def test_import_scanops_does_not_import_dtensor():
    # scanops registers its DTensor rules lazily: importing it leaves torch.distributed.tensor
    # (~0.5 s) unimported, and the rules appear when it is imported.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    code = ("import sys, scanops; assert 'torch.distributed.tensor' not in sys.modules; "
            "assert not scanops.distributed.is_registered(); "
            "import torch.distributed.tensor; assert scanops.distributed.is_registered(); "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
