"""Every error a backend's raw operations raise is one the library documents.

Bad calls (wrong types, bad values, out-of-range indices, unknown handles, overrunning copies,
wrong states, failing host functions) are driven into each available backend. Every exception
must be a ``TypeError``/``ValueError``/``IndexError`` or an :class:`accelrt.AcceleratorError`;
a raw ``OSError``, ``ctypes.ArgumentError``, numpy error or ``KeyError`` escaping a backend is an
unmapped backend error and fails the test (httpx's ``test_all_exceptions_mapped`` idea).

The cpu backend is the reference: it validates every argument, so there each bad call must
raise. Other backends (cuda, opencl, third-party) are only checked for the *type* of what they
raise, because the core range-checks device indices before calling them.

Pointer arguments that the host side of a copy reads or writes are only ever a live 1 MiB host
buffer or an invalid *type*/non-positive value, and byte counts never exceed that buffer, so no
case can touch memory it does not own.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accelrt as acc
from accelrt import _backend as registry
from accelrt._backend import Backend
from accelrt.backends.cpu import CpuBackend

ALLOWED = (TypeError, ValueError, IndexError, acc.AcceleratorError)
DEV_BYTES = 4096          # size of the device allocation the cases use
HOST_BYTES = 1 << 20      # size of the host buffer; no case copies more than this
#: backends whose free memory is total less what was allocated through them (cuda asks the
#: driver, whose answer other processes change)
BOOKKEEPING = frozenset({"cpu", "opencl"})
OPTIONAL = frozenset(name for name, fn in vars(Backend).items()
                     if callable(fn) and not getattr(fn, "__isabstractmethod__", False))


def _backend_params() -> list[Any]:
    params: list[Any] = [pytest.param("cpu-sync", id="cpu-sync"),
                         pytest.param("cpu-async", id="cpu-async")]
    for name in registry.registered():
        if name == "cpu":
            continue
        reason = registry.unavailable_reason(name)
        marks = [pytest.mark.skip(reason=f"backend {name!r} unavailable: {reason}")] if reason else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@dataclass
class Ctx:
    """A backend plus live objects the bad calls refer to."""

    b: Backend
    reference: bool               # the cpu backend: every bad call must raise
    n: int                        # device count
    stream: int                   # a live non-default stream of device 0
    event: int                    # a live timing event of device 0
    event_nt: int                 # a live non-timing event of device 0
    ptr: int                      # DEV_BYTES of device 0 memory
    host: np.ndarray              # HOST_BYTES of host memory
    owned: bool                   # close the backend at teardown
    free_before: int              # device 0's free memory before the fixture's allocation
    extra: list[Callable[[], None]] = field(default_factory=list)  # teardown steps

    @property
    def hptr(self) -> int:
        return int(self.host.ctypes.data)


def _supports(b: Backend, method: str) -> bool:
    """False for an optional method the backend leaves at the ABC's default."""
    return getattr(type(b), method) is not getattr(Backend, method) or method not in OPTIONAL


def _make_ctx(param: str) -> Ctx:
    if param.startswith("cpu-"):
        b: Backend = CpuBackend(num_devices=2, memory_limit="64MiB",
                                async_streams=param == "cpu-async", name="cpu")
        reference, owned = True, True
    else:
        b, reference, owned = registry.get_backend(param), False, False
    b.init_device(0)
    free_before = b.get_memory_info(0)[0]
    stream = b.stream_create(0, 0)
    event = b.event_create(0, True, False, False)
    event_nt = b.event_create(0, False, False, False)
    # Backends other than the reference may not range-check device pointers: give them
    # room so that "overrunning" cases still write only memory this test owns.
    ptr = b.malloc(0, DEV_BYTES if reference else 4 * DEV_BYTES)
    assert ptr, "the fixture's small allocation failed"
    host = np.zeros(HOST_BYTES, dtype=np.uint8)
    return Ctx(b, reference, b.device_count(), stream, event, event_nt, ptr, host, owned,
               free_before)


def _settle(ctx: Ctx) -> None:
    """Finish all work, letting kept (already checked) errors surface and clear."""
    for _ in range(3):
        try:
            ctx.b.synchronize(0)
            ctx.b.stream_synchronize(0, ctx.stream)
            ctx.b.stream_synchronize(0, ctx.b.default_stream(0))
            return
        except acc.DeviceError:
            continue


@pytest.fixture(params=_backend_params())
def ctx(request: pytest.FixtureRequest) -> Iterator[Ctx]:
    c = _make_ctx(request.param)
    yield c
    for step in reversed(c.extra):
        step()
    _settle(c)
    b = c.b
    b.free(0, c.ptr)
    b.event_destroy(0, c.event)
    b.event_destroy(0, c.event_nt)
    b.stream_destroy(0, c.stream)
    if b.name in BOOKKEEPING:
        # every raw allocation the test made is freed (the leak check of tests/conftest.py
        # sees only caching allocators' memory): the registered instances live on for the
        # session, and a later test compares their free memory with its own start
        assert b.get_memory_info(0)[0] == c.free_before, "the test left raw device memory"
    if c.owned and isinstance(b, CpuBackend):
        b.close()


def _check(ctx: Ctx, name: str, call: Callable[[], Any], must_raise: bool = True) -> None:
    try:
        call()
    except AssertionError:
        raise
    except NotImplementedError as exc:
        if isinstance(exc, acc.AcceleratorError):
            return
        method = name.split(":", 1)[0]
        assert not _supports(ctx.b, method), (
            f"{name}: {ctx.b.name} implements {method} but raised bare NotImplementedError: {exc}")
        return
    except ALLOWED:
        return
    except Exception as exc:  # noqa: BLE001 - this is what the test looks for
        pytest.fail(f"{name}: unmapped backend error from {ctx.b.name}: "
                    f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    else:
        if must_raise and ctx.reference:
            pytest.fail(f"{name}: the reference backend accepted a bad call without raising")


# ------------------------------------------------------------------ the bad calls
# Each case: (id, function of ctx making the call). The id starts with the method's name.

def _bad_index_cases() -> list[tuple[str, Callable[[Ctx], Any]]]:
    cases: list[tuple[str, Callable[[Ctx], Any]]] = []
    bad = {"neg": lambda c: -1, "count": lambda c: c.n, "str": lambda c: "0",
           "float": lambda c: 0.0, "none": lambda c: None, "bool": lambda c: True}
    per_method: dict[str, Callable[[Ctx, Any], Any]] = {
        "get_device_properties": lambda c, i: c.b.get_device_properties(i),
        "get_memory_info": lambda c, i: c.b.get_memory_info(i),
        "malloc": lambda c, i: c.b.malloc(i, 256),
        "stream_create": lambda c, i: c.b.stream_create(i, 0),
        "event_create": lambda c, i: c.b.event_create(i, False, False, False),
        "synchronize": lambda c, i: c.b.synchronize(i),
        "stream_priority_range": lambda c, i: c.b.stream_priority_range(i),
        "can_access_peer": lambda c, i: c.b.can_access_peer(0, i),
        "vm_granularity": lambda c, i: c.b.vm_granularity(i),
        "vm_reserve": lambda c, i: c.b.vm_reserve(i, 2 << 20),
        "memset": lambda c, i: c.b.memset(i, c.ptr, 0, 16, 0),
        "stream_query": lambda c, i: c.b.stream_query(i, c.stream),
        "event_record": lambda c, i: c.b.event_record(i, c.event, 0),
        "graph_supported": lambda c, i: c.b.graph_supported(i),
        "free": lambda c, i: c.b.free(i, c.ptr + 1),
    }
    for method, fn in per_method.items():
        for tag, idx in bad.items():
            cases.append((f"{method}:index-{tag}",
                          lambda c, fn=fn, idx=idx: fn(c, idx(c))))
    return cases


def _raise_in_host_func(exc: BaseException) -> Callable[[], None]:
    def fn() -> None:
        raise exc
    return fn


def _alloc_then_double_free(c: Ctx) -> None:
    p = c.b.malloc(0, 512)
    assert p
    c.b.free(0, p)
    c.b.free(0, p)


def _host_double_free(c: Ctx) -> None:
    p = c.b.host_malloc(512)
    c.b.host_free(p)
    c.b.host_free(p)


def _reserve(c: Ctx) -> tuple[int, int]:
    if not c.b.vm_supported(0):
        pytest.skip(f"{c.b.name} has no virtual memory")
    g = c.b.vm_granularity(0)
    base = c.b.vm_reserve(0, 2 * g)
    c.extra.append(lambda: c.b.vm_release(0, base, 2 * g))
    return base, g


def _vm_map_twice(c: Ctx) -> None:
    base, g = _reserve(c)
    assert c.b.vm_map(0, base, g)
    c.extra.append(lambda: c.b.vm_unmap(0, base, g))
    c.b.vm_map(0, base, g)


def _vm_release_mapped(c: Ctx) -> None:
    base, g = _reserve(c)
    assert c.b.vm_map(0, base, g)
    c.extra.append(lambda: c.b.vm_unmap(0, base, g))
    c.b.vm_release(0, base, 2 * g)


def _vm_copy_unmapped(c: Ctx) -> None:
    base, _ = _reserve(c)
    c.b.memset(0, base, 1, 64, 0)


def _capture(c: Ctx) -> None:
    if not c.b.graph_supported(0):
        raise acc.CaptureNotSupportedError("no graphs")
    c.b.graph_capture_begin(0, c.stream)

    def end() -> None:
        g = c.b.graph_capture_end(0, c.stream)
        c.b.graph_destroy(0, g)
    c.extra.append(end)


def _sync_while_capturing(c: Ctx) -> None:
    _capture(c)
    c.b.stream_synchronize(0, c.stream)


def _query_event_in_capture(c: Ctx) -> None:
    _capture(c)
    c.b.event_record(0, c.event, c.stream)
    c.b.event_query(0, c.event)


def _capture_twice(c: Ctx) -> None:
    _capture(c)
    c.b.graph_capture_begin(0, c.stream)


def _destroy_capturing(c: Ctx) -> None:
    _capture(c)
    c.b.stream_destroy(0, c.stream)


def _elapsed_unrecorded(c: Ctx) -> None:
    e2 = c.b.event_create(0, True, False, False)
    c.extra.append(lambda: c.b.event_destroy(0, e2))
    c.b.event_elapsed_time(0, c.event, e2)


def _elapsed_non_timing(c: Ctx) -> None:
    c.b.event_record(0, c.event, 0)
    c.b.event_record(0, c.event_nt, 0)
    c.b.event_synchronize(0, c.event_nt)
    c.b.event_elapsed_time(0, c.event, c.event_nt)


def _use_destroyed_stream(c: Ctx) -> None:
    s = c.b.stream_create(0, 0)
    c.b.stream_destroy(0, s)
    c.b.memset(0, c.ptr, 0, 16, s)


def _use_destroyed_event(c: Ctx) -> None:
    e = c.b.event_create(0, False, False, False)
    c.b.event_destroy(0, e)
    c.b.event_record(0, e, 0)


def _stream_of_other_device(c: Ctx) -> None:
    if c.n < 2:
        raise ValueError("single device: nothing to check")
    c.b.memset(1, c.ptr, 0, 16, c.stream)


def _host_func_error(exc: BaseException, stream_attr: str) -> Callable[[Ctx], None]:
    def call(c: Ctx) -> None:
        s = getattr(c, stream_attr) if stream_attr else c.b.default_stream(0)
        raised: list[BaseException] = []
        for step in (lambda: c.b.launch_host_func(0, _raise_in_host_func(exc), s),
                     lambda: c.b.stream_synchronize(0, s)):
            try:
                step()
            except BaseException as err:  # noqa: BLE001 - checked below
                raised.append(err)
        if not _supports(c.b, "launch_host_func"):
            return
        assert raised, f"the failing host function ({type(exc).__name__}) was never reported"
        for err in raised:
            if not isinstance(err, acc.DeviceError):
                raise err  # the test's _check reports it as unmapped (or allowed)
        assert raised[0].__cause__ is exc, "the DeviceError must chain the original exception"
        c.b.stream_synchronize(0, s)   # the error was reported once, then cleared
        raise raised[0]
    return call


CASES: list[tuple[str, Callable[[Ctx], Any]]] = _bad_index_cases() + [
    # memory
    ("malloc:size-zero", lambda c: c.b.malloc(0, 0)),
    ("malloc:size-neg", lambda c: c.b.malloc(0, -5)),
    ("malloc:size-str", lambda c: c.b.malloc(0, "16")),
    ("malloc:size-float", lambda c: c.b.malloc(0, 16.0)),
    ("malloc:size-ndarray", lambda c: c.b.malloc(0, np.array([16, 16]))),
    ("free:unknown", lambda c: c.b.free(0, c.ptr + 256)),
    ("free:zero", lambda c: c.b.free(0, 0)),
    ("free:neg", lambda c: c.b.free(0, -1)),
    ("free:str", lambda c: c.b.free(0, "0x10")),
    ("free:host-buffer", lambda c: c.b.free(0, c.hptr)),
    ("free:double", _alloc_then_double_free),
    ("host_malloc:size-neg", lambda c: c.b.host_malloc(-1)),
    ("host_malloc:size-str", lambda c: c.b.host_malloc("1")),
    ("host_free:unknown", lambda c: c.b.host_free(c.hptr)),
    ("host_free:double", _host_double_free),
    ("host_free:none", lambda c: c.b.host_free(None)),
    # virtual memory
    ("vm_reserve:unaligned", lambda c: c.b.vm_reserve(0, 12345)),
    ("vm_reserve:neg", lambda c: c.b.vm_reserve(0, -(2 << 20))),
    ("vm_reserve:str", lambda c: c.b.vm_reserve(0, "2MiB")),
    ("vm_reserve:huge", lambda c: c.b.vm_reserve(0, 1 << 62)),
    ("vm_reserve:size_t-overflow", lambda c: c.b.vm_reserve(0, 1 << 64)),
    ("vm_map:not-reserved", lambda c: c.b.vm_map(0, 2 << 20, 2 << 20)),
    ("vm_map:unaligned", lambda c: c.b.vm_map(0, c.ptr, 100)),
    ("vm_map:twice", _vm_map_twice),
    ("vm_unmap:not-mapped", lambda c: c.b.vm_unmap(0, 2 << 20, 2 << 20)),
    ("vm_release:unknown", lambda c: c.b.vm_release(0, 4 << 20, 2 << 20)),
    ("vm_release:still-mapped", _vm_release_mapped),
    ("memset:unmapped-reservation", _vm_copy_unmapped),
    # copies
    ("memcpy:kind-bad", lambda c: c.b.memcpy(0, c.ptr, c.hptr, 16, "x2y", 0)),
    ("memcpy:kind-int", lambda c: c.b.memcpy(0, c.ptr, c.hptr, 16, 1, 0)),
    ("memcpy:nbytes-neg", lambda c: c.b.memcpy(0, c.ptr, c.hptr, -1, "h2d", 0)),
    ("memcpy:nbytes-float", lambda c: c.b.memcpy(0, c.ptr, c.hptr, 1.5, "h2d", 0)),
    ("memcpy:h2d-overrun", lambda c: c.b.memcpy(0, c.ptr, c.hptr, DEV_BYTES + 1, "h2d", 0)),
    ("memcpy:d2h-overrun", lambda c: c.b.memcpy(0, c.hptr, c.ptr, DEV_BYTES * 2, "d2h", 0)),
    ("memcpy:d2d-overrun",
     lambda c: c.b.memcpy(0, c.ptr + 16, c.ptr, DEV_BYTES, "d2d", 0)),
    ("memcpy:h2d-dst-host", lambda c: c.b.memcpy(0, c.hptr, c.hptr + 64, 16, "h2d", 0)),
    ("memcpy:dst-zero", lambda c: c.b.memcpy(0, 0, c.hptr, 16, "h2d", 0)),
    ("memcpy:src-none", lambda c: c.b.memcpy(0, c.ptr, None, 16, "h2d", 0)),
    ("memcpy:dst-str", lambda c: c.b.memcpy(0, "p", c.hptr, 16, "h2d", 0)),
    ("memcpy:stream-unknown", lambda c: c.b.memcpy(0, c.ptr, c.hptr, 16, "h2d", 987654)),
    ("memcpy:stream-str", lambda c: c.b.memcpy(0, c.ptr, c.hptr, 16, "h2d", "s")),
    ("memcpy:stream-other-device", _stream_of_other_device),
    ("memcpy:stream-destroyed", _use_destroyed_stream),
    ("memcpy_peer:index-bad", lambda c: c.b.memcpy_peer(7, c.ptr, 0, c.ptr, 16, 0)),
    ("memcpy_peer:overrun", lambda c: c.b.memcpy_peer(0, c.ptr, 0, c.ptr, DEV_BYTES + 8, 0)),
    ("memcpy_peer:dst-host", lambda c: c.b.memcpy_peer(0, c.hptr, 0, c.ptr, 16, 0)),
    ("memset:value-big", lambda c: c.b.memset(0, c.ptr, 256, 16, 0)),
    ("memset:value-neg", lambda c: c.b.memset(0, c.ptr, -1, 16, 0)),
    ("memset:value-str", lambda c: c.b.memset(0, c.ptr, "a", 16, 0)),
    ("memset:value-float", lambda c: c.b.memset(0, c.ptr, 1.0, 16, 0)),
    ("memset:overrun", lambda c: c.b.memset(0, c.ptr, 0, DEV_BYTES + 1, 0)),
    ("memset:host-memory", lambda c: c.b.memset(0, c.hptr, 0, 16, 0)),
    ("memset:nbytes-neg", lambda c: c.b.memset(0, c.ptr, 0, -16, 0)),
    ("fill:pattern-3-bytes", lambda c: c.b.fill(0, c.ptr, b"abc", 4, 0)),
    ("fill:pattern-empty", lambda c: c.b.fill(0, c.ptr, b"", 4, 0)),
    ("fill:pattern-str", lambda c: c.b.fill(0, c.ptr, "ab", 4, 0)),
    ("fill:pattern-int", lambda c: c.b.fill(0, c.ptr, 7, 4, 0)),
    ("fill:count-neg", lambda c: c.b.fill(0, c.ptr, b"ab", -4, 0)),
    ("fill:overrun", lambda c: c.b.fill(0, c.ptr, b"abcdefgh", DEV_BYTES // 8 + 1, 0)),
    ("launch_host_func:not-callable", lambda c: c.b.launch_host_func(0, 42, 0)),
    ("launch_host_func:oserror-default",
     _host_func_error(OSError(5, "I/O error in a host function"), "")),
    ("launch_host_func:oserror-stream",
     _host_func_error(OSError(5, "I/O error in a host function"), "stream")),
    ("launch_host_func:ctypes-error",
     _host_func_error(ctypes.ArgumentError("argument 1: wrong type"), "stream")),
    ("launch_host_func:numpy-error",
     _host_func_error(np.linalg.LinAlgError("Singular matrix"), "stream")),
    ("launch_host_func:keyerror", _host_func_error(KeyError("missing"), "stream")),
    ("launch_host_func:typeerror", _host_func_error(TypeError("inside the work"), "stream")),
    # streams
    ("stream_create:priority-str", lambda c: c.b.stream_create(0, "high")),
    ("stream_create:priority-none", lambda c: c.b.stream_create(0, None)),
    ("stream_destroy:default", lambda c: c.b.stream_destroy(0, c.b.default_stream(0))),
    ("stream_destroy:unknown", lambda c: c.b.stream_destroy(0, 987654)),
    ("stream_destroy:list", lambda c: c.b.stream_destroy(0, [1])),
    ("stream_query:unknown", lambda c: c.b.stream_query(0, 987654)),
    ("stream_query:unhashable", lambda c: c.b.stream_query(0, {})),
    ("stream_synchronize:unknown", lambda c: c.b.stream_synchronize(0, 987654)),
    ("stream_wait_event:event-unknown", lambda c: c.b.stream_wait_event(0, c.stream, 987654)),
    ("stream_wait_event:event-str", lambda c: c.b.stream_wait_event(0, c.stream, "e")),
    ("stream_wait_event:stream-unknown",
     lambda c: c.b.stream_wait_event(0, 987654, c.event)),
    # events
    ("event_create:interprocess-timing",
     lambda c: c.b.event_create(0, True, False, True) if c.reference else None),
    ("event_destroy:unknown", lambda c: c.b.event_destroy(0, 987654)),
    ("event_destroy:zero", lambda c: c.b.event_destroy(0, 0)),
    ("event_record:unknown", lambda c: c.b.event_record(0, 987654, 0)),
    ("event_record:stream-unknown", lambda c: c.b.event_record(0, c.event, 987654)),
    ("event_record:destroyed", _use_destroyed_event),
    ("event_query:unknown", lambda c: c.b.event_query(0, 987654)),
    ("event_query:float", lambda c: c.b.event_query(0, 1.5)),
    ("event_synchronize:unknown", lambda c: c.b.event_synchronize(0, 987654)),
    ("event_elapsed_time:unrecorded", _elapsed_unrecorded),
    ("event_elapsed_time:non-timing", _elapsed_non_timing),
    ("event_elapsed_time:unknown", lambda c: c.b.event_elapsed_time(0, c.event, 987654)),
    ("event_ipc_handle:non-ipc", lambda c: c.b.event_ipc_handle(0, c.event_nt)),
    ("event_from_ipc_handle:garbage", lambda c: c.b.event_from_ipc_handle(0, b"\x00garbage")),
    ("event_from_ipc_handle:str", lambda c: c.b.event_from_ipc_handle(0, "handle")),
    # interprocess memory
    ("ipc_mem_handle:private-or-unknown", lambda c: c.b.ipc_mem_handle(0, c.ptr + 256)),
    ("ipc_mem_handle:str", lambda c: c.b.ipc_mem_handle(0, "p")),
    ("ipc_open_mem_handle:garbage", lambda c: c.b.ipc_open_mem_handle(0, b"\x00garbage")),
    ("ipc_open_mem_handle:str", lambda c: c.b.ipc_open_mem_handle(0, "handle")),
    ("ipc_close_mem_handle:not-opened", lambda c: c.b.ipc_close_mem_handle(0, c.ptr)),
    # graphs
    ("graph_capture_begin:default-stream",
     lambda c: c.b.graph_capture_begin(0, c.b.default_stream(0))),
    ("graph_capture_begin:twice", _capture_twice),
    ("graph_capture_end:not-capturing", lambda c: c.b.graph_capture_end(0, c.stream)),
    ("graph_replay:unknown", lambda c: c.b.graph_replay(0, 987654, c.stream)),
    ("graph_destroy:unknown", lambda c: c.b.graph_destroy(0, 987654)),
    ("stream_synchronize:capturing", _sync_while_capturing),
    ("event_query:recorded-in-capture", _query_event_in_capture),
    ("stream_destroy:capturing", _destroy_capturing),
]


@pytest.mark.parametrize(("cid", "case"), [pytest.param(cid, fn, id=cid) for cid, fn in CASES])
def test_bad_call_raises_a_mapped_error(ctx: Ctx, cid: str, case: Callable[[Ctx], Any]) -> None:
    _check(ctx, cid, lambda: case(ctx))
    # the backend still works after the bad call (and after undoing what the case set up)
    while ctx.extra:
        ctx.extra.pop()()
    _settle(ctx)
    ctx.b.memset(0, ctx.ptr, 7, 16, ctx.stream)
    view = np.empty(16, dtype=np.uint8)
    ctx.b.memcpy(0, int(view.ctypes.data), ctx.ptr, 16, "d2h", ctx.stream)
    ctx.b.stream_synchronize(0, ctx.stream)
    assert view.tolist() == [7] * 16


def test_case_table_covers_the_raw_operations() -> None:
    """Each abstract raw operation of the contract has at least one bad-call case."""
    covered = {cid.split(":", 1)[0] for cid, _ in CASES}
    abstract = {name for name, fn in vars(Backend).items()
                if getattr(fn, "__isabstractmethod__", False)}
    missing = abstract - covered - {"device_count"}  # takes no arguments
    assert not missing, f"no bad-call case for {sorted(missing)}"


# ------------------------------------------------------------------ fuzzing
# Argument pools: valid values mixed with bad ones. Only device-side pointer slots get
# arbitrary addresses; nothing here reads or writes host memory.

def _pools(c: Ctx) -> dict[str, list[Any]]:
    return {
        "index": [0, 1, -1, c.n, 2**64, "0", None, 0.0, True],
        "size": [1, 256, DEV_BYTES, DEV_BYTES + 1, 0, -1, 2**64, "8", None, 1.5],
        "dptr": [c.ptr, c.ptr + 256, c.ptr + DEV_BYTES, c.hptr, 256, 0, -1, 2**64, "p", None],
        "stream": [0, c.stream, 987654, -1, "s", None, 1.0],
        "event": [c.event, c.event_nt, 0, 987654, -1, "e", None],
        "byte": [0, 255, 256, -1, "x", None],
        "pattern": [b"a", b"ab", b"abcd", b"abcdefgh", b"", b"abc", "ab", None, 3],
        "bool": [True, False, 0, None, "yes"],
        "graph": [0, 987654, -1, "g", None],
    }


_FUZZ_METHODS: dict[str, tuple[str, ...]] = {
    "get_device_properties": ("index",),
    "get_memory_info": ("index",),
    "malloc": ("index", "size"),
    "free": ("index", "dptr"),
    "memcpy_d2d": ("index", "dptr", "dptr", "size", "stream"),
    "memcpy_peer": ("index", "dptr", "index", "dptr", "size", "stream"),
    "memset": ("index", "dptr", "byte", "size", "stream"),
    "fill": ("index", "dptr", "pattern", "size", "stream"),
    "can_access_peer": ("index", "index"),
    "stream_priority_range": ("index",),
    "stream_create": ("index", "index"),
    "stream_query": ("index", "stream"),
    "stream_synchronize": ("index", "stream"),
    "stream_wait_event": ("index", "stream", "event"),
    "stream_is_valid": ("index", "stream"),
    "event_create": ("index", "bool", "bool", "bool"),
    "event_record": ("index", "event", "stream"),
    "event_query": ("index", "event"),
    "event_synchronize": ("index", "event"),
    "event_elapsed_time": ("index", "event", "event"),
    "synchronize": ("index",),
    "vm_granularity": ("index",),
    "vm_map": ("index", "dptr", "size"),
    "vm_unmap": ("index", "dptr", "size"),
    "graph_replay": ("index", "graph", "stream"),
    "graph_destroy": ("index", "graph"),
}


def _fuzz_call(ctx: Ctx, method: str, args: list[Any]) -> None:
    """Call ``method(*args)`` on the fuzzed backend: only documented errors may come out.
    What the call made is freed; a fixture allocation it freed is replaced."""
    b = ctx.b
    made: list[tuple[str, int, int]] = []
    freed_fixture = False
    if method == "memcpy_d2d":
        def call() -> Any:
            return b.memcpy(*args[:4], "d2d", args[4])
    else:
        fn = getattr(b, method)

        def call() -> Any:
            return fn(*args)
    try:
        result = call()
        if method == "malloc" and isinstance(result, int) and result:
            made.append(("malloc", args[0], result))
        elif method == "stream_create":
            made.append(("stream", args[0], result))
        elif method == "event_create":
            made.append(("event", args[0], result))
        # only a free that returned gave the fixture's allocation back: a refused one (index
        # 0.0 or False compares equal to 0) left it live, and replacing it then leaked it
        freed_fixture = method == "free" and args[1] == ctx.ptr
    except NotImplementedError as exc:
        if not isinstance(exc, acc.AcceleratorError):
            assert not _supports(b, method.removesuffix("_d2d")), (
                f"{method}{tuple(args)}: bare NotImplementedError from an implemented method")
    except ALLOWED:
        pass
    except Exception as exc:  # noqa: BLE001 - this is what the test looks for
        pytest.fail(f"{method}{tuple(args)}: unmapped backend error from {b.name}: "
                    f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    finally:
        for kind, index, handle in made:
            if kind == "malloc":
                b.free(index, handle)
            elif kind == "stream":
                b.stream_destroy(index, handle)
            else:
                b.event_destroy(index, handle)
        if freed_fixture:   # the fuzzer freed the fixture's allocation: replace it
            ctx.ptr = b.malloc(0, DEV_BYTES if ctx.reference else 4 * DEV_BYTES)
            assert ctx.ptr


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_calls_raise_only_mapped_errors(ctx: Ctx, data: st.DataObject) -> None:
    pools = _pools(ctx)
    method = data.draw(st.sampled_from(sorted(_FUZZ_METHODS)), label="method")
    args = [data.draw(st.sampled_from(pools[kind]), label=kind)
            for kind in _FUZZ_METHODS[method]]
    _fuzz_call(ctx, method, args)


def test_fuzzed_frees_of_the_fixture_allocation_leak_nothing(ctx: Ctx) -> None:
    """A refused free of the fixture's allocation keeps it; a free that returned replaces it.
    The fuzzer used to replace it after ``free(0.0, ptr)`` too (``0.0 == 0``), leaking the
    refused one: 16 KiB of the registered opencl backend stayed allocated for the rest of the
    session whenever hypothesis drew that call."""
    for index in (0.0, False, None, "0", -1):
        ptr = ctx.ptr
        _fuzz_call(ctx, "free", [index, ptr])
        assert ctx.ptr == ptr, f"free({index!r}, ptr) was refused, yet the fixture lost ptr"
    ptr = ctx.ptr
    _fuzz_call(ctx, "free", [0, ptr])
    assert ctx.ptr, "free(0, ptr) returned: the fixture's allocation is replaced"
    ctx.b.memset(0, ctx.ptr, 0, 16, 0)                # the replacement is live
    # the teardown of ``ctx`` checks that the backend's memory is back where it started
