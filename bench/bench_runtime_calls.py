"""Runtime hot paths in "calls" (thread CPU time over one empty method call, paired in the same
process), optionally beside the pure build and another accelrt tree in alternating processes.

``bench/bench_runtime.py`` times wall clock next to PyTorch's numbers; on a loaded machine its
rows swing by 2x between runs. This one measures thread CPU time in calls, five paired samples
per row (median). It runs "this" accelrt (``src`` of this tree, compiled where its extension
modules were built in place; ``--installed``: the package installed in this interpreter, e.g. a
compiled wheel), with ``--pure`` also this tree's source without any extension module (the pure
build), and with ``--anchor DIR`` the tree at ``DIR`` (a folder holding an ``accelrt`` package,
e.g. an older commit's ``src``), one after the other, ``--rounds`` times, so that all see the
same machine. The array, transfer and comm rows (``fill_``, ``full``, ``copy_``, ``Array.to``,
``plan_array_copy``, ``comm.broadcast``/``reduce_add``/``scatter``/``gather`` on 16 numbers) run
on a backend of two simulated devices registered here (``benchcpu``), and the PyTorch allocator
shim's rows (``shim malloc+free``, where the shim is built) on cpu:0, at a tenth of
``--loops``::

    git archive HEAD~5 src | tar -x -C /tmp/old
    python bench/bench_runtime_calls.py --installed --pure --anchor /tmp/old/src --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_COMPILED = "compiled"   # not a row: 1.0 when the tree's accelrt._stream_core is an extension module


def _calls_per_op(fn: Callable[[int], float], loops: int) -> float:
    class C:
        def m(self) -> None:
            pass

    m = C().m
    samples = []
    for _ in range(5):
        t = time.thread_time()
        for _ in range(loops):
            m()
        empty = (time.thread_time() - t) / loops
        samples.append(fn(loops) / empty)
    return statistics.median(samples)


def measure(loops: int) -> dict[str, float]:
    """Calls per operation of each row, in this process (the accelrt on sys.path)."""
    import accelrt as acc
    s, s2, e = acc.Stream("cpu:0"), acc.Stream("cpu:0"), acc.Event("cpu:0")
    d0 = acc.device("cpu:0")
    e.record(s)

    def timed(op: Callable[..., object], *args: object) -> Callable[[int], float]:
        """The call ``op(*args)`` itself: positional arguments are passed in the loop, not
        through a lambda, whose own call (about 0.9 of an empty call) is not the runtime's."""
        def run(n: int) -> float:
            t = time.thread_time()
            if not args:
                for _ in range(n):
                    op()
            else:
                (a,) = args
                for _ in range(n):
                    op(a)
            return (time.thread_time() - t) / n
        return run

    def entered(cm: Any) -> Callable[[int], float]:
        """An empty ``with cm:`` block (enter + exit)."""
        def run(n: int) -> float:
            t = time.thread_time()
            for _ in range(n):
                with cm:
                    pass
            return (time.thread_time() - t) / n
        return run

    acc.set_current_accelerator("cpu")
    rows: dict[str, Callable[[int], float]] = {
        "Stream enter+exit": entered(s),
        "Stream()": timed(acc.Stream, "cpu:0"),
        "Event.record": timed(e.record, s),
        "Event.record()": timed(e.record),
        "Event.query": timed(e.query),
        "Event.synchronize": timed(e.synchronize),
        "current_stream": timed(acc.current_stream, "cpu:0"),
        "current_stream()": timed(acc.current_stream),
        "current_stream(0)": timed(acc.current_stream, 0),
        "current_stream(device)": timed(acc.current_stream, d0),
        "cpu.current_stream()": timed(acc.cpu.current_stream),
        "device_index enter+exit": entered(acc.device_index(0)),
        "Stream.wait_stream": timed(s.wait_stream, s2),
        "Stream.wait_event": timed(s.wait_event, e),
        "Stream.record_event()": timed(s.record_event),
        "Stream.query": timed(s.query),
        "Stream.synchronize": timed(s.synchronize),
        "empty(4) + free": timed(lambda: acc.empty(4, dtype="float32", device="cpu:0")),
    }
    out = {name: _calls_per_op(fn, loops) for name, fn in rows.items()}
    out.update({name: _calls_per_op(fn, max(loops // 10, 1))
                for name, fn in _transfer_rows(timed).items()})
    out.update({name: _calls_per_op(fn, max(loops // 10, 1))
                for name, fn in _shim_rows().items()})
    out.update({name: _calls_per_op(fn, max(loops // 10, 1))
                for name, fn in _simulated_rows().items()})
    from accelrt import _stream
    core = getattr(_stream, "_StreamCore", _stream.Stream)   # an older tree: no core
    out[_COMPILED] = float(not (sys.modules[core.__module__].__file__ or "").endswith(".py"))
    return out


def _transfer_rows(timed: Callable[[Callable[[], object]], Callable[[int], float]]
                   ) -> dict[str, Callable[[int], float]]:
    """The transfer path and comm's dispatch on 16-float arrays of two simulated devices (a
    backend of its own, ``benchcpu``): host-side cost, the bytes are few."""
    import numpy as np

    import accelrt as acc
    from accelrt import backends, comm
    from accelrt._transfer import plan_array_copy
    from accelrt.backends.cpu import CpuBackend
    backends.register("benchcpu", lambda: CpuBackend(num_devices=2, name="benchcpu"),
                      replace=True)
    devs = ["benchcpu:0", "benchcpu:1"]
    a, b = (acc.full((16,), 1.0, device=d) for d in devs)
    here, there = (acc.zeros((16,), device=d) for d in devs)
    ints = acc.zeros((16,), dtype="int64", device=devs[0])
    host = np.ones(16, dtype=np.float32)
    return {
        "fill_ (float)": timed(here.fill_, 2.0),
        "fill_ (int)": timed(ints.fill_, 7),
        "full + free": timed(lambda: acc.full((16,), 1.5, device=devs[0])),
        "copy_ (numpy)": timed(here.copy_, host),
        "copy_ (one device)": timed(lambda: here.copy_(a)),
        "copy_ (peer)": timed(lambda: there.copy_(a)),
        "plan_array_copy (peer)": timed(lambda: plan_array_copy(there, a, False)),
        "Array.to(peer) + free": timed(lambda: a.to(devs[1])),
        "comm.broadcast": timed(lambda: comm.broadcast(a, devices=devs)),
        "comm.reduce_add": timed(lambda: comm.reduce_add([a, b], destination=devs[0])),
        "comm.scatter": timed(lambda: comm.scatter(a, devices=devs)),
        "comm.gather": timed(lambda: comm.gather([a, b], destination=devs[0])),
    }


def _simulated_rows() -> dict[str, Callable[[int], float]]:
    """The simulated device's ``vm_map`` + ``vm_unmap`` of one 2 MiB page among 300 other
    mappings (what a low-fragmentation replay pays per mapping, besides the allocator's own
    work: ``accelrt replay``, ``accelrt memory tune``, ``bench/bench_allocator.py``)."""
    from accelrt.testing import SimulatedBackend
    b = SimulatedBackend()
    g = b.vm_granularity(0)
    base = int(b.vm_reserve(0, 1024 * g))
    for i in range(0, 600, 2):
        b.vm_map(0, base + i * g, g)
    p = base + 301 * g
    vm_map, vm_unmap = b.vm_map, b.vm_unmap

    def run(n: int) -> float:
        t = time.thread_time()
        for _ in range(n):
            vm_map(0, p, g)
            vm_unmap(0, p, g)
        return (time.thread_time() - t) / n

    return {"simulated vm_map + vm_unmap": run}


def _shim_rows() -> dict[str, Callable[[int], float]]:
    """PyTorch's allocation path through accelrt's allocator shim (``accelrt.interop._shim``),
    driven through its C entry points with ctypes as PyTorch's ``CUDAPluggableAllocator``
    calls them: a malloc and a free of 512 bytes on cpu:0's default stream (NULL) and on a
    stream of its own; no rows where the shim was not built (copy ``interop/_lib`` into an
    anchor tree to compare)."""
    import accelrt as acc
    from accelrt.interop import _shim
    if _shim.shim_path() is None:
        return {}
    lib = _shim.load()
    _shim.install(backend="cpu")
    malloc, free = lib.accelrt_torch_malloc, lib.accelrt_torch_free

    def pair(stream: Any) -> Callable[[int], float]:
        """Rows on ``stream`` (None: the default stream), which they keep alive (a stream
        closed or collected is refused)."""
        def run(n: int) -> float:
            handle = None if stream is None else stream.native_handle
            t = time.thread_time()
            for _ in range(n):
                free(malloc(512, 0, handle), 512, 0, handle)
            return (time.thread_time() - t) / n
        return run

    return {"shim malloc+free": pair(None),
            "shim malloc+free (stream)": pair(acc.Stream("cpu:0"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--anchor", type=Path, help="folder holding another accelrt package")
    ap.add_argument("--pure", action="store_true",
                    help="also run this tree's source without extension modules (pure build)")
    ap.add_argument("--installed", action="store_true",
                    help='"this" is the accelrt installed in this interpreter, not ./src')
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loops", type=int, default=20000)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.loops)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, Path | None] = {"this": None if args.installed else ROOT / "src"}
        if args.pure:
            pure = Path(tmp) / "pure"
            shutil.copytree(ROOT / "src" / "accelrt", pure / "accelrt",
                            ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
            trees["pure"] = pure
        if args.anchor is not None:
            trees["anchor"] = args.anchor.resolve()
        results: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                env = dict(os.environ)
                env.pop("PYTHONPATH", None)
                if tree is not None:
                    env["PYTHONPATH"] = str(tree)
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                                      "--loops", str(args.loops)], env=env, cwd=tmp,
                                     capture_output=True, text=True, check=True)
                results[name].append(json.loads(out.stdout))
    print(_table(results))
    print(f"median of {args.rounds} rounds (alternating processes), each the median of 5 paired "
          "samples; calls = thread CPU time / one empty method call; this: "
          + ("the installed accelrt" if args.installed else str(ROOT / "src")))
    return 0


def _table(results: dict[str, list[dict[str, float]]]) -> str:
    """The rows (medians over rounds) of every tree, with this/other ratios. A row that one
    tree does not have (the shim's rows where its library was not built) is ``absent`` there,
    with no ratio.

    Example::

        >>> print(_table({"this": [{_COMPILED: 1.0, "a": 2.0, "shim": 4.0}],
        ...               "anchor": [{_COMPILED: 0.0, "a": 1.0}]}))  # doctest: +NORMALIZE_WHITESPACE
        operation                     this  anchor  this/anchor   (calls)
        (compiled stream core)         yes      no
        a                              2.0     1.0         2.00
        shim                           4.0  absent            -
    """
    others = [k for k in results if k != "this"]
    head = f"{'operation':<26}{'this':>8}" + "".join(f"{k:>8}" for k in others) \
        + "".join(f"{'this/' + k:>13}" for k in others)
    lines = [head + "   (calls)"]
    lines.append(f"{'(compiled stream core)':<26}" + "".join(
        f"{'yes' if v[0][_COMPILED] else 'no':>8}" for v in results.values()))
    rows = dict.fromkeys(row for v in results.values() for r in v for row in r)
    rows.pop(_COMPILED, None)
    for row in rows:
        med = {k: statistics.median(vals) for k, v in results.items()
               if (vals := [r[row] for r in v if row in r])}
        cells = "".join(f"{med[k]:>8.1f}" if k in med else f"{'absent':>8}" for k in results)
        ratios = "".join(f"{med['this'] / med[k]:>13.2f}" if "this" in med and k in med
                         else f"{'-':>13}" for k in others)
        lines.append(f"{row:<26}" + cells + ratios)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
