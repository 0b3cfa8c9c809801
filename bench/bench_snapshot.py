"""Benchmark: ``memory_snapshot()`` and the full ``_snapshot()`` of a large allocator.

Issue 13's target: the segments of 10,000 segments of 7 blocks (6 x 300 KiB allocated, two
of them freed, plus the segment's free tail) in at most 100 ms. Times are the calling
thread's CPU time (other processes on a shared machine do not count), the median over
repeats: ``ms`` is the call, with the result kept (the young-generation collection that its
170,000 containers cause when the collector is switched back on happens inside the call and
counts); ``ms, result dropped too`` adds freeing the result, which a caller pays whenever it
lets the snapshot go. ``calls`` divides the call by one empty method call measured right
before.

Also printed, for information: the full snapshot (segments, traces, settings) without and
with history recording (``record_history("all")``: a stack on every block and a trace of
every action, 110,000 entries here).

Run: ``python bench/bench_snapshot.py [--repeat 7]``; ``bench/bench_allocator.py`` prints the
same rows (:func:`snapshot_row`). Not part of pytest.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.testing._simulated import SimulatedBackend
from accelrt.memory._snapshot import build_snapshot, snapshot_segments

#: Target for the segments of 10,000 segments of 7 blocks, in milliseconds.
TARGET_MS = 100.0


class _Empty:
    def m(self) -> None:
        pass


def _paired(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """Medians over ``repeat`` repeats of: thread CPU seconds of ``fn()`` (the call, its
    result kept), the same plus dropping the result, and the call's ratio to an empty method
    call measured right before it (same clock)."""
    m = _Empty().m
    clock = time.thread_time
    call, dropped, ratio = [], [], []
    for _ in range(repeat):
        n_empty = 200_000
        t0 = clock()
        for _ in range(n_empty):
            m()
        t1 = clock()
        result = fn()
        t2 = clock()
        del result
        t3 = clock()
        call.append(t2 - t1)
        dropped.append(t3 - t1)
        ratio.append((t2 - t1) / max((t1 - t0) / n_empty, 1e-12))
    return statistics.median(call), statistics.median(dropped), statistics.median(ratio)


def snapshot_allocator(segments: int = 10_000,
                       history: bool = False) -> tuple[DeviceCachingAllocator, list[int]]:
    """``segments`` small segments of 7 blocks each (6 x 300 KiB allocated, 2 freed)."""
    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 45), 0, parse_config(""))
    if history:
        a.record_history("all")
    groups = [[a.malloc(300 << 10, 0) for _ in range(6)] for _ in range(segments)]
    keep = []
    for ps in groups:
        a.free(ps[1])
        a.free(ps[3])
        keep += [ps[0], ps[2], ps[4], ps[5]]
    return a, keep


def snapshot_row(repeat: int, history_row: bool = True) -> list[dict[str, object]]:
    """Print the snapshot table (markdown) and return its rows."""
    a, keep = snapshot_allocator()
    assert {len(s["blocks"]) for s in snapshot_segments([a])} == {7}
    print()
    print("## Snapshot: 10,000 segments of 7 blocks (thread CPU time, median; calls = "
          "paired empty method calls)")
    print("| operation | ms | calls | ms, result dropped too | target ms | status |")
    print("|---|---|---|---|---|---|")
    rows: list[dict[str, object]] = []
    cases: list[tuple[str, Callable[[], object], float | None]] = [
        ("memory_snapshot() (segments)", lambda: snapshot_segments([a]), TARGET_MS),
        ("_snapshot() (segments, traces, settings)", lambda: build_snapshot(None, [a], {}),
         None)]
    if history_row:
        h, keep_h = snapshot_allocator(history=True)
        n = len(h.trace_entries())
        cases += [(f"memory_snapshot() with history (stacks on {7 * 10_000:,} blocks)",
                   lambda: snapshot_segments([h]), None),
                  (f"_snapshot() with history ({n:,} trace entries)",
                   lambda: build_snapshot(None, [h], {}), None)]
    for label, fn, target in cases:
        sec, dropped, calls = _paired(fn, max(repeat, 5) if target else 3)
        rows.append({"operation": label, "ms": sec * 1e3, "ms_dropped": dropped * 1e3,
                     "calls": calls})
        status = "-" if target is None else ("met" if sec * 1e3 <= target else "NOT met")
        print(f"| {label} | {sec * 1e3:.1f} | {calls:,.0f} | {dropped * 1e3:.1f} | "
              f"{'-' if target is None else f'<= {target:.0f}'} | {status} |")
    for p in keep:
        a.free(p)
    if history_row:
        for p in keep_h:
            h.free(p)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-history", action="store_true",
                        help="skip the rows with history recording")
    args = parser.parse_args()
    snapshot_row(args.repeat, not args.no_history)


if __name__ == "__main__":
    main()
