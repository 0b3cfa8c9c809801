"""A lower bound on the driver calls of any allocator that keeps fragmentation within a slack.

Issue 13 asks for a policy whose peak reserved memory stays within 2% of peak live memory on
every trace (1% in geometric mean) *and* whose total time (Python + the driver calls it would
make on an H100) is no more than the default policy's. This script shows how many mappings such
a policy must make whatever its rules, so the second target can be checked against what is
possible rather than against what was tried.

**The bound.** Let ``live(t)`` be the bytes live after operation ``t`` and ``M(t)`` the most
that was live up to ``t``. A policy that guarantees ``peak reserved <= (1 + s) * peak live`` on
every trace must keep ``reserved(t) <= (1 + s) * M(t)`` at every ``t``: otherwise the same
trace cut after ``t`` (everything freed, nothing larger allocated again: a job that ends or
fails there) has peak live ``M(t)`` and breaks the guarantee, and an online policy cannot tell
the two traces apart at ``t``. Now let ``t1`` be the first allocation and ``t(k+1)`` the first
operation after ``tk`` with ``live > (1 + s) * M(tk)``. At ``t(k+1)``, reserved memory holds
the live bytes, more than ``(1 + s) * M(tk)``, which bounds everything reserved up to ``tk``:
so reserved memory grew somewhere in ``(tk, t(k+1)]``. The intervals are disjoint, and each
growth of reserved (physical) memory is at least one ``cuMemCreate`` + ``cuMemMap`` (with its
eventual unmap, 73.5 us on an H100). Hence at least ``K`` mappings, ``K`` the number of
``tk``, whatever the policy's placement, page size or mapping sizes: the bound ignores
fragmentation entirely (it lets a policy place every byte perfectly), so a real policy needs
more.

**Its premise, relaxed.** No policy keeps a 2 MiB-page reservation within 2% of a trace that
never has more than a few MiB live, so a policy may fairly assume that the peak will reach some
``floor`` bytes and keep only ``reserved(t) <= (1 + s) * max(M(t), floor)``; the same argument
then gives the bound with that limit. ``--floor`` sets it (default: 0 and 256 MiB, below the
smallest peak here, 318 MiB). The bound falls fast with it: most growths that a policy promising
2% from the first byte must make come while the program is still small.

Usage::

    python bench/lowfrag_bound.py [TRACE ...]    # default: tests/data/traces/*.json.gz

prints, per workload, ``K`` at 1% and 2% slack, its driver time, and the default policy's
``cudaMalloc`` calls and driver time (from a replay on the simulated device); and the growths
that fall in the steady state (the last third of the operations, where issue 24 asks for at
most 2 driver calls per 1,000): a workload whose live memory still grows there cannot meet that
below the bound, whatever the policy.
``bench/bench_allocator.py`` prints the same bound beside the measured Python time, which says
how much faster than the default policy's Python a policy within 2% would have to be to tie
its total.
"""

from __future__ import annotations

import argparse
import glob
import os
from collections.abc import Sequence

from accelrt.memory._config import parse_config
from accelrt.memory.tools._replay import H100_US, load_trace, replay_ops, steady_start, trace_ops
from accelrt.memory.tools._synthetic import convnet_inference_ops

HERE = os.path.dirname(os.path.abspath(__file__))
Op = tuple[bool, int, int, int]

#: Driver time of one growth of reserved memory: a cuMemCreate and a map/unmap cycle (us).
GROWTH_US = H100_US["create"] + H100_US["map_cycle"]


def growth_lower_bound(ops: Sequence[Op], slack: float, floor: int = 0, start: int = 0) -> int:
    """Growths of reserved memory that any policy keeping
    ``reserved <= (1 + slack) * max(M, floor)`` (``M`` the high-water mark of live bytes so
    far) must make on ``ops``: the ``K`` of the module docstring; with ``start``, only those
    that fall at operation ``start`` or later (``steady_start(len(ops))``: the steady state
    whose driver calls ``accelrt replay`` reports).

    Example::

        >>> ops = [(True, 1, 100, 0), (True, 2, 1, 0), (True, 3, 5, 0), (False, 1, 0, 0),
        ...        (True, 4, 200, 0)]
        >>> growth_lower_bound(ops, 0.02)   # 100 (t1), then 106 > 102, then 206 > 108.12
        3
        >>> growth_lower_bound(ops, 0.10)   # 106 fits under 110
        2
        >>> growth_lower_bound(ops, 0.02, floor=300)   # all of it fits under 306
        1
        >>> growth_lower_bound(ops, 0.02, start=2)   # the growths at operations 2 and 4
        2
        >>> growth_lower_bound([], 0.02)
        0
    """
    if slack < 0 or floor < 0 or start < 0:
        raise ValueError(f"slack, floor and start must be >= 0, got {slack}, {floor} and "
                         f"{start}")
    sizes: dict[int, int] = {}
    live = mark = 0
    limit = -1.0   # (1 + slack) * M(t_k) of the last growth; -1: none yet
    growths = 0
    for t, (is_alloc, handle, size, _) in enumerate(ops):
        if is_alloc:
            sizes[handle] = size
            live += size
            if live > mark:
                mark = live
            if live > limit:
                if t >= start:
                    growths += 1
                limit = (1 + slack) * max(mark, floor)
        else:
            live -= sizes.pop(handle, 0)
    return growths


def workloads(paths: Sequence[str]) -> list[tuple[str, list[Op]]]:
    """The traces at ``paths`` and the synthetic convnet of bench_allocator.py."""
    out = [(os.path.basename(p).removeprefix("trace_").split(".")[0], trace_ops(load_trace(p), p))
           for p in paths]
    out.append(("synthetic convnet b1-32", convnet_inference_ops(batches=60, seed=0)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", help="trace files (default: tests/data/traces)")
    parser.add_argument("--slack", type=float, default=0.02)
    parser.add_argument("--floor", type=int, action="append",
                        help="MiB a policy may assume the peak reaches (repeatable; default: "
                             "0 and 256)")
    args = parser.parse_args()
    floors = args.floor if args.floor is not None else [0, 256]
    paths = args.traces or sorted(glob.glob(os.path.join(HERE, "..", "tests", "data", "traces",
                                                         "trace_*.json*")))
    heads = " | ".join(f"bound, floor {f} MiB: mappings (driver ms)" for f in floors)
    print(f"Slack {args.slack:.0%}; a growth costs {GROWTH_US} us (H100). The default policy's "
          "cudaMallocs, and the mappings that the low-fragmentation policy makes, for scale:")
    print(f"| workload | ops | peak live MiB | default cudaMallocs (driver ms) | {heads} | "
          "low-frag mappings (driver ms) | steady state: bound, floor 0, per 1k ops | "
          "steady state: low-frag driver calls per 1k ops |")
    print("|---|---|---|---|" + "---|" * len(floors) + "---|---|---|")
    low_frag = parse_config("expandable_segments:True,page_reuse:True")
    for name, ops in workloads(paths):
        r = replay_ops(ops, None, name=name)
        lf = replay_ops(ops, low_frag, name=name)
        cells = []
        for f in floors:
            k = growth_lower_bound(ops, args.slack, f << 20)
            cells.append(f"{k} ({k * GROWTH_US / 1000:.1f})")
        steady = steady_start(len(ops))
        k = growth_lower_bound(ops, args.slack, 0, steady)
        per_1k = k * 1000 / (len(ops) - steady) if len(ops) > steady else 0.0
        print(f"| {name} | {len(ops):,} | {r['peak_live_bytes'] / 2**20:,.0f} | "
              f"{r['device_mallocs']} ({r['driver_us_h100'] / 1000:.1f}) | {' | '.join(cells)} | "
              f"{lf['vm_maps']} ({lf['driver_us_h100'] / 1000:.1f}) | {per_1k:.1f} ({k}) | "
              f"{lf['steady_driver_calls_per_1k_ops']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
