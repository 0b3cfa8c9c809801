"""Runtime hot paths in "calls" (thread CPU time over one empty method call, paired in the same
process), optionally beside another accelrt tree in alternating processes.

``bench/bench_runtime.py`` times wall clock next to PyTorch's numbers; on a loaded machine its
rows swing by 2x between runs. This one measures thread CPU time in calls, five paired samples
per row (median), and with ``--anchor DIR`` runs this tree and the tree at ``DIR`` (a folder
holding an ``accelrt`` package, e.g. an older commit's ``src``) one after the other, ``--rounds``
times, so that both see the same machine::

    git archive HEAD~5 src | tar -x -C /tmp/old
    python bench/bench_runtime_calls.py --anchor /tmp/old/src --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    s, e = acc.Stream("cpu:0"), acc.Event("cpu:0")

    def timed(op: Callable[[], object]) -> Callable[[int], float]:
        def run(n: int) -> float:
            t = time.thread_time()
            for _ in range(n):
                op()
            return (time.thread_time() - t) / n
        return run

    def enter_exit(n: int) -> float:
        t = time.thread_time()
        for _ in range(n):
            with s:
                pass
        return (time.thread_time() - t) / n

    rows: dict[str, Callable[[int], float]] = {
        "Stream enter+exit": enter_exit,
        "Stream()": timed(lambda: acc.Stream("cpu:0")),
        "Event.record": timed(lambda: e.record(s)),
        "Event.query": timed(e.query),
        "current_stream": timed(lambda: acc.current_stream("cpu:0")),
        "Stream.synchronize": timed(s.synchronize),
        "empty(4) + free": timed(lambda: acc.empty(4, dtype="float32", device="cpu:0")),
    }
    return {name: _calls_per_op(fn, loops) for name, fn in rows.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--anchor", type=Path, help="folder holding another accelrt package")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loops", type=int, default=20000)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.loops)))
        return 0
    trees = {"this": ROOT / "src"}
    if args.anchor is not None:
        trees["anchor"] = args.anchor.resolve()
    results: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=str(tree))
            out = subprocess.run([sys.executable, __file__, "--child", "--loops", str(args.loops)],
                                 env=env, capture_output=True, text=True, check=True)
            results[name].append(json.loads(out.stdout))
    names = list(results["this"][0])
    head = "operation                 this (calls)" + ("   anchor (calls)  this/anchor"
                                                        if "anchor" in trees else "")
    print(head)
    for row in names:
        this = statistics.median(r[row] for r in results["this"])
        line = f"{row:<24}{this:>14.1f}"
        if "anchor" in trees:
            anchor = statistics.median(r[row] for r in results["anchor"])
            line += f"{anchor:>17.1f}{this / anchor:>13.2f}"
        print(line)
    print(f"median of {args.rounds} rounds (alternating processes), each the median of 5 paired "
          "samples; calls = thread CPU time / one empty method call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
