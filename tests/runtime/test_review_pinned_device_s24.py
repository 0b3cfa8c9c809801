"""Review of pinned host memory and device selection with hostile inputs and odd orders:
``acc.pin_memory`` / ``acc.is_pinned`` / factories' ``pin_memory=True`` on non-contiguous,
read-only, empty, 0-d, object and structured arrays, pinning twice, ``is_pinned`` of
non-arrays; ``host_memory_stats`` keys against torch 2.14's ``torch.cuda.host_memory_stats``,
resets while blocks are live, ``empty_host_cache`` while a queued non-blocking copy reads a
block; device indices of every type (bool, numpy integers, int subclasses, including ones whose
comparisons lie, negative, out of range, strings) through ``set_device_index``,
``device_index``, ``acc.device`` and a device module's ``set_device``/``device``/
``device_of``; nested device contexts left by exceptions; threads each with their own current
device."""

from __future__ import annotations

import gc
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers import run_in_thread
from helpers.gates import Gate
from helpers.registry import module_backends

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend

NAME = "rvpin24"      # three simulated devices, each stream on a worker thread
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({NAME: lambda: CpuBackend(num_devices=3, async_streams=True,
                                                    name=NAME)})

# torch 2.14 torch.cuda.host_memory_stats() (docstring and torch/csrc/cuda/Module.cpp)
_TORCH_HOST_KEYS = sorted(
    [f"{s}.{m}" for s in ("allocations", "allocated_bytes", "active_requests", "active_bytes")
     for m in ("current", "peak", "allocated", "freed")]
    + [f"{t}.{m}" for t in ("host_alloc_time", "host_free_time")
       for m in ("total", "max", "min", "count", "avg")]
    + ["num_host_alloc", "num_host_free"])


@pytest.fixture
def be() -> Iterator[str]:
    """NAME as the current accelerator, device 0 current, its host pool emptied."""
    prev = acc.current_accelerator()
    acc.set_current_accelerator(NAME)
    acc.set_device_index(0)
    gc.collect()
    acc.memory.empty_host_cache()
    try:
        yield NAME
    finally:
        for i in range(3):
            acc.synchronize(f"{NAME}:{i}")
        gc.collect()
        acc.memory.empty_host_cache()
        acc.set_device_index(0)
        acc.set_current_accelerator(prev.type if prev is not None else "cpu")


def _current(stats: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in stats.items() if k.endswith(".current")}


# ---------------------------------------------------------------------- pin_memory / is_pinned

def test_pinning_odd_arrays_copies_them_contiguous_and_pinned(be: str) -> None:
    base = np.arange(24.0).reshape(4, 6)
    ro = np.arange(5, dtype=np.int16)
    ro.flags.writeable = False
    structured = np.zeros(3, dtype=[("a", "<f4"), ("b", "<i8")])
    for a in (base.T, base[::-2, 1::3], ro, np.array(7.5), structured,
              np.array(["ab", "c"]), np.broadcast_to(np.arange(3), (4, 3)),
              np.array(["2020-01-01"], dtype="M8[D]")):
        p = acc.pin_memory(a)
        assert acc.is_pinned(p) and acc.is_pinned(p, device=be)
        assert p.flags.c_contiguous and p.flags.writeable
        assert p.shape == a.shape and p.dtype == a.dtype and (p == a).all()
        assert not acc.is_pinned(a)


def test_pinning_an_empty_array_gives_an_ordinary_one(be: str) -> None:
    for shape in ((0,), (3, 0), (0, 0, 2)):
        p = acc.pin_memory(np.empty(shape))
        assert p.shape == shape and not acc.is_pinned(p)
        f = acc.zeros(shape, pin_memory=True)
        assert isinstance(f, np.ndarray) and f.shape == shape and not acc.is_pinned(f)


def test_object_arrays_cannot_be_pinned(be: str) -> None:
    for a in (np.array([1, None], dtype=object), np.zeros(2, dtype=[("o", "O")])):
        with pytest.raises(TypeError, match="Python objects"):
            acc.pin_memory(a)
    with pytest.raises(TypeError, match="dtype object is not supported"):
        acc.empty(2, dtype=object, pin_memory=True)


def test_pinning_twice_returns_the_pinned_array_or_view_itself(be: str) -> None:
    p = acc.pin_memory(np.arange(8.0))
    v = p[::-2]
    assert acc.pin_memory(p) is p and acc.pin_memory(v) is v      # already pinned: itself
    assert acc.is_pinned(v) and acc.is_pinned(p.reshape(2, 4).T)
    assert acc.is_pinned(np.frombuffer(p, dtype=np.uint8))          # same memory
    assert not acc.is_pinned(np.frombuffer(p.tobytes()))            # a copy
    q = acc.pin_memory(p.copy())
    assert q is not p and q.ctypes.data != p.ctypes.data


def test_is_pinned_and_pin_memory_refuse_non_arrays(be: str) -> None:
    for x in ([1.0], None, 3, np.float64(1.0), memoryview(b"ab")):
        with pytest.raises(TypeError, match="is_pinned"):
            acc.is_pinned(x)
        with pytest.raises(TypeError, match="pin_memory"):
            acc.pin_memory(x)  # type: ignore[arg-type]
    a = acc.zeros(2, device=f"{be}:0")
    assert acc.is_pinned(a) is False
    with pytest.raises(TypeError, match="cannot pin 'accelrt.Array'"):
        acc.pin_memory(a)  # type: ignore[arg-type]


def test_pin_memory_device_argument_of_every_type(be: str) -> None:
    x = np.ones(3)
    assert acc.is_pinned(acc.pin_memory(x, device=2), device=be)
    assert acc.is_pinned(acc.pin_memory(x, device=acc.device(be, 1)), device=f"{be}:1")
    assert not acc.is_pinned(acc.pin_memory(x, device=be), device="cpu")
    for bad, exc in ((True, TypeError), (np.int64(0), TypeError), (1.0, TypeError),
                     (-1, ValueError), (3, IndexError), (f"{be}:3", IndexError),
                     ("nosuchbackend", acc.BackendUnavailableError)):
        with pytest.raises(exc):
            acc.pin_memory(x, device=bad)  # type: ignore[arg-type]
    for flag in (1, "yes"):      # None is False, as PyTorch's Optional[bool]
        with pytest.raises(TypeError, match="pin_memory must be a bool"):
            acc.empty(2, pin_memory=flag)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Only dense CPU tensors can be pinned"):
        acc.empty(2, pin_memory=True, device=f"{be}:0")


# ---------------------------------------------------------------------- host statistics

def test_host_stats_keys_are_torchs_flat_and_nested(be: str) -> None:
    p = acc.pin_memory(np.ones(100))
    flat = acc.memory.host_memory_stats()
    assert list(flat) == _TORCH_HOST_KEYS
    assert list(backends.device_module(be).host_memory_stats()) == _TORCH_HOST_KEYS
    nested = backends.device_module(be).host_memory_stats_as_nested_dict()
    assert nested["num_host_alloc"] == flat["num_host_alloc"]
    assert nested["active_bytes"]["current"] == flat["active_bytes.current"] >= p.nbytes
    assert set(nested["host_alloc_time"]) == {"total", "max", "min", "count", "avg"}


def test_resets_while_blocks_are_live_keep_current_and_count_on(be: str) -> None:
    p = acc.pin_memory(np.ones(1000))                # 8000 bytes -> one 8192-byte block
    q = acc.pin_memory(np.ones(10))
    before = _current(dict(acc.memory.host_memory_stats()))
    acc.memory.reset_peak_host_memory_stats()
    acc.memory.reset_accumulated_host_memory_stats()
    s = dict(acc.memory.host_memory_stats())
    assert _current(s) == before                     # resets never touch current
    assert s["active_requests.peak"] == s["active_requests.current"] >= 2
    assert s["active_requests.allocated"] == s["num_host_alloc"] == 0
    assert s["host_alloc_time.count"] == 0
    del p
    gc.collect()
    s = dict(acc.memory.host_memory_stats())
    assert s["active_requests.freed"] == 1 and s["active_bytes.freed"] == 8192
    assert s["active_requests.current"] == before["active_requests.current"] - 1
    acc.memory.empty_host_cache()
    s = dict(acc.memory.host_memory_stats())
    assert s["num_host_free"] >= 1 and s["allocated_bytes.freed"] >= 8192
    assert s["allocated_bytes.peak"] >= s["allocated_bytes.current"] >= q.nbytes
    assert acc.is_pinned(q)


def test_empty_host_cache_while_a_queued_copy_reads_a_block(be: str) -> None:
    dev = f"{be}:1"
    a = acc.empty(256, dtype="float64", device=dev)
    p = acc.pin_memory(np.full(512, 3.0))
    first = p.ctypes.data
    with Gate() as gate:
        backends.get_backend(be).launch_host_func(1, gate, acc.current_stream(dev).stream_id)
        a.copy_(p[128:384], non_blocking=True)       # a view: the block is recorded
        acc.memory.empty_host_cache()                # live: nothing released
        assert acc.is_pinned(p)
        del p
        gc.collect()
        acc.memory.empty_host_cache()                # pending on the stream: not released
        s = dict(acc.memory.host_memory_stats())
        assert s["active_requests.current"] == s["allocations.current"] == 1
        acc.memory.reset_peak_host_memory_stats()
        acc.memory.reset_accumulated_host_memory_stats()
        r = acc.pin_memory(np.zeros(512))
        assert r.ctypes.data != first                # not reused while the copy is queued
        del r
        gate.open()
    acc.synchronize(dev)
    assert (a.numpy() == 3.0).all()
    gc.collect()
    acc.memory.empty_host_cache()
    s = dict(acc.memory.host_memory_stats())
    assert s["active_requests.current"] == s["allocations.current"] == 0


def test_pinning_from_threads(be: str) -> None:
    seen: list[bool] = []

    def work() -> None:
        for _ in range(50):
            p = acc.pin_memory(np.ones(64))
            seen.append(acc.is_pinned(p) and acc.is_pinned(p[::3]))
            del p

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert len(seen) == 200 and all(seen)
    assert acc.memory.host_memory_stats()["active_requests.current"] == 0


# ---------------------------------------------------------------------- device indices

class _MyInt(int):
    pass


class _LyingInt(int):
    """An int subclass whose comparisons lie: accelrt reads an int subclass by its value
    (``_plain_int``), as PyTorch's C++ does, whatever its operators say."""

    def __lt__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return True


class _Index:
    def __index__(self) -> int:
        return 1


def _setters(be: str) -> list[Any]:
    mod = backends.device_module(be)

    def ctx(cls: Any) -> Any:
        def enter(v: object) -> int:
            with cls(v):
                return acc.current_device_index()
        return enter

    def set_(fn: Any) -> Any:
        def call(v: object) -> int:
            fn(v)
            return acc.current_device_index()
        return call

    return [set_(acc.set_device_index), set_(mod.set_device), ctx(mod.device)]


def test_device_index_of_every_type(be: str) -> None:
    for setter in _setters(be):
        for good, want in ((1, 1), (_MyInt(2), 2), (f"{be}:2", 2), (acc.device(be, 1), 1),
                           (-1, 0), (-5, 0)):
            acc.set_device_index(0)
            assert setter(good) == want, (setter, good)
        for bad, exc in ((True, TypeError), (False, TypeError), (np.int64(1), TypeError),
                         (np.bool_(True), TypeError), (1.0, TypeError), (_Index(), TypeError),
                         (np.array(1), TypeError), (3, IndexError), (2**70, IndexError),
                         (f"{be}:3", IndexError), ("1", ValueError), (f"{be}:-1", ValueError),
                         ("", ValueError), ("cpu:0", ValueError)):
            acc.set_device_index(0)
            with pytest.raises(exc):
                setter(bad)
            assert acc.current_device_index() == 0, (setter, bad)
    for no_index in (None, be, acc.device(be)):
        with pytest.raises(ValueError, match="with a specified index"):
            acc.set_device_index(no_index)


def test_device_index_context_of_every_type(be: str) -> None:
    # numpy integers and __index__ objects are ints, as torch's binding takes them (s25)
    for good, want in ((2, 2), (_MyInt(1), 1), (None, 0), (-1, 0), (np.int64(1), 1),
                       (_Index(), 1)):
        with acc.device_index(good):  # type: ignore[arg-type]
            assert acc.current_device_index() == want
        assert acc.current_device_index() == 0
    for bad in (True, 1.0, "1", f"{be}:1", acc.device(be, 1)):
        with pytest.raises(TypeError, match="device_index"):
            acc.device_index(bad)  # type: ignore[arg-type]
    ctx = acc.device_index(3)
    with pytest.raises(IndexError), ctx:
        pass
    assert acc.current_device_index() == 0


def test_int_subclass_with_lying_comparisons_is_read_by_its_value(be: str) -> None:
    for setter in _setters(be):
        for v, exc in ((_LyingInt(99), IndexError), (_LyingInt(3), IndexError)):
            acc.set_device_index(0)
            with pytest.raises(exc):
                setter(v)
            assert acc.current_device_index() == 0, setter
        acc.set_device_index(0)
        assert setter(_LyingInt(-1)) == 0           # negative: a no-op
        assert setter(_LyingInt(2)) == 2
    acc.set_device_index(0)
    with pytest.raises(IndexError), acc.device_index(_LyingInt(99)):
        pass
    with pytest.raises(IndexError):
        acc.pin_memory(np.ones(1), device=_LyingInt(99))
    with pytest.raises(ValueError, match="must not be negative"):
        acc.device(be, _LyingInt(-1))
    with pytest.raises(ValueError, match="must not be negative"):
        acc.pin_memory(np.ones(1), device=_LyingInt(-1))
    assert acc.device(be, _LyingInt(2)).index == 2


def test_deprecated_aliases_warn_and_check_like_the_new_names(be: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.set_device_idx(2)
        assert acc.current_device_idx() == 2
        with pytest.raises(TypeError):
            acc.set_device_idx(True)
        with pytest.raises(IndexError):
            acc.set_device_idx(5)
    assert acc.current_device_index() == 2
    assert [w.category for w in caught] == [FutureWarning] * 4


def test_nested_contexts_left_by_exceptions_restore_each_level(be: str) -> None:
    mod = backends.device_module(be)
    with pytest.raises(KeyError):
        with acc.device_index(1):
            with mod.device(2):
                with acc.device_index(None):
                    raise KeyError("inner")
    assert acc.current_device_index() == 0
    with acc.device_index(1):
        try:
            with mod.device(2):
                acc.set_device_index(0)       # set inside: the exit still restores
                raise RuntimeError
        except RuntimeError:
            pass
        assert acc.current_device_index() == 1
    assert acc.current_device_index() == 0
    ctx = acc.device_index(2)
    with ctx:
        with acc.device_index(1), ctx:        # the same object entered again
            assert acc.current_device_index() == 2
        assert acc.current_device_index() == 2
    assert acc.current_device_index() == 0
    x = acc.empty(2, device=f"{be}:2")
    with pytest.raises(ZeroDivisionError), mod.device_of(x):
        assert acc.current_device_index() == 2
        1 // 0  # noqa: B018
    assert acc.current_device_index() == 0
    with mod.device_of(np.ones(2)):               # not an Array: a no-op, as a CPU tensor
        assert acc.current_device_index() == 0


def test_each_thread_has_its_own_current_device(be: str) -> None:
    acc.set_device_index(2)
    barrier = threading.Barrier(3)
    got: dict[int, tuple[int, int, int]] = {}

    def work(i: int) -> None:
        start = acc.current_device_index()        # a new thread starts on device 0
        acc.set_device_index(i)
        barrier.wait()
        with acc.device_index((i + 1) % 3):
            barrier.wait()
            inner = acc.current_device_index()
        got[i] = (start, inner, acc.current_device_index())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {i: (0, (i + 1) % 3, i) for i in range(3)}
    assert acc.current_device_index() == 2

    def raising() -> int:
        with pytest.raises(ValueError), acc.device_index(1):
            raise ValueError
        return acc.current_device_index()

    assert run_in_thread(raising) == 0
    assert acc.current_device_index() == 2
