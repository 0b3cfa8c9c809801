"""Snapshots: PyTorch's structure, plain types, dump/load, and what _memory_viz.py reads."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelrt import backends, memory
from accelrt.memory._history import library_roots
from accelrt.memory.tools._replay import load_pickle
from accelrt.testing._simulated import SimulatedBackend
from accelrt.memory._snapshot import (
    build_snapshot,
    check_snapshot,
    dump_snapshot,
    to_plain,
)
from accelrt.memory.viz import load_snapshot, segsum, trace_text

MiB = 1 << 20

SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable",
                "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
SETTINGS_KEYS = {"PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "garbage_collection_threshold",
                 "expandable_segments", "pinned_num_register_threads",
                 "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
                 "graph_capture_record_stream_reuse", "max_round_threshold",
                 "max_cached_size", "roundup_power2_divisions"}      # torch 2.14.1's




def _walk_plain(obj, path="snap") -> None:
    if isinstance(obj, dict):
        assert type(obj) is dict, path
        for k, v in obj.items():
            assert type(k) is str, path
            _walk_plain(v, f"{path}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        assert type(obj) in (list, tuple), path
        for i, v in enumerate(obj):
            _walk_plain(v, f"{path}[{i}]")
    else:
        assert type(obj) in (str, int, float, bool, type(None)), (path, type(obj))


def _workload(dev: str) -> list[int]:
    memory.record_memory_history(max_entries=10_000, device=f"{dev}:0")
    big = memory.caching_allocator_alloc(3 * MiB, f"{dev}:0")
    small = memory.caching_allocator_alloc(1000, f"{dev}:0")
    gone = memory.caching_allocator_alloc(5 * MiB, f"{dev}:0")
    memory.caching_allocator_delete(gone)
    return [big, small]


def test_full_snapshot_structure(dev: str) -> None:
    live = _workload(dev)
    snap = memory._snapshot(dev)
    assert set(snap) == {"segments", "device_traces", "allocator_settings",
                         "external_annotations", "host_segments", "host_traces",
                         "library_roots"}        # torch 2.14.1's keys and library_roots
    _walk_plain(snap)
    assert len(snap["device_traces"]) == 2 and snap["device_traces"][1] == []
    segs = snap["segments"]
    assert [s["address"] for s in segs] == sorted(s["address"] for s in segs)
    assert sorted(s["segment_type"] for s in segs) == ["large", "small"]
    for s in segs:
        assert set(s) == SEGMENT_KEYS
        assert s["device"] == 0 and s["segment_pool_id"] == (0, 0) and not s["is_expandable"]
        addr = s["address"]
        for b in s["blocks"]:
            assert set(b) == BLOCK_KEYS
            assert b["address"] == addr
            addr += b["size"]
            assert b["state"] in ("active_allocated", "active_pending_free", "inactive")
        assert s["total_size"] == addr - s["address"]
        assert s["allocated_size"] == sum(b["size"] for b in s["blocks"]
                                          if b["state"] == "active_allocated")
    large = next(s for s in segs if s["segment_type"] == "large")
    assert large["total_size"] == 20 * MiB and large["allocated_size"] == 3 * MiB
    assert large["requested_size"] == 3 * MiB
    allocated = {b["address"] for s in segs for b in s["blocks"]
                 if b["state"] == "active_allocated"}
    assert allocated == set(live)
    settings = snap["allocator_settings"]
    assert set(settings) == SETTINGS_KEYS
    assert settings["max_split_size"] == -1
    assert list(settings["roundup_power2_divisions"]) == [str(1 << k) for k in range(16)]
    assert snap["external_annotations"] == []
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions[:3] == ["segment_alloc", "alloc", "segment_alloc"]
    assert actions.count("alloc") == 3 and "free_requested" in actions
    # taking a snapshot is recorded, after its traces were read (as PyTorch): the entry is
    # in the next snapshot
    assert "snapshot" not in actions
    assert memory._snapshot(dev)["device_traces"][0][-1]["action"] == "snapshot"
    for e in snap["device_traces"][0]:
        assert {"action", "addr", "size", "stream", "time_us"} <= set(e)
    for p in live:
        memory.caching_allocator_delete(p)


def test_snapshot_has_what_torch_memory_viz_reads(dev: str) -> None:
    """Without torch installed: the keys and types _memory_viz.segsum/trace/segments use."""
    live = _workload(dev)
    snap = memory._snapshot(dev)
    for seg in snap["segments"]:
        for key, typ in (("address", int), ("total_size", int), ("allocated_size", int),
                         ("stream", int), ("blocks", list)):
            assert isinstance(seg[key], typ), key
        for b in seg["blocks"]:
            assert isinstance(b["size"], int) and isinstance(b["state"], str)
            assert isinstance(b["frames"], list)           # _block_extra uses 'frames' ...
            assert isinstance(b["requested_size"], int)    # ... and 'requested_size'
            for f in b["frames"]:
                assert {"filename", "line", "name"} <= set(f)
    for entries in snap["device_traces"]:
        for e in entries:
            assert isinstance(e["action"], str)
            if e["action"] == "oom":
                assert isinstance(e["device_free"], int)
            else:
                assert isinstance(e["addr"], int) and isinstance(e["size"], int)
    # the consumers themselves: segsum asserts its totals add up
    text = segsum(snap)
    assert "segments: 2" in text and "total_reserved: 22.0MiB" in text
    assert "a = cudaMalloc(" in trace_text(snap)
    for p in live:
        memory.caching_allocator_delete(p)


def test_frames_recorded_with_context(dev: str) -> None:
    memory.record_memory_history(context="all", device=f"{dev}:0")
    p = memory.caching_allocator_alloc(4096, f"{dev}:0")
    seg = memory._snapshot(dev)["segments"][0]
    block = next(b for b in seg["blocks"] if b["state"] == "active_allocated")
    assert block["frames"] and any(f["filename"].endswith("test_snapshot.py")
                                   for f in block["frames"])
    memory.caching_allocator_delete(p)


def test_dump_snapshot_roundtrip(dev: str, tmp_path, monkeypatch) -> None:
    live = _workload(dev)
    import accelrt._device as d
    monkeypatch.setattr(d, "_current_backend", backends.get_backend(dev))
    path = tmp_path / "snap.pickle"
    memory.dump_snapshot(path)
    raw = path.read_bytes()
    assert pickle.loads(raw) == load_pickle(raw)          # plain data only
    snap = load_snapshot(str(path))
    assert len(snap["segments"]) == 2
    assert memory.memory_snapshot() == snap["segments"]
    for p in live:
        memory.caching_allocator_delete(p)


def test_memory_snapshot_filters_by_pool(dev: str, monkeypatch) -> None:
    import accelrt._device as d
    monkeypatch.setattr(d, "_current_backend", backends.get_backend(dev))
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, f"{dev}:1"):
        p = memory.caching_allocator_alloc(1 << 20, f"{dev}:1")
    q = memory.caching_allocator_alloc(1 << 20, f"{dev}:1")
    in_pool = memory.memory_snapshot(pool.id)
    assert len(in_pool) == 1 and in_pool[0]["segment_pool_id"] == pool.id
    assert in_pool[0]["device"] == 1
    assert pool.snapshot() == in_pool
    assert len(memory.memory_snapshot()) == 2
    memory.caching_allocator_delete(p)
    memory.caching_allocator_delete(q)


def test_build_snapshot_without_allocators() -> None:
    snap = build_snapshot(None, [None, None, None], {"k": 1})
    assert snap == {"segments": [], "device_traces": [[], [], []],
                    "allocator_settings": {"k": 1}, "external_annotations": [],
                    "host_segments": [], "host_traces": [],
                    "library_roots": list(library_roots())}


def test_to_plain() -> None:
    from collections import OrderedDict
    out = to_plain(OrderedDict(a=np.int64(3), b=[np.float32(0.5), (np.bool_(True), None)]))
    assert out == {"a": 3, "b": [0.5, (True, None)]}
    assert type(out) is dict and type(out["a"]) is int and type(out["b"][1][0]) is bool
    with pytest.raises(TypeError, match=r"snapshot\['x'\]\[0\]: object"):
        to_plain({"x": [object()]})
    with pytest.raises(TypeError):
        dump_snapshot("/nonexistent/never-written.pickle", {"x": {1, 2}})


def test_check_snapshot_messages() -> None:
    with pytest.raises(ValueError, match="expected a dict"):
        check_snapshot([])
    with pytest.raises(ValueError, match=r"\['device_traces'\]\[0\]\[0\]: missing key 'addr'"):
        check_snapshot({"segments": [], "device_traces": [[{"action": "alloc", "size": 1}]]})
    with pytest.raises(ValueError, match="missing key 'device_free'"):
        check_snapshot({"segments": [], "device_traces": [[{"action": "oom", "size": 1}]]})
    with pytest.raises(ValueError, match=r"\['address'\]: expected int, got bool"):
        check_snapshot({"segments": [{"address": True}], "device_traces": []})
    with pytest.raises(ValueError, match="missing key 'requested_size'"):
        check_snapshot({"segments": [{"address": 0, "total_size": 1, "stream": 0, "blocks": [
            {"size": 1, "state": "active_allocated"}]}], "device_traces": []})


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 24 * MiB), st.sampled_from([0, 7])),
                min_size=1, max_size=60),
       st.booleans())
def test_snapshot_agrees_with_stats_and_replays(tmp_path_factory, steps, expandable) -> None:
    """After any alloc/free sequence: blocks tile their segments, the snapshot's totals equal
    the statistics, segsum reads it, and the recorded trace, dumped and replayed, reproduces
    the peak reserved bytes."""
    from accelrt.memory._allocator import DeviceCachingAllocator
    from accelrt.memory._config import parse_config
    from accelrt.memory.tools._replay import load_trace, replay_ops, trace_ops

    conf = "expandable_segments:True" if expandable else ""
    a = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(conf))
    a.record_history("all", None, "python", 100_000)
    live: list[int] = []
    for is_alloc, size, stream in steps:
        if is_alloc or not live:
            live.append(a.malloc(size, stream))
        else:
            a.free(live.pop(size % len(live)))
    snap = build_snapshot(None, [a], {})
    stats = a.stats()
    for seg in snap["segments"]:
        addr = seg["address"]
        for b in seg["blocks"]:
            assert b["address"] == addr
            addr += b["size"]
        assert addr == seg["address"] + seg["total_size"]
    assert sum(s["total_size"] for s in snap["segments"]) == stats["reserved_bytes.all.current"]
    assert sum(s["allocated_size"] for s in snap["segments"]) == stats[
        "allocated_bytes.all.current"]
    assert {b["address"] for s in snap["segments"] for b in s["blocks"]
            if b["state"] == "active_allocated"} == set(live)
    segsum(snap)
    path = tmp_path_factory.mktemp("snap") / "s.pickle"
    dump_snapshot(path, snap)
    r = replay_ops(trace_ops(load_trace(str(path))), parse_config(conf))
    assert r["peak_reserved_bytes"] == stats["reserved_bytes.all.peak"]
    for p in live:
        a.free(p)


def test_history_and_snapshot_take_torch_2_14_parameters(dev: str, tmp_path) -> None:
    import accelrt as acc
    d0 = f"{dev}:0"
    # torch 2.14's positional order: ..., clear_history, compile_context,
    # global_record_annotations, skip_actions
    memory.record_memory_history("all", "all", "all", 100, d0, True, False, False,
                                 ["free_completed"])
    memory.caching_allocator_delete(memory.caching_allocator_alloc(MiB, d0))
    snap = memory._snapshot(dev, augment_with_fx_traces=False)
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert "free_requested" in actions and "free_completed" not in actions
    # _dump_snapshot(filename=..., augment_with_fx_traces=False) on the module and a device module
    memory.dump_snapshot(filename=tmp_path / "m.pickle", augment_with_fx_traces=False)
    acc.cpu.dump_snapshot(filename=tmp_path / "c.pickle", augment_with_fx_traces=False)
    for name in ("m.pickle", "c.pickle"):
        with open(tmp_path / name, "rb") as f:
            assert "segments" in pickle.load(f)
    acc.cpu.record_memory_history(None, compile_context=False, global_record_annotations=False)
    # what cannot apply here: a clear ValueError naming the parameter and the fix
    for call in (lambda: memory.record_memory_history(device=d0, compile_context=True),
                 lambda: memory.record_memory_history(device=d0, global_record_annotations=True),
                 lambda: acc.cpu.record_memory_history(compile_context=True),
                 lambda: memory._snapshot(dev, augment_with_fx_traces=True),
                 lambda: memory.dump_snapshot(tmp_path / "x.pickle", True),
                 lambda: acc.cpu.dump_snapshot(tmp_path / "x.pickle", True)):
        with pytest.raises(ValueError, match=r"=True is not supported.*=False \(the default\)"):
            call()
    assert not (tmp_path / "x.pickle").exists()
    with pytest.raises(TypeError, match="compile_context must be a bool"):
        memory.record_memory_history(device=d0, compile_context="yes")  # type: ignore[arg-type]
    memory.record_memory_history(None, device=d0)
