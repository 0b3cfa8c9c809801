"""The second child of tests/package/test_builds_agree.py: the parts of accelrt that
``builds_probe.py`` leaves out, called with the same hostile values (its :data:`VALUES`, its
outcome lines and its way of calling: this module shares its helpers).

What it calls, each with valid arguments (the baseline), then once per parameter and hostile
value, with one argument too many and with an unknown keyword:

* ``accelrt.backends``: the registry (``register``, ``unregister``, ``get``, ``on_change``,
  ...) and every raw operation of :class:`~accelrt.backends.cpu.CpuBackend` (a fresh instance
  per case, with shareable memory), of :class:`accelrt.testing.SimulatedBackend` and, where
  PoCL runs, of the OpenCL backend: what third-party code and tests call directly, through the
  compiled argument checks (``backends/_common.py``, ``backends/cpu/_live.py``); the
  constructors' arguments too;
* ``accelrt.distributed`` in one process (a world of one rank on the MPI engine, no launcher):
  every public function (collectives, point-to-point, objects, groups, ``init_process_group``
  and ``destroy_process_group``, the debug level), ``ReduceOp``/``PremulSum``/``Backend``,
  ``Work``'s methods, and the stores (``HashStore``, ``FileStore``, ``PrefixStore``,
  ``TCPStore``: the constructors and every method);
* ``accelrt.multiprocessing``: the sharing strategy, and the reductions of arrays and events
  (a pickle's every field rebuilt in this process);
* ``accelrt.interop``: ``__cuda_array_interface__`` dicts with each field hostile,
  ``consume_cuda_array_interface``, ``wait_for_stream``, DLPack producers whose
  ``__dlpack_device__`` or ``__dlpack__`` answer oddly, ``from_torch``/``to_torch``;
* ``accelrt.testing``: ``SimulatedBackend``'s constructor, ``leak_check``, ``snapshot``,
  ``find_leaks``;
* ``accelrt.opencl`` (where PoCL runs): the device module's functions;
* the environment: ``ACCELRT_ALLOC_CONF`` and ``PYTORCH_CUDA_ALLOC_CONF`` (read once per
  process), ``ACCELRT_CPU_DEVICES``/``_MEMORY``/``_STREAMS`` and
  ``ACCELRT_DISTRIBUTED_TIMEOUT``, each hostile value in a child forked before accelrt read
  any of them, which allocates and reports.

Each case runs under a two-second alarm: a call that does not return by then is recorded as
``raise ProbeTimeout`` (a hang is a bug the test reports, not a stuck probe).

Usage: ``python builds_probe_ext.py OUT.json`` under :func:`environment`.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import inspect
import itertools
import os
import pickle
import queue
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import builds_probe as bp  # noqa: E402  (the shared helpers, beside this file)
from builds_probe import Spec  # noqa: E402


def environment() -> dict[str, str]:
    """:func:`builds_probe.environment`, with cpu memory that processes can share (the
    reductions of ``accelrt.multiprocessing`` need it)."""
    return {**bp.environment(), "ACCELRT_CPU_SHARED_MEMORY": "1"}


class ProbeTimeout(Exception):
    """A case ran past its alarm."""


#: seconds a case may take
CASE_SECONDS = 2.0


def _alarm(signum: int, frame: Any) -> None:
    raise ProbeTimeout(f"the call ran past {CASE_SECONDS} s")


@contextlib.contextmanager
def _guard() -> Iterator[None]:
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


# ---------------------------------------------------------------------- more hostile values

_BYTES_VALUES: list[tuple[str, Any]] = [
    ("b''", b""), ("bytearray(b'ab')", bytearray(b"ab")), ("memoryview(b'ab')", memoryview(b"ab")),
    ("b'abc'", b"abc"), ("b'x'*9", b"x" * 9), ("b'\\0'*64", b"\0" * 64), ("b'\\xff'*200", b"\xff" * 200),
]
_KIND_VALUES = [(repr(k), k) for k in ("d2d", "h2d", "d2h", "h2h", "D2D", "d2d ", "p2p")]
_MODE_VALUES = [(repr(k), k) for k in ("global", "thread_local", "relaxed", "GLOBAL", "local")]
_DIST_VALUES = [(repr(k), k) for k in ("uniform", "normal", "Uniform", "gamma")]
_ATTR_VALUES = [(repr(k), k) for k in ("release_threshold", "reserved_mem_current",
                                       "reserved_mem_high", "used_mem_current",
                                       "used_mem_high", "RELEASE_THRESHOLD")]
_TIMEOUT_VALUES: list[tuple[str, Any]] = [
    ("timedelta(0)", datetime.timedelta(0)), ("timedelta(-1s)", datetime.timedelta(seconds=-1)),
    ("timedelta(days=10**6)", datetime.timedelta(days=10 ** 6)),
    ("timedelta.max", datetime.timedelta.max),
]   # (not a tiny one: a group's watchdog ends the process when an operation outlasts it)
#: more values for parameters of these names (beside :data:`builds_probe.EXTRA`)
EXTRA: dict[str, list[tuple[str, Any]]] = {
    **bp.EXTRA, "pattern": _BYTES_VALUES, "handle": _BYTES_VALUES, "kind": _KIND_VALUES,
    "mode": _MODE_VALUES, "dist": _DIST_VALUES, "attr": _ATTR_VALUES, "timeout": _TIMEOUT_VALUES,
    "seg": _BYTES_VALUES, "token": _BYTES_VALUES, "ref": _BYTES_VALUES,
    "ev_handle": _BYTES_VALUES, "typestr": [(repr(t), t) for t in (
        "<f4", ">f4", "|u1", "<f8", "|b1", "<c8", "|O", "<V4", "<f2", "(2,)<f4", "<U1", "f4",
        "<i16", "<M8[s]")],
}


# ---------------------------------------------------------------------- the run loop

#: (spec, parameter, value) cases left out: a receive from any rank in a world of one waits
#: for a sender for ever, in torch too; a TCPStore master on port 1 binds it, and the two
#: builds' probes run at once
LEFT_OUT = {("accelrt.distributed.recv", "src", "None"),
            ("accelrt.distributed.recv_object_list", "src", "None")} | {
    ("accelrt.distributed.TCPStore()", "port", v)
    for v in ("np.int64(1)", "IntSub(1)", "IntEq(1)", "IntIdx(1)", "Index()")}

#: where each case's name goes before it runs (``PROBE_TRACE=path``: to find a slow case)
_TRACE = open(os.environ["PROBE_TRACE"], "a") if os.environ.get("PROBE_TRACE") else None  # noqa: SIM115


def run(specs: list[Spec], after: Callable[[], None]) -> Iterator[tuple[str, str]]:
    """:func:`builds_probe.run` with this module's values, each case under an alarm, and
    ``after`` run after each case (closing what the case made)."""
    for n, spec in enumerate(specs):
        if n % 25 == 0:
            gc.collect()
        cases: list[tuple[str, tuple[str, Any] | None]] = [
            ("baseline", None), ("+arg", ("+arg", 0)), ("+kw", ("+kw", 0))]
        for p in _varied(spec):
            key = p.rsplit("[", 1)[0] if p.endswith("]") else p
            cases += [(f"{p}={vid}", (p, v))
                      for vid, v in bp.VALUES + EXTRA.get(p, EXTRA.get(key, []))
                      if (spec.name, p, vid) not in LEFT_OUT]
        for cid, override in cases:
            if _TRACE is not None:
                print(f"{time.perf_counter():.3f} {spec.name}[{cid}]", file=_TRACE, flush=True)

            def call(spec: Spec = spec, override: Any = override) -> Any:
                with _guard():
                    if spec.around is None:
                        return bp._call(spec, override)
                    with spec.around():
                        return bp._call(spec, override)
            got = bp.outcome(call, spec.values, spec.then)
            yield f"{spec.name}[{cid}]", got
            with _guard():
                if spec.reset is not None:
                    with contextlib.suppress(Exception):
                        spec.reset()
                with contextlib.suppress(Exception):
                    after()


def _varied(spec: Spec) -> list[str]:
    """:func:`builds_probe._varied`, where a baseline argument that cannot be made (the
    backend has not the operation) counts as no sequence."""
    safe = {k: _safe(f) for k, f in spec.base.items()}
    return bp._varied(Spec(spec.name, spec.target, safe, varargs=spec.varargs,
                           kw_vary=spec.kw_vary, skip=spec.skip))


def _safe(f: Callable[[], Any]) -> Callable[[], Any]:
    def call() -> Any:
        try:
            return f()
        except Exception:   # noqa: BLE001
            return None
    return call


def _spec(name: str, f: Callable[..., Any] | Callable[[], Callable[..., Any]],
          table: dict[str, Callable[[], Any]], *, bound: bool = False, **kw: Any) -> Spec:
    """A spec of ``f`` (``bound``: ``f()`` gives the callable, a method of a fresh
    instance), whose parameters without a default take their baseline from ``table``."""
    target = f if bound else (lambda: f)
    given: dict[str, Callable[[], Any]] = kw.pop("base", {})
    try:
        fn = target() if not bound else _probe_target(target)
    except (TypeError, ValueError):   # (no signature to read: the given baseline only)
        return Spec(name, target, dict(given), **kw)
    return Spec(name, target, bp.baseline(fn, table, given), **kw)


def _probe_target(target: Callable[[], Any]) -> Any:
    """The callable ``target`` makes (for its signature), with what it made closed after."""
    try:
        return target()
    finally:
        _after_backend()


# ---------------------------------------------------------------------- accelrt.backends

#: the backend instance of the current case (made by the spec's target, used by its
#: baseline arguments' factories, closed after the case)
_B: list[Any] = [None]
#: host buffers adopted by the current case's backend (alive until it is closed)
_ADOPTED: list[Any] = []


def _after_backend() -> None:
    b, _B[0] = _B[0], None
    if b is not None:   # (an _OpenCLCase releases what the case made, the backend stays)
        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            b.close()
    _ADOPTED.clear()


def _new_cpu() -> Any:
    from accelrt.backends.cpu import CpuBackend
    _after_backend()
    _B[0] = CpuBackend(num_devices=2, memory_limit=1 << 24, async_streams=False,
                       name="probecpu", shared_memory=True)
    return _B[0]


def _new_sim() -> Any:
    from accelrt.testing import SimulatedBackend
    _after_backend()
    _B[0] = SimulatedBackend(capacity=1 << 30, device_count=2, name="probesim")
    return _B[0]


_OPENCL: list[Any] = []


def _opencl_backend() -> Any:
    """The registry's OpenCL backend (one context for the whole run; made once), or None
    where OpenCL is not available here."""
    if not _OPENCL:
        from accelrt import backends
        try:
            b = backends.get_backend("opencl")
        except Exception:   # noqa: BLE001  (no OpenCL here: the probe says so)
            b = None
        _OPENCL.append(b)
    return _OPENCL[0]


def _new_opencl() -> Any:
    _after_backend()
    b = _opencl_backend()
    _B[0] = _OpenCLCase(b)
    return _B[0]


class _OpenCLCase:
    """The opencl backend, forwarding every operation, remembering the pointers, streams and
    events a case made so that they are released after it (the instance is shared)."""

    def __init__(self, b: Any) -> None:
        self._b = b
        self._ptrs: list[tuple[int, int]] = []
        self._streams: list[tuple[int, int]] = []
        self._events: list[tuple[int, int]] = []
        self._host: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._b, name)

    def close(self) -> None:
        b = self._b
        for i, e in self._events:
            with contextlib.suppress(Exception):
                b.event_destroy(i, e)
        for i, s in self._streams:
            with contextlib.suppress(Exception):
                b.stream_destroy(i, s)
        for i, p in self._ptrs:
            with contextlib.suppress(Exception):
                b.free(i, p)
        for p in self._host:
            with contextlib.suppress(Exception):
                b.host_free(p)


def _raw(what: str, *args: Any) -> Any:
    """Call the case's backend's ``what(*args)`` to make a baseline argument (remembered for
    release where the instance is shared)."""
    b = _B[0]
    real = b._b if isinstance(b, _OpenCLCase) else b
    r = getattr(real, what)(*args)
    if isinstance(b, _OpenCLCase):
        if what == "malloc":
            b._ptrs.append((args[0], r))
        elif what == "stream_create":
            b._streams.append((args[0], r))
        elif what == "event_create":
            b._events.append((args[0], r))
        elif what == "host_malloc":
            b._host.append(r)
    return r


def _last() -> int:
    """The case's backend's last device index (the peer of device 0)."""
    return int(_B[0].device_count()) - 1


def _ptr(index: int = 0) -> int:
    return int(_raw("malloc", index, 512))


def _stream() -> int:
    return int(_raw("stream_create", 0, 0))


def _event(timing: bool = False, interprocess: bool = False) -> int:
    interprocess = interprocess and _B[0].supports_interprocess_events(0)
    e = _raw("event_create", 0, timing, False, interprocess)
    _raw("event_record", 0, e, 0)
    _raw("event_synchronize", 0, e)   # (complete: an OpenCL record completes later)
    return int(e)


def _ipc_event_handle() -> bytes:
    b = _B[0]
    if not b.supports_interprocess_events(0):
        return b"x" * 16
    return bytes(_raw("event_ipc_handle", 0, _event(interprocess=True)))


def _ipc_mem_handle() -> bytes:
    try:
        return bytes(_raw("ipc_mem_handle", 0, _ptr()))
    except (ValueError, NotImplementedError):
        return b"x" * 16


def _graph() -> int:
    b = _B[0]
    if not b.capabilities(0).graphs:
        return 1
    s = _stream()
    _raw("graph_capture_begin", 0, s)
    _raw("memset", 0, _ptr(), 1, 64, s)
    return int(_raw("graph_capture_end", 0, s))


def _reservation() -> int:
    b = _B[0]
    if not b.capabilities(0).virtual_memory:
        return 1 << 40
    return int(_raw("vm_reserve", 0, _raw("vm_granularity", 0)))


def _mapped() -> int:
    p = _reservation()
    with contextlib.suppress(Exception):
        _raw("vm_map", 0, p, _raw("vm_granularity", 0))
    return p


def _granule() -> int:
    try:
        return int(_raw("vm_granularity", 0))
    except (NotImplementedError, ValueError):
        return 2 << 20


def _adopted() -> int:
    buf = np.zeros(1024, np.uint8)
    _ADOPTED.append(buf)
    p = int(buf.ctypes.data)
    with contextlib.suppress(Exception):
        _raw("adopt_memory", 0, p, 512)
    return p


def _pool_ptr() -> int:
    try:
        return int(_raw("mempool_alloc_async", 0, 512, 0))
    except NotImplementedError:
        return _ptr()


def _opened_ptr() -> int:
    try:
        return int(_raw("ipc_open_mem_handle", 0, _ipc_mem_handle())[0])
    except (ValueError, NotImplementedError):
        return _ptr()


def _host_ptr() -> int:
    return int(_raw("host_malloc", 512))


#: baseline arguments of the raw operations, by parameter name
RAW_BASE: dict[str, Callable[[], Any]] = {
    "index": lambda: 0, "size": lambda: 512, "ptr": _ptr, "dst": _ptr, "src": _ptr,
    "nbytes": lambda: 64, "kind": lambda: "d2d", "stream": lambda: 0, "dst_index": lambda: 0,
    "src_index": lambda: _last(), "value": lambda: 7, "pattern": lambda: b"ab", "count": lambda: 8,
    "peer": lambda: _last(), "priority": lambda: 0, "event": _event, "enable_timing": lambda: False,
    "blocking": lambda: False, "interprocess": lambda: False, "start": lambda: _event(True),
    "end": lambda: _event(True), "handle": _ipc_mem_handle, "fn": lambda: (lambda: None),
    "n": lambda: 16, "dtype": lambda: "float32", "dist": lambda: "uniform", "seed": lambda: 1,
    "offset": lambda: 0, "params": lambda: (0.0, 1.0), "out": _ptr, "a": _ptr, "b": _ptr,
    "graph": _graph, "path": lambda: "graph.dot", "verbose": lambda: False,
    "mode": lambda: "global", "keep": lambda: 0, "attr": lambda: "release_threshold",
}
#: a raw operation's own baselines (beside :data:`RAW_BASE`)
RAW_SPECIAL: dict[str, dict[str, Callable[[], Any]]] = {
    "memcpy_peer": {"src": lambda: _ptr(_last()), "dst": _ptr},
    "host_free": {"ptr": _host_ptr}, "disown_memory": {"ptr": _adopted},
    "adopt_memory": {"ptr": lambda: int(_keep_buf().ctypes.data)},
    "vm_release": {"ptr": _reservation, "size": _granule},
    "vm_map": {"ptr": _reservation, "size": _granule},
    "vm_unmap": {"ptr": _mapped, "size": _granule},
    "vm_reserve": {"size": _granule},
    "mempool_free_async": {"ptr": _pool_ptr},
    "ipc_close_mem_handle": {"ptr": _opened_ptr},
    "event_from_ipc_handle": {"handle": _ipc_event_handle},
    "event_ipc_handle": {"event": lambda: _event(interprocess=True)},
    "stream_destroy": {"stream": _stream}, "complete_stream": {"stream": _stream},
    "launch_work": {"stream": _stream},
    "mempool_set_attribute": {"value": lambda: 0},
    "memset": {"stream": _stream}, "graph_replay": {"stream": _stream},
    "graph_capture_begin": {"stream": _stream}, "graph_capture_begin_mode": {"stream": _stream},
    "philox_fill": {"dtype": lambda: "float32"},
    "elementwise_add": {"dtype": lambda: "float32"},
    "last_record": {"event": _event},
}


def _keep_buf() -> Any:
    buf = np.zeros(1024, np.uint8)
    _ADOPTED.append(buf)
    return buf


def _capturing_stream() -> int:
    """A stream in an open capture (``graph_capture_end``'s baseline)."""
    s = _stream()
    if _B[0].capabilities(0).graphs:
        _raw("graph_capture_begin", 0, s)
    return s


RAW_SPECIAL["graph_capture_end"] = {"stream": _capturing_stream}

#: raw operations left out: they end the instance (``close``, run as a case of its own) or
#: are not operations
RAW_SKIP = {"close"}


def _raw_specs(label: str, new: Callable[[], Any], cls: type) -> list[Spec]:
    specs: list[Spec] = []
    for m in sorted(dir(cls)):
        if m.startswith("_") or m in RAW_SKIP:
            continue
        a = inspect.getattr_static(cls, m)
        if isinstance(a, property) or not callable(getattr(cls, m)):
            continue
        table = {**RAW_BASE, **RAW_SPECIAL.get(m, {})}
        specs.append(_spec(f"{label}.{m}", lambda new=new, m=m: getattr(new(), m), table,
                           bound=True, base=RAW_SPECIAL.get(m, {}), values=m not in _RAW_BY_TYPE))
    if new is not _new_opencl:   # (the shared OpenCL backend stays open)
        specs.append(Spec(f"{label}.close", lambda new=new: new().close, {}))
    return specs


#: raw operations whose results depend on the machine or on timing: recorded by type only
_RAW_BY_TYPE = {"get_device_properties", "get_memory_info", "malloc", "host_malloc",
                "vm_reserve", "event_elapsed_time", "mempool_alloc_async", "ipc_mem_handle",
                "event_ipc_handle", "ipc_open_mem_handle", "stream_create", "event_create",
                "event_from_ipc_handle", "graph_capture_end", "graph_instantiate",
                "graph_native_handles", "oom_advice", "pointer_device", "arch_list",
                "live_handles", "get_device_capability", "default_stream", "reservations"}


def _registry_specs() -> list[Spec]:
    from accelrt import backends
    from accelrt.backends.cpu import CpuBackend

    class ProbeDev(CpuBackend):
        name = "probedev"

    table: dict[str, Callable[[], Any]] = {
        "name": lambda: "probedev", "factory": lambda: ProbeDev,
        "listener": lambda: (lambda name: None),
    }
    specs = []
    for n in ("DevicePtr", "EventHandle", "GraphHandle", "StreamHandle"):
        f = getattr(backends, n)
        specs.append(Spec(f"accelrt.backends.{n}", lambda f=f: (lambda value: f(value)),
                          {"value": lambda: 4096}))
    for n in sorted(backends.__all__):
        f = getattr(backends, n)
        if not callable(f) or isinstance(f, type) and n != "Capabilities":
            continue
        base: dict[str, Callable[[], Any]] = {}
        if n in ("get", "get_backend", "unavailable_reason", "device_module"):
            base = {"name": lambda: "cpu"}
        if n == "unregister":
            base = {"name": lambda: (backends.register("probedev", ProbeDev, replace=True),
                                     "probedev")[1]}
        specs.append(_spec(f"accelrt.backends.{n}", f, table, base=base,
                           values=n != "get_available_backends"))
    specs.append(_spec("accelrt.backends.register[replace]", backends.register, table,
                       base={"replace": lambda: True}))
    # the constructors' arguments
    specs.append(_spec("CpuBackend", _closing(CpuBackend), {},
                       base={"num_devices": lambda: 2, "memory_limit": lambda: 1 << 20,
                             "async_streams": lambda: False, "name": lambda: "probecpu",
                             "shared_memory": lambda: False}))
    return specs


def _closing(cls: type) -> Callable[..., Any]:
    """``cls(...)``, closed once made (a constructor's case leaves nothing running)."""
    def make(*args: Any, **kwargs: Any) -> str:
        b = cls(*args, **kwargs)
        b.close()
        return f"{type(b).__name__} of {b.device_count()} device(s)"
    make.__signature__ = inspect.signature(cls)  # type: ignore[attr-defined]
    return make


def _restore_registry() -> None:
    from accelrt import _backend_registry as reg
    with reg._lock:
        for name in list(reg._factories):
            if name not in _REGISTRY0[0]:
                del reg._factories[name]
                reg._instances.pop(name, None)
                reg._failures.pop(name, None)
        for name, f in _REGISTRY0[0].items():
            if reg._factories.get(name) is not f:
                reg._factories[name] = f
                reg._instances.pop(name, None)
                reg._failures.pop(name, None)
        reg._listeners[:] = _REGISTRY0[1]


_REGISTRY0: tuple[dict[str, Any], list[Any]] = ({}, [])


# ---------------------------------------------------------------------- accelrt.testing

def _testing_specs() -> list[Spec]:
    from accelrt import testing
    table: dict[str, Callable[[], Any]] = {"before": testing.snapshot}
    specs = [_spec("SimulatedBackend", _closing(testing.SimulatedBackend), table,
                   base={"capacity": lambda: 1 << 30, "device_count": lambda: 2,
                         "granularity": lambda: 2 << 20, "vm": lambda: True,
                         "auto_complete": lambda: True, "host_capacity": lambda: None,
                         "priority_range": lambda: (0, 0), "name": lambda: "probesim"})]
    for n in ("leak_check", "snapshot", "find_leaks", "Snapshot"):
        f = getattr(testing, n)
        specs.append(_spec(f"accelrt.testing.{n}", f, table,
                           then=_enter if n == "leak_check" else None, values=False))
    return specs


def _enter(r: Any) -> str:
    with r:
        return "entered"


# ---------------------------------------------------------------------- accelrt.distributed

def _world() -> None:
    """A world of one rank on the MPI engine (again, if a case ended it)."""
    import accelrt.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("mpi", timeout=30)


def _dist_after() -> None:
    """A new world for the next case (nothing a case posted is left to match a later one)."""
    import accelrt.distributed as dist
    from accelrt.distributed import _engine
    if dist.is_initialized():
        dist.destroy_process_group()
    _world()
    for name in list(_engine.registered()):
        if name.startswith("probe"):
            _engine.unregister_backend(name)
    dist.set_debug_level(_DEBUG0[0])


_DEBUG0: list[Any] = [None]


def _arr(n: int = 4, fill: float = 1.0) -> Any:
    import accelrt as acc
    return acc.full((n,), fill, device="cpu:0")


def _store_keys(store: Any) -> Any:
    """``store`` with short waits and the keys and queues the hostile strings name (a get of
    a missing key waits for it)."""
    store.set_timeout(datetime.timedelta(seconds=0.05))
    for k in ("k", "1", "cpu:1", "", "cpu", "cpu:0"):
        store.set(k, b"v")
        with contextlib.suppress(NotImplementedError):   # (FileStore has no queues)
            for _ in range(2):
                store.queue_push(f"q{k}", b"x")
            store.queue_push(k, b"x")
    store.set("n", b"1")
    return store


_STORES: list[Any] = []
_NAMES = itertools.count()


def _hash_store() -> Any:
    from accelrt.distributed import HashStore
    return _store_keys(HashStore())


def _file_store() -> Any:
    from accelrt.distributed import FileStore
    path = f"store{next(_NAMES)}"   # (a file of its own: a closed store may delete its file)
    s = FileStore(path, 1)
    _STORES.append(s)
    return _store_keys(s)


def _prefix_store() -> Any:
    from accelrt.distributed import HashStore, PrefixStore
    return _store_keys(PrefixStore("p/", HashStore()))


_TCP: list[Any] = []


def _tcp_store() -> Any:
    """The run's one TCPStore master (made again if a case broke it), its keys set afresh:
    closing a master takes 50 ms (its server's poll interval), too long to make one per
    case."""
    from accelrt.distributed import TCPStore
    if _TCP:
        try:
            return _store_keys(_TCP[0])
        except Exception:   # noqa: BLE001  (a case broke it: a new one)
            _close_later(_TCP.pop())
    _TCP.append(TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=2),
                         wait_for_workers=False))
    return _store_keys(_TCP[0])


_closing_q: queue.SimpleQueue[Any] = queue.SimpleQueue()
_closer: list[threading.Thread] = []


def _close_later(store: Any) -> None:
    """Close ``store`` on a thread of its own (a TCPStore master's close waits 50 ms)."""
    if not _closer:
        def close_all() -> None:
            while (s := _closing_q.get()) is not None:
                with contextlib.suppress(Exception):
                    s.close()
        _closer.append(threading.Thread(target=close_all, daemon=True))
        _closer[0].start()
    _closing_q.put(store)


def _close_stores() -> None:
    from accelrt.distributed import TCPStore
    for s in _STORES:
        if isinstance(s, TCPStore):
            _close_later(s)
        elif callable(getattr(s, "close", None)):
            with contextlib.suppress(Exception):
                s.close()
    _STORES.clear()


def _dist_specs() -> list[Spec]:
    import accelrt.distributed as dist
    from accelrt.distributed import _engine

    def work() -> Any:
        return dist.all_reduce(_arr(), async_op=True)

    table: dict[str, Callable[[], Any]] = {
        "tensor": _arr, "tensor_list": lambda: [_arr(fill=0.0)],
        "output_tensor": lambda: _arr(fill=0.0), "input_tensor": _arr,
        "output_tensor_lists": lambda: [[_arr(fill=0.0)]], "input_tensor_list": lambda: [_arr()],
        "output": lambda: _arr(fill=0.0), "input": _arr, "output_tensor_list": lambda: [_arr(fill=0.0)],
        "input_list": lambda: [_arr()], "tensors": lambda: [_arr()],
        "object_list": lambda: [1, "a"], "obj": lambda: {"x": 1},
        "scatter_object_output_list": lambda: [None],
        "p2p_op_list": lambda: [dist.P2POp(dist.isend, _arr(), 0)],
        "group": lambda: dist.group.WORLD, "group_rank": lambda: 0, "global_rank": lambda: 0,
        "timeout": lambda: 30, "level": lambda: dist.DebugLevel.OFF,
        "backend": lambda: "mpi", "device": lambda: "cpu", "reduceOp": lambda: dist.ReduceOp.SUM,
        "factor": lambda: 2.0, "name": lambda: "probeeng",
        "func": lambda: (lambda ctx: None), "ranks_per_subgroup_list": lambda: [[0]],
        "op": lambda: dist.isend,
    }
    #: what each function's optional arguments are in the baseline (the rest keep defaults)
    special: dict[str, dict[str, Callable[[], Any]]] = {
        "broadcast": {"src": lambda: 0}, "reduce": {"dst": lambda: 0},
        "gather": {"gather_list": lambda: [_arr(fill=0.0)], "dst": lambda: 0},
        "gather_into_tensor": {"gather_tensor": lambda: _arr(fill=0.0), "dst": lambda: 0},
        "gather_single": {"gather_tensor": lambda: _arr(fill=0.0), "dst": lambda: 0},
        "scatter": {"scatter_list": lambda: [_arr()], "src": lambda: 0},
        "gather_object": {"object_gather_list": lambda: [None], "dst": lambda: 0},
        "scatter_object_list": {"scatter_object_input_list": lambda: [7], "src": lambda: 0},
        "broadcast_object_list": {"src": lambda: 0},
        "new_group": {"ranks": lambda: [0]}, "split_group": {"split_ranks": lambda: [[0]]},
        "new_subgroups": {"group_size": lambda: 1},
        "all_to_all_single": {"output_split_sizes": lambda: [4], "input_split_sizes": lambda: [4]},
        "barrier": {"device_ids": lambda: None}, "monitored_barrier": {"timeout": lambda: 30},
        "set_timeout": {"timeout": lambda: datetime.timedelta(seconds=30)},
        "get_node_local_rank": {"fallback_rank": lambda: 0},
        "send": {"dst": lambda: 0}, "isend": {"dst": lambda: 0}, "recv": {"src": lambda: 0},
        "irecv": {"src": lambda: 0}, "send_object_list": {"dst": lambda: 0},
        "recv_object_list": {"src": lambda: 0},
        "init_process_group": {"backend": lambda: "mpi", "timeout": lambda: 30},
        "destroy_process_group": {}, "is_backend_available": {"backend": lambda: "mpi"},
        "get_global_rank": {"group": lambda: dist.group.WORLD},
        "get_group_rank": {"group": lambda: dist.group.WORLD},
        "get_process_group_ranks": {"group": lambda: dist.group.WORLD},
        "register_backend": {"devices": lambda: ["cpu"]},
        "P2POp": {"peer": lambda: 0}, "Backend": {"name": lambda: "gloo"},
        "EngineContext": {"rank": lambda: 0, "size": lambda: 1, "global_ranks": lambda: [0],
                          "device_type": lambda: "cpu", "device_index": lambda: 0,
                          "timeout": lambda: 30.0},
    }
    skip = {"ProcessGroup", "Work", "Engine", "Store", "group", "GroupMember", "GroupName",
            "DebugLevel", "set_debug_level_from_env", "TCPStore", "HashStore", "FileStore",
            "PrefixStore"}
    specs: list[Spec] = []
    for n in sorted(dist.__all__):
        f = getattr(dist, n)
        if n in skip or not callable(f) or (isinstance(f, type) and issubclass(f, BaseException)):
            continue
        around = _no_world if n == "init_process_group" else None
        specs.append(_spec(f"accelrt.distributed.{n}", f, table, base=special.get(n, {}),
                           around=around, values=n != "get_pg_count"))
    def registered_engine() -> str:
        if "probeeng" not in _engine.registered():
            dist.register_backend("probeeng", lambda ctx: None, ["cpu"])
        return "probeeng"

    specs.append(_spec("accelrt.distributed.unregister_backend", _engine.unregister_backend,
                       table, base={"name": registered_engine}))
    specs.append(Spec("ACCELRT_DISTRIBUTED_TIMEOUT", lambda: _init_with_timeout_env,
                      {"value": lambda: "30"}, around=_no_world))
    specs.append(Spec("accelrt.distributed.ReduceOp", lambda: dist.ReduceOp,
                      {"value": lambda: dist.ReduceOp.SUM.value}, values=True))
    # Work's methods, on a fresh async all_reduce
    for m in ("wait", "is_completed", "is_success", "exception", "result", "source_rank",
              "synchronize", "completed"):
        if callable(getattr(dist.Work, m, None)):
            specs.append(_spec(f"accelrt.distributed.Work.{m}", lambda m=m: getattr(work(), m),
                               table, bound=True, base={"timeout": lambda: 30}
                               if m == "wait" else {}))
    for m in ("rank", "size"):
        specs.append(Spec(f"accelrt.distributed.ProcessGroup.{m}",
                          lambda m=m: getattr(dist.group.WORLD, m)))
    return specs


def _init_with_timeout_env(value: Any) -> Any:
    """``init_process_group`` (its timeout left out) under ``ACCELRT_DISTRIBUTED_TIMEOUT`` =
    ``value`` (a str; read at each call); the variable is removed after."""
    import accelrt.distributed as dist
    os.environ["ACCELRT_DISTRIBUTED_TIMEOUT"] = value
    try:
        dist.init_process_group("mpi")
        return dist.group.WORLD.timeout
    finally:
        del os.environ["ACCELRT_DISTRIBUTED_TIMEOUT"]


@contextlib.contextmanager
def _no_world() -> Iterator[None]:
    import accelrt.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
    try:
        yield
    finally:
        _world()


def _store_specs() -> list[Spec]:
    from accelrt.distributed import FileStore, HashStore, PrefixStore, Store, TCPStore
    table: dict[str, Callable[[], Any]] = {
        "key": lambda: "k", "value": lambda: b"v2", "amount": lambda: 2,
        "expected_value": lambda: b"v", "desired_value": lambda: b"w", "keys": lambda: ["k"],
        "values": lambda: [b"a"], "timeout": lambda: datetime.timedelta(seconds=0.05),
        "block": lambda: False, "file_name": lambda: f"fs{next(_NAMES)}", "world_size": lambda: 1,
        "prefix": lambda: "p/", "store": HashStore, "host_name": lambda: "127.0.0.1",
        "port": lambda: 0, "is_master": lambda: True,
    }
    special: dict[str, dict[str, Callable[[], Any]]] = {
        "add": {"key": lambda: "n"},
        "queue_pop": {"key": lambda: "qk", "block": lambda: False},
        "queue_len": {"key": lambda: "qk"}, "queue_push": {"key": lambda: "qk"},
        "barrier": {"timeout": lambda: datetime.timedelta(milliseconds=1)},
    }
    specs = []
    for label, new in (("HashStore", _hash_store), ("FileStore", _file_store),
                       ("PrefixStore", _prefix_store), ("TCPStore", _tcp_store)):
        cls = type(new())
        _close_stores()
        for m in sorted(dir(cls)):
            if m.startswith("_") or m == "close":
                continue
            a = inspect.getattr_static(cls, m)
            if isinstance(a, property) or not callable(getattr(cls, m)):
                continue
            specs.append(_spec(f"accelrt.distributed.{label}.{m}",
                               lambda new=new, m=m: getattr(new(), m), table, bound=True,
                               base=special.get(m, {}), values=m not in ("num_keys", "clone")))
        specs.append(Spec(f"accelrt.distributed.{label}.timeout = v",
                          lambda new=new: (lambda value: _assign(new(), "timeout", value)),
                          {"value": lambda: datetime.timedelta(seconds=1)}))
    specs.append(_spec("accelrt.distributed.HashStore()", _closing_store(HashStore), table))
    specs.append(_spec("accelrt.distributed.FileStore()", _closing_store(FileStore), table))
    specs.append(_spec("accelrt.distributed.PrefixStore()", _closing_store(PrefixStore), table))
    specs.append(_spec("accelrt.distributed.TCPStore()", _closing_store(TCPStore), table,
                       base={"world_size": lambda: 1, "is_master": lambda: True,
                             "timeout": lambda: datetime.timedelta(seconds=0.2),
                             "wait_for_workers": lambda: False}))
    specs.append(_spec("accelrt.distributed.Store()", Store, table))
    return specs


def _assign(obj: Any, attr: str, value: Any) -> Any:
    setattr(obj, attr, value)
    return getattr(obj, attr)


def _closing_store(cls: type) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> str:
        s = cls(*args, **kwargs)
        _STORES.append(s)
        return type(s).__name__
    make.__signature__ = inspect.signature(cls)  # type: ignore[attr-defined]
    return make


# ---------------------------------------------------------------------- multiprocessing

def _mp_specs() -> list[Spec]:
    import accelrt as acc
    import accelrt.multiprocessing as amp
    from accelrt.multiprocessing import reductions as red

    def reduced() -> tuple[Any, ...]:
        a = acc.full((4,), 3.0, device="cpu:0")
        _KEPT.append(a)
        return red.reduce_array(a)[1]

    def consume_rest() -> None:
        """Unpickle the case's reduction if the case did not (a pickle never unpickled
        stays in flight until the producer exits, holding its array)."""
        r = cache.pop("r", None)
        if r is not None:
            with contextlib.suppress(Exception):
                red.rebuild_array(*r)

    def rebuild(version: Any, device: Any, shape: Any, dtype: Any, seg: Any, seg_size: Any,
                offset: Any, size: Any, ref: Any, slot: Any, token: Any, ev_handle: Any) -> Any:
        return red.rebuild_array(version, (device, shape, dtype),
                                 (seg, seg_size, offset, size, ref, slot, token, ev_handle))

    fields = ("version", "device", "shape", "dtype", "seg", "seg_size", "offset", "size",
              "ref", "slot", "token", "ev_handle")
    cache: dict[str, Any] = {}

    def field_of(i: int) -> Callable[[], Any]:
        def get() -> Any:
            if i == 0:   # the first field: a fresh reduction for this case
                cache["r"] = reduced()
            version, meta, shared = cache["r"]
            return (version, *meta, *shared)[i]
        return get

    rebuild_base = {f: field_of(i) for i, f in enumerate(fields)}
    table: dict[str, Callable[[], Any]] = {
        "new_strategy": lambda: "file_descriptor",
        "a": lambda: _kept(acc.ones(4, device="cpu:0")),
        "e": lambda: _recorded_ipc_event(), "device": lambda: "cpu:0",
        "handle": lambda: _recorded_ipc_event().ipc_handle(),
    }
    specs = [_spec(f"accelrt.multiprocessing.{n}", getattr(amp, n), table)
             for n in ("get_all_sharing_strategies", "get_sharing_strategy",
                       "set_sharing_strategy")]
    specs.append(_spec("accelrt.multiprocessing.ipc_collect", amp.ipc_collect, table,
                       values=False))
    for n in ("reduce_array", "reduce_event", "rebuild_event"):
        specs.append(_spec(f"accelrt.multiprocessing.reductions.{n}", getattr(red, n), table,
                           values=False))
    specs.append(Spec("accelrt.multiprocessing.reductions.rebuild_array", lambda: rebuild,
                      rebuild_base, values=False, reset=consume_rest))
    specs.append(Spec("ForkingPickler round trip", lambda: _forking_round_trip,
                      {"obj": lambda: _kept(acc.ones(4, device="cpu:0"))}, values=False))
    return specs


_KEPT: list[Any] = []


def _kept(x: Any) -> Any:
    _KEPT.append(x)
    return x


def _recorded_ipc_event() -> Any:
    import accelrt as acc
    e = acc.Event("cpu:0", interprocess=True)
    e.record(acc.current_stream("cpu:0"))
    return _kept(e)


def _forking_round_trip(obj: Any) -> Any:
    from multiprocessing.reduction import ForkingPickler
    return pickle.loads(ForkingPickler.dumps(obj))


# ---------------------------------------------------------------------- interop

_CAI_MISSING = object()


class CaiProducer:
    """An object exposing a given ``__cuda_array_interface__``."""

    def __init__(self, desc: Any) -> None:
        self.__cuda_array_interface__ = desc


class DLProducer:
    """A DLPack producer wrapping a numpy array, whose ``__dlpack_device__`` answers
    ``device`` and whose ``__dlpack__`` answers ``capsule`` (when given) or numpy's."""

    def __init__(self, host: Any, device: Any = _CAI_MISSING, capsule: Any = _CAI_MISSING
                 ) -> None:
        self.host, self.device, self.capsule = host, device, capsule

    def __dlpack_device__(self) -> Any:
        return self.host.__dlpack_device__() if self.device is _CAI_MISSING else self.device

    def __dlpack__(self, **kwargs: Any) -> Any:
        if self.capsule is not _CAI_MISSING:
            return self.capsule
        kwargs.pop("stream", None)
        return self.host.__dlpack__(**kwargs)


def _tensor() -> Any:
    """A torch CPU tensor where torch is installed (``from_torch``'s baseline), else a numpy
    array (every call then says torch is missing)."""
    try:
        import torch
    except ImportError:
        return np.ones(3, np.float32)
    return torch.ones(3)


def _interop_specs() -> list[Spec]:
    import accelrt as acc
    from accelrt import interop
    from accelrt.interop import _dlpack_in

    host = np.zeros((2, 3), np.float32)
    _KEPT.append(host)

    def cai(shape: Any = (2, 3), typestr: Any = "<f4", data: Any = _CAI_MISSING,
            version: Any = 3, strides: Any = _CAI_MISSING, descr: Any = _CAI_MISSING,
            mask: Any = _CAI_MISSING, stream: Any = _CAI_MISSING) -> dict[str, Any]:
        d: dict[str, Any] = {"shape": shape, "typestr": typestr,
                             "data": (host.ctypes.data, False) if data is _CAI_MISSING else data,
                             "version": version}
        for k, v in (("strides", strides), ("descr", descr), ("mask", mask),
                     ("stream", stream)):
            if v is not _CAI_MISSING:
                d[k] = v
        return d

    def parsed(**fields: Any) -> Any:
        r = interop.parse_cuda_array_interface(cai(**fields))
        return (r.ptr == host.ctypes.data, r.shape, str(r.dtype), r.strides, r.readonly,
                r.stream, r.version, r.size, r.nbytes, r.is_c_contiguous)

    parsed.__signature__ = inspect.signature(cai)  # type: ignore[attr-defined]

    def consumed(**fields: Any) -> Any:
        r = interop.consume_cuda_array_interface(CaiProducer(cai(**fields)), backend="cpu",
                                                 device="cpu:0")
        return (r.shape, str(r.dtype), r.stream)

    consumed.__signature__ = inspect.signature(cai)  # type: ignore[attr-defined]

    def as_array(**fields: Any) -> Any:
        return acc.asarray(CaiProducer(cai(**fields)), device="cpu:0")

    as_array.__signature__ = inspect.signature(cai)  # type: ignore[attr-defined]

    def dl_device(device: Any) -> Any:
        return _dlpack_in.from_dlpack(DLProducer(np.ones(3, np.float32), device=device))

    def dl_capsule(capsule: Any) -> Any:
        return _dlpack_in.from_dlpack(DLProducer(np.ones(3, np.float32), capsule=capsule))

    def dl_asarray(device: Any) -> Any:
        return acc.asarray(DLProducer(np.ones(3, np.float32), device=device), device="cpu:0")

    def stream_id() -> int:
        return int(_kept(acc.Stream("cpu:0")).stream_id)

    table: dict[str, Callable[[], Any]] = {
        "desc": lambda: cai(), "obj": lambda: CaiProducer(cai()),
        "array": lambda: acc.ones(3, device="cpu:0"), "stream": stream_id,
        "tensor": _tensor,
    }
    specs = [
        Spec("parse_cuda_array_interface(fields)", lambda: parsed, {}),
        Spec("parse_cuda_array_interface(fields, stream)", lambda: parsed,
             {"stream": lambda: 5, "strides": lambda: (12, 4), "descr": lambda: [("", "<f4")]}),
        Spec("consume_cuda_array_interface(fields)", lambda: consumed, {"stream": stream_id}),
        Spec("acc.asarray(CAI producer)", lambda: as_array, {}),
        Spec("from_dlpack(__dlpack_device__)", lambda: dl_device, {"device": lambda: (1, 0)}),
        Spec("from_dlpack(__dlpack__)", lambda: dl_capsule,
             {"capsule": lambda: np.ones(3, np.float32).__dlpack__()}),
        Spec("acc.asarray(DLPack producer)", lambda: dl_asarray, {"device": lambda: (1, 0)}),
        _spec("accelrt.interop.from_dlpack", _dlpack_in.from_dlpack, table,
              base={"obj": lambda: np.ones(3, np.float32)}),
    ]
    for n in ("parse_cuda_array_interface", "consume_cuda_array_interface",
              "cuda_array_interface", "wait_for_stream", "CudaArrayInterface"):
        base: dict[str, Callable[[], Any]] = {}
        if n in ("consume_cuda_array_interface", "wait_for_stream"):
            base = {"backend": lambda: "cpu", "device": lambda: "cpu:0"}
        if n == "CudaArrayInterface":
            base = {"ptr": lambda: 4096, "shape": lambda: (2,), "dtype": lambda: np.float32,
                    "strides": lambda: None, "readonly": lambda: False, "stream": lambda: None,
                    "version": lambda: 3}
        specs.append(_spec(f"accelrt.interop.{n}", getattr(interop, n), table, base=base))
    # torch: absent here unless the environment has it (the outcome says which)
    from accelrt.interop import torch as itorch
    for n in ("to_torch", "from_torch", "use_accelrt_allocator"):
        specs.append(_spec(f"accelrt.interop.torch.{n}", getattr(itorch, n), table))
    return specs


# ---------------------------------------------------------------------- accelrt.opencl

def _opencl_specs() -> list[Spec]:
    import accelrt as acc
    if _opencl_backend() is None:
        return [Spec("accelrt.opencl.is_available", lambda: acc.opencl.is_available)]
    ocl = acc.opencl
    from accelrt import memory
    table: dict[str, Callable[[], Any]] = {
        "device": lambda: 0, "stream": lambda: ocl.Stream(0), "size": lambda: 512,
        "seed": lambda: 7, "fraction": lambda: 0.5, "event": lambda: _ocl_event(),
        "new_state": lambda: ocl.get_rng_state(0), "new_states": lambda: ocl.get_rng_state_all(),
        "ptr": lambda: memory.caching_allocator_alloc(512, "opencl:0"),
        "mem_ptr": lambda: memory.caching_allocator_alloc(512, "opencl:0"),
        "peer_device": lambda: 0, "stream_ptr": lambda: _kept(ocl.Stream(0)).stream_id,
        "data_ptr": lambda: _kept(ocl.Stream(0)).stream_id, "obj": lambda: acc.zeros(2, device="opencl:0"),
        "debug_mode": lambda: 0, "enable": lambda: True, "name": lambda: "opencl",
        "path": lambda: "ocl.dot", "settings": lambda: "max_split_size_mb:64",
        "pool": lambda: _kept(memory.MemPool()),
    }
    by_type = {"memory_allocated", "memory_reserved", "max_memory_allocated",
               "max_memory_reserved", "memory_stats", "memory_stats_as_nested_dict",
               "memory_summary", "memory_snapshot", "mem_get_info", "memory_cached",
               "max_memory_cached", "get_rng_state", "get_rng_state_all", "seed", "seed_all",
               "initial_seed", "get_device_properties", "get_device_name", "list_gpu_processes",
               "caching_allocator_alloc", "memory_usage", "utilization", "get_arch_list",
               "host_memory_stats", "host_memory_stats_as_nested_dict", "device_memory_used"}
    skip = {"Graph", "CUDAGraph", "graph", "graph_pool_handle", "make_graphed_callables",
            "PluggableAllocator", "CUDAPluggableAllocator",
            "set_per_process_memory_fraction", "caching_allocator_enable",
            "change_current_allocator", "init", "ipc_collect"}
    specs = []
    for n in sorted(ocl.__all__):
        f = getattr(ocl, n, None)
        if n in skip or f is None or not callable(f) or inspect.ismodule(f) or (
                isinstance(f, type) and issubclass(f, BaseException)):
            continue
        then = _enter if n in ("device", "device_index", "stream", "StreamContext",
                               "device_of") else None
        specs.append(_spec(f"accelrt.opencl.{n}", f, table, then=then,
                           values=n not in by_type))
    return specs


def _ocl_event() -> Any:
    import accelrt as acc
    e = acc.opencl.Event()
    e.record(acc.opencl.current_stream(0))
    return _kept(e)


# ---------------------------------------------------------------------- the environment

#: (variable, values): each value in a child forked before accelrt read the variable
ENV_CASES: list[tuple[str, list[str]]] = [
    # (set_allocator_settings meets every string of builds_probe.SETTINGS: the parse is the
    # same; here the ones an allocator applies when it starts, and the errors' wording)
    ("ACCELRT_ALLOC_CONF", [
        "max_split_size_mb:64", "max_split_size_mb:1.5", "max_split_size_mb:-1",
        "max_split_size_mb:18446744073709551616", "garbage_collection_threshold:nan",
        "roundup_power2_divisions:[256:4,>:2]", "expandable_segments:True",
        "expandable_segments:True,page_reuse:True", "page_reuse:1", "backend:cudaMallocAsync",
        "backend:nope", "unknown_key:1", "per_process_memory_fraction:0.5",
        "per_process_memory_fraction:2", "expandable_segments_reserve:-1",
        "expandable_segments_reserve:40G", "pinned_num_register_threads:3", " " * 3, ",", ":",
        "max_split_size_mb:\u0661\u0662\u0663", "large_segment_size_mb:10"]),
    ("PYTORCH_CUDA_ALLOC_CONF", ["max_split_size_mb:-1", "backend:nope", "x"]),
    ("ACCELRT_CPU_DEVICES", ["0", "1.5", "\u0662", "99999999999999999999", "100000000",
                             "1025", "x"]),
    ("ACCELRT_CPU_MEMORY", ["0", "1.5GB", "-1", "99999999999999999999TB", "x", "nan"]),
    ("ACCELRT_CPU_STREAMS", ["async", "x"]),
    ("ACCELRT_CPU_SHARED_MEMORY", ["true", "x"]),
]


def _env_case(var: str, value: str) -> str:
    """What the first use of accelrt does in a child whose ``var`` is ``value``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child
        code = 1
        try:
            os.close(r)
            os.environ[var] = value
            if var != "ACCELRT_CPU_SHARED_MEMORY":
                os.environ.pop("ACCELRT_CPU_SHARED_MEMORY", None)

            def first_use() -> Any:
                import accelrt as acc
                from accelrt import memory
                a = acc.zeros(2, device="cpu:0")
                return [memory.get_allocator_settings(), acc.cpu.device_count(),
                        a.tolist(), acc.cpu.get_device_properties(0).total_memory]
            signal.signal(signal.SIGALRM, _alarm)
            got = bp.outcome(lambda: _guarded(first_use))
            os.write(w, got.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    return text if status == 0 else f"child exit status {status}: {text}"


def _guarded(f: Callable[[], Any]) -> Any:
    with _guard():
        return f()


# ---------------------------------------------------------------------- main

def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    out_path = os.path.abspath(argv[1])
    os.chdir(os.path.dirname(out_path))
    gc.disable()
    signal.signal(signal.SIGALRM, _alarm)
    import accelrt as acc
    from accelrt import memory
    results: dict[str, str] = {}
    # the environment first: accelrt has read none of its variables yet (the modules their
    # first use imports are imported here, once, and read none of them)
    import accelrt.backends.cpu
    import accelrt.cpu
    import accelrt.distributed
    import accelrt.memory._allocator  # noqa: F401
    # (and the standard library's modules it imports, so that no child imports them again:
    # the entry points' metadata, resource limits, an error's close matches)
    import difflib  # noqa: F401
    import importlib.metadata  # noqa: F401
    import resource  # noqa: F401
    for var, values in ENV_CASES:
        for i, v in enumerate(values):
            results[f"env {var}[{i}:{v!r}]"] = _env_case(var, v)
    bp._elements()
    from accelrt import _backend_registry as reg
    reg.registered()
    _REGISTRY0[0].update(reg._factories)
    _REGISTRY0[1][:] = list(reg._listeners)
    import accelrt.distributed as dist
    _DEBUG0[0] = dist.get_debug_level()
    _world()

    from accelrt.backends.cpu import CpuBackend
    from accelrt.testing import SimulatedBackend
    groups: list[tuple[str, list[Spec], Callable[[], None]]] = [
        ("registry", _registry_specs(), lambda: (_after_backend(), _restore_registry())),
        ("cpu", _raw_specs("CpuBackend", _new_cpu, CpuBackend), _after_backend),
        ("simulated", _raw_specs("SimulatedBackend", _new_sim, SimulatedBackend),
         _after_backend),
        ("testing", _testing_specs(), _after_backend),
        ("distributed", _dist_specs(), _dist_after),
        ("stores", _store_specs(), _close_stores),
        ("multiprocessing", _mp_specs(), lambda: None),
        ("interop", _interop_specs(), lambda: None),
        ("opencl", _opencl_specs(), bp.reset),
    ]
    ocl = _opencl_backend()
    if ocl is not None:
        groups.insert(3, ("opencl raw", _raw_specs("OpenCLBackend", _new_opencl, type(ocl)),
                          _after_backend))
    bp.freeze_setup()
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {"env": round(time.perf_counter() - t0, 2)}
    for label, specs, after in groups:
        t1 = time.perf_counter()
        def after_all(after: Callable[[], None] = after) -> None:
            after()
            bp.reset()
        n0 = len(results)
        for key, got in run(specs, after_all):
            results[key] = got
        counts[label] = len(results) - n0
        seconds[label] = round(time.perf_counter() - t1, 2)
        _KEPT.clear()
    for s in _TCP:   # (closed while the process exits: their closes are not waited for)
        _close_later(s)
    header = {"accelrt": acc.__file__, "compiled": bool(memory.compiled),
              "specs": sum(len(g[1]) for g in groups), "groups": counts,
              "opencl": ocl is not None, "seconds": seconds}
    bp.write_results(out_path, header, results)
    return 0


if __name__ == "__main__":
    bp.run_script(main)
