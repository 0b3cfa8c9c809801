"""The opencl backend: every OpenCL device of every platform, over ``pyopencl``.

Raw operations only (see :class:`~accelrt.backends.Backend`): one context per device, streams
are in-order command queues (profiling enabled, for event timing), events are markers, memory
is coarse-grained SVM at real addresses where the device supports it and ``cl_mem`` buffers at
made-up addresses otherwise (``ACCELRT_OPENCL_MEMORY=auto|svm|buffer``). Every pyopencl error
is translated to :class:`~accelrt.DeviceError` at this boundary. See ``docs/opencl.md``.

Example::

    >>> from accelrt.backends.opencl import OpenCLBackend
    >>> reason = OpenCLBackend.unavailable_reason()
    >>> reason is None or "opencl" in reason.lower()
    True
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, ClassVar

import numpy as np

from ..._backend import Capabilities
from ..._errors import BackendUnavailableError, DeviceError, map_backend_errors
from ..._fork import reinit_after_fork
from ..._handles import DevicePtr, EventHandle, StreamHandle
from ..._stream_callback import refuse
from ..cpu._memory import HostMemory
from ._discovery import (FORKED_MSG, import_cl, list_devices, memory_mode_setting,
                         unavailable_reason)
from ._memory import ALIGNMENT, BufferMemory, SvmMemory
from .._common import (HandleTable, KeptErrors, bad_handle, check_int, check_size, reset_in_child,
                       stream_failed)
from .._table_backend import DeviceRanges, TableBackend
from ._streams import ClEvent, ClStream, HostWorker

__all__ = ["OpenCLBackend"]

_K_DL_OPENCL = 4   # DLPack kDLOpenCL
_ALL_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "float16", "float32", "float64", "complex64", "complex128")


class _Device:
    """Per-device state, created on first use (context, default queue, memory).

    ``peer`` is a private in-order queue, made on the first peer copy into the device, that
    carries the device side of peer copies (see :meth:`OpenCLBackend.memcpy_peer`): no user
    stream orders it, so a copy never waits behind work that itself waits for that copy.
    """

    __slots__ = ("ctx", "default", "index", "lock", "mem", "peer", "props", "used")

    def __init__(self, index: int, ctx: Any, props: Any, mem: Any, default: ClStream) -> None:
        self.index = index
        self.ctx = ctx
        self.props = props
        self.mem = mem
        self.default = default
        self.used = 0                  # guarded by lock: bytes allocated through malloc
        self.lock = reinit_after_fork(threading.Lock())
        self.peer: Any = None          # guarded by lock (creation): the peer-copy queue


def _finished(s: ClStream) -> bool:
    """True once a (destroyed) stream's last command completed and no error is kept."""
    last = s.last
    return not s.kept.has(s) and (last is None or last.command_execution_status == 0)


def _close_all(streams: list[ClStream]) -> None:
    for s in streams:
        with contextlib.suppress(Exception):  # best effort at interpreter exit
            s.close()


def _info(d: Any, attr: str, default: Any) -> Any:
    """An optional device query (deprecated or extension-only ones), or ``default``."""
    try:
        return getattr(d, attr)
    except Exception:  # noqa: BLE001 - pyopencl raises LogicError, AttributeError, ...
        return default


_CL_DEVICE_UUID_KHR = 0x106A


def device_uuid(d: Any) -> str:
    """A stable UUID of an OpenCL device: ``CL_DEVICE_UUID_KHR`` where the driver offers
    ``cl_khr_device_uuid``, else one derived from this machine's id and the device's identity
    (platform, vendor id, name, and its position among the platform's devices), so that two
    identical devices differ and a process sees the same value as every other.

    Example::

        >>> from accelrt.backends.opencl._backend import device_uuid
        >>> class Platform:
        ...     name = "P"
        ...     def get_devices(self): return [dev]
        >>> class Dev:
        ...     name, vendor_id, extensions, platform = "D", 1, "", Platform()
        >>> dev = Dev()
        >>> device_uuid(dev) == device_uuid(dev)
        True
    """
    from ..._properties import DeviceUUID, derived_uuid
    if "cl_khr_device_uuid" in str(_info(d, "extensions", "")).split():
        raw = _info_raw(d, _CL_DEVICE_UUID_KHR)
        if isinstance(raw, (bytes, bytearray, list, tuple)) and len(raw) == 16 and any(raw):
            return str(DeviceUUID(uuid.UUID(bytes=bytes(raw))))
    platform = _info(d, "platform", None)
    siblings = list(_info(platform, "get_devices", lambda: [])()) if platform is not None else []
    position = next((i for i, s in enumerate(siblings) if s == d), -1)
    return str(derived_uuid("opencl", str(_info(platform, "name", "")).strip(),
                            _info(d, "vendor_id", 0), str(_info(d, "name", "")).strip(),
                            position))


def _info_raw(d: Any, param: int) -> Any:
    try:
        return d.get_info(param)
    except Exception:  # noqa: BLE001 - pyopencl may not know how to decode the answer
        return None


def _extensions(d: Any) -> set[str]:
    """The extension names a device reports (``CL_DEVICE_EXTENSIONS``)."""
    return set(str(_info(d, "extensions", "")).split())


def _device_type(cl: Any, bits: int) -> str:
    for flag, label in ((cl.device_type.GPU, "gpu"), (cl.device_type.CPU, "cpu"),
                        (cl.device_type.ACCELERATOR, "accelerator")):
        if bits & int(flag):
            return label
    return "other"


def _has_svm(cl: Any, dev: Any) -> bool:
    try:
        caps = int(dev.svm_capabilities)
    except Exception:  # noqa: BLE001 - OpenCL 1.x devices have no such query
        return False
    return bool(caps & int(cl.device_svm_capabilities.COARSE_GRAIN_BUFFER))


class OpenCLBackend(TableBackend[ClStream, ClEvent]):
    """Every OpenCL device (all platforms) as an accelrt backend.

    Args:
        memory_mode: ``"auto"`` (SVM where supported, else buffers), ``"svm"`` or
            ``"buffer"``; default ``ACCELRT_OPENCL_MEMORY`` or ``"auto"``.
        name: registry name of this instance (default ``"opencl"``).

    Raises:
        BackendUnavailableError: pyopencl is missing or no OpenCL device exists.
        TypeError, ValueError: a malformed argument; ``"svm"`` on a device without SVM.

    Example::

        >>> from accelrt.backends.opencl import OpenCLBackend
        >>> OpenCLBackend.name
        'opencl'
    """

    name: ClassVar[str] = "opencl"
    family: ClassVar[str] = "opencl"
    fill_aligned: ClassVar[bool] = True

    def __init__(self, memory_mode: str | None = None, *, name: str | None = None) -> None:
        self._closed = False   # Backend._closed on the instance: each operation reads it
        mode = memory_mode_setting(memory_mode)
        self._set_name(name)
        try:
            self._cl = import_cl()
        except ImportError as exc:
            raise BackendUnavailableError(f"Backend 'opencl' is not available: {exc}") from exc
        devices = list_devices()
        if not devices:
            raise BackendUnavailableError(f"Backend 'opencl' is not available: "
                                          f"{unavailable_reason()}")
        self._cl_devices = devices
        self._n = len(devices)
        self._index_detail = f"there are {self._n} OpenCL device(s)"
        svm = [_has_svm(self._cl, d) for d in devices]
        if mode == "svm" and not all(svm):
            names = ", ".join(repr(d.name) for d, ok in zip(devices, svm) if not ok)
            raise ValueError(f"memory_mode='svm' but device(s) {names} do not support "
                             "coarse-grained SVM; use 'auto' or 'buffer'")
        self._svm = [ok and mode != "buffer" for ok in svm]
        self._mode = mode
        self._lock = reinit_after_fork(threading.Lock())  # guards creation/removal below
        # the first exception of each stream's host functions, raised by its next sync
        self._kept: KeptErrors[ClStream] = KeptErrors()
        self._state: list[_Device | None] = [None] * self._n   # guarded by _lock (writes)
        self._handles = itertools.count(1)
        self._streams: dict[int, ClStream] = {}       # guarded by _lock (writes)
        self._events: HandleTable[ClEvent] = HandleTable(self._lock, self._handles)
        self._all: list[ClStream] = []                # guarded by _lock: every stream ever
        self._host = HostMemory()
        self._orphans: deque[Any] = deque()          # guarded by _lock: see stream_destroy
        self._forked = False                          # a forked child's copy: see _after_fork
        # destroyed streams whose queued work may still run: free (SVM) and synchronize wait
        # for them as for live streams (CUDA's model); see _device_streams
        self._retired: list[ClStream] = []           # guarded by _lock
        self._finalizer = weakref.finalize(self, _close_all, self._all)
        reset_in_child(self)   # see _after_fork
        # host memory from host_malloc is aligned but pageable (OpenCL has no portable pinned
        # allocation): still what the staging pool needs, but users cannot pin arrays in it
        # (page_locked_host_memory=False)
        self._caps = Capabilities(pinned_host_memory=True, host_functions=True,
                                  peer_copies=True, dlpack_device_type=_K_DL_OPENCL,
                                  device_fill=True)

    # ------------------------------------------------------------------ leak checks
    def live_handles(self) -> dict[str, int]:
        """How many streams (default streams not counted) and events made through this
        backend are alive (not destroyed): a read-only count for leak checks
        (``accelrt.testing.leak_check``)."""
        if self._closed:
            raise self._closed_error("live_handles")
        return {"streams": len(self._streams), "events": len(self._events), "graphs": 0}

    # ------------------------------------------------------------------ discovery
    @classmethod
    def unavailable_reason(cls) -> str | None:
        """``None``, or why no OpenCL device can be used and what to install.

        Example::

            >>> from accelrt.backends.opencl import OpenCLBackend
            >>> isinstance(OpenCLBackend.unavailable_reason(), (str, type(None)))
            True
        """
        return unavailable_reason()

    def default_candidate(self) -> bool:
        """True if some OpenCL device is not a CPU: a CPU-only OpenCL platform (PoCL) is not
        chosen as the current accelerator by default, since the ``cpu`` backend serves that
        processor already; ``ACCELRT_ACCELERATOR=opencl`` still selects it."""
        cpu = self._cl.device_type.CPU
        return any(not (d.type & cpu) for d in self._cl_devices)

    def _dev(self, index: int) -> _Device:
        st = self._state[index] if type(index) is int and 0 <= index < self._n else None
        if st is not None:
            return st
        self._check_forked()
        self._check_index(index)
        cl = self._cl
        with self._lock:
            st = self._state[index]
            if st is None:
                device = self._cl_devices[index]
                with map_backend_errors(self.name, f"creating the context of {self.name}:{index}"):
                    ctx = cl.Context([device])
                    props = self._queue_props(device)
                    queue = cl.CommandQueue(ctx, device, properties=props)
                mem_cls = SvmMemory if self._svm[index] else BufferMemory
                default = ClStream(index, 0, 0, queue, self._kept)
                self._all.append(default)
                st = _Device(index, ctx, props, mem_cls(cl, ctx, index), default)
                self._state[index] = st
        return st

    def _check_forked(self) -> None:
        if self._forked:
            raise BackendUnavailableError(FORKED_MSG)

    def _after_fork(self) -> None:
        """In a forked child: forget the parent's contexts, queues, streams and events (the
        OpenCL driver's threads are gone: a command would never complete) and refuse every
        operation that needs them with :data:`FORKED_MSG`, as CUDA does after ``cuInit``."""
        self._forked = True
        self._state = [None] * self._n
        self._streams = {}
        self._events.clear()
        self._all.clear()                  # nothing of the parent's to close at exit
        self._orphans.clear()

    def _queue_props(self, device: Any) -> int:
        cl = self._cl
        prof = int(cl.command_queue_properties.PROFILING_ENABLE)
        try:
            ok = int(device.queue_properties) & prof
        except Exception:  # noqa: BLE001 - OpenCL 2+ names it queue_on_host_properties
            ok = prof
        return prof if ok else 0

    def init_device(self, index: int) -> None:
        """Create the device's context and default queue (done lazily otherwise)."""
        if self._closed:
            raise self._closed_error("init_device")
        self._dev(index)

    def get_device_properties(self, index: int) -> dict[str, Any]:
        """``name``, ``total_memory`` (global memory), ``multi_processor_count`` (compute
        units), ``uuid`` (:func:`device_uuid`), ``L2_cache_size`` (the global memory cache),
        ``is_integrated`` (host-unified memory), ``max_threads_per_multi_processor`` and
        ``max_threads_per_block`` (the largest work-group), ``shared_memory_per_block`` (local
        memory), ``clock_rate`` (the peak clock in kHz), plus ``platform``, ``vendor``, ``version``, ``driver_version``,
        ``device_type``, ``max_mem_alloc_size``, ``memory_mode`` (``"svm"``/``"buffer"``),
        ``host_accessible`` and ``vm_supported`` (both False). Creates no context."""
        d = self._cl_devices[self._check_index(index)]
        cl = self._cl
        with map_backend_errors(self.name, "get_device_properties"):
            return {
                "name": d.name.strip(),
                "total_memory": int(d.global_mem_size),
                "multi_processor_count": int(d.max_compute_units),
                "uuid": device_uuid(d),
                "L2_cache_size": int(d.global_mem_cache_size),
                "is_integrated": bool(_info(d, "host_unified_memory", False)),
                "max_threads_per_multi_processor": int(d.max_work_group_size),
                "max_threads_per_block": int(d.max_work_group_size),
                "shared_memory_per_block": int(d.local_mem_size),
                "clock_rate": int(d.max_clock_frequency) * 1000,   # MHz -> kHz, as CUDA's
                "platform": d.platform.name.strip(),
                "vendor": d.vendor.strip(),
                "version": d.version.strip(),
                "driver_version": d.driver_version.strip(),
                "device_type": _device_type(cl, int(d.type)),
                "max_mem_alloc_size": int(d.max_mem_alloc_size),
                "memory_mode": "svm" if self._svm[index] else "buffer",
                "host_accessible": False,
                "vm_supported": False,
                # bfloat16 conversions and the matrix units that run TF32 (the extensions of
                # torch.xpu's has_bfloat16_conversions / has_subgroup_matrix_multiply_accumulate)
                "has_bfloat16": "cl_intel_bfloat16_conversions" in _extensions(d),
                "has_tf32": "cl_intel_subgroup_matrix_multiply_accumulate" in _extensions(d),
            }

    def get_device_capability(self, index: int) -> dict[str, Any]:
        """Supported dtypes: float64/complex128 need ``cl_khr_fp64``, float16 ``cl_khr_fp16``."""
        d = self._cl_devices[self._check_index(index)]
        with map_backend_errors(self.name, "get_device_capability"):
            ext = set(d.extensions.split())
        drop = set()
        if "cl_khr_fp64" not in ext:
            drop |= {"float64", "complex128"}
        if "cl_khr_fp16" not in ext:
            drop.add("float16")
        return {"supported_dtypes": [t for t in _ALL_DTYPES if t not in drop]}

    def get_memory_info(self, index: int) -> tuple[int, int]:
        """``(total - allocated through this backend, total)``: OpenCL has no free query."""
        total = int(self._cl_devices[self._check_index(index)].global_mem_size)
        st = self._state[index]
        return total - (st.used if st is not None else 0), total

    def _largest(self, index: int) -> int:
        """The largest :meth:`malloc` of device ``index``: ``max_mem_alloc_size``, less the
        alignment padding of an SVM allocation (:meth:`SvmMemory.alloc`)."""
        largest = int(self._cl_devices[index].max_mem_alloc_size)
        return largest - ALIGNMENT if self._svm[index] else largest

    def oom_advice(self, index: int) -> str:
        """The sentence an out-of-memory error on device ``index`` ends with: OpenCL's limit on
        a single allocation (often a quarter of the device memory), which no setting raises."""
        from ...memory._oom import format_size
        largest = self._largest(self._check_index(index))
        return (f"A single allocation on {self.family}:{index} can be at most "
                f"{format_size(largest)} (the device's max_mem_alloc_size); split larger data "
                "into several arrays (OpenCL has no expandable segments).")

    # ------------------------------------------------------------------ memory
    def malloc(self, index: int, size: int) -> DevicePtr:
        """Allocate ``size`` bytes; ``0`` when over the device's global memory or its largest
        single allocation (``max_mem_alloc_size``, less 256 bytes in SVM mode)."""
        if self._closed:
            raise self._closed_error("malloc")
        d = self._dev(index)
        size = check_size(size)
        total = int(self._cl_devices[index].global_mem_size)
        with d.lock:
            if d.used + size > total or size > self._largest(index):
                return DevicePtr(0)
            with map_backend_errors(self.name, "malloc"):
                ptr = int(d.mem.alloc(size))
            if ptr:
                d.used += size
            return DevicePtr(ptr)

    def free(self, index: int, ptr: DevicePtr) -> None:
        """Free a :meth:`malloc` pointer. SVM memory waits for the device's queued work
        first (as ``cudaFree``); buffers are released when their queued work is done."""
        if self._closed:
            raise self._closed_error("free")
        d = self._dev(index)
        self._check_ptr(ptr)
        if d.mem.svm:
            d.mem.require(ptr)
            self._finish(index)
        with map_backend_errors(self.name, "free"):
            size = d.mem.free(ptr)
        with d.lock:
            d.used -= size

    # ------------------------------------------------------------------ streams: plumbing
    def _stream(self, index: int, stream: int) -> ClStream:
        if type(stream) is int and type(index) is int:
            if stream == 0:
                if 0 <= index < self._n:
                    return self._dev(index).default
            else:
                s = self._streams.get(stream)
                if s is not None and s.device == index:
                    return s
        self._check_forked()
        self._check_index(index)
        raise bad_handle("stream", stream, f" of {self.name}:{index}",
                         "use 0 (the default stream) or a handle from stream_create")

    def _event(self, event: int, index: int) -> ClEvent:
        ev = self._events.get(event) if type(event) is int else None
        if ev is None or type(index) is not int or ev.device != index:
            self._check_forked()
            self._check_index(index)
            raise bad_handle("event", event, f" of {self.name}:{index}",
                             "use a handle from event_create that was not destroyed")
        return ev

    def _memory(self, index: int) -> DeviceRanges:
        mem: DeviceRanges = self._dev(index).mem
        return mem

    def _enqueue(self, s: ClStream, what: str, fn: Callable[[Any], Any]) -> None:
        with map_backend_errors(self.name, what):
            ev = fn(s.queue)
            s.track(ev, isinstance(ev, self._cl.NannyEvent))

    def _drop_orphans(self) -> None:
        with self._lock:
            o = self._orphans
            while o and o[0].command_execution_status == 0:  # CL_COMPLETE
                o.popleft()

    def _describe(self, s: ClStream) -> str:
        return stream_failed(self.name, s.handle, s.device)

    def _raise_kept(self, streams: Iterable[ClStream]) -> None:
        self._kept.raise_for(streams, self._describe)

    def _device_streams(self, index: int) -> list[ClStream]:
        """The streams of device ``index``: its live ones and the destroyed ones whose work
        may still run (or whose kept error was not raised yet); finished ones are forgotten."""
        streams = [self._dev(index).default] + [s for s in list(self._streams.values())
                                                if s.device == index]
        if self._retired:
            with self._lock:
                self._retired = [s for s in self._retired if not _finished(s)]
                streams += [s for s in self._retired if s.device == index]
        return streams

    def _finish(self, index: int) -> None:
        me = threading.current_thread()
        for s in self._device_streams(index):
            if s.worker is not None and s.worker.thread is me:
                continue   # (a host function of s frees: s's queue waits for it, as cpu's)
            with map_backend_errors(self.name, "synchronize"):
                s.queue.finish()
            s.drop_completed()
        peer = self._dev(index).peer
        if peer is not None:
            with map_backend_errors(self.name, "synchronize"):
                peer.finish()

    def _peer_queue(self, d: _Device) -> Any:
        """The private queue of device ``d`` that peer copies write through (made once)."""
        q = d.peer
        if q is None:
            with d.lock:
                q = d.peer
                if q is None:
                    with map_backend_errors(self.name, "creating the peer-copy queue of "
                                            f"{self.name}:{d.index}"):
                        q = d.peer = self._cl.CommandQueue(d.ctx, self._cl_devices[d.index])
        return q

    def _host_call(self, s: ClStream, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the host in stream order; later work on ``s`` waits for it."""
        cl = self._cl
        d = self._dev(s.device)
        with map_backend_errors(self.name, "launch_host_func"):
            marker = cl.enqueue_marker(s.queue)
            done = cl.UserEvent(d.ctx)
            barrier = cl.enqueue_barrier(s.queue, wait_for=[done])
            s.queue.flush()
        with s.lock:
            if s.worker is None:
                s.worker = HostWorker(cl, f"accelrt-opencl{s.device}-stream{s.handle}", s.keep,
                                      f"stream {s.handle:#x} of {self.name}:{s.device}")
            worker = s.worker
        worker.submit(marker, fn, done)
        s.track(barrier, False)

    # ------------------------------------------------------------------ copies
    def _queue_copy(self, s: ClStream, kind: str, dst: int, src: int, n: int) -> None:
        """A copy as :meth:`TableBackend.memcpy` checked it; ``d2d`` ranges must not
        overlap."""
        if kind == "d2d" and src < dst + n and dst < src + n:
            raise ValueError("memcpy d2d: the source and destination ranges overlap; OpenCL "
                             "cannot copy overlapping ranges, copy through a temporary")
        if kind[0] == "h":          # kind is "<src>2<dst>"
            self._check_host(src, n, f"memcpy {kind} src")
        if kind[2] == "h":
            self._check_host(dst, n, f"memcpy {kind} dst")
        if kind == "h2h":
            self._host_call(s, partial(ctypes.memmove, dst, src, n))
            return
        mem = self._dev(s.device).mem
        op = {"h2d": mem.h2d, "d2h": mem.d2h, "d2d": mem.d2d}[kind]
        self._enqueue(s, f"memcpy {kind}", lambda q: op(q, dst, src, n))

    def _check_host(self, ptr: int, n: int, what: str) -> None:
        """ValueError if the host range ``[ptr, ptr+n)`` meets device memory of this backend:
        the host cannot read or write it (a buffer-mode address is made up: the copy would
        crash the process), so the caller passed the wrong ``kind``."""
        for st in self._state:
            if st is not None and st.mem.table.overlaps(ptr, n):
                raise ValueError(f"{what}: [{ptr:#x}, {ptr + n:#x}) is device memory of "
                                 f"{self.name}:{st.index}, not host memory; use kind 'd2d' "
                                 "(or 'h2d'/'d2h' with the device side there)")

    def memcpy_peer(self, dst_index: int, dst: int, src_index: int, src: int, nbytes: int,
                    stream: StreamHandle) -> None:
        """Copy between devices, ordered on ``stream`` of the source: a device-to-host copy
        into a staging buffer, then (on the stream's host worker) a write to ``dst``.

        The write goes through the destination's private peer-copy queue, never one of its
        streams: the caller orders the copy against the destination's streams with events (as
        CUDA's ``cudaMemcpyPeerAsync``), and a destination stream that waits for an event
        recorded after the copy must not also be in the copy's way."""
        if self._closed:
            raise self._closed_error("memcpy_peer")
        if dst_index == src_index:
            self.memcpy(src_index, dst, src, nbytes, "d2d", stream)
            return
        dd = self._dev(self._check_index(dst_index))
        s = self._stream(src_index, stream)
        n = check_size(nbytes, "nbytes", allow_zero=True)
        dst, src = self._check_ptr(dst, "dst"), self._check_ptr(src, "src")
        dd.mem.check_range(dst, n, "memcpy_peer dst")
        smem = self._dev(src_index).mem
        smem.check_range(src, n, "memcpy_peer src")
        if not n:
            return
        staging = np.empty(n, dtype=np.uint8)
        hptr = int(staging.ctypes.data)
        self._enqueue(s, "memcpy_peer", lambda q: smem.d2h(q, hptr, src, n))

        dq = self._peer_queue(dd)

        def write() -> None:
            staging.shape  # noqa: B018 - keeps the staging buffer alive until here
            ev = dd.mem.h2d(dq, dst, hptr, n)
            dq.flush()
            ev.wait()

        self._host_call(s, write)

    def _queue_memset(self, s: ClStream, ptr: int, value: int, nbytes: int) -> None:
        self._enqueue_fill(s, ptr, np.array([value], dtype=np.uint8), nbytes, "memset")

    def _queue_fill(self, s: ClStream, ptr: int, pattern: bytes, dtype: Any,
                    nbytes: int) -> None:
        self._enqueue_fill(s, ptr, np.frombuffer(pattern, dtype=dtype).copy(), nbytes, "fill")

    def _enqueue_fill(self, s: ClStream, ptr: int, pattern: np.ndarray, nbytes: int,
                      what: str) -> None:
        mem = self._dev(s.device).mem
        self._enqueue(s, what, lambda q: mem.fill(q, ptr, pattern, nbytes))

    def can_access_peer(self, index: int, peer: int) -> bool:
        """Only a device itself: each device has its own context."""
        return self._check_index(index) == self._check_index(peer)

    # ------------------------------------------------------------------ streams
    def stream_create(self, index: int, priority: int) -> StreamHandle:
        """Create an in-order queue; ``priority`` is recorded (range ``(0, 0)``)."""
        if self._closed:
            raise self._closed_error("stream_create")
        d = self._dev(index)
        check_int(priority, "stream priority")
        with map_backend_errors(self.name, "stream_create"):
            queue = self._cl.CommandQueue(d.ctx, self._cl_devices[index], properties=d.props)
        with self._lock:
            handle = next(self._handles)
            s = ClStream(index, handle, 0, queue, self._kept)
            self._streams[handle] = s
            self._all.append(s)
        return StreamHandle(handle)

    def stream_destroy(self, index: int, stream: StreamHandle) -> None:
        """Destroy a stream and return at once; its queued work still completes, and
        :meth:`free` (SVM) and :meth:`synchronize` of the device wait for it."""
        if self._closed:
            raise self._closed_error("stream_destroy")
        s = self._stream(index, stream)
        if s.handle == 0:
            raise ValueError(f"the default stream of {self.name}:{index} cannot be destroyed")
        with self._lock:
            self._streams.pop(s.handle, None)
            self._all.remove(s)
            self._retired.append(s)
        with map_backend_errors(self.name, "stream_destroy"):
            s.close()
        with s.lock:
            held = list(s.pending)
            s.pending.clear()
        with self._lock:
            self._orphans.extend(held)   # collected once complete, never waited for here
        self._drop_orphans()

    def stream_is_valid(self, index: int, stream: StreamHandle) -> bool:
        """True for 0 and for live handles from :meth:`stream_create` on ``index``."""
        if self._closed:
            raise self._closed_error("stream_is_valid")
        if type(stream) is not int or type(index) is not int:
            return False
        if stream == 0:
            return 0 <= index < self._n
        s = self._streams.get(stream)
        return s is not None and s.device == index

    def stream_query(self, index: int, stream: StreamHandle) -> bool:
        """True if all work on ``stream`` completed; raises a kept host-function error."""
        if self._closed:
            raise self._closed_error("stream_query")
        s = self._stream(index, stream)
        self._raise_kept((s,))
        last = s.last
        if last is None:
            return True
        cl = self._cl
        with map_backend_errors(self.name, "stream_query"):
            s.queue.flush()
            status = int(last.command_execution_status)
        if status < 0:
            raise DeviceError(f"{stream_failed(self.name, s.handle, index)} with status "
                              f"{status}")
        return status == int(cl.command_execution_status.COMPLETE)

    def stream_synchronize(self, index: int, stream: StreamHandle) -> None:
        """Block until ``stream``'s work completed; raises a kept host-function error."""
        if self._closed:
            raise self._closed_error("stream_synchronize")
        s = self._stream(index, stream)
        refuse("stream_synchronize")   # (a host function's thread must not wait)
        with map_backend_errors(self.name, "stream_synchronize"):
            s.queue.finish()
        s.drop_completed()
        self._raise_kept((s,))

    def stream_wait_event(self, index: int, stream: StreamHandle, event: EventHandle) -> None:
        """Later work on ``stream`` waits for ``event``'s current record (any device)."""
        if self._closed:
            raise self._closed_error("stream_wait_event")
        s = self._stream(index, stream)
        ev = self._events.get(event) if type(event) is int else None
        if ev is None:
            self._check_forked()
            raise bad_handle("event", event, "",
                             "use a handle from event_create that was not destroyed")
        marker = ev.marker
        if marker is None:
            return
        if ev.device == s.device:
            self._enqueue(s, "stream_wait_event",
                          lambda q: self._cl.enqueue_barrier(q, wait_for=[marker]))
        else:  # another context: the stream's host worker waits for the marker
            self._host_call(s, marker.wait)

    def synchronize(self, index: int) -> None:
        """Finish every queue of device ``index``; raises kept host-function errors."""
        if self._closed:
            raise self._closed_error("synchronize")
        streams = self._device_streams(self._check_index(index))
        refuse("synchronize")
        for s in streams:
            with map_backend_errors(self.name, "synchronize"):
                s.queue.finish()
            s.drop_completed()
        self._drop_orphans()
        self._raise_kept(streams)

    # ------------------------------------------------------------------ events
    def _new_event(self, index: int, timing: bool, interprocess: bool) -> ClEvent:
        self._dev(index)
        if interprocess:
            raise ValueError("the opencl backend has no interprocess events; create the event "
                             "with interprocess=False")
        return ClEvent(index, timing)

    def event_record(self, index: int, event: EventHandle, stream: StreamHandle) -> None:
        """Record ``event`` (a marker) at the end of ``stream``."""
        if self._closed:
            raise self._closed_error("event_record")
        ev = self._event(event, index)
        s = self._stream(index, stream)
        with map_backend_errors(self.name, "event_record"):
            marker = self._cl.enqueue_marker(s.queue)
            s.queue.flush()
        s.track(marker, False)
        ev.marker, ev.stream = marker, s

    def _status(self, ev: ClEvent, what: str) -> int:
        assert ev.stream is not None
        self._raise_kept((ev.stream,))
        with map_backend_errors(self.name, what):
            status = int(ev.marker.command_execution_status)
        if status < 0:
            raise DeviceError(f"{self.name}: the work before the event failed with status {status}")
        return status

    def event_query(self, index: int, event: EventHandle) -> bool:
        """True if the work before the last record completed (True if never recorded)."""
        if self._closed:
            raise self._closed_error("event_query")
        ev = self._event(event, index)
        if ev.marker is None:
            return True
        return self._status(ev, "event_query") == int(self._cl.command_execution_status.COMPLETE)

    def event_synchronize(self, index: int, event: EventHandle) -> None:
        """Block until the last record completed; raises a kept error of its stream."""
        if self._closed:
            raise self._closed_error("event_synchronize")
        ev = self._event(event, index)
        if ev.marker is None:
            return
        refuse("event_synchronize")
        with map_backend_errors(self.name, "event_synchronize"):
            ev.marker.wait()
        self._status(ev, "event_synchronize")

    def _timestamp(self, ev: ClEvent, handle: int) -> int:
        if not ev.timing:
            raise DeviceError(f"{self.name}: event {handle} was created without timing; create "
                              "both events with enable_timing=True to measure elapsed time")
        if ev.marker is None:
            raise DeviceError(f"{self.name}: event {handle} was never recorded; record both events "
                              "before asking for elapsed time")
        if self._status(ev, "event_elapsed_time") != int(
                self._cl.command_execution_status.COMPLETE):
            raise DeviceError(f"{self.name}: event {handle} has not completed yet; synchronize it "
                              "(or its stream) before asking for elapsed time")
        with map_backend_errors(self.name, "event_elapsed_time"):
            return int(ev.marker.profile.end)

    def event_ipc_handle(self, index: int, event: EventHandle) -> bytes:
        """Not supported: raises ValueError."""
        if self._closed:
            raise self._closed_error("event_ipc_handle")
        raise ValueError("the opencl backend has no interprocess events")

    def event_from_ipc_handle(self, index: int, handle: bytes) -> EventHandle:
        """Not supported: raises ValueError."""
        if self._closed:
            raise self._closed_error("event_from_ipc_handle")
        raise ValueError("the opencl backend has no interprocess events")

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Finish all queued work, stop the host-function workers and release the queues,
        then close the instance (:meth:`Backend.close`: later operations raise; idempotent)."""
        if self.closed:
            return
        for i, st in enumerate(self._state):
            if st is not None:
                self._finish(i)
        workers = [s.worker for s in list(self._all) if s.worker is not None]
        self._finalizer()
        for w in workers:
            w.thread.join(10.0)
        super().close()

    def __repr__(self) -> str:
        return f"<accelrt backend {self.name!r}: {self._n} OpenCL device(s), {self._mode} memory>"
