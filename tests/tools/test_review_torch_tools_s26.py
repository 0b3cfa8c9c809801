"""accelrt's memory tools and PyTorch's, each on the other's files (session 26).

accelrt's snapshots were fed to torch 2.14.1's ``torch.cuda._memory_viz`` (every function and
its command line) in a harness outside this suite; the files PyTorch writes, built here by hand
in the layouts of its writers (``torch/csrc/cuda/Module.cpp`` of 1.13/2.0 and 2.14), are fed to
``accelrt memory viz``, ``accelrt replay`` and ``accelrt memory tune``. No test imports torch:
what torch does is written down as literals observed on torch 2.14.1.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from accelrt.memory import viz
from accelrt.memory.tools import _replay, _tune

MiB = 1 << 20
_A = 0x7F00_0000_0000                                  # a segment's address
_F = [{"filename": "/srv/job/train.py", "line": 7, "name": "step"}]


def legacy_snapshot(requested_size: bool) -> dict[str, Any]:
    """A snapshot in PyTorch 1.13/2.0's layout: a block's size asked for and its stack are in
    its ``history`` (latest first), blocks have no ``frames`` or ``address``; 1.13 wrote no
    ``requested_size`` either (``requested_size=False``)."""
    blocks: list[dict[str, Any]] = [
        {"size": 4 * MiB, "state": "active_allocated",
         "history": [{"addr": _A, "real_size": 3 * MiB + 5, "frames": _F}]},
        {"size": 2 * MiB, "state": "active_pending_free",
         "history": [{"addr": _A + 4 * MiB, "real_size": 2 * MiB, "frames": _F}]},
        {"size": 14 * MiB, "state": "inactive"}]
    seg: dict[str, Any] = {"device": 0, "address": _A, "total_size": 20 * MiB,
                           "allocated_size": 4 * MiB, "active_size": 6 * MiB, "stream": 0,
                           "segment_type": "large", "blocks": blocks}
    if requested_size:
        for b, r in zip(blocks, (3 * MiB + 5, 2 * MiB, 0)):
            b["requested_size"] = r
        seg.update(requested_size=3 * MiB + 5, segment_pool_id=(0, 0))
    trace = [{"action": "segment_alloc", "addr": _A, "size": 20 * MiB, "stream": 0},
             {"action": "alloc", "addr": _A, "size": 3 * MiB + 5, "stream": 0, "frames": _F}]
    return {"segments": [seg], "device_traces": [trace]}


@pytest.mark.parametrize("requested_size", [False, True])
def test_legacy_history_blocks_read_as_pytorch_reads_them(tmp_path: Path,
                                                          requested_size: bool) -> None:
    """A 1.13 snapshot was refused ("missing key 'requested_size'") and a 2.0 one lost every
    block's stack; torch 2.14.1's ``_memory_viz.segsum`` reads both (the real_size of the
    latest history entry is what was asked for)."""
    snap = legacy_snapshot(requested_size)
    path = tmp_path / "legacy.pickle"
    path.write_bytes(pickle.dumps(snap))
    lines = viz.segsum(viz.load_snapshot(str(path))).splitlines()
    # torch 2.14.1's segsum of this snapshot, both layouts (its legend differs in wording)
    assert lines[1:6] == ["[a] 20.0MiB allocated, 17.0MiB (5.9% internal) free", "segments: 1",
                          "total_reserved: 20.0MiB", "total_allocated: 3.0MiB",
                          "total_free: 17.0MiB (5.9% internal)"]
    assert viz.memory_by_location(snap) == {0: {"/srv/job/train.py:7:step": (4 * MiB, 1)}}
    page = viz.trace_html(snap)
    assert "/srv/job/train.py:7:step" in page
    bad = legacy_snapshot(requested_size)
    bad["segments"][0]["blocks"][0]["history"] = [{"real_size": "3"}]
    with pytest.raises(ValueError, match=r"\['history'\]\[0\]\['real_size'\]: expected int"):
        viz.segsum(bad)
    bad["segments"][0]["blocks"][0]["history"] = ["x"]
    with pytest.raises(ValueError, match=r"\['history'\]\[0\]: expected a dict"):
        viz.segsum(bad)


def test_a_pickled_segment_list_is_a_snapshot_without_history(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    """``pickle.dump(torch.cuda.memory_snapshot(), f)`` (a list of segments) is what torch
    2.14.1's ``python -m torch.cuda._memory_viz stats FILE`` reads as a snapshot; accelrt
    refused it ("expected a dict, got list"), and replay/tune did not say it lacks history."""
    path = tmp_path / "segments.pickle"
    path.write_bytes(pickle.dumps(legacy_snapshot(True)["segments"]))
    snap = viz.load_snapshot(str(path))
    assert snap["device_traces"] == [] and len(snap["segments"]) == 1
    assert viz.viz_main([str(path), "--segsum"]) == 0
    assert "total_allocated: 3.0MiB" in capsys.readouterr().out     # torch's stats: the same
    for main in (_replay.replay_main, _tune.tune_main):
        assert main([str(path)]) == 1
        err = capsys.readouterr().err
        assert "a list of segments, as memory_snapshot() returns) has no allocation history" \
            in err and "accelrt memory viz" in err
    path.write_bytes(pickle.dumps([{"address": 0}, 5]))     # not segments: still refused
    with pytest.raises(ValueError, match="expected a dict, got list"):
        viz.load_snapshot(str(path))


@pytest.mark.parametrize("protocol", [0, 1])
def test_every_tool_reads_every_pickle_protocol(tmp_path: Path, protocol: int,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``pickle.load`` (torch's ``_memory_viz.py``) and ``accelrt memory viz`` read a snapshot
    pickled with protocol 0 or 1, but replay and tune took it for JSON ("neither JSON nor a
    snapshot pickle")."""
    snap = legacy_snapshot(True)
    snap["device_traces"][0].append({"action": "free_requested", "addr": _A,
                                     "size": 3 * MiB + 5, "stream": 0})
    path = tmp_path / "old.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=protocol))
    assert viz.viz_main([str(path), "--segsum"]) == 0
    assert _replay.load_trace(str(path))[1] == ("alloc", _A, 3 * MiB + 5, 0)
    assert _replay.replay_main([str(path), "--json"]) == 0
    assert _tune.read_workload(str(path)).ops[0] == (True, _A, 3 * MiB + 5, 0)
    capsys.readouterr()


def two_device_snapshot() -> dict[str, Any]:
    """PyTorch 2.14's layout with history on devices 0 and 1 (one process, two GPUs)."""
    def entry(action: str, addr: int, size: int) -> dict[str, Any]:
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 1,
                "compile_context": "N/A", "user_metadata": "", "frames": []}
    return {"segments": [], "device_traces": [
        [entry("alloc", _A, 3 * MiB), entry("free_requested", _A, 3 * MiB)],
        [entry("alloc", _A, 5 * MiB), entry("alloc", _A + 5 * MiB, 700)]]}


def test_replay_takes_a_device_as_tune_does(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A snapshot of a process with two GPUs could not be replayed at all ("replay takes one
    device's trace", and no way to name one); ``--device N`` chooses, as in ``memory tune``."""
    path = tmp_path / "two.pickle"
    path.write_bytes(pickle.dumps(two_device_snapshot()))
    assert _replay.replay_main([str(path)]) == 1
    assert "devices 0, 1 have allocation history; choose one with --device N" in \
        capsys.readouterr().err
    for device, ops, live in ((0, 2, 3 * MiB), (1, 2, 5 * MiB + 700)):
        assert _replay.replay_main([str(path), "--device", str(device), "--json"]) == 0
        row = json.loads(capsys.readouterr().out)
        assert (row["ops"], row["peak_live_bytes"]) == (ops, live)
    assert _replay.replay_main([str(path), "--device", "2"]) == 1
    assert "--device 2 is out of range: the snapshot has 2 device(s) (0..1)" in \
        capsys.readouterr().err
    assert _replay.load_trace(str(path), 1)[1] == ("alloc", _A + 5 * MiB, 700, 0)
    with pytest.raises(TypeError, match="device must be an int or None, got bool"):
        _replay.load_trace(str(path), True)
    one = two_device_snapshot()
    one["device_traces"][0] = []
    path.write_bytes(pickle.dumps(one))
    with pytest.raises(_replay.NoHistoryError, match="device 0 of the snapshot has no "
                       "allocation history .*; devices with history: 1$"):
        _replay.load_trace(str(path), 0)


def test_trace_text_names_the_allocation_an_annotation_is_about() -> None:
    """torch 2.14's ``_annotate_tensor`` records an ``annotate`` entry at the allocation's
    address; torch 2.14.1's ``_memory_viz.trace`` prints ``# annotate b: ...`` (accelrt printed
    the text without saying which allocation)."""
    def entry(action: str, addr: int, size: int, meta: str = "") -> dict[str, Any]:
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 1,
                "compile_context": "N/A", "user_metadata": meta, "frames": []}
    snap = {"segments": [], "device_traces": [[
        entry("segment_alloc", _A, 20 * MiB), entry("alloc", _A, 4 * MiB),
        entry("annotate", _A, 0, "packed for backward"), entry("annotate", 16, 0, "stray")]]}
    lines = viz.trace_text(snap).splitlines()
    assert lines[4:6] == ["# annotate b: packed for backward", "# annotate stray"]


# Every opcode the unpickler of PyTorch's browser visualizer (https://pytorch.org/memory_viz,
# torch/utils/viz/MemoryViz.js: unpickle()) handles, and the protocols it accepts (2 to 4);
# it throws "UNKNOWN OPCODE" on any other.
_MEMORY_VIZ_JS_OPCODES = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET",
    "LONG_BINGET", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_LIST", "LIST", "APPEND",
    "APPENDS", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWTRUE",
    "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "SHORT_BINUNICODE",
    "BINUNICODE"})


def test_dump_snapshot_uses_only_what_the_browser_visualizer_unpickles(tmp_path: Path) -> None:
    """The docs send users to https://pytorch.org/memory_viz with dump_snapshot's file; its
    JavaScript unpickler reads protocols 2 to 4 and a fixed set of opcodes only."""
    import pickletools
    import uuid

    from accelrt import backends, memory
    from accelrt.memory._snapshot import dump_snapshot
    from accelrt.testing._simulated import SimulatedBackend

    name = f"vizjs{uuid.uuid4().hex[:8]}"
    backends.register(name, lambda: SimulatedBackend(name=name, capacity=1 << 40,
                                                     device_count=2))
    try:
        devs = (f"{name}:0", f"{name}:1")
        for d in devs:
            memory.record_memory_history(max_entries=1000, device=d)
        ptrs = [memory.caching_allocator_alloc(n, d) for n, d in
                ((3 * MiB, devs[0]), (1000, devs[0]), (25 * MiB, devs[1]), (5 << 30, devs[0]))]
        memory.caching_allocator_delete(ptrs.pop(1))
        path = tmp_path / "snap.pickle"
        dump_snapshot(path, memory._snapshot(name))
        for d in devs:
            memory.record_memory_history(None, device=d)
        for p in ptrs:
            memory.caching_allocator_delete(p)
    finally:
        backends.unregister(name)
    ops = list(pickletools.genops(path.read_bytes()))
    assert ops[0][0].name == "PROTO" and 2 <= ops[0][1] <= 4
    assert {op.name for op, _, _ in ops} <= _MEMORY_VIZ_JS_OPCODES
    snap = pickle.loads(path.read_bytes())
    assert snap["device_traces"][0] and any(b["frames"] for s in snap["segments"]
                                             for b in s["blocks"])


def rewind_like_memory_viz_js(segments: list[dict[str, Any]],
                              trace: list[dict[str, Any]]) -> list[str]:
    """What pytorch.org/memory_viz's "Allocator State History" does to show an earlier entry
    (MemoryViz.js: MemoryView.simulate_memory): start from the snapshot's segments and live
    blocks and undo the trace from its end (an undone ``segment_unmap`` joins the neighbours
    of its stream, an undone ``segment_map`` cuts its range out of the one segment holding
    it). Returns the steps where the page would throw (a ``segment_alloc``/``segment_map``
    in no segment, a ``free_requested`` of no block) or draw a block outside every segment."""
    segs = sorted([s["address"], s["total_size"], s["stream"]] for s in segments)
    blocks: set[int] = set()
    for s in segments:
        addr = s["address"]
        for b in s["blocks"]:
            if b["state"] != "inactive":
                blocks.add(addr)
            addr += b["size"]
    problems = []
    for i in range(len(trace) - 1, -1, -1):
        e = trace[i]
        a, addr, size = e["action"], e["addr"], e["size"]
        if a == "free_completed":
            blocks.add(addr)
        elif a == "free_requested" and addr not in blocks:
            problems.append(f"entry {i}: free_requested of {addr:#x}, no block there")
        elif a == "alloc":
            blocks.discard(addr)
        elif a in ("segment_free", "segment_unmap"):
            new = [addr, size, e["stream"]]
            if a == "segment_unmap":
                for s in [s for s in segs if s[2] == new[2] and (s[0] + s[1] == new[0]
                                                                 or new[0] + new[1] == s[0])]:
                    segs.remove(s)
                    new = [min(s[0], new[0]), s[1] + new[1], new[2]]
            segs = sorted([*segs, new])
        elif a in ("segment_alloc", "segment_map"):
            inside = [s for s in segs if s[0] <= addr and addr + size <= s[0] + s[1]]
            if not inside or (a == "segment_alloc" and inside[0][0] != addr):
                problems.append(f"entry {i}: {a} {addr:#x}+{size} is in no segment")
                continue
            s = inside[0]
            segs.remove(s)
            segs += [r for r in ([s[0], addr - s[0], s[2]],
                                 [addr + size, s[0] + s[1] - addr - size, s[2]]) if r[1] > 0]
        for b in blocks:
            if not any(s[0] <= b < s[0] + s[1] for s in segs):
                problems.append(f"before entry {i}: block {b:#x} is in no segment")
    return problems


@pytest.mark.parametrize("conf", ["", "expandable_segments:True",
                                  "expandable_segments:True,page_reuse:True"])
@pytest.mark.parametrize("max_entries", [100_000, 40])
def test_snapshots_of_every_setting_are_what_torchs_readers_need(conf: str,
                                                                 max_entries: int) -> None:
    """torch 2.14.1's ``_memory_viz`` (segsum, trace, memory, segments, compare, trace_plot,
    segment_plot and the command line) ran on accelrt snapshots of every setting, stream
    use, pool, graph, OOM and history option without error, its numbers equal to
    memory_stats() (harness outside this suite). What it relies on, checked here for the
    default, expandable and low-fragmentation policies and a wrapped history: the blocks
    tile each segment (segsum asserts it), the segments sum to the statistics, and the
    trace undoes onto the segments as the browser visualizer undoes it."""
    import random

    from accelrt.memory._allocator import DeviceCachingAllocator
    from accelrt.memory._config import AllocatorConfig, parse_config
    from accelrt.testing._simulated import SimulatedBackend

    b = SimulatedBackend(capacity=1 << 34)
    a = DeviceCachingAllocator(b, 0, parse_config(conf) if conf else AllocatorConfig())
    a.record_history("all", max_entries=max_entries)
    rng = random.Random(5)
    live: list[int] = []
    for step in range(300):
        if rng.random() < 0.55 or not live:
            size = rng.choice([rng.randint(1, 1 << 20), rng.randint(1 << 20, 40 << 20)])
            live.append(a.malloc(size, rng.choice([0, 7])))
            if rng.random() < 0.1:
                a.record_stream(live[-1], 9)
        else:
            a.free(live.pop(rng.randrange(len(live))))
        if step % 97 == 96:
            b.synchronize(0)
            a.empty_cache()
    segments, trace, st = a.snapshot_segments(), a.trace_entries(), a.stats()
    for seg in segments:
        addr = seg["address"]
        for blk in seg["blocks"]:
            assert blk["address"] == addr
            addr += blk["size"]
        assert addr - seg["address"] == seg["total_size"]
    for key, field in (("reserved_bytes", "total_size"), ("allocated_bytes", "allocated_size"),
                       ("active_bytes", "active_size"), ("requested_bytes", "requested_size")):
        assert st[f"{key}.all.current"] == sum(s[field] for s in segments)
    assert rewind_like_memory_viz_js(segments, trace) == []
    for p in live:
        a.free(p)


def test_a_snapshot_written_as_json_is_named_as_such(tmp_path: Path) -> None:
    """A snapshot saved with json.dump (PyTorch's tools read pickles only) was reported as
    "not a valid pickle (UnpicklingError: invalid load key, '{'.)"."""
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(legacy_snapshot(True)))
    with pytest.raises(ValueError, match="snap.json: a JSON object, not a snapshot pickle: "
                       "'accelrt memory viz' draws the pickles that"):
        viz.load_snapshot(str(path))
