"""Issue 22's targets, each build side by side in one run: the compiled build, the pure build
and an anchor, in alternating processes, in "calls" (thread CPU time over one empty Python
method call in the same process).

Each ``--build NAME=PYTHON[@PATH]`` is an interpreter, with ``PATH`` put first on
``PYTHONPATH`` (a folder holding an ``accelrt`` package: a source tree for the pure build, an
older commit's ``src`` for an anchor; leave it out for the accelrt installed in that
interpreter, e.g. a venv holding the compiled wheel). Rows:

* ``replay <setting>``: calls per operation replaying the traces of ``tests/data/traces``
  through the caching allocator on the simulated backend (``bench_allocator``'s timing),
  median and worst over the traces, for the default, expandable and page_reuse settings;
  for the two that map pages, also ``device stubbed``: the same replays on a simulated
  device whose ``vm_map``/``vm_unmap`` only count (``bench_allocator.stubbed_device``; the
  same blocks), the allocator's own time without the simulator's bookkeeping of mappings,
  which on a GPU is the driver's;
* ``cached alloc+free``: a 1 MiB malloc + free the allocator serves from its cache;
* the runtime calls of ``bench_runtime_calls.py`` (``Event.record``, ``Event.query``,
  ``current_stream``, ``Stream`` enter+exit, ...) and ``acc.empty(256)`` + its free;
* ``rand(1000) / numpy``: ``acc.rand(1000)`` over numpy's Philox for the same count
  (``Generator(Philox(seed)).random(1000, dtype=float32)``), paired.

Then every row's ratio to the first build's pure counterpart, and the targets. Example (the
compiled wheel in one venv, this tree's sources as the pure build, an anchor checkout)::

    python bench/bench_builds.py --build compiled=/tmp/cw/venv/bin/python \\
        --build pure=.venv/bin/python@src --build anchor=.venv/bin/python@/tmp/old/src

Not part of pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: Issue 22's targets for the compiled build: calls (or a ratio, for the rand row).
TARGETS = {"replay default (worst)": 20.0, "replay expandable (worst)": 28.0,
           "replay page_reuse (worst)": 35.0, "cached alloc+free 1 MiB": 8.0,
           "Event.record": 8.0, "Event.query": 4.0, "current_stream()": 6.0,
           "current_stream": 6.0, "Stream enter+exit": 12.0, "empty(256) + free": 40.0,
           "rand(1000) / numpy": 1.5}

SETTINGS = (("default", ""), ("expandable", "expandable_segments:True"),
            ("page_reuse", "expandable_segments:True,page_reuse:True"))


def _allocator_rows(traces: list[str], repeat: int) -> dict[str, float]:
    sys.path.insert(0, str(HERE))
    import bench_allocator as ba
    impl = ba.Impl("this", "accelrt")
    rows: dict[str, float] = {"compiled": float(impl.build == "compiled")}
    loaded = ba._traces(traces)
    for label, conf in SETTINGS:
        per_trace = []
        for _, ops in loaded:
            runs = [ba.paired(lambda c=conf, o=ops: ba._replay_timed(lambda: impl.new(c), o),
                              20000)[0] for _ in range(repeat)]
            per_trace.append(statistics.median(runs))
        rows[f"replay {label} (median)"] = statistics.median(per_trace)
        rows[f"replay {label} (worst)"] = max(per_trace)
        if conf:   # (settings that map pages: the allocator's time alone, see below)
            stubbed = []
            for _, ops in loaded:
                runs = [ba.paired(lambda c=conf, o=ops: ba._replay_timed(
                    lambda: impl.new_stubbed(c), o), 20000)[0] for _ in range(repeat)]
                stubbed.append(statistics.median(runs))
            rows[f"replay {label}, device stubbed (median)"] = statistics.median(stubbed)
            rows[f"replay {label}, device stubbed (worst)"] = max(stubbed)
    rows["cached alloc+free 1 MiB"] = statistics.median(
        ba.paired(lambda: ba.bench_alloc_free(lambda: impl.new(""), 1 << 20, 20000), 20000)[0]
        for _ in range(repeat))
    return rows


def _rand_ratio(repeat: int) -> float:
    import numpy as np

    import accelrt as acc
    gen = np.random.Generator(np.random.Philox(1))
    n, loops = 1000, 2000

    def numpy_call() -> object:
        return gen.random(n, dtype=np.float32)

    def accelrt_call() -> object:
        return acc.rand(n, device="cpu:0")

    ratios = []
    for _ in range(repeat):
        times = []
        for fn in (numpy_call, accelrt_call):
            fn()
            t = time.thread_time()
            for _ in range(loops):
                fn()
            times.append(time.thread_time() - t)
        ratios.append(times[1] / times[0])
    return statistics.median(ratios)


def child(traces: list[str], repeat: int, loops: int) -> dict[str, float]:
    """Every row, measured in this process (the accelrt it imports)."""
    sys.path.insert(0, str(HERE))
    import bench_runtime_calls as brc
    rows = _allocator_rows(traces, repeat)
    compiled = rows.pop("compiled")
    rows.update({k: v for k, v in brc.measure(loops).items() if k != "compiled"})
    rows["empty(256) + free"] = _empty_free(repeat, loops)
    rows["rand(1000) / numpy"] = _rand_ratio(repeat)
    rows["compiled"] = compiled   # not a row: whether the allocator loaded compiled
    return rows


def _empty_free(repeat: int, loops: int) -> float:
    """Calls per ``acc.empty(256, device="cpu:0")`` whose array is freed at once."""
    import accelrt as acc

    def run() -> tuple[float, int]:
        t = time.thread_time()
        for _ in range(loops):
            acc.empty(256, device="cpu:0")
        return time.thread_time() - t, loops

    sys.path.insert(0, str(HERE))
    import bench_allocator as ba
    run()
    return statistics.median(ba.paired(run, 20000)[0] for _ in range(repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append", default=[], metavar="NAME=PYTHON[@PATH]")
    ap.add_argument("--traces", action="append", default=None,
                    help="folders of traces (default: tests/data/traces)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per build")
    ap.add_argument("--repeat", type=int, default=3, help="samples per row in one round")
    ap.add_argument("--loops", type=int, default=20000)
    ap.add_argument("--json", help="write the medians here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    traces = args.traces or [str(ROOT / "tests" / "data" / "traces")]
    if args.child:
        print(json.dumps(child(traces, args.repeat, args.loops)))
        return 0
    if not args.build:
        ap.error("give at least one --build NAME=PYTHON[@PATH]")
    builds: dict[str, tuple[str, str | None]] = {}
    for spec in args.build:
        name, _, rest = spec.partition("=")
        python, _, path = rest.partition("@")
        python = os.path.abspath(python) if os.sep in python else python
        builds[name] = (python, os.path.abspath(path) if path else None)
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in builds}
    for _ in range(args.rounds):
        for name, (python, path) in builds.items():
            env = dict(os.environ)
            env.pop("PYTHONPATH", None)
            if path:
                env["PYTHONPATH"] = path
            cmd = [python, __file__, "--child", "--repeat", str(args.repeat), "--loops",
                   str(args.loops), *[a for t in traces for a in ("--traces", t)]]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/",
                                 check=False)
            if out.returncode:
                raise SystemExit(f"build {name}: {out.stderr.strip()[-2000:]}")
            samples[name].append(json.loads(out.stdout))
    names = list(builds)
    rows = [r for r in samples[names[0]][0] if r != "compiled"]
    med: dict[str, dict[str, float]] = {
        n: {r: statistics.median(s[r] for s in samples[n])
            for r in samples[n][0] if all(r in s for s in samples[n])} for n in names}
    builds_line = ", ".join(
        f"{n}: {'compiled' if med[n].get('compiled', 0) else 'pure'}" for n in names)
    print(f"builds: {builds_line}; median of {args.rounds} alternating rounds x "
          f"{args.repeat} samples; calls = thread CPU time / one empty method call")
    first = names[0]
    head = "| row | " + " | ".join(names) + " | " + " | ".join(
        f"{first}/{n}" for n in names[1:]) + " | target | status |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        vals = [med[n].get(r) for n in names]
        cells = [f"{v:.1f}" if v is not None and v >= 10 else
                 f"{v:.2f}" if v is not None else "-" for v in vals]
        ratios = [f"{vals[0] / v:.2f}" if vals[0] is not None and v else "-"
                  for v in vals[1:]]
        target = TARGETS.get(r)
        status = "" if target is None or vals[0] is None else (
            "met" if vals[0] <= target else "NOT met")
        print(f"| {r} | " + " | ".join(cells) + " | " + " | ".join(ratios) +
              f" | {'' if target is None else f'<= {target:g}'} | {status} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"medians": med, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
