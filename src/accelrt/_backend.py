"""The backend contract (raw operations only). The lazy backend registry is
:mod:`accelrt._backend_registry`; its names are importable from here too.

A backend is one device family (``cpu``, ``cuda``, ``opencl``, or a third party's). It exposes
*raw* operations: device queries, raw allocation, copies, stream and event primitives, and
optionally virtual-memory mapping and graph capture. Everything else (caching allocator,
statistics, snapshots, RNG bookkeeping, collectives, graphs, current device/stream) is written
once in accelrt's core, above this contract.

Handles are ``int``\\ s in ``[0, 2**64)`` chosen by the backend, each with its own type for
type checkers (:data:`StreamHandle`, :data:`EventHandle`, :data:`DevicePtr`,
:data:`GraphHandle`, see :mod:`accelrt._handles`): a checker rejects a stream passed where an
event goes. Handle ``0`` is never a valid event or graph; stream handle ``default_stream(i)``
is the device's default (legacy null) stream. The core checks every result it keeps
(:mod:`accelrt._checked`): a bad one raises ``DeviceError`` naming the backend and the call. One argument order everywhere: the device index first, the stream that orders
the work last (``memcpy(index, dst, src, nbytes, kind, stream)``).

What a device can do beyond the abstract operations is declared once, by
:meth:`Backend.capabilities` (a frozen :class:`Capabilities`): virtual memory, graphs, pinned
host memory, host functions, peer copies, interprocess events and memory, host-accessible
memory, the DLPack device type, the CUDA stream and array protocols, device-side RNG
(``philox_fill``) and sums (``elementwise_add``), pointer lookup (``pointer_device``) and adopted
memory. Every optional operation is declared on :class:`Backend` and raises
``NotImplementedError`` naming its capability until overridden; the core asks
``capabilities()`` and never a backend's name.

Built-in backends are imported lazily by :func:`get_backend`; third-party backends come from
the ``accelrt.backends`` entry-point group (the entry point loads a :class:`Backend` subclass or
a zero-argument factory returning an instance) or from :func:`register`.

Example::

    >>> from accelrt import backends
    >>> "cpu" in backends.available()
    True
    >>> backends.get_backend("cpu").name
    'cpu'
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

from ._capabilities import _DLPACK_DEVICE_TYPES as _DLPACK_DEVICE_TYPES
from ._capabilities import _K_DL_EXT_DEV, Capabilities
from ._errors import AcceleratorValueError, CaptureNotSupportedError
from ._handles import DevicePtr, EventHandle, GraphHandle, StreamHandle

__all__ = [
    "BACKENDS",
    "Backend",
    "Capabilities",
    "DevicePtr",
    "EventHandle",
    "GraphHandle",
    "StreamHandle",
    "available",
    "get",
    "get_all_backends",
    "get_available_backends",
    "get_backend",
    "entry_point_problems",
    "on_change",
    "register",
    "registered",
    "unavailable_reason",
    "unregister",
]

#: Built-in backends, in the default order used to choose the current accelerator.
BACKENDS: tuple[str, ...] = ("cuda", "opencl", "cpu")

_BUILTIN_MODULES = {
    "cpu": "accelrt.backends.cpu",
    "cuda": "accelrt.backends.cuda",
    "opencl": "accelrt.backends.opencl",
}
_INSTALL_HINTS = {
    "cpu": "the cpu backend is part of accelrt",
    "cuda": 'install it with: pip install "accelrt[cuda]" (and an NVIDIA driver)',
    "opencl": 'install it with: pip install "accelrt[opencl]" (and an OpenCL ICD such as PoCL)',
}


#: default capabilities by backend name (a backend that does not override ``capabilities``)
_default_caps: dict[str, Capabilities] = {}


def _unsupported(backend: Backend, operation: str, capability: str) -> NotImplementedError:
    return NotImplementedError(
        f"the {backend.name} backend does not implement {operation} (its capabilities() has "
        f"{capability}=False); check backend.capabilities(index).{capability} before calling "
        "it, or override both")


def _abstract(name: str) -> NotImplementedError:
    return NotImplementedError(f"The {name!r} method must be implemented.")


def _no_ipc(name: str) -> ValueError:
    return ValueError(f"the {name} backend cannot share device memory between processes (it "
                      "has no interprocess memory handles); copy the array to a backend that "
                      "can (cpu with ACCELRT_CPU_SHARED_MEMORY=1, or cuda) or send its contents")


#: ``[True]`` once a backend class with ``follows_current_device`` exists (cuda's is made when
#: it is first used): until then the core does not look at the backends' flag when the current
#: device changes, so the cpu backend's switches cost what they did
_follows_any: list[bool] = [False]


class Backend(abc.ABC):
    """Raw operations of one device family; subclass it to add a backend.

    Subclasses set :attr:`name`, implement the abstract methods and declare what else they
    can do in :meth:`capabilities`; each optional operation (virtual memory, graphs, pinned
    host memory, host functions, peer copies, interprocess events and memory, device-side RNG
    and sums, pointer lookup, adopted memory) is declared here and raises
    ``NotImplementedError`` naming its capability until a subclass overrides it. Methods take
    a device ``index`` that the core has already range-checked. Every method may be called
    from any thread.
    """

    #: Registry name and device type string, e.g. ``"cpu"``.
    name: ClassVar[str] = ""
    #: How to get more devices, appended to out-of-range device index errors (``""``: none).
    #: A class attribute, or an instance's own where the instance's construction decides
    #: (``CpuBackend(num_devices=2)``: the environment variable no longer applies).
    more_devices_hint: str = ""
    #: A hint the core reads on its fastest paths (the inline plans of small collectives,
    #: ``Event.query()``), where even a call costs: True while no stream of this instance can
    #: hold queued or captured work, because every operation has completed when its call
    #: returns (the cpu backend with synchronous streams and no open capture). The core then
    #: treats every stream as idle without asking :meth:`stream_query`, and a recorded event
    #: that is not interprocess as complete without asking :meth:`event_query`. ``False``, the
    #: default, is always correct: the core asks. A backend that sets it True sets it False,
    #: before returning, in any call that leaves work queued or begins a capture;
    #: :meth:`close` sets it False.
    streams_idle: bool = False
    #: True once :meth:`close` ran; every operation but the questions about the devices
    #: (``_OPEN_AFTER_CLOSE``) checks it first and raises :meth:`_closed_error`.
    _closed: bool = False
    #: True for a backend with a per-thread current context that must follow the thread's
    #: current device (cuda's ``cudaSetDevice``): the core then calls
    #: :meth:`set_current_device` each time the calling thread's current device of this
    #: backend changes. ``False``, the default, costs the core nothing more than the change.
    follows_current_device: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.follows_current_device:
            _follows_any[0] = True

    # ------------------------------------------------------------------ capabilities
    def capabilities(self, index: int) -> Capabilities:
        """What device ``index`` can do: the one source the core asks (it never compares
        backend names or probes methods). Must be cheap (the core asks it on hot paths: cache
        the answer per device) and must not create a device context.

        The default says "nothing optional", with the DLPack device type known for the
        backend's name. Override it, e.g. ``dataclasses.replace(super().capabilities(index),
        host_functions=True)``, together with the operations it declares.
        """
        caps = _default_caps.get(self.name)
        if caps is None:
            caps = _default_caps[self.name] = Capabilities(
                dlpack_device_type=_DLPACK_DEVICE_TYPES.get(self.name, _K_DL_EXT_DEV))
        return caps

    # Derived predicates: deprecated conveniences kept for third-party code written against
    # contract v1 (accelrt's core asks capabilities() only); override capabilities(), not them.
    def host_accessible(self, index: int) -> bool:
        """``capabilities(index).host_accessible`` (derived; override :meth:`capabilities`)."""
        return self.capabilities(index).host_accessible

    def vm_supported(self, index: int) -> bool:
        """``capabilities(index).virtual_memory`` (derived; override :meth:`capabilities`)."""
        return self.capabilities(index).virtual_memory

    def graph_supported(self, index: int) -> bool:
        """``capabilities(index).graphs`` (derived; override :meth:`capabilities`)."""
        return self.capabilities(index).graphs

    def supports_interprocess_events(self, index: int) -> bool:
        """``capabilities(index).interprocess_events`` (derived; ``accelrt.Event(
        interprocess=True)`` raises ``ValueError`` at construction where it is False)."""
        return self.capabilities(index).interprocess_events

    def arch_list(self) -> list[str]:
        """Architectures accelrt's device code is built for, in ``torch.cuda.get_arch_list``'s
        names (``[]``: no device code, the default)."""
        return []

    def oom_advice(self, index: int) -> str | None:
        """A sentence an out-of-memory error on device ``index`` ends with (how to get more
        memory), or ``None``."""
        return None

    # ------------------------------------------------------------------ discovery
    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Return ``None`` if the backend is usable, else a sentence saying why not and what to
        install. Must not create a device context or otherwise make ``fork`` unsafe."""
        return None

    def default_candidate(self) -> bool:
        """True if this backend may be chosen as the current accelerator *by default* (when
        neither ``ACCELRT_ACCELERATOR`` nor :func:`accelrt.set_current_accelerator` names one).
        OpenCL returns False when its only devices are CPUs, which the ``cpu`` backend serves
        already. Must not create a device context."""
        return True

    @abc.abstractmethod
    def device_count(self) -> int:
        """Number of devices. Must not create a device context."""
        raise _abstract("device_count")

    @abc.abstractmethod
    def get_device_properties(self, index: int) -> dict[str, Any]:
        """Properties of device ``index``: at least ``name``, ``total_memory`` (bytes) and
        ``multi_processor_count``; backend-specific extras may follow."""
        raise _abstract("get_device_properties")

    def get_device_capability(self, index: int) -> dict[str, Any]:
        """Capabilities of device ``index``: at least ``supported_dtypes`` (numpy dtype names)."""
        return {
            "supported_dtypes": [
                "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64", "complex64", "complex128",
            ]
        }

    @abc.abstractmethod
    def get_memory_info(self, index: int) -> tuple[int, int]:
        """``(free, total)`` bytes of device ``index`` as the device sees them."""
        raise _abstract("get_memory_info")

    def init_device(self, index: int) -> None:
        """Make device ``index`` ready for work in the calling thread (e.g. make a context
        current). Called lazily before the first raw operation on that device in a thread."""
        if self._closed:
            raise self._closed_error("init_device")

    def set_current_device(self, index: int, create: bool) -> None:
        """The calling thread's current device of this backend became ``index`` (called by the
        core on each change when :attr:`follows_current_device` is True): make its context
        current in the thread, as ``cudaSetDevice`` does. ``create`` False (the exit of a
        device context manager, PyTorch's ``MaybeSetDevice``) asks not to create a context
        on a device that has none yet. The default does nothing.

        Example::

            >>> from accelrt import backends
            >>> backends.get_backend("cpu").set_current_device(0, True)
        """

    # ------------------------------------------------------------------ memory
    @abc.abstractmethod
    def malloc(self, index: int, size: int) -> DevicePtr:
        """Allocate ``size`` bytes on device ``index``; return the address, or ``0`` when the
        device has not enough free memory (no exception on plain out-of-memory)."""
        raise _abstract("malloc")

    @abc.abstractmethod
    def free(self, index: int, ptr: DevicePtr) -> None:
        """Release memory returned by :meth:`malloc`. Work already queued that may touch it
        (on any stream of the device, destroyed streams included) completes first, as with
        ``cudaFree``; the backend synchronizes as it requires."""
        raise _abstract("free")

    def host_malloc(self, size: int) -> int:
        """Allocate ``size`` bytes of page-locked host memory; ``0`` when out of memory
        (capability ``pinned_host_memory``)."""
        if self._closed:
            raise self._closed_error("host_malloc")
        raise _unsupported(self, "host_malloc", "pinned_host_memory")

    def host_free(self, ptr: int) -> None:
        """Release memory returned by :meth:`host_malloc` (``pinned_host_memory``)."""
        if self._closed:
            raise self._closed_error("host_free")
        raise _unsupported(self, "host_free", "pinned_host_memory")

    def adopt_memory(self, index: int, ptr: int, size: int) -> None:
        """Treat ``size`` bytes at ``ptr``, allocated by a pluggable allocator's library, as
        memory of device ``index`` until :meth:`disown_memory` (``adopt_memory``)."""
        if self._closed:
            raise self._closed_error("adopt_memory")
        raise _unsupported(self, "adopt_memory", "adopt_memory")

    def disown_memory(self, index: int, ptr: int) -> None:
        """End :meth:`adopt_memory`, after the work queued that may touch it
        (``adopt_memory``)."""
        if self._closed:
            raise self._closed_error("disown_memory")
        raise _unsupported(self, "disown_memory", "adopt_memory")

    def pointer_device(self, ptr: int) -> int | None:
        """The device whose memory holds ``ptr``, or ``None`` (``pointer_lookup``: used by
        ``asarray`` for ``__cuda_array_interface__`` producers)."""
        if self._closed:
            raise self._closed_error("pointer_device")
        raise _unsupported(self, "pointer_device", "pointer_lookup")

    # stream-ordered memory pool (capability stream_ordered_memory: backend:cudaMallocAsync)
    def mempool_alloc_async(self, index: int, size: int, stream: StreamHandle) -> DevicePtr:
        """Allocate ``size`` (> 0) bytes from device ``index``'s default memory pool in stream
        order on ``stream`` (``cuMemAllocFromPoolAsync``): usable by work queued on ``stream``
        from now on. ``0`` when the pool cannot grow (out of memory; no exception)."""
        if self._closed:
            raise self._closed_error("mempool_alloc_async")
        raise _unsupported(self, "mempool_alloc_async", "stream_ordered_memory")

    def mempool_free_async(self, index: int, ptr: DevicePtr, stream: StreamHandle) -> None:
        """Give ``ptr`` (from :meth:`mempool_alloc_async`) back to the pool once ``stream``
        reaches this point (``cuMemFreeAsync``): later allocations in stream order on
        ``stream`` may reuse it at once, other streams once the free has completed."""
        if self._closed:
            raise self._closed_error("mempool_free_async")
        raise _unsupported(self, "mempool_free_async", "stream_ordered_memory")

    def mempool_trim_to(self, index: int, keep: int) -> None:
        """Release unused memory of the pool to the device until it reserves at most
        ``keep`` bytes, or nothing more can be released safely (``cuMemPoolTrimTo``)."""
        if self._closed:
            raise self._closed_error("mempool_trim_to")
        raise _unsupported(self, "mempool_trim_to", "stream_ordered_memory")

    def mempool_get_attribute(self, index: int, attr: str) -> int:
        """One attribute of the pool, in bytes: ``"release_threshold"``,
        ``"reserved_mem_current"``, ``"reserved_mem_high"``, ``"used_mem_current"`` or
        ``"used_mem_high"`` (``cuMemPoolGetAttribute``)."""
        if self._closed:
            raise self._closed_error("mempool_get_attribute")
        raise _unsupported(self, "mempool_get_attribute", "stream_ordered_memory")

    def mempool_set_attribute(self, index: int, attr: str, value: int) -> None:
        """Set ``"release_threshold"`` (the pool keeps up to that many unused bytes across
        synchronizations), or reset ``"reserved_mem_high"``/``"used_mem_high"`` to their
        current value (``value`` must be 0) (``cuMemPoolSetAttribute``)."""
        if self._closed:
            raise self._closed_error("mempool_set_attribute")
        raise _unsupported(self, "mempool_set_attribute", "stream_ordered_memory")

    # interprocess memory (optional: accelrt.multiprocessing)
    def ipc_mem_handle(self, index: int, ptr: DevicePtr) -> bytes:
        """An interprocess handle (bytes) of the allocation that *starts* at ``ptr`` (a pointer
        :meth:`malloc` returned), which :meth:`ipc_open_mem_handle` in another process of this
        machine maps (``cuIpcGetMemHandle``). ValueError naming the reason and the fix when
        this allocation cannot be shared; the default says the backend cannot share memory."""
        if self._closed:
            raise self._closed_error("ipc_mem_handle")
        raise _no_ipc(self.name)

    def ipc_open_mem_handle(self, index: int, handle: bytes) -> tuple[DevicePtr, int]:
        """Map another process's allocation from its :meth:`ipc_mem_handle` bytes on device
        ``index``; return ``(ptr, size)`` (``cuIpcOpenMemHandle``). ValueError for a handle that
        names no live allocation. The mapping is not this process's :meth:`malloc` memory."""
        if self._closed:
            raise self._closed_error("ipc_open_mem_handle")
        raise _no_ipc(self.name)

    def ipc_close_mem_handle(self, index: int, ptr: DevicePtr) -> None:
        """Unmap memory from :meth:`ipc_open_mem_handle` (``cuIpcCloseMemHandle``)."""
        if self._closed:
            raise self._closed_error("ipc_close_mem_handle")
        raise _no_ipc(self.name)

    # virtual memory (capability virtual_memory: enables expandable segments)
    def vm_granularity(self, index: int) -> int:
        """Smallest mapping unit in bytes (a power of two); may initialize the device."""
        if self._closed:
            raise self._closed_error("vm_granularity")
        raise _unsupported(self, "vm_granularity", "virtual_memory")

    def vm_reserve(self, index: int, size: int) -> DevicePtr:
        """Reserve ``size`` bytes of address space (no memory behind it); return its base."""
        if self._closed:
            raise self._closed_error("vm_reserve")
        raise _unsupported(self, "vm_reserve", "virtual_memory")

    def vm_release(self, index: int, ptr: DevicePtr, size: int) -> None:
        """Release an address range from :meth:`vm_reserve` (all of it must be unmapped)."""
        if self._closed:
            raise self._closed_error("vm_release")
        raise _unsupported(self, "vm_release", "virtual_memory")

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        """Back ``[ptr, ptr+size)`` (granularity-aligned, inside a reservation) with physical
        memory accessible from the device; return False when out of memory."""
        if self._closed:
            raise self._closed_error("vm_map")
        raise _unsupported(self, "vm_map", "virtual_memory")

    def vm_unmap(self, index: int, ptr: int, size: int) -> None:
        """Unmap and release the physical memory behind ``[ptr, ptr+size)``: one whole
        range given to :meth:`vm_map`, or a run of several adjacent ones (the caching
        allocator unmaps a run of free mappings in one call; it never cuts a mapping)."""
        if self._closed:
            raise self._closed_error("vm_unmap")
        raise _unsupported(self, "vm_unmap", "virtual_memory")

    # ------------------------------------------------------------------ copies
    @abc.abstractmethod
    def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
               stream: StreamHandle) -> None:
        """Copy ``nbytes`` from ``src`` to ``dst`` in stream order on ``stream`` of device
        ``index``. ``kind`` is ``"h2d"``, ``"d2h"``, ``"d2d"`` (same device) or ``"h2h"``.
        Host addresses used asynchronously must stay valid until the stream reaches the copy."""
        raise _abstract("memcpy")

    def memcpy_peer(self, dst_index: int, dst: int, src_index: int, src: int,
                    nbytes: int, stream: StreamHandle) -> None:
        """Copy ``nbytes`` from ``src`` on device ``src_index`` to ``dst`` on ``dst_index``,
        ordered on ``stream`` of ``src_index`` (capability ``peer_copies``)."""
        if self._closed:
            raise self._closed_error("memcpy_peer")
        raise _unsupported(self, "memcpy_peer", "peer_copies")

    @abc.abstractmethod
    def memset(self, index: int, ptr: int, value: int, nbytes: int,
               stream: StreamHandle) -> None:
        """Set ``nbytes`` bytes at ``ptr`` to the byte ``value`` in stream order."""
        raise _abstract("memset")

    def fill(self, index: int, ptr: int, pattern: bytes, count: int,
             stream: StreamHandle) -> None:
        """Write ``pattern`` (1, 2, 4 or 8 bytes) ``count`` times from ``ptr`` in stream order
        (capability ``device_fill``)."""
        if self._closed:
            raise self._closed_error("fill")
        raise _unsupported(self, "fill", "device_fill")

    def can_access_peer(self, index: int, peer: int) -> bool:
        """True if device ``index`` can access memory of device ``peer`` directly."""
        return index == peer

    # ------------------------------------------------------------------ streams
    def default_stream(self, index: int) -> StreamHandle:
        """Handle of the default stream of device ``index``."""
        return StreamHandle(0)

    def stream_priority_range(self, index: int) -> tuple[int, int]:
        """``(least, greatest)`` priority; like CUDA, a *lower* number is a higher priority,
        so ``greatest <= least``."""
        return (0, 0)

    @abc.abstractmethod
    def stream_create(self, index: int, priority: int) -> StreamHandle:
        """Create a stream on device ``index`` and return its handle."""
        raise _abstract("stream_create")

    def stream_destroy(self, index: int, stream: StreamHandle) -> None:
        """Destroy a stream made by :meth:`stream_create` and return at once, as
        ``cudaStreamDestroy``: its queued work still runs to completion, and :meth:`free`,
        :meth:`vm_unmap` and :meth:`synchronize` of the device wait for it."""
        if self._closed:
            raise self._closed_error("stream_destroy")

    @abc.abstractmethod
    def stream_query(self, index: int, stream: StreamHandle) -> bool:
        """True if all work submitted to ``stream`` has completed."""
        raise _abstract("stream_query")

    @abc.abstractmethod
    def stream_synchronize(self, index: int, stream: StreamHandle) -> None:
        """Block until all work submitted to ``stream`` has completed."""
        raise _abstract("stream_synchronize")

    @abc.abstractmethod
    def stream_wait_event(self, index: int, stream: StreamHandle,
                          event: EventHandle) -> None:
        """Make future work on ``stream`` wait for the last record of ``event``."""
        raise _abstract("stream_wait_event")

    def stream_is_valid(self, index: int, stream: StreamHandle) -> bool:
        """True if ``stream`` names a live stream of device ``index`` (rebuilding a Stream)."""
        if self._closed:
            raise self._closed_error("stream_is_valid")
        return True

    def synchronize(self, index: int) -> None:
        """Block until all work on every stream of device ``index`` has completed, including
        work queued on streams destroyed since (:meth:`stream_destroy`)."""
        if self._closed:
            raise self._closed_error("synchronize")
        raise _abstract("synchronize")

    def launch_host_func(self, index: int, fn: Callable[[], None],
                         stream: StreamHandle) -> None:
        """Run the Python callable ``fn`` on the host once all earlier work on ``stream`` has
        completed; later work on ``stream`` waits for it (``cuLaunchHostFunc``)."""
        if self._closed:
            raise self._closed_error("launch_host_func")
        raise _unsupported(self, "launch_host_func", "host_functions")

    # ------------------------------------------------------------------ device-side compute
    def philox_fill(self, index: int, ptr: int, n: int, dtype: str, dist: str, seed: int,
                    offset: int, params: tuple[float, float], stream: StreamHandle) -> None:
        """Fill ``n`` elements of numpy dtype name ``dtype`` at ``ptr`` with Philox4x32-10
        numbers (``dist`` is ``"uniform"`` with ``(a, b)``, ``"normal"`` with ``(mean, std)``
        or ``"randint"`` with ``(low, high - low)``) for generator state ``(seed, offset)``,
        ordered on ``stream`` (capability ``device_rng``; see docs/random.md)."""
        if self._closed:
            raise self._closed_error("philox_fill")
        raise _unsupported(self, "philox_fill", "device_rng")

    def elementwise_add(self, index: int, out: int, a: int, b: int, count: int, dtype: str,
                        stream: StreamHandle) -> None:
        """Stream-ordered ``out = a + b`` for ``count`` elements of numpy dtype name
        ``dtype``; ``out`` may alias ``a`` or ``b``; ValueError for unsupported dtypes
        (capability ``device_add``: ``accelrt.comm.reduce_add``)."""
        if self._closed:
            raise self._closed_error("elementwise_add")
        raise _unsupported(self, "elementwise_add", "device_add")

    # ------------------------------------------------------------------ events
    @abc.abstractmethod
    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        """Create an event on device ``index`` and return its non-zero handle."""
        raise _abstract("event_create")

    @abc.abstractmethod
    def event_destroy(self, index: int, event: EventHandle) -> None:
        """Destroy an event."""
        raise _abstract("event_destroy")

    @abc.abstractmethod
    def event_record(self, index: int, event: EventHandle, stream: StreamHandle) -> None:
        """Record ``event`` at the current end of ``stream``."""
        raise _abstract("event_record")

    @abc.abstractmethod
    def event_query(self, index: int, event: EventHandle) -> bool:
        """True if the work before the event's last record has completed."""
        raise _abstract("event_query")

    @abc.abstractmethod
    def event_synchronize(self, index: int, event: EventHandle) -> None:
        """Block until the event's last record has completed."""
        raise _abstract("event_synchronize")

    @abc.abstractmethod
    def event_elapsed_time(self, index: int, start: EventHandle,
                           end: EventHandle) -> float:
        """Milliseconds between two completed, timing-enabled events."""
        raise _abstract("event_elapsed_time")

    def event_record_external(self, index: int, event: EventHandle,
                              stream: StreamHandle) -> None:
        """Record an event made with ``external=True`` (``torch.cuda.Event(external=True)``).

        Outside a graph capture this is :meth:`event_record`. Inside one it adds an event
        record node (``cudaEventRecordExternal``): every replay records the event, which stays
        usable outside the graph, instead of an internal cross-stream dependency of the
        capture. The default does :meth:`event_record` where ``stream`` is not capturing and
        raises :class:`~accelrt.CaptureNotSupportedError` where it is; a backend with graphs
        overrides it."""
        if self._closed:
            raise self._closed_error("event_record_external")
        if self.stream_is_capturing(index, stream):
            raise CaptureNotSupportedError(
                f"the {self.name} backend cannot record an external event inside a graph "
                "capture; record it outside the capture, or use an event made with "
                "external=False")
        self.event_record(index, event, stream)

    def stream_wait_event_external(self, index: int, stream: StreamHandle,
                                   event: EventHandle) -> None:
        """:meth:`stream_wait_event` for an event made with ``external=True``: inside a graph
        capture an event wait node (``cudaEventWaitExternal``) that waits, at every replay,
        for the event's latest record. The default does :meth:`stream_wait_event` where
        ``stream`` is not capturing and raises :class:`~accelrt.CaptureNotSupportedError`
        where it is; a backend with graphs overrides it."""
        if self._closed:
            raise self._closed_error("stream_wait_event_external")
        if self.stream_is_capturing(index, stream):
            raise CaptureNotSupportedError(
                f"the {self.name} backend cannot wait on an external event inside a graph "
                "capture; wait outside the capture, or use an event made with external=False")
        self.stream_wait_event(index, stream, event)

    def event_ipc_handle(self, index: int, event: EventHandle) -> bytes:
        """Interprocess handle of an event made with ``interprocess=True``
        (capability ``interprocess_events``)."""
        if self._closed:
            raise self._closed_error("event_ipc_handle")
        raise _unsupported(self, "event_ipc_handle", "interprocess_events")

    def event_from_ipc_handle(self, index: int, handle: bytes) -> EventHandle:
        """Open an event from another process's :meth:`event_ipc_handle`."""
        if self._closed:
            raise self._closed_error("event_from_ipc_handle")
        raise _unsupported(self, "event_from_ipc_handle", "interprocess_events")

    # ------------------------------------------------------------------ graphs (capability graphs)
    def graph_capture_begin(self, index: int, stream: StreamHandle) -> None:
        """Start capturing the work submitted to ``stream``."""
        if self._closed:
            raise self._closed_error("graph_capture_begin")
        raise _unsupported(self, "graph_capture_begin", "graphs")

    def graph_capture_begin_mode(self, index: int, stream: StreamHandle, mode: str) -> None:
        """:meth:`graph_capture_begin` in capture ``mode`` (``cuStreamBeginCapture``'s):
        ``"global"``, ``"thread_local"`` or ``"relaxed"`` (capability
        ``graph_capture_modes``). While the capture goes on, a call that is unsafe during a
        capture (a :meth:`synchronize` of the device) is refused, as CUDA refuses it in a
        thread of the default (global) interaction mode: in the thread that began the
        capture unless ``mode`` is ``"relaxed"``, and in any other thread if ``mode`` is
        ``"global"``. Calls that conflict with the capture itself (synchronizing or querying
        the capturing stream) are refused in every mode. :meth:`graph_capture_begin` is the
        backend's own mode (``capture_error_mode="default"``)."""
        if self._closed:
            raise self._closed_error("graph_capture_begin_mode")
        raise _unsupported(self, "graph_capture_begin_mode", "graph_capture_modes")

    def graph_capture_end(self, index: int, stream: StreamHandle) -> GraphHandle:
        """Stop capturing on ``stream``; return an executable graph handle."""
        if self._closed:
            raise self._closed_error("graph_capture_end")
        raise _unsupported(self, "graph_capture_end", "graphs")

    def graph_instantiate(self, index: int, graph: GraphHandle) -> int:
        """Make (again) the executable form of a captured graph, destroying the previous one,
        and return its id (CUDA: ``cuGraphExecGetId``). :class:`accelrt.Graph` calls it before
        the first replay (at ``capture_end`` unless ``keep_graph=True``); ``graph_replay`` of
        a graph never instantiated instantiates it. The default, for a backend whose captured
        graph replays as it is: nothing to make; the id is the graph handle."""
        if self._closed:
            raise self._closed_error("graph_instantiate")
        return int(graph)

    def graph_replay(self, index: int, graph: GraphHandle, stream: StreamHandle) -> None:
        """Launch a captured graph on ``stream``."""
        if self._closed:
            raise self._closed_error("graph_replay")
        raise _unsupported(self, "graph_replay", "graphs")

    def graph_debug_dot(self, index: int, graph: GraphHandle, path: str,
                        verbose: bool) -> None:
        """Write a captured graph to the file ``path`` in Graphviz DOT format (``verbose``:
        every detail the backend has) (capability ``graph_dot``)."""
        if self._closed:
            raise self._closed_error("graph_debug_dot")
        raise _unsupported(self, "graph_debug_dot", "graph_dot")

    def graph_native_handles(self, index: int, graph: GraphHandle) -> tuple[int, int | None]:
        """The native handles of a captured graph: ``(graph, executable graph or None before
        it is instantiated)``, e.g. CUDA's ``CUgraph``/``CUgraphExec`` (capability
        ``graph_native_handles``)."""
        if self._closed:
            raise self._closed_error("graph_native_handles")
        raise _unsupported(self, "graph_native_handles", "graph_native_handles")

    def graph_destroy(self, index: int, graph: GraphHandle) -> None:
        """Destroy a captured graph."""
        if self._closed:
            raise self._closed_error("graph_destroy")
        raise _unsupported(self, "graph_destroy", "graphs")

    def stream_is_capturing(self, index: int, stream: StreamHandle) -> bool:
        """True while ``stream`` is capturing."""
        if self._closed:
            raise self._closed_error("stream_is_capturing")
        return False

    def graph_node_count(self, index: int, graph: GraphHandle) -> int | None:
        """Number of operations in a captured graph (``None``: the backend cannot tell); an
        empty capture makes :class:`accelrt.Graph` warn as PyTorch does."""
        if self._closed:
            raise self._closed_error("graph_node_count")
        return None

    def live_handles(self) -> dict[str, int] | None:
        """Counts of the live ``"streams"``, ``"events"`` and ``"graphs"`` this instance
        created (``None``: the backend does not count them), read by
        :func:`accelrt.testing.leak_check`."""
        if self._closed:
            raise self._closed_error("live_handles")
        return None

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Release the backend's device resources once the work queued on them has run;
        idempotent. Afterwards every operation of this instance (all but the questions about
        its devices: count, properties, memory, capabilities) raises ``ValueError`` (an
        ``accelrt._errors.AcceleratorValueError``) saying it is closed; closing the registry's
        instance closes that backend for the rest of the process (what the core made on it,
        arrays and streams, then raises the same error). ``with backend:`` closes it at the
        end of the block.

        Subclasses release what they hold, then call ``super().close()``; no method is
        replaced: each operation of a subclass begins with ``if self._closed: raise
        self._closed_error("malloc")`` (the flag ``close()`` sets), as the built-in backends'
        do.

        Example::

            >>> from accelrt.backends.cpu import CpuBackend
            >>> with CpuBackend(async_streams=True) as b:
            ...     p = b.malloc(0, 64)
            >>> b.closed
            True
            >>> try:
            ...     b.malloc(0, 64)
            ... except ValueError as exc:
            ...     print(str(exc)[:34])
            the cpu backend instance is closed
        """
        if self._closed:
            return
        self.streams_idle = False   # the core asks stream_query again, which says "closed"
        self._closed = True

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def _closed_error(self, operation: str) -> AcceleratorValueError:
        """The error every operation of a closed instance raises (each checks ``_closed``
        first, all but those in ``_OPEN_AFTER_CLOSE``)."""
        return AcceleratorValueError(
            f"the {self.name} backend instance is closed (close() or the end of its with "
            f"block), so {operation}() cannot run; use an instance that is open")

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<accelrt backend {self.name!r}>"


#: what stays callable on a closed backend: closing again, and the questions about the devices
#: (discovery, properties, capabilities), which need none of the resources close() released;
#: every other public operation of a built-in backend checks ``_closed`` first
_OPEN_AFTER_CLOSE = frozenset((
    "close", "unavailable_reason", "default_candidate", "device_count", "get_device_properties",
    "get_device_capability", "get_memory_info", "capabilities", "host_accessible",
    "vm_supported", "graph_supported", "supports_interprocess_events", "arch_list",
    "oom_advice", "stream_priority_range", "default_stream", "can_access_peer",
    # the thread's current device still changes after close(): nothing to make current
    "set_current_device"))


# ---------------------------------------------------------------------- registry
# The registry is its own module (it needs Backend, defined above); its names stay importable
# from here, where the core, the tests and third-party code find them.
from ._backend_registry import MAX_DEVICE_COUNT as MAX_DEVICE_COUNT  # noqa: E402
from ._backend_registry import _check_name as _check_name  # noqa: E402
from ._backend_registry import _checked_device_count as _checked_device_count  # noqa: E402
from ._backend_registry import _factories as _factories  # noqa: E402
from ._backend_registry import _failures as _failures  # noqa: E402
from ._backend_registry import _instances as _instances  # noqa: E402
from ._backend_registry import _listeners as _listeners  # noqa: E402
from ._backend_registry import _lock as _lock  # noqa: E402
from ._backend_registry import _NAME_RE as _NAME_RE  # noqa: E402
from ._backend_registry import _reset_for_tests as _reset_for_tests  # noqa: E402
from ._backend_registry import (  # noqa: E402
    available,
    entry_point_problems,
    get,
    get_all_backends,
    get_available_backends,
    get_backend,
    on_change,
    register,
    registered,
    unavailable_reason,
    unregister,
)
