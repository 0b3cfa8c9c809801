"""Benchmark: float32 uniform generation on the CPU backend vs numpy's Philox.

Compares, for 1M and 16M float32 elements (repeats interleaved so that machine noise hits
all sides alike; the machine's speed can swing 2x with load, so the numpy column is the
calibration and the ratios are what to read):

* ``numpy``: ``numpy.random.Generator(numpy.random.Philox(seed)).random(n, dtype=np.float32)``
  (numpy's C Philox4x64-10, a new array per call);
* ``accelrt``: ``accelrt.rand(n, device="cpu:0")`` (vectorised numpy Philox4x32-10 straight
  into caching-allocator memory, multi-threaded for large requests);
* ``accelrt 1 thread``: the same generator core on one thread (``_philox.fill(...,
  parallel=False)`` into a preallocated array).

Columns: ``ms`` and ``GB/s`` from the median time; ``vs numpy`` the median over repeats of
the time divided by numpy's time *in the same repeat* (paired, so slow phases of the machine
cancel); ``best`` the best time divided by numpy's best time.

Then the issue-13 rows (:func:`rng_row`, also printed by ``bench/bench_allocator.py``):
``acc.rand(n)`` against numpy's Philox for the same count at 1,000 elements (a fixed per-call
cost: target at most 3x) and at 10 million (target at most 1.1x), paired repeat by repeat.

Run: ``python bench/bench_random.py [--repeat 11] [--json out.json]``. Not part of pytest.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

import accelrt as acc
from accelrt.random import _philox


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_sizes(sizes: list[int], repeat: int) -> list[dict[str, float]]:
    """Per implementation and size: median and best seconds per call, and the median paired
    ratio to numpy (keys ``name``, ``name best``, ``name ratio``)."""
    rows = []
    gen = np.random.Generator(np.random.Philox(1234))
    acc_gen = acc.random.Generator("cpu:0").manual_seed(1234)
    for n in sizes:
        out = np.empty(n, np.float32)
        impls: dict[str, Callable[[], object]] = {
            "numpy": functools.partial(gen.random, n, dtype=np.float32),
            "accelrt": functools.partial(acc.rand, n, device="cpu:0", generator=acc_gen),
            "accelrt 1 thread": functools.partial(_philox.fill, out, "uniform", 1234, 0,
                                                  (0.0, 1.0), parallel=False),
        }
        for fn in impls.values():  # warm up (allocator, page faults, thread pool)
            fn()
        times: dict[str, list[float]] = {k: [] for k in impls}
        for _ in range(repeat):
            for name, fn in impls.items():
                times[name].append(_time(fn))
        row: dict[str, float] = {"n": n}
        for name, ts in times.items():
            row[name] = statistics.median(ts)
            row[f"{name} best"] = min(ts)
            row[f"{name} ratio"] = statistics.median(
                t / b for t, b in zip(ts, times["numpy"]))
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1 << 20, 1 << 24])
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    rows = bench_sizes(args.sizes, args.repeat)
    print(f"cpu count: {os.cpu_count()}, numpy {np.__version__}, repeat {args.repeat}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'elements':>10} {'impl':>18} {'ms':>9} {'GB/s':>7} {'vs numpy':>9} {'best':>7}")
    for row in rows:
        n = int(row["n"])
        for name in ("numpy", "accelrt", "accelrt 1 thread"):
            t = row[name]
            best = row[f"{name} best"] / row["numpy best"]
            print(f"{n:>10} {name:>18} {t * 1e3:9.2f} {4 * n / t / 1e9:7.2f} "
                  f"{row[f'{name} ratio']:8.2f}x {best:6.2f}x")
    rows.append({"targets": rng_row(args.repeat)})  # type: ignore[dict-item]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


# ---------------------------------------------------------------------- issue 13 targets

class _Empty:
    def m(self) -> None:
        pass


def _empty_call_seconds(clock: Callable[[], float], loops: int = 200_000) -> float:
    """Seconds per empty method call ``obj.m()`` (the loop included), on ``clock``."""
    m = _Empty().m
    t0 = clock()
    for _ in range(loops):
        m()
    return (clock() - t0) / loops


def _loop_seconds(fn: Callable[[], object], loops: int,
                  clock: Callable[[], float]) -> float:
    t0 = clock()
    for _ in range(loops):
        fn()
    return (clock() - t0) / loops


#: (elements, calls per timing, target ratio to numpy)
RNG_TARGETS = ((1000, 2000, 3.0), (10_000_000, 1, 1.1))


def rng_row(repeat: int) -> list[dict[str, float]]:
    """``acc.rand(n)`` against ``numpy.random.Generator(numpy.random.Philox(seed))
    .random(n, dtype=np.float32)`` (issue 13's anchor), for the sizes of
    :data:`RNG_TARGETS`; prints a markdown table and returns its rows.

    Each repeat times numpy's calls, then accelrt's, back to back (an empty-method-call
    calibration right before them gives the ``calls`` column), and the ratio of the two; the
    median over repeats is printed. The 1,000-element row uses the calling thread's CPU time
    when the cpu backend runs stream work on the calling thread (its default), so other
    processes on a shared machine do not count; 10 million elements use wall time, since
    large requests are split across host threads.
    """
    gen = np.random.Generator(np.random.Philox(1234))
    acc_gen = acc.random.Generator("cpu:0").manual_seed(1234)
    sync = not acc.get_device_properties("cpu:0").get("async_streams", False)
    print()
    print("## RNG: acc.rand(n) vs numpy Generator(Philox).random(n, float32) (median us; "
          "ratio = median of paired ratios)")
    print("| n | numpy us | accelrt us | ratio | accelrt calls | target ratio | status |")
    print("|---|---|---|---|---|---|---|")
    out = []
    for n, loops, target in RNG_TARGETS:
        clock = time.thread_time if sync and n < 100_000 else time.perf_counter

        def np_fn(n: int = n) -> object:
            return gen.random(n, dtype=np.float32)

        def acc_fn(n: int = n) -> object:
            return acc.rand(n, device="cpu:0", generator=acc_gen)

        for _ in range(3):   # warm up: allocator cache, thread pool, run of blocks
            np_fn()
            acc_fn()
        ratios, t_np, t_acc, calls = [], [], [], []
        for _ in range(max(repeat, 5)):
            unit = _empty_call_seconds(clock)
            s_np = _loop_seconds(np_fn, loops, clock)
            s_acc = _loop_seconds(acc_fn, loops, clock)
            t_np.append(s_np)
            t_acc.append(s_acc)
            calls.append(s_acc / unit)
            ratios.append(s_acc / s_np)
        row = {"n": n, "numpy_us": statistics.median(t_np) * 1e6,
               "accelrt_us": statistics.median(t_acc) * 1e6,
               "ratio": statistics.median(ratios), "calls": statistics.median(calls),
               "target": target}
        out.append(row)
        print(f"| {n:,} | {row['numpy_us']:,.1f} | {row['accelrt_us']:,.1f} | "
              f"{row['ratio']:.2f} | {row['calls']:,.0f} | <= {target} | "
              f"{'met' if row['ratio'] <= target else 'NOT met'} |")
    return out


if __name__ == "__main__":
    main()
