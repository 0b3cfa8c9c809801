"""Caching-allocator benchmarks: trace replay, the cached fast path, and the stats getters.

1. Replays the two shared real traces (vendored in ``tests/data/traces``) through a fresh allocator on a
   simulated device, with the default settings, with ``expandable_segments:True`` and with
   accelrt's low-fragmentation ``expandable_segments:True,page_reuse:True``, and
   prints reserved/live, device mallocs and us/op beside the peers' numbers measured on an H100
   (from ``traces/README.md``).
2. Times ``malloc`` + ``free`` of a cached block (512 B, 1 MiB, 20 MiB) on the allocator.
3. Times ``accelrt.memory.memory_allocated()`` and ``memory_stats()`` on the cpu backend.
4. Times an empty method call as a calibration: the machine's speed varies with load, so every
   hot-path time is also printed in units of that call (compare those across runs).
5. ``snapshot_row``: ``memory_snapshot()`` (and the full ``_snapshot()``) over 10,000 segments of
   7 blocks on a simulated device, in thread CPU time and in paired empty method calls.
6. ``rng_row``: ``acc.rand(n)`` against numpy's ``Generator(Philox)`` for 1,000 and 10 million
   float32 numbers, alternating, with the median of the paired ratios.

Every timing is the median of ``--repeat`` runs; each ``bench_*(loops)`` returns seconds per
call with lookups hoisted out of the loop.

Usage::

    python bench/bench_allocator.py
    python bench/bench_allocator.py --repeat 9 --loops 50000 --traces DIR
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from accelrt import memory
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.memory._replay import load_trace, replay_ops, trace_ops
from accelrt.memory._simulated import SimulatedBackend

TRACES = ("resnet50_train", "varlen_encoder")
SETTINGS = ("", "expandable_segments:True", "expandable_segments:True,page_reuse:True")

#: The peers on one H100 (traces/README.md): (peak reserved, reserved/live, us/op) per trace.
PEERS: dict[str, dict[str, tuple[int, float, float]]] = {
    "resnet50_train": {
        "PyTorch native": (6_962_544_640, 1.208, 3.6),
        "PyTorch expandable": (5_865_734_144, 1.018, 4.8),
        "CuPy MemoryPool": (6_838_235_648, 1.187, 53.0),
        "CUDA driver pool": (6_274_678_784, 1.089, 4.2),
    },
    "varlen_encoder": {
        "PyTorch native": (1_608_515_584, 1.291, 1.5),
        "PyTorch expandable": (1_495_269_376, 1.200, 1.7),
        "CuPy MemoryPool": (1_605_533_696, 1.289, 26.0),
        "CUDA driver pool": (1_308_622_848, 1.050, 2.2),
    },
}

#: Targets in microseconds.
TARGETS_US = {"replay": 2.0, "alloc+free": 1.5, "memory_allocated": 1.0, "memory_stats": 30.0}


def _median(fn: Callable[[], float], repeat: int) -> float:
    gc.collect()
    return statistics.median(fn() for _ in range(repeat))


def bench_replay(ops: list[Any], conf: str, repeat: int) -> dict[str, Any]:
    """Replay ``ops`` ``repeat`` times; the result of the last run with the median us/op."""
    cfg = parse_config(conf)
    runs = [replay_ops(ops, cfg) for _ in range(repeat)]
    row = dict(runs[-1])
    row["us_per_op"] = statistics.median(r["us_per_op"] for r in runs)
    return row


def bench_alloc_free(size: int, loops: int) -> float:
    """Seconds per ``malloc`` + ``free`` of a block the allocator has cached."""
    a = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(""))
    malloc, free = a.malloc, a.free
    free(malloc(size, 0))                       # warm: the segment is now cached
    t0 = time.perf_counter()
    for _ in range(loops):
        free(malloc(size, 0))
    return (time.perf_counter() - t0) / loops


class _Empty:
    def m(self) -> None:
        pass


def bench_calibration(loops: int) -> float:
    """Seconds per empty method call ``obj.m()`` (the unit for load-independent numbers)."""
    m = _Empty().m
    t0 = time.perf_counter()
    for _ in range(loops):
        m()
    return (time.perf_counter() - t0) / loops


def bench_memory_allocated(loops: int) -> float:
    """Seconds per ``accelrt.memory.memory_allocated()`` (current device)."""
    fn = memory.memory_allocated
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - t0) / loops


def bench_memory_stats(loops: int) -> float:
    """Seconds per ``accelrt.memory.memory_stats()`` (current device)."""
    fn = memory.memory_stats
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - t0) / loops


def _fmt_peer(peer: tuple[int, float, float]) -> str:
    return f"{peer[1]:.3f} / {peer[2]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "tests", "data", "traces")
    parser.add_argument("--traces", default=default if os.path.isdir(default)
                        else os.path.join(here, "..", "..", "shared", "traces"),
                        help="folder with trace_resnet50_train.json.gz and "
                             "trace_varlen_encoder.json.gz")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loops", type=int, default=20000)
    args = parser.parse_args()

    print("## Trace replay (simulated device)")
    print("| trace | setting | peak reserved | reserved/live | device mallocs | us/op | "
          "peers: reserved/live / us/op |")
    print("|---|---|---|---|---|---|---|")
    replay_us = []
    for name in TRACES:
        path = os.path.join(args.traces, f"trace_{name}.json.gz")
        if not os.path.exists(path):
            print(f"| {name} | (missing: {path}) | | | | | |")
            continue
        ops = trace_ops(load_trace(path), path)
        peers = "; ".join(f"{k} {_fmt_peer(v)}" for k, v in PEERS[name].items())
        for conf in SETTINGS:
            r = bench_replay(ops, conf, args.repeat)
            if conf == "":
                replay_us.append(r["us_per_op"])
            print(f"| {name} | {conf or 'default'} | {r['peak_reserved_bytes']:,} | "
                  f"{r['reserved_over_live']:.3f} | {r['device_mallocs']} | "
                  f"{r['us_per_op']:.2f} | {peers if conf == '' else ''} |")

    print()
    calib = _median(lambda: bench_calibration(args.loops * 5), args.repeat) * 1e6
    print(f"## Hot paths (median of repeats; us per call, and in empty method calls "
          f"of {calib * 1000:.1f} ns)")
    print("| operation | us | calls | target us |")
    print("|---|---|---|---|")

    def row(label: str, us: float, target: float) -> None:
        print(f"| {label} | {us:.3f} | {us / calib:.1f} | <= {target} |")

    for size, label in ((512, "512 B"), (1 << 20, "1 MiB"), (20 << 20, "20 MiB")):
        us = _median(lambda: bench_alloc_free(size, args.loops), args.repeat) * 1e6
        row(f"alloc+free cached {label}", us, TARGETS_US["alloc+free"])
    keep = memory.caching_allocator_alloc(4096)  # the current device's allocator exists
    try:
        us = _median(lambda: bench_memory_allocated(args.loops), args.repeat) * 1e6
        row("memory_allocated()", us, TARGETS_US["memory_allocated"])
        us = _median(lambda: bench_memory_stats(max(1, args.loops // 10)), args.repeat) * 1e6
        row("memory_stats()", us, TARGETS_US["memory_stats"])
    finally:
        memory.caching_allocator_delete(keep)
    if replay_us:
        row("replay, default settings (median over traces)", statistics.median(replay_us),
            TARGETS_US["replay"])
    print(f"| empty method call (calibration) | {calib:.4f} | 1.0 | |")
    snapshot_row(args.repeat)
    rng_row(args.repeat)


# ---------------------------------------------------------------------- snapshot and RNG rows

def _paired(fn: Callable[[], object], loops: int, repeat: int,
            clock: Callable[[], float] = time.thread_time) -> tuple[float, float]:
    """Median seconds per ``fn()`` and median ratio to an empty method call, each repeat
    timing ``loops`` calls of ``fn`` right after as many empty calls (paired, same clock), so
    a slow phase of a loaded machine hits both sides."""
    m = _Empty().m
    per, ratio = [], []
    for _ in range(repeat):
        n_empty = max(loops, 200_000)
        t0 = clock()
        for _ in range(n_empty):
            m()
        t1 = clock()
        for _ in range(loops):
            fn()
        t2 = clock()
        per.append((t2 - t1) / loops)
        ratio.append(per[-1] / max((t1 - t0) / n_empty, 1e-12))
    return statistics.median(per), statistics.median(ratio)


def _snapshot_allocator(segments: int = 10_000) -> tuple[DeviceCachingAllocator, list[int]]:
    """``segments`` small segments of 7 blocks each (6 x 300 KiB allocated, 2 freed)."""
    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 45), 0, parse_config(""))
    groups = [[a.malloc(300 << 10, 0) for _ in range(6)] for _ in range(segments)]
    keep = []
    for ps in groups:
        a.free(ps[1])
        a.free(ps[3])
        keep += [ps[0], ps[2], ps[4], ps[5]]
    return a, keep


def snapshot_row(repeat: int) -> None:
    """``memory_snapshot()`` over 10,000 segments of 7 blocks (target: at most 100 ms)."""
    from accelrt.memory._snapshot import build_snapshot, snapshot_segments
    a, keep = _snapshot_allocator()
    assert {len(s["blocks"]) for s in snapshot_segments([a])} == {7}
    print()
    print("## Snapshot: 10,000 segments of 7 blocks (thread CPU time, median; calls = "
          "paired empty method calls)")
    print("| operation | ms | calls | target ms |")
    print("|---|---|---|---|")
    for label, fn in (("memory_snapshot() (segments)", lambda: snapshot_segments([a])),
                      ("_snapshot() (segments, traces, settings)",
                       lambda: build_snapshot(None, [a], {}))):
        sec, calls = _paired(fn, 1, max(repeat, 5))
        print(f"| {label} | {sec * 1e3:.1f} | {calls:,.0f} | <= 100 |")
    for p in keep:
        a.free(p)


def rng_row(repeat: int) -> None:
    """``acc.rand(n)`` against numpy's Philox generator for the same count, paired
    (targets: at most 3x at 1,000 elements, 1.1x at 10 million)."""
    import numpy as np

    import accelrt as acc
    gen = np.random.Generator(np.random.Philox(1234))
    acc_gen = acc.random.Generator("cpu:0").manual_seed(1234)
    print()
    print("## RNG: acc.rand(n) vs numpy Generator(Philox).random(n, float32) (median us; "
          "ratio = median of paired ratios)")
    print("| n | numpy us | accelrt us | ratio | accelrt calls | target ratio |")
    print("|---|---|---|---|---|---|")
    for n, loops, target, clock in ((1000, 2000, 3.0, time.thread_time),
                                    (10_000_000, 1, 1.1, time.perf_counter)):
        def np_fn() -> object:
            return gen.random(n, dtype=np.float32)

        def acc_fn() -> object:
            return acc.rand(n, device="cpu:0", generator=acc_gen)

        np_fn()
        acc_fn()
        ratios, t_np, t_acc, calls = [], [], [], []
        for _ in range(max(repeat, 5)):
            s_np, _ = _paired(np_fn, loops, 1, clock)
            s_acc, c_acc = _paired(acc_fn, loops, 1, clock)
            t_np.append(s_np)
            t_acc.append(s_acc)
            calls.append(c_acc)
            ratios.append(s_acc / s_np)
        print(f"| {n:,} | {statistics.median(t_np) * 1e6:,.1f} | "
              f"{statistics.median(t_acc) * 1e6:,.1f} | {statistics.median(ratios):.2f} | "
              f"{statistics.median(calls):,.0f} | <= {target} |")


if __name__ == "__main__":
    main()
