"""Memory-module differences from torch 2.15 left by session 38 (session 39).

1. The OOM message of a device without virtual memory: PyTorch's ends by advising
   ``expandable_segments:True`` (c10/cuda/CUDACachingAllocator.cpp: "If reserved but
   unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
   to avoid fragmentation"), which cannot help there; accelrt gave no advice at all. It now
   advises ``max_split_size_mb`` (PyTorch's advice before expandable segments) and says why.
2. The expandable-segments fallback warning under ``-W error``: one ``set_allocator_settings``
   raised for the first backend without virtual memory and skipped the others, so a later,
   unrelated call raised again for the next one. Now every backend's warning is issued and the
   first raised once (PyTorch's is ``TORCH_WARN_ONCE``: one raise).
3. ``torch.cuda.memory._get_current_allocator()`` and ``_CUDAAllocator`` were missing from the
   device modules' ``memory``; ``change_current_allocator`` refused what the former returns.
4. PyTorch's OOM observers (``torch._C._cuda_attach_out_of_memory_observer``, public as
   ``torch.mtia.attach_out_of_memory_observer``; ``torch.cuda.memory`` has no wrapper) had no
   public counterpart: ``acc.<device module>.attach_out_of_memory_observer``.
"""

from __future__ import annotations

import itertools
import pickle
import sys
import warnings
from typing import Any

import pytest

import accelrt as acc
from accelrt import OutOfMemoryError, backends
from accelrt.backends.cpu import CpuBackend
from accelrt.memory import PluggableAllocator
from accelrt.memory._allocator import peek_allocator
from accelrt.memory._config import EXPANDABLE_FALLBACK
from accelrt.memory._oom import DOCS_POINTER
from accelrt.testing import SimulatedBackend
from tests.helpers.cpu_script import run_cpu_script
from tests.helpers.expandable import fresh_fallback_warnings

MiB = 1 << 20
_names = itertools.count()


def _sim(vm: bool, **kw: Any) -> str:
    """A fresh registered simulated backend (with or without virtual memory); its name."""
    name = f"s39{'vm' if vm else 'novm'}{next(_names)}"
    backends.register(name, lambda: SimulatedBackend(name=name, vm=vm, **kw))
    return name


def _cpu(**kw: Any) -> str:
    """A fresh registered cpu backend (``CpuBackend`` keywords); its name."""
    name = f"s39cpu{next(_names)}"
    backends.register(name, lambda: CpuBackend(name=name, **kw))
    return name


def _oom_message(device: str, size: int) -> str:
    with pytest.raises(OutOfMemoryError) as ei:
        acc.empty((size,), dtype="uint8", device=device)
    return str(ei.value)


# ---------------------------------------------------------------------- 1. the OOM advice

TORCH_ADVICE = "expandable_segments:True to avoid fragmentation"


def test_oom_message_without_vm_advises_max_split_size() -> None:
    """Before: nothing after "reserved by accelrt but unallocated." on such a device. Now
    PyTorch's sentence with ``max_split_size_mb`` in place of the option that cannot help,
    and why; a smaller one once it is set. A device with virtual memory keeps PyTorch's."""
    novm, vm = _sim(False, capacity=64 * MiB), _sim(True, capacity=64 * MiB)
    msg = _oom_message(f"{novm}:0", 100 * MiB)
    assert msg.endswith(
        "is reserved by accelrt but unallocated. If reserved but unallocated memory is large "
        "try setting ACCELRT_ALLOC_CONF=max_split_size_mb:<MiB> to avoid fragmentation (this "
        "device has no virtual memory, so expandable_segments:True cannot help)." + DOCS_POINTER), msg
    assert TORCH_ADVICE in _oom_message(f"{vm}:0", 100 * MiB)
    old = acc.memory.get_allocator_settings()
    try:
        with fresh_fallback_warnings(), pytest.warns(UserWarning, match=EXPANDABLE_FALLBACK):
            acc.memory.set_allocator_settings("expandable_segments:True,max_split_size_mb:40")
        msg = _oom_message(f"{novm}:0", 100 * MiB)
    finally:
        acc.memory.set_allocator_settings(old or "expandable_segments:False")
    assert TORCH_ADVICE not in msg
    assert msg.endswith(
        "try a smaller ACCELRT_ALLOC_CONF max_split_size_mb (now 40) to avoid fragmentation "
        "(this device has no virtual memory, so expandable_segments:True, which is set, falls "
        "back to ordinary segments here)." + DOCS_POINTER), msg


# ---------------------------------------------------------------------- 2. -W error

def test_fallback_warnings_as_errors_raise_once_for_every_backend() -> None:
    """Two backends without virtual memory open, ``expandable_segments:True`` under
    ``simplefilter("error")``. Before: the first backend's warning raised and the second's
    was never issued, so the next, unrelated ``set_allocator_settings`` raised again (for the
    second). Now the one call raises (the first backend's, the second's as a note), both
    backends count as warned, every allocator took the settings, and later calls and
    allocations run (no second raise, as PyTorch's TORCH_WARN_ONCE)."""
    a, b = _sim(False), _sim(False)
    keep = [acc.empty((10,), device=f"{a}:0"), acc.empty((10,), device=f"{b}:0")]
    old = acc.memory.get_allocator_settings()
    try:
        with fresh_fallback_warnings(), warnings.catch_warnings():
            # (only these two backends' warnings are errors: another open allocator without
            # virtual memory, an earlier test's, may warn too)
            warnings.filterwarnings("ignore", EXPANDABLE_FALLBACK, UserWarning)
            warnings.filterwarnings("error", f"{EXPANDABLE_FALLBACK}: the '({a}|{b})' backend",
                                    UserWarning)
            with pytest.raises(UserWarning, match=EXPANDABLE_FALLBACK) as ei:
                acc.memory.set_allocator_settings("expandable_segments:True")
            named = [n for n in (a, b) if f"the '{n}' backend" in str(ei.value)]
            assert len(named) == 1
            if sys.version_info >= (3, 11):
                other = b if named == [a] else a
                assert any(f"the '{other}' backend" in n for n in ei.value.__notes__)
            for name in (a, b):   # settings applied everywhere; ordinary segments
                alloc = peek_allocator(name, 0)
                assert alloc is not None
                assert alloc.config.expandable_segments and not alloc.expandable
            acc.memory.set_allocator_settings("expandable_segments:True")   # no raise
            later = [acc.empty((3 * MiB,), dtype="uint8", device=f"{n}:0") for n in (a, b)]
            kinds = [sorted(s["is_expandable"] for s in backends.device_module(n)
                            .memory_snapshot()) for n in (a, b)]
            assert kinds == [[False, False], [False, False]]
    finally:
        acc.memory.set_allocator_settings(old or "expandable_segments:False")
    del keep, later


def test_fallback_warning_as_error_at_the_first_allocation_leaves_a_working_allocator(
        ) -> None:
    """Under ``-W error`` the first allocation on a backend without virtual memory raises the
    warning (its allocator was just made, with the settings); the next allocation works,
    with an ordinary segment, and does not raise again."""
    old = acc.memory.get_allocator_settings()
    name = _sim(False)
    try:
        with fresh_fallback_warnings():
            with warnings.catch_warnings():   # (an open allocator without vm may warn)
                warnings.filterwarnings("ignore", EXPANDABLE_FALLBACK, UserWarning)
                acc.memory.set_allocator_settings("expandable_segments:True")
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with pytest.raises(UserWarning, match=f"the '{name}' backend"):
                    acc.empty((10,), device=f"{name}:0")
                alloc = peek_allocator(name, 0)
                assert alloc is not None and alloc.config.expandable_segments
                assert alloc.memory_allocated() == 0   # nothing was allocated for it
                x = acc.empty((3 * MiB,), dtype="uint8", device=f"{name}:0")
                segs = backends.device_module(name).memory_snapshot()
                assert [s["is_expandable"] for s in segs] == [False]
    finally:
        acc.memory.set_allocator_settings(old or "expandable_segments:False")
    del x


# ---------------------------------------------------------------------- 3. current allocator

def test_get_current_allocator_native_and_switch_to_it() -> None:
    """``_get_current_allocator()``: torch's wrapper (a new one each call) of one allocator
    object per backend; ``change_current_allocator(_get_current_allocator())`` before the
    first allocation keeps the caching allocator (a pattern of real code that switches to
    ``backend:cudaMallocAsync``), and after it raises torch's RuntimeError. Before: no
    ``_get_current_allocator`` (AttributeError), and a TypeError from the switch."""
    name = _cpu()
    m = backends.device_module(name).memory
    cur = m._get_current_allocator()
    assert isinstance(cur, m._CUDAAllocator)
    assert cur is not m._get_current_allocator()                    # torch: a new wrapper
    assert cur.allocator() is m._get_current_allocator().allocator()  # of the same object
    assert cur._allocator is cur.allocator()
    assert repr(cur.allocator()) == f"NativeAllocator('{name}')"
    m.change_current_allocator(m._get_current_allocator())
    assert m.get_allocator_backend() == "native"
    x = acc.empty((4,), device=f"{name}:0")
    assert peek_allocator(name, 0) is not None
    with pytest.raises(RuntimeError, match="Can't swap an already initialized allocator"):
        m.change_current_allocator(m._get_current_allocator())
    del x


def test_get_current_allocator_gives_the_swapped_pluggable_allocator() -> None:
    """After ``change_current_allocator(plug)`` the current allocator is ``plug`` (torch's
    ``_cuda_getAllocator`` returns the swapped one); ``PluggableAllocator`` is a
    ``_CUDAAllocator``, as torch's ``CUDAPluggableAllocator``."""
    name = _cpu()
    m = backends.device_module(name).memory
    plug = PluggableAllocator.from_callables(lambda *_: 0, lambda *_: None)
    assert isinstance(plug, m._CUDAAllocator)
    m.change_current_allocator(plug)
    assert m._get_current_allocator().allocator() is plug
    assert m.get_allocator_backend() == "pluggable"


def test_current_allocator_bad_input() -> None:
    """Bad input gets a clear exception naming what to pass."""
    a, b = _cpu(), _cpu()
    ma, mb = backends.device_module(a).memory, backends.device_module(b).memory
    with pytest.raises(ValueError, match=f"the '{a}' backend's own allocator"):
        mb.change_current_allocator(ma._get_current_allocator())
    with pytest.raises(TypeError, match="takes an accelrt.memory.PluggableAllocator"):
        mb.change_current_allocator(object())
    with pytest.raises(TypeError, match=r"_CUDAAllocator\(\) takes an allocator object"):
        mb._CUDAAllocator(42)
    assert mb.get_allocator_backend() == "native"


def test_device_memory_modules_have_torchs_private_allocator_names() -> None:
    """torch 2.15's ``torch.cuda.memory._get_current_allocator``, ``_CUDAAllocator`` and
    ``_set_allocator_settings`` on every device module's ``memory`` (the signatures are
    checked against torch's dump by tests/package/test_torch_signatures.py)."""
    for m in (acc.cpu.memory, acc.cuda.memory):
        for attr in ("_get_current_allocator", "_CUDAAllocator", "_set_allocator_settings"):
            assert hasattr(m, attr), (m.__name__, attr)


# ---------------------------------------------------------------------- 4. OOM observers

def test_oom_observer_gets_torchs_arguments_on_every_device() -> None:
    """``attach_out_of_memory_observer`` before any allocation: an OOM on either device
    calls it with (device, alloc, device_allocated, device_free) as PyTorch's observers are
    called (the allocation tried; the per-process limit, else the capacity; the device's
    free memory), before the error is raised and without the allocator's lock (it takes a
    snapshot, as real code does). Before: no such function."""
    name = _cpu(num_devices=2, memory_limit="64MiB")
    dm = backends.device_module(name)
    seen: list[tuple[int, ...]] = []
    snaps: list[dict[str, Any]] = []

    def observer(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        seen.append((device, alloc, device_allocated, device_free))
        snaps.append(dm.memory._snapshot())

    dm.attach_out_of_memory_observer(observer)
    keep = acc.empty((20 * MiB,), dtype="uint8", device=f"{name}:1")
    free1 = dm.mem_get_info(1)[0]
    with pytest.raises(OutOfMemoryError):
        acc.empty((50 * MiB,), dtype="uint8", device=f"{name}:1")
    assert seen == [(1, 50 * MiB, 64 * MiB, free1)]
    assert snaps[0]["segments"]            # the live segment, snapshotted from the observer
    dm.set_per_process_memory_fraction(0.5, 0)
    with pytest.raises(OutOfMemoryError):
        acc.empty((40 * MiB,), dtype="uint8", device=f"{name}:0")
    assert seen[1] == (0, 40 * MiB, 32 * MiB, dm.mem_get_info(0)[0])
    del keep


def test_oom_observer_refused_where_the_caching_allocator_is_replaced() -> None:
    """A pluggable allocator has no observers: torch's "does not yet support
    attachOutOfMemoryObserver"; a non-callable observer is a TypeError."""
    name = _cpu()
    dm = backends.device_module(name)
    with pytest.raises(TypeError, match="observer must be callable"):
        dm.attach_out_of_memory_observer(None)
    dm.memory.change_current_allocator(
        PluggableAllocator.from_callables(lambda *_: 0, lambda *_: None))
    with pytest.raises(RuntimeError,
                       match="PluggableAllocator does not yet support attachOutOfMemoryObserver"):
        dm.attach_out_of_memory_observer(lambda *a: None)
    assert hasattr(acc.cuda, "attach_out_of_memory_observer")


def test_oom_observer_dumps_a_snapshot_on_the_cpu_backend(tmp_path: Any) -> None:
    """Megatron's OOM hook, ported (``torch._C._cuda_attach_out_of_memory_observer`` ->
    ``acc.cpu.attach_out_of_memory_observer``), in a fresh interpreter with a small
    ``ACCELRT_CPU_MEMORY``: the observer dumps a snapshot that records the OOM."""
    path = tmp_path / "oom_snapshot.pickle"
    run_cpu_script(f"""
        import accelrt as acc
        acc.cpu.memory._record_memory_history(max_entries=1000)
        calls = []
        def oom_observer(device, alloc, device_alloc, device_free):
            calls.append((device, alloc, device_alloc, device_free))
            acc.cpu.memory._dump_snapshot({str(path)!r})
        acc.cpu.attach_out_of_memory_observer(oom_observer)
        x = acc.empty((8 << 20,), dtype="uint8", device="cpu")
        try:
            acc.empty((32 << 20,), dtype="uint8", device="cpu")
        except acc.OutOfMemoryError:
            pass
        else:
            raise AssertionError("no OOM")
        assert calls == [(0, 32 << 20, 32 << 20, acc.cpu.mem_get_info()[0])], calls
    """, ACCELRT_CPU_MEMORY="32MiB")
    snap = pickle.loads(path.read_bytes())
    assert [e["action"] for e in snap["device_traces"][0]][-1] == "oom"
