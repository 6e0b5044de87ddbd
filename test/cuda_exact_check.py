"""CUDA back end check: every kernel path, dtype, flag and op against the CPU back end
(exact: data are small integers / +-1 so every order of combination gives the same bits),
then big shapes against torch on the GPU, >2^31-element tensors, and CUDA graph capture.

logcumsumexp / cummax / cummin and complex inputs: cummax / cummin values and indices are
exact on any data (ties, NaN, -0.0 included: compared bit for bit with the CPU back end and
with torch.cummax on the CPU); complex cumsum / masked_cumsum on small Gaussian integers,
cumprod on {+-1, +-i} and linear_recurrence with a in {0, +-1, +-i} are exact too;
logcumsumexp (real and complex) is compared with a float64 / complex128 reference within an
error bound (float32 accumulation on the GPU). > 2^32-element cases of the new ops are not
run (not cheap: the existing int8 cumsum cases cover 64-bit indexing of the shared engine).
DEV=cpu runs the small cases on the CPU back end (a check of this script's own logic)."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402,F401

ops = torch.ops.scanops
dev = os.environ.get("DEV", "cuda")
bad = []
ncase = 0


def check(name, got, ref):
    global ncase
    ncase += 1
    got = got.cpu()
    if got.dtype != ref.dtype or got.shape != ref.shape or not torch.equal(got, ref):
        diff = "-"
        if got.shape == ref.shape and got.dtype == ref.dtype:
            d = (got.double() - ref.double()).abs()
            idx = torch.nonzero(d > 0)
            diff = f"{idx.shape[0]} wrong, first at {idx[0].tolist() if idx.numel() else None}"
        bad.append(name)
        print("MISMATCH", name, got.dtype, ref.dtype, tuple(got.shape), diff, flush=True)


def same(a, b):
    """Exact equality, NaN-safe: bit patterns for floating and complex tensors."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if a.is_floating_point():
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(view), b.contiguous().view(view))
    return torch.equal(a, b)


def check_same(name, got, ref):
    global ncase
    ncase += 1
    got = got.cpu()
    if not same(got, ref):
        diff = "-"
        if got.shape == ref.shape and got.dtype == ref.dtype:
            ne = ~same_mask(got, ref)
            idx = torch.nonzero(ne)
            diff = f"{idx.shape[0]} wrong, first at {idx[0].tolist() if idx.numel() else None}"
        bad.append(name)
        print("MISMATCH", name, got.dtype, ref.dtype, tuple(got.shape), diff, flush=True)


def same_mask(a, b):
    if a.is_complex():
        return same_mask(a.real, b.real) & same_mask(a.imag, b.imag)
    if a.is_floating_point():
        return (a == b) & (torch.signbit(a) == torch.signbit(b)) | (torch.isnan(a) & torch.isnan(b))
    return a == b


def minmax_ref(op, x, dim, e, r):
    """cummax / cummin by their definitions from torch's CPU ops (x on the CPU)."""
    tfn = torch.cummax if op == "cummax" else torch.cummin
    if x.dim() == 0:
        x = x.reshape(1)
        v, i = minmax_ref(op, x, 0, e, r)
        return v.reshape(()), i.reshape(())
    d = dim % x.dim()
    n = x.shape[d]
    v, i = tfn(x.flip(d) if r else x, d)
    if e and n > 0:
        if x.dtype == torch.bool:
            ident = op == "cummin"
        elif x.is_floating_point():
            ident = float("-inf") if op == "cummax" else float("inf")
        else:
            ii = torch.iinfo(x.dtype)
            ident = ii.min if op == "cummax" else ii.max
        v = torch.cat([torch.full_like(v.narrow(d, 0, 1), ident), v.narrow(d, 0, n - 1)], d)
        i = torch.cat([torch.full_like(i.narrow(d, 0, 1), -1), i.narrow(d, 0, n - 1)], d)
    if r:
        v, i = v.flip(d), torch.where(i >= 0, n - 1 - i, i).flip(d)
    return v, i


def lcse_ref(x, dim, e, r):
    """logcumsumexp in float64 / complex128 by torch.logcumsumexp composed with flip / shift."""
    x = x.to(torch.complex128 if x.is_complex() else torch.float64)
    if x.dim() == 0:
        return lcse_ref(x.reshape(1), 0, e, r).reshape(())
    d = dim % x.dim()
    n = x.shape[d]
    y = torch.logcumsumexp(x.flip(d) if r else x, d)
    if e and n > 0:
        first = torch.full_like(y.narrow(d, 0, 1), complex(float("-inf"), 0) if y.is_complex()
                                else float("-inf"))
        y = torch.cat([first, y.narrow(d, 0, n - 1)], d)
    return y.flip(d) if r else y


def check_lcse(name, got, x, dim, e, r):
    """logcumsumexp result (any device) against the float64 reference of x (CPU) within
    (16 + 4 sqrt(n)) eps_acc (max |x| + log n) + eps_out |ref|: every partial result of any
    combination order is bounded by max |x| + log n, each combination rounds once, and a
    log-add-exp passes earlier errors on as a convex combination. Complex: the imaginary part
    is compared modulo 2 pi, and a cancelling sum adds its condition number."""
    global ncase
    ncase += 1
    got = got.cpu()
    if got.dtype != x.dtype or got.shape != x.shape:
        bad.append(name)
        print("MISMATCH", name, "dtype/shape", got.dtype, tuple(got.shape), flush=True)
        return
    if x.numel() == 0:
        return
    ref = lcse_ref(x, dim, e, r)
    real = x.real.dtype if x.is_complex() else x.dtype
    n = x.shape[dim] if x.dim() else 1
    e_acc = torch.finfo(torch.float64 if real == torch.float64 else torch.float32).eps
    e_out = torch.finfo(real).eps
    mag = x.abs().double().nan_to_num(0.0, posinf=0.0, neginf=0.0).max().item()
    c = (16 + n) if real == torch.float64 else 16 + 4 * n ** 0.5
    tol = c * e_acc * (mag + torch.log(torch.tensor(n + 1.0)).item()) \
        + e_out * ref.abs().nan_to_num(0.0, posinf=0.0)
    g = got.to(ref.dtype)
    if x.is_complex():
        cond = (lcse_ref(x.real, dim, e, r) - ref.real).nan_to_num(0.0, posinf=0.0, neginf=0.0)
        tol = 2 * tol + c * e_acc * (torch.exp(cond.clamp(max=600)) + 3.15)
        d_im = torch.remainder(g.imag - ref.imag + torch.pi, 2 * torch.pi) - torch.pi
        err = torch.hypot(g.real - ref.real, d_im)
        fin = torch.isfinite(ref.real)
        ok = torch.where(fin, err <= tol, (g.real == ref.real) & ~torch.isnan(g.imag))
    else:
        fin = torch.isfinite(ref)
        ok = torch.where(fin, (g - ref).abs() <= tol, (g == ref) | (torch.isnan(g) & torch.isnan(ref)))
    if not bool(ok.all()):
        idx = torch.nonzero(~ok)
        first = tuple(idx[0].tolist())
        bad.append(name)
        print("INACCURATE", name, f"{idx.shape[0]} off, first at {list(first)}: got {g[first].item()} "
              f"want {ref[first].item()}", flush=True)


def minmax_data(shape, dtype, length):
    """Small integers (ties everywhere); floating: -0.0 among the zeros, NaN and +-inf."""
    x = data(shape, dtype, "sum", length)
    if dtype.is_floating_point:
        r = torch.rand(shape, generator=torch.Generator().manual_seed(3))
        x = torch.where((x == 0) & (r < 0.5), -0.0, x)
        x = torch.where(r < 2e-3, float("nan"), x)
        x = torch.where((r > 0.5) & (r < 0.505), float("inf"), x)
        x = torch.where((r > 0.6) & (r < 0.605), float("-inf"), x)
    return x


def complex_data(shape, dtype, kind):
    """'int': small Gaussian integers; 'unit': {+-1, +-i}; 'coef': {0, +-1, +-i}."""
    g = torch.Generator().manual_seed(hash((shape, str(dtype), kind)) % 2**31)
    if kind == "int":
        z = torch.complex(torch.randint(-3, 4, shape, generator=g).double(),
                          torch.randint(-3, 4, shape, generator=g).double())
    else:
        table = torch.tensor([1, -1, 1j, -1j] + ([0] if kind == "coef" else []), dtype=torch.complex128)
        z = table[torch.randint(0, len(table), shape, generator=g)]
    return z.to(dtype)


def data(shape, dtype, kind, length):
    g = torch.Generator().manual_seed(hash((shape, str(dtype), kind)) % 2**31)
    if kind == "sum":
        v = torch.randint(-3, 4, shape, generator=g)
    elif kind == "prod":
        if dtype.is_floating_point and length > 48:
            v = torch.randint(0, 2, shape, generator=g) * 2 - 1
        else:
            choices = torch.tensor([1.0, -1.0, 2.0, 0.5] if dtype.is_floating_point else [1, -1, 2, 3, -2])
            v = choices[torch.randint(0, len(choices), shape, generator=g)]
    if dtype == torch.bool:
        return (v > 0)
    return v.to(dtype)


shapes = [((1,), 0), ((7,), 0), ((2048,), 0), ((2049,), 0), ((100003,), 0), (((1 << 20) + 5,), 0),
          ((33, 5), 1), ((5000, 3), 1), ((3, 2048), 1), ((7, 2047), 1), ((100, 1000), 1),
          ((2200, 2049), 1), ((2500, 5000), 1), ((3, 70001), 1), ((4, 1 << 18), 1),
          ((1, 1), 1), ((1, 1), 0), ((257, 129), 0), ((8, 300, 64), 1), ((2, 3, 1), 2),
          ((1 << 12, 64), 1), ((1000, 3), 0), ((5, 7, 3), 1), ((4096, 33), 0), ((3, 40000, 2), 1),
          ((1, 1 << 20, 2), 1), ((2, 5, 1, 3), 1), ((70000, 2), 0), ((3, 1), 0), ((1 << 15, 1), 1),
          ((1000, 40), 0), ((3, 600, 100), 1), ((5000, 64), 0), ((300, 33), 0), ((20000, 3), 1),
          ((600, 2080), 0), ((4, 70, 1000), 1), ((3, 30000), 0),  # column warp tiles; cummax: whole columns
          ((2, 1000, 516), 1), ((333, 1024), 0), ((300, 520), 0),  # column vector tiles (partial bands, row tiles)
          ((5000, 8), 0), ((2, 2500, 16), 1), ((5, 2100, 12), 1), ((9000, 4), 0)]  # narrow vector tiles (16 and 8 warps)
dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]
flags = [(False, False), (True, False), (False, True), (True, True)]

t0 = time.time()
for shape, dim in shapes:
    length = shape[dim]
    for dt in dtypes:
        x = data(shape, dt, "sum", length)
        xg = x.to(dev)
        m = torch.rand(shape, generator=torch.Generator().manual_seed(1)) > 0.3
        mg = m.to(dev)
        xp = data(shape, dt, "prod", length)
        xpg = xp.to(dev)
        xm = minmax_data(shape, dt, length)
        xmg = xm.to(dev)
        shape_small = xm.numel() <= 1 << 22  # torch's CPU cummax as a second oracle
        for e, r in flags:
            tag = f"{shape} dim={dim} {dt} excl={e} rev={r}"
            check("cumsum " + tag, ops.cumsum(xg, dim, exclusive=e, reverse=r),
                  ops.cumsum(x, dim, exclusive=e, reverse=r))
            check("masked " + tag, ops.masked_cumsum(xg, mg, dim, exclusive=e, reverse=r),
                  ops.masked_cumsum(x, m, dim, exclusive=e, reverse=r))
            check("cumprod " + tag, ops.cumprod(xpg, dim, exclusive=e, reverse=r),
                  ops.cumprod(xp, dim, exclusive=e, reverse=r))
            if dt in (torch.int8, torch.int32, torch.uint8):
                check("cumsum dtype=self " + tag, ops.cumsum(xg, dim, exclusive=e, reverse=r, dtype=dt),
                      ops.cumsum(x, dim, exclusive=e, reverse=r, dtype=dt))
            if dt.is_floating_point:
                a = data(shape, torch.int64, "prod", 0).clamp(-1, 1).to(dt)  # a in {-1, 1} and 0s
                a = torch.where(m, a, torch.zeros_like(a))
                check("linrec " + tag, ops.linear_recurrence(a.to(dev), xg, dim, exclusive=e, reverse=r),
                      ops.linear_recurrence(a, x, dim, exclusive=e, reverse=r))
            # cummax / cummin: exact on any data, against the CPU back end and torch's definition.
            for op in ("cummax", "cummin"):
                vg, ig = getattr(ops, op)(xmg, dim, exclusive=e, reverse=r)
                vc, ic = getattr(ops, op)(xm, dim, exclusive=e, reverse=r)
                check_same(f"{op} values " + tag, vg, vc)
                check_same(f"{op} indices " + tag, ig, ic)
                if shape_small:
                    vt, it = minmax_ref(op, xm, dim, e, r)
                    check_same(f"{op} values vs torch " + tag, vc, vt)
                    check_same(f"{op} indices vs torch " + tag, ic, it)
            if dt.is_floating_point:
                check_lcse("logcumsumexp " + tag, ops.logcumsumexp(xg, dim, exclusive=e, reverse=r),
                           x, dim, e, r)
    # Misaligned views (offset by one element): the vector paths must step aside.
    if len(shape) == 1 and shape[0] > 2:
        x = data(shape, torch.float32, "sum", length)
        m = torch.rand(shape) > 0.5
        xg, mg = x.to(dev), m.to(dev)
        for e, r in flags:
            tag = f"offset view {shape} excl={e} rev={r}"
            check("cumsum " + tag, ops.cumsum(xg[1:], 0, exclusive=e, reverse=r),
                  ops.cumsum(x[1:], 0, exclusive=e, reverse=r))
            check("masked " + tag, ops.masked_cumsum(xg[1:], mg[:-1], 0, exclusive=e, reverse=r),
                  ops.masked_cumsum(x[1:], m[:-1], 0, exclusive=e, reverse=r))
    # Complex inputs: exact on Gaussian integers / units; logcumsumexp within its bound.
    for dt in (torch.complex64, torch.complex128):
        z = complex_data(shape, dt, "int")
        u = complex_data(shape, dt, "unit")
        ca = complex_data(shape, dt, "coef")
        zg, ug, cag = z.to(dev), u.to(dev), ca.to(dev)
        zl = torch.complex(z.real * 0.7, z.imag * 0.3)  # phases in (-1, 1): mild cancellation
        for e, r in flags:
            tag = f"{shape} dim={dim} {dt} excl={e} rev={r}"
            check_same("complex cumsum " + tag, ops.cumsum(zg, dim, exclusive=e, reverse=r),
                       ops.cumsum(z, dim, exclusive=e, reverse=r))
            check_same("complex masked " + tag, ops.masked_cumsum(zg, mg, dim, exclusive=e, reverse=r),
                       ops.masked_cumsum(z, m, dim, exclusive=e, reverse=r))
            # Products of units are exact, but the sign of a zero real or imaginary part of a
            # complex product depends on the association order (CUDA's tree vs the CPU's
            # walk): equal as values (-0 == +0), not bitwise.
            check("complex cumprod " + tag, ops.cumprod(ug, dim, exclusive=e, reverse=r),
                  ops.cumprod(u, dim, exclusive=e, reverse=r))
            check_same("complex linrec " + tag, ops.linear_recurrence(cag, zg, dim, exclusive=e, reverse=r),
                       ops.linear_recurrence(ca, z, dim, exclusive=e, reverse=r))
            if e == r:
                check_lcse("complex logcumsumexp " + tag,
                           ops.logcumsumexp(zl.to(dev), dim, exclusive=e, reverse=r), zl, dim, e, r)
if dev == "cuda":
    torch.cuda.synchronize()
print(f"small cases: {ncase} checks, {len(bad)} mismatches, {time.time() - t0:.1f}s", flush=True)
if dev == "cpu":
    sys.exit(1 if bad else 0)


def ref_scan(x, dim, e, r):
    y = x.flip(dim) if r else x
    c = torch.cumsum(y, dim)
    if e:
        c = torch.cat([torch.zeros_like(c.narrow(dim, 0, 1)), c.narrow(dim, 0, c.size(dim) - 1)], dim)
    return c.flip(dim) if r else c


def big(shape, dim, dtype=torch.float32):
    global ncase
    x = torch.randint(-3, 4, shape, device=dev).to(dtype)
    for e, r in [(False, False), (True, True), (False, True)]:
        t = time.time()
        got = ops.cumsum(x, dim, exclusive=e, reverse=r)
        ref = ref_scan(x, dim, e, r).to(got.dtype)
        ncase += 1
        if not torch.equal(got, ref):
            bad.append(f"big {shape} {dim} {e} {r}")
            print("MISMATCH big", shape, dim, dtype, e, r, (got != ref).sum().item(), flush=True)
        del got, ref
        torch.cuda.synchronize()
        print(f"big {shape} dim={dim} excl={e} rev={r} ok ({time.time() - t:.2f}s)", flush=True)
    del x
    torch.cuda.empty_cache()


# Look-back stress: many tiles, repeated (ordering bugs show up intermittently).
xs = torch.randint(-3, 4, ((1 << 24) + 77,), device=dev).float()
ref = torch.cumsum(xs, 0)
reff = torch.cumsum(xs.flip(0), 0).flip(0)
for it in range(30):
    ncase += 1
    if not (torch.equal(ops.cumsum(xs, 0), ref) and torch.equal(ops.cumsum(xs, 0, reverse=True), reff)):
        bad.append(f"stress {it}")
        print("MISMATCH stress", it, flush=True)
a = torch.randint(-1, 2, (5, 3 << 20), device=dev).double()
xd = torch.randint(-3, 4, (5, 3 << 20), device=dev).double()
got = ops.linear_recurrence(a, xd, 1, exclusive=True, reverse=True).cpu()
ncase += 1
if not torch.equal(got, ops.linear_recurrence(a.cpu(), xd.cpu(), 1, exclusive=True, reverse=True)):
    bad.append("affine double long")
    print("MISMATCH affine double long", flush=True)
print("stress done", flush=True)

big((1 << 24, 4), 1)
big((1 << 20, 64), 1)
big((64, 1 << 22), 1)
big((1 << 30,), 0)
big((32768, 32768), 1)
big((32768, 32768), 0)
big((8, 32768, 4096), 1)
big((128, 4000), 1)
big((1 << 16, 300), 0, torch.float64)


def huge_diff_check(shape, dim, e_unused, r):
    """> 2^31 elements, int8 -> int8: y[k] - y[k-1] == x[k] (mod 256) along the scan."""
    global ncase
    x = torch.randint(-100, 100, shape, device=dev, dtype=torch.int8)
    y = ops.cumsum(x, dim, reverse=r, dtype=torch.int8)
    if r:
        x, y = x.flip(dim), y.flip(dim)
    n = shape[dim]
    ok = torch.equal(y.narrow(dim, 0, 1), x.narrow(dim, 0, 1))
    step = 1 << 28 if len(shape) == 1 else 4096
    for s in range(1, n, step):
        k = min(step, n - s)
        d = y.narrow(dim, s, k) - y.narrow(dim, s - 1, k)
        ok = ok and torch.equal(d, x.narrow(dim, s, k))
    ncase += 1
    if not ok:
        bad.append(f"huge {shape} {dim} {r}")
    print(f"huge {shape} dim={dim} rev={r}: {'ok' if ok else 'MISMATCH'}", flush=True)
    del x, y
    torch.cuda.empty_cache()


def big_family(shape, dim):
    """cummax / cummin (exact, against torch's CPU cummax by the definitions), logcumsumexp
    (float32, against float64), complex64 cumsum on Gaussian integers (exact)."""
    t = time.time()
    x = minmax_data(shape, torch.float32, shape[dim])
    xg = x.to(dev)
    for e, r in [(False, False), (True, True), (False, True), (True, False)]:
        tag = f"big {shape} dim={dim} excl={e} rev={r}"
        for op in ("cummax", "cummin"):
            vg, ig = getattr(ops, op)(xg, dim, exclusive=e, reverse=r)
            vt, it = minmax_ref(op, x, dim, e, r)
            check_same(f"{op} values " + tag, vg, vt)
            check_same(f"{op} indices " + tag, ig, it)
            del vg, ig, vt, it
    xl = torch.randn(shape, generator=torch.Generator().manual_seed(5)) * 3
    xlg = xl.to(dev)
    for e, r in [(False, False), (True, True)]:
        check_lcse(f"logcumsumexp big {shape} dim={dim} excl={e} rev={r}",
                   ops.logcumsumexp(xlg, dim, exclusive=e, reverse=r), xl, dim, e, r)
    z = complex_data(shape, torch.complex64, "int")
    got = ops.cumsum(z.to(dev), dim, reverse=True)
    check_same(f"complex cumsum big {shape} dim={dim}", got, ops.cumsum(z, dim, reverse=True))
    del x, xg, xl, xlg, z, got
    torch.cuda.empty_cache()
    print(f"family {shape} dim={dim} done ({time.time() - t:.1f}s)", flush=True)


# rows: short and packed; longer than one tile (block per row); few long rows (look-back);
# 1-D; columns: many columns (dim 0), few long columns (three-pass), a middle dim.
for shape, dim in [((4096, 1000), 1), ((128, 40000), 1), ((4, 1 << 20), 1), (((1 << 24) + 3,), 0),
                   ((1 << 16, 64), 0), ((1 << 22, 4), 0), ((4, 20000, 64), 1), ((2048, 2048), 0)]:
    big_family(shape, dim)

huge_diff_check(((1 << 31) + 1000,), 0, False, False)
huge_diff_check(((1 << 31) + 1000,), 0, False, True)
huge_diff_check(((1 << 16) + 1, 1 << 15), 0, False, True)
huge_diff_check((3, (1 << 30) + 7), 1, False, False)


def huge_cummax_check(reverse):
    """A line longer than 2^31 - 1: cummax keeps int64 positions (shorter lines use 32-bit
    ones). uint8 zeros with 1 at 5 and 2 at L0 + 7 and L0 + 50 (L0 = 2^31): ties go to the
    latest position, so the expected values / indices are known in closed form."""
    global ncase
    n = (1 << 31) + 100
    l0 = 1 << 31
    x = torch.zeros(n, device=dev, dtype=torch.uint8)
    marks = [(5, 1), (l0 + 7, 2), (l0 + 50, 2)]
    if reverse:  # mirrored data; the scan runs from the end, positions stay original
        marks = [(n - 1 - p, v) for p, v in marks]
    for p, v in marks:
        x[p] = v
    v, i = ops.cummax(x, 0, reverse=reverse)
    # In scan order q (q = position, or n - 1 - position for reverse): index of the running
    # maximum, the latest of ties.
    def expect(q0, k):
        q = torch.arange(q0, q0 + k, device=dev, dtype=torch.int64)
        val = torch.zeros(k, device=dev, dtype=torch.uint8)
        at = q.clone()  # before any mark: every value ties at 0, the latest wins (itself)
        for p, m in [(5, 1), (l0 + 7, 2), (l0 + 50, 2)]:
            val = torch.where(q >= p, torch.full_like(val, m), val)
            at = torch.where(q >= p, torch.full_like(at, p), at)
        return val, (n - 1 - at if reverse else at)
    ok = True
    step = 1 << 28
    for q0 in range(0, n, step):
        k = min(step, n - q0)
        ev, ei = expect(q0, k)
        sl = slice(n - q0 - k, n - q0) if reverse else slice(q0, q0 + k)
        gv, gi = v[sl], i[sl]
        if reverse:
            gv, gi = gv.flip(0), gi.flip(0)
        ok = ok and torch.equal(gv, ev) and torch.equal(gi, ei)
        del ev, ei
    ncase += 1
    if not ok:
        bad.append(f"huge cummax reverse={reverse}")
    print(f"huge cummax ({n},) rev={reverse}: {'ok' if ok else 'MISMATCH'}", flush=True)
    del x, v, i
    torch.cuda.empty_cache()


huge_cummax_check(False)
huge_cummax_check(True)

# CUDA graph capture (chunked path: scratch allocation inside the capture).
x = torch.randint(-3, 4, (64, 1 << 20), device=dev).float()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(2):
        ops.cumsum(x, 1, reverse=True)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = ops.cumsum(x, 1, reverse=True)
    z = ops.cumsum(x, 0)
x.copy_(torch.randint(-3, 4, x.shape, device=dev).float())
g.replay()
torch.cuda.synchronize()
ncase += 1
if not (torch.equal(y, ref_scan(x, 1, False, True)) and torch.equal(z, torch.cumsum(x, 0))):
    bad.append("graph")
print("graph capture:", "ok" if "graph" not in bad else "MISMATCH", flush=True)

# Run-to-run reproducibility: every kernel path on random float data (where the order of
# combination shows in the last bits), twice, bit for bit; and near a float64 reference.
paths = [((4096, 1000), 1, "packed rows"), ((20000, 9000), 1, "block per row"),
         ((128, 4000), 1, "block per row, few rows"), ((4, 3 << 20), 1, "look-back rows"),
         (((1 << 26) + 3,), 0, "look-back 1-D"), ((1 << 20, 64), 0, "three-pass (inner 64)"),
         ((4, 20000, 4096), 1, "column vector tiles, middle dim"), ((1 << 22, 4), 0, "three-pass columns"),
         ((1 << 16, 1024), 0, "column vector tiles (8 bands); bfloat16: column tile"), ((8192, 4096), 0, "column vector tiles; bfloat16: warp tiles"),
         ((64, 4096, 2048), 1, "column vector tiles; cummax: thread per column"), ((20000, 1000), 0, "column warp tiles (inner % 4 != 0)"),
         ((16, 64, 32768), 1, "thread per column")]
for shape, dim, what in paths:
    for dt in (torch.float32, torch.bfloat16, torch.float64):
        xr = torch.randn(shape, device=dev, dtype=torch.float64)
        ar = torch.rand(shape, device=dev, dtype=torch.float64) * 0.5 + 0.5
        x, a = xr.to(dt), ar.to(dt)
        # 1-D: the forward exclusive sum too (CCCL's DeviceScan, ops/cuda/cub_line_scan.h)
        for e, r in [(False, False), (True, True)] + ([(True, False)] if "1-D" in what else []):
            for opname, f in [("cumsum", lambda: ops.cumsum(x, dim, exclusive=e, reverse=r)),
                              ("cumprod", lambda: ops.cumprod(a, dim, exclusive=e, reverse=r)),
                              ("linrec", lambda: ops.linear_recurrence(a, x, dim, exclusive=e, reverse=r))]:
                if dt == torch.float64 and opname != "cumsum":
                    continue
                y1, y2 = f(), f()
                ncase += 1
                if not torch.equal(y1, y2):
                    bad.append(f"repro {what} {opname} {dt} {e} {r}")
                    print("NOT REPRODUCIBLE", what, shape, dim, opname, dt, e, r, flush=True)
                if opname == "cumsum":
                    ref = ref_scan(x.double(), dim, e, r)
                    err = ((y1.double() - ref).abs().max() / ref.abs().max().clamp_min(1)).item()
                    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float64: 1e-12}[dt]
                    ncase += 1
                    if not err < tol:
                        bad.append(f"accuracy {what} {dt} {e} {r}")
                        print("INACCURATE", what, shape, dim, dt, e, r, err, flush=True)
                del y1, y2
            if dt != torch.float64:  # the new ops, run twice, bit for bit
                for opname, f in [("logcumsumexp", lambda: ops.logcumsumexp(x, dim, exclusive=e, reverse=r)),
                                  ("cummax", lambda: ops.cummax(x, dim, exclusive=e, reverse=r)),
                                  ("cummin", lambda: ops.cummin(x, dim, exclusive=e, reverse=r))]:
                    y1, y2 = f(), f()
                    y1 = y1 if isinstance(y1, tuple) else (y1,)
                    y2 = y2 if isinstance(y2, tuple) else (y2,)
                    ncase += 1
                    if not all(same(u, v) for u, v in zip(y1, y2)):
                        bad.append(f"repro {what} {opname} {dt} {e} {r}")
                        print("NOT REPRODUCIBLE", what, shape, dim, opname, dt, e, r, flush=True)
                    del y1, y2
        if dt == torch.float32 and x.numel() <= 1 << 26:  # complex64 cumsum, random data, twice
            xc = torch.complex(xr.float(), ar.float())
            y1, y2 = ops.cumsum(xc, dim), ops.cumsum(xc, dim)
            ncase += 1
            if not same(y1, y2):
                bad.append(f"repro {what} complex cumsum")
                print("NOT REPRODUCIBLE", what, shape, dim, "complex cumsum", flush=True)
            del xc, y1, y2
        del xr, ar, x, a
    torch.cuda.empty_cache()
    print(f"repro {what} {shape} dim={dim} done", flush=True)

print(f"TOTAL {ncase} checks, {len(bad)} mismatches")
sys.exit(1 if bad else 0)
