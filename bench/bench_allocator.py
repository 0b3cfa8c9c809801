"""Caching-allocator benchmarks: trace replay per policy, the cached fast path, scaling.

1. Replays every trace in ``tests/data/traces`` (and a synthetic convnet serving batches of
   1..32, :mod:`accelrt.memory._synthetic`) through a fresh allocator on a simulated device
   with the default settings, ``expandable_segments:True`` and accelrt's low-fragmentation
   ``expandable_segments:True,page_reuse:True``, side by side: reserved/live, Python calls per
   operation, the driver calls the simulated device counted and their H100 cost, and the
   total (Python time at this machine's speed + driver time) against the default policy.
2. Times ``malloc`` + ``free`` of a cached block (512 B, 1 MiB, 20 MiB).
3. Scaling: calls per operation with 1,000 and with 300,000 free blocks in the free lists.
4. A snapshot of 10,000 segments, ``acc.rand`` against numpy's Philox generator, and
   ``memory_allocated()`` / ``memory_stats()`` on the cpu backend.

Every time is in *calls*: the thread CPU time of the measurement divided by that of one empty
method call, measured right before and right after it (paired), so that the load of a
shared machine cancels out; the settings of one trace are run alternately, ``--repeat``
times, and the median ratio is printed. Thread CPU time leaves out time the thread waits.

Usage::

    python bench/bench_allocator.py
    python bench/bench_allocator.py --repeat 7 --loops 50000 --traces DIR --quick
"""

from __future__ import annotations

import argparse
import gc
import glob
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from accelrt import memory
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.memory._replay import load_trace, replay_ops, trace_ops
from accelrt.memory._simulated import SimulatedBackend
from accelrt.memory._synthetic import convnet_inference_ops

SETTINGS = (("default", ""), ("expandable", "expandable_segments:True"),
            ("low-frag", "expandable_segments:True,page_reuse:True"))

#: Targets in calls (empty method calls) and ratios.
TARGETS = {"replay": 30.0, "alloc+free": 30.0, "scaling": 1.3, "geomean": 1.01, "worst": 1.02}

_clock = time.thread_time


class _Empty:
    def m(self) -> None:
        pass


def _calibrate(loops: int) -> float:
    """Thread CPU seconds per empty method call ``obj.m()`` (the loop included)."""
    m = _Empty().m
    t0 = _clock()
    for _ in range(loops):
        m()
    return (_clock() - t0) / loops


def paired(fn: Callable[[], tuple[float, int]], cal_loops: int) -> float:
    """``fn()`` returns (thread seconds, operations); the result is calls per operation, the
    calibration measured right before and right after it."""
    gc.collect()
    c0 = _calibrate(cal_loops)
    t, n = fn()
    c1 = _calibrate(cal_loops)
    return t / n / ((c0 + c1) / 2)


def _replay_timed(ops: Sequence[Any], conf: str) -> tuple[float, int]:
    a = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(conf))
    malloc, free = a.malloc, a.free
    handles: dict[int, int] = {}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        t0 = _clock()
        for is_alloc, addr, size, stream in ops:
            if is_alloc:
                handles[addr] = malloc(size, stream)
            else:
                free(handles.pop(addr))
        t = _clock() - t0
    finally:
        if gc_was:
            gc.enable()
    return t, len(ops)


def bench_trace(ops: Sequence[Any], repeat: int, cal_loops: int) -> dict[str, dict[str, Any]]:
    """Per setting: replay_ops's result plus ``calls`` per op (median of alternating runs)."""
    rows = {label: dict(replay_ops(ops, parse_config(conf))) for label, conf in SETTINGS}
    samples: dict[str, list[float]] = {label: [] for label, _ in SETTINGS}
    for _ in range(repeat):
        for label, conf in SETTINGS:
            samples[label].append(paired(lambda c=conf: _replay_timed(ops, c), cal_loops))
    for label, _ in SETTINGS:
        rows[label]["calls"] = statistics.median(samples[label])
    return rows


def bench_alloc_free(size: int, loops: int) -> tuple[float, int]:
    """Thread seconds for ``loops`` ``malloc`` + ``free`` of a block the allocator has cached."""
    a = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(""))
    malloc, free = a.malloc, a.free
    free(malloc(size, 0))                       # warm: the segment is now cached
    t0 = _clock()
    for _ in range(loops):
        free(malloc(size, 0))
    return _clock() - t0, loops


def scaling_allocator(n_free: int, seed: int = 0) -> tuple[DeviceCachingAllocator, list[int]]:
    """An allocator whose small-pool free list holds ``n_free`` blocks that cannot merge
    (each between two live ones) of sizes 512 B .. 64 KiB; returns it and the sizes used."""
    rng = random.Random(seed)
    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 40), 0, parse_config(""))
    sizes = [rng.randrange(1, 129) * 512 for _ in range(2 * n_free + 1)]
    ptrs = [a.malloc(s, 0) for s in sizes]
    for p in ptrs[1::2]:
        a.free(p)
    return a, sizes


def scaling_ops(sizes: list[int], count: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    return [rng.choice(sizes) for _ in range(count)]


def bench_scaling(a: DeviceCachingAllocator, work: list[int]) -> tuple[float, int]:
    """Thread seconds for a malloc and a free of each size in ``work`` (two ops each), with
    up to eight blocks live so that frees and lookups meet the big free list."""
    malloc, free = a.malloc, a.free
    live: list[int] = []
    t0 = _clock()
    for s in work:
        live.append(malloc(s, 0))
        if len(live) > 8:
            free(live.pop(0))
    t = _clock() - t0
    for p in live:
        free(p)
    return t, 2 * len(work)


def bench_getter(fn: Callable[[], Any], loops: int) -> tuple[float, int]:
    t0 = _clock()
    for _ in range(loops):
        fn()
    return _clock() - t0, loops


def _traces(folder: str) -> list[tuple[str, list[Any]]]:
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "trace_*.json*"))):
        name = os.path.basename(path).removeprefix("trace_").split(".")[0]
        out.append((name, trace_ops(load_trace(path), path)))
    return out


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--traces", default=os.path.join(here, "..", "tests", "data", "traces"),
                        help="folder of trace_*.json.gz files")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loops", type=int, default=20000)
    parser.add_argument("--scaling", type=int, default=300_000,
                        help="free blocks of the big scaling case (the small one has 1,000)")
    parser.add_argument("--quick", action="store_true", help="skip the scaling rows")
    args = parser.parse_args()
    cal = max(1000, args.loops * 5)

    print("## Trace replay (simulated device; calls = Python time per op in empty method calls)")
    print("| trace | ops | setting | reserved/live | calls/op | device mallocs | vm maps | "
          "vm unmaps | driver ms (H100) | total ms vs default |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    traces = _traces(args.traces)
    workloads = traces + [("synthetic convnet b1-32", convnet_inference_ops(batches=60, seed=0))]
    unit_us = _calibrate(cal) * 1e6
    ratios: dict[str, list[float]] = {label: [] for label, _ in SETTINGS}
    default_calls: list[float] = []
    total_ok = True
    for name, ops in workloads:
        rows = bench_trace(ops, args.repeat, cal)
        base_total = None
        for label, _ in SETTINGS:
            r = rows[label]
            py_ms = r["calls"] * unit_us * r["ops"] / 1000
            total = py_ms + r["driver_us_h100"] / 1000
            if base_total is None:
                base_total = total
            if label == "default" and not name.startswith("synthetic"):
                default_calls.append(r["calls"])
            if not name.startswith("synthetic"):
                ratios[label].append(r["reserved_over_live"])
                if label == "low-frag" and total > base_total:
                    total_ok = False
            print(f"| {name} | {r['ops']:,} | {label} | {r['reserved_over_live']:.4f} | "
                  f"{r['calls']:.1f} | {r['device_mallocs']} | {r['vm_maps']} | "
                  f"{r['vm_unmaps']} | {r['driver_us_h100'] / 1000:.1f} | "
                  f"{total:.1f} ({total / base_total:.2f}x) |")
    print()
    print("## Targets")
    print("| target | measured | status |")
    print("|---|---|---|")
    for label, _ in SETTINGS:
        rs = ratios[label]
        if rs:
            gm = math.exp(sum(math.log(x) for x in rs) / len(rs))
            line = f"geomean {gm:.4f}, worst {max(rs):.4f} over {len(rs)} traces"
            ok = gm <= TARGETS["geomean"] and max(rs) <= TARGETS["worst"]
            print(f"| {label}: reserved/live geomean <= 1.01, worst <= 1.02 | {line} | "
                  f"{_mark(ok) if label == 'low-frag' else '-'} |")
    if default_calls:
        print(f"| default replay <= {TARGETS['replay']:.0f} calls/op | "
              f"{min(default_calls):.1f} - {max(default_calls):.1f} | "
              f"{_mark(max(default_calls) <= TARGETS['replay'])} |")
    print(f"| low-frag total (Python + H100 driver time) <= default on every trace | see "
          f"table | {_mark(total_ok)} |")
    for size, label in ((512, "512 B"), (1 << 20, "1 MiB"), (20 << 20, "20 MiB")):
        c = statistics.median(paired(lambda s=size: bench_alloc_free(s, args.loops), cal)
                              for _ in range(args.repeat))
        print(f"| cached alloc+free {label} <= {TARGETS['alloc+free']:.0f} calls | {c:.1f} | "
              f"{_mark(c <= TARGETS['alloc+free'])} |")
    if not args.quick:
        work = None
        res = {}
        for n in (1000, args.scaling):
            a, sizes = scaling_allocator(n)
            if work is None:
                work = scaling_ops(sizes, max(2000, args.loops // 2))
            res[n] = statistics.median(paired(lambda a=a: bench_scaling(a, work), cal)
                                       for _ in range(args.repeat))
            del a
            gc.collect()
        ratio = res[args.scaling] / res[1000]
        print(f"| scaling: {args.scaling:,} free blocks <= {TARGETS['scaling']}x of 1,000 | "
              f"{res[1000]:.1f} -> {res[args.scaling]:.1f} calls/op ({ratio:.2f}x) | "
              f"{_mark(ratio <= TARGETS['scaling'])} |")
    snapshot_row(args.repeat)
    rng_row(args.repeat)
    keep = memory.caching_allocator_alloc(4096)  # the current device's allocator exists
    try:
        c = statistics.median(paired(lambda: bench_getter(memory.memory_allocated, args.loops),
                                     cal) for _ in range(args.repeat))
        print(f"| memory_allocated() | {c:.1f} calls | - |")
        c = statistics.median(paired(lambda: bench_getter(memory.memory_stats,
                                                          max(1, args.loops // 10)), cal)
                              for _ in range(args.repeat))
        print(f"| memory_stats() | {c:.1f} calls | - |")
    finally:
        memory.caching_allocator_delete(keep)
    print(f"| empty method call (the unit) | {unit_us * 1000:.1f} ns thread CPU time | |")


# ---------------------------------------------------------------------- snapshot and RNG rows
# Defined in bench/bench_snapshot.py and bench/bench_random.py (each also runs on its own);
# imported here so that this script prints every issue-13 row in one run.

from bench_random import rng_row  # noqa: E402
from bench_snapshot import snapshot_row  # noqa: E402


if __name__ == "__main__":
    main()
