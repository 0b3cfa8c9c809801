"""Findings of a hostile-input sweep of the public API (session 27): every public callable of
``accelrt``, ``accelrt.cpu``, ``accelrt.memory``, ``accelrt.random``, ``accelrt.comm`` and the
methods of its classes, called with a palette of hostile arguments, each call in a forked
child. Each test failed before its fix. The torch expectations were observed by running torch
2.14.1 (a CUDA build on a machine without a GPU, so the CPU side and the argument parser run)
and are written here as literals (CI has no torch).
"""

from __future__ import annotations

import gc
import os
import weakref
from typing import Any

import numpy as np
import pytest

import accelrt as acc


def _nested(depth: int) -> list[Any]:
    data: Any = 1.0
    for _ in range(depth):
        data = [data]
    return data


def _self_containing() -> list[Any]:
    data: list[Any] = []
    data.append(data)
    return data


def _cycle_after_first() -> list[Any]:
    data: list[Any] = [[1.0]]
    data.append(data)
    return data


# ---------------------------------------------------------------------- asarray's nesting

@pytest.mark.parametrize("make", [_self_containing, lambda: _nested(65),
                                  lambda: _nested(5000)],
                         ids=["self", "65-deep", "5000-deep"])
def test_asarray_refuses_endless_or_too_deep_data(make: Any) -> None:
    # observed on torch 2.14.1: torch.asarray(x) with x = [x], or a list nested 2000 deep,
    # raises ValueError "too many dimensions 'list'" (a list nested 100 deep is a 100-d
    # tensor: accelrt reads data with numpy, whose limit is 64 dimensions). Before: a
    # RecursionError, or for 65 levels a ValueError about "different lengths".
    with pytest.raises(ValueError, match=r"^too many dimensions 'list'"):
        acc.asarray(make(), device="cpu:0")


def test_asarray_refuses_a_list_that_holds_itself_after_its_first_item() -> None:
    # torch 2.15: a list that holds itself after its first item, [[1.0], x], is a TypeError
    # "new(): self-referential lists are incompatible" (its shape is found along the first
    # items, so only x = [x, ...] nests without end: the ValueError above)
    with pytest.raises(TypeError, match=r"^new\(\): self-referential lists are incompatible"):
        acc.asarray(_cycle_after_first(), device="cpu:0")


def test_asarray_takes_data_nested_64_deep() -> None:
    assert acc.asarray(_nested(64), device="cpu:0").shape == (1,) * 64


# ---------------------------------------------------------------------- device indices

_INDEX_CALLS = {
    "device(type, index)": lambda i: acc.device("cpu", i),
    "device(index)": lambda i: acc.device(i),
    "set_default_device": lambda i: acc.set_default_device(i),
    "Stream(device_index=)": lambda i: acc.Stream(stream_id=1, device_index=i, device_type="cpu"),
}


@pytest.mark.parametrize("name", list(_INDEX_CALLS))
@pytest.mark.parametrize("index", [2**63, np.uint64(2**64 - 1), 10**400],
                         ids=["2**63", "uint64-max", "10**400"])
def test_a_device_index_beyond_int64_is_refused(name: str, index: Any) -> None:
    # observed on torch 2.14.1: torch.device("cpu", 2**63), torch.device(2**63),
    # torch.device(np.uint64(2**64 - 1)) and torch.set_default_device(2**63) raise ValueError
    # "Overflow when unpacking long long" (2**63 - 1 is taken). Before: accelrt made
    # device(type='cpu', index=9223372036854775808).
    if name.startswith("Stream") and not isinstance(index, int):
        return          # the stream triple takes Python ints only (a TypeError)
    before = acc.get_default_device()
    with pytest.raises(ValueError, match=r"Overflow when unpacking long long") as info:
        _INDEX_CALLS[name](index)
    assert isinstance(info.value, IndexError)   # as any index beyond the devices
    assert acc.get_default_device() == before


def test_the_largest_int64_is_still_a_device_index() -> None:
    assert acc.device("cpu", 2**63 - 1).index == 2**63 - 1


# ---------------------------------------------------------------------- ints too long to print

HUGE = 10**5000     # Python refuses str() of an int of more than 4300 digits (ValueError)

_HUGE_CALLS: dict[str, Any] = {
    "device index": lambda: acc.device("cpu", HUGE),
    "negative device index": lambda: acc.memory_stats(-HUGE),
    "device out of range": lambda: acc.memory_stats(HUGE),
    "set_device_index": lambda: acc.set_device_index(HUGE),
    "Event(device=)": lambda: acc.Event(device=HUGE),
    "Stream(device_index=)": lambda: acc.Stream(stream_id=0, device_index=-HUGE,
                                                device_type="cpu"),
    "manual_seed": lambda: acc.manual_seed(HUGE),
    "Generator.manual_seed": lambda: acc.random.Generator("cpu:0").manual_seed(-HUGE),
    "Stream priority": lambda: acc.cpu.Stream(priority=HUGE),
    "empty size": lambda: acc.empty(HUGE, device="cpu:0"),
    "empty negative size": lambda: acc.empty(2, -HUGE, device="cpu:0"),
    "randint high": lambda: acc.randint(0, HUGE, (2,), device="cpu:0"),
    "full value": lambda: acc.full((2,), HUGE, device="cpu:0"),
    "fill_ value": lambda: acc.zeros(2, device="cpu:0").fill_(-HUGE),
    "asarray data": lambda: acc.asarray([HUGE], device="cpu:0"),
    "empty dtype": lambda: acc.empty(2, dtype=HUGE, device="cpu:0"),
    "rand dtype": lambda: acc.rand(2, dtype=HUGE, device="cpu:0"),
    "comm scatter dim": lambda: acc.comm.scatter(acc.zeros(2, device="cpu:0"), ["cpu:0"],
                                                 dim=HUGE),
    "comm buffer_size": lambda: acc.comm.reduce_add_coalesced([[acc.zeros(2, device="cpu:0")]],
                                                              buffer_size=-HUGE),
    "caching_allocator_alloc": lambda: acc.memory.caching_allocator_alloc(-HUGE, "cpu:0"),
    "memory_snapshot mempool_id": lambda: acc.memory.memory_snapshot(mempool_id=(HUGE, HUGE, 1)),
    "Graph capture_error_mode": lambda: acc.Graph(capture_error_mode=HUGE),
    "record_memory_history": lambda: acc.memory.record_memory_history(HUGE),
    "Generator.__setstate__": lambda: acc.random.Generator("cpu:0").__setstate__((HUGE, 0)),
    "comm chunk_sizes": lambda: acc.comm.scatter(acc.zeros(2, device="cpu:0"), ["cpu:0"],
                                                 chunk_sizes=[-HUGE]),
}


@pytest.mark.parametrize("name", list(_HUGE_CALLS))
def test_an_int_too_long_to_print_gets_the_calls_own_error(name: str) -> None:
    # observed on torch 2.14.1: torch.device("cpu", 10**5000) and torch.manual_seed(10**5000)
    # raise ValueError "Overflow when unpacking long long". Before: each of these calls raised
    # Python's own ValueError "Exceeds the limit (4300 digits) for integer string conversion"
    # while formatting its message, whatever the call's error (an IndexError, a TypeError).
    with pytest.raises(Exception) as info:  # noqa: PT011 - the class is each call's own
        _HUGE_CALLS[name]()
    assert "Exceeds the limit" not in str(info.value)
    assert "int of 16610 bits" in str(info.value)


def test_shown_is_repr_but_for_ints_too_long_to_print() -> None:
    from accelrt._errors import shown
    assert shown(2**200) == repr(2**200)
    assert shown((1, HUGE)) == "(1, <an int of 16610 bits>)"
    assert shown((-HUGE,)) == "(<a negative int of 16610 bits>,)"
    assert repr(acc.cpu.device(-HUGE)).endswith("(<a negative int of 16610 bits>)")


# ---------------------------------------------------------------------- caching_allocator_alloc

@pytest.mark.parametrize("device", [None, "cpu:0"])
def test_caching_allocator_alloc_refuses_an_event_as_its_stream(device: str | None) -> None:
    # torch 2.14.1's torch.cuda.caching_allocator_alloc (torch/cuda/memory.py, read: it
    # initialises CUDA first, so it cannot run here) takes a torch.cuda.Stream or an int and
    # raises TypeError "Invalid type for stream argument, must be `torch.cuda.Stream` or `int`
    # representing a pointer to a existing stream" for anything else. Before: an accelrt
    # Event (which has a handle too) was read as the stream whose handle equals its own.
    before = acc.memory.memory_allocated("cpu:0")
    with pytest.raises(TypeError, match=r"^Invalid type for stream argument, must be "
                                        r"`accelrt.Stream` or `int`.* got Event$"):
        acc.memory.caching_allocator_alloc(16, device, acc.cpu.Event(device="cpu:0"))
    assert acc.memory.memory_allocated("cpu:0") == before


# ---------------------------------------------------------------------- dtype caches

_DTYPE_CALLS: dict[str, Any] = {
    "empty": lambda dt: acc.empty(2, dtype=dt, device="cpu:0"),
    "zeros": lambda dt: acc.zeros(2, dtype=dt, device="cpu:0"),
    "rand": lambda dt: acc.rand(2, dtype=dt, device="cpu:0"),
    "asarray": lambda dt: acc.asarray([1], dtype=dt, device="cpu:0"),
}


@pytest.mark.parametrize("name", list(_DTYPE_CALLS))
def test_a_number_is_no_dtype_after_an_equal_numpy_scalar_was_one(name: str) -> None:
    # observed on torch 2.14.1: torch.empty(2, dtype=True) and dtype=1.5 raise TypeError
    # "empty(): argument 'dtype' must be torch.dtype, not bool" (float). accelrt's dtype
    # caches were keyed by the argument: once np.bool_(True) or np.float64(1.5) was a dtype
    # (numpy reads a scalar as its dtype), True, 1 and 1.5 (equal to them, same hash) were
    # taken as bool and float64. Since s34 a numpy scalar is no dtype argument either
    # (torch 2.15: "must be torch.dtype, not numpy.float64"; test_review_parity_s34.py).
    call = _DTYPE_CALLS[name]
    for scalar in (np.bool_(True), np.float64(1.5)):
        with pytest.raises(TypeError, match="pass x.dtype"):
            call(scalar)
    for number in (True, 1, 1.5):
        with pytest.raises(TypeError, match="argument 'dtype' must be a numpy dtype"):
            call(number)


@pytest.mark.parametrize("name", list(_DTYPE_CALLS))
def test_an_array_given_as_dtype_is_not_kept_alive(name: str) -> None:
    # an Array as dtype is numpy's "the dtype of this object"; the dtype caches kept it (and
    # its device memory) alive for the life of the process. Since s34 it is refused (torch
    # 2.15: "argument 'dtype' must be torch.dtype, not Tensor"), and still not kept.
    other = acc.empty(4, device="cpu:0")
    held = weakref.ref(other)
    with pytest.raises(TypeError, match="pass x.dtype"):
        _DTYPE_CALLS[name](other)
    del other
    gc.collect()
    assert held() is None


# ---------------------------------------------------------------------- Generator seeds

class _Index:
    """An object with ``__index__`` only (not an int, not a numpy integer)."""

    def __index__(self) -> int:
        return 1


@pytest.mark.parametrize("method, torch_name", [("manual_seed", "manual_seed"),
                                                ("set_offset", "manual_offset")])
@pytest.mark.parametrize("value", [_Index(), np.array(1)], ids=["__index__", "0-d ndarray"])
def test_generator_seed_takes_no_object_with_only_index(method: str, torch_name: str,
                                                        value: Any) -> None:
    # observed on torch 2.14.1: torch.Generator().manual_seed(obj) and .set_offset(obj), obj
    # with __index__ only or np.array(1), raise RuntimeError "manual_seed expected a long, but
    # got Idx" ("manual_offset ...", "... got numpy.ndarray"), as torch.Generator(device=obj)
    # does. Before: accelrt read them with operator.index.
    g = acc.random.Generator("cpu:0")
    with pytest.raises(RuntimeError, match=rf"{torch_name} expected a long, but got") as info:
        getattr(g, method)(value)
    assert isinstance(info.value, TypeError)
    assert g.initial_seed() == 67280421310721 and g.get_offset() == 0


def test_wrapping_a_stream_of_no_device_caches_nothing() -> None:
    # Stream(stream_id=, device_index=, device_type=) made its device through the process-wide
    # cache of device objects before checking the index: each refused index stayed cached
    from accelrt import _device
    before = len(_device._device_objs)
    for index in range(1000, 1100):
        with pytest.raises(IndexError, match="out of index range"):
            acc.Stream(stream_id=0, device_index=index, device_type="cpu")
    assert len(_device._device_objs) == before


# ---------------------------------------------------------------------- dump_snapshot

def test_dump_snapshot_takes_a_path_not_a_file_descriptor(tmp_path: Any) -> None:
    # torch 2.14.1's _dump_snapshot (read: it needs CUDA) does open(filename, "wb"), so an int
    # is a file descriptor: dump_snapshot(1) wrote the pickle to stdout and closed it, and 0
    # closed stdin. accelrt's filename is a path: os.fspath's TypeError.
    fd = os.open(tmp_path / "fd", os.O_WRONLY | os.O_CREAT)
    try:
        for bad in (fd, True, np.int64(fd)):
            with pytest.raises(TypeError, match="expected str, bytes or os.PathLike object"):
                acc.memory.dump_snapshot(bad)
            with pytest.raises(TypeError, match="expected str, bytes or os.PathLike object"):
                acc.cpu.dump_snapshot(bad)
        os.fstat(fd)        # still open
    finally:
        os.close(fd)
    assert (tmp_path / "fd").stat().st_size == 0
