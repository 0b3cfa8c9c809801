"""Snapshots whose trace entries carry torch 2.15's ``internal_metadata`` (set by allocator
internals, e.g. ``"mallocWithAddress"``): accelrt's tools read them like any other entry."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import accelrt as acc
from accelrt.memory.tools import _replay
from accelrt.memory.tools.viz import load_snapshot, memory_by_location, trace_html, trace_text


def _snapshot() -> dict[str, Any]:
    mem = acc.cpu.memory
    mem._record_memory_history(max_entries=100)
    try:
        x = acc.zeros(1 << 20, device="cpu:0")
        y = acc.zeros(250, device="cpu:0")
        del x
        snap: dict[str, Any] = mem._snapshot()
        del y
    finally:
        mem._record_memory_history(None)
    return snap


def test_tools_accept_internal_metadata(tmp_path: Path) -> None:
    plain = _snapshot()
    tagged = copy.deepcopy(plain)
    traces = tagged["device_traces"]
    assert traces and traces[0]
    for e in traces[0]:
        if e["action"] in ("alloc", "free_requested", "free_completed"):
            e["internal_metadata"] = "mallocWithAddress"
    for name, snap in (("plain", plain), ("tagged", tagged)):
        path = tmp_path / f"{name}.pickle"
        path.write_bytes(pickle.dumps(snap))
        assert load_snapshot(str(path))["device_traces"] == snap["device_traces"]
    # the tools give the same results with and without the key
    assert trace_text(tagged) == trace_text(plain)
    assert memory_by_location(tagged) == memory_by_location(plain)
    assert "<html" in trace_html(tagged).lower()
    ops_plain = _replay.trace_ops(_replay.load_trace(str(tmp_path / "plain.pickle")))
    ops_tagged = _replay.trace_ops(_replay.load_trace(str(tmp_path / "tagged.pickle")))
    assert ops_tagged == ops_plain and ops_plain
