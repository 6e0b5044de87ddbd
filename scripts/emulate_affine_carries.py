"""Emulates on the CPU (numpy) the CUDA kernels' association of a float32 linear recurrence
along one long line: runs of R elements reduced by a thread (a chain of combines), the runs'
totals combined within a tile of T runs (Kogge-Stone tree, as BlockScan / warp scans) or
sequentially (the column kernels' band folds), tiles chained sequentially (look-back fold /
rows-mode carry / three-pass scan of totals), then each run rescanned from its carry.
mode 'f32': every combine in float32 (the kernels today); 'wide': run reductions, tile
combines and carries in float64, the carry rounded to float32 before the float32 rescan."""
import sys, numpy as np

def comb(fa, fb, ga, gb):  # f then g
    return ga * fa, ga * fb + gb

def run_line(a, x, R, T, tree, mode):
    n = a.size
    F = np.float64 if mode == "wide" else np.float32
    A = a.reshape(-1, R); X = x.reshape(-1, R)
    # run totals
    ta = A[:, 0].astype(F); tb = X[:, 0].astype(F)
    for k in range(1, R):
        ta, tb = comb(ta, tb, A[:, k].astype(F), X[:, k].astype(F))
    nr = ta.size
    # exclusive prefixes of the run totals: tile = T runs
    pa = ta.reshape(-1, T).copy(); pb = tb.reshape(-1, T).copy()
    if tree:  # inclusive Kogge-Stone within the tile
        d = 1
        while d < T:
            na, nb = pa.copy(), pb.copy()
            na[:, d:], nb[:, d:] = comb(pa[:, :-d], pb[:, :-d], pa[:, d:], pb[:, d:])
            pa, pb = na, nb; d *= 2
    else:
        for j in range(1, T):
            pa[:, j], pb[:, j] = comb(pa[:, j - 1], pb[:, j - 1], pa[:, j], pb[:, j])
    # chain of tiles (sequential), carries
    nt = pa.shape[0]
    cb = np.zeros(nt, F); c = F(0)
    for t in range(nt):
        cb[t] = c
        c = pa[t, -1] * c + pb[t, -1]
    # run carries: tile carry then exclusive in-tile prefix
    exa = np.concatenate([np.ones((nt, 1), F), pa[:, :-1]], 1)
    exb = np.concatenate([np.zeros((nt, 1), F), pb[:, :-1]], 1)
    rc = (exa * cb[:, None] + exb).reshape(-1)
    h = rc.astype(np.float32)  # the rescan in float32
    out = np.empty_like(A)
    for k in range(R):
        h = A[:, k] * h + X[:, k]; out[:, k] = h
    return out.reshape(-1)

def seq(a, x, F):
    h = F(0); out = np.empty(a.size, F)
    aa = a.astype(F); xx = x.astype(F)
    for i in range(a.size):
        h = aa[i] * h + xx[i]; out[i] = h
    return out

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
rng = np.random.default_rng(0)
for dist in ("exp(-U(0,4e-5))", "1-U(0,1e-3)"):
    u = rng.random(n)
    a = (np.exp(-u * 4e-5) if dist.startswith("exp") else 1 - u * 1e-3).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    ref = seq(a, x, np.float64)
    e_seq = np.abs(seq(a, x, np.float32) - ref).max()
    print(f"{dist} n={n} max|ref| {np.abs(ref).max():.4g}  seq f32 loop max err {e_seq:.3g}")
    for name, R, T, tree in (("three-pass (R=32, totals chained)", 32, 1, False),
                             ("row tile (R=16, 256-run tree, tiles chained)", 16, 256, True),
                             ("column tile (R=16, 8 bands folded)", 16, 8, False),
                             ("column vec (R=8, 16 warps folded)", 8, 16, False)):
        for mode in ("f32", "wide"):
            e = np.abs(run_line(a, x, R, T, tree, mode) - ref).max()
            print(f"  {name:46s} {mode:5s} max err {e:.3g}  ({e / e_seq:.1f}x seq)")
