"""``CudaBackend``: accelrt's backend contract over NVIDIA's driver API (``cuda.bindings``).

Devices and contexts live here; the rest is done by typed parts the backend holds and
delegates to once it has checked that it is open: memory and copies (:class:`._memory.CudaMemory`),
streams, events and host functions (:class:`._streams.CudaStreams`), graph capture
(:class:`._graphs.CudaGraphs`, sharing the streams part's capturing streams) and the optional
compute hooks ``philox_fill`` and ``elementwise_add`` (:class:`._ops.CudaOps`); NVML monitoring
is :mod:`._nvml`, module functions ``accelrt.cuda`` calls. Discovery (:mod:`._discovery`) never
creates a context; the primary context of a device is retained on the first raw operation. The
thread's current context follows its current device (:meth:`CudaBackend.set_current_device`, as
``cudaSetDevice``), and a raw operation on another device restores it (torch's
device guard, :mod:`._guard`).

Example::

    >>> from accelrt.backends.cuda import CudaBackend
    >>> reason = CudaBackend.unavailable_reason()
    >>> reason is None or isinstance(reason, str)
    True
"""

from __future__ import annotations

import os
import threading
import uuid as _uuid
from collections.abc import Callable
from typing import Any, TypeVar

from ..._backend import Backend, Capabilities
from ..._errors import BackendUnavailableError, type_shown
from ..._handles import DevicePtr, EventHandle, GraphHandle, StreamHandle
from . import _cu, _discovery
from ._cu import CudaError, check
from ._kernels import KernelCache, pack_args
from ._graphs import CudaGraphs
from ._guard import guard_operations
from .._ranges import Ranges
from ._memory import CudaMemory
from ._ops import CudaOps
from ._streams import CudaStreams

__all__ = ["CudaBackend"]

_K_DL_CUDA = 2   # DLPack kDLCUDA

_BASE_DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]
_FORKED_MSG = ("Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
               "multiprocessing, you must use the 'spawn' start method (this process was forked "
               "after CUDA was initialised in its parent: multiprocessing.set_start_method("
               "'spawn'))")


_R = TypeVar("_R")


class _Device:
    """Per-device driver state (created on first use, never destroyed)."""

    __slots__ = ("allocs", "capability", "ctx", "ctx_int", "dead_streams", "dev",
                 "foreign_streams", "index", "ipc_opened", "lock", "mappings",
                 "owned_streams", "pool", "pool_allocs", "priorities", "reserved", "vm_gran")

    def __init__(self, index: int, dev: Any, ctx: Any, capability: tuple[int, int]) -> None:
        self.index = index
        self.dev = dev
        self.ctx = ctx
        self.ctx_int = int(ctx)
        self.capability = capability
        self.priorities: tuple[int, int] | None = None        # guarded by lock
        self.owned_streams: set[int] = set()                  # guarded by lock
        self.foreign_streams: set[int] = set()                # guarded by lock
        self.dead_streams: set[int] = set()                   # destroyed here; guarded by lock
        self.allocs: Ranges[None] = Ranges()                  # malloc'd memory
        self.reserved: Ranges[None] = Ranges()                # vm_reserve'd address space
        self.mappings: Ranges[Any] = Ranges()                 # vm_map'ed ranges -> handle
        self.ipc_opened: Ranges[None] = Ranges()              # cuIpcOpenMemHandle'd memory
        self.pool: Any = None                                 # default CUmemoryPool (lazily)
        self.pool_allocs: Ranges[None] = Ranges()             # cuMemAllocFromPoolAsync'd
        self.vm_gran = 0                                      # guarded by lock
        self.lock = threading.Lock()


class _Tls(threading.local):
    index = -1    # the device whose primary context this thread made current (-1: none)
    current = 0   # the thread's current device (set_current_device), as the core's


class CudaBackend(Backend):
    """NVIDIA GPUs through ``cuda.bindings`` (driver API), NVML and NVRTC.

    Raw handles are the driver's: stream and event handles are ``CUstream``/``CUevent``
    pointer values, memory addresses are ``CUdeviceptr`` values, all as ``int``. Stream ``0``
    is the legacy default stream. Errors are raised as :class:`~._cu.CudaError`, a
    :class:`~accelrt.DeviceError` naming the CUDA error.

    Example::

        >>> from accelrt.backends.cuda import CudaBackend
        >>> CudaBackend.name
        'cuda'
    """

    name = "cuda"
    #: the thread's current context follows its current device (:meth:`set_current_device`)
    follows_current_device = True

    def __init__(self) -> None:
        self._closed = False   # Backend._closed on the instance: each operation reads it
        self._drv = _cu.driver()
        self._lock = threading.Lock()
        self._devices: dict[int, _Device] = {}        # guarded by _lock
        self._props: dict[int, dict[str, Any]] = {}   # guarded by _lock
        self._tls = _Tls()
        self._inited = False                          # guarded by _lock: cuInit done
        self._forked = False
        self._multi = self.device_count() > 1         # check the current context per call
        self.kernels = KernelCache()
        self._caps: dict[int, Capabilities] = {}      # by device index (written once each)
        # the parts this backend delegates to, after its checks (closed, arguments)
        self._streams = CudaStreams(self._drv, self._use)
        self._graphs = CudaGraphs(self._drv, self._use, self._streams)
        self._memory = CudaMemory(self._drv, self._use, self._use_any, self._streams,
                                  self.launch_kernel)
        self._ops = CudaOps(self._use, self._streams, self._memory, self.launch_kernel,
                            self._sms)
        _register_fork(self)

    def close(self) -> None:
        """Wait for the work queued on every device this instance used, then close it
        (:meth:`Backend.close`: later operations raise; idempotent). The primary contexts
        stay retained for the process, as PyTorch never releases them."""
        if self.closed:
            return
        if not self._forked:
            for index in sorted(self._devices):
                self.synchronize(index)
        super().close()

    # ------------------------------------------------------------------ discovery
    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why CUDA cannot be used here (``None`` if it can). NVML first, no context."""
        return _discovery.probe().reason

    def device_count(self) -> int:
        """Number of visible GPUs (``CUDA_VISIBLE_DEVICES`` honoured); creates no context."""
        return _discovery.probe().count

    # ------------------------------------------------------------------ contexts
    def _init_driver(self) -> None:
        if not self._inited:
            if self._forked:
                raise BackendUnavailableError(_FORKED_MSG)
            _discovery.driver_initialised()   # cuInit reads CUDA_VISIBLE_DEVICES once
            self._multi = self.device_count() > 1
            check(self._drv.cuInit(0), "cuInit")
            self._inited = True

    def _check_index(self, index: Any) -> int:
        if type(index) is not int and (not isinstance(index, int) or isinstance(index, bool)):
            raise TypeError(f"cuda device index must be an int, got {type_shown(index)}")
        n = self.device_count()
        if not 0 <= index < n:
            raise IndexError(f"cuda device index {index} is out of range; {n} device(s) are "
                             f"visible (valid: 0..{n - 1})")
        return int(index)

    def _cu_device(self, index: int) -> Any:
        index = self._check_index(index)
        with self._lock:
            self._init_driver()
        return check(self._drv.cuDeviceGet(index), "cuDeviceGet")

    def _device(self, index: int) -> _Device:
        d = self._devices.get(index) if type(index) is int else None
        if d is not None:
            return d
        if self._forked:
            raise BackendUnavailableError(_FORKED_MSG)
        index = self._check_index(index)
        dev = self._cu_device(index)
        drv = self._drv
        attr = drv.CUdevice_attribute
        major = check(drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
        minor = check(drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
        with self._lock:
            d = self._devices.get(index)
            if d is None:
                ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                d = self._devices[index] = _Device(index, dev, ctx, (int(major), int(minor)))
        return d

    def _use(self, index: int) -> _Device:
        """Make device ``index``'s primary context current in this thread; return its state."""
        tls = self._tls
        d = self._devices.get(index)
        if d is not None and tls.index == index and type(index) is int:
            if not self._multi:
                return d
            # Several GPUs: another library (PyTorch, CuPy) may have switched this thread to
            # another device's context since; one cheap query keeps our calls on the right one.
            err, cur = self._drv.cuCtxGetCurrent()
            if not err and int(cur) == d.ctx_int:
                return d
        d = self._device(index)
        check(self._drv.cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent")
        tls.index = index
        return d

    def _use_any(self) -> _Device:
        """For context-wide calls (pinned host memory, pointer queries): the thread's current
        device if it has a context, else the context current in the thread, else any device
        with one, else the current device (torch's ``getDeviceIndexWithPrimaryContext``)."""
        tls = self._tls
        index = tls.current
        if index not in self._devices:
            if tls.index >= 0:
                index = tls.index
            elif self._devices:
                index = min(self._devices)
        return self._use(index)

    def _has_context(self, index: int) -> bool:
        """Whether device ``index`` has a primary context (torch's ``hasPrimaryContext``): one
        accelrt retained, or one another library made active (retained here then, which
        creates nothing). False while accelrt has not initialised the driver."""
        if index in self._devices:
            return True
        if not self._inited:
            return False
        _, active = check(self._drv.cuDevicePrimaryCtxGetState(self._cu_device(index)),
                          "cuDevicePrimaryCtxGetState")
        if not active:
            return False
        self._device(index)
        return True

    def _restore(self) -> None:
        """After an operation on another device than the thread's current one: make the
        current device's context current again if it has one (torch's device guard restores
        with ``MaybeSetDevice``); otherwise the operation's context stays current."""
        tls = self._tls
        index = tls.current
        if self._has_context(index):
            check(self._drv.cuCtxSetCurrent(self._devices[index].ctx), "cuCtxSetCurrent")
            tls.index = index

    def init_device(self, index: int) -> None:
        """Retain device ``index``'s primary context (creating it); make it current in this
        thread if it is the thread's current device (:meth:`set_current_device`): the raw
        operations on another device make theirs current only while they run."""
        if self._closed:
            raise self._closed_error("init_device")
        d = self._device(index)
        tls = self._tls
        if index == tls.current:
            check(self._drv.cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent")
            tls.index = index

    def set_current_device(self, index: int, create: bool) -> None:
        """Make device ``index``'s primary context current in this thread, as
        ``torch.cuda.set_device`` (``cudaSetDevice``) does: the core calls it each time the
        thread's current cuda device changes. ``create`` False (leaving a device context
        manager: torch's ``MaybeSetDevice``): a device without a context gets none, and the
        context current in the thread stays until an operation there creates it. Nothing
        after :meth:`close`.

        Raises:
            CudaError: the driver failed.
            BackendUnavailableError: CUDA cannot be used in this forked child.
        """
        if self._closed:
            return
        tls = self._tls
        if not create and not self._has_context(index):
            tls.current = index
            return
        d = self._device(index)
        check(self._drv.cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent")
        tls.index = tls.current = index

    def keeping_context(self, fn: Callable[[], _R]) -> _R:
        """``fn()`` for a call another library makes into accelrt from its own device guard
        (PyTorch's allocator callbacks, :mod:`accelrt.interop.torch`): the context current
        in the thread when it began is current again when it returns or raises, whatever
        accelrt's current device, so the caller's work stays on its GPU.

        Raises:
            CudaError: the driver failed to restore the context (after ``fn``'s own error).
            ValueError: the instance is closed.
        """
        if self._closed:
            raise self._closed_error("keeping_context")
        drv = self._drv
        err, before = drv.cuCtxGetCurrent()
        if err:
            return fn()
        try:
            return fn()
        finally:
            err, now = drv.cuCtxGetCurrent()
            if not err and int(now) != int(before):
                check(drv.cuCtxSetCurrent(before), "cuCtxSetCurrent")
                ctx = int(before)
                self._tls.index = next((i for i, d in list(self._devices.items())
                                        if d.ctx_int == ctx), -1)

    def _after_fork(self) -> None:
        """In a forked child: forget driver state; refuse CUDA if the parent initialised the
        driver (``cuInit``: a context, device queries, or discovery without NVML).

        The driver does not survive ``fork`` once initialised (the child's calls fail with
        ``CUDA_ERROR_INITIALIZATION_ERROR``), which is why discovery asks NVML first and
        PyTorch marks the child as a bad fork after its lazy init.
        """
        probed = _discovery._cached
        if self._inited or self._devices or (probed is not None and probed.source == "driver"):
            self._forked = True
        self._inited = False
        self._devices = {}
        self._lock = threading.Lock()   # another parent thread may have held it at the fork
        self._tls = _Tls()

    # ------------------------------------------------------------------ queries
    def get_device_properties(self, index: int) -> dict[str, Any]:
        """Name, memory, SM count, capability, clocks, UUID, PCI ids and every attribute.

        Needs ``cuInit`` but no context. ``attributes`` maps each ``CUdevice_attribute`` the
        driver answers (lower-case, without the ``CU_DEVICE_ATTRIBUTE_`` prefix) to its value.
        """
        props = self._props.get(index) if type(index) is int else None
        if props is not None:
            return dict(props)
        drv = self._drv
        dev = self._cu_device(index)
        raw_name = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
        name = raw_name.split(b"\0", 1)[0].decode(errors="replace") \
            if isinstance(raw_name, bytes) else str(raw_name)
        total = int(check(drv.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))
        attrs: dict[str, int] = {}
        answers: dict[int, int | None] = {}   # one driver call per attribute value
        # __members__ includes aliases: iterating the enum yields one name per value only
        # (e.g. VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED, never VIRTUAL_MEMORY_MANAGEMENT_...).
        enum = drv.CUdevice_attribute
        members = getattr(enum, "__members__", None)
        items = members.items() if members is not None else ((m.name, m) for m in enum)
        for attr_name, member in items:
            if attr_name.endswith("_MAX"):
                continue
            key = int(member)
            if key not in answers:
                try:
                    answers[key] = int(check(drv.cuDeviceGetAttribute(member, dev),
                                             "cuDeviceGetAttribute"))
                except CudaError:
                    answers[key] = None   # attribute unknown to this driver
            value = answers[key]
            if value is not None:
                attrs[attr_name.removeprefix("CU_DEVICE_ATTRIBUTE_").lower()] = value
        raw_uuid = check(drv.cuDeviceGetUuid(dev), "cuDeviceGetUuid").bytes
        if isinstance(raw_uuid, str):
            raw_uuid = raw_uuid.encode("latin-1")
        g = attrs.get
        props = {
            "name": name,
            "total_memory": total,
            "multi_processor_count": g("multiprocessor_count", 0),
            "major": g("compute_capability_major", 0),
            "minor": g("compute_capability_minor", 0),
            "L2_cache_size": g("l2_cache_size", 0),
            "clock_rate": g("clock_rate"),                  # kHz (None if the driver dropped it)
            "memory_clock_rate": g("memory_clock_rate"),    # kHz
            "memory_bus_width": g("global_memory_bus_width"),
            "warp_size": g("warp_size", 32),
            "max_threads_per_block": g("max_threads_per_block"),
            "max_threads_per_multi_processor": g("max_threads_per_multiprocessor"),
            "regs_per_multiprocessor": g("max_registers_per_multiprocessor"),
            "shared_memory_per_block": g("max_shared_memory_per_block"),
            "shared_memory_per_block_optin": g("max_shared_memory_per_block_optin"),
            "shared_memory_per_multiprocessor": g("max_shared_memory_per_multiprocessor"),
            "is_integrated": bool(g("integrated", 0)),
            "is_multi_gpu_board": bool(g("multi_gpu_board", 0)),
            "uuid": str(_uuid.UUID(bytes=bytes(raw_uuid[:16]))),
            "pci_bus_id": g("pci_bus_id"),
            "pci_device_id": g("pci_device_id"),
            "pci_domain_id": g("pci_domain_id"),
            "attributes": attrs,
        }
        # bfloat16 and TF32 tensor-core math from compute capability 8.0 (Ampere), the
        # rule of torch.cuda.is_bf16_supported(including_emulation=False) / is_tf32_supported
        props["has_bfloat16"] = props["has_tf32"] = int(props["major"]) >= 8
        with self._lock:
            self._props[index] = props
        return dict(props)

    def _sms(self, index: int) -> int:
        """Multiprocessors of device ``index`` (at least 1), from the cached properties, not
        get_device_properties()'s copy of ~150 entries per kernel launch."""
        props = self._props.get(index) or self.get_device_properties(index)
        return int(props["multi_processor_count"]) or 1

    def _capability(self, index: int) -> tuple[int, int]:
        d = self._devices.get(index)
        if d is not None:
            return d.capability
        p = self.get_device_properties(index)
        return (p["major"], p["minor"])

    def get_device_capability(self, index: int) -> dict[str, Any]:
        """``supported_dtypes`` (``bfloat16`` from compute capability 8.0) and the capability."""
        major, minor = self._capability(index)
        dtypes = list(_BASE_DTYPES)
        if major >= 8:
            dtypes.append("bfloat16")
        return {"supported_dtypes": dtypes, "compute_capability": (major, minor)}

    def capabilities(self, index: int) -> Capabilities:
        """Everything but host-accessible and adopted memory: graphs, host functions,
        interprocess events and memory (``cuIpc*``), the CUDA stream and array protocols,
        ``philox_fill``/``elementwise_add`` kernels and ``pointer_device``; virtual memory
        where the device reports ``virtual_memory_management_supported`` (a device attribute:
        needs ``cuInit``, as :meth:`get_device_properties`, but never a context)."""
        caps = self._caps.get(index) if type(index) is int else None
        if caps is None:
            attrs = self.get_device_properties(index)["attributes"]
            caps = Capabilities(
                virtual_memory=bool(attrs.get("virtual_memory_management_supported", 0)),
                graphs=True, graph_capture_modes=True, graph_dot=True,
                graph_native_handles=True,
                pinned_host_memory=True, page_locked_host_memory=True, host_functions=True,
                peer_copies=True,
                interprocess_events=True, interprocess_memory=True, host_accessible=False,
                dlpack_device_type=_K_DL_CUDA, cuda_stream_protocol=True,
                cuda_array_interface=True, device_rng=True, device_add=True,
                pointer_lookup=True, device_fill=True,
                stream_ordered_memory=bool(attrs.get("memory_pools_supported", 0)))
            self._caps[index] = caps
        return caps

    def get_memory_info(self, index: int) -> tuple[int, int]:
        """``(free, total)`` bytes from ``cuMemGetInfo`` (creates the context if needed)."""
        self._use(index)
        free, total = check(self._drv.cuMemGetInfo(), "cuMemGetInfo")
        return int(free), int(total)

    def arch_list(self) -> list[str]:
        """What accelrt's kernels are built for here, in ``torch.cuda.get_arch_list``'s names:
        ``sm_XY`` of each visible device when NVRTC compiles the kernels for it, then the
        virtual architecture of the committed PTX (the fallback the driver JIT-compiles)."""
        from ._kernels import PTX_ARCH, nvrtc_version
        archs: list[str] = []
        if nvrtc_version() is not None:
            for i in range(self.device_count()):
                props = self.get_device_properties(i)
                arch = f"sm_{props['major']}{props['minor']}"
                if arch not in archs:
                    archs.append(arch)
        archs.append(PTX_ARCH)
        return archs

    def can_access_peer(self, index: int, peer: int) -> bool:
        """``cuDeviceCanAccessPeer`` (a device can always access itself)."""
        if index == peer:
            return True
        a, b = self._cu_device(index), self._cu_device(peer)
        return bool(check(self._drv.cuDeviceCanAccessPeer(a, b), "cuDeviceCanAccessPeer"))

    def enable_peer_access(self, index: int, peer: int) -> None:
        """Let device ``index`` access ``peer``'s memory directly (idempotent).

        Raises:
            ValueError: the devices cannot access each other.
        """
        if self._closed:
            raise self._closed_error("enable_peer_access")
        if index == peer:
            return
        if not self.can_access_peer(index, peer):
            raise ValueError(f"cuda:{index} cannot access cuda:{peer} directly; check "
                             "can_access_peer() first (copies still work through the host)")
        peer_ctx = self._device(peer).ctx
        self._use(index)
        (err,) = self._drv.cuCtxEnablePeerAccess(peer_ctx, 0)
        if err and err != self._drv.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
            _cu.raise_error(err, "cuCtxEnablePeerAccess")

    # ------------------------------------------------------------------ kernels
    def launch_kernel(self, index: int, stream: int, module: str, kernel: str,
                      grid: int | tuple[int, int, int], block: int | tuple[int, int, int],
                      args: list[Any], shared_mem: int = 0) -> None:
        """Launch ``kernel`` of ``accelrt/kernels/<module>.cu`` on ``stream`` of ``index``.

        Args:
            index: device index.
            stream: raw stream handle.
            module: kernel source stem, e.g. ``"fill"`` or ``"philox"``.
            kernel: the ``extern "C"`` function name.
            grid: blocks (int or 3-tuple).
            block: threads per block (int or 3-tuple).
            args: numpy scalars of the parameters' exact types (``np.uint64(ptr)``).
            shared_mem: dynamic shared memory bytes.
        """
        if self._closed:
            raise self._closed_error("launch_kernel")
        d = self._use(index)
        fn = self.kernels.function(index, d.capability, module, kernel)
        gx, gy, gz = (grid, 1, 1) if isinstance(grid, int) else grid
        bx, by, bz = (block, 1, 1) if isinstance(block, int) else block
        ptrs, keep = pack_args(args)
        check(self._drv.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared_mem, stream,
                                       ptrs.ctypes.data, 0), "cuLaunchKernel")
        del keep

    # ------------------------------------------------------------------ memory and copies (CudaMemory)
    def pointer_device(self, ptr: int) -> int | None:
        """The index of the GPU whose device memory holds ``ptr``, or ``None`` when ``ptr``
        is not CUDA device memory (host memory, pinned or not, or an address the driver does
        not know). Used to locate ``__cuda_array_interface__`` producers' data.

        Raises:
            TypeError: ``ptr`` is not an int.
            ValueError: ``ptr`` is 0 or not a 64-bit address.
        """
        if self._closed:
            raise self._closed_error("pointer_device")
        return self._memory.pointer_device(ptr)

    def malloc(self, index: int, size: int) -> DevicePtr:
        """``cuMemAlloc``; ``0`` on ``CUDA_ERROR_OUT_OF_MEMORY``."""
        if self._closed:
            raise self._closed_error("malloc")
        return self._memory.malloc(index, size)

    def free(self, index: int, ptr: DevicePtr) -> None:
        """``cuMemFree`` (synchronises with the device as CUDA does)."""
        if self._closed:
            raise self._closed_error("free")
        self._memory.free(index, ptr)

    def mempool_alloc_async(self, index: int, size: int, stream: StreamHandle) -> DevicePtr:
        """``cuMemAllocFromPoolAsync`` from the device's default pool; ``0`` on
        ``CUDA_ERROR_OUT_OF_MEMORY``. During a capture it adds a memory-allocation node."""
        if self._closed:
            raise self._closed_error("mempool_alloc_async")
        return self._memory.mempool_alloc_async(index, size, stream)

    def mempool_free_async(self, index: int, ptr: DevicePtr, stream: StreamHandle) -> None:
        """``cuMemFreeAsync`` of a :meth:`mempool_alloc_async` pointer on ``stream``."""
        if self._closed:
            raise self._closed_error("mempool_free_async")
        self._memory.mempool_free_async(index, ptr, stream)

    def mempool_trim_to(self, index: int, keep: int) -> None:
        """``cuMemPoolTrimTo`` of the device's default pool."""
        if self._closed:
            raise self._closed_error("mempool_trim_to")
        self._memory.mempool_trim_to(index, keep)

    def mempool_get_attribute(self, index: int, attr: str) -> int:
        """``cuMemPoolGetAttribute`` of the device's default pool (a ``cuuint64_t``)."""
        if self._closed:
            raise self._closed_error("mempool_get_attribute")
        return self._memory.mempool_get_attribute(index, attr)

    def mempool_set_attribute(self, index: int, attr: str, value: int) -> None:
        """``cuMemPoolSetAttribute``: the release threshold, or a reset (0) of a
        high-water mark."""
        if self._closed:
            raise self._closed_error("mempool_set_attribute")
        self._memory.mempool_set_attribute(index, attr, value)

    def ipc_mem_handle(self, index: int, ptr: DevicePtr) -> bytes:
        """The 64-byte ``CUipcMemHandle`` of the ``cuMemAlloc`` allocation starting at ``ptr``
        (``cuIpcGetMemHandle``); ValueError for virtual-memory (expandable) ranges, which legacy
        IPC cannot share, and for pointers that do not start an allocation of this device."""
        if self._closed:
            raise self._closed_error("ipc_mem_handle")
        return self._memory.ipc_mem_handle(index, ptr)

    def ipc_open_mem_handle(self, index: int, handle: bytes) -> tuple[DevicePtr, int]:
        """Map another process's allocation (``cuIpcOpenMemHandle`` with lazy peer access);
        return its ``(ptr, size)`` (``cuMemGetAddressRange``)."""
        if self._closed:
            raise self._closed_error("ipc_open_mem_handle")
        return self._memory.ipc_open_mem_handle(index, handle)

    def ipc_close_mem_handle(self, index: int, ptr: DevicePtr) -> None:
        """Unmap memory from :meth:`ipc_open_mem_handle` (``cuIpcCloseMemHandle``)."""
        if self._closed:
            raise self._closed_error("ipc_close_mem_handle")
        self._memory.ipc_close_mem_handle(index, ptr)

    def host_malloc(self, size: int) -> int:
        """Page-locked, portable host memory (``cuMemHostAlloc``); ``0`` when out of memory."""
        if self._closed:
            raise self._closed_error("host_malloc")
        return self._memory.host_malloc(size)

    def host_free(self, ptr: int) -> None:
        """``cuMemFreeHost``."""
        if self._closed:
            raise self._closed_error("host_free")
        self._memory.host_free(ptr)

    def vm_granularity(self, index: int) -> int:
        """Minimum mapping granularity (``cuMemGetAllocationGranularity``), typically 2 MiB."""
        if self._closed:
            raise self._closed_error("vm_granularity")
        return self._memory.vm_granularity(index)

    def vm_reserve(self, index: int, size: int) -> DevicePtr:
        """Reserve ``size`` bytes of device address space (``cuMemAddressReserve``)."""
        if self._closed:
            raise self._closed_error("vm_reserve")
        return self._memory.vm_reserve(index, size)

    def vm_release(self, index: int, ptr: DevicePtr, size: int) -> None:
        """Free a reservation (``cuMemAddressFree``); all of it must be unmapped first."""
        if self._closed:
            raise self._closed_error("vm_release")
        self._memory.vm_release(index, ptr, size)

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        """Back ``[ptr, ptr+size)`` with one physical allocation (``cuMemCreate`` +
        ``cuMemMap`` + ``cuMemSetAccess``); ``False`` when the device is out of memory.

        Each call is one mapping; :meth:`vm_unmap` releases whole mappings (one or several
        adjacent ones), as the caching allocator's expandable segments do page by page.

        Raises:
            ValueError: the range is unaligned, outside a reservation, or already mapped.
        """
        if self._closed:
            raise self._closed_error("vm_map")
        return self._memory.vm_map(index, ptr, size)

    def vm_unmap(self, index: int, ptr: int, size: int) -> None:
        """Unmap ``[ptr, ptr+size)`` and release its physical memory.

        Raises:
            ValueError: the range is not exactly a run of whole mappings made by
                :meth:`vm_map` (part of it is unmapped, or it cuts a mapping).
        """
        if self._closed:
            raise self._closed_error("vm_unmap")
        self._memory.vm_unmap(index, ptr, size)

    def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
               stream: StreamHandle) -> None:
        """Stream-ordered copy (``cuMemcpy{HtoD,DtoH,DtoD}Async``; ``h2h`` via UVA)."""
        if self._closed:
            raise self._closed_error("memcpy")
        self._memory.memcpy(index, dst, src, nbytes, kind, stream)

    def memcpy_peer(self, dst_index: int, dst: int, src_index: int, src: int, nbytes: int,
                    stream: StreamHandle) -> None:
        """``cuMemcpyPeerAsync`` ordered on ``stream`` of ``src_index``."""
        if self._closed:
            raise self._closed_error("memcpy_peer")
        self._memory.memcpy_peer(dst_index, dst, src_index, src, nbytes, stream)

    def memset(self, index: int, ptr: int, value: int, nbytes: int,
               stream: StreamHandle) -> None:
        """``cuMemsetD8Async``."""
        if self._closed:
            raise self._closed_error("memset")
        self._memory.memset(index, ptr, value, nbytes, stream)

    def fill(self, index: int, ptr: int, pattern: bytes, count: int,
             stream: StreamHandle) -> None:
        """Write ``pattern`` ``count`` times: ``cuMemsetD8/D16/D32Async`` for aligned 1/2/4
        byte patterns, the ``fill.cu`` kernels for 8-byte or unaligned patterns."""
        if self._closed:
            raise self._closed_error("fill")
        self._memory.fill(index, ptr, pattern, count, stream)

    # ------------------------------------------------------------------ streams, events and host functions (CudaStreams)
    def default_stream(self, index: int) -> StreamHandle:
        """``0``: the legacy default (NULL) stream of the device's primary context."""
        return self._streams.default_stream(index)

    def stream_priority_range(self, index: int) -> tuple[int, int]:
        """``(least, greatest)`` from ``cuCtxGetStreamPriorityRange`` (e.g. ``(0, -5)``)."""
        return self._streams.stream_priority_range(index)

    def stream_create(self, index: int, priority: int) -> StreamHandle:
        """A non-blocking stream of ``priority`` (clamped into the device's range)."""
        if self._closed:
            raise self._closed_error("stream_create")
        return self._streams.stream_create(index, priority)

    def stream_destroy(self, index: int, stream: StreamHandle) -> None:
        """``cuStreamDestroy`` for a stream made by :meth:`stream_create`.

        Raises:
            ValueError: the handle was not made by this backend.
        """
        if self._closed:
            raise self._closed_error("stream_destroy")
        self._streams.stream_destroy(index, stream)

    def stream_query(self, index: int, stream: StreamHandle) -> bool:
        """``cuStreamQuery``: ``CUDA_ERROR_NOT_READY`` means False; once the work is done,
        raises (once) what a host function queued on the stream raised."""
        if self._closed:
            raise self._closed_error("stream_query")
        return self._streams.stream_query(index, stream)

    def stream_synchronize(self, index: int, stream: StreamHandle) -> None:
        """``cuStreamSynchronize``."""
        if self._closed:
            raise self._closed_error("stream_synchronize")
        self._streams.stream_synchronize(index, stream)

    def stream_wait_event(self, index: int, stream: StreamHandle, event: EventHandle) -> None:
        """``cuStreamWaitEvent``."""
        if self._closed:
            raise self._closed_error("stream_wait_event")
        self._streams.stream_wait_event(index, stream, event)

    def stream_is_valid(self, index: int, stream: StreamHandle) -> bool:
        """True for the special handles, streams made here, and foreign streams the driver
        recognises as belonging to device ``index``'s primary context (``cuStreamGetCtx``).

        .. note:: The driver may crash on a handle that was never a stream, as with
            ``torch.cuda.ExternalStream``; pass only real stream handles.
        """
        if self._closed:
            raise self._closed_error("stream_is_valid")
        return self._streams.stream_is_valid(index, stream)

    def synchronize(self, index: int) -> None:
        """``cuCtxSynchronize`` on the device's primary context."""
        if self._closed:
            raise self._closed_error("synchronize")
        self._streams.synchronize(index)

    def launch_host_func(self, index: int, fn: Callable[[], None], stream: StreamHandle) -> None:
        """``cuLaunchHostFunc``: run ``fn`` on a driver thread after the stream's earlier work.

        ``fn`` is kept alive until it has run; it must not call CUDA. An exception it raises
        (a driver thread cannot propagate it) is raised as a :class:`~accelrt.DeviceError`
        chaining it by the next :meth:`stream_synchronize` (or :meth:`stream_query` finding it
        done) of that stream, :meth:`event_synchronize` of an event recorded on it after, or
        :meth:`synchronize` of the device, once.

        Raises:
            DeviceError: ``stream`` is capturing a graph. A captured host node would run
                ``fn`` on the first replay only: the backend forgets ``fn`` once it ran, and
                ``cuda.bindings``' host-function wrapper is one-shot as well
                (NVIDIA/cuda-python#790).
        """
        if self._closed:
            raise self._closed_error("launch_host_func")
        self._streams.launch_host_func(index, fn, stream)

    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        """``cuEventCreate`` with timing, blocking-sync and interprocess flags.

        Raises:
            ValueError: ``interprocess`` with ``enable_timing`` (CUDA forbids it).
        """
        if self._closed:
            raise self._closed_error("event_create")
        return self._streams.event_create(index, enable_timing, blocking, interprocess)

    def event_destroy(self, index: int, event: EventHandle) -> None:
        """``cuEventDestroy``."""
        if self._closed:
            raise self._closed_error("event_destroy")
        self._streams.event_destroy(index, event)

    def event_record(self, index: int, event: EventHandle, stream: StreamHandle) -> None:
        """``cuEventRecord`` (an event recorded during a capture becomes a graph node)."""
        if self._closed:
            raise self._closed_error("event_record")
        self._streams.event_record(index, event, stream)

    def event_record_external(self, index: int, event: EventHandle,
                              stream: StreamHandle) -> None:
        """``cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL)`` inside a capture (an event
        record node: the event stays usable outside the graph), ``cuEventRecord`` outside
        (the flag is invalid there)."""
        if self._closed:
            raise self._closed_error("event_record_external")
        self._streams.event_record_external(index, event, stream)

    def stream_wait_event_external(self, index: int, stream: StreamHandle,
                                   event: EventHandle) -> None:
        """``cuStreamWaitEvent(CU_EVENT_WAIT_EXTERNAL)`` inside a capture (an event wait
        node), ``cuStreamWaitEvent`` outside."""
        if self._closed:
            raise self._closed_error("stream_wait_event_external")
        self._streams.stream_wait_event_external(index, stream, event)

    def event_query(self, index: int, event: EventHandle) -> bool:
        """``cuEventQuery``: ``CUDA_ERROR_NOT_READY`` means False."""
        if self._closed:
            raise self._closed_error("event_query")
        return self._streams.event_query(index, event)

    def event_synchronize(self, index: int, event: EventHandle) -> None:
        """``cuEventSynchronize``; then raises (once) what a host function queued on the
        stream the event was last recorded on raised."""
        if self._closed:
            raise self._closed_error("event_synchronize")
        self._streams.event_synchronize(index, event)

    def event_elapsed_time(self, index: int, start: EventHandle, end: EventHandle) -> float:
        """``cuEventElapsedTime`` in milliseconds."""
        if self._closed:
            raise self._closed_error("event_elapsed_time")
        return self._streams.event_elapsed_time(index, start, end)

    def event_ipc_handle(self, index: int, event: EventHandle) -> bytes:
        """The 64-byte ``CUipcEventHandle`` of an interprocess event."""
        if self._closed:
            raise self._closed_error("event_ipc_handle")
        return self._streams.event_ipc_handle(index, event)

    def event_from_ipc_handle(self, index: int, handle: bytes) -> EventHandle:
        """Open another process's event from its :meth:`event_ipc_handle` bytes."""
        if self._closed:
            raise self._closed_error("event_from_ipc_handle")
        return self._streams.event_from_ipc_handle(index, handle)

    # ------------------------------------------------------------------ graphs (CudaGraphs)
    def graph_capture_begin(self, index: int, stream: StreamHandle) -> None:
        """``cuStreamBeginCapture`` in global mode (``capture_error_mode="default"``, the
        default of PyTorch's ``CUDAGraph.capture_begin``).

        Raises:
            RuntimeError: ``stream`` is the legacy default stream (CUDA cannot capture it).
        """
        if self._closed:
            raise self._closed_error("graph_capture_begin")
        self._graphs.graph_capture_begin(index, stream)

    def graph_capture_begin_mode(self, index: int, stream: StreamHandle, mode: str) -> None:
        """``cuStreamBeginCapture`` in ``mode`` (``"global"``, ``"thread_local"`` or
        ``"relaxed"``: ``CU_STREAM_CAPTURE_MODE_*``, PyTorch's ``capture_error_mode``). The
        mode decides which threads' potentially unsafe calls CUDA refuses during the capture,
        and in which threads :meth:`synchronize` of the device is refused (docs/graphs.md).

        Raises:
            ValueError: another ``mode``.
            RuntimeError: ``stream`` is the legacy default stream (CUDA cannot capture it).
        """
        if self._closed:
            raise self._closed_error("graph_capture_begin_mode")
        self._graphs.graph_capture_begin(index, stream, mode)

    def graph_capture_end(self, index: int, stream: StreamHandle) -> GraphHandle:
        """``cuStreamEndCapture``; returns the ``CUgraph`` handle (instantiated by
        :meth:`graph_instantiate`, or by the first :meth:`graph_replay`)."""
        if self._closed:
            raise self._closed_error("graph_capture_end")
        return self._graphs.graph_capture_end(index, stream)

    def graph_instantiate(self, index: int, graph: GraphHandle) -> int:
        """``cuGraphInstantiate`` (then ``cuGraphExecDestroy`` of the previous executable
        graph); returns ``cuGraphExecGetId`` of the new one."""
        if self._closed:
            raise self._closed_error("graph_instantiate")
        return self._graphs.graph_instantiate(index, graph)

    def graph_replay(self, index: int, graph: GraphHandle, stream: StreamHandle) -> None:
        """``cuGraphLaunch`` (instantiating a graph never instantiated)."""
        if self._closed:
            raise self._closed_error("graph_replay")
        self._graphs.graph_replay(index, graph, stream)

    def graph_destroy(self, index: int, graph: GraphHandle) -> None:
        """``cuGraphExecDestroy`` (if instantiated) + ``cuGraphDestroy``."""
        if self._closed:
            raise self._closed_error("graph_destroy")
        self._graphs.graph_destroy(index, graph)

    def graph_debug_dot(self, index: int, graph: GraphHandle, path: str,
                        verbose: bool) -> None:
        """``cuGraphDebugDotPrint`` of the captured ``CUgraph`` (``verbose``:
        ``CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE``)."""
        if self._closed:
            raise self._closed_error("graph_debug_dot")
        self._graphs.graph_debug_dot(index, graph, path, verbose)

    def graph_native_handles(self, index: int, graph: GraphHandle) -> tuple[int, int | None]:
        """``(CUgraph, CUgraphExec or None)`` as ints."""
        if self._closed:
            raise self._closed_error("graph_native_handles")
        return self._graphs.graph_native_handles(index, graph)

    def graph_node_count(self, index: int, graph: GraphHandle) -> int | None:
        """``cuGraphGetNodes`` of a live graph's CUgraph (``None`` for an unknown handle)."""
        if self._closed:
            raise self._closed_error("graph_node_count")
        return self._graphs.graph_node_count(index, graph)

    def stream_is_capturing(self, index: int, stream: StreamHandle) -> bool:
        """``cuStreamIsCapturing`` reports an active capture."""
        if self._closed:
            raise self._closed_error("stream_is_capturing")
        return self._streams.stream_is_capturing(index, stream)

    # ------------------------------------------------------------------ device-side compute (CudaOps)
    def philox_fill(self, index: int, ptr: int, n: int, dtype: str, dist: str, seed: int,
                    offset: int, params: tuple[float, float], stream: StreamHandle) -> None:
        """Fill ``n`` elements of ``dtype`` at device pointer ``ptr`` with Philox4x32-10
        numbers of ``dist`` for generator ``(seed, offset)``, ordered on ``stream``.

        The same bits as ``accelrt.random``'s host path (normals: to a few float64 ulp); see
        :func:`philox_launch` and ``docs/random.md`` for the arguments.

        Raises:
            TypeError: a wrong argument type.
            ValueError: a bad value, a pointer range that is not device memory of ``index``,
                or a stream that is not a live stream of it.
            CudaError: the launch failed.
        """
        if self._closed:
            raise self._closed_error("philox_fill")
        self._ops.philox_fill(index, ptr, n, dtype, dist, seed, offset, params, stream)

    def elementwise_add(self, index: int, out: int, a: int, b: int, count: int, dtype: str,
                        stream: StreamHandle) -> None:
        """``out = a + b`` for ``count`` elements of numpy dtype name ``dtype`` on device
        ``index``, ordered on ``stream`` (``out`` may be ``a`` or ``b``).

        Integers wrap like numpy's, float16 rounds like numpy's, bool adds as logical or.

        Raises:
            TypeError: a wrong argument type.
            ValueError: an unsupported dtype, a pointer range that is not device memory of
                ``index``, or a stream that is not a live stream of it.
            CudaError: the launch failed.
        """
        if self._closed:
            raise self._closed_error("elementwise_add")
        self._ops.elementwise_add(index, out, a, b, count, dtype, stream)

guard_operations(CudaBackend)


# ---------------------------------------------------------------------- fork safety

_backends: list[Any] = []


def _register_fork(b: CudaBackend) -> None:
    import weakref
    _backends.append(weakref.ref(b))


def _after_fork_in_child() -> None:
    for ref in _backends:
        b = ref()
        if b is not None:
            b._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
