"""Where the low-fragmentation policy's waste lies at its peak.

Replays a workload under ``expandable_segments:True,page_reuse:True`` up to the operation
where reserved memory first reaches its peak, and sorts the reserved bytes that hold no live
data at that moment into:

- ``partial``: free bytes of mapped pages that a live block touches (the rest of a page that
  a live block holds part of: holes between live blocks, rounded out to pages);
- ``pinned_piece``: whole free pages inside a mapping of at most ``split_pages`` pages (a
  piece cut by rule 3, or a short mapping) that a live block touches: kept mapped because a
  mapping is unmapped whole;
- ``pinned_big``: the same inside a longer mapping (rule 3 exists so that this stays 0);
- ``free_map``: whole mappings that no live block touches (rule 4 keeps them until the
  high-water mark would rise).

It also prints how much of the peak live memory was live at that moment (below 1: the
reserved peak came while less was live, so part of the ratio is timing, not waste).

Usage::

    python bench/lowfrag_waste.py [TRACE ...]    # default: tests/data/traces/*.json.gz

:func:`breakdown` takes any operation list (``(is_alloc, handle, size, stream)`` tuples, as
:func:`accelrt.memory._replay.trace_ops` returns), for synthetic workloads.
"""

from __future__ import annotations

import argparse
import glob
import os
from collections.abc import Sequence
from typing import Any

from accelrt.memory._config import parse_config
from accelrt.memory._replay import _make_allocator, _peak_live, load_trace, trace_ops

CONF = "expandable_segments:True,page_reuse:True"
MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def _run(ops: Sequence[Any], stop: int) -> tuple[Any, int, int]:
    """Replay ``ops`` (through operation ``stop``; -1: all): the allocator, the peak reserved
    bytes and the index of the operation that first reached it."""
    alloc = _make_allocator(parse_config(CONF))
    handles: dict[int, int] = {}
    best, best_i = -1, -1
    for i, (is_alloc, handle, size, stream) in enumerate(ops):
        if is_alloc:
            handles[handle] = alloc.malloc(size, stream)
        else:
            alloc.free(handles.pop(handle))
        if alloc._total_reserved > best:
            best, best_i = alloc._total_reserved, i
        if i == stop:
            break
    return alloc, best, best_i


def breakdown(ops: Sequence[Any]) -> dict[str, Any]:
    """The waste at the first moment of peak reserved memory (bytes, see the module's doc)."""
    _, peak, at = _run(ops, -1)
    alloc, _, _ = _run(ops, at)
    ex = alloc._expandable_segments
    cap = ex.split_pages
    out: dict[str, Any] = {"peak_reserved": peak, "peak_live": _peak_live(ops), "live_now": 0,
                           "partial": 0, "pinned_piece": 0, "pinned_big": 0, "free_map": 0,
                           "pinned_mappings": 0, "split_pages": cap}
    for es in ex.segments:
        page, base = es.page, es.base
        live: dict[int, int] = {}       # page index -> live bytes in it
        b = alloc._blocks.get(base)
        while b is not None:
            if b.allocated:
                out["live_now"] += b.size
                lo, hi = b.addr, b.addr + b.size
                p = (lo - base) // page
                while base + p * page < hi:
                    ps = base + p * page
                    live[p] = live.get(p, 0) + min(hi, ps + page) - max(lo, ps)
                    p += 1
            b = b.next
        for s in es.starts:
            n = es.lengths[s]
            used = [live.get(p, 0) for p in range(s, s + n)]
            if not any(used):
                out["free_map"] += n * page
                continue
            out["partial"] += sum(page - u for u in used if 0 < u < page)
            free_pages = used.count(0)
            if free_pages:
                out["pinned_piece" if n <= cap else "pinned_big"] += free_pages * page
                out["pinned_mappings"] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*",
                    default=sorted(glob.glob(os.path.join(HERE, "..", "tests", "data",
                                                          "traces", "*.json.gz"))))
    args = ap.parse_args()
    print(f"{'workload':24s} {'res/live':>8s} {'live_now':>8s} {'waste':>8s} {'partial':>8s}"
          f" {'pinned':>8s} {'(maps)':>6s} {'big':>6s} {'freemap':>8s}   (MiB)")
    for path in args.traces:
        name = os.path.basename(path).removeprefix("trace_").removesuffix(".json.gz")
        r = breakdown(trace_ops(load_trace(path), path))
        print(f"{name:24s} {r['peak_reserved'] / r['peak_live']:8.4f}"
              f" {r['live_now'] / r['peak_live']:8.4f}"
              f" {(r['peak_reserved'] - r['live_now']) / MiB:8.1f} {r['partial'] / MiB:8.1f}"
              f" {r['pinned_piece'] / MiB:8.1f} {r['pinned_mappings']:6d}"
              f" {r['pinned_big'] / MiB:6.1f} {r['free_map'] / MiB:8.1f}")


if __name__ == "__main__":
    main()
