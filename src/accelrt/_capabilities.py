"""What a device of a backend can do: :class:`Capabilities`, the one answer accelrt's core
asks (``Backend.capabilities(index)``), and the DLPack device types of the device families
accelrt knows by name. :mod:`accelrt._backend` (the contract) and ``accelrt.backends``
re-export it.

Example::

    >>> from accelrt._capabilities import Capabilities
    >>> Capabilities(graphs=True).graphs, Capabilities().virtual_memory
    (True, False)
"""

from __future__ import annotations

import dataclasses

__all__ = ["Capabilities"]


#: DLPack device types (``DLDeviceType``) of the device families accelrt knows by name: the
#: default :attr:`Capabilities.dlpack_device_type` of a backend registered under one of these
#: names that does not declare its own (any other name: ``kDLExtDev``, 12).
_DLPACK_DEVICE_TYPES = {
    "cuda": 2, "opencl": 4, "vulkan": 7, "metal": 8, "mps": 8, "rocm": 10, "hip": 10,
    "oneapi": 14, "xpu": 14,
}
_K_DL_EXT_DEV = 12


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What one device of a backend can do: the one answer the core asks (``capabilities``).

    Every optional operation of :class:`Backend` belongs to one field; the core calls an
    optional operation only where its field is True, and never looks at a backend's name or
    probes it with ``getattr``. Fields default to "not supported".

    Attributes:
        virtual_memory: ``vm_granularity``/``vm_reserve``/``vm_map``/``vm_unmap``/
            ``vm_release`` work (enables ``expandable_segments``).
        graphs: ``graph_capture_begin``/``graph_capture_end``/``graph_replay``/
            ``graph_destroy`` work (:class:`accelrt.Graph`; ``graph_instantiate`` is
            optional).
        graph_capture_modes: ``graph_capture_begin_mode`` begins a capture in one of CUDA's
            capture modes (``torch.cuda.graph``'s ``capture_error_mode``), which decides
            which threads' unsafe calls (a synchronize of the device) the capture refuses;
            without it every mode captures with ``graph_capture_begin``, the backend's own.
        graph_dot: ``graph_debug_dot`` writes a captured graph in Graphviz DOT format
            (``Graph.debug_dump``, ``export_dot``).
        graph_native_handles: ``graph_native_handles`` gives a captured graph's native
            handles (``CUDAGraph.raw_cuda_graph``/``raw_cuda_graph_exec``).
        pinned_host_memory: ``host_malloc``/``host_free`` give host memory for the pinned host
            pool, which stages copies between numpy memory and the device.
        page_locked_host_memory: that memory is page-locked (pinned), so users may pin host
            arrays in the pool (``accelrt.pin_memory``, ``pin_memory=True``); False where it
            is ordinary memory that only stages copies (OpenCL).
        host_functions: ``launch_host_func`` runs host callables in stream order.
        peer_copies: ``memcpy_peer`` copies between two devices of the backend.
        interprocess_events: ``event_create(interprocess=True)``, ``event_ipc_handle`` and
            ``event_from_ipc_handle`` work.
        interprocess_memory: ``ipc_mem_handle``/``ipc_open_mem_handle``/
            ``ipc_close_mem_handle`` work (:mod:`accelrt.multiprocessing`).
        host_accessible: device memory can be read and written by the host at its address
            (zero-copy ``numpy()``; DLPack exports it as ``kDLCPU``).
        dlpack_device_type: the DLPack ``DLDeviceType`` of device memory that is not host
            accessible (``kDLCUDA`` = 2, ``kDLOpenCL`` = 4, ``kDLExtDev`` = 12, ...).
        cuda_stream_protocol: streams expose ``__cuda_stream__`` (their handle is a
            ``CUstream``).
        cuda_array_interface: arrays expose ``__cuda_array_interface__`` (their memory is
            CUDA device memory).
        device_rng: ``philox_fill`` fills device memory with Philox numbers on the device.
        device_add: ``elementwise_add`` sums on the device (``accelrt.comm.reduce_add``).
        pointer_lookup: ``pointer_device`` says which device holds a foreign pointer.
        adopt_memory: ``adopt_memory``/``disown_memory`` accept memory a pluggable
            allocator's library allocated as the device's own.
        fork_shares_memory: memory from ``malloc`` stays shared with a child made by
            ``fork`` (POSIX shared memory, not copy-on-write), and both processes can use it:
            the caching allocator then stops handing out, in the parent and in the child, the
            segments it had at the fork (no operation; False where a child cannot use the
            device at all, as CUDA's).
        stream_ordered_memory: the device has a stream-ordered memory pool (CUDA's default
            mempool): ``mempool_alloc_async``/``mempool_free_async``/``mempool_trim_to``/
            ``mempool_get_attribute``/``mempool_set_attribute`` work (enables the allocator
            option ``backend:cudaMallocAsync``).
        device_fill: ``fill`` writes a 2-, 4- or 8-byte pattern in stream order
            (``Array.fill_`` of a value whose bytes differ; without it, the value is uploaded).

    Example::

        >>> from accelrt.backends import get_backend
        >>> caps = get_backend("cpu").capabilities(0)
        >>> caps.host_accessible, caps.graphs, caps.cuda_array_interface
        (True, True, False)
    """

    virtual_memory: bool = False
    graphs: bool = False
    graph_capture_modes: bool = False
    graph_dot: bool = False
    graph_native_handles: bool = False
    pinned_host_memory: bool = False
    page_locked_host_memory: bool = False
    host_functions: bool = False
    peer_copies: bool = False
    interprocess_events: bool = False
    interprocess_memory: bool = False
    host_accessible: bool = False
    dlpack_device_type: int = _K_DL_EXT_DEV
    cuda_stream_protocol: bool = False
    cuda_array_interface: bool = False
    device_rng: bool = False
    device_add: bool = False
    pointer_lookup: bool = False
    adopt_memory: bool = False
    fork_shares_memory: bool = False
    stream_ordered_memory: bool = False
    device_fill: bool = False
