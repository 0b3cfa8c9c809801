"""Caching-allocator benchmarks: trace replay per policy, the cached fast path, scaling.

1. Replays every trace in ``tests/data/traces`` and ``../shared/traces`` (and a synthetic
   convnet serving batches of 1..32, :mod:`accelrt.memory.tools._synthetic`) through a fresh
   allocator on a simulated device with the default settings, ``expandable_segments:True`` and
   accelrt's low-fragmentation ``expandable_segments:True,page_reuse:True``, side by side:
   reserved/live, Python calls per operation, the driver calls the simulated device counted and
   their H100 cost, and the total (Python time at this machine's speed + driver time) against
   the default policy.
2. Times ``malloc`` + ``free`` of a cached block (512 B, 1 MiB, 20 MiB).
3. Scaling: calls per operation with 1,000 and with 300,000 free blocks in the free lists.
4. Each hand-inlined fast path against the general code it mirrors (one path off at a time,
   and :class:`~accelrt.testing._allocators.GeneralPathAllocator`, all off), on the cached
   alloc+free and the default and low-fragmentation replays: a fast path is kept only while
   the general code costs more than 1.1x in the same run (the malloc and free columns are
   against the "no deferred free" column, the deferred free and all-off against all on).
5. A snapshot of 10,000 segments, ``acc.rand`` against numpy's Philox generator, and
   ``memory_allocated()`` / ``memory_stats()`` on the cpu backend.

Every time is in *calls*: the thread CPU time of the measurement divided by that of one empty
method call, each measurement paired with its own calibration right before and right after it
(same clock), so that the load of a shared machine cancels out; the variants of one row are
run alternately, ``--repeat`` times, and the median is printed. Thread CPU time leaves out
time the thread waits.

``--anchor DIR`` adds the same rows for another copy of accelrt (``DIR/accelrt``, e.g. a
checkout of the previous commit's ``src``), loaded in the same process under another name and
alternated with this one, so that a before/after comparison comes from one run. The first line
says which build each copy is (pure Python, or the compiled build: the default of ``pip install .``);
a compiled copy cannot be an anchor (its extension modules keep their package name), so the
two builds are compared by running this script once in each environment.

Usage::

    python bench/bench_allocator.py
    python bench/bench_allocator.py --repeat 7 --loops 50000 --traces DIR --quick
    git worktree add /tmp/old HEAD~1 && python bench/bench_allocator.py --anchor /tmp/old/src
"""

from __future__ import annotations

import argparse
import functools
import gc
import glob
import importlib
import importlib.util
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from accelrt import memory
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.testing._allocators import GeneralPathAllocator
from accelrt.memory._config import parse_config
from accelrt.memory.tools._replay import load_trace, replay_ops, trace_ops
from accelrt.testing._simulated import SimulatedBackend
from accelrt.memory.tools._synthetic import convnet_inference_ops

SETTINGS = (("default", ""), ("expandable", "expandable_segments:True"),
            ("low-frag", "expandable_segments:True,page_reuse:True"))

#: Targets in calls (empty method calls) and ratios.
TARGETS = {"replay": 30.0, "alloc+free": 30.0, "scaling": 1.3, "geomean": 1.01, "worst": 1.02,
           "steady": 2.0, "time": 1.5}

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


def paired(fn: Callable[[], tuple[float, int]], cal_loops: int) -> tuple[float, float]:
    """``fn()`` returns (thread seconds, operations); the result is (calls per operation,
    seconds per operation), the calls against a calibration measured right before and right
    after it."""
    gc.collect()
    c0 = _calibrate(cal_loops)
    t, n = fn()
    c1 = _calibrate(cal_loops)
    return t / n / ((c0 + c1) / 2), t / n


class Impl:
    """One implementation under test: this accelrt, or an anchor copy loaded from a folder."""

    def __init__(self, label: str, pkg: str) -> None:
        self.label = label
        alloc = importlib.import_module(pkg + ".memory._allocator")
        self.allocator: Any = alloc.DeviceCachingAllocator
        self.backend: Any = _import_first(pkg, ".testing._simulated",
                                          ".memory._simulated").SimulatedBackend
        self.parse_config: Any = importlib.import_module(pkg + ".memory._config").parse_config
        #: "pure" or "compiled" (the mypyc build, ``accelrt.memory.compiled``)
        self.build = "compiled" if getattr(importlib.import_module(pkg + ".memory"),
                                           "compiled", False) else "pure"

    def new(self, conf: str, **backend_args: Any) -> Any:
        return self.allocator(self.backend(**backend_args), 0, self.parse_config(conf))

    def new_stubbed(self, conf: str) -> Any:
        """:meth:`new` on a simulated device whose ``vm_map``/``vm_unmap`` only count (see
        :func:`stubbed_device`): the allocator's own time, without the simulator's Python
        bookkeeping of each mapping."""
        return self.allocator(stubbed_device(self.backend)(), 0, self.parse_config(conf))


def stubbed_device(backend: type) -> type:
    """A subclass of the simulated ``backend`` whose ``vm_map``/``vm_unmap`` keep only the
    device's byte count (the same capacity test, so the same answers and the same blocks:
    ``tests/memory/test_bench_stubbed_device.py``) and its call counts (not
    ``vm_unmapped_mappings``), not its lists of mappings and their checks. On a real device a mapping is
    the driver's time, which ``replay_ops`` reports apart (``driver_us_h100``); the
    simulator's Python bookkeeping is about a third of a low-fragmentation replay's calls
    (docs/memory.md). Single-threaded replays only (no lock)."""

    class StubbedDevice(backend):  # type: ignore[misc]
        def vm_map(self, index: int, ptr: int, size: int) -> bool:
            dev = self._devices[index]
            if dev.used + size > self.capacity:
                return False
            dev.used += size
            dev.calls["vm_map"] += 1
            return True

        def vm_unmap(self, index: int, ptr: int, size: int) -> None:
            dev = self._devices[index]
            dev.used -= size
            dev.calls["vm_unmap"] += 1

    return StubbedDevice


def _import_first(pkg: str, *names: str) -> ModuleType:
    """The first of ``pkg``'s submodules ``names`` that exists (an anchor may predate a move:
    the simulated backend lived in ``memory/`` before ``testing/``)."""
    for name in names[:-1]:
        if importlib.util.find_spec(pkg + name) is not None:
            return importlib.import_module(pkg + name)
    return importlib.import_module(pkg + names[-1])


def load_anchor(folder: str) -> str:
    """Import ``folder/accelrt`` as the package ``accelrt_anchor``; return that name."""
    init = os.path.join(folder, "accelrt", "__init__.py")
    if not os.path.exists(init):
        raise SystemExit(f"--anchor {folder}: no accelrt/__init__.py there (give the folder "
                         f"that holds the accelrt package, e.g. an old checkout's src)")
    compiled = glob.glob(os.path.join(folder, "accelrt", "memory", "_allocator.*.so"))
    if compiled:
        raise SystemExit(f"--anchor {folder}: that accelrt is a compiled build ({compiled[0]}), "
                         f"whose extension modules cannot be loaded under another package "
                         f"name; time each build in its own run (calls make runs comparable)")
    name = "accelrt_anchor"
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[os.path.dirname(init)])
    assert spec is not None and spec.loader is not None
    mod: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return name


def _replay_timed(new: Callable[[], Any], ops: Sequence[Any],
                  settle: bool = False) -> tuple[float, int]:
    """Thread seconds to replay ``ops`` on ``new()`` (with ``settle``, its ``settle()`` too:
    work an allocator defers, paid inside the timed region), and the number of operations."""
    a = new()
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
        if settle:
            a.settle()
        t = _clock() - t0
    finally:
        if gc_was:
            gc.enable()
    return t, len(ops)


def alternate(variants: dict[str, Callable[[], tuple[float, int]]], repeat: int,
              cal_loops: int) -> dict[str, tuple[float, float]]:
    """Per variant: median (calls per op, seconds per op) of ``repeat`` alternating runs."""
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for _ in range(repeat):
        for k, fn in variants.items():
            samples[k].append(paired(fn, cal_loops))
    return {k: (statistics.median(c for c, _ in v), statistics.median(t for _, t in v))
            for k, v in samples.items()}


def bench_trace(ops: Sequence[Any], impls: list[Impl], repeat: int,
                cal_loops: int) -> dict[str, dict[str, Any]]:
    """Per setting: replay_ops's result plus ``calls`` and ``sec`` per op of each
    implementation (``calls:LABEL``), median of alternating runs."""
    rows = {label: dict(replay_ops(ops, parse_config(conf))) for label, conf in SETTINGS}
    variants = {(label, impl.label): (lambda i=impl, c=conf: _replay_timed(lambda: i.new(c), ops))
                for label, conf in SETTINGS for impl in impls}
    res = alternate(variants, repeat, cal_loops)  # type: ignore[arg-type]
    for (label, impl_label), (calls, sec) in res.items():  # type: ignore[misc]
        rows[label]["calls:" + impl_label] = calls
        rows[label]["sec:" + impl_label] = sec
    return rows


def bench_alloc_free(new: Callable[[], Any], size: int, loops: int) -> tuple[float, int]:
    """Thread seconds for ``loops`` ``malloc`` + ``free`` of a block the allocator has cached."""
    a = new()
    malloc, free = a.malloc, a.free
    free(malloc(size, 0))                       # warm: the segment is now cached
    t0 = _clock()
    for _ in range(loops):
        free(malloc(size, 0))
    return _clock() - t0, loops


def scaling_allocator(impl: Impl, n_free: int, seed: int = 0) -> tuple[Any, list[int]]:
    """An allocator whose small-pool free list holds ``n_free`` blocks that cannot merge
    (each between two live ones) of sizes 512 B .. 64 KiB; returns it and the sizes used."""
    rng = random.Random(seed)
    a = impl.new("", capacity=1 << 40)
    sizes = [rng.randrange(1, 129) * 512 for _ in range(2 * n_free + 1)]
    ptrs = [a.malloc(s, 0) for s in sizes]
    for p in ptrs[1::2]:
        a.free(p)
    return a, sizes


def scaling_ops(sizes: list[int], count: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    return [rng.choice(sizes) for _ in range(count)]


def bench_scaling(a: Any, work: list[int]) -> tuple[float, int]:
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


def _traces(folders: list[str]) -> list[tuple[str, list[Any]]]:
    """The traces of every folder, each name once (the first folder holding it wins)."""
    seen: dict[str, list[Any]] = {}
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "trace_*.json*"))):
            name = os.path.basename(path).removeprefix("trace_").split(".")[0]
            if name not in seen:
                seen[name] = trace_ops(load_trace(path), path)
    return sorted(seen.items())


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _calls(row: dict[str, Any], impls: list[Impl]) -> str:
    return " / ".join(f"{row['calls:' + i.label]:.1f}" for i in impls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    parser.add_argument("--traces", action="append",
                        help="folder of trace_*.json.gz files (repeatable; default: "
                             "tests/data/traces and ../shared/traces)")
    parser.add_argument("--anchor", help="folder holding another accelrt package (e.g. the "
                                         "previous commit's src) to time beside this one")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loops", type=int, default=20000)
    parser.add_argument("--scaling", type=int, default=300_000,
                        help="free blocks of the big scaling case (the small one has 1,000)")
    parser.add_argument("--quick", action="store_true",
                        help="skip the scaling, snapshot and RNG rows")
    args = parser.parse_args()
    cal = max(1000, args.loops * 5)
    folders = args.traces or [os.path.join(root, "tests", "data", "traces"),
                              os.path.join(root, "..", "shared", "traces")]
    impls = [Impl("this", "accelrt")]
    if args.anchor:
        impls.append(Impl("anchor", load_anchor(args.anchor)))
    names = " / ".join(i.label for i in impls)
    print("accelrt build: " + ", ".join(f"{i.label} = {i.build} ({i.allocator.__module__} from "
                                        f"{sys.modules[i.allocator.__module__].__file__})"
                                        for i in impls))
    print()

    print("## Trace replay (simulated device; calls = Python time per op in empty method calls"
          f"{'; calls/op: this / anchor' if args.anchor else ''})")
    print("| trace | ops | setting | reserved/live | calls/op | device mallocs | vm maps | "
          "vm unmaps | steady-state driver calls per 1k ops | driver ms (H100) | "
          "total ms vs default |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    traces = _traces(folders)
    workloads = traces + [("synthetic convnet b1-32", convnet_inference_ops(batches=60, seed=0))]
    ratios: dict[str, list[float]] = {label: [] for label, _ in SETTINGS}
    default_calls: list[float] = []
    total_ok = True
    over_bound = []     # workloads where the growth bound alone passes the default's driver time
    steady_worst = (0.0, "")      # low-frag: the most steady-state driver calls per 1k ops
    time_worst = (0.0, "")        # low-frag: the most Python time per op against the default's
    for name, ops in workloads:
        rows = bench_trace(ops, impls, args.repeat, cal)
        if growth_lower_bound(ops, 0.02) * GROWTH_US > rows["default"]["driver_us_h100"]:
            over_bound.append(name)
        base_total = None
        for label, _ in SETTINGS:
            r = rows[label]
            py_ms = r["sec:this"] * r["ops"] * 1000
            total = py_ms + r["driver_us_h100"] / 1000
            if base_total is None:
                base_total = total
            if label == "default" and not name.startswith("synthetic"):
                default_calls.append(r["calls:this"])
            if label == "low-frag":
                steady_worst = max(steady_worst, (r["steady_driver_calls_per_1k_ops"], name))
                time_worst = max(time_worst, (r["sec:this"] / rows["default"]["sec:this"], name))
            if not name.startswith("synthetic"):
                ratios[label].append(r["reserved_over_live"])
                if label == "low-frag" and total > base_total:
                    total_ok = False
            print(f"| {name} | {r['ops']:,} | {label} | {r['reserved_over_live']:.4f} | "
                  f"{_calls(r, impls)} | {r['device_mallocs']} | {r['vm_maps']} | "
                  f"{r['vm_unmaps']} | {r['steady_driver_calls_per_1k_ops']:.1f} | "
                  f"{r['driver_us_h100'] / 1000:.1f} | "
                  f"{total:.1f} ({total / base_total:.2f}x) |", flush=True)
    print()
    print(f"## Targets (calls: {names})")
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
    print(f"| low-frag: steady-state driver calls <= {TARGETS['steady']:.0f} per 1k ops on "
          f"every workload | worst {steady_worst[0]:.1f} ({steady_worst[1]}) | "
          f"{_mark(steady_worst[0] <= TARGETS['steady'])} |")
    print(f"| low-frag: Python time per op <= {TARGETS['time']:.1f}x the default's on every "
          f"workload | worst {time_worst[0]:.2f}x ({time_worst[1]}) | "
          f"{_mark(time_worst[0] <= TARGETS['time'])} |")
    if default_calls:
        print(f"| default replay <= {TARGETS['replay']:.0f} calls/op | "
              f"{min(default_calls):.1f} - {max(default_calls):.1f} | "
              f"{_mark(max(default_calls) <= TARGETS['replay'])} |")
    print(f"| low-frag total (Python + H100 driver time) <= default on every trace | see "
          f"table; the growths that any policy within 2% from the first byte must make cost "
          f"more than the default's driver time on {len(over_bound)} of {len(workloads)} "
          f"workloads (bench/lowfrag_bound.py) | {_mark(total_ok)} |")
    for size, label in ((512, "512 B"), (1 << 20, "1 MiB"), (20 << 20, "20 MiB")):
        res = alternate({i.label: (lambda i=i, s=size: bench_alloc_free(lambda: i.new(""), s,
                                                                          args.loops))
                         for i in impls}, args.repeat, cal)
        c = res["this"][0]
        shown = " / ".join(f"{res[i.label][0]:.1f}" for i in impls)
        print(f"| cached alloc+free {label} <= {TARGETS['alloc+free']:.0f} calls | {shown} | "
              f"{_mark(c <= TARGETS['alloc+free'])} |", flush=True)
    if not args.quick:
        for impl in impls:
            # both sizes built first and timed alternately (load drifts between two separate
            # measurements would go straight into their ratio)
            small, sizes = scaling_allocator(impl, 1000)
            big, _ = scaling_allocator(impl, args.scaling)
            work = scaling_ops(sizes, max(2000, args.loops // 2))
            res = alternate({"small": lambda: bench_scaling(small, work),
                             "big": lambda: bench_scaling(big, work)}, args.repeat, cal)
            res_n = {1000: res["small"][0], args.scaling: res["big"][0]}
            del small, big
            gc.collect()
            ratio = res_n[args.scaling] / res_n[1000]
            print(f"| scaling ({impl.label}): {args.scaling:,} free blocks <= "
                  f"{TARGETS['scaling']}x of 1,000 | {res_n[1000]:.1f} -> "
                  f"{res_n[args.scaling]:.1f} calls/op ({ratio:.2f}x) | "
                  f"{_mark(ratio <= TARGETS['scaling'])} |", flush=True)
    fast_path_rows(workloads, args.repeat, args.loops, cal)
    if not args.quick:
        snapshot_row(args.repeat)
        rng_row(args.repeat, "accelrt_anchor" if args.anchor else None)
    keep = memory.caching_allocator_alloc(4096)  # the current device's allocator exists
    try:
        c = alternate({"x": lambda: bench_getter(memory.memory_allocated, args.loops)},
                      args.repeat, cal)["x"][0]
        print(f"| memory_allocated() | {c:.1f} calls | - |")
        c = alternate({"x": lambda: bench_getter(memory.memory_stats, max(1, args.loops // 10))},
                      args.repeat, cal)["x"][0]
        print(f"| memory_stats() | {c:.1f} calls | - |")
    finally:
        memory.caching_allocator_delete(keep)
    print(f"| empty method call (the unit) | {_calibrate(cal) * 1e9:.1f} ns thread CPU time | |")


def _fast_off(a: Any, what: str) -> Any:
    """``a`` with one named fast path off (``_fast_flags`` sets these flags again only when a
    free is deferred or completed, or a setting changes: never once deferral is off, on a
    replay of the default policy, or on one of page_reuse whose reservations already exist):
    ``defer`` the deferred free; ``malloc`` (and ``defer``) the cached malloc; ``free`` (and
    ``defer``) the cached free. Measurement only."""
    if what:
        a._defer_skip = 1 << 62   # (no deferral: defer_free skips this many frees)
    if what == "malloc":
        a._fast_malloc = False
    elif what == "free":
        a._free_slow = True
    return a


def fast_path_rows(workloads: list[tuple[str, list[Any]]], repeat: int, loops: int,
                   cal: int) -> None:
    """Each fast path of malloc/free against the general code it mirrors, in the same run:
    all fast paths on; the deferred free off; that and the cached malloc off; that and the
    cached free off (instead of the malloc); all off (:class:`GeneralPathAllocator`). A fast
    path stays only where the general code costs more than 1.1x (issue 22; docs/memory.md,
    "Which fast paths stay")."""
    def make(cls: Any, conf: str, what: str = "") -> Callable[[], Any]:
        def new() -> Any:
            a = cls(SimulatedBackend(), 0, parse_config(conf))
            if what and "page_reuse" in conf:
                # (the reservations first: making one sets the flags again)
                a.free(a.malloc(512, 0))
            return _fast_off(a, what)
        return new

    print()
    print("## Fast paths against the general code they mirror (calls; ratio: general / fast)")
    print("| workload | fast paths | no deferred free | general malloc | general free | "
          "general code |")
    print("|---|---|---|---|---|---|")
    cases: list[tuple[str, str, Callable[[Callable[[], Any]], tuple[float, int]]]] = [
        ("cached alloc+free 512 B", "", lambda new: bench_alloc_free(new, 512, loops))]
    for name, ops in workloads:
        if not name.startswith("synthetic"):
            for label, conf in (SETTINGS[0], SETTINGS[2]):
                cases.append((f"replay {name} ({label})", conf,
                              lambda new, o=ops: _replay_timed(new, o)))
    for label, conf, fn in cases:
        variants = {"fast": make(DeviceCachingAllocator, conf),
                    "defer": make(DeviceCachingAllocator, conf, "defer"),
                    "malloc": make(DeviceCachingAllocator, conf, "malloc"),
                    "free": make(DeviceCachingAllocator, conf, "free"),
                    "general": make(GeneralPathAllocator, conf)}
        res = alternate({k: functools.partial(fn, n) for k, n in variants.items()}, repeat, cal)
        f, d = res["fast"][0], res["defer"][0]
        print(f"| {label} | {f:.1f} | {d:.1f} ({d / f:.2f}x) | "
              f"{res['malloc'][0]:.1f} ({res['malloc'][0] / d:.2f}x) | "
              f"{res['free'][0]:.1f} ({res['free'][0] / d:.2f}x) | "
              f"{res['general'][0]:.1f} ({res['general'][0] / f:.2f}x) |", flush=True)


# ---------------------------------------------------------------------- snapshot and RNG rows
# Defined in bench/bench_snapshot.py and bench/bench_random.py (each also runs on its own);
# imported here so that this script prints every issue-13 row in one run.

from bench_random import rng_row  # noqa: E402
from lowfrag_bound import GROWTH_US, growth_lower_bound  # noqa: E402
from bench_snapshot import snapshot_row  # noqa: E402


if __name__ == "__main__":
    main()
