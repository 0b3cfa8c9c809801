"""``snapshot_segments`` gives exactly what it gave before its loop was made faster (issue 13):
the same segments in the same order, the same keys in the same order, the same value types,
and fresh containers (nothing shared between blocks or with the allocator).

The reference below is the previous implementation, kept verbatim in spirit: a walk over
every block that picks segment heads, then a sort of the segments by address.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest

from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._block import DEFAULT_POOL
from accelrt.memory._config import AllocatorConfig, parse_config
from accelrt.testing._simulated import SimulatedBackend

KiB, MiB = 1 << 10, 1 << 20


def reference_segments(a: DeviceCachingAllocator,
                       pool_id: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """The snapshot loop as it was before issue 13's speed work."""
    owner_filter = None if pool_id is None else tuple(pool_id)
    segments = []
    for blk in a._blocks.values():
        if not blk.mapped or (blk.prev is not None and blk.prev.mapped):
            continue
        pool = blk.pool
        pid = pool.owner.id if pool.owner is not None else DEFAULT_POOL
        if owner_filter is not None and pid != owner_filter:
            continue
        blocks = []
        total = alloc = active = req = 0
        b = blk
        addr = blk.addr
        while b is not None and b.mapped:
            size = b.size
            if b.allocated:
                state = "active_allocated"
                alloc += size
                active += size
                req += b.requested
            elif b.event_count > 0 or b.stream_uses:
                state = "active_pending_free"
                active += size
                req += b.requested
            else:
                state = "inactive"
            fr = b.frames
            blocks.append({"address": addr, "size": size, "requested_size": b.requested,
                           "state": state, "frames": [dict(f) for f in fr] if fr else []})
            addr += size
            total += size
            b = b.next
        seg_frames = blk.exp.frames if blk.exp is not None else blk.seg_frames
        segments.append({
            "device": a._index, "address": blk.addr, "total_size": total,
            "allocated_size": alloc, "active_size": active, "requested_size": req,
            "stream": blk.stream, "segment_type": "small" if pool.is_small else "large",
            "segment_pool_id": pid, "is_expandable": blk.exp is not None,
            "frames": [dict(f) for f in seg_frames] if seg_frames else [], "blocks": blocks})
    segments.sort(key=lambda s: s["address"])
    return segments


def _shape(obj: Any) -> Any:
    """The value with its exact types and dict key order made visible."""
    if isinstance(obj, dict):
        return ("dict", [(k, _shape(v)) for k, v in obj.items()])
    if isinstance(obj, list):
        return ("list", [_shape(v) for v in obj])
    if isinstance(obj, tuple):
        return ("tuple", [_shape(v) for v in obj])
    return (type(obj).__name__, obj)


def _assert_same(a: DeviceCachingAllocator, pool_id: tuple[int, int] | None = None) -> None:
    history = a._history
    a._history = None           # the "snapshot" trace entry would differ between the calls
    try:
        ref = reference_segments(a, pool_id)
        got = a.snapshot_segments(pool_id)
    finally:
        a._history = history
    assert _shape(got) == _shape(ref)
    assert pickle.loads(pickle.dumps(got, protocol=4)) == ref
    containers = [id(x) for s in got for x in [s, s["frames"], s["blocks"]]]
    containers += [id(x) for s in got for b in s["blocks"] for x in [b, b["frames"]]]
    containers += [id(f) for s in got for b in s["blocks"] for f in b["frames"]]
    assert len(containers) == len(set(containers))            # nothing shared
    inner = {id(f) for blk in a._blocks.values() for f in (blk.frames or ())}
    assert not inner & set(containers)                          # nor with the allocator


@pytest.mark.parametrize("conf", ["", "expandable_segments:True",
                                  "expandable_segments:True,page_reuse:True"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_workloads_give_the_reference_snapshot(conf: str, seed: int) -> None:
    rng = random.Random(seed)
    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 40), 0, parse_config(conf))
    if seed == 1:
        a.record_history("all", "all", "python", 10_000)   # frames on blocks and segments
    live: list[int] = []
    for _ in range(400):
        if live and rng.random() < 0.45:
            a.free(live.pop(rng.randrange(len(live))))
        else:
            size = rng.choice([rng.randrange(1, 512), rng.randrange(1, 1 * MiB),
                               rng.randrange(1, 30 * MiB)])
            live.append(a.malloc(size, rng.choice([0, 0, 7])))
        if rng.random() < 0.02:
            a.empty_cache()
    _assert_same(a)
    for p in live:
        a.free(p)
    _assert_same(a)


def test_pending_frees_private_pools_and_pool_filter() -> None:
    b = SimulatedBackend(auto_complete=False)
    a = DeviceCachingAllocator(b, 0, AllocatorConfig())
    p = a.malloc(4096, 0)
    a.record_stream(p, 5)
    b.launch_work(5)
    a.free(p)                                   # active_pending_free
    a.begin_allocate_to_pool((1, 1))
    q = [a.malloc(3 * MiB, 0), a.malloc(700, 0)]
    a.end_allocate_to_pool((1, 1))
    a.free(q[1])
    r = a.malloc(40 * MiB, 0)
    states = {blk["state"] for s in a.snapshot_segments() for blk in s["blocks"]}
    assert states == {"active_allocated", "active_pending_free", "inactive"}
    _assert_same(a)
    _assert_same(a, (1, 1))
    _assert_same(a, DEFAULT_POOL)
    _assert_same(a, (9, 9))
    assert [s["segment_pool_id"] for s in a.snapshot_segments((1, 1))] == [(1, 1)] * 2
    b.complete_stream(5)
    for x in (q[0], r):
        a.free(x)
    _assert_same(a)


def test_large_snapshot_is_sorted_like_the_reference() -> None:
    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 40), 0, parse_config(""))
    rng = random.Random(5)
    ptrs = [a.malloc(rng.choice([300 * KiB, 3 * MiB, 25 * MiB]), 0) for _ in range(300)]
    for p in ptrs[::3]:
        a.free(p)
    _assert_same(a)
    for p in ptrs[1::3] + ptrs[2::3]:
        a.free(p)


def test_traces_equal_the_plain_copy_and_share_nothing() -> None:
    from collections import OrderedDict

    import numpy as np

    from accelrt.memory._snapshot import build_snapshot, to_plain

    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 40), 0, parse_config(""))
    a.record_history("all", "all", "python", 10_000)
    ps = [a.malloc(s, 0) for s in (100, 3 * MiB, 30 * MiB)]
    a.record_annotation(OrderedDict(step=np.int64(4), tags=["a", (1, 2)]))
    a.free(ps.pop())
    a.record_annotation({"plain": 1})
    snap = build_snapshot(None, [a], {"x": 1})    # records a "snapshot" entry last
    *read, last = a._history.trace                # (after reading the trace, as PyTorch)
    assert last["action"] == "snapshot"
    ref = to_plain({"device_traces": [[dict(e) for e in read]]})["device_traces"]
    got = snap["device_traces"]
    # the previous code's result, key order and exact types included
    assert _shape(got) == _shape(ref)
    assert list(snap) == ["segments", "device_traces", "allocator_settings",
                          "external_annotations", "host_segments", "host_traces",
                          "library_roots"]
    assert type(got[0][-1]["user_metadata"]) is dict
    # (the "snapshot" entry has no stack, so no "frames" key, as in torch 2.14.1)
    ids = [id(f) for e in got[0] for f in e["frames"]] + [id(e["frames"]) for e in got[0]]
    internal = [id(f) for e in a._history.trace for f in e.get("frames", ())] + [
        id(e["frames"]) for e in a._history.trace if "frames" in e]
    assert not set(ids) & set(internal)
    a.record_annotation({"bad": object()})
    with pytest.raises(TypeError, match=r"\['device_traces'\]\[0\]\[\d+\]\['user_metadata'\]"):
        build_snapshot(None, [a], {})
    for p in ps:
        a.free(p)
