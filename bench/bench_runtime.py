"""Per-call cost of accelrt's runtime hot paths, next to PyTorch's.

Prints one row per operation: accelrt's median per-call cost (microseconds), the cost PyTorch
2.11 measured on an H100 host (anchor numbers), the ratio ours/anchor, and, when ``torch`` with
CUDA is importable, torch measured live in the same run.

Each ``bench_*(loops)`` function times ``loops`` calls with :func:`time.perf_counter` after
hoisting every attribute lookup, and returns seconds per call (timeit-style: loop overhead
included, as in the anchors). The reported number is the median of ``--repeat`` runs.

Usage::

    python bench/bench_runtime.py                    # the cpu backend
    python bench/bench_runtime.py --backend cuda     # on a GPU host
    python bench/bench_runtime.py --loops 20000 --repeat 9 --no-torch
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import accelrt as acc

#: PyTorch 2.11 on an H100 host, microseconds per call.
ANCHORS_US: dict[str, float | None] = {
    "current_stream": 0.90,
    "current_device_index": 0.39,
    "set_device_index": None,
    "device_index enter+exit": 1.31,
    "Stream enter+exit": 10.1,
    "Stream()": 0.85,
    "Event()": None,
    "Event.record": 5.8,
    "Event.query": 0.32,
    "synchronize (idle)": 2.3,
    # device switches (two devices: ACCELRT_CPU_DEVICES=2 on the cpu backend)
    "set_device_index 0<->1": None,
    "device_index(1) enter+exit": None,
    "Stream(dev 1) enter+exit": None,
}

Bench = Callable[[int], float]


def _noop() -> None:
    """An empty function: its cost calibrates the host."""


def _time(fn: Callable[[], Any], loops: int) -> float:
    """Seconds per call of ``fn()`` over ``loops`` calls (for the generic cases)."""
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - t0) / loops


def _with(ctx: Any, loops: int) -> float:
    t0 = time.perf_counter()
    for _ in range(loops):
        with ctx:
            pass
    return (time.perf_counter() - t0) / loops


def _with_new(factory: Callable[[int], Any], arg: int, loops: int) -> float:
    t0 = time.perf_counter()
    for _ in range(loops):
        with factory(arg):
            pass
    return (time.perf_counter() - t0) / loops


def _switches(set_device_index: Callable[[int], None], loops: int) -> float:
    """Seconds per call of ``set_device_index`` switching between devices 0 and 1."""
    t0 = time.perf_counter()
    for _ in range(loops // 2):
        set_device_index(1)
        set_device_index(0)
    return (time.perf_counter() - t0) / (loops // 2 * 2)


def accelrt_benches() -> dict[str, Bench]:
    """accelrt's operations on the current accelerator (the device switches with two
    devices or more)."""
    current_stream = acc.current_stream
    current_device_index = acc.current_device_index
    set_device_index = acc.set_device_index
    device_index = acc.device_index
    stream = acc.Stream()
    event = acc.Event()
    event.record()
    benches: dict[str, Bench] = {
        "current_stream": lambda n: _time(current_stream, n),
        "current_device_index": lambda n: _time(current_device_index, n),
        "set_device_index": lambda n: _time(lambda: set_device_index(0), n),
        "device_index enter+exit": lambda n: _with_new(device_index, 0, n),
        "Stream enter+exit": lambda n: _with(stream, n),
        "Stream()": lambda n: _time(acc.Stream, n),
        "Event()": lambda n: _time(acc.Event, n),
        "Event.record": lambda n: _time(event.record, n),
        "Event.query": lambda n: _time(event.query, n),
        "synchronize (idle)": lambda n: _time(acc.synchronize, n),
    }
    if acc.device_count() > 1:
        stream1 = acc.Stream(acc.device(acc.current_accelerator().type, 1))
        benches["set_device_index 0<->1"] = lambda n: _switches(set_device_index, n)
        benches["device_index(1) enter+exit"] = lambda n: _with_new(device_index, 1, n)
        benches["Stream(dev 1) enter+exit"] = lambda n: _with(stream1, n)
    return benches


def torch_benches() -> dict[str, Bench] | None:
    """The same operations on ``torch.cuda``/``torch.accelerator``, or None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.cuda.init()
    ta = torch.accelerator
    stream = torch.cuda.Stream()
    event = torch.cuda.Event()
    event.record()
    torch.cuda.synchronize()
    cuda_stream = torch.cuda.stream
    set_device_index = ta.set_device_index
    device_index = getattr(ta, "device_index", torch.cuda.device)  # added in torch 2.8
    benches: dict[str, Bench] = {
        "current_stream": lambda n: _time(ta.current_stream, n),
        "current_device_index": lambda n: _time(ta.current_device_index, n),
        "set_device_index": lambda n: _time(lambda: set_device_index(0), n),
        "device_index enter+exit": lambda n: _with_new(device_index, 0, n),
        "Stream enter+exit": lambda n: _with_new(cuda_stream, stream, n),  # type: ignore[arg-type]
        "Stream()": lambda n: _time(torch.cuda.Stream, n),
        "Event()": lambda n: _time(torch.cuda.Event, n),
        "Event.record": lambda n: _time(event.record, n),
        "Event.query": lambda n: _time(event.query, n),
        "synchronize (idle)": lambda n: _time(ta.synchronize, n),
    }
    if torch.cuda.device_count() > 1:
        stream1 = torch.cuda.Stream(1)
        benches["set_device_index 0<->1"] = lambda n: _switches(set_device_index, n)
        benches["device_index(1) enter+exit"] = lambda n: _with_new(device_index, 1, n)
        benches["Stream(dev 1) enter+exit"] = lambda n: _with_new(
            cuda_stream, stream1, n)  # type: ignore[arg-type]
    return benches


def measure(bench: Bench, loops: int, repeat: int) -> float:
    """Median seconds per call over ``repeat`` runs of ``loops`` calls (after a warm-up)."""
    bench(max(1, loops // 10))
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return statistics.median(bench(loops) for _ in range(repeat))
    finally:
        if gc_was_enabled:
            gc.enable()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu", help="accelrt backend to measure (cpu)")
    parser.add_argument("--loops", type=int, default=50_000, help="calls per run (50000)")
    parser.add_argument("--repeat", type=int, default=7, help="runs; the median is kept (7)")
    parser.add_argument("--no-torch", action="store_true", help="do not measure torch live")
    args = parser.parse_args(argv)
    if args.loops < 1 or args.repeat < 1:
        parser.error("--loops and --repeat must be >= 1")
    try:
        acc.set_current_accelerator(args.backend)
    except acc.BackendUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    ours = {k: measure(b, args.loops, args.repeat) for k, b in accelrt_benches().items()}
    live = None if args.no_torch else torch_benches()
    theirs = {k: measure(b, args.loops, args.repeat) for k, b in live.items()} if live else {}

    header = f"{'operation':<26}{'accelrt ' + args.backend + ' (us)':>18}{'torch H100 (us)':>17}"
    header += f"{'ratio':>8}"
    if theirs:
        header += f"{'torch live (us)':>17}"
    print(header)
    print("-" * len(header))
    for name, sec in ours.items():
        us = sec * 1e6
        anchor = ANCHORS_US.get(name)
        row = f"{name:<26}{us:>18.3f}"
        row += f"{anchor:>17.2f}{us / anchor:>8.2f}" if anchor else f"{'-':>17}{'-':>8}"
        if theirs:
            row += f"{theirs[name] * 1e6:>17.3f}" if name in theirs else f"{'-':>17}"
        print(row)
    empty = measure(lambda n: _time(_noop, n), args.loops, args.repeat) * 1e6
    print(f"\n{args.loops} calls per run, median of {args.repeat} runs; ratio = accelrt / "
          "torch anchor (<= 1 is at or under PyTorch).")
    print(f"host speed: an empty Python call costs {empty:.3f} us here (compare hosts with it; "
          "a busy host inflates every row).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
