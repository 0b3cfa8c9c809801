"""Bandwidth of accelrt.comm's broadcast and reduce_add across the devices of one backend.

For each collective, prints the median time of ``--repeat`` runs and the algorithm bandwidth
in GB/s: the bytes that must cross between devices, ``size * (ndev - 1)``, over the time (for
broadcast, one copy to every other device; for reduce_add, every other device's input reaching
the destination). A numpy baseline on the same host (``np.copyto`` / ``np.add`` over the same
buffers) shows what the memory system allows. With ``--backend cuda`` and ``torch`` with CUDA
importable, ``torch.cuda.comm`` runs on the same sizes for comparison.

Usage::

    python bench/bench_comm.py                       # 4 simulated cpu devices, 64 MiB
    python bench/bench_comm.py --mib 16 --repeat 9
    python bench/bench_comm.py --async-streams       # cpu streams on worker threads
    python bench/bench_comm.py --backend cuda        # on a multi-GPU host
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import accelrt as acc
from accelrt import backends, comm

Bench = Callable[[], float]


def _sync(devices: list[str]) -> None:
    for d in devices:
        acc.synchronize(d)


def bench_broadcast(src: Any, devices: list[str]) -> float:
    """Seconds for one ``comm.broadcast`` of ``src`` to ``devices`` (synchronised)."""
    _sync(devices)
    t0 = time.perf_counter()
    outs = comm.broadcast(src, devices=devices)
    _sync(devices)
    dt = time.perf_counter() - t0
    del outs
    return dt


def bench_reduce_add(inputs: list[Any], devices: list[str]) -> float:
    """Seconds for one ``comm.reduce_add`` of ``inputs`` onto ``devices[0]`` (synchronised)."""
    _sync(devices)
    t0 = time.perf_counter()
    out = comm.reduce_add(inputs, destination=devices[0])
    _sync(devices)
    dt = time.perf_counter() - t0
    del out
    return dt


def bench_numpy_copy(src: np.ndarray, dsts: list[np.ndarray]) -> float:
    t0 = time.perf_counter()
    for d in dsts:
        np.copyto(d, src)
    return time.perf_counter() - t0


def bench_numpy_add(inputs: list[np.ndarray], out: np.ndarray) -> float:
    t0 = time.perf_counter()
    np.add(inputs[0], inputs[1], out=out)
    for x in inputs[2:]:
        np.add(out, x, out=out)
    return time.perf_counter() - t0


def _median(fn: Bench, repeat: int) -> float:
    fn()   # warm up: allocator segments, page faults
    return statistics.median(fn() for _ in range(repeat))


def _row(name: str, seconds: float, moved: int) -> None:
    print(f"{name:<34} {seconds * 1e3:>10.2f} ms {moved / seconds / 1e9:>9.2f} GB/s")


def _torch_rows(nbytes: int, ndev: int, repeat: int) -> None:
    try:
        import torch
        import torch.cuda.comm as tcomm
    except ImportError:
        print("(torch not importable: no torch.cuda.comm baseline)")
        return
    if not torch.cuda.is_available() or torch.cuda.device_count() < ndev:
        print("(torch has fewer CUDA devices than asked: no torch.cuda.comm baseline)")
        return
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device="cuda:0")
    devs = list(range(ndev))

    def tb() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = tcomm.broadcast(src, devices=devs)
        for d in devs:
            torch.cuda.synchronize(d)
        del outs
        return time.perf_counter() - t0

    inputs = [torch.ones(n, dtype=torch.float32, device=f"cuda:{d}") for d in devs]

    def tr() -> float:
        for d in devs:
            torch.cuda.synchronize(d)
        t0 = time.perf_counter()
        out = tcomm.reduce_add(inputs, destination=0)
        for d in devs:
            torch.cuda.synchronize(d)
        del out
        return time.perf_counter() - t0

    moved = nbytes * (ndev - 1)
    _row("torch.cuda.comm.broadcast", _median(tb, repeat), moved)
    _row("torch.cuda.comm.reduce_add", _median(tr, repeat), moved)


def _accelrt_rows(devices: list[str], n: int, repeat: int, moved: int) -> None:
    src = acc.full((n,), 1.0, dtype="float32", device=devices[0])
    _row("comm.broadcast", _median(lambda: bench_broadcast(src, devices), repeat), moved)
    inputs = [acc.full((n,), float(i), dtype="float32", device=d) for i, d in enumerate(devices)]
    _row("comm.reduce_add", _median(lambda: bench_reduce_add(inputs, devices), repeat), moved)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="cpu", help="backend to measure (cpu or cuda)")
    p.add_argument("--devices", type=int, default=4, help="number of devices (default 4)")
    p.add_argument("--mib", type=int, default=64, help="array size in MiB (default 64)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per row (median)")
    p.add_argument("--async-streams", action="store_true",
                   help="cpu backend: run stream work on worker threads")
    args = p.parse_args(argv)

    name = args.backend
    if name == "cpu":
        from accelrt.backends.cpu import CpuBackend
        name = "benchcpu"
        backends.register(name, lambda: CpuBackend(num_devices=args.devices,
                                                   async_streams=args.async_streams,
                                                   name="benchcpu"), replace=True)
    b = backends.get_backend(name)
    if b.device_count() < args.devices:
        print(f"{args.backend} has {b.device_count()} device(s); need {args.devices}")
        return 1
    devices = [f"{name}:{i}" for i in range(args.devices)]
    nbytes = args.mib << 20
    n = nbytes // 4
    moved = nbytes * (args.devices - 1)
    mode = "async" if args.async_streams else "sync"
    print(f"accelrt.comm on {args.devices} x {args.backend} "
          f"({mode if args.backend == 'cpu' else 'device'} streams), "
          f"{args.mib} MiB float32 arrays, median of {args.repeat}")
    print(f"{'operation':<34} {'time':>13} {'bandwidth':>14}")

    _accelrt_rows(devices, n, args.repeat, moved)

    if args.backend == "cpu":
        hsrc = np.ones(n, np.float32)
        hdst = [np.empty_like(hsrc) for _ in devices[1:]]
        for d in hdst:
            d.fill(0)   # fault the pages in
        _row("numpy copyto baseline", _median(lambda: bench_numpy_copy(hsrc, hdst),
                                              args.repeat), moved)
        hin = [np.full(n, i, np.float32) for i in range(args.devices)]
        hout = np.zeros_like(hsrc)
        _row("numpy add baseline", _median(lambda: bench_numpy_add(hin, hout), args.repeat),
             moved)
    elif args.backend == "cuda":
        _torch_rows(nbytes, args.devices, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
