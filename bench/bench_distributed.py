"""accelrt.distributed against raw mpi4py on the same buffers, in the same run.

For each size (4 B to 64 MiB, x4 steps) and each op (all_reduce SUM in place, broadcast,
all_gather_into_tensor), both sides run on the same memory: accelrt gets the cpu
``acc.Array``, raw mpi4py a numpy view of it (``Allreduce(IN_PLACE, view)``, ``Bcast``,
``Allgather``) on its own duplicate of COMM_WORLD. Samples alternate between the two sides
in ABBA order (raw, accelrt, accelrt, raw, ...) so that load changes and warm-cache effects
hit both; each sample is the mean time per call over a batch, taking the slowest rank; the
table shows the median sample, and ``calls`` the medians in units of one empty Python method
call measured in the same process beside each sample pair. ``ratio`` is accelrt time over raw
time, the median over adjacent (raw, accelrt) sample pairs (the overhead per call; target
<= 1.5 for small messages), and ``bw %`` is accelrt's bandwidth as a share of raw's, 100 /
ratio (target >= 95 % from 1 MiB up). ``--aa`` times raw mpi4py against itself: the noise
floor of the machine at that moment.

Usage (2 ranks, loopback and shared memory only)::

    UCX_TLS=self,sm mpiexec -iface lo -n 2 python -m accelrt.distributed.run \\
        bench/bench_distributed.py [--max-mib 64] [--samples 9] [--json out.json]
    ACCELRT_CPU_STREAMS=async ...   # the same with cpu streams on worker threads
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import accelrt as acc
import accelrt.distributed as dist
from accelrt.distributed._mpi import mpi


def _fmt_size(n: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--min-bytes", type=int, default=4)
    p.add_argument("--max-bytes", type=int, default=None, help="overrides --max-mib")
    p.add_argument("--aa", action="store_true",
                   help="A/A check: time raw mpi4py against itself (the noise floor)")
    p.add_argument("--samples", type=int, default=9)
    p.add_argument("--ops", default="all_reduce,broadcast,all_gather_into_tensor")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    MPI = mpi()
    dist.init_process_group("cpu:mpi")
    rank, n = dist.get_rank(), dist.get_world_size()
    raw = MPI.COMM_WORLD.Dup()
    sizes = []
    s = args.min_bytes
    top = args.max_bytes if args.max_bytes is not None else args.max_mib << 20
    while s <= top:
        sizes.append(s)
        s *= 4

    def timeit(fn: Callable[[], Any], nbytes: int) -> Callable[[], float]:
        batch = max(2, min(2000, int(5e7 // max(nbytes, 1))))

        def sample() -> float:
            raw.Barrier()
            t0 = MPI.Wtime()
            for _ in range(batch):
                fn()
            dt = (MPI.Wtime() - t0) / batch
            return float(raw.allreduce(dt, op=MPI.MAX))
        return sample

    class _Empty:
        def m(self) -> None:
            pass

    def empty_call() -> float:
        """One empty Python method call (seconds), the unit of the ``calls`` columns."""
        obj, reps = _Empty(), 20000
        m = obj.m
        t0 = time.perf_counter()
        for _ in range(reps):
            m()
        return (time.perf_counter() - t0) / reps

    rows: list[dict[str, Any]] = []
    for op in args.ops.split(","):
        for nbytes in sizes:
            count = max(1, nbytes // 4)
            if op == "all_reduce":
                a = acc.full((count,), 1.0, device="cpu")
                view = a.numpy()
                ours = lambda: dist.all_reduce(a)  # noqa: E731
                theirs = lambda: raw.Allreduce(MPI.IN_PLACE, view, MPI.SUM)  # noqa: E731
            elif op == "broadcast":
                a = acc.full((count,), 1.0, device="cpu")
                view = a.numpy()
                ours = lambda: dist.broadcast(a, src=0)  # noqa: E731
                theirs = lambda: raw.Bcast(view, root=0)  # noqa: E731
            else:
                per = max(1, count // n)
                a = acc.full((per,), float(rank), device="cpu")
                out = acc.empty((per * n,), device="cpu")
                view, oview = a.numpy(), out.numpy()
                ours = lambda: dist.all_gather_into_tensor(out, a)  # noqa: E731
                theirs = lambda: raw.Allgather(view, oview)  # noqa: E731
            if args.aa:
                ours = theirs
            acc.synchronize("cpu")
            s_ours, s_theirs = timeit(ours, nbytes), timeit(theirs, nbytes)
            s_theirs(), s_ours()   # warm-up
            t_raw, t_acc, t_call = [], [], []
            for i in range(args.samples):
                if i % 2 == 0:
                    t_raw.append(s_theirs())
                    t_acc.append(s_ours())
                else:
                    t_acc.append(s_ours())
                    t_raw.append(s_theirs())
                t_call.append(empty_call())
            r, m = statistics.median(t_raw), statistics.median(t_acc)
            c = statistics.median(t_call)
            # the ratio of each adjacent pair, then the median: load drifts between pairs
            # cancel (the load on a shared machine moves faster than a whole size's samples)
            ratio = statistics.median(x / y for x, y in zip(t_acc, t_raw))
            moved = count * 4
            rows.append({"op": op, "bytes": moved, "raw_us": r * 1e6, "accelrt_us": m * 1e6,
                         "raw_calls": r / c, "accelrt_calls": m / c,
                         "ratio": ratio, "raw_GBps": moved / r / 1e9,
                         "accelrt_GBps": moved / m / 1e9, "bw_pct": 100 / ratio})
    if rank == 0:
        print(f"# {n} ranks, {MPI.Get_library_version().splitlines()[0].strip()}, "
              f"mpi4py {__import__('mpi4py').__version__}, cpu streams "
              f"{'async' if acc.cpu.is_async() else 'sync'}" if hasattr(acc.cpu, "is_async")
              else f"# {n} ranks, {MPI.Get_library_version().splitlines()[0].strip()}")
        print("| op | size | raw mpi4py (µs) | accelrt (µs) | raw (calls) | accelrt (calls) "
              "| ratio | raw GB/s | accelrt GB/s | bw % |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for row in rows:
            print(f"| {row['op']} | {_fmt_size(row['bytes'])} | {row['raw_us']:.1f} | "
                  f"{row['accelrt_us']:.1f} | {row['raw_calls']:.0f} | "
                  f"{row['accelrt_calls']:.0f} | {row['ratio']:.2f} | {row['raw_GBps']:.3f} | "
                  f"{row['accelrt_GBps']:.3f} | {row['bw_pct']:.0f} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    raw.Free()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
