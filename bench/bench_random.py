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

Run: ``python bench/bench_random.py [--repeat 11] [--json out.json] [--targets-only]
[--anchor OLD/src]`` (``--anchor``: time another copy of accelrt's ``acc.rand`` beside this one
in the issue-13 rows, alternating, e.g. ``git archive HEAD~1 src | tar -x -C /tmp/old`` then
``--anchor /tmp/old/src``). Not part of pytest.
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
    parser.add_argument("--anchor", help="folder holding another accelrt package (e.g. an old "
                                         "checkout's src) whose acc.rand the issue-13 rows "
                                         "time beside this one, alternating")
    parser.add_argument("--targets-only", action="store_true",
                        help="print only the issue-13 rows")
    args = parser.parse_args()
    anchor = None
    if args.anchor:
        from bench_allocator import load_anchor
        anchor = load_anchor(args.anchor)
    if args.targets_only:
        rng_row(args.repeat, anchor)
        return
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
    rows.append({"targets": rng_row(args.repeat, anchor)})  # type: ignore[dict-item]
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


#: (elements, calls per timing, target ratio to numpy)
RNG_TARGETS = ((1000, 2000, 3.0), (10_000_000, 1, 1.1))


def _timed_loop(fn: Callable[[], object], loops: int,
                clock: Callable[[], float]) -> tuple[float, float]:
    """Seconds per call of ``fn`` on ``clock`` and in process CPU time (every thread)."""
    c0, p0 = clock(), time.process_time()
    for _ in range(loops):
        fn()
    return (clock() - c0) / loops, (time.process_time() - p0) / loops


def rng_row(repeat: int, anchor: str | None = None) -> list[dict[str, float]]:
    """``acc.rand(n)`` against ``numpy.random.Generator(numpy.random.Philox(seed))
    .random(n, dtype=np.float32)`` (issue 13's anchor), for the sizes of
    :data:`RNG_TARGETS`; prints a markdown table and returns its rows.

    Each repeat times numpy's calls, then accelrt's (and, with ``anchor``, the same calls of
    the package of that name, e.g. ``accelrt_anchor`` from ``bench_allocator.py --anchor``),
    back to back, with an empty-method-call calibration right before them for the ``calls``
    column; ``ratio`` is the median over repeats of each one's time divided by numpy's time
    in the same repeat. The 1,000-element rows use the calling thread's CPU time when the cpu
    backend runs stream work on the calling thread (its default), so other processes on a
    shared machine do not count. 10 million elements use wall time, since large requests are
    split across host threads when cores are free, and also show the process CPU time of all
    threads (``cpu ratio``: the work, whatever the number of free cores) and a row with the
    generator held to one thread (the target must not depend on a free core).
    """
    import importlib
    pkgs = {"this": acc}
    if anchor:
        pkgs["anchor"] = importlib.import_module(anchor)
        # its registry names the built-in backends by absolute module; point it at its own
        reg = importlib.import_module(anchor + "._backend")
        reg._BUILTIN_MODULES = {k: anchor + v[len("accelrt"):] if v.startswith("accelrt.") else v
                                for k, v in reg._BUILTIN_MODULES.items()}
    gen = np.random.Generator(np.random.Philox(1234))
    gens = {k: m.random.Generator("cpu:0").manual_seed(1234) for k, m in pkgs.items()}
    sync = not acc.get_device_properties("cpu:0").get("async_streams", False)
    print()
    print("## RNG: acc.rand(n) vs numpy Generator(Philox).random(n, float32) (median us; "
          "ratio = median of paired ratios" + ("; this / anchor" if anchor else "") + ")")
    print("| n | threads | numpy us | accelrt us | ratio | cpu ratio | accelrt calls | "
          "target ratio | status |")
    print("|---|---|---|---|---|---|---|---|---|")
    out = []
    for n, loops, target in RNG_TARGETS:
        for threads in (("any", "1") if n >= 100_000 else ("1",)):
            clock = time.thread_time if sync and n < 100_000 else time.perf_counter

            def np_fn(n: int = n) -> object:
                return gen.random(n, dtype=np.float32)

            fns: dict[str, Callable[[], object]] = {"numpy": np_fn}
            for k, m in pkgs.items():
                fns[k] = functools.partial(m.rand, n, device="cpu:0", generator=gens[k])
            saved = {}
            if threads == "1" and n >= 100_000:   # hold the generator to the calling thread
                for k, m in pkgs.items():
                    ph = importlib.import_module(m.__name__ + ".random._philox")
                    saved[k] = (ph, ph._threads)
                    ph._threads = lambda: 1
            try:
                for _ in range(3):   # warm up: allocator cache, thread pool, run of blocks
                    for fn in fns.values():
                        fn()
                wall: dict[str, list[float]] = {k: [] for k in fns}
                cpu: dict[str, list[float]] = {k: [] for k in fns}
                units = []
                for _ in range(max(repeat, 5)):
                    units.append(_empty_call_seconds(clock))
                    for k, fn in fns.items():
                        w, c = _timed_loop(fn, loops, clock)
                        wall[k].append(w)
                        cpu[k].append(c)
            finally:
                for ph, real in saved.values():
                    ph._threads = real
            med = statistics.median
            row: dict[str, float] = {"n": n, "threads": 0 if threads == "any" else 1,
                                     "numpy_us": med(wall["numpy"]) * 1e6, "target": target}
            for k in pkgs:
                row[f"{k}_us"] = med(wall[k]) * 1e6
                row[f"{k}_ratio"] = med(t / b for t, b in zip(wall[k], wall["numpy"]))
                row[f"{k}_cpu_ratio"] = med(t / b for t, b in zip(cpu[k], cpu["numpy"]))
                row[f"{k}_calls"] = med(t / u for t, u in zip(wall[k], units))
            row["accelrt_us"], row["ratio"] = row["this_us"], row["this_ratio"]
            row["calls"] = row["this_calls"]
            out.append(row)

            def both(key: str, fmt: str) -> str:
                return " / ".join(format(row[f"{k}_{key}"], fmt) for k in pkgs)

            print(f"| {n:,} | {threads} | {row['numpy_us']:,.1f} | {both('us', ',.1f')} | "
                  f"{both('ratio', '.2f')} | {both('cpu_ratio', '.2f')} | "
                  f"{both('calls', ',.0f')} | <= {target} | "
                  f"{'met' if row['ratio'] <= target else 'NOT met'} |", flush=True)
    return out


if __name__ == "__main__":
    main()
