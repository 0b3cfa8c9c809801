"""The memory part of :class:`~accelrt.backends.cuda.CudaBackend`: device and pinned allocation,
virtual memory (expandable segments), copies, memset and fill.

Example::

    >>> from accelrt.backends.cuda._memory import fill_launch
    >>> fill_launch(4096, 0, 8, 10)[0]
    'accelrt_fill_u64'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._handles import DevicePtr, StreamHandle
from .._ranges import Ranges
from . import _cu
from ._cu import as_int, as_ptr, as_size, check
from ..._errors import type_shown

if TYPE_CHECKING:
    from ._backend import _Device
    from ._streams import CudaStreams

__all__ = ["CudaMemory", "fill_launch"]

_KINDS = ("h2d", "d2h", "d2d", "h2h")
#: ``mempool_*_attribute`` names -> ``CUmemPool_attribute`` enumerators
_POOL_ATTRS = {
    "release_threshold": "CU_MEMPOOL_ATTR_RELEASE_THRESHOLD",
    "reserved_mem_current": "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT",
    "reserved_mem_high": "CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH",
    "used_mem_current": "CU_MEMPOOL_ATTR_USED_MEM_CURRENT",
    "used_mem_high": "CU_MEMPOOL_ATTR_USED_MEM_HIGH",
}
_FILL_BLOCK = 256
_FILL_MAX_GRID = 65535


def fill_launch(ptr: int, value: int, width: int, count: int) -> tuple[str, list[Any], int]:
    """Kernel of ``fill.cu``, its arguments and grid (of ``_FILL_BLOCK`` threads) that write
    the little-endian ``width``-byte ``value`` ``count`` times from ``ptr``:
    ``accelrt_fill_u64`` for 8-byte patterns at 8-byte aligned addresses, else byte by byte.

    Example::

        >>> from accelrt.backends.cuda._memory import fill_launch
        >>> k, args, grid = fill_launch(0x1003, 0x0201, 2, 1000)
        >>> k, [int(a) for a in args], grid
        ('accelrt_fill_bytes', [4099, 513, 2, 1000], 8)
    """
    if width == 8 and ptr % 8 == 0:
        grid = min(-(-count // _FILL_BLOCK), _FILL_MAX_GRID)
        return "accelrt_fill_u64", [np.uint64(ptr), np.uint64(value), np.uint64(count)], grid
    grid = min(-(-(count * width) // _FILL_BLOCK), _FILL_MAX_GRID)
    return ("accelrt_fill_bytes",
            [np.uint64(ptr), np.uint64(value), np.uint32(width), np.uint64(count)], grid)


class CudaMemory:
    """Device, pinned host, stream-ordered pool, interprocess and virtual memory and the
    copies of one :class:`~accelrt.backends.cuda.CudaBackend` (a part it holds and delegates
    to, after its own checks).

    Args:
        drv: the driver bindings.
        use: makes a device's primary context current and returns its state.
        use_any: the same for the thread's current device (device 0 if none).
        streams: the backend's streams part (stream checks; relaxed capture mode for
            allocation calls while a graph captures).
        launch_kernel: launches one of accelrt's kernels (``CudaBackend.launch_kernel``).
    """

    def __init__(self, drv: Any, use: Callable[[int], _Device], use_any: Callable[[], _Device],
                 streams: CudaStreams, launch_kernel: Callable[..., None]) -> None:
        self._drv = drv
        self._use = use
        self._use_any = use_any
        self._streams = streams
        self._launch_kernel = launch_kernel
        self._host_allocs: Ranges[None] = Ranges()    # pinned host memory from host_malloc

    def check_device_range(self, d: _Device, value: Any, nbytes: int, what: str) -> int:
        """Raise ValueError unless ``[ptr, ptr+nbytes)`` is device memory of ``d`` (allocated
        here, mapped here, or a foreign allocation the driver knows)."""
        ptr = as_ptr(value, what)
        hit = d.allocs.find(ptr)
        if hit is None and len(d.pool_allocs):
            hit = d.pool_allocs.find(ptr)
        if hit is not None:
            if ptr + nbytes > hit[0] + hit[1]:
                raise ValueError(f"{what} range ({ptr:#x}, {nbytes}) overruns its allocation "
                                 f"({hit[0]:#x}, {hit[1]})")
            return ptr
        if len(d.mappings):
            hit = d.mappings.find(ptr)
            if hit is not None:   # walk adjacent mappings (a block may span pages)
                end = hit[0] + hit[1]
                while end < ptr + nbytes:
                    nxt = d.mappings.size_of(end)
                    if nxt is None:
                        raise ValueError(f"{what} range ({ptr:#x}, {nbytes}) runs into "
                                         f"unmapped virtual memory of cuda:{d.index}")
                    end += nxt
                return ptr
        drv = self._drv
        attr = drv.CUpointer_attribute
        with self._streams.relaxed():
            err, base = drv.cuPointerGetAttribute(attr.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr)
            if not err:
                err, size = drv.cuPointerGetAttribute(attr.CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr)
        if err:
            raise ValueError(f"{what} {ptr:#x} is not device memory of cuda:{d.index}")
        if ptr + nbytes > int(base) + int(size):
            raise ValueError(f"{what} range ({ptr:#x}, {nbytes}) overruns its allocation "
                             f"({int(base):#x}, {int(size)})")
        return ptr

    def pointer_device(self, ptr: int) -> int | None:
        ptr = as_ptr(ptr, "pointer")
        self._use_any()
        drv = self._drv
        attr = drv.CUpointer_attribute
        with self._streams.relaxed():
            err, mtype = drv.cuPointerGetAttribute(attr.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
            if err or int(mtype) != int(drv.CUmemorytype.CU_MEMORYTYPE_DEVICE):
                return None
            err, ordinal = drv.cuPointerGetAttribute(attr.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                     ptr)
        return None if err else int(ordinal)

    def _check_host_range(self, value: Any, nbytes: int, what: str) -> int:
        """Host pointers: pinned ones from host_malloc are range-checked, others trusted."""
        ptr = as_ptr(value, what)
        hit = self._host_allocs.find(ptr)
        if hit is not None and ptr + nbytes > hit[0] + hit[1]:
            raise ValueError(f"{what} range ({ptr:#x}, {nbytes}) overruns its pinned host "
                             f"allocation ({hit[0]:#x}, {hit[1]})")
        return ptr

    # ------------------------------------------------------------------ device memory
    def malloc(self, index: int, size: int) -> DevicePtr:
        size = as_size(size, "malloc size", positive=True)
        d = self._use(index)
        with self._streams.relaxed():
            result = self._drv.cuMemAlloc(size)
        return DevicePtr(self._allocated(result, "cuMemAlloc", d.allocs, size))

    def free(self, index: int, ptr: DevicePtr) -> None:
        ptr = DevicePtr(as_ptr(ptr, "free pointer"))
        d = self._use(index)
        size, _ = d.allocs.take(ptr, "free: {ptr:#x} was not returned by malloc on "
                                "cuda:{index} (or was already freed)", index=index)
        self._release(self._drv.cuMemFree, "cuMemFree", d.allocs, ptr, size)

    def _allocated(self, result: tuple[Any, Any], call: str, table: Ranges[None],
                   size: int) -> int:
        """The pointer of ``call``'s ``(err, ptr)`` ``result`` (``cuMemAlloc``,
        ``cuMemHostAlloc``), recorded in ``table``; ``0`` on ``CUDA_ERROR_OUT_OF_MEMORY``."""
        err, ptr = result
        if err:
            if err == self._drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
                return 0
            _cu.raise_error(err, call)
        ptr = int(ptr)
        table.add(ptr, size, None)
        return ptr

    def _release(self, release: Callable[[int], Any], call: str, table: Ranges[None],
                 ptr: int, size: int) -> None:
        """``release(ptr)`` (``cuMemFree``, ``cuMemFreeHost``; relaxed capture mode, as every
        allocation call); ``ptr``, already popped from ``table``, goes back into it if the
        driver refuses."""
        try:
            with self._streams.relaxed():
                check(release(ptr), call)
        except BaseException:
            table.add(ptr, size, None)
            raise

    # ------------------------------------------------------------------ stream-ordered pool
    def _mempool(self, d: _Device) -> Any:
        """The device's default ``CUmemoryPool`` (``cuDeviceGetDefaultMemPool``, cached)."""
        pool = d.pool
        if pool is None:
            pool = d.pool = check(self._drv.cuDeviceGetDefaultMemPool(d.dev),
                                  "cuDeviceGetDefaultMemPool")
        return pool

    def mempool_alloc_async(self, index: int, size: int, stream: StreamHandle) -> DevicePtr:
        size = as_size(size, "mempool_alloc_async size", positive=True)
        d = self._use(index)
        stream = self._streams.check_stream(d, stream)
        pool = self._mempool(d)
        err, ptr = self._drv.cuMemAllocFromPoolAsync(size, pool, stream)
        if err:
            if err == self._drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
                return DevicePtr(0)
            _cu.raise_error(err, "cuMemAllocFromPoolAsync")
        ptr = int(ptr)
        d.pool_allocs.add(ptr, size, None)
        return DevicePtr(ptr)

    def mempool_free_async(self, index: int, ptr: DevicePtr, stream: StreamHandle) -> None:
        ptr = DevicePtr(as_ptr(ptr, "mempool_free_async pointer"))
        d = self._use(index)
        stream = self._streams.check_stream(d, stream)
        size, _ = d.pool_allocs.take(ptr, "mempool_free_async: {ptr:#x} was not returned by "
                                     "mempool_alloc_async on cuda:{index} (or was already "
                                     "freed)", index=index)
        try:
            check(self._drv.cuMemFreeAsync(ptr, stream), "cuMemFreeAsync")
        except BaseException:
            d.pool_allocs.add(ptr, size, None)
            raise

    def mempool_trim_to(self, index: int, keep: int) -> None:
        keep = as_size(keep, "mempool_trim_to keep")
        d = self._use(index)
        check(self._drv.cuMemPoolTrimTo(self._mempool(d), keep), "cuMemPoolTrimTo")

    def _pool_attr(self, attr: object) -> Any:
        name = _POOL_ATTRS.get(attr) if isinstance(attr, str) else None
        if name is None:
            raise ValueError(f"unknown memory pool attribute {attr!r}; use one of "
                             f"{', '.join(_POOL_ATTRS)}")
        return getattr(self._drv.CUmemPool_attribute, name)

    def mempool_get_attribute(self, index: int, attr: str) -> int:
        which = self._pool_attr(attr)
        d = self._use(index)
        value = check(self._drv.cuMemPoolGetAttribute(self._mempool(d), which),
                      "cuMemPoolGetAttribute")
        return int(value)

    def mempool_set_attribute(self, index: int, attr: str, value: int) -> None:
        which = self._pool_attr(attr)
        value = as_int(value, "mempool_set_attribute value")
        if not 0 <= value < 1 << 64:
            raise ValueError(f"mempool_set_attribute value must be in [0, 2**64), got {value}")
        if attr not in ("release_threshold", "reserved_mem_high", "used_mem_high"):
            raise ValueError(f"memory pool attribute {attr!r} cannot be set; set "
                             "release_threshold, or reset reserved_mem_high / used_mem_high")
        if attr != "release_threshold" and value != 0:
            raise ValueError(f"{attr} can only be reset, with the value 0 (it becomes the "
                             f"current value); got {value}")
        d = self._use(index)
        drv = self._drv
        check(drv.cuMemPoolSetAttribute(self._mempool(d), which, drv.cuuint64_t(value)),
              "cuMemPoolSetAttribute")

    # ------------------------------------------------------------------ interprocess memory
    def ipc_mem_handle(self, index: int, ptr: DevicePtr) -> bytes:
        ptr = DevicePtr(as_ptr(ptr, "ipc_mem_handle pointer"))
        d = self._use(index)
        if d.allocs.size_of(ptr) is None:
            if d.reserved.find(ptr) is not None:
                raise ValueError(
                    f"cannot share memory between processes: {ptr:#x} is an expandable segment "
                    f"of cuda:{index} (cuMemCreate memory, which cuIpcGetMemHandle cannot "
                    "share); remove expandable_segments:True from ACCELRT_ALLOC_CONF in the "
                    "producer")
            raise ValueError(f"cannot share memory between processes: {ptr:#x} does not start "
                             f"a cuMemAlloc allocation of cuda:{index}; pass a segment base")
        h = check(self._drv.cuIpcGetMemHandle(ptr), "cuIpcGetMemHandle")
        return _cu.ipc_bytes(h)

    def ipc_open_mem_handle(self, index: int, handle: bytes) -> tuple[DevicePtr, int]:
        drv = self._drv
        h = _cu.ipc_struct(handle, drv.CUipcMemHandle, "memory", "ipc_mem_handle")
        d = self._use(index)
        flags = int(drv.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        ptr = int(check(drv.cuIpcOpenMemHandle(h, flags), "cuIpcOpenMemHandle"))
        try:
            base, size = check(drv.cuMemGetAddressRange(ptr), "cuMemGetAddressRange")
        except BaseException:
            drv.cuIpcCloseMemHandle(ptr)
            raise
        size = int(size) - (ptr - int(base))
        d.ipc_opened.add(ptr, size, None)
        return DevicePtr(ptr), size

    def ipc_close_mem_handle(self, index: int, ptr: DevicePtr) -> None:
        ptr = DevicePtr(as_ptr(ptr, "ipc_close_mem_handle pointer"))
        d = self._use(index)
        size, _ = d.ipc_opened.take(ptr, "ipc_close_mem_handle: {ptr:#x} is not memory "
                                    "opened from an IPC handle on cuda:{index}", index=index)
        try:
            check(self._drv.cuIpcCloseMemHandle(ptr), "cuIpcCloseMemHandle")
        except BaseException:
            d.ipc_opened.add(ptr, size, None)
            raise

    # ------------------------------------------------------------------ pinned host memory
    def host_malloc(self, size: int) -> int:
        size = as_size(size, "host_malloc size", positive=True)
        self._use_any()
        drv = self._drv
        with self._streams.relaxed():
            result = drv.cuMemHostAlloc(size, drv.CU_MEMHOSTALLOC_PORTABLE)
        return self._allocated(result, "cuMemHostAlloc", self._host_allocs, size)

    def host_free(self, ptr: int) -> None:
        ptr = as_ptr(ptr, "host_free pointer")
        size, _ = self._host_allocs.take(ptr, "host_free: {ptr:#x} was not returned by "
                                         "host_malloc (or was already freed)")
        self._use_any()
        self._release(self._drv.cuMemFreeHost, "cuMemFreeHost", self._host_allocs, ptr, size)

    # ------------------------------------------------------------------ virtual memory
    def _prop(self, index: int) -> Any:
        drv = self._drv
        prop = drv.CUmemAllocationProp()
        prop.type = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = index
        return prop

    def vm_granularity(self, index: int) -> int:
        d = self._use(index)
        if not d.vm_gran:
            drv = self._drv
            gran = check(drv.cuMemGetAllocationGranularity(
                self._prop(index),
                drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                "cuMemGetAllocationGranularity")
            d.vm_gran = int(gran)
        return d.vm_gran

    def _check_vm_range(self, index: int, ptr: int, size: int) -> int:
        gran = self.vm_granularity(index)
        as_size(size, "virtual memory size", positive=True)
        if ptr:
            as_ptr(ptr, "virtual memory address")
        if ptr % gran or size % gran:
            raise ValueError(f"virtual memory range ({ptr:#x}, {size}) must be aligned to the "
                             f"granularity {gran}; use vm_granularity()")
        return gran

    def vm_reserve(self, index: int, size: int) -> DevicePtr:
        gran = self._check_vm_range(index, 0, size)
        d = self._use(index)
        with self._streams.relaxed():
            err, ptr = self._drv.cuMemAddressReserve(size, gran, 0, 0)
        if err:
            if err in (self._drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY,
                       self._drv.CUresult.CUDA_ERROR_INVALID_VALUE):
                raise ValueError(f"vm_reserve: cannot reserve {size} bytes of address space on "
                                 f"cuda:{index} ({_cu.error_text(err)[0]})")
            _cu.raise_error(err, "cuMemAddressReserve")
        ptr = int(ptr)
        d.reserved.add(ptr, size, None)
        return DevicePtr(ptr)

    def vm_release(self, index: int, ptr: DevicePtr, size: int) -> None:
        self._check_vm_range(index, ptr, size)
        d = self._use(index)
        if d.reserved.size_of(ptr) != size:
            raise ValueError(f"vm_release: ({ptr:#x}, {size}) is not a reservation made by "
                             f"vm_reserve on cuda:{index}")
        if d.mappings.overlaps(ptr, size):
            raise ValueError(f"vm_release: parts of ({ptr:#x}, {size}) are still mapped; "
                             "vm_unmap them first")
        with self._streams.relaxed():
            check(self._drv.cuMemAddressFree(ptr, size), "cuMemAddressFree")
        d.reserved.pop(ptr)

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        self._check_vm_range(index, ptr, size)
        d = self._use(index)
        if not d.reserved.contains(ptr, size):
            raise ValueError(f"vm_map: ({ptr:#x}, {size}) is not inside a reservation made by "
                             f"vm_reserve on cuda:{index}")
        if d.mappings.overlaps(ptr, size):
            raise ValueError(f"vm_map: ({ptr:#x}, {size}) overlaps memory that is already "
                             "mapped")
        drv = self._drv
        with self._streams.relaxed():
            err, handle = drv.cuMemCreate(size, self._prop(index), 0)
            if err:
                if err == drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
                    return False
                _cu.raise_error(err, "cuMemCreate")
            try:
                check(drv.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap")
            except BaseException:
                drv.cuMemRelease(handle)
                raise
            desc = drv.CUmemAccessDesc()
            desc.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            desc.location.id = index
            desc.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            try:
                check(drv.cuMemSetAccess(ptr, size, [desc], 1), "cuMemSetAccess")
            except BaseException:
                drv.cuMemUnmap(ptr, size)
                drv.cuMemRelease(handle)
                raise
        d.mappings.add(ptr, size, handle)
        return True

    def vm_unmap(self, index: int, ptr: int, size: int) -> None:
        self._check_vm_range(index, ptr, size)
        d = self._use(index)
        parts: list[tuple[int, int]] = []
        cur, end = ptr, ptr + size
        while cur < end:
            msize = d.mappings.size_of(cur)
            if msize is None:
                hit = d.mappings.find(cur)
                why = "cuts the mapping" if hit else "is not mapped at"
                raise ValueError(f"vm_unmap: ({ptr:#x}, {size}) {why} {cur:#x}; unmap whole "
                                 "ranges given to vm_map")
            parts.append((cur, msize))
            cur += msize
        if cur != end:
            raise ValueError(f"vm_unmap: ({ptr:#x}, {size}) cuts the mapping that ends at "
                             f"{cur:#x}; unmap whole ranges given to vm_map")
        if not self._streams._capturing:
            # Work still using the range must finish before its memory goes away (during a
            # capture the allocator only unmaps memory no captured work uses).
            check(self._drv.cuCtxSynchronize(), "cuCtxSynchronize")
        drv = self._drv
        with self._streams.relaxed():
            for base, msize in parts:
                check(drv.cuMemUnmap(base, msize), "cuMemUnmap")
                _, handle = d.mappings.take(base, "vm_unmap: {ptr:#x} was unmapped meanwhile")
                check(drv.cuMemRelease(handle), "cuMemRelease")

    # ------------------------------------------------------------------ copies
    def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
               stream: StreamHandle) -> None:
        if kind not in _KINDS:
            raise ValueError(f"memcpy kind must be one of {_KINDS}, got {kind!r}")
        nbytes = as_size(nbytes, "memcpy nbytes")
        d = self._use(index)
        stream = self._streams.check_stream(d, stream)
        if kind == "h2d":
            dst = self.check_device_range(d, dst, nbytes, "memcpy dst")
            src = self._check_host_range(src, nbytes, "memcpy src")
        elif kind == "d2h":
            dst = self._check_host_range(dst, nbytes, "memcpy dst")
            src = self.check_device_range(d, src, nbytes, "memcpy src")
        elif kind == "d2d":
            dst = self.check_device_range(d, dst, nbytes, "memcpy dst")
            src = self.check_device_range(d, src, nbytes, "memcpy src")
        else:
            dst = self._check_host_range(dst, nbytes, "memcpy dst")
            src = self._check_host_range(src, nbytes, "memcpy src")
        if nbytes == 0:
            return
        drv = self._drv
        if kind == "h2d":
            check(drv.cuMemcpyHtoDAsync(dst, src, nbytes, stream), "cuMemcpyHtoDAsync")
        elif kind == "d2h":
            check(drv.cuMemcpyDtoHAsync(dst, src, nbytes, stream), "cuMemcpyDtoHAsync")
        elif kind == "d2d":
            check(drv.cuMemcpyDtoDAsync(dst, src, nbytes, stream), "cuMemcpyDtoDAsync")
        else:
            check(drv.cuMemcpyAsync(dst, src, nbytes, stream), "cuMemcpyAsync")

    def memcpy_peer(self, dst_index: int, dst: int, src_index: int, src: int, nbytes: int,
                    stream: StreamHandle) -> None:
        nbytes = as_size(nbytes, "memcpy_peer nbytes")
        dd = self._use(dst_index)
        dst = self.check_device_range(dd, dst, nbytes, "memcpy_peer dst")
        sd = self._use(src_index)
        src = self.check_device_range(sd, src, nbytes, "memcpy_peer src")
        stream = self._streams.check_stream(sd, stream)
        if nbytes == 0:
            return
        dst_ctx, src_ctx = dd.ctx, sd.ctx
        check(self._drv.cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, nbytes, stream),
              "cuMemcpyPeerAsync")

    def memset(self, index: int, ptr: int, value: int, nbytes: int,
               stream: StreamHandle) -> None:
        value = as_int(value, "memset value")
        if not 0 <= value <= 255:
            raise ValueError(f"memset value must be a byte (0..255), got {value}")
        nbytes = as_size(nbytes, "memset nbytes")
        d = self._use(index)
        stream = self._streams.check_stream(d, stream)
        ptr = self.check_device_range(d, ptr, nbytes, "memset pointer")
        if nbytes == 0:
            return
        check(self._drv.cuMemsetD8Async(ptr, value, nbytes, stream), "cuMemsetD8Async")

    def fill(self, index: int, ptr: int, pattern: bytes, count: int,
             stream: StreamHandle) -> None:
        if not isinstance(pattern, (bytes, bytearray, memoryview)):
            raise TypeError(f"fill pattern must be bytes, got {type_shown(pattern)}")
        pattern = bytes(pattern)
        width = len(pattern)
        if width not in (1, 2, 4, 8):
            raise ValueError(f"fill pattern must be 1, 2, 4 or 8 bytes, got {width}")
        count = as_size(count, "fill count")
        d = self._use(index)
        stream = self._streams.check_stream(d, stream)
        ptr = self.check_device_range(d, ptr, count * width, "fill pointer")
        if count == 0:
            return
        value = int.from_bytes(pattern, "little")
        drv = self._drv
        if width == 1:
            check(drv.cuMemsetD8Async(ptr, value, count, stream), "cuMemsetD8Async")
        elif width == 2 and ptr % 2 == 0:
            check(drv.cuMemsetD16Async(ptr, value, count, stream), "cuMemsetD16Async")
        elif width == 4 and ptr % 4 == 0:
            check(drv.cuMemsetD32Async(ptr, value, count, stream), "cuMemsetD32Async")
        else:
            kernel, args, grid = fill_launch(ptr, value, width, count)
            self._launch_kernel(index, stream, "fill", kernel, grid, _FILL_BLOCK, args)
