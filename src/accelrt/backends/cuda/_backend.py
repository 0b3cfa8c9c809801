"""``CudaBackend``: accelrt's backend contract over NVIDIA's driver API (``cuda.bindings``).

Devices and contexts live here; memory and copies in :mod:`._memory`; streams, events, host
functions and graphs in :mod:`._streams`; the optional compute hooks ``philox_fill`` and
``elementwise_add`` in :mod:`._ops`. Discovery (:mod:`._discovery`) never creates a
context; the primary context of a device is retained on the first raw operation and made
current per thread.

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
from typing import Any

from ..._backend import Backend, Capabilities
from ..._errors import BackendUnavailableError
from . import _cu, _discovery
from ._cu import CudaError, check
from ._kernels import KernelCache, pack_args
from ._memory import MemoryMixin, Ranges
from ._ops import OpsMixin
from ._streams import StreamMixin

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


class _Device:
    """Per-device driver state (created on first use, never destroyed)."""

    __slots__ = ("allocs", "capability", "ctx", "ctx_int", "dead_streams", "dev",
                 "foreign_streams", "index", "ipc_opened", "lock", "mappings",
                 "owned_streams", "pool", "pool_allocs", "priorities", "reserved", "vm_gran",
                 "vm_handles")

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
        self.allocs = Ranges()                                # malloc'd memory
        self.reserved = Ranges()                              # vm_reserve'd address space
        self.mappings = Ranges()                              # vm_map'ed ranges
        self.ipc_opened = Ranges()                            # cuIpcOpenMemHandle'd memory
        self.pool: Any = None                                 # default CUmemoryPool (lazily)
        self.pool_allocs = Ranges()                           # cuMemAllocFromPoolAsync'd
        self.vm_handles: dict[int, Any] = {}                  # guarded by lock; base -> handle
        self.vm_gran = 0                                      # guarded by lock
        self.lock = threading.Lock()


class _Tls(threading.local):
    index = -1   # the device whose primary context this thread made current


class CudaBackend(OpsMixin, StreamMixin, MemoryMixin, Backend):
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

    def __init__(self) -> None:
        self._drv = _cu.driver()
        self._lock = threading.Lock()
        self._devices: dict[int, _Device] = {}        # guarded by _lock
        self._props: dict[int, dict[str, Any]] = {}   # guarded by _lock
        self._tls = _Tls()
        self._inited = False                          # guarded by _lock: cuInit done
        self._forked = False
        self._host_allocs = Ranges()                  # pinned host memory from host_malloc
        self._multi = self.device_count() > 1         # check the current context per call
        self.kernels = KernelCache()
        self._caps: dict[int, Capabilities] = {}      # by device index (written once each)
        StreamMixin.__init__(self)
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
            check(self._drv.cuInit(0), "cuInit")
            self._inited = True

    def _check_index(self, index: Any) -> int:
        if type(index) is not int and (not isinstance(index, int) or isinstance(index, bool)):
            raise TypeError(f"cuda device index must be an int, got {type(index).__name__}")
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
        """The thread's current device, or device 0 (for context-wide calls like pinning)."""
        index = self._tls.index
        return self._use(max(index, 0))

    def init_device(self, index: int) -> None:
        """Retain device ``index``'s primary context and make it current in this thread."""
        if self._closed:
            raise self._closed_error("init_device")
        d = self._device(index)
        check(self._drv.cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent")
        self._tls.index = index

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
                graphs=True, graph_dot=True, graph_native_handles=True,
                pinned_host_memory=True, page_locked_host_memory=True, host_functions=True,
                peer_copies=True,
                interprocess_events=True, interprocess_memory=True, host_accessible=False,
                dlpack_device_type=_K_DL_CUDA, cuda_stream_protocol=True,
                cuda_array_interface=True, device_rng=True, device_add=True,
                pointer_lookup=True,
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
