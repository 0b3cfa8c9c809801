"""``expandable_segments:True`` on a backend or device without virtual memory (session 38).

PyTorch treats the option as a request: where the platform cannot map memory it warns once
("expandable_segments not supported on this platform", ``TORCH_WARN_ONCE`` in
c10/cuda/CUDAAllocatorConfig.h, whose ``expandable_segments()`` then answers ``False``) and
allocates ordinary segments. accelrt decides per device: an allocator whose device has no
virtual memory warns once per backend and uses ordinary segments, while the devices that have
it use expandable segments. Before, accelrt raised ``ValueError`` from
``set_allocator_settings`` while such an allocator was open, and from every allocation on such
a backend under ``ACCELRT_ALLOC_CONF=expandable_segments:True``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import accelrt as acc
from accelrt import OutOfMemoryError, backends, cli
from accelrt import _backend as registry
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._config import EXPANDABLE_FALLBACK
from accelrt.testing import SimulatedBackend
from tests.helpers.expandable import fresh_fallback_warnings, switch_on_or_skip

MiB = 1 << 20
_names = itertools.count()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sim(vm: bool, **kw: Any) -> str:
    """A fresh registered simulated backend of two devices (with or without virtual memory);
    its name."""
    name = f"s38{'vm' if vm else 'novm'}{next(_names)}"
    backends.register(name, lambda: SimulatedBackend(name=name, vm=vm, device_count=2, **kw))
    return name


class _NoVmCpu(CpuBackend):
    """The cpu backend with virtual memory declared absent: a third-party backend without
    it, with graphs (for graph pools)."""

    def capabilities(self, index: int) -> Any:
        return dataclasses.replace(super().capabilities(index), virtual_memory=False)


def _fallbacks(seen: list[warnings.WarningMessage], name: str) -> list[warnings.WarningMessage]:
    """The fallback warnings among ``seen`` that name backend ``name``."""
    return [w for w in seen if str(w.message).startswith(EXPANDABLE_FALLBACK)
            and f"the '{name}' backend" in str(w.message)]


def _kinds(m: Any) -> list[tuple[str, bool]]:
    """(segment_type, is_expandable) of each segment of device module ``m``, sorted."""
    return sorted((s["segment_type"], s["is_expandable"]) for s in m.memory_snapshot())


@pytest.fixture
def recorded() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning of the test (fallbacks warn again: the once-per-backend set is fresh)."""
    with fresh_fallback_warnings(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield seen


# ---------------------------------------------------------------------- the environment

_ENV_SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")    # every warning counted: the once is accelrt's own
        import accelrt as acc
        from accelrt.testing import SimulatedBackend
        acc.backends.register("novm", lambda: SimulatedBackend(name="novm", vm=False,
                                                                  device_count=2))
        acc.backends.register("vmsim", lambda: SimulatedBackend(name="vmsim"))
        m, v = acc.backends.device_module("novm"), acc.backends.device_module("vmsim")
        x = acc.empty((10,), device="novm:0")
        y = acc.empty((3 << 20,), dtype="uint8", device="novm:0")
        z = acc.empty((10,), device="novm:1")          # another device: no second warning
        w = acc.empty((3 << 20,), dtype="uint8", device="vmsim:0")
        st = m.memory_stats(0)
        summary = m.memory_summary(0)
    print(json.dumps({
        "warnings": [[w.category.__name__, str(w.message), w.filename] for w in seen],
        "novm": sorted((s["segment_type"], s["is_expandable"]) for s in m.memory_snapshot()),
        "vm": sorted((s["segment_type"], s["is_expandable"]) for s in v.memory_snapshot()),
        "stats": {k: st[k] for k in ("segment.all.current", "reserved_bytes.all.current",
                                     "allocated_bytes.all.current", "num_device_alloc")},
        "summary": "Non-releasable memory" in summary,
        "settings": [m.memory._snapshot()["allocator_settings"]["expandable_segments"],
                     v.memory._snapshot()["allocator_settings"]["expandable_segments"]],
    }))
""")


def test_env_var_on_a_backend_without_vm_allocates_with_one_warning() -> None:
    """The brief's command: ``ACCELRT_ALLOC_CONF=expandable_segments:True`` and an allocation
    on a backend without virtual memory. Before: ``ValueError`` at every allocation. Now: it
    works, one UserWarning (torch's words, naming the backend, pointing at the user's line),
    ordinary segments counted as such (two segments, their bytes reserved), and a backend
    with virtual memory in the same process gets expandable segments."""
    env = dict(os.environ, ACCELRT_ALLOC_CONF="expandable_segments:True")
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _ENV_SCRIPT], capture_output=True, text=True,
                         env=env, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert len(res["warnings"]) == 1, res["warnings"]
    category, message, filename = res["warnings"][0]
    assert category == "UserWarning" and filename == "<string>"
    assert message.startswith("expandable_segments not supported on this platform: the 'novm' "
                              "backend has no virtual memory on device 0")
    assert "ordinary segments" in message
    assert res["novm"] == [["large", False], ["small", False], ["small", False]]
    assert res["vm"] == [["large", True]]
    assert res["stats"] == {"segment.all.current": 2, "reserved_bytes.all.current": 22 * MiB,
                            "allocated_bytes.all.current": 512 + 3 * MiB,
                            "num_device_alloc": 2}
    assert res["summary"]
    assert res["settings"] == [False, True]


# ---------------------------------------------------------------------- set_allocator_settings

def test_set_allocator_settings_with_a_no_vm_allocator_open(
        recorded: list[warnings.WarningMessage]) -> None:
    """Before: ``ValueError`` naming the backend, nothing changed. Now the setting is taken
    by every open allocator (torch applies runtime settings to existing ones), with one
    warning for the backend without virtual memory (none on a second call): the backend
    with virtual memory maps its new segments, the other keeps ordinary ones."""
    vm, novm = _sim(True), _sim(False)
    mv, mn = backends.device_module(vm), backends.device_module(novm)
    before_v = acc.empty((3 * MiB,), dtype="uint8", device=f"{vm}:0")      # ordinary
    before_n = acc.empty((3 * MiB,), dtype="uint8", device=f"{novm}:0")
    acc.memory.set_allocator_settings("expandable_segments:True")
    assert len(_fallbacks(recorded, novm)) == 1 and not _fallbacks(recorded, vm)
    assert recorded[-1].category is UserWarning and recorded[-1].filename == __file__
    mn.set_allocator_settings("expandable_segments:True")                 # once per backend
    assert len(_fallbacks(recorded, novm)) == 1
    assert acc.memory.get_allocator_settings() == "expandable_segments:True"
    after_v = acc.empty((30 * MiB,), dtype="uint8", device=f"{vm}:0")
    after_n = acc.empty((30 * MiB,), dtype="uint8", device=f"{novm}:0")
    assert _kinds(mv) == [("large", False), ("large", True)]
    assert _kinds(mn) == [("large", False), ("large", False)]
    st = mn.memory_stats(0)
    assert st["segment.large_pool.current"] == 2 and st["num_device_alloc"] == 2
    assert st["reserved_bytes.all.current"] == 20 * MiB + 30 * MiB
    assert mv.memory_stats(0)["segment.large_pool.current"] == 1      # pages are no segments
    assert mn.memory._snapshot()["allocator_settings"]["expandable_segments"] is False
    assert mv.memory._snapshot()["allocator_settings"]["expandable_segments"] is True
    # a device of the backend without vm started after the change: ordinary, no warning
    later = acc.empty((10,), device=f"{novm}:1")
    assert [s["is_expandable"] for s in mn.memory_snapshot() if s["device"] == 1] == [False]
    assert len(_fallbacks(recorded, novm)) == 1
    del before_v, before_n, after_v, after_n, later


def test_fallback_warning_raised_as_error_leaves_settings_applied() -> None:
    """Under ``-W error`` the warning is an exception from ``set_allocator_settings``, raised
    after every open allocator took the settings (as torch's, which is raised when the call
    returns): nothing is half-applied, and the backend with virtual memory is expandable."""
    vm, novm = _sim(True), _sim(False)
    keep = [acc.empty((10,), device=f"{vm}:0"), acc.empty((10,), device=f"{novm}:0")]
    with fresh_fallback_warnings(), warnings.catch_warnings():
        # (only this backend's: another open allocator without vm, OpenCL's, may warn first)
        warnings.filterwarnings("error", f"{EXPANDABLE_FALLBACK}: the '{novm}' backend")
        with pytest.raises(UserWarning, match=f"the '{novm}' backend"):
            acc.memory.set_allocator_settings("expandable_segments:True")
    assert acc.memory.get_allocator_settings() == "expandable_segments:True"
    x = acc.empty((3 * MiB,), dtype="uint8", device=f"{vm}:0")
    assert ("large", True) in _kinds(backends.device_module(vm))
    del keep, x


# ---------------------------------------------------------------------- the test helper

@pytest.mark.parametrize("other", ["simulated", "opencl"])
def test_switch_on_helper_no_longer_skips_for_an_open_no_vm_allocator(other: str) -> None:
    """tests/helpers/expandable.py skipped a test that switched expandable segments on while
    an allocator without virtual memory (OpenCL, from an earlier test) was open; now the
    switch works, the device under test uses expandable segments, and the other backend's
    warning does not reach the test."""
    if other == "opencl":
        reason = registry.unavailable_reason("opencl")
        if reason is not None:
            pytest.skip(f"opencl unavailable: {reason}")
        dev = "opencl:0"
    else:
        dev = f"{_sim(False)}:0"
    held = acc.empty((10,), device=dev)                 # the allocator without vm is open
    name = _sim(True)
    m = backends.device_module(name)
    with fresh_fallback_warnings():
        try:
            switch_on_or_skip(m)
        except pytest.skip.Exception as e:             # the old behaviour: a skip
            pytest.fail(f"switch_on_or_skip skipped: {e}")
    x = acc.empty((3 * MiB,), dtype="uint8", device=f"{name}:0")
    assert _kinds(m) == [("large", True)]
    del held, x


# ---------------------------------------------------------------------- page_reuse

def test_page_reuse_falls_back_with_expandable_segments(
        recorded: list[warnings.WarningMessage]) -> None:
    """``expandable_segments:True,page_reuse:True`` (the low-fragmentation policy) without
    virtual memory: the same fallback, so small requests keep the small pool's 2 MiB
    segments. ``page_reuse:True`` alone keeps its rule (no effect without expandable
    segments) on either kind of device, and warns nothing."""
    novm, vm = _sim(False), _sim(True)
    mn, mv = backends.device_module(novm), backends.device_module(vm)
    acc.memory.set_allocator_settings("expandable_segments:True,page_reuse:True")
    x = acc.empty((10,), device=f"{novm}:0")
    assert len(_fallbacks(recorded, novm)) == 1
    assert _kinds(mn) == [("small", False)]
    y = acc.empty((10,), device=f"{vm}:0")               # page_reuse: a large-pool page
    assert _kinds(mv) == [("large", True)]
    del x, y
    for m in (mn, mv):
        m.empty_cache()
    acc.memory.set_allocator_settings("expandable_segments:False,page_reuse:True")
    x, y = acc.empty((10,), device=f"{novm}:0"), acc.empty((10,), device=f"{vm}:0")
    assert _kinds(mn) == _kinds(mv) == [("small", False)]
    assert len(_fallbacks(recorded, novm)) == 1 and not _fallbacks(recorded, vm)
    del x, y


# ---------------------------------------------------------------------- private pools

def test_mempools_and_graph_pools_on_a_backend_without_vm(
        recorded: list[warnings.WarningMessage]) -> None:
    """A MemPool's and a captured graph's private pools of a device without virtual memory
    take ordinary segments too (a backend with graphs: the cpu backend declaring no vm)."""
    backends.register("s38cpunovm", lambda: _NoVmCpu(name="s38cpunovm"))
    m = backends.device_module("s38cpunovm")
    d = "s38cpunovm:0"
    x = acc.zeros(4, device=d)
    acc.memory.set_allocator_settings("expandable_segments:True")
    assert len(_fallbacks(recorded, "s38cpunovm")) == 1
    pool = m.MemPool()
    with m.use_mem_pool(pool):
        y = acc.empty((3 * MiB,), dtype="uint8", device=d)
    assert [s["is_expandable"] for s in pool.snapshot()] == [False]
    g = m.CUDAGraph()
    with m.graph(g):
        z = acc.empty((5 * MiB,), dtype="uint8", device=d)
        x.fill_(1.0)
    graph_segments = [s for s in m.memory_snapshot() if s["segment_pool_id"] == g.pool()]
    assert graph_segments and not any(s["is_expandable"] for s in graph_segments)
    assert not any(s["is_expandable"] for s in m.memory_snapshot())
    assert len(_fallbacks(recorded, "s38cpunovm")) == 1
    del z
    g.reset()
    del g, y, pool, x


# ---------------------------------------------------------------------- OOM message, info

def test_oom_message_does_not_advise_expandable_segments_without_vm() -> None:
    """PyTorch's OOM message ends by advising ``expandable_segments:True``; on a device
    without virtual memory (asked for or not) that advice cannot help and is left out."""
    novm, vm = _sim(False, capacity=64 * MiB), _sim(True, capacity=64 * MiB)
    for name, advised in ((novm, False), (vm, True)):
        with pytest.raises(OutOfMemoryError) as ei:
            acc.empty((100 * MiB,), dtype="uint8", device=f"{name}:0")
        assert ("expandable_segments:True to avoid fragmentation" in str(ei.value)) is advised
    with fresh_fallback_warnings(), pytest.warns(UserWarning, match=EXPANDABLE_FALLBACK):
        acc.memory.set_allocator_settings("expandable_segments:True")
    with pytest.raises(OutOfMemoryError) as ei:
        acc.empty((100 * MiB,), dtype="uint8", device=f"{novm}:0")
    # (the advice it gets instead is checked in test_memory_leftovers_s39.py)
    assert "expandable_segments:True to avoid fragmentation" not in str(ei.value)


def test_accelrt_info_notes_the_fallback_and_passes() -> None:
    """``accelrt info`` under ``expandable_segments:True``: the self-check of a device
    without virtual memory passes (it failed with the ValueError before), with a note in
    place of the warning on stderr; a device with virtual memory has no note."""
    backends.register("s38infonovm", lambda: _NoVmCpu(name="s38infonovm"))
    vm = _sim(True)
    acc.memory.set_allocator_settings("expandable_segments:True")
    with fresh_fallback_warnings(), warnings.catch_warnings():
        warnings.simplefilter("error")          # the warning must not escape the check
        info = cli.collect_info(self_check=True, backends=["s38infonovm"])
    assert info["ok"], info
    (d,) = info["backends"][0]["devices"]
    assert d["notes"] == [("expandable_segments:True is set, but this device has no virtual "
                           "memory: its caching allocator uses ordinary segments")]
    text = cli.format_info(info)
    assert "  s38infonovm:0 " in text
    assert "\n      note: expandable_segments:True is set, but this device" in text
    assert "self-check PASS" in text
    other = cli.collect_info(self_check=False, backends=[vm])
    assert all("notes" not in d for b in other["backends"] for d in b["devices"])


def test_tune_replays_a_fallback_snapshot_with_ordinary_segments() -> None:
    # a snapshot taken under expandable_segments:True on a device without virtual memory
    # records the string as given and expandable_segments False (ordinary segments were
    # used): tune and replay took the string and replayed it as expandable
    from accelrt.memory.tools._tune import recorded_setting
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,page_reuse:True,"
                "max_split_size_mb:64", "expandable_segments": False}
    assert recorded_setting(settings) == "max_split_size_mb:64"
    settings["expandable_segments"] = True
    assert recorded_setting(settings) == ("expandable_segments:True,page_reuse:True,"
                                          "max_split_size_mb:64")
