"""PyTorch's own memory tests (test/test_cuda.py: the caching allocator tests of ``TestCuda``,
``TestCudaMallocAsync`` and ``TestMemPool``), each rewritten against accelrt.

Every test names the PyTorch test it mirrors. ``torch.cuda`` becomes a device module
(``acc.cpu``, or the module of a fresh :class:`~accelrt.testing.SimulatedBackend`),
``torch.accelerator`` becomes ``accelrt``, tensors become ``acc.Array``s (or pinned numpy
arrays). Tests that allocate a large share of a device run on the simulated backend only,
whose devices hold no data; the ones that read values back run on ``cpu``.

The tests that test/test_cuda_expandable_segments.py re-runs with ``expandable_segments:True``
run twice here (the ``expandable`` fixture or parameter: ids ``plain`` and ``expandable``), with
what the setting changes in their expectations stated in the test.
tests/memory/test_torch_suite_expandable_s36.py has the tests that exist only with expandable
segments.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import random
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import backends
from accelrt.testing import SimulatedBackend
from tests.helpers.expandable import switch_on_or_skip

MiB = 1 << 20
_names = itertools.count()


def _simulated(capacity: int = 1 << 30, auto_complete: bool = True, devices: int = 2) -> str:
    name = f"torchsuite{next(_names)}"
    backends.register(name, lambda: SimulatedBackend(name=name, capacity=capacity,
                                                     device_count=devices,
                                                     auto_complete=auto_complete))
    return name


@pytest.fixture(params=["cpu", "simulated"])
def name(request: pytest.FixtureRequest) -> str:
    """The backend of a test run on both: ``cpu``, or a fresh 1 GiB simulated backend."""
    return "cpu" if request.param == "cpu" else _simulated()


@pytest.fixture
def sim() -> str:
    """A fresh simulated backend of two 1 GiB devices."""
    return _simulated()


@pytest.fixture(params=[False, True], ids=["plain", "expandable"])
def expandable(request: pytest.FixtureRequest, name: str) -> Iterator[bool]:
    """The allocator setting of a test run both as test_cuda.py runs it (``False``) and as
    test_cuda_expandable_segments.py re-runs it (``True``: ``expandable_segments:True`` for the
    test; the suite's autouse fixture restores the settings). ``name``'s cache is emptied
    before and after."""
    m = backends.device_module(name)
    _settled()
    m.empty_cache()
    if request.param:
        switch_on_or_skip(m)
    yield request.param
    _settled()
    m.empty_cache()


# The same two settings for the tests that make their own simulated backend (not ``name``): a
# parameter of the fixture's name, which pytest then passes instead of the fixture.
both_settings = pytest.mark.parametrize("expandable", [False, True], ids=["plain", "expandable"])


def _sim(expandable: bool, **kw: Any) -> tuple[str, Any]:
    """A fresh simulated backend (``_simulated(**kw)``) and its device module, with expandable
    segments on if ``expandable``."""
    n = _simulated(**kw)
    m = backends.device_module(n)
    if expandable:
        switch_on_or_skip(m)
    return n, m


# What a segment's creation and release are called in a trace: expandable segments map and
# unmap pages (torch's segment_map/segment_unmap), ordinary ones are allocated and freed.
SEGMENT_ACTIONS = {False: ("segment_alloc", "segment_free"),
                   True: ("segment_map", "segment_unmap")}


@pytest.fixture
def fraction_restored(name: str) -> Iterator[Any]:
    """The device module of ``name``; its device 0's memory fraction is put back after, and
    expandable segments switched off (an empty settings string, which the suite's autouse
    fixture restores, leaves ``expandable_segments`` as it was, as PyTorch's does)."""
    m = backends.device_module(name)
    orig = m.get_per_process_memory_fraction(0)
    yield m
    m.set_allocator_settings("expandable_segments:False")
    m.set_per_process_memory_fraction(orig, 0)
    gc.collect()
    m.empty_cache()


def _settled() -> None:
    gc.collect()


# ----------------------------------------------------------------- statistics and raw memory

def test_memory_allocation(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py test_memory_allocation (and its expandable run):
    ``caching_allocator_alloc`` counts in ``memory_allocated`` and
    ``caching_allocator_delete`` takes it back out."""
    m = backends.device_module(name)
    prev = m.memory_allocated()
    ptr = m.caching_allocator_alloc(1)
    try:
        assert m.memory_allocated() > prev
    finally:
        m.caching_allocator_delete(ptr)
    assert m.memory_allocated() == prev


def test_memory_stats(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py test_memory_stats (through ``torch.accelerator``'s functions; and its
    expandable run): peaks equal currents after a reset, a 256-float array is 1 KiB of active
    memory, freed by ``del``, and a peak reset brings the maxima back."""
    d = f"{name}:0"
    acc.reset_peak_memory_stats(d)
    acc.reset_accumulated_memory_stats(d)
    assert acc.memory_allocated(d) == acc.max_memory_allocated(d)
    assert acc.memory_reserved(d) == acc.max_memory_reserved(d)
    prev_max = acc.max_memory_allocated(d), acc.max_memory_reserved(d)
    prev_active = acc.memory_stats(d).get("active_bytes.all.current", 0)   # {} before use
    tmp = acc.randn(256, device=d)
    assert acc.memory_stats(d)["active_bytes.all.current"] == prev_active + 1024
    assert acc.memory_stats(d)["active_bytes.all.freed"] == 0
    del tmp
    _settled()
    backends.device_module(name).empty_cache()
    assert acc.memory_stats(d)["active_bytes.all.current"] == prev_active
    assert acc.memory_stats(d)["active_bytes.all.freed"] == 1024
    acc.reset_peak_memory_stats(d)
    assert (acc.max_memory_allocated(d), acc.max_memory_reserved(d)) == prev_max


def test_caching_allocator_raw_alloc(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py test_cachingAllocator_raw_alloc (and its expandable run): with the
    caching allocator switched off a raw allocation adds nothing to
    ``requested_bytes.all.allocated``; switched back on it adds the size asked for. Checked
    before the test allocates anything (a fresh simulated device's allocator has not started)
    and again while an array keeps the allocator running."""
    m = backends.device_module(name)

    def requested(size: int) -> int:
        start = m.memory_stats().get("requested_bytes.all.allocated", 0)  # {} before use
        ptr = m.caching_allocator_alloc(size)
        finish = m.memory_stats()["requested_bytes.all.allocated"]
        m.caching_allocator_delete(ptr)
        return int(finish - start)

    def check() -> None:
        m.reset_accumulated_memory_stats(0)
        try:
            m.caching_allocator_enable(False)
            assert requested(MiB) == 0
        finally:
            m.caching_allocator_enable(True)
        assert requested(MiB) == MiB

    check()
    keep = acc.zeros(1, device=f"{name}:0")           # the device's allocator is running
    m.empty_cache()
    check()
    del keep


# ------------------------------------------------------------------------- out of memory

def test_out_of_memory(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py test_out_of_memory (and its expandable run): the message names the
    size asked for, a request past 1 EB says so, and the device keeps working after both
    errors. (PyTorch writes "GPU 0 has a total capacity of"; accelrt names the device,
    "Device cpu:0 has a total capacity of".)"""
    d = f"{name}:0"
    keep = acc.zeros(1024, device=d)
    with pytest.raises(acc.OutOfMemoryError,
                       match=r"Tried to allocate 800000000\.00 GiB\. Device "
                             rf"{name}:0 has a total capacity of"):
        acc.empty(1024 * 1024 * 1024 * 800000000, dtype="int8", device=d)
    with pytest.raises(RuntimeError, match="Tried to allocate more than 1EB memory"):
        acc.empty(1024 * 1024 * 1024 * 8000000000, dtype="int8", device=d)
    keep.fill_(1)
    if name == "cpu":                          # a simulated device holds no data
        assert (keep.numpy() == 1).all()
    del keep


def test_raises_oom_with_and_without_max_split_size(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py test_raises_oom (both parametrisations, and the expandable run): an
    impossible request raises ``OutOfMemoryError`` (``torch.cuda.OutOfMemoryError``), also
    with ``max_split_size_mb`` set."""
    m = backends.device_module(name)
    assert m.OutOfMemoryError is acc.OutOfMemoryError
    for setting in (False, True):
        if setting:
            m.set_allocator_settings("max_split_size_mb:1024")
            m.empty_cache()
        with pytest.raises(m.OutOfMemoryError):
            acc.empty(1024 ** 4, device=f"{name}:0")


@both_settings
def test_out_of_memory_retry(expandable: bool) -> None:
    """mirrors test_cuda.py test_out_of_memory_retry (and its expandable run): a request for
    more than half the device (PyTorch asks for half of a GPU whose context already holds some)
    fits once, not twice, and fits again once the first is freed (in an expandable segment its
    pages are reused, or unmapped and mapped again); ``empty_cache`` then releases it all."""
    sim, m = _sim(expandable)
    d = f"{sim}:0"
    m.empty_cache()
    size = int(m.get_device_properties(0).total_memory * 0.6)
    a = acc.empty(size, dtype="int8", device=d)
    with pytest.raises(acc.OutOfMemoryError, match="Tried to allocate"):
        acc.empty(size, dtype="int8", device=d)
    del a
    b = acc.empty(size, dtype="int8", device=d)
    assert m.memory_snapshot()[0]["is_expandable"] is expandable
    del b
    m.empty_cache()
    assert m.memory_reserved() == 0
    m.reset_peak_memory_stats()


@both_settings
def test_caching_allocator_record_stream_oom(expandable: bool) -> None:
    """mirrors test_cuda.py test_caching_allocator_record_stream_oom (and its expandable run):
    blocks (pages) whose reuse waits on a recorded stream are still freed by the out-of-memory
    retry, so a loop of 160 MiB allocations on a 1 GiB device keeps going."""
    name, m = _sim(expandable, auto_complete=False)
    d = f"{name}:0"
    side = m.Stream()
    with m.stream(side):
        y = acc.zeros(40 * MiB // 4, device=d)
    for _ in range(20):
        x = acc.empty(40 * MiB, device=d)              # 160 MiB
        x.record_stream(side)                          # reuse waits for `side`
        del x
    assert m.memory_stats(0)["num_alloc_retries"] > 0
    del y
    m.synchronize()
    m.empty_cache()
    assert m.memory_reserved() == 0


# ------------------------------------------------------------------ per-process fraction

def test_set_per_process_memory_fraction_errors(name: str) -> None:
    """mirrors test_cuda.py test_set_per_process_memory_fraction (its argument checks):
    an int is a ``TypeError`` ("Invalid type"), a value outside [0, 1] a ``ValueError``
    ("Invalid fraction value")."""
    m = backends.device_module(name)
    with pytest.raises(TypeError, match="Invalid type"):
        m.set_per_process_memory_fraction(1)
    for bad in (-0.1, 2.0):
        with pytest.raises(ValueError, match="Invalid fraction value"):
            m.set_per_process_memory_fraction(bad)


@pytest.mark.parametrize(("expandable", "capacity", "devices"),
                         [(False, 1 << 30, 2), (True, 32 << 30, 1)], ids=["plain", "expandable"])
def test_set_per_process_memory_fraction_limits(expandable: bool, capacity: int,
                                                devices: int) -> None:
    """mirrors test_cuda.py test_set_per_process_memory_fraction (and its expandable run): with
    half the device allowed, 49.9% fits and 50% raises out of memory; the device works on
    afterwards. With expandable segments 49.9% is mapped in 20 MiB pages: the device is then
    32 GiB, as the GPUs the test runs on, so the rounding stays under the limit."""
    sim, m = _sim(expandable, capacity=capacity, devices=devices)
    d = f"{sim}:0"
    orig = m.get_per_process_memory_fraction(0)
    m.reset_peak_memory_stats(0)
    try:
        keep = acc.zeros(1024, device=d)
        m.empty_cache()
        total = m.get_device_properties(0).total_memory
        m.set_per_process_memory_fraction(0.5, 0)
        tmp = acc.empty(int(total * 0.499) - m.max_memory_reserved(), dtype="int8", device=d)
        del tmp
        m.empty_cache()
        with pytest.raises(acc.OutOfMemoryError, match="out of memory"):
            acc.empty(int(total * 0.5), dtype="int8", device=d)
        keep.fill_(1)
        del keep
    finally:
        m.set_per_process_memory_fraction(orig, 0)


def test_get_per_process_memory_fraction(fraction_restored: Any) -> None:
    """mirrors test_cuda.py test_get_per_process_memory_fraction: what is set is read back
    (as PyTorch's, the allowed bytes over the device's: exact at 0 and 1)."""
    m = fraction_restored
    total = m.get_device_properties(0).total_memory
    for value in (1.0, 0.0):
        m.set_per_process_memory_fraction(value)
        assert m.get_per_process_memory_fraction() == value
    for value in np.random.default_rng(5).random(3):
        m.set_per_process_memory_fraction(float(value))
        assert m.get_per_process_memory_fraction() == pytest.approx(float(value), abs=1e-9)
        assert m.get_per_process_memory_fraction() == int(float(value) * total) / total


def test_max_split_expandable(fraction_restored: Any, name: str) -> None:
    """mirrors test_cuda.py test_max_split_expandable: with 120 MiB allowed, three 40 MiB
    blocks (one in an expandable segment) fill it, a fourth is out of memory, and after
    freeing them 120 MiB fits (the release of cached blocks meets an expandable one)."""
    m = fraction_restored
    d = f"{name}:0"
    _expandable_and_120_mib_or_skip(m)

    def alloc(n: int) -> acc.Array:
        return acc.empty(n * MiB, dtype="int8", device=d)

    m.set_allocator_settings("expandable_segments:False,max_split_size_mb:40")
    a = alloc(40)
    m.set_allocator_settings("expandable_segments:True,max_split_size_mb:40")
    b = alloc(40)
    m.set_allocator_settings("expandable_segments:False,max_split_size_mb:40")
    c = alloc(40)
    with pytest.raises(acc.OutOfMemoryError):
        alloc(40)
    del a, b, c
    alloc(120)


def test_garbage_collect_expandable(fraction_restored: Any, name: str) -> None:
    """mirrors test_cuda.py test_garbage_collect_expandable: garbage collection of cached
    blocks runs with an expandable segment's block in the free lists."""
    m = fraction_restored
    d = f"{name}:0"
    _expandable_and_120_mib_or_skip(m)
    m.set_allocator_settings("expandable_segments:False,garbage_collection_threshold:0.5")
    a = acc.empty(40 * MiB, dtype="int8", device=d)
    m.set_allocator_settings("expandable_segments:True,garbage_collection_threshold:0.5")
    b = acc.empty(40 * MiB, dtype="int8", device=d)
    del a, b
    acc.empty(80 * MiB, dtype="int8", device=d)


def _expandable_and_120_mib_or_skip(m: Any) -> None:
    """Skip unless ``expandable_segments:True`` can be set (then switched off again); empty
    the cache and allow 120 MiB more than is reserved (both tests' setup in test_cuda.py)."""
    switch_on_or_skip(m)
    m.set_allocator_settings("expandable_segments:False")
    m.empty_cache()
    _, total = m.mem_get_info()
    m.set_per_process_memory_fraction((120 * MiB + m.memory_reserved()) / total)


# ---------------------------------------------------------------------- allocator settings

def _power2_div(size: int, div: int) -> int:
    """The rounding of roundup_power2_divisions:``div`` (PyTorch's test computes it so)."""
    pow2 = 1 << (size - 1).bit_length()
    if pow2 == size:
        return pow2
    step, ret = pow2 // 2 // div, pow2 // 2
    while ret < size:
        ret += step
    return ret


def test_allocator_settings(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py test_allocator_settings (and its expandable run): roundup_power2_divisions
    (a single value, then the list syntax) rounds the active bytes of a request, in an
    expandable segment as in an ordinary one, while ``requested_bytes`` keeps the size asked
    for; a string without the key goes back to no rounding, and leaves expandable segments as
    they were."""
    m = backends.device_module(name)
    d = f"{name}:0"
    key, requested = "active_bytes.all.allocated", "requested_bytes.all.allocated"
    keep = acc.zeros(1, device=d)
    m.empty_cache()

    def stat(k: str) -> int:
        return int(m.memory_stats()[k])

    nbytes, nbytes_big = 21 * MiB * 4, 100 * MiB * 4
    start = stat(key)
    m.set_allocator_settings("")
    assert m.memory._snapshot()["allocator_settings"]["expandable_segments"] is expandable
    x = acc.empty(nbytes // 4, device=d)
    reg, start_req = stat(key), stat(requested)
    m.set_allocator_settings("roundup_power2_divisions:4")
    y = acc.empty(nbytes // 4, device=d)
    assert reg - start == nbytes
    assert stat(key) - reg == _power2_div(nbytes, 4)
    assert stat(requested) - start_req == nbytes

    m.set_allocator_settings("garbage_collection_threshold:0.5")
    m.set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40")
    m.empty_cache()
    start = stat(key)
    z = acc.empty(nbytes // 4, device=d)
    assert stat(key) - start == nbytes

    m.empty_cache()
    m.set_allocator_settings("garbage_collection_threshold:0.5,"
                             "roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
    start = stat(key)
    w = acc.empty(nbytes // 4, device=d)
    assert stat(key) - start == _power2_div(nbytes, 8)
    m.empty_cache()
    start = stat(key)
    v = acc.empty(nbytes_big // 4, device=d)
    assert stat(key) - start == _power2_div(nbytes_big, 2)

    m.empty_cache()
    m.set_allocator_settings("release_lock_on_cudamalloc:True")
    start = stat(key)
    w2 = acc.empty(nbytes // 4, device=d)
    assert stat(key) - start == nbytes
    assert all(s["is_expandable"] is expandable for s in m.memory_snapshot())
    del x, y, z, w, v, w2, keep


@pytest.mark.parametrize("bad", [
    "foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2",
    "release_lock_on_cudamalloc:none", "pinned_use_cuda_host_register:none",
    "pinned_num_register_threads:none", "pinned_num_register_threads:1024"])
def test_allocator_settings_refused(bad: str) -> None:
    """mirrors test_cuda.py test_allocator_settings (its ``ValueError`` cases, which torch
    2.15 raises on CPU too: checked there)."""
    with pytest.raises(ValueError):
        acc.memory.set_allocator_settings(bad)
    with pytest.raises(ValueError):
        acc.cpu.set_allocator_settings(bad)


def test_deprecated_set_allocator_settings_warns() -> None:
    """mirrors the ``torch.cuda.memory._set_allocator_settings`` calls of test_cuda.py: the
    deprecated name still applies the settings, with PyTorch's ``FutureWarning``."""
    with pytest.warns(FutureWarning, match="deprecated"):
        acc.cpu.memory._set_allocator_settings("max_split_size_mb:40")
    assert "max_split_size_mb:40" in acc.memory.get_allocator_settings()


def _run_with_conf(conf: str, code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ACCELRT_ALLOC_CONF=conf)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)


def test_allocator_backend_from_the_environment() -> None:
    """mirrors test_cuda.py test_allocator_backend: ``backend:cudaMallocAsync`` in the
    configuration variable (``ACCELRT_ALLOC_CONF`` for ``PYTORCH_ALLOC_CONF``) selects the
    stream-ordered allocator, which ``get_allocator_backend()`` names."""
    proc = _run_with_conf("max_split_size_mb:20,backend:cudaMallocAsync",
                          "import accelrt as acc; acc.cpu.init(); "
                          "print(acc.cpu.get_allocator_backend())")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "cudaMallocAsync"


def test_allocator_memory_fraction_setting() -> None:
    """mirrors test_cuda.py test_allocator_memory_fraction_setting: the configuration's
    ``per_process_memory_fraction`` is what ``get_per_process_memory_fraction`` reads; a
    value outside [0, 1] stops the process with "per_process_memory_fraction is invalid"."""
    code = "import accelrt as acc; print(acc.cpu.get_per_process_memory_fraction(0), end='')"
    for value in ("0.0", "0.5"):                  # (torch also reads 1.0; one process each)
        proc = _run_with_conf(f"per_process_memory_fraction:{value}", code)
        assert (proc.returncode, proc.stdout) == (0, value), proc.stderr
    for bad in ("1.1",):
        proc = _run_with_conf(f"per_process_memory_fraction:{bad}", code)
        assert proc.returncode != 0
        assert "per_process_memory_fraction is invalid" in proc.stderr


# -------------------------------------------------------------------- pinned host memory

def test_host_memory_stats() -> None:
    """mirrors test_cuda.py test_host_memory_stats: pinned blocks are rounded to a power of
    two (10 Ki floats -> 64 KiB, 20 Ki -> 128 KiB), counted by allocations/active requests
    and their bytes, ``num_host_alloc`` and ``host_alloc_time.count``; releasing the host
    cache while both live changes nothing."""
    m = acc.cpu
    m.init()
    _settled()
    m.empty_host_cache()
    base = dict(m.host_memory_stats())
    assert base and all(k in base for k in ("allocations.current", "num_host_alloc",
                                            "host_alloc_time.count", "active_bytes.peak"))
    m.reset_accumulated_host_memory_stats()
    m.reset_peak_host_memory_stats()
    base = dict(m.host_memory_stats())
    expected = dict(base)

    def grow(size: int) -> None:
        for prefix in ("active_requests", "allocations"):
            for suffix in ("allocated", "current"):
                expected[f"{prefix}.{suffix}"] += 1
            expected[f"{prefix}.peak"] = expected[f"{prefix}.current"]
        for prefix in ("allocated_bytes", "active_bytes"):
            for suffix in ("allocated", "current"):
                expected[f"{prefix}.{suffix}"] += size
            expected[f"{prefix}.peak"] = expected[f"{prefix}.current"]
        expected["num_host_alloc"] += 1
        expected["host_alloc_time.count"] += 1

    def check() -> None:
        stats = m.host_memory_stats()
        for k, v in expected.items():
            if not k.startswith(("host_alloc_time.", "host_free_time.")) or k.endswith(".count"):
                assert stats[k] == v, k

    assert base["allocations.current"] == 0     # nothing pinned is alive here
    t1 = acc.ones(10 * 1024, pin_memory=True)
    assert acc.is_pinned(t1)
    grow(16 * 1024 * 4)
    check()
    t2 = acc.ones(20 * 1024, pin_memory=True)
    assert acc.is_pinned(t2)
    grow(32 * 1024 * 4)
    check()
    m.empty_host_cache()
    check()
    del t1, t2
    _settled()
    m.empty_host_cache()
    m.reset_peak_host_memory_stats()
    m.reset_accumulated_host_memory_stats()
    stats = m.host_memory_stats()
    assert stats["allocations.current"] == 0 and stats["allocations.allocated"] == 0
    assert stats["num_host_alloc"] == 0 and stats["active_bytes.peak"] == 0


def test_host_memory_stats_have_every_key_once_initialised(sim: str) -> None:
    """mirrors test_cuda.py test_host_memory_stats (its first check, in a process whose CUDA
    is initialised but has pinned nothing yet): torch 2.15's ``host_memory_stats()`` is
    ``{}`` before initialisation (``host_memory_stats_as_nested_dict`` checks
    ``is_initialized()``) and has every key at 0 from then on."""
    m = backends.device_module(sim)
    assert m.host_memory_stats() == {}
    assert m.host_memory_stats_as_nested_dict() == {}
    m.init()
    stats = m.host_memory_stats()
    assert len(stats) == 28 and set(stats.values()) == {0}
    assert list(stats) == sorted(stats)
    assert m.host_memory_stats_as_nested_dict()["allocations"] == {
        "current": 0, "peak": 0, "allocated": 0, "freed": 0}
    pinned = acc.pin_memory(np.ones(4, dtype=np.float32), device=f"{sim}:0")
    assert list(m.host_memory_stats()) == list(stats)           # the same keys once used
    del pinned


def test_host_memory_stats_of_the_current_accelerator(sim: str) -> None:
    """As ``test_host_memory_stats_have_every_key_once_initialised``, through
    ``accelrt.memory.host_memory_stats`` (the current accelerator's backend)."""
    acc.set_current_accelerator(sim)
    assert acc.memory.host_memory_stats() == {}
    backends.device_module(sim).init()
    stats = acc.memory.host_memory_stats()
    assert len(stats) == 28 and set(stats.values()) == {0}


def test_caching_pinned_memory() -> None:
    """mirrors test_cuda.py test_caching_pinned_memory: a freed pinned block is handed out
    again; not while a copy from it is pending (here: behind a stream that has not run)."""
    name = _simulated(auto_complete=False)
    acc.set_current_accelerator(name)
    d = f"{name}:0"
    t = acc.pin_memory(np.array([1.0], dtype=np.float32))
    ptr = t.ctypes.data
    del t
    t = acc.pin_memory(np.array([1.0], dtype=np.float32))
    assert t.ctypes.data == ptr, "allocation not reused"
    dst = acc.empty(1, device=d)
    dst.copy_(t, non_blocking=True)                 # pending: the stream has not run
    del t
    t = acc.pin_memory(np.array([1.0], dtype=np.float32))
    assert t.ctypes.data != ptr, "allocation reused too soon"
    acc.synchronize(d)
    del t, dst


def test_pinned_memory_host_register_refused() -> None:
    """mirrors test_cuda.py test_pinned_memory_with_cudaregister and
    test_pinned_memory_empty_cache: registering host memory is a documented difference
    (docs/differences.md, "Allocator configuration"): ``pinned_use_cuda_host_register:True``
    with several register threads is refused with a ``ValueError``; the ``False`` setting
    pins as usual and the host cache empties."""
    with pytest.raises(ValueError, match="pinned_use_cuda_host_register"):
        acc.cpu.set_allocator_settings(
            "pinned_use_cuda_host_register:True,pinned_num_register_threads:8")
    acc.cpu.set_allocator_settings("pinned_use_cuda_host_register:False")
    t = acc.ones(1024 * 1024, pin_memory=True)
    assert acc.is_pinned(t)
    del t
    acc.cpu.empty_host_cache()
    assert not acc.is_pinned(np.ones(20))


# ------------------------------------------------------------------------- record_stream

@both_settings
def test_record_stream(expandable: bool) -> None:
    """mirrors test_cuda.py test_record_stream (and its expandable run): a block freed after
    ``record_stream`` is not handed out on its stream while the recorded stream may still use
    it, and is (the same address) once that stream has finished."""
    name, m = _sim(expandable, auto_complete=False)
    d = f"{name}:0"
    side, main = m.Stream(), m.current_stream()
    with m.stream(side):
        tmp = acc.empty(4, device=d)
        ptr = tmp.data_ptr()
    main.wait_stream(side)
    tmp.record_stream(main)
    del tmp
    with m.stream(side):
        tmp2 = acc.empty(4, device=d)
        assert tmp2.data_ptr() != ptr, "allocation reused too soon"
    main.synchronize()
    with m.stream(side):
        tmp3 = acc.empty(4, device=d)
        assert tmp3.data_ptr() == ptr, "allocation not reused"
    del tmp2, tmp3
    m.synchronize()


@both_settings
def test_record_stream_delays_reuse_on_its_own_stream(expandable: bool) -> None:
    """mirrors test_cuda.py test_record_stream_on_shifted_view (and its expandable run; accelrt
    arrays have no views, so the array itself records): a block allocated on one stream and
    recorded on a busy second one is not reused on the first after it is freed."""
    name, m = _sim(expandable, auto_complete=False)
    d = f"{name}:0"
    alloc_stream, busy = m.Stream(), m.Stream()
    with m.stream(alloc_stream):
        base = acc.empty(10, device=d)
    sim_backend = backends.get_backend(name)
    assert isinstance(sim_backend, SimulatedBackend)
    sim_backend.launch_work(busy.native_handle, 0)                  # `busy` has queued work
    base.record_stream(busy)
    ptr = base.data_ptr()
    del base
    alloc_stream.synchronize()
    with m.stream(alloc_stream):
        again = acc.empty(10, device=d)
    assert again.data_ptr() != ptr
    m.synchronize()
    del again


# ----------------------------------------------------------------------------- snapshots

def _clear_history(m: Any) -> None:
    m.memory._record_memory_history(None)


def test_memory_snapshot(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py TestCudaMallocAsync.test_memory_snapshot (and its run with
    expandable segments): with ``_record_memory_history("state", stacks="python")`` every
    segment has ``frames`` and is expandable as the setting says and tiled by its blocks, the
    block of a 311x411 float array has its address and a stack starting in this file, and
    after ``empty_cache`` the last trace entry releases a segment (``segment_free``, or
    ``segment_unmap`` with expandable segments: torch accepts either there), and the trace
    has none of the other kind's segment actions."""
    m = backends.device_module(name)
    d = f"{name}:0"
    try:
        m.memory._record_memory_history("state", stacks="python")
        acc.rand(2 * 311, 411, device=d)
        unused = acc.rand(310, 410, device=d)
        x = acc.rand(311, 411, device=d)
        tensors = [acc.rand(128, device=d) for _ in range(300)]
        rng = random.Random(0)
        while tensors:
            del tensors[rng.randint(0, len(tensors) - 1)]
        acc.rand(128 * 5, device=d)
        found = False
        snap = m.memory._snapshot()
        assert snap["allocator_settings"]["expandable_segments"] is expandable
        for seg in snap["segments"]:
            assert seg["is_expandable"] is expandable and "frames" in seg
            addr = seg["address"]
            for b in seg["blocks"]:
                assert b["address"] == addr
                addr += b["size"]
                if b["requested_size"] == 311 * 411 * 4:
                    assert "test_torch_suite_memory_s35" in b["frames"][0]["filename"]
                    assert b["address"] == x.data_ptr()
                    found = True
            assert addr == seg["address"] + seg["total_size"]
        assert found
        del unused, x
        m.empty_cache()
        trace = m.memory._snapshot()["device_traces"][0]
        assert trace[-1]["action"] == SEGMENT_ACTIONS[expandable][1]
        assert not set(SEGMENT_ACTIONS[not expandable]) & {e["action"] for e in trace}
    finally:
        _clear_history(m)


def test_memory_plots_free_stack(name: str) -> None:
    """mirrors test_cuda.py TestCudaMallocAsync.test_memory_plots_free_stack: the freeing
    function is in the snapshot only with ``context="all"``, the allocating one unless the
    context is ``"state"``."""
    m = backends.device_module(name)
    d = f"{name}:0"
    # PyTorch's test process holds live small tensors, so the 3x4 array lands in a segment
    # that exists already; a new segment would record the allocating stack as its "frames"
    # (PyTorch's context_when_segment_allocated, as accelrt's) even at context="state".
    keep = acc.empty(1, device=d)
    for context in ("alloc", "all", "state"):
        holder: list[acc.Array] = []

        def thealloc() -> None:
            holder.append(acc.rand(3, 4, device=d))

        def thefree() -> None:
            holder.clear()

        try:
            m.memory._record_memory_history(context=context)
            thealloc()
            thefree()
            text = json.dumps(m.memory._snapshot())
            assert ("thefree" in text) == (context == "all")
            assert ("thealloc" in text) == (context != "state")
        finally:
            _clear_history(m)
    del keep


def test_memory_plots_history_context(name: str) -> None:
    """mirrors test_cuda.py TestCudaMallocAsync.test_memory_plots_history_context: turning
    the context off and on again between allocations records the stacks of the allocations
    made with it only."""
    m = backends.device_module(name)
    d = f"{name}:0"
    held: list[acc.Array] = []

    def should_capture1() -> None:
        held.append(acc.rand(4, 4, device=d))

    def should_not_capture() -> None:
        held.append(acc.rand(3, 4, device=d))

    def should_capture2() -> None:
        held.append(acc.rand(4, 4, device=d))

    try:
        m.empty_cache()
        m.memory._record_memory_history(context="all", stacks="python")
        should_capture1()
        m.memory._record_memory_history(context=None)
        should_not_capture()
        m.memory._record_memory_history(context="all", stacks="python")
        should_capture2()
        text = json.dumps(m.memory._snapshot())
        assert "should_capture1" in text and "should_capture2" in text
        assert "should_not_capture" not in text
    finally:
        _clear_history(m)
        held.clear()


def test_memory_plots_metadata(name: str) -> None:
    """mirrors test_cuda.py TestCudaMallocAsync.test_memory_plots_metadata: every trace
    entry recorded while ``_set_memory_metadata`` holds a string carries it."""
    m = backends.device_module(name)
    d = f"{name}:0"
    for context in ("alloc", "all", "state"):
        try:
            m.empty_cache()
            m.memory._set_memory_metadata("metadata test")
            m.memory._record_memory_history(context=context)
            x = acc.rand(3, 4, device=d)
            del x
            m.empty_cache()
            m.memory._set_memory_metadata("")
            trace = m.memory._snapshot()["device_traces"][0]
            assert trace
            assert all(e["user_metadata"] == "metadata test" for e in trace)
        finally:
            m.memory._set_memory_metadata("")
            _clear_history(m)


@pytest.mark.parametrize("skip", [["free_requested"], ["free_requested", "free_completed"],
                                  ["alloc"], ["segment_alloc", "segment_free"], [], None,
                                  ["segment_map", "segment_unmap"], ["segment_map"],
                                  ["alloc", "free_completed"]])
def test_memory_snapshot_skip_actions(name: str, expandable: bool,
                                      skip: list[str] | None) -> None:
    """mirrors test_cuda.py TestCudaMallocAsync.test_memory_snapshot_skip_actions (with the
    segment actions of both settings): the actions named in ``skip_actions`` are not recorded,
    every other one an allocation, its free and ``empty_cache`` make is."""
    m = backends.device_module(name)
    d = f"{name}:0"
    try:
        m.memory._record_memory_history(context="all", stacks="python", skip_actions=skip)
        x = acc.rand(128, 128, device=d)
        del x
        m.synchronize()
        m.empty_cache()
        traces = [t for t in m.memory._snapshot()["device_traces"] if t]
        actions = {e["action"] for e in traces[0]}
        assert not actions & set(skip or [])
        made, released = SEGMENT_ACTIONS[expandable]
        every = {made, "alloc", "free_requested", "free_completed", released}
        assert actions == every - set(skip or [])
    finally:
        _clear_history(m)


# -------------------------------------------------------------------------------- MemPool

def test_mempool_id(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_id: ``graph_pool_handle()``,
    ``MemPool().id`` and ``generate_graph_pool_handle()`` all give ``(0, n)`` ids (the
    first value is set only by a capture that makes its own pool), from one counter that
    each call advances."""
    m = backends.device_module(name)
    pool1 = m.graph_pool_handle()
    pool2 = m.MemPool().id
    pool3 = acc.generate_graph_pool_handle()
    assert (pool1[0] == 0) == (pool2[0] == 0) == (pool3[0] == 0) is True
    assert pool2[1] - pool1[1] > 0
    assert pool3[1] - pool2[1] > 0


def test_graph_capture_without_pool_sets_the_first_value() -> None:
    """The other half of torch's ``MempoolId_t`` convention that test_mempool_id relies on:
    a capture given no pool makes ``(n, 0)``."""
    m = acc.cpu
    x = acc.zeros(4, device="cpu:0")
    g = m.CUDAGraph()
    with m.graph(g):
        x.fill_(1.0)
    assert g.pool()[0] > 0 and g.pool()[1] == 0
    g.reset()
    del g, x


def test_mempool_empty_cache(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_empty_cache (and its expandable run):
    after a pool and its array die, the snapshot still has segments (the default pool's
    cache)."""
    m = backends.device_module(name)
    d = f"{name}:0"
    pool = m.MemPool()
    x = acc.empty(1024, 1024, device=d)
    with m.use_mem_pool(pool):
        y = acc.empty(1024, 1024, device=d)
    del y, x, pool
    assert len(m.memory._snapshot()["segments"]) > 0
    m.empty_cache()


def test_mempool_segments_and_use_count(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_with_allocator (its parts without a
    C++ allocator): a pool has no allocator by default; ``use_mem_pool`` holds a reference
    while it is active; two 1 MiB arrays share the pool's 2 MiB segment, a third needs a
    second segment."""
    m = backends.device_module(name)
    d = f"{name}:0"
    pool = m.MemPool()
    assert pool.allocator is None
    assert pool.use_count() == 1
    nelem_1mb = MiB // 4
    with m.use_mem_pool(pool):
        out0 = acc.randn(nelem_1mb, device=d)
        assert pool.use_count() == 2
    assert pool.use_count() == 1
    with m.use_mem_pool(pool):
        assert len(pool.snapshot()) == 1
        out1 = acc.randn(nelem_1mb, device=d)
        assert len(pool.snapshot()) == 1
        out2 = acc.randn(nelem_1mb, device=d)
        assert len(pool.snapshot()) == 2
    assert len(pool.snapshot()) == 2
    del out0, out1, out2, pool


def test_mempool_no_split(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_no_split: a ``no_split`` pool makes a
    segment per 4 MiB request, each of one block, and so fewer blocks than a splitting
    pool."""
    m = backends.device_module(name)
    d = f"{name}:0"
    m.empty_cache()
    split, no_split = m.MemPool(), m.MemPool(no_split=True)
    n = 4 * MiB // 4
    held = []
    for _ in range(2):
        with m.use_mem_pool(split):
            held.append(acc.randn(n, device=d))
        with m.use_mem_pool(no_split):
            held.append(acc.randn(n, device=d))
    assert len(no_split.snapshot()) > len(split.snapshot())
    assert all(len(seg["blocks"]) == 1 for seg in no_split.snapshot())
    blocks = [sum(len(seg["blocks"]) for seg in p.snapshot()) for p in (no_split, split)]
    assert blocks[0] < blocks[1]
    del held, split, no_split


def test_mempool_multithread(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_multithread: pools made at once by four
    threads have four ids."""
    m = backends.device_module(name)
    ids: list[tuple[int, int]] = []
    threads = [threading.Thread(target=lambda: ids.append(m.MemPool().id)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 4


def test_mempool_emptycache_multithread(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_emptycache_multithread: ``empty_cache``
    inside ``use_mem_pool`` releases nothing of the pool: each keeps its one segment."""
    m = backends.device_module(name)
    d = f"{name}:0"

    def work(pool: Any) -> None:
        with m.use_mem_pool(pool):
            x = acc.randn(4, device=d)
            del x
            m.empty_cache()

    pools = [m.MemPool() for _ in range(4)]
    threads = [threading.Thread(target=work, args=(p,)) for p in pools]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [len(p.snapshot()) for p in pools] == [1, 1, 1, 1]
    del pools


def test_nested_mempool(name: str) -> None:
    """mirrors test_cuda.py TestMemPool.test_nested_mempool: nested ``use_mem_pool``
    blocks route each 20 MiB allocation to the innermost pool (2, 2 and 1 segments)."""
    m = backends.device_module(name)
    d = f"{name}:0"
    m.empty_cache()
    pools = [m.MemPool() for _ in range(3)]
    data: list[acc.Array] = []

    def allocate() -> None:
        data.append(acc.empty(20 * MiB // 4, device=d))

    with m.use_mem_pool(pools[0]):
        allocate()
        with m.use_mem_pool(pools[1]):
            allocate()
            with m.use_mem_pool(pools[2]):
                allocate()
            allocate()
        allocate()
    assert [len(m.memory.memory_snapshot(p.id)) for p in pools] == [2, 2, 1]
    data.clear()
    del pools


def test_mempool_ctx_multithread(name: str, expandable: bool) -> None:
    """mirrors test_cuda.py TestMemPool.test_mempool_ctx_multithread (and its expandable run):
    ``use_mem_pool`` is the calling thread's: another thread's allocation meanwhile goes to the
    default pool. Two segments, expandable as the setting says: the default pool's with 2 MiB
    active (both 1 MiB arrays), the pool's with none."""
    m = backends.device_module(name)
    d = f"{name}:0"
    assert m.memory._snapshot()["segments"] == []
    nelem = MiB
    trigger, done = threading.Event(), threading.Event()
    seen: list[list[dict[str, Any]]] = []

    def main_thread() -> None:
        pool = m.MemPool()
        out1 = acc.empty(nelem, dtype="int8", device=d)
        with m.use_mem_pool(pool):
            out = acc.empty(nelem, dtype="int8", device=d)
            del out
            trigger.set()
            done.wait(10)
        del out1

    def side_thread() -> None:
        trigger.wait(10)
        out = acc.empty(nelem, dtype="int8", device=d)
        seen.append(m.memory._snapshot()["segments"])
        done.set()
        del out

    threads = [threading.Thread(target=main_thread), threading.Thread(target=side_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    assert len(seen) == 1 and len(seen[0]) == 2
    active: dict[tuple[int, int], int] = defaultdict(int)
    for seg in seen[0]:
        assert seg["is_expandable"] is expandable
        active[tuple(seg["segment_pool_id"])] += seg["active_size"]
    assert active[(0, 0)] == 2 * MiB
    assert [v for k, v in active.items() if k != (0, 0)] == [0]
    _settled()
    m.empty_cache()
