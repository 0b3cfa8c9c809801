"""Session 41: the memory tooling API against torch 2.15, with hostile inputs.

torch 2.15 (``/tmp/t215``, a CUDA build run without a driver) checks its arguments in its
bindings before it needs a GPU, so each rule here was observed on it, not guessed:

1. ``torch.cuda.memory._allocation_traceback(data_ptr)`` and ``_annotate_tensor(tensor,
   metadata)`` (new in 2.15) were missing from the device modules' ``memory``.
2. ``caching_allocator_enable(1)`` is torch's ``RuntimeError`` ("cudaCachingAllocator_enable
   expects a bool, but got int"); accelrt raised a plain ``TypeError``.
3. ``memory_snapshot(include_traces=1)`` / ``MemPool.snapshot(include_traces=None)`` are
   torch's ``RuntimeError`` ("include_traces must be a boolean"); a plain ``TypeError`` here.
4. ``memory_snapshot(mempool_id=...)``: torch reads ``mempool_id[0]`` and ``[1]`` (a 3-tuple's
   first two items), each an int or numpy integer in the int64 range (a negative one names
   no pool; outside the range is its ``ValueError``; a bool, float or str its
   ``RuntimeError`` "mempool_id elements must be integers"). accelrt refused 3-tuples,
   negative ids and numpy integers with ``TypeError`` and took ``(0, 2**64 - 1)``.
5. ``_record_memory_history(max_entries=...)`` (a size_t binding) and the legacy form's
   ``trace_alloc_max_entries`` (an int64) take a numpy integer, a bool or an object with
   ``__index__``; accelrt refused them.
6. The bool parameters of ``_record_memory_history`` (both forms) and ``MemPool`` read
   ``None`` and numbers by their truth and refuse a str or a list, as pybind11's bool binding:
   accelrt took ``clear_history="no"`` (as True) and refused ``MemPool(use_on_oom=1)``,
   ``compile_context=None`` and ``record_context=0``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import accelrt as acc
from accelrt import memory

MiB = 1 << 20
m = acc.cpu.memory


@pytest.fixture
def history() -> Iterator[None]:
    """History recording is switched off again after the test, whatever it set."""
    try:
        yield
    finally:
        m._record_memory_history(None)


def _trace() -> list[dict[str, Any]]:
    traces = m._snapshot()["device_traces"]
    return traces[0] if traces else []


# ------------------------------------------------------------- 1. traceback and annotations

def test_allocation_traceback_gives_the_recorded_stack(history: None) -> None:
    before = acc.zeros(256, device="cpu:0")
    m._record_memory_history(context="state")
    x = acc.zeros(256, device="cpu:0")
    frames = m._allocation_traceback(x.data_ptr())
    assert frames is not None and frames[0]["name"] == (
        "test_allocation_traceback_gives_the_recorded_stack")
    assert set(frames[0]) == {"filename", "line", "name"}
    # allocated before recording, an address inside an allocation, no allocation: None
    assert m._allocation_traceback(before.data_ptr()) is None
    assert m._allocation_traceback(x.data_ptr() + 8) is None
    assert m._allocation_traceback(0) is None
    assert m._allocation_traceback(-1) is None       # torch: a pointer no block has
    ptr = x.data_ptr()
    del x
    assert m._allocation_traceback(ptr) is None      # freed: no live allocation
    m._record_memory_history(None)
    y = acc.zeros(256, device="cpu:0")
    assert m._allocation_traceback(y.data_ptr()) is None   # not recorded
    del before, y


def test_allocation_traceback_argument_checks() -> None:
    with pytest.raises(TypeError, match="an integer is required"):
        m._allocation_traceback(np.int64(5))      # torch's raw PyLong conversion refuses it
    with pytest.raises(TypeError, match="an integer is required"):
        m._allocation_traceback(None)              # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        m._allocation_traceback(2 ** 70)
    assert m._allocation_traceback(True) is None   # (a bool is an int to CPython's API)


def test_annotate_tensor_records_an_annotate_entry(history: None) -> None:
    x = acc.zeros(1000, device="cpu:0")
    m._annotate_tensor(x, "ignored: history is off")    # no effect, no error
    m._record_memory_history("all", context="alloc")
    m._annotate_tensor(x, "packed for backward")
    e = _trace()[-1]
    assert e["action"] == "annotate" and e["addr"] == x.data_ptr()
    assert e["user_metadata"] == "packed for backward"
    assert e["frames"][0]["name"] == "test_annotate_tensor_records_an_annotate_entry"
    assert not any(t.get("user_metadata") == "ignored: history is off" for t in _trace())
    m._record_memory_history("all", context="alloc", skip_actions=["annotate"])
    m._annotate_tensor(x, "skipped")
    assert [e["user_metadata"] for e in _trace() if e["action"] == "annotate"] == [
        "packed for backward"]
    m._record_memory_history("all", context="state", clear_history=True)
    m._annotate_tensor(x, "no stack below context='alloc'")
    assert "frames" not in _trace()[-1]
    del x


def test_annotate_tensor_argument_checks(history: None) -> None:
    m._record_memory_history()
    x = acc.zeros(16, device="cpu:0")
    with pytest.raises(AttributeError, match="takes an accelrt.Array, got int"):
        m._annotate_tensor(5, "x")          # torch: 'int' object has no attribute 'is_cuda'
    with pytest.raises(TypeError, match="metadata must be a str, got int"):
        m._annotate_tensor(x, 5)            # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="no live allocation found at pointer 0 "):
        m._annotate_tensor(acc.zeros(0, device="cpu:0"), "empty")
    with pytest.raises(RuntimeError, match="no live allocation found at pointer 0x"):
        m._annotate_tensor(acc.asarray(np.zeros(4), device="cpu:0", copy=False), "borrowed")
    if acc.opencl.is_available():
        y = acc.zeros(4, device="opencl:0")
        with pytest.raises(ValueError, match="expected a cpu array, got device opencl:0"):
            m._annotate_tensor(y, "x")
    del x


# ------------------------------------------------------------------- 2. and 3. RuntimeErrors

@pytest.mark.parametrize("bad", [1, None, np.True_])
def test_caching_allocator_enable_refuses_a_non_bool_as_torch(bad: object) -> None:
    with pytest.raises(RuntimeError, match="cudaCachingAllocator_enable expects a bool"):
        acc.cpu.caching_allocator_enable(bad)      # type: ignore[arg-type]
    with pytest.raises(TypeError, match="but got"):
        m.caching_allocator_enable(bad)            # type: ignore[arg-type]
    assert acc.cpu.memory_allocated() >= 0


@pytest.mark.parametrize("bad", [1, None, "yes"])
def test_include_traces_must_be_a_boolean_as_torch(bad: object) -> None:
    pool = memory.MemPool()
    for call in (lambda: memory.memory_snapshot(include_traces=bad),
                 lambda: acc.cpu.memory_snapshot((0, 0), bad),
                 lambda: pool.snapshot(bad)):
        with pytest.raises(RuntimeError, match="include_traces must be a boolean"):
            call()


# ------------------------------------------------------------------------- 4. mempool_id

def test_mempool_id_is_read_as_torch_reads_it() -> None:
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, "cpu:0"):
        p = memory.caching_allocator_alloc(MiB, "cpu:0")
    try:
        mine = [pool.id]
        for pid in (pool.id, (*pool.id, "ignored"), (np.int64(pool.id[0]),
                                                    np.uint32(pool.id[1]))):
            assert [s["segment_pool_id"] for s in memory.memory_snapshot(pid)] == mine
            assert [s["segment_pool_id"] for s in acc.cpu.memory_snapshot(pid)] == mine
        for nobody in ((-1, -1), (0, -pool.id[1]), (-2 ** 63, 0), (2 ** 63 - 1, 0)):
            assert memory.memory_snapshot(nobody) == []
            assert acc.cpu.memory.memory_snapshot(nobody) == []
    finally:
        memory.caching_allocator_delete(p)


@pytest.mark.parametrize("pid", [(2 ** 63, 0), (0, 2 ** 64 - 1), (-2 ** 63 - 1, 0)])
def test_mempool_id_outside_int64_is_a_value_error(pid: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="out of range"):
        memory.memory_snapshot(pid)
    with pytest.raises(ValueError, match="out of range"):
        acc.cpu.memory_snapshot(pid)


@pytest.mark.parametrize("pid", [(True, 0), (0, 1.0), "ab", (None, 0)])
def test_mempool_id_items_must_be_integers(pid: object) -> None:
    with pytest.raises(RuntimeError, match="mempool_id elements must be integers"):
        memory.memory_snapshot(pid)                 # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mempool_id elements must be integers"):
        acc.cpu.memory_snapshot(pid)                # type: ignore[arg-type]


def test_a_short_mempool_id_is_an_index_error_too() -> None:
    with pytest.raises(IndexError, match="mempool_id must be a pair of ints"):
        memory.memory_snapshot((1,))                # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mempool_id must be a pair of ints"):
        memory.memory_snapshot(5)                   # type: ignore[arg-type]


# --------------------------------------------------------------------------- 5. max_entries

class _Index:
    def __index__(self) -> int:
        return 2


@pytest.mark.parametrize("n", [np.int64(2), np.uint8(2), _Index()])
def test_max_entries_takes_what_a_size_t_binding_takes(history: None, n: Any) -> None:
    m._record_memory_history("all", max_entries=n)
    for _ in range(3):
        memory.caching_allocator_delete(memory.caching_allocator_alloc(512, "cpu:0"))
    assert len(_trace()) == 2                           # a ring of two entries
    memory.record_memory_history("all", max_entries=n, device="cpu:0")
    m._record_memory_history("all", max_entries=True)   # a bool is an int: one entry
    memory.caching_allocator_delete(memory.caching_allocator_alloc(512, "cpu:0"))
    assert len(_trace()) == 1


@pytest.mark.parametrize("bad", [1.0, "2", None, [2], -1, 2 ** 64])
def test_max_entries_still_refuses_what_the_binding_refuses(history: None, bad: Any) -> None:
    with pytest.raises(TypeError, match="max_entries must be an int"):
        m._record_memory_history("all", max_entries=bad)


def test_legacy_trace_alloc_max_entries_takes_a_numpy_integer(history: None) -> None:
    m._record_memory_history(True, trace_alloc_record_context=True,
                             trace_alloc_max_entries=np.int64(3))
    for _ in range(3):
        memory.caching_allocator_delete(memory.caching_allocator_alloc(512, "cpu:0"))
    assert len(_trace()) == 3
    m._record_memory_history(False)


# ------------------------------------------------------------------------ 6. bool bindings

def test_history_flags_are_read_as_bool_bindings_read_them(history: None) -> None:
    x = acc.zeros(16, device="cpu:0")
    # None and 0 are false, numbers by their truth: taken as torch's binding takes them
    m._record_memory_history("all", compile_context=None, global_record_annotations=0,
                             record_pinned_host_memory=None, record_cuda=1,
                             clear_history=None)
    m._record_memory_history(True, record_context=0, trace_alloc_record_context=1,
                             record_context_cpp=None, clear_history=np.False_)
    assert _trace() == [] or all("frames" in e for e in _trace())
    m._record_memory_history("all")
    del x
    assert _trace()
    m._record_memory_history("all", clear_history=np.True_)   # (a number's truth: cleared)
    assert _trace() == []
    for kwargs in ({"clear_history": "no"}, {"compile_context": "False"},
                   {"record_cuda": [True]}, {"record_pinned_host_memory": {}}):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            m._record_memory_history("all", **kwargs)
    for kwargs in ({"record_context": "yes"}, {"clear_history": []}):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            m._record_memory_history(True, **kwargs)
    with pytest.raises(ValueError, match="compile_context=True is not supported"):
        m._record_memory_history("all", compile_context=1)


def test_mempool_flags_are_read_as_bool_bindings_read_them() -> None:
    whole = memory.MemPool(no_split=1)           # type: ignore[arg-type]
    split = memory.MemPool(no_split=None)        # type: ignore[arg-type]
    ptrs = []
    for pool in (whole, split):
        with memory.use_mem_pool(pool, "cpu:0"):
            ptrs += [memory.caching_allocator_alloc(1000, "cpu:0") for _ in range(2)]
    try:
        assert len(whole.snapshot()) == 2 and len(split.snapshot()) == 1
    finally:
        for p in ptrs:
            memory.caching_allocator_delete(p)
    memory.MemPool(use_on_oom=np.True_)
    memory.MemPool(use_on_oom=0.5)               # type: ignore[arg-type]
    for bad in ("yes", [1], np.array([True, False])):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            memory.MemPool(use_on_oom=bad)       # type: ignore[arg-type]


# ----------------------------------------------- 7. _get_device_index(device): an index needed

@pytest.mark.parametrize("device", ["cpu", acc.device("cpu")])
def test_functions_reading_get_device_index_need_an_index(device: object) -> None:
    """torch 2.15's ``caching_allocator_alloc``, ``set/get_per_process_memory_fraction`` and
    ``use_mem_pool`` read ``_get_device_index(device)`` without ``optional``: "cuda" is its
    ``ValueError`` ("Expected a torch.device with a specified index or an integer, but
    got:cuda"); accelrt took it for the current device."""
    words = "Expected a cpu device with a specified index or an integer, but got:cpu"
    calls = [lambda: acc.cpu.caching_allocator_alloc(512, device),
             lambda: acc.cpu.set_per_process_memory_fraction(0.5, device),
             lambda: acc.cpu.get_per_process_memory_fraction(device),
             lambda: acc.cpu.use_mem_pool(memory.MemPool(), device).__enter__()]
    for call in calls:
        with pytest.raises(ValueError, match=words):
            call()
    assert acc.cpu.get_per_process_memory_fraction("cpu:0") == 1.0
    assert acc.cpu.memory_allocated(device) >= 0      # (optional=True there: the current one)
    p = acc.cpu.caching_allocator_alloc(512, None)
    acc.cpu.caching_allocator_delete(p)


# ------------------------------------------------- 8. str bindings: bytes and str subclasses

class _OddStr(str):
    def __str__(self) -> str:
        return "not me"


def test_metadata_takes_what_a_std_string_binding_takes(history: None) -> None:
    """torch 2.15's ``_cuda_setMemoryMetadata``/``_cuda_annotateMemory`` take ``bytes`` (UTF-8)
    as a ``std::string``; accelrt refused them. A str subclass is read by its value."""
    try:
        m._set_memory_metadata(b"step 1")
        assert m._get_memory_metadata() == "step 1"
        m._set_memory_metadata(_OddStr("step 2"))
        got = m._get_memory_metadata()
        assert got == "step 2" and type(got) is str
        with pytest.raises(UnicodeDecodeError):
            m._set_memory_metadata(b"\xff")
        assert m._get_memory_metadata() == "step 2"
    finally:
        m._set_memory_metadata("")
    m._record_memory_history()
    x = acc.zeros(16, device="cpu:0")
    m._annotate_tensor(x, b"bytes note")
    m._annotate_tensor(x, _OddStr("odd note"))
    notes = [e["user_metadata"] for e in _trace() if e["action"] == "annotate"]
    assert notes == ["bytes note", "odd note"] and all(type(n) is str for n in notes)
    del x


# ------------------------------------------------ 9. a backend that cannot be used (no GPU)

def test_memory_tooling_without_a_device_follows_torch(tmp_path: Any) -> None:
    """torch 2.15's CUDA build without a driver answers ``memory_snapshot()`` (``[]``),
    ``_snapshot()`` (empty lists), ``_dump_snapshot``, ``get_allocator_backend()``
    (``"native"``), ``_memory_metadata_supported()``, ``host_memory_stats()`` (``{}``) and
    ``reset_peak_host_memory_stats()``; accelrt raised ``BackendUnavailableError``.
    ``_get_memory_metadata`` still raises (torch: a CUDA error)."""
    import pickle

    from accelrt.testing import SimulatedBackend

    class _NoDevice(SimulatedBackend):
        name = "revmemnone"

        @classmethod
        def unavailable_reason(cls) -> str | None:
            return "no device here (test)"

    acc.backends.register("revmemnone", _NoDevice)
    try:
        dm = acc.backends.device_module("revmemnone")
        assert dm.memory_snapshot() == [] and dm.memory.memory_snapshot((0, 1), False) == []
        with pytest.raises(RuntimeError, match="include_traces must be a boolean"):
            dm.memory_snapshot(None, 1)
        snap = dm.memory._snapshot()
        assert snap["segments"] == [] and snap["device_traces"] == []
        assert snap["allocator_settings"]["expandable_segments"] is False
        dm.memory._dump_snapshot(str(tmp_path / "s.pickle"))
        assert pickle.loads((tmp_path / "s.pickle").read_bytes())["segments"] == []
        assert dm.get_allocator_backend() == "native"
        assert dm.memory._memory_metadata_supported() is True
        assert dm.host_memory_stats() == {} and dm.host_memory_stats_as_nested_dict() == {}
        dm.reset_peak_host_memory_stats()
        dm.reset_accumulated_host_memory_stats()
        with pytest.raises(acc.BackendUnavailableError, match="no device here"):
            dm.memory._get_memory_metadata()
        with pytest.raises(acc.BackendUnavailableError, match="no device here"):
            dm.memory._set_memory_metadata("x")
    finally:
        acc.backends.unregister("revmemnone")


@pytest.mark.skipif(acc.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_list_gpu_processes_without_a_driver_is_torchs_message() -> None:
    """torch 2.15's ``list_gpu_processes`` returns "cuda driver can't be loaded, is cuda
    enabled?" when NVML finds no driver (its other monitoring functions raise); accelrt
    raised ``BackendUnavailableError``."""
    assert acc.cuda.list_gpu_processes() == "cuda driver can't be loaded, is cuda enabled?"
    assert acc.cuda.memory.list_gpu_processes(0) == acc.cuda.list_gpu_processes()
