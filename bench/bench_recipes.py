"""Benchmark of the docs/recipes.md recipes: each recipe's scanops way against the usual
PyTorch way, at realistic sizes, on the CPU (per thread count) and on CUDA where there is one.

Recipes and the usual way each is timed against:

* GAE, T=2048 x 1024 envs, float32: `gae` of docs/recipes.md (one reverse
  `linear_recurrence` plus the elementwise delta) against the usual Python loop over time
  (CleanRL's), for a (T, envs) buffer (time dim 0) and an (envs, T) one (time dim 1, the loop
  reading strided columns); plain discounted returns (T, envs) likewise.
* top-p, batch 64 x vocab 151936 (Qwen-like), float32: the mask alone from sorted
  probabilities (exclusive `cumsum` and one comparison, against `cumsum`, compare and the
  shift `remove[..., 1:] = remove[..., :-1].clone()`), and the whole sampling step
  (`sample_top_p` of the recipe: sort, softmax, mask, renormalise, sample in sorted order,
  against the usual sort, softmax, cumsum, shift, scatter back, masked_fill, softmax,
  multinomial).
* drawdown of 10^7 float32 prices: running maximum, drawdown and its maximum with
  `scanops.cummax` against `torch.cummax`; and the running maximum alone.
* log-CDF of 64 x 32768 float32 log-probabilities: `scanops.logcumsumexp` against
  `torch.logcumsumexp`, and against the naive `log(cumsum(exp))` (which underflows in the
  tails: listed for its speed only).

Every pair's results are compared before timing (a mismatch aborts). Times: after one
warm-up call each, `--reps` rounds (default 5) that call every function of a recipe once in
turn (interleaved, so machine noise hits both alike), best of the rounds; CUDA calls are
synchronised. `--compile` adds torch.compile of the usual ways that are not Python loops
(compiles C++ on the CPU: slow the first time). Not a test: pytest does not collect it.

Usage:
  python bench/bench_recipes.py [--devices cpu,cuda] [--threads 1,2] [--reps 5]
                                [--only gae,top-p,drawdown,log-cdf] [--compile]
                                [--json F] [--md F]
Loads the library like the tests: SCANOPS_LIBRARY, else build/libscanops.so (through
python/scanops).
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402

# --- the recipes (as docs/recipes.md) and the usual ways ------------------------------------


def gae_scanops(rewards, values, dones, last_value, gamma, lam, dim=0):
    not_done = 1.0 - dones
    n = values.size(dim)
    next_values = torch.cat([values.narrow(dim, 1, n - 1), last_value.unsqueeze(dim)], dim)
    delta = rewards + gamma * not_done * next_values - values
    adv = scanops.linear_recurrence(gamma * lam * not_done, delta, dim, reverse=True)
    return adv, adv + values


def gae_loop(rewards, values, dones, last_value, gamma, lam, dim=0):
    """CleanRL's loop; for dim=1 the same over columns [:, t] of an (envs, T) buffer."""
    step = (lambda x, t: x[t]) if dim == 0 else (lambda x, t: x[:, t])
    n = rewards.shape[dim]
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(last_value)
    for t in reversed(range(n)):
        next_value = last_value if t == n - 1 else step(values, t + 1)
        not_done = 1.0 - step(dones, t)
        delta = step(rewards, t) + gamma * not_done * next_value - step(values, t)
        last = delta + gamma * lam * not_done * last
        if dim == 0:
            adv[t] = last
        else:
            adv[:, t] = last
    return adv, adv + values


def returns_scanops(rewards, dones, gamma):
    return scanops.linear_recurrence(gamma * (1.0 - dones), rewards, 0, reverse=True)


def returns_loop(rewards, dones, gamma):
    g = torch.zeros_like(rewards[0])
    out = torch.empty_like(rewards)
    not_done = 1.0 - dones
    for t in reversed(range(rewards.shape[0])):
        g = rewards[t] + gamma * not_done[t] * g
        out[t] = g
    return out


def top_p_mask_scanops(sorted_probs, top_p):
    return scanops.cumsum(sorted_probs, -1, exclusive=True) > top_p


def top_p_mask_torch(sorted_probs, top_p):
    remove = sorted_probs.cumsum(-1) > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    return remove


def sample_top_p_scanops(logits, top_p):
    sorted_logits, order = logits.sort(-1, descending=True)
    probs = sorted_logits.softmax(-1)
    mass_before = scanops.cumsum(probs, -1, exclusive=True)
    kept = probs.masked_fill(mass_before > top_p, 0.0)
    kept = kept / kept.sum(-1, keepdim=True)
    return order.gather(-1, torch.multinomial(kept, 1)), kept, order


def sample_top_p_torch(logits, top_p):
    sorted_logits, order = logits.sort(-1, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    remove = cum > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    remove = remove.scatter(-1, order, remove)
    probs = logits.masked_fill(remove, float("-inf")).softmax(-1)
    return torch.multinomial(probs, 1), probs


def drawdown_scanops(price):
    peak, peak_at = scanops.cummax(price, -1)
    drawdown = 1 - price / peak
    max_dd, trough = drawdown.max(-1)
    return max_dd, peak_at[..., trough]


def drawdown_torch(price):
    peak, peak_at = torch.cummax(price, -1)
    drawdown = 1 - price / peak
    max_dd, trough = drawdown.max(-1)
    return max_dd, peak_at[..., trough]


def log_cdf_naive(logp):
    return logp.exp().cumsum(-1).log()


# --- cases ------------------------------------------------------------------------------------


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def make_cases(device, only, compile_):
    """(recipe, shape, [(way name, fn)], check) per case; the first way is scanops'."""
    g = torch.Generator().manual_seed(0)
    cases = []

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device)

    def close(a, b, rtol=1e-4, atol=1e-4):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)

    def compiled(name, fn):
        return [(f"torch.compile({name})", torch.compile(fn, dynamic=False))] if compile_ else []

    if "gae" in only:
        T, envs, gamma, lam = 2048, 1024, 0.99, 0.95
        r, v, last = rnd(T, envs), rnd(T, envs), rnd(envs)
        d = (torch.rand(T, envs, generator=g) < 0.005).float().to(device)
        rT, vT, dT = (x.T.contiguous() for x in (r, v, d))
        cases.append(("GAE (T, envs), time dim 0", f"{T} x {envs}", [
            ("scanops", lambda: gae_scanops(r, v, d, last, gamma, lam)),
            ("Python loop", lambda: gae_loop(r, v, d, last, gamma, lam)),
        ], lambda a, b: close(a[0], b[0])))
        cases.append(("GAE (envs, T), time dim 1", f"{envs} x {T}", [
            ("scanops", lambda: gae_scanops(rT, vT, dT, last, gamma, lam, dim=1)),
            ("Python loop", lambda: gae_loop(rT, vT, dT, last, gamma, lam, dim=1)),
        ], lambda a, b: close(a[0], b[0])))
        cases.append(("discounted returns (T, envs)", f"{T} x {envs}", [
            ("scanops", lambda: returns_scanops(r, d, gamma)),
            ("Python loop", lambda: returns_loop(r, d, gamma)),
        ], lambda a, b: close(a, b)))
    if "top-p" in only:
        batch, vocab, top_p = 64, 151936, 0.9
        logits = 3 * rnd(batch, vocab)
        sorted_probs = logits.softmax(-1).sort(-1, descending=True).values
        # The masks may differ only where the float64 mass before a token ties with top_p to
        # rounding (the two sums are rounded differently: CUDA's in float32, in other orders).
        before64 = sorted_probs.double().cumsum(-1) - sorted_probs.double()
        tie = (before64 - top_p).abs() < 1e-5

        def check_mask(a, b):
            assert torch.equal(a[~tie], b[~tie]), \
                f"top-p masks differ in {(a != b)[~tie].sum().item()} places away from ties"
        cases.append(("top-p mask from sorted probs", f"{batch} x {vocab}", [
            ("scanops", lambda: top_p_mask_scanops(sorted_probs, top_p)),
            ("cumsum + shift", lambda: top_p_mask_torch(sorted_probs, top_p)),
        ] + compiled("cumsum + shift", top_p_mask_torch), check_mask))

        def check_sample(a, b):
            _, kept, order = a
            kept = torch.zeros_like(b[1]).scatter(-1, order, kept)
            differ = (kept > 0) != (b[1] > 0)
            assert not (differ & ~torch.zeros_like(differ).scatter(-1, order, tie)).any()
            close(kept.masked_fill(differ, 0), b[1].masked_fill(differ, 0), rtol=1e-4,
                  atol=1e-6)
        cases.append(("top-p sampling step", f"{batch} x {vocab}", [
            ("scanops", lambda: sample_top_p_scanops(logits, top_p)),
            ("sort, cumsum, shift, scatter", lambda: sample_top_p_torch(logits, top_p)),
        ] + compiled("sort, cumsum, shift, scatter", sample_top_p_torch), check_sample))
    if "drawdown" in only:
        n = 10_000_000
        price = 100 * (5e-4 * rnd(n)).cumsum(0).exp()  # finite: the log-price wanders ~1.6

        assert price.isfinite().all()

        def check_dd(a, b):
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), (a, b)
        cases.append(("drawdown (cummax, 1 - p / peak, max)", "1e7", [
            ("scanops", lambda: drawdown_scanops(price)),
            ("torch.cummax", lambda: drawdown_torch(price)),
        ] + compiled("torch.cummax", drawdown_torch), check_dd))
        cases.append(("running maximum alone", "1e7", [
            ("scanops", lambda: scanops.cummax(price, 0)),
            ("torch.cummax", lambda: torch.cummax(price, 0)),
        ], lambda a, b: check_dd(a, b)))
    if "log-cdf" in only:
        rows, n = 64, 32768
        logp = (4 * rnd(rows, n)).log_softmax(-1)
        cases.append(("log-CDF (logcumsumexp)", f"{rows} x {n}", [
            ("scanops", lambda: scanops.logcumsumexp(logp, -1)),
            ("torch.logcumsumexp", lambda: torch.logcumsumexp(logp, -1)),
            ("naive log(cumsum(exp)) (underflows)", lambda: log_cdf_naive(logp)),
        ] + compiled("torch.logcumsumexp", lambda x: torch.logcumsumexp(x, -1)),
            lambda a, b: close(a, b, rtol=1e-5, atol=1e-5)))
    return cases


def run_case(device, case, reps):
    recipe, shape, ways, check = case
    outs = [fn() for _, fn in ways]  # warm-up (and compile)
    sync(device)
    for (name, _), out in zip(ways[1:], outs[1:]):
        if not name.startswith("naive"):
            check(outs[0], out)
    del outs
    best = [float("inf")] * len(ways)
    for _ in range(reps):
        for i, (_, fn) in enumerate(ways):
            sync(device)
            t = time.perf_counter()
            fn()
            sync(device)
            best[i] = min(best[i], time.perf_counter() - t)
    return [{"recipe": recipe, "shape": shape, "device": device, "way": name,
             "ms": best[i] * 1e3, "scanops_ms": best[0] * 1e3}
            for i, (name, _) in enumerate(ways)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--threads", default=None, help="CPU thread counts, e.g. 1,2 "
                    "(default: torch's, %d here)" % torch.get_num_threads())
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="gae,top-p,drawdown,log-cdf")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    only = set(args.only.split(","))
    devices = [d for d in args.devices.split(",")
               if d == "cpu" or (d == "cuda" and torch.cuda.is_available())]
    threads = ([int(t) for t in args.threads.split(",")] if args.threads
               else [torch.get_num_threads()])
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=os.path.dirname(__file__)).stdout.strip()
    except OSError:
        commit = ""
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__, "scanops": scanops.__version__,
        "library": str(scanops.library_path()), "commit": commit, "host": platform.node(),
        "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
        "cuda": torch.cuda.get_device_name(0) if "cuda" in devices else None,
        "reps": args.reps, "load_before": os.getloadavg(),
    }
    rows = []
    t0 = time.perf_counter()
    for device in devices:
        cases = make_cases(device, only, args.compile)
        for nt in (threads if device == "cpu" else [None]):
            if nt:
                torch.set_num_threads(nt)
            for case in cases:
                for row in run_case(device, case, args.reps):
                    row["threads"] = nt
                    rows.append(row)
                    print(f"{row['recipe']:38s} {device:4s} {nt or '-'!s:>2} "
                          f"{row['way']:36s} {row['ms']:10.2f} ms", flush=True)
        del cases
    meta["load_after"] = os.getloadavg()
    meta["seconds"] = time.perf_counter() - t0

    lines = ["| recipe | size | device | threads | scanops ms | usual way | usual ms | "
             "scanops speed-up |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["way"] == "scanops":
            continue
        lines.append(f"| {row['recipe']} | {row['shape']} | {row['device']} | "
                     f"{row['threads'] or '-'} | {row['scanops_ms']:.2f} | {row['way']} | "
                     f"{row['ms']:.2f} | {row['ms'] / row['scanops_ms']:.1f}x |")
    table = "\n".join(lines)
    print()
    print(f"torch {meta['torch']}, scanops {meta['scanops']} ({meta['commit']}), "
          f"{meta['cpu_count']} CPUs, load {meta['load_before']} -> {meta['load_after']}, "
          f"{meta['seconds']:.0f} s")
    print(table)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
