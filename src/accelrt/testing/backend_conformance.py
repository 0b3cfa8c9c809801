"""The backend contract's conformance suite: one set of checks every backend must pass.

Each check drives the *raw* contract of :class:`accelrt.backends.Backend` (no caching
allocator, no ``accelrt.Stream``) on a fresh instance and fails with an ``AssertionError``
naming what the backend did wrong. Checks of optional operations run where
:meth:`~accelrt.backends.Backend.capabilities` declares them and are skipped (with the reason)
where it does not. Ordering is checked with gates (a host function that waits for a
``threading.Event``), never with sleeps.

A third-party backend runs the suite from its own tests::

    # test_my_backend.py
    from accelrt.testing import backend_conformance
    from mybackend import MyBackend

    test_conformance = backend_conformance.make_tests(lambda: MyBackend())

``make_tests`` returns a pytest test function parametrised over every check (``pytest -k
host_function`` picks some). Without pytest, :func:`run` returns each check's outcome.

Example::

    >>> from accelrt.testing import backend_conformance
    >>> from accelrt.backends.cpu import CpuBackend
    >>> outcome = backend_conformance.run(lambda: CpuBackend(num_devices=2), checks=["memcpy"])
    >>> outcome
    {'memcpy': 'passed'}
"""

from __future__ import annotations

import importlib

import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._backend import Backend, Capabilities
from .._errors import AcceleratorError, DeviceError, type_shown
from .._handles import DevicePtr, StreamHandle

__all__ = ["CHECKS", "Skipped", "Target", "check", "make_tests", "run"]

#: seconds a gate waits before giving up (a hang becomes a failure, not a stuck run)
GATE_TIMEOUT = 30.0
#: what a bad argument may raise: accelrt's errors and the builtin argument errors
ARGUMENT_ERRORS = (TypeError, ValueError, IndexError, AcceleratorError)


class Skipped(Exception):
    """A check does not apply to this backend (the message says why)."""


@dataclass(frozen=True)
class Target:
    """A backend under test.

    Attributes:
        factory: makes a fresh, open instance (each check gets its own, closed after it).
        holds_data: False for a backend whose devices only count bytes (the simulated
            backend): checks then skip reading data back.
    """

    factory: Callable[[], Backend]
    holds_data: bool = True


Check = Callable[[Backend, Target], None]
#: every check, by name
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    """Register ``fn`` in :data:`CHECKS` under its name."""
    CHECKS[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------------- helpers

class _Gate:
    """A host function that blocks its stream until :meth:`open` (on the launching thread,
    where a synchronous backend runs it inline, it returns at once: blocking there would
    deadlock and order nothing)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._launcher = threading.get_ident()

    def __call__(self) -> None:
        if threading.get_ident() != self._launcher:
            self._event.wait(GATE_TIMEOUT)

    def open(self) -> None:
        self._event.set()


def _caps(b: Backend) -> Capabilities:
    caps = b.capabilities(0)
    assert isinstance(caps, Capabilities), (
        f"capabilities(0) returned {type_shown(caps)}, not accelrt.backends.Capabilities")
    return caps


def _need(b: Backend, field: str) -> None:
    if not getattr(_caps(b), field):
        raise Skipped(f"the {b.name} backend does not declare {field}")


def _need_data(t: Target) -> None:
    if not t.holds_data:
        raise Skipped("the backend holds no data (holds_data=False)")


def _upload(b: Backend, i: int, ptr: int, data: np.ndarray, s: StreamHandle) -> None:
    b.memcpy(i, ptr, data.ctypes.data, data.nbytes, "h2d", s)
    b.stream_synchronize(i, s)          # the host buffer may go once the copy ran


def _download(b: Backend, i: int, ptr: int, nbytes: int, s: StreamHandle) -> np.ndarray:
    out = np.zeros(nbytes, np.uint8)
    b.memcpy(i, out.ctypes.data, ptr, nbytes, "d2h", s)
    b.stream_synchronize(i, s)
    return out


def _host_array(ptr: int, nbytes: int) -> np.ndarray:
    """A uint8 numpy view of ``nbytes`` of host memory at ``ptr`` (owning nothing)."""
    import ctypes
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


def _malloc(b: Backend, i: int, size: int) -> DevicePtr:
    p = b.malloc(i, size)
    assert isinstance(p, int) and p > 0, f"malloc({i}, {size}) returned {p!r}, not an address"
    return p


def _first_kept_error(calls: Iterable[Callable[[], object]]) -> list[BaseException]:
    errors: list[BaseException] = []
    for call in calls:
        try:
            call()
        except AcceleratorError as exc:
            errors.append(exc)
    return errors


# ---------------------------------------------------------------------- discovery

@check
def discovery(b: Backend, t: Target) -> None:
    """device_count, properties, memory info, capabilities and default stream answer."""
    n = b.device_count()
    assert isinstance(n, int) and n >= 1, f"device_count() is {n!r}"
    for i in range(n):
        props = b.get_device_properties(i)
        for key in ("name", "total_memory", "multi_processor_count"):
            assert key in props, f"get_device_properties({i}) lacks {key!r}"
        free, total = b.get_memory_info(i)
        assert 0 <= free <= total, f"get_memory_info({i}) = {(free, total)}"
        assert b.capabilities(i) == b.capabilities(i), "capabilities() is not stable"
        assert b.stream_is_valid(i, b.default_stream(i)), "the default stream is not valid"
    assert "supported_dtypes" in b.get_device_capability(0)


@check
def capabilities_match_operations(b: Backend, t: Target) -> None:
    """Every capability declared True has its operations implemented (not the base's)."""
    ops = {
        "virtual_memory": ("vm_granularity", "vm_reserve", "vm_release", "vm_map", "vm_unmap"),
        "graphs": ("graph_capture_begin", "graph_capture_end", "graph_replay",
                   "graph_destroy"),
        "graph_capture_modes": ("graph_capture_begin_mode",),
        "graph_dot": ("graph_debug_dot",),
        "graph_native_handles": ("graph_native_handles",),
        "pinned_host_memory": ("host_malloc", "host_free"),
        "host_functions": ("launch_host_func",),
        "peer_copies": ("memcpy_peer",),
        "interprocess_events": ("event_ipc_handle", "event_from_ipc_handle"),
        "interprocess_memory": ("ipc_mem_handle", "ipc_open_mem_handle",
                                "ipc_close_mem_handle"),
        "device_rng": ("philox_fill",),
        "device_add": ("elementwise_add",),
        "device_fill": ("fill",),
        "pointer_lookup": ("pointer_device",),
        "adopt_memory": ("adopt_memory", "disown_memory"),
    }
    caps = _caps(b)
    missing = [f"{field}: {op}" for field, names in ops.items() if getattr(caps, field)
               for op in names if getattr(type(b), op) is getattr(Backend, op)]
    assert not missing, f"capabilities declared without their operations: {missing}"
    assert not (caps.cuda_array_interface and caps.host_accessible), (
        "memory cannot be both CUDA device memory and host-accessible")


# ---------------------------------------------------------------------- memory

@check
def malloc_free(b: Backend, t: Target) -> None:
    """malloc gives distinct non-overlapping ranges, free returns them, out of memory is 0."""
    ptrs = [(_malloc(b, 0, size), size) for size in (1, 256, 4096, 1 << 20)]
    spans = sorted(ptrs)
    for (p, n), (q, _) in zip(spans, spans[1:]):
        assert p + n <= q, f"allocations overlap: {p:#x}+{n} and {q:#x}"
    for p, _ in ptrs:
        b.free(0, p)
    _free, total = b.get_memory_info(0)
    huge = b.malloc(0, total * 4 + (1 << 40))
    assert huge == 0, f"malloc of more than the device holds returned {huge!r}, not 0"


@check
def memcpy(b: Backend, t: Target) -> None:
    """h2d, d2d (same device), d2h and h2h copies move the bytes."""
    _need_data(t)
    s = b.default_stream(0)
    n = 4096
    src = np.arange(n, dtype=np.uint32).view(np.uint8)[:n].copy()
    p, q = _malloc(b, 0, n), _malloc(b, 0, n)
    _upload(b, 0, p, src, s)
    b.memcpy(0, q, p, n, "d2d", s)
    assert np.array_equal(_download(b, 0, q, n, s), src), "h2d + d2d + d2h lost bytes"
    assert np.array_equal(_download(b, 0, p + 100, 50, s), src[100:150]), "offset d2h"
    h = np.zeros(n, np.uint8)
    b.memcpy(0, h.ctypes.data, src.ctypes.data, n, "h2h", s)
    b.stream_synchronize(0, s)
    assert np.array_equal(h, src), "h2h lost bytes"
    b.memcpy(0, q, p, 0, "d2d", s)      # zero bytes: nothing, no error
    b.free(0, p)
    b.free(0, q)


@check
def memset_fill(b: Backend, t: Target) -> None:
    """memset writes a byte; fill (capability ``device_fill``) writes 1, 2, 4 and 8-byte
    patterns."""
    _need_data(t)
    s = b.default_stream(0)
    p = _malloc(b, 0, 1024)
    b.memset(0, p, 0xAB, 1024, s)
    assert (_download(b, 0, p, 1024, s) == 0xAB).all(), "memset"
    patterns = (b"\x01", b"\x01\x02", b"\x01\x02\x03\x04", bytes(range(1, 9)))
    for pattern in patterns if _caps(b).device_fill else ():
        b.fill(0, p, pattern, 1024 // len(pattern), s)
        got = _download(b, 0, p, 1024, s).tobytes()
        assert got == pattern * (1024 // len(pattern)), f"fill with {pattern!r}"
    b.free(0, p)


# ---------------------------------------------------------------------- streams and events

@check
def stream_order(b: Backend, t: Target) -> None:
    """Work on one stream runs in submission order; stream_query is True once done."""
    _need_data(t)
    s = b.stream_create(0, 0)
    p = _malloc(b, 0, 256)
    ones = np.ones(256, np.uint8)
    b.memcpy(0, p, ones.ctypes.data, 256, "h2d", s)
    b.memset(0, p, 7, 128, s)            # after the upload: overwrites its first half
    out = np.zeros(256, np.uint8)
    b.memcpy(0, out.ctypes.data, p, 256, "d2h", s)
    b.stream_synchronize(0, s)
    assert b.stream_query(0, s) is True
    assert (out[:128] == 7).all() and (out[128:] == 1).all(), "work ran out of order"
    b.free(0, p)
    b.stream_destroy(0, s)


@check
def events_order_streams(b: Backend, t: Target) -> None:
    """stream_wait_event makes one stream wait for work recorded on another (gated)."""
    _need(b, "host_functions")
    _need_data(t)
    s1, s2 = b.stream_create(0, 0), b.stream_create(0, 0)
    p = _malloc(b, 0, 256)
    b.memset(0, p, 0, 256, s1)
    b.stream_synchronize(0, s1)
    e = b.event_create(0, False, False, False)
    assert isinstance(e, int) and e != 0, f"event_create returned {e!r}"
    gate = _Gate()
    b.launch_host_func(0, gate, s1)
    b.memset(0, p, 9, 256, s1)           # held behind the gate
    b.event_record(0, e, s1)
    b.stream_wait_event(0, s2, e)
    # the copy must not block this thread before the gate opens: pinned memory where there is
    # some (a copy to pageable memory returns only once it ran, on CUDA)
    pinned = b.host_malloc(256) if _caps(b).pinned_host_memory else 0
    keep = np.zeros(256, np.uint8)
    out = _host_array(pinned, 256) if pinned else keep
    out[:] = 0
    b.memcpy(0, out.ctypes.data, p, 256, "d2h", s2)   # must wait for the memset
    copied, launcher, inline = threading.Event(), threading.get_ident(), []

    def mark() -> None:       # a synchronous backend runs it inline: that is not early
        if threading.get_ident() == launcher:
            inline.append(True)
        copied.set()

    b.launch_host_func(0, mark, s2)
    # s2 must stay behind the gated s1: a copy that ran already is the failure. The bounded
    # wait gives a backend that ignores the wait time to show it (else the race between s1's
    # memset and s2's copy after the gate opens decides, and a broken backend can pass)
    ran_early = copied.wait(0.25) and not inline
    gate.open()
    b.stream_synchronize(0, s2)
    ok = bool((out == 9).all()) and not ran_early
    if pinned:
        b.host_free(pinned)
    assert ok, "stream_wait_event did not order the second stream"
    b.event_synchronize(0, e)
    assert b.event_query(0, e) is True
    b.event_destroy(0, e)
    b.free(0, p)
    for s in (s1, s2):
        b.stream_destroy(0, s)


@check
def event_timing(b: Backend, t: Target) -> None:
    """Timing events give a non-negative elapsed time; a non-timing one is refused."""
    s = b.default_stream(0)
    e1, e2 = b.event_create(0, True, False, False), b.event_create(0, True, False, False)
    b.event_record(0, e1, s)
    b.event_record(0, e2, s)
    b.event_synchronize(0, e2)
    ms = b.event_elapsed_time(0, e1, e2)
    assert isinstance(ms, float) and ms >= 0.0, f"elapsed time {ms!r}"
    plain = b.event_create(0, False, False, False)
    b.event_record(0, plain, s)
    b.event_synchronize(0, plain)
    if t.holds_data:   # a simulated device keeps no times to refuse
        try:
            b.event_elapsed_time(0, e1, plain)
        except ARGUMENT_ERRORS:
            pass
        else:
            raise AssertionError("elapsed time of an event made without timing was given")
    for e in (e1, e2, plain):
        b.event_destroy(0, e)


@check
def synchronize_waits_for_every_stream(b: Backend, t: Target) -> None:
    """synchronize(index) waits for all streams of the device, destroyed ones included."""
    _need(b, "host_functions")
    ran: list[int] = []
    gate = _Gate()
    s = b.stream_create(0, 0)
    b.launch_host_func(0, gate, s)
    b.launch_host_func(0, lambda: ran.append(1), s)
    b.stream_destroy(0, s)               # its queued work still runs
    gate.open()
    b.synchronize(0)
    assert ran == [1], "synchronize returned before a destroyed stream's work ran"


@check
def host_function_exceptions(b: Backend, t: Target) -> None:
    """The first exception of a host function surfaces once, as an AcceleratorError caused
    by it, at its launch (synchronous backends) or at the next synchronization."""
    _need(b, "host_functions")
    s = b.stream_create(0, 0)

    def first() -> None:
        raise ValueError("conformance: first")

    def second() -> None:
        raise KeyError("conformance: second")

    errors = _first_kept_error([
        lambda: b.launch_host_func(0, first, s),
        lambda: b.launch_host_func(0, second, s),
        lambda: b.stream_synchronize(0, s),
    ])
    assert errors, "a host function's exception was never raised"
    assert isinstance(errors[0].__cause__, ValueError), (
        f"the first exception kept is {errors[0].__cause__!r}, not the first raised")
    assert len(errors) <= 2
    again = _first_kept_error([lambda: b.stream_synchronize(0, s), lambda: b.synchronize(0)])
    assert not again, f"a kept exception was raised twice: {again}"
    ok: list[int] = []
    b.launch_host_func(0, lambda: ok.append(1), s)
    b.stream_synchronize(0, s)
    assert ok == [1], "the stream does not run work after a host function raised"
    b.stream_destroy(0, s)


@check
def bad_arguments(b: Backend, t: Target) -> None:
    """Bad handles and indices raise accelrt's or the builtin argument errors (or are
    ignored), never anything else."""
    n = b.device_count()
    calls: list[Callable[[], object]] = [
        lambda: b.get_device_properties(n),
        lambda: b.stream_synchronize(0, StreamHandle(987654321)),
        lambda: b.event_query(0, 987654321),  # type: ignore[arg-type]
        lambda: b.malloc(0, -1),
        lambda: b.memset(0, 0, 0, 16, b.default_stream(0)),
    ]
    for call in calls:
        try:
            call()
        except ARGUMENT_ERRORS:
            pass


# ---------------------------------------------------------------------- optional operations

@check
def virtual_memory(b: Backend, t: Target) -> None:
    """vm_reserve/vm_map/vm_unmap/vm_release on granularity-aligned ranges."""
    _need(b, "virtual_memory")
    g = b.vm_granularity(0)
    assert g > 0 and g & (g - 1) == 0, f"granularity {g} is not a power of two"
    base = b.vm_reserve(0, 2 * g)
    assert base and base % g == 0, f"vm_reserve returned {base!r}"
    assert b.vm_map(0, base, g) is True
    if t.holds_data:
        s = b.default_stream(0)
        b.memset(0, base, 5, 4096, s)
        assert (_download(b, 0, base, 4096, s) == 5).all(), "mapped memory lost a memset"
    b.synchronize(0)
    b.vm_unmap(0, base, g)
    b.vm_release(0, base, 2 * g)


def _sync_refused(b: Backend) -> bool:
    """True if ``b.synchronize(0)`` raises ``DeviceError`` in the calling thread."""
    try:
        b.synchronize(0)
    except DeviceError:
        return True
    return False


@check
def graph_capture_modes(b: Backend, t: Target) -> None:
    """A capture begun in a mode refuses a synchronize of its device where CUDA's mode does:
    ``"global"`` in every thread, ``"thread_local"`` in its own thread only, ``"relaxed"`` in
    none; its own stream is refused in every mode."""
    _need(b, "graphs")
    _need(b, "graph_capture_modes")
    s = b.stream_create(0, 0)
    for mode, own, other in (("global", True, True), ("thread_local", True, False),
                             ("relaxed", False, False)):
        b.graph_capture_begin_mode(0, s, mode)
        try:
            assert b.stream_is_capturing(0, s), f"{mode}: the stream is not capturing"
            assert _sync_refused(b) == own, f"{mode}: a synchronize in the capturing thread"
            seen: list[bool] = []
            worker = threading.Thread(target=lambda: seen.append(_sync_refused(b)))
            worker.start()
            worker.join()
            assert seen == [other], f"{mode}: a synchronize in another thread"
            try:
                b.stream_synchronize(0, s)
            except DeviceError:
                pass
            else:
                raise AssertionError(f"{mode}: the capturing stream was synchronized")
        finally:
            b.graph_destroy(0, b.graph_capture_end(0, s))
    b.stream_destroy(0, s)


@check
def graphs(b: Backend, t: Target) -> None:
    """Work captured on a stream runs on replay, not during the capture."""
    _need(b, "graphs")
    _need_data(t)
    s = b.stream_create(0, 0)
    p = _malloc(b, 0, 512)
    b.memset(0, p, 0, 512, s)
    b.stream_synchronize(0, s)
    b.graph_capture_begin(0, s)
    assert b.stream_is_capturing(0, s)
    b.memset(0, p, 7, 512, s)
    g = b.graph_capture_end(0, s)
    assert not b.stream_is_capturing(0, s)
    other = b.default_stream(0)
    assert (_download(b, 0, p, 512, other) == 0).all(), "captured work ran during capture"
    nodes = b.graph_node_count(0, g)
    assert nodes is None or nodes >= 1, f"graph_node_count is {nodes}"
    caps = _caps(b)
    if caps.graph_dot:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "graph.dot")
            b.graph_debug_dot(0, g, path, True)
            with open(path, encoding="utf-8", errors="replace") as f:
                assert "digraph" in f.read(), "graph_debug_dot wrote no DOT digraph"
    first = b.graph_instantiate(0, g)
    assert isinstance(first, int), f"graph_instantiate returned {first!r}"
    if caps.graph_native_handles:
        raw, exe = b.graph_native_handles(0, g)
        assert raw and exe, f"graph_native_handles after instantiate: {(raw, exe)}"
    b.graph_replay(0, g, s)
    b.stream_synchronize(0, s)
    assert (_download(b, 0, p, 512, other) == 7).all(), "replay did not run the work"
    b.memset(0, p, 0, 512, s)
    b.graph_instantiate(0, g)      # again: the new executable graph replays the same work
    b.graph_replay(0, g, s)
    b.stream_synchronize(0, s)
    assert (_download(b, 0, p, 512, other) == 7).all(), "a re-instantiated graph did not run"
    b.graph_destroy(0, g)
    b.free(0, p)
    b.stream_destroy(0, s)


@check
def pinned_host_memory(b: Backend, t: Target) -> None:
    """host_malloc gives usable host memory that copies to and from the device."""
    _need(b, "pinned_host_memory")
    h = b.host_malloc(4096)
    assert isinstance(h, int) and h > 0, f"host_malloc returned {h!r}"
    if t.holds_data:
        import ctypes
        ctypes.memset(h, 3, 4096)
        s = b.default_stream(0)
        p = _malloc(b, 0, 4096)
        b.memcpy(0, p, h, 4096, "h2d", s)
        assert (_download(b, 0, p, 4096, s) == 3).all(), "h2d from pinned memory"
        b.free(0, p)
    b.host_free(h)


@check
def peer_copies(b: Backend, t: Target) -> None:
    """memcpy_peer copies between two devices, ordered on the source's stream."""
    _need(b, "peer_copies")
    _need_data(t)
    if b.device_count() < 2:
        raise Skipped("needs two devices")
    src = np.arange(256, dtype=np.uint8)
    p0, p1 = _malloc(b, 0, 256), _malloc(b, 1, 256)
    _upload(b, 0, p0, src, b.default_stream(0))
    s0 = b.default_stream(0)
    b.memcpy_peer(1, p1, 0, p0, 256, s0)
    b.stream_synchronize(0, s0)
    assert np.array_equal(_download(b, 1, p1, 256, b.default_stream(1)), src)
    b.free(0, p0)
    b.free(1, p1)


@check
def interprocess(b: Backend, t: Target) -> None:
    """Interprocess events and memory give byte handles."""
    caps = _caps(b)
    if not (caps.interprocess_events or caps.interprocess_memory):
        raise Skipped(f"the {b.name} backend declares no interprocess sharing")
    if caps.interprocess_events:
        e = b.event_create(0, False, False, True)
        h = b.event_ipc_handle(0, e)
        assert isinstance(h, bytes) and h, "event_ipc_handle gave no bytes"
        b.event_destroy(0, e)
    if caps.interprocess_memory:
        p = _malloc(b, 0, 1 << 20)
        h = b.ipc_mem_handle(0, p)
        assert isinstance(h, bytes) and h, "ipc_mem_handle gave no bytes"
        b.free(0, p)


@check
def close(b: Backend, t: Target) -> None:
    """close() is idempotent, runs queued work first, and operations then raise."""
    ran: list[int] = []
    host_functions = _caps(b).host_functions
    if host_functions:
        b.launch_host_func(0, lambda: ran.append(1), b.default_stream(0))
    b.close()
    b.close()
    assert b.closed
    if host_functions:
        assert ran == [1], "close() dropped queued work"
    try:
        b.malloc(0, 64)
    except ValueError as exc:
        assert "closed" in str(exc), f"the error does not say the backend is closed: {exc}"
    else:
        raise AssertionError("malloc on a closed backend did not raise")


@check
def streams_idle_hint(b: Backend, t: Target) -> None:
    """``Backend.streams_idle`` reads True only while every stream's work is done: after
    queued copies and host functions, not during a graph capture, and never after close()."""
    s = b.stream_create(0, 0)
    p = _malloc(b, 0, 256)
    b.memset(0, p, 1, 256, s)
    if b.streams_idle:
        assert b.stream_query(0, s), "streams_idle is True while a memset is pending"
    if _caps(b).host_functions:
        ran: list[int] = []
        b.launch_host_func(0, lambda: ran.append(1), s)
        if b.streams_idle:
            assert ran == [1], "streams_idle is True while a host function is pending"
    b.stream_synchronize(0, s)
    if _caps(b).graphs:
        b.graph_capture_begin(0, s)
        try:
            assert not b.streams_idle, "streams_idle is True while a capture is open"
        finally:
            b.graph_destroy(0, b.graph_capture_end(0, s))
    b.free(0, p)
    b.stream_destroy(0, s)
    b.close()
    assert not b.streams_idle, "streams_idle is True after close()"


# ---------------------------------------------------------------------- running

def run_check(name: str, target: Target) -> str:
    """Run one check on a fresh instance (closed afterwards); ``"passed"`` or ``"skipped:
    <reason>"``; an ``AssertionError`` (or the backend's exception) when it fails."""
    b = target.factory()
    try:
        CHECKS[name](b, target)
    except Skipped as exc:
        return f"skipped: {exc}"
    except AssertionError as exc:   # say which check, and of which backend, failed
        raise AssertionError(f"conformance check {name!r} failed on the {b.name} backend: "
                             f"{exc}") from exc
    finally:
        if not b.closed:
            b.close()
    return "passed"


def run(factory: Callable[[], Backend], *, holds_data: bool = True,
        checks: Iterable[str] | None = None) -> dict[str, str]:
    """Run the checks (all by default) on instances from ``factory``; the outcome of each.

    Raises:
        AssertionError: a check failed (the message says which and why).
        KeyError: an unknown check name.
    """
    target = Target(factory, holds_data)
    names = list(CHECKS) if checks is None else list(checks)
    return {name: run_check(name, target) for name in names}


def make_tests(factory: Callable[[], Backend], *, holds_data: bool = True) -> Any:
    """A pytest test function running every check on instances from ``factory``; assign it
    to a ``test_*`` name in a test module."""
    # (imported by name: pytest is a test-time dependency, and the compiled build type-checks
    # this package, as the allocator's test subclass lives here, without the test extra)
    pytest: Any = importlib.import_module("pytest")
    target = Target(factory, holds_data)

    def test_backend_conformance(check_name: str) -> None:
        outcome = run_check(check_name, target)
        if outcome.startswith("skipped: "):
            pytest.skip(outcome[len("skipped: "):])

    return pytest.mark.parametrize("check_name", sorted(CHECKS))(test_backend_conformance)
