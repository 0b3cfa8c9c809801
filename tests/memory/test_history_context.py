"""Memory history as PyTorch records it (issue 10 §2): which stack each trace entry carries at
each ``context`` level, the one-entry buffer of ``enabled="state"``, and stacks that start at
the user's frames (accelrt's own frames filtered out)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import memory
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._allocator import DeviceCachingAllocator, peek_allocator
from accelrt.memory._config import parse_config
from accelrt.testing import SimulatedBackend

PKG = os.path.dirname(os.path.abspath(acc.__file__)) + os.sep
MiB = 1 << 20

# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    "histsync": lambda: CpuBackend(num_devices=2, async_streams=False, name="histsync"),
    "histasync": lambda: CpuBackend(num_devices=2, async_streams=True, name="histasync"),
})


@pytest.fixture(params=["histsync", "histasync"])
def dev(request: pytest.FixtureRequest) -> Iterator[str]:
    """Device 1 of a two-device cpu backend (sync or async streams), made current."""
    name: str = request.param
    acc.set_current_accelerator(name)
    acc.set_device_index(1)
    d = f"{name}:1"
    yield d
    memory.record_memory_history(None, device=d)
    acc.synchronize(d)
    memory.empty_cache()


# The "user code" whose frames the stacks must start at.
def user_alloc(d: str) -> int:
    return memory.caching_allocator_alloc(3 * MiB, d)


def user_free(p: int) -> None:
    memory.caching_allocator_delete(p)


def user_release() -> None:
    memory.empty_cache()


def trace(d: str) -> list[dict[str, Any]]:
    """The device's trace (without the ``snapshot`` entry that taking a snapshot adds)."""
    acc.synchronize(d)
    name, index = d.rsplit(":", 1)
    a = peek_allocator(name, int(index))
    assert a is not None
    return a.trace_entries()


def entry(entries: list[dict[str, Any]], action: str) -> dict[str, Any]:
    found = [e for e in entries if e["action"] == action]
    assert found, f"no {action} entry in {[e['action'] for e in entries]}"
    return found[-1]


def top(e: dict[str, Any]) -> str:
    """Name of the innermost recorded frame."""
    assert e["frames"], f"{e['action']} entry has no frames"
    name: str = e["frames"][0]["name"]
    return name


def run_cycle(d: str) -> None:
    p = user_alloc(d)
    user_free(p)
    user_release()


def test_context_all_free_entries_carry_the_freeing_call_stack(dev: str) -> None:
    memory.record_memory_history("all", context="all", device=dev, clear_history=True)
    run_cycle(dev)
    t = trace(dev)
    assert top(entry(t, "segment_alloc")) == "user_alloc"
    assert top(entry(t, "alloc")) == "user_alloc"
    assert top(entry(t, "free_requested")) == "user_free"
    assert top(entry(t, "free_completed")) == "user_free"
    # the segment was released by empty_cache(): its entry carries that call, not the alloc
    assert top(entry(t, "segment_free")) == "user_release"


def test_context_alloc_free_entries_carry_the_allocation_stack(dev: str) -> None:
    memory.record_memory_history("all", context="alloc", device=dev, clear_history=True)
    run_cycle(dev)
    t = trace(dev)
    for action in ("segment_alloc", "alloc", "free_requested", "free_completed",
                   "segment_free"):
        assert top(entry(t, action)) == "user_alloc", action


@pytest.mark.parametrize("context", ["state", None])
def test_context_state_or_none_trace_entries_carry_no_stacks(dev: str,
                                                             context: str | None) -> None:
    memory.record_memory_history("all", context=context, device=dev, clear_history=True)
    p = user_alloc(dev)
    user_free(p)
    q = user_alloc(dev)
    user_release()
    t = trace(dev)
    assert {e["action"] for e in t} >= {"segment_alloc", "alloc", "free_requested",
                                        "free_completed"}
    # no stack: no "frames" key, as torch 2.14.1 (memory_snapshot.cpp: if (te.context_))
    assert all("frames" not in e for e in t), [(e["action"], e.get("frames")) for e in t]
    blocks = [b for s in memory._snapshot(dev)["segments"] if s["device"] == 1
              for b in s["blocks"] if b["state"] == "active_allocated"]
    if context == "state":   # live blocks keep their allocation stack
        assert [top(b) for b in blocks] == ["user_alloc"]
    else:
        assert [b["frames"] for b in blocks] == [[]]
    user_free(q)


@pytest.mark.parametrize("context", ["state", "alloc", "all"])
def test_a_freed_allocation_leaves_no_stack_on_its_block(dev: str, context: str) -> None:
    # PyTorch's free_block drops the block's allocation context: once freed, a block is
    # inactive and stackless in the snapshot, and with context="state" (no stacks on trace
    # entries) the freed allocation's stack is nowhere in it (torch's
    # test_memory_plots_free_stack); "alloc" and "all" keep it on the trace entries (issue 23)
    memory.record_memory_history("all", context=context, device=dev, clear_history=True)
    user_free(user_alloc(dev))
    acc.synchronize(dev)
    snap = memory._snapshot(dev)
    blocks = [b for s in snap["segments"] if s["device"] == 1 for b in s["blocks"]]
    assert blocks and all(b["state"] == "inactive" for b in blocks)
    assert all(b["frames"] == [] for b in blocks), [b["frames"] for b in blocks]
    in_trace = any(f["name"] == "user_alloc" for e in snap["device_traces"][1]
                   for f in e.get("frames", ()))
    assert in_trace == (context != "state")
    # the block's next allocation, made with recording off, has no stack either
    memory.record_memory_history(None, device=dev)
    p = user_alloc(dev)
    live = [b for s in memory._snapshot(dev)["segments"] if s["device"] == 1
            for b in s["blocks"] if b["state"] == "active_allocated"]
    assert [b["frames"] for b in live] == [[]]
    user_free(p)


def test_enabled_state_keeps_a_one_entry_buffer(dev: str) -> None:
    memory.record_memory_history("state", device=dev, max_entries=1000, clear_history=True)
    p = user_alloc(dev)
    t = trace(dev)
    assert [e["action"] for e in t] == ["alloc"]
    user_free(p)
    t = trace(dev)
    assert [e["action"] for e in t] == ["free_completed"]
    assert top(t[0]) == "user_free"     # context="all" by default
    memory.record_memory_history("all", device=dev, max_entries=1000)
    run_cycle(dev)
    assert len(trace(dev)) > 1           # "all" grows the buffer again


def test_stacks_start_at_the_users_frames(dev: str) -> None:
    memory.record_memory_history("all", context="all", device=dev, clear_history=True)

    def make_and_drop() -> None:
        x = acc.asarray(np.ones(1 << 18, dtype="float32"), device=dev, copy=True)
        y = acc.zeros((1 << 18,), dtype="float32", device=dev)
        del x, y

    make_and_drop()
    run_cycle(dev)
    t = trace(dev)
    with_frames = [e for e in t if e["frames"]]
    assert with_frames
    for e in with_frames:
        assert not any(f["filename"].startswith(PKG) for f in e["frames"]), e
        assert e["frames"][0]["filename"] == __file__
    blocks = [b for s in memory._snapshot(dev)["segments"] for b in s["blocks"] if b["frames"]]
    for b in blocks:
        assert not any(f["filename"].startswith(PKG) for f in b["frames"])


def test_expandable_segment_unmap_carries_the_releasing_call() -> None:
    b = SimulatedBackend()
    a = DeviceCachingAllocator(b, 0, parse_config("expandable_segments:True"))
    a.record_history("all", context="all")

    def release_here() -> None:
        a.empty_cache()

    p = a.malloc(5 * MiB, 0)
    a.free(p)
    release_here()
    unmaps = [e for e in a.trace_entries() if e["action"] == "segment_unmap"]
    assert unmaps and all(top(e) == "release_here" for e in unmaps)
    a.record_history("all", context="alloc")
    p = a.malloc(5 * MiB, 0)
    a.free(p)
    a.empty_cache()
    unmaps = [e for e in a.trace_entries() if e["action"] == "segment_unmap"]
    assert "frames" not in unmaps[-1]   # no stack: no key, as torch 2.14.1
    a.record_history(None)
