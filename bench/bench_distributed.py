"""A scan along a dimension sharded across devices: scanops' carry exchange against DTensor's own
strategy for torch.cumsum (all-gather the data, scan it whole) and against one device.

    torchrun --nproc-per-node 2 bench/bench_distributed.py                 # 2 GPUs, NCCL
    torchrun --nproc-per-node 2 bench/bench_distributed.py --device cpu    # CPU, gloo, small

x: (rows, cols) float32, sharded along dim 1 (the scan dim) over all ranks (Shard(1)).
Default size: (8, 2^27) on CUDA (4 GiB; a 2 GiB shard per GPU), (8, 2^18) on the CPU.

Rows of the table (time: the slowest rank's, median of --reps, after --warmup):
- scanops sharded: scanops.cumsum(x_dtensor, 1) (torch.ops.scanops.cumsum on the DTensor):
  each rank sums its shard per line, one all_gather of rows x world states, the local scan
  from the carry; the output stays Shard(1);
- scanops sharded, local only: the same two local passes without the collective (the floor of
  the above: what the exchange costs is the difference);
- DTensor torch.cumsum: torch.cumsum on the DTensor: DTensor's strategy for a scan along a
  sharded dim (torch 2.11: the input is redistributed to Replicate along the scan dim, the
  whole tensor scanned on every rank);
- one device scanops.cumsum / torch.cumsum: the whole tensor on rank 0's device alone.
Also printed: the bytes each strategy's collectives move per rank (scanops: rows x world
states; DTensor: the other ranks' shards), and the largest difference of the sharded result
from the one-device result (a check, on each rank's own shard).

Options: --rows R --cols-log2 C --op cumsum|cumsum-exclusive-reverse|linear_recurrence
--reps N --warmup N --json FILE. Loads the library like the tests (SCANOPS_LIBRARY, else
build/libscanops.so through python/scanops).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import scanops  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"],
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--cols-log2", type=int, default=None)
    p.add_argument("--op", default="cumsum",
                   choices=["cumsum", "cumsum-exclusive-reverse", "linear_recurrence"])
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.cols_log2 is None:
        a.cols_log2 = 27 if a.device == "cuda" else 18
    if a.reps is None:
        a.reps = 10 if a.device == "cuda" else 5
    return a


def main():
    args = parse()
    if "RANK" not in os.environ:
        sys.exit("run it with torchrun, e.g. torchrun --nproc-per-node 2 "
                 "bench/bench_distributed.py")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dist.init_process_group("nccl")
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dist.init_process_group("gloo")
        dev = torch.device("cpu")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    mesh = init_device_mesh(args.device, (world,))
    rows, cols = args.rows, 1 << args.cols_log2
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(rows, cols, device=dev, generator=g)
    a = torch.rand(rows, cols, device=dev, generator=g) * 0.1 + 0.9
    xd = distribute_tensor(x, mesh, [Shard(1)])
    ad = distribute_tensor(a, mesh, [Shard(1)])
    xl, al = xd.to_local(), ad.to_local()
    kw = {"exclusive": True, "reverse": True} if args.op == "cumsum-exclusive-reverse" else {}
    lr = args.op == "linear_recurrence"
    ops = torch.ops.scanops

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def timed(fn, everyone=True):
        """Median over reps of the slowest rank's time (ms); fn on rank 0 only if not
        everyone."""
        times = []
        for i in range(args.warmup + args.reps):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            if everyone or rank == 0:
                out = fn()
                del out
            sync()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            if dev.type == "cuda":
                t = t.to(dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if i >= args.warmup:
                times.append(t.item() * 1e3)
        return statistics.median(times)

    results = {}

    def run(name, fn, everyone=True):
        try:
            results[name] = timed(fn, everyone)
        except Exception as e:  # noqa: BLE001 (e.g. out of memory for the gathered copy)
            results[name] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            sync()

    if lr:
        run("scanops sharded", lambda: scanops.linear_recurrence(ad, xd, 1))
        # (two local scans: the final state of the shard, then the scan from the carry)
        run("scanops sharded, local only",
            lambda: (ops.linear_recurrence(al, xl, 1)[:, -1],
                     ops.linear_recurrence(al, xl, 1, initial=xl[:, 0])))
        run("one device scanops", lambda: ops.linear_recurrence(a, x, 1), everyone=False)
    else:
        run("scanops sharded", lambda: scanops.cumsum(xd, 1, **kw))
        run("scanops sharded, local only",
            lambda: ops.cumsum(xl, 1, initial=xl.sum(1), **kw))
        if not kw:
            run("DTensor torch.cumsum", lambda: torch.cumsum(xd, 1))
        run("one device scanops", lambda: ops.cumsum(x, 1, **kw), everyone=False)
        if not kw:
            run("one device torch.cumsum", lambda: torch.cumsum(x, 1), everyone=False)

    # check: each rank's shard of the sharded result against the one-device result
    y = scanops.linear_recurrence(ad, xd, 1) if lr else scanops.cumsum(xd, 1, **kw)
    ref = ops.linear_recurrence(a, x, 1) if lr else ops.cumsum(x, 1, **kw)
    assert isinstance(y, DTensor) and y.placements == (Shard(1),)
    # Shard(1): torch.chunk semantics; this rank's columns
    chunk = (cols + world - 1) // world
    off = min(rank * chunk, cols)
    ref_local = ref[:, off:off + y.to_local().shape[1]]
    err = ((y.to_local() - ref_local).abs().max() / ref_local.abs().max().clamp(min=1e-30))
    err = err.to(torch.float64)
    dist.all_reduce(err, op=dist.ReduceOp.MAX)
    del y, ref, ref_local

    state = 2 if lr else 1
    bytes_scanops = rows * world * state * x.element_size()
    bytes_dtensor = rows * (cols - xl.shape[1]) * x.element_size()
    if rank == 0:
        shard_mb = xl.numel() * xl.element_size() / 2**20
        print(f"# {args.op}: x ({rows}, 2^{args.cols_log2}) float32 on {world} x "
              f"{torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'CPU'} "
              f"({'NCCL' if dev.type == 'cuda' else 'gloo'}), Shard(1): {shard_mb:.0f} MiB a "
              f"shard; torch {torch.__version__}; median of {args.reps}")
        base = results.get("one device scanops")
        print("| strategy | ms | vs one device scanops |")
        print("|---|---|---|")
        for name, t in results.items():
            if isinstance(t, float):
                rel = f"{base / t:.2f}x" if isinstance(base, float) else "-"
                print(f"| {name} | {t:.3f} | {rel} |")
            else:
                print(f"| {name} | {t} | |")
        print(f"bytes a rank sends+receives in collectives: scanops {bytes_scanops} "
              f"(rows x world x state), DTensor's strategy {bytes_dtensor} (the other shards)")
        print(f"max relative difference of the sharded result from one device: "
              f"{err.item():.3g}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"op": args.op, "rows": rows, "cols": cols, "world": world,
                           "device": str(dev), "torch": torch.__version__,
                           "results_ms": results, "max_rel_err": err.item(),
                           "bytes_scanops": bytes_scanops,
                           "bytes_dtensor": bytes_dtensor}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
