"""Where the low-fragmentation policy's waste lies at its peak.

Replays a workload under ``expandable_segments:True,page_reuse:True`` up to the operation
where reserved memory first reaches its peak, and sorts the reserved bytes that hold no live
data at that moment into:

- ``partial``: free bytes of mapped pages that a live block touches (the rest of a page that
  a live block holds part of: holes between live blocks, rounded out to pages);
- ``pinned_piece``: whole free pages inside a mapping (a piece of at most ``piece_pages``
  pages, rule 3) that a live block touches: kept mapped because a mapping is unmapped whole;
- ``pinned_big``: the same inside a longer mapping (rule 3 makes none: this stays 0);
- ``free_map``: whole mappings that no live block touches (rule 4 keeps them until the
  high-water mark would rise).

It also prints how much of the peak live memory was live at that moment (below 1: the
reserved peak came while less was live, so part of the ratio is timing, not waste).

Usage::

    python bench/lowfrag_waste.py [TRACE ...]    # default: tests/data/traces/*.json.gz
    python bench/lowfrag_waste.py --synthetic    # held-out synthetic workloads instead

The synthetic workloads are not tuned against: an LLM-inference KV cache reallocated one token
longer per step with temporaries between (:func:`kv_cache_ops`), the convnet serving batches
of 1 to 32 (:func:`accelrt.memory.tools._synthetic.convnet_inference_ops`), and two adversarial
mixes of random-order frees (:func:`random_shapes_ops`, :func:`random_mix_ops`).

:func:`breakdown` takes any operation list (``(is_alloc, handle, size, stream)`` tuples, as
:func:`accelrt.memory.tools._replay.trace_ops` returns), for synthetic workloads.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import random
from collections.abc import Sequence
from typing import Any

from accelrt.memory._config import parse_config
from accelrt.memory.tools._replay import _make_allocator, _peak_live, load_trace, trace_ops
from accelrt.memory.tools._synthetic import convnet_inference_ops

CONF = "expandable_segments:True,page_reuse:True"
MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
Op = tuple[bool, int, int, int]


def kv_cache_ops(seed: int, layers: int = 8, width: int = 4096) -> list[Op]:
    """30 requests of a decoder's KV cache (fp16, ``layers`` per-layer caches of a random
    prompt length): each step allocates every cache one token longer, 20 temporaries, frees
    the temporaries and the old caches."""
    rng = random.Random(seed)
    ops: list[Op] = []
    handle = 0

    def alloc(size: int) -> int:
        nonlocal handle
        handle += 1
        ops.append((True, handle, size, 0))
        return handle

    for _ in range(30):
        length = rng.randint(16, 2048)
        caches = [alloc(length * width * 2) for _ in range(layers)]
        for _ in range(rng.randint(5, 60)):
            length += 1
            new = [alloc(length * width * 2) for _ in range(layers)]
            tmp = [alloc(rng.choice([width * 4, width * 16, length * 512]))
                   for _ in range(20)]
            ops.extend((False, h, 0, 0) for h in tmp + caches)
            caches = new
        ops.extend((False, h, 0, 0) for h in caches)
    return ops


def random_shapes_ops(seed: int, n: int = 10000) -> list[Op]:
    """Allocations of a few shapes (1..13 x 512 B .. 7 MiB) freed in random order, at most
    300 live (adversarial)."""
    rng = random.Random(seed)
    ops: list[Op] = []
    live: list[int] = []
    handle = 0
    for _ in range(n):
        if live and (rng.random() < 0.5 or len(live) > 300):
            ops.append((False, live.pop(rng.randrange(len(live))), 0, 0))
        else:
            handle += 1
            size = rng.choice([1, 2, 3, 5, 8, 13]) * rng.choice([512, 64 * 1024, MiB, 7 * MiB])
            ops.append((True, handle, size, 0))
            live.append(handle)
    ops.extend((False, h, 0, 0) for h in live)
    return ops


def random_mix_ops(seed: int, n: int = 10000) -> list[Op]:
    """Log-uniform sizes from 512 B to 256 MiB, freed mostly last-in first-out and 30% at
    random, at most 400 live (adversarial)."""
    rng = random.Random(seed)
    ops: list[Op] = []
    live: list[int] = []
    handle = 0
    for _ in range(n):
        if live and (rng.random() < 0.5 or len(live) > 400):
            j = rng.randrange(len(live)) if rng.random() < 0.3 else len(live) - 1
            ops.append((False, live.pop(j), 0, 0))
        else:
            handle += 1
            size = int(math.exp(rng.uniform(math.log(512), math.log(256 * MiB))))
            ops.append((True, handle, size, 0))
            live.append(handle)
    ops.extend((False, h, 0, 0) for h in live)
    return ops


def synthetic() -> list[tuple[str, list[Op]]]:
    """The held-out synthetic workloads (name, operations)."""
    out: list[tuple[str, list[Op]]] = []
    out += [(f"kv_cache seed {s}", kv_cache_ops(s)) for s in range(10)]
    out += [(f"convnet seed {s}", convnet_inference_ops(batches=60, seed=s)) for s in range(10)]
    out += [(f"random_shapes seed {s}", random_shapes_ops(s)) for s in range(8)]
    out += [(f"random_mix seed {s}", random_mix_ops(s)) for s in range(6)]
    return out


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
    cap = ex.piece_pages
    out: dict[str, Any] = {"peak_reserved": peak, "peak_live": _peak_live(ops), "live_now": 0,
                           "partial": 0, "pinned_piece": 0, "pinned_big": 0, "free_map": 0,
                           "pinned_mappings": 0, "piece_pages": cap}
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
    ap.add_argument("--synthetic", action="store_true",
                    help="the held-out synthetic workloads instead of traces")
    args = ap.parse_args()
    if args.synthetic:
        workloads = synthetic()
    else:
        workloads = [(os.path.basename(p).removeprefix("trace_").removesuffix(".json.gz"),
                      trace_ops(load_trace(p), p)) for p in args.traces]
    print(f"{'workload':24s} {'res/live':>8s} {'live_now':>8s} {'waste':>8s} {'partial':>8s}"
          f" {'pinned':>8s} {'(maps)':>6s} {'big':>6s} {'freemap':>8s}   (MiB)")
    for name, ops in workloads:
        r = breakdown(ops)
        print(f"{name:24s} {r['peak_reserved'] / r['peak_live']:8.4f}"
              f" {r['live_now'] / r['peak_live']:8.4f}"
              f" {(r['peak_reserved'] - r['live_now']) / MiB:8.1f} {r['partial'] / MiB:8.1f}"
              f" {r['pinned_piece'] / MiB:8.1f} {r['pinned_mappings']:6d}"
              f" {r['pinned_big'] / MiB:6.1f} {r['free_map'] / MiB:8.1f}")


if __name__ == "__main__":
    main()
