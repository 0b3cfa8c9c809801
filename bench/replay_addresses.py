"""Check that allocator settings place every block where another copy of accelrt places it.

A change to the low-fragmentation policy (``page_reuse``) must leave the default and the
``expandable_segments:True`` policies byte-identical: the same address for every request.
This replays every workload (the traces of ``tests/data/traces`` with its ``heldout*``
folders and ``../shared/traces``, and the synthetic convnet at seeds 0 to 29) under each
setting in two copies of accelrt, each in its own interpreter (``PYTHONPATH`` set to the
copy's ``src``), and compares the address every ``malloc`` returned. It prints one line per
setting and a line per workload that differs, with the first operation where it differs, and
exits with 1 if any does.

Usage::

    git worktree add /tmp/base main
    python bench/replay_addresses.py --against /tmp/base/src
    python bench/replay_addresses.py --against /tmp/base/src --settings default,low-frag

``--dump`` prints this copy's addresses as JSON (what each side runs).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SETTINGS = {"default": "", "expandable": "expandable_segments:True",
            "low-frag": "expandable_segments:True,page_reuse:True"}
CONVNET_SEEDS = range(30)


def trace_paths() -> list[str]:
    """Every trace file: tests/data/traces, its held-out folders, ../shared/traces (each name
    once, the repository's copy first)."""
    data = os.path.join(ROOT, "tests", "data", "traces")
    paths = sorted(glob.glob(os.path.join(data, "trace_*.json.gz")))
    paths += sorted(glob.glob(os.path.join(data, "heldout*", "trace_*.json.gz")))
    paths += sorted(glob.glob(os.path.join(ROOT, "..", "shared", "traces", "trace_*.json.gz")))
    seen: set[str] = set()
    out = []
    for p in paths:
        name = os.path.basename(p)
        if name not in seen:
            seen.add(name)
            out.append(p)
    return out


def addresses(ops: list[Any], conf: str) -> list[int]:
    """The address each allocation of ``ops`` got, replayed on a fresh simulated device."""
    from accelrt.memory._allocator import DeviceCachingAllocator
    from accelrt.memory._config import parse_config
    from accelrt.testing._simulated import SimulatedBackend
    alloc = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(conf))
    handles: dict[int, int] = {}
    out = []
    for is_alloc, handle, size, stream in ops:
        if is_alloc:
            ptr = alloc.malloc(size, stream)
            handles[handle] = ptr
            out.append(ptr)
        else:
            alloc.free(handles.pop(handle))
    return out


def dump(settings: list[str]) -> dict[str, dict[str, list[int]]]:
    """``{setting: {workload: addresses}}`` for the accelrt on ``sys.path``."""
    from accelrt.memory.tools._replay import load_trace, trace_ops
    from accelrt.memory.tools._synthetic import convnet_inference_ops
    workloads: list[tuple[str, Any]] = []
    for p in trace_paths():
        name = os.path.basename(p)[len("trace_"):-len(".json.gz")]
        workloads.append((name, lambda p=p: trace_ops(load_trace(p), p)))
    for seed in CONVNET_SEEDS:
        workloads.append((f"convnet_seed{seed}", lambda s=seed: convnet_inference_ops(seed=s)))
    out: dict[str, dict[str, list[int]]] = {s: {} for s in settings}
    for name, make in workloads:
        ops = make()
        for s in settings:
            out[s][name] = addresses(ops, SETTINGS[s])
    return out


def run_copy(src: str, settings: list[str]) -> dict[str, dict[str, list[int]]]:
    """:func:`dump` in a fresh interpreter that imports accelrt from ``src``."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    res = subprocess.run([sys.executable, os.path.abspath(__file__), "--dump",
                          "--settings", ",".join(settings)],
                         env=env, capture_output=True, text=True, check=False)
    if res.returncode:
        raise SystemExit(f"replaying with {src} failed:\n{res.stderr}")
    data: dict[str, dict[str, list[int]]] = json.loads(res.stdout)
    return data


def compare(mine: dict[str, dict[str, list[int]]], theirs: dict[str, dict[str, list[int]]]
            ) -> int:
    """Print the differences; return how many workloads differ."""
    bad = 0
    for s, runs in mine.items():
        diff = []
        for name, addrs in runs.items():
            other = theirs[s][name]
            if addrs != other:
                first = next((i for i, (x, y) in enumerate(zip(addrs, other)) if x != y),
                             min(len(addrs), len(other)))
                diff.append(f"  {name}: differs from allocation {first} of {len(addrs)}")
        total = sum(len(a) for a in runs.values())
        print(f"{s}: {len(runs) - len(diff)} of {len(runs)} workloads identical "
              f"({total:,} addresses)")
        for line in diff:
            print(line)
        bad += len(diff)
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="the other copy's src folder")
    ap.add_argument("--mine", default=os.path.join(ROOT, "src"),
                    help="this copy's src folder (default: the one beside bench/)")
    ap.add_argument("--settings", default="default,expandable",
                    help=f"comma-separated, of {', '.join(SETTINGS)} (default: "
                         "default,expandable)")
    ap.add_argument("--dump", action="store_true", help="print this copy's addresses (JSON)")
    args = ap.parse_args()
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        ap.error(f"unknown settings {unknown}; choose from {list(SETTINGS)}")
    if args.dump:
        json.dump(dump(settings), sys.stdout)
        return
    if not args.against:
        ap.error("give --against SRC (another copy's src folder) or --dump")
    bad = compare(run_copy(args.mine, settings), run_copy(args.against, settings))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
