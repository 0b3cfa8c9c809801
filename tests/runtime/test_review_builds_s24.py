"""Review by tests of what the compiled (mypyc) build and the pure build could show a user
differently (issue 22, sections 1 and 4), run on whichever build is installed (``accelrt info``
says which; ``.ci/run`` runs this file on both).

A compiled function checks its arguments' annotated types itself, with its own ``TypeError``
("int object expected; got list"), and reads an ``int`` argument by its value: an instance of
a subclass of ``int`` (with its own ``__eq__``, ``__hash__``, ``__index__`` or ``__int__``)
becomes a plain int there, and ``True`` is accepted where an ``int`` is annotated. The pure
build passes such objects on unchanged. So every public entry point whose arguments reach a
compiled module must (1) check them first, with accelrt's own message, and (2) read an int by
its value (``accelrt._device._plain_int``), as PyTorch's C++ does. The tables below drive
hostile arguments through those entry points and check the exception (type and message), that
no mypyc message leaks, and that the allocator's statistics agree with its segments afterwards
(nothing allocated, nothing lost). The expected values follow PyTorch's rule (an int counts by
its value, as its C++ reads it); the expected messages are accelrt's own. Both builds of the
same tree pass this file; on the tree before the fixes it came with (ae214f9), the pure build
failed 135 of its 364 cases and 27 teardown leak checks (one plain int subclass as a device
index broke every later use of that device in the process), the compiled build 57 and 5 (it
also answered ``record_memory_history`` with mypyc's messages).

The build selection itself (``ACCELRT_COMPILE``'s values, a compiler that fails, what ``accelrt
info`` says) is checked at the end; a real ``pip wheel`` without a compiler is
tests/package/test_build_wheel.py.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from helpers.builds import ROOT
from helpers.registry import module_backends

import accelrt as acc
from accelrt import cli, comm, memory
from accelrt import random as rnd
from accelrt._build_info import build_info
from accelrt._errors import AcceleratorIndexError, AcceleratorValueError
from accelrt.memory._allocator import peek_allocator
from accelrt.backends.cpu import CpuBackend
from helpers.hostile import Index, IntEq, IntIdx, IntSub

B = "s24b"   # a cpu backend of two simulated devices, registered here
_backends = module_backends({B: lambda: CpuBackend(num_devices=2, name=B)})

#: What a compiled function says about an argument of the wrong type: never shown to users.
MYPYC = re.compile(r"object expected; got")


# ---------------------------------------------------------------------- hostile values

class EqAll:
    """Equal to everything, hash 0."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


INT_SUBCLASSES = [IntSub, IntEq, IntIdx]
NOT_INTS = [1.5, float("nan"), "1", b"1", None, [1], (1,), object(), 1j, Decimal(1),
            Fraction(1, 2), np.float64(1.0), Index(), EqAll()]
HUGE = [2 ** 63, 2 ** 64, 10 ** 40]


def _ids(values: list[Any]) -> list[str]:
    return [f"{type(v).__name__}({v!r:.12})" for v in values]


# ---------------------------------------------------------------------- fixtures

@pytest.fixture
def two() -> Iterator[None]:
    """The two-device backend as the current accelerator (conftest restores the previous)."""
    acc.set_current_accelerator(B)
    yield
    acc.synchronize(f"{B}:0")
    acc.synchronize(f"{B}:1")


def _stats() -> list[dict[str, int]]:
    return [dict(memory.memory_stats(f"{B}:{i}")) for i in range(2)]


def _check_consistent() -> None:
    """Each started allocator's statistics agree with the segments its snapshot shows."""
    for i in range(2):
        a = peek_allocator(B, i)
        if a is None:
            continue
        segs = a.snapshot_segments()
        st = a.stats()
        assert st["reserved_bytes.all.current"] == sum(s["total_size"] for s in segs)
        assert st["allocated_bytes.all.current"] == sum(s["allocated_size"] for s in segs)
        assert st["active_bytes.all.current"] == sum(s["active_size"] for s in segs)


KEPT = ("allocated_bytes.all.current", "active_bytes.all.current",
        "requested_bytes.all.current", "allocation.all.current")


def _refused(call: Callable[[], object], exc: type[BaseException], match: str) -> None:
    """``call()`` raises ``exc`` with a message matching ``match`` (accelrt's, not mypyc's),
    and leaves the allocators as they were (nothing allocated, statistics consistent)."""
    before = _stats()
    with pytest.raises(exc, match=match) as info:
        call()
    said = str(info.value)
    del info   # its traceback holds the frames, and what they made
    assert not MYPYC.search(said), said
    after = _stats()
    for i in range(2):   # a device not started yet has no statistics
        assert ({k: after[i].get(k, 0) for k in KEPT}
                == {k: before[i].get(k, 0) for k in KEPT}), i
    _check_consistent()


# ---------------------------------------------------------------------- int subclasses

def _memory_on(index: int, fn: Callable[[], int]) -> int:
    """Bytes ``fn`` (which returns a pointer of caching_allocator_alloc) allocated on device
    ``index``; the pointer is deleted again."""
    before = memory.memory_allocated(f"{B}:{index}")
    ptr = fn()
    grown = memory.memory_allocated(f"{B}:{index}") - before
    memory.caching_allocator_delete(ptr)
    return grown


def _current_after_set(v: int) -> int:
    acc.set_device_index(v)
    try:
        return acc.current_device_index()
    finally:
        acc.set_device_index(0)


def _current_in_block(v: int) -> int:
    with acc.device_index(v):
        return acc.current_device_index()


def _fraction_of_1(v: int) -> tuple[float, float]:
    memory.set_per_process_memory_fraction(0.5, v)
    try:
        return (memory.get_per_process_memory_fraction(f"{B}:0"),
                memory.get_per_process_memory_fraction(f"{B}:1"))
    finally:
        memory.set_per_process_memory_fraction(1.0, f"{B}:1")


def _event_device(v: int) -> int:
    e = acc.Event()
    s = acc.Stream(v)
    e.record(s)
    e.synchronize()
    assert e.device is not None
    return int(e.device.index or 0)


def _arrays() -> tuple[acc.Array, acc.Array]:
    return acc.ones(2, device=f"{B}:0"), acc.ones(2, device=f"{B}:1")


def _stream_by_id(v: int) -> bool:
    s = acc.Stream(f"{B}:1")
    wrapped = acc.Stream(stream_id=type(v)(int(s.stream_id)), device_index=v, device_type=B)
    return wrapped == s and wrapped.device_index == 1


def _caching_alloc_on_stream(v: int) -> bool:
    s = acc.Stream(f"{B}:0")
    ptr = memory.caching_allocator_alloc(512, f"{B}:0", type(v)(int(s.stream_id)))
    blocks = [b for seg in memory.memory_snapshot() for b in seg["blocks"]
              if seg["stream"] == int(s.stream_id) and b["state"] == "active_allocated"]
    memory.caching_allocator_delete(ptr)
    return len(blocks) == 1


def _delete_frees(v_type: type[int]) -> int:
    ptr = memory.caching_allocator_alloc(512, f"{B}:0")
    memory.caching_allocator_delete(v_type(ptr))   # an IntEq pointer is not 0
    return memory.memory_allocated(f"{B}:0")


def _pool_snapshot(v_type: type[int]) -> bool:
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, f"{B}:0"):
        x = acc.empty(4, device=f"{B}:0")
    y = acc.empty(4, device=f"{B}:0")
    pid = (v_type(pool.id[0]), v_type(pool.id[1]))
    segs = memory.memory_snapshot(pid)
    ok = bool(segs) and all(tuple(s["segment_pool_id"]) == pool.id for s in segs)
    del x, y
    return ok


#: (what, fn(v) -> observed, expected) for v = cls(1) of each int subclass: the value 1 is
#: what counts (device 1, a chunk of 1 element ...), and what comes back is a plain int.
BY_VALUE: list[tuple[str, Callable[[Any], object], object]] = [
    ("device(type, index).index", lambda v: acc.device(B, v).index, 1),
    ("device(index).index", lambda v: acc.device(v).index, 1),
    ("set_device_index", _current_after_set, 1),
    ("device_index block", _current_in_block, 1),
    ("Stream(index).device_index", lambda v: acc.Stream(v).device_index, 1),
    ("current_stream(index)", lambda v: acc.current_stream(v).device.index, 1),
    ("zeros(device=index)", lambda v: acc.zeros(2, device=v).device.index, 1),
    ("Array.to(index)", lambda v: _arrays()[0].to(v).device.index, 1),
    ("memory_allocated(index)",
     lambda v: memory.memory_allocated(v) == memory.memory_allocated(f"{B}:1"), True),
    ("caching_allocator_alloc(device=index)",
     lambda v: _memory_on(1, lambda: memory.caching_allocator_alloc(512, v)), 512),
    ("caching_allocator_alloc(stream=handle)", _caching_alloc_on_stream, True),
    ("Stream(stream_id=, device_index=)", _stream_by_id, True),
    ("set_per_process_memory_fraction(device=index)", _fraction_of_1, (1.0, 0.5)),
    ("Event.record(Stream(index))", _event_device, 1),
    ("comm.broadcast(devices=[0, index])",
     lambda v: [x.device.index for x in comm.broadcast(_arrays()[0], [0, v])], [0, 1]),
    ("comm.scatter(chunk_sizes=[index, 1])",
     lambda v: [x.shape for x in comm.scatter(_arrays()[0], [0, 1], [v, 1])], [(1,), (1,)]),
    ("comm.gather(destination=index)",
     lambda v: comm.gather(list(_arrays()), 0, v).device.index, 1),
    ("comm.reduce_add(destination=index)",
     lambda v: comm.reduce_add(list(_arrays()), v).device.index, 1),
    ("comm.broadcast_coalesced(buffer_size=)",
     lambda v: len(comm.broadcast_coalesced([_arrays()[0]], [0, 1], v)), 2),
    ("empty(size)", lambda v: acc.empty(v, v, device=f"{B}:0").shape, (1, 1)),
    ("rand(size)", lambda v: acc.rand(v, 2, device=f"{B}:0").shape, (1, 2)),
]


@pytest.mark.parametrize("cls", INT_SUBCLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("what,fn,expected", BY_VALUE, ids=[r[0] for r in BY_VALUE])
def test_an_int_subclass_is_read_by_its_value(two: None, cls: type[int], what: str,
                                              fn: Callable[[Any], object],
                                              expected: object) -> None:
    got = fn(cls(1))
    assert got == expected, (what, got)
    if isinstance(expected, int) and not isinstance(expected, bool):
        assert type(got) is int, (what, type(got))
    _check_consistent()


@pytest.mark.parametrize("cls", INT_SUBCLASSES, ids=lambda c: c.__name__)
def test_an_int_subclass_pointer_is_freed(two: None, cls: type[int]) -> None:
    before = memory.memory_allocated(f"{B}:0")
    assert _delete_frees(cls) == before   # IntEq(ptr) == 0 is True: not a no-op
    with pytest.raises(ValueError, match="was not returned by caching_allocator_alloc"):
        memory.caching_allocator_delete(cls(12345))
    _check_consistent()


@pytest.mark.parametrize("cls", INT_SUBCLASSES, ids=lambda c: c.__name__)
def test_an_int_subclass_pool_id_names_one_pool(two: None, cls: type[int]) -> None:
    assert _pool_snapshot(cls)
    pool = memory.MemPool()   # the device modules' memory_snapshot reads it the same way
    with memory.use_mem_pool(pool, "cpu:0"):
        x = acc.empty(4, device="cpu:0")
    segs = acc.cpu.memory_snapshot((cls(pool.id[0]), cls(pool.id[1])))
    assert segs and all(tuple(s["segment_pool_id"]) == pool.id for s in segs)
    del x


def test_device_indices_come_back_as_plain_ints(two: None) -> None:
    # what was set with an int subclass reads back as an int, as in PyTorch
    for cls in INT_SUBCLASSES:
        assert type(acc.device(B, cls(1)).index) is int
        assert hash(acc.device(B, cls(1))) == hash(acc.device(B, 1))
        assert acc.device(B, cls(1)) == acc.device(f"{B}:1")


# ---------------------------------------------------------------------- hostile arguments

def _stream0() -> acc.Stream:
    return acc.Stream(f"{B}:0")


def _event() -> acc.Event:
    e = acc.Event(enable_timing=True)
    e.record(_stream0())
    return e


#: (entry point, call(v), [(values, exception, message), ...]): every entry point whose
#: arguments reach a compiled module (the allocator, _placement/_size, _stream_core,
#: random._draw, comm's _args/_arrays, the transfer plans), with what it says about each value.
TABLE: list[tuple[str, Callable[[Any], object], list[tuple[list[Any], type[BaseException], str]]]] = [
    ("caching_allocator_alloc(size)", lambda v: memory.caching_allocator_alloc(v, f"{B}:0"), [
        ([True, False, np.int64(8), *NOT_INTS], TypeError, r"^size must be an int, got \w+"),
        ([-1, -2 ** 63 - 1], ValueError, r"^size must not be negative, got -\d+$"),
        (HUGE, acc.OutOfMemoryError, r"out of memory\. Tried to allocate"),
    ]),
    ("caching_allocator_alloc(stream)",
     lambda v: memory.caching_allocator_alloc(512, f"{B}:0", v), [
        ([True, 1.5, "0", object(), np.int64(0), EqAll()], TypeError,
         r"^Invalid type for stream argument, must be `accelrt.Stream` or `int`"),
        ([-1, 12345, *HUGE], ValueError, r"is not a live stream handle of s24b:0"),
    ]),
    ("caching_allocator_delete(ptr)", memory.caching_allocator_delete, [
        ([True, np.int64(8), 1.5, "8", None, object(), Index()], TypeError,
         r"^ptr must be an int, got [\w.]+$"),
        ([-1, 8, *HUGE], ValueError, r"was not returned by caching_allocator_alloc"),
    ]),
    ("empty(size)", lambda v: acc.empty(v, device=f"{B}:0"), [
        ([1.5, float("nan"), "1", None, object(), 1j, Decimal(1), EqAll()], TypeError,
         r"^empty\(\) size entries must be ints, got"),
        ([-1, -2 ** 63 - 1], AcceleratorValueError, r"negative dimension"),
        (HUGE, AcceleratorValueError, r"^Storage size calculation overflowed"),
    ]),
    ("Array(size)", lambda v: acc.Array(v, 2, device=f"{B}:0"), [
        ([1.5, "1", None, object()], TypeError, r"^Array\(\) size entries must be ints, got"),
        ([-1], AcceleratorValueError, r"negative dimension"),
        (HUGE, AcceleratorValueError, r"^Storage size calculation overflowed"),
    ]),
    ("full(size, fill)", lambda v: acc.full((2,), v, dtype="float32", device=f"{B}:0"), [
        ([None, "1", object(), Index(), EqAll(), Decimal(1)], TypeError,
         r"^fill value must be a bool, int, float or complex, got"),
        ([1j], TypeError, r"^cannot fill a float32 array with the complex value"),
        ([10 ** 40, 10 ** 400, 1e39], ValueError, r"^fill value .* overflows float32"),
    ]),
    ("full(size, int64 fill)", lambda v: acc.full((2,), v, dtype="int64", device=f"{B}:0"), [
        ([2 ** 63, -2 ** 63 - 1, 10 ** 40], ValueError, r"does not fit in int64"),
        ([float("inf"), float("nan")], ValueError, r"^cannot fill a int64 array with"),
    ]),
    ("Array.fill_", lambda v: acc.zeros(2, device=f"{B}:0").fill_(v), [
        ([10 ** 40, 10 ** 400], ValueError, r"^fill value .* overflows float32"),
        ([None, "1", object()], TypeError, r"^fill value must be a bool, int, float or"),
    ]),
    ("rand(generator)", lambda v: acc.rand(2, generator=v, device=f"{B}:0"), [
        ([True, 1, "g", object(), np.random.default_rng(0)], TypeError,
         r"generator must be an accelrt\.random\.Generator|Generator"),
    ]),
    ("manual_seed", acc.manual_seed, [   # 1.5, "1", np.float64(1.0): int(seed), as torch (s25)
        ([None, object()], TypeError, r"^seed must be an int, got"),
        ([2 ** 64, -2 ** 63 - 1, 10 ** 40], ValueError, r"^seed -?\d+ is out of range"),
    ]),
    ("Generator.manual_seed", lambda v: rnd.Generator(f"{B}:0").manual_seed(v), [
        ([1.5, "1", None, object()], TypeError, r"^seed must be an int, got"),
        ([2 ** 64, 10 ** 40], ValueError, r"^seed \d+ is out of range"),
    ]),
    ("uniform_(array)", lambda v: rnd.uniform_(v), [
        ([1, None, np.zeros(2), object()], TypeError, r"^uniform_\(\) needs an accelrt\.Array"),
    ]),
    ("Stream(priority)", lambda v: acc.Stream(f"{B}:0", priority=v), [
        ([1.5, "0", None, object(), True, np.True_], TypeError,
         r"^priority must be an int, got"),
        ([1, -5, *HUGE], ValueError, r"^priority=-?\d+ is out of range"),
    ]),
    ("Stream(stream_id)",
     lambda v: acc.Stream(stream_id=v, device_index=0, device_type=B), [
        ([1.5, "0", object(), True, np.int64(0)], TypeError, r"^stream_id must be an int, got"),
        ([12345, *HUGE], ValueError, r"^stream_id=0x[0-9a-f]+ is not a live stream of"),
    ]),
    ("Stream(device)", lambda v: acc.Stream(v), [
        ([True, 1.5, object(), EqAll(), Index()], TypeError,
         r"^(expected a device, int, str or None, got|.*bool)"),
        (HUGE, AcceleratorIndexError, r"out of index range \[0, 2\)"),
        # a numpy integer is an index and bytes a device string, as torch.Stream's parser
        # reads them (session 26w)
        ([-1, np.int64(-1)], AcceleratorValueError, r"must not be negative"),
        ([b"0"], AcceleratorValueError, r"Invalid device string"),
    ]),
    ("current_stream(device)", lambda v: acc.current_stream(v), [
        ([True, 1.5, object(), EqAll(), np.int64(1)], TypeError,
         r"expected a device, int, str or None, got"),
        (HUGE, AcceleratorIndexError, r"out of index range \[0, 2\)"),
    ]),
    ("set_stream", acc.set_stream, [
        ([None, 0, object(), _event], TypeError, r"^set_stream\(\) takes an accelrt\.Stream"),
    ]),
    ("Event.record(stream)", lambda v: _event().record(v), [
        ([0, True, "s", object(), EqAll()], TypeError,
         r"^record\(\) takes an accelrt\.Stream or None, got"),
    ]),
    ("Event.wait(stream)", lambda v: _event().wait(v), [
        ([0, True, object()], TypeError, r"^wait\(\) takes an accelrt\.Stream or None, got"),
    ]),
    ("Event.elapsed_time", lambda v: _event().elapsed_time(v), [
        ([None, 0, object(), _stream0], TypeError, r"elapsed_time\(\) takes an accelrt\.Event"),
    ]),
    ("Stream.wait_event", lambda v: _stream0().wait_event(v), [
        ([None, 0, True, object()], TypeError, r"^wait_event\(\) takes an accelrt\.Event"),
    ]),
    ("Stream.wait_stream", lambda v: _stream0().wait_stream(v), [
        ([None, 0, True, object()], TypeError, r"^wait_stream\(\) takes an accelrt\.Stream"),
    ]),
    ("Array.record_stream", lambda v: acc.zeros(2, device=f"{B}:0").record_stream(v), [
        ([None, 0, True, object()], TypeError, r"^record_stream\(\) takes an accelrt\.Stream"),
    ]),
    ("Array.to(non_blocking)", lambda v: acc.zeros(2, device=f"{B}:0").to(f"{B}:1", v), [
        ([1, None, "yes", np.bool_(True)], TypeError, r"^non_blocking must be a bool, got"),
    ]),
    ("set_per_process_memory_fraction",
     lambda v: memory.set_per_process_memory_fraction(v, f"{B}:0"), [
        ([None, "0.5", object(), 1, True, *HUGE], TypeError,
         r"^Invalid type for fraction argument, must be `float`"),
        ([float("nan"), -0.5, 1.5, float("inf")], ValueError, r"^Invalid fraction value"),
    ]),
    ("record_memory_history(enabled)",
     lambda v: memory.record_memory_history(v, device=f"{B}:0"), [
        ([1, 0, IntEq(1), EqAll(), 1.5, object(), ["all"]], TypeError,
         r"^enabled must be None, 'state' or 'all', got"),
        (["none"], ValueError, r"^enabled must be None, 'state' or 'all', got"),
    ]),
    ("record_memory_history(context)",
     lambda v: memory.record_memory_history("all", v, device=f"{B}:0"), [
        ([1, EqAll(), object()], TypeError,
         r"^context must be None, 'state', 'alloc' or 'all', got"),
        (["everything"], ValueError, r"^context must be None, 'state', 'alloc' or 'all', got"),
    ]),
    ("record_memory_history(stacks)",
     lambda v: memory.record_memory_history("all", "all", v, device=f"{B}:0"), [
        ([None, 1, EqAll()], TypeError, r"^stacks must be 'python' or 'all', got"),
        (["cpp"], ValueError, r"^stacks must be 'python' or 'all', got"),
    ]),
    ("record_memory_history(max_entries)",
     lambda v: memory.record_memory_history("all", max_entries=v, device=f"{B}:0"), [
        # (True, False, np.int64(5) and Index() are taken, as torch 2.15's size_t binding
        # takes them: session 41)
        ([1.5, "5", None, EqAll()], TypeError, r"^max_entries must be an int, got"),
        ([-1, -2 ** 63 - 1, 2 ** 64, 2 ** 70], TypeError,
         r"^max_entries must be an int in \[0, 2\*\*64\) \(PyTorch takes a size_t\), got"),
    ]),
    # torch 2.15 reads mempool_id[0] and [1] (a 3-tuple's first two: session 41)
    ("memory_snapshot(mempool_id)", lambda v: memory.memory_snapshot(v), [
        ([1, (1,), EqAll()], TypeError, r"^mempool_id must be a pair of ints"),
        ([(1.0, 2), (True, 1), "ab"], TypeError, r"^mempool_id elements must be integers"),
    ]),
    ("cpu.memory_snapshot(mempool_id)", lambda v: acc.cpu.memory_snapshot(v), [
        ([True, 1, (1,), EqAll()], TypeError, r"^mempool_id must be a pair of ints"),
        ([(1.0, 2), "ab"], TypeError, r"^mempool_id elements must be integers"),
    ]),
    ("comm.broadcast(devices)", lambda v: comm.broadcast(_arrays()[0], [0, v]), [
        ([True, 1.5, None, object(), np.int64(1)], TypeError,
         r"^devices\[1\] must be|^expected a device"),
        ([-2], AcceleratorValueError, r"Expected non-negative device index"),
        (HUGE, AcceleratorIndexError, r"out of index range \[0, 2\)"),
    ]),
    ("comm.scatter(chunk_sizes)", lambda v: comm.scatter(_arrays()[0], [0, 1], [v, 1]), [
        ([True, 1.5, None, "1", object()], TypeError, r"^chunk_sizes must contain only ints"),
        (HUGE, AcceleratorValueError, r"split_sizes to sum exactly to"),
    ]),
    ("comm.gather(dim)", lambda v: comm.gather(list(_arrays()), v, f"{B}:0"), [
        ([True, 1.5, None, "0"], TypeError, r"^dim must be an int, got"),
        ([1, -2, *HUGE], IndexError, r"^Dimension out of range"),
    ]),
    ("comm.broadcast_coalesced(buffer_size)",
     lambda v: comm.broadcast_coalesced([_arrays()[0]], [0, 1], v), [
        ([True, 1.5, None, "1"], TypeError, r"^buffer_size must be an int \(bytes\), got"),
        ([0, -1], AcceleratorValueError, r"^buffer_size must be positive"),
    ]),
]

CASES = [pytest.param(call, v, exc, match, id=f"{name}-{vid}")
         for name, call, groups in TABLE
         for values, exc, match in groups
         for v, vid in zip(values, _ids(values))]


@pytest.mark.parametrize("call,value,exc,match", CASES)
def test_hostile_arguments_get_accelrt_errors_and_leave_no_trace(
        two: None, call: Callable[[Any], object], value: Any, exc: type[BaseException],
        match: str) -> None:
    if callable(value) and not isinstance(value, type):
        value = value()       # a stream or event made in the test (its backend is current)
    _refused(lambda: call(value), exc, match)


def test_record_memory_history_checks_before_any_allocator(two: None) -> None:
    # IntEq(1) == None: once read as "stop recording" (pure) or refused by mypyc's check
    # (compiled); now refused by accelrt's check, on both builds, before any allocator changes
    memory.record_memory_history("all", max_entries=3, device=f"{B}:0")
    try:
        x = acc.empty(4, device=f"{B}:0")
        del x
        with pytest.raises(TypeError, match="enabled must be"):
            memory.record_memory_history(IntEq(0), device=f"{B}:0")  # type: ignore[arg-type]
        y = acc.empty(4, device=f"{B}:0")   # still recording
        del y
        actions = [e["action"] for e in memory._snapshot(f"{B}:0")["device_traces"][0]]
        # y's, in 3 entries (the snapshot records its own entry after reading them)
        assert actions == ["alloc", "free_requested", "free_completed"], actions
    finally:
        memory.record_memory_history(None, device=f"{B}:0")


# ---------------------------------------------------------------------- objects

@pytest.mark.parametrize("cls,args", [
    (acc.Stream, (f"{B}:0",)), (acc.Event, ()), (rnd.Generator, (f"{B}:0",)),
    (acc.Array, (4,)), (memory.MemPool, ())], ids=lambda x: getattr(x, "__name__", ""))
def test_public_classes_subclass_and_work_alike(two: None, cls: type,
                                               args: tuple[Any, ...]) -> None:
    # the public classes stay Python classes over compiled cores: users may subclass them
    sub = type("Sub", (cls,), {"extra": lambda self: 1})
    obj: Any = sub(*args)
    assert obj.extra() == 1 and issubclass(type(obj), cls)
    if cls is acc.Stream:
        with obj:
            assert acc.current_stream() is obj
        e = acc.Event()
        e.record(obj)
        obj.synchronize()
        assert e.query()
    elif cls is acc.Event:
        obj.record()
        obj.synchronize()
        assert obj.query()
    elif cls is rnd.Generator:
        assert acc.rand(2, generator=obj, device=f"{B}:0").shape == (2,)
    elif cls is acc.Array:
        obj.fill_(1.0)
        assert obj.tolist() == [1.0] * 4
    else:
        with memory.use_mem_pool(obj, f"{B}:0"):
            y = acc.zeros(4, device=f"{B}:0")
        del y
    _check_consistent()


def test_stream_and_event_fields_refuse_user_attributes(two: None) -> None:
    # the same on both builds: no __dict__ (the compiled cores have fixed fields)
    for obj in (acc.Stream(f"{B}:0"), acc.Event(), acc.zeros(2, device=f"{B}:0")):
        with pytest.raises(AttributeError):
            obj.user_attribute = 1   # type: ignore[union-attr]


# ---------------------------------------------------------------------- build selection

def _choice() -> ModuleType:
    spec = importlib.util.spec_from_file_location("s24_build_choice",
                                                  ROOT / "_build" / "build_choice.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def build_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("ACCELRT_COMPILE", "_ACCELRT_EDITABLE_BUILD", "_ACCELRT_METADATA_ONLY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("value,wanted", [("", "auto"), ("  ", "auto"), ("0", "pure"),
                                          (" 0\n", "pure"), ("1", "compiled"),
                                          ("\t1 ", "compiled")])
def test_compile_variable_accepted_values(build_env: pytest.MonkeyPatch, value: str,
                                          wanted: str) -> None:
    build_env.setenv("ACCELRT_COMPILE", value)
    assert _choice().requested() == wanted


@pytest.mark.parametrize("value", ["true", "yes", "on", "false", "no", "2", "00", "01", "-1",
                                   "1.0", "garbage", "0 1", "\u0661"])
def test_compile_variable_other_values_are_refused_with_the_values_it_takes(
        build_env: pytest.MonkeyPatch, value: str) -> None:
    # refused, not read as "yes" or "no": the README and docs/memory.md say which it takes
    build_env.setenv("ACCELRT_COMPILE", value)
    with pytest.raises(SystemExit) as info:
        _choice().requested()
    said = str(info.value.code)
    assert said.startswith(f"ACCELRT_COMPILE={value.strip()!r}: use 1 for the compiled")
    assert "0 for the pure-Python build" in said and "\n" not in said


def test_a_compiler_that_fails_is_named_and_required_build_fails(
        build_env: pytest.MonkeyPatch) -> None:
    choice = _choice()
    build_env.setenv("CC", "/bin/false")   # exists, runs, fails every compile
    problem = choice.compiler_problem()
    assert problem is not None and "'/bin/false' could not compile" in problem
    assert "\n" not in problem and "install one, e.g. gcc" in problem
    msg = choice.required_but(problem)
    assert msg.startswith("ACCELRT_COMPILE=1 asks for the compiled build, but no working C")
    assert msg.endswith("or set ACCELRT_COMPILE=0 for the pure-Python build")


def test_accelrt_info_says_which_build_is_loaded_and_why() -> None:
    info = build_info()
    line = cli.format_info(cli.collect_info(self_check=False, backends=["cpu"])).splitlines()[1]
    assert line.startswith(f"build: {'compiled' if info.build == 'compiled' else 'pure'}")
    assert info.reason and "\n" not in info.reason and info.reason in line
    assert memory.compiled == (info.build == "compiled")
    compiled_here = getattr(sys.modules["accelrt._stream_core"], "__file__", "").endswith(".py")
    assert compiled_here == (info.build == "pure"), (info, compiled_here)
    if info.build == "compiled":
        assert f"({len(info.modules)} modules, mypyc)" in line
