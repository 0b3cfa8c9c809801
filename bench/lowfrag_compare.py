"""Compare the low-fragmentation policy of two copies of accelrt on the tuning or held-out set.

For each workload: peak reserved / peak live and the steady-state driver calls per 1,000
operations (``accelrt replay``'s ``steady_driver_calls_per_1k_ops``), in this copy and,
with ``--against SRC``, in another (each in its own interpreter, ``PYTHONPATH`` set to the
copy's ``src``); then the geometric mean and worst ratio and the summed steady-state calls of
the traces, and the mean over the convnet's seeds.

- ``--set tuning`` (default): the traces of ``tests/data/traces`` and the synthetic convnet
  (batches of 1 to 32) at seeds 0 to 9. ``--set heldout``: ``tests/data/traces/heldout*``
  and the convnet at seeds 10 to 29; replay it only once a policy is final (issue 24).
- ``--jitter``: every trace four times more, with each request's size scaled by 0.97, 0.99,
  1.01 and 1.03. The policy's numbers on one trace are chaotic (a placement that differs once
  changes every later one): a change of 1% in the sizes moves a trace's steady-state calls by
  up to 3x and its ratio by up to 0.02, so a change to the policy that wins on the exact traces
  alone may only have drawn another sample. The jittered rows show what it does on average.

Usage::

    git worktree add /tmp/base main
    python bench/lowfrag_compare.py --against /tmp/base/src
    python bench/lowfrag_compare.py --against /tmp/base/src --jitter
    python bench/lowfrag_compare.py --conf expandable_segments:True,page_reuse:True --set heldout
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LOW_FRAG = "expandable_segments:True,page_reuse:True"
JITTER = (0.97, 0.99, 1.01, 1.03)
SEEDS = {"tuning": range(10), "heldout": range(10, 30)}


def _trace_files(which: str) -> list[str]:
    data = os.path.join(ROOT, "tests", "data", "traces")
    pattern = "trace_*.json.gz" if which == "tuning" else os.path.join("heldout*",
                                                                      "trace_*.json.gz")
    return sorted(glob.glob(os.path.join(data, pattern)))


def dump(which: str, jitter: bool, conf: str) -> list[dict[str, Any]]:
    """One row per workload, replayed with the accelrt on ``sys.path``."""
    from accelrt.memory._config import parse_config
    from accelrt.memory.tools._replay import load_trace, replay_ops, trace_ops
    from accelrt.memory.tools._synthetic import convnet_inference_ops
    cfg = parse_config(conf)
    rows = []

    def add(name: str, kind: str, ops: list[Any]) -> None:
        r = replay_ops(ops, cfg)
        rows.append({"name": name, "kind": kind, "ratio": r["reserved_over_live"],
                     "steady": r["steady_driver_calls_per_1k_ops"], "maps": r["vm_maps"]})

    for path in _trace_files(which):
        name = os.path.basename(path)[len("trace_"):-len(".json.gz")]
        ops = trace_ops(load_trace(path), path)
        add(name, "trace", ops)
        for f in JITTER if jitter else ():
            add(f"{name} x{f}", "jitter",
                [(a, h, max(1, int(s * f)) if a else s, st) for a, h, s, st in ops])
    for seed in SEEDS[which]:
        add(f"convnet seed {seed}", "convnet", convnet_inference_ops(seed=seed))
    return rows


def run_copy(src: str, which: str, jitter: bool, conf: str) -> list[dict[str, Any]]:
    """:func:`dump` in a fresh interpreter that imports accelrt from ``src``."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    cmd = [sys.executable, os.path.abspath(__file__), "--dump", "--set", which, "--conf", conf]
    res = subprocess.run(cmd + (["--jitter"] if jitter else []), env=env, capture_output=True,
                         text=True, check=False)
    if res.returncode:
        raise SystemExit(f"replaying with {src} failed:\n{res.stderr}")
    rows: list[dict[str, Any]] = json.loads(res.stdout)
    return rows


def summary(rows: list[dict[str, Any]], kind: str) -> str:
    """Geometric mean and worst ratio, summed (traces) or mean (convnet) steady calls."""
    sel = [r for r in rows if r["kind"] == kind]
    if not sel:
        return "-"
    ratios = [r["ratio"] for r in sel]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    steady = [r["steady"] for r in sel]
    calls = (f"mean steady {sum(steady) / len(steady):.1f}" if kind != "trace"
             else f"summed steady {sum(steady):.1f}")
    over = sum(x > 1.02 for x in ratios)
    return (f"{len(sel)} runs: geomean {geo:.4f}, worst {max(ratios):.4f} ({over} above 1.02), "
            f"{calls}, worst steady {max(steady):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="the other copy's src folder")
    ap.add_argument("--mine", default=os.path.join(ROOT, "src"),
                    help="this copy's src folder (default: the one beside bench/)")
    ap.add_argument("--set", choices=sorted(SEEDS), default="tuning")
    ap.add_argument("--jitter", action="store_true", help="add each trace with sizes scaled")
    ap.add_argument("--conf", default=LOW_FRAG, help=f"allocator settings (default {LOW_FRAG})")
    ap.add_argument("--dump", action="store_true", help="print this copy's rows (JSON)")
    args = ap.parse_args()
    if args.dump:
        json.dump(dump(args.set, args.jitter, args.conf), sys.stdout)
        return
    copies = [("this", args.mine)] + ([("against", args.against)] if args.against else [])
    results = [run_copy(src, args.set, args.jitter, args.conf) for _, src in copies]
    labels = " / ".join(label for label, _ in copies)
    print(f"| workload | reserved/live ({labels}) | steady calls per 1k ops ({labels}) |")
    print("|---|---|---|")
    for i, row in enumerate(results[0]):
        both = [res[i] for res in results]
        ratios = " / ".join(f"{r['ratio']:.4f}" for r in both)
        steady = " / ".join(f"{r['steady']:.1f}" for r in both)
        print(f"| {row['name']} | {ratios} | {steady} |")
    print()
    for kind in ("trace", "jitter", "convnet"):
        for (label, _), res in zip(copies, results):
            line = summary(res, kind)
            if line != "-":
                print(f"{kind:8s} {label:8s} {line}")


if __name__ == "__main__":
    main()
