"""accelrt: a device-agnostic accelerator runtime for Python.

The runtime API of ``torch.accelerator`` (devices, streams, events, a caching allocator with
statistics, RNG state, graphs) as a standalone library over pluggable backends (``cpu``,
``cuda``, third parties). ``import accelrt as acc`` reads like ``torch.accelerator``.

``import accelrt`` imports no backend library: submodules and public names load on first use.

Example::

    >>> import accelrt as acc
    >>> acc.device("cpu:0")
    device(type='cpu', index=0)
    >>> s = acc.Stream("cpu")
    >>> with s:
    ...     acc.current_stream("cpu") == s
    True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._device import (
    current_accelerator,
    current_device_idx,  # deprecated
    current_device_index,
    device,
    device_count,
    device_index,
    get_default_device,
    get_device_capability,
    get_device_properties,
    is_available,
    set_current_accelerator,
    set_default_device,
    set_device_idx,  # deprecated
    set_device_index,
)
from ._errors import (
    AcceleratorError,
    BackendUnavailableError,
    CaptureNotSupportedError,
    ClosedError,
    DeviceError,
    OutOfMemoryError,
)
from ._namespace import public_dir

if TYPE_CHECKING:
    # What the lazy names below resolve to, for type checkers only: at run time these modules
    # load on first attribute access (``__getattr__``), so ``import accelrt`` stays cheap.
    # tests/package/test_typing_public_api.py checks that mypy sees a real type for every public name.
    from . import (
        backends,
        comm,
        cpu,
        cuda,
        distributed,
        graphs,
        interop,
        memory,
        multiprocessing,
        opencl,
        random,
    )
    from ._array import Array, asarray, empty, full, ones, zeros
    from ._event import Event
    from ._graph import Graph, generate_graph_pool_handle, graph
    from ._pinned import is_pinned, pin_memory
    from ._stream import Stream, current_stream, set_stream, synchronize
    from ._sync_debug import get_sync_debug_mode, set_sync_debug_mode
    from .comm import can_device_access_peer
    from .memory import (
        MemPool,
        empty_cache,
        empty_host_cache,
        get_memory_info,
        host_memory_stats,
        max_memory_allocated,
        max_memory_reserved,
        memory_allocated,
        memory_reserved,
        memory_snapshot,
        memory_stats,
        memory_stats_as_nested_dict,
        memory_summary,
        reset_accumulated_memory_stats,
        reset_peak_memory_stats,
        use_mem_pool,
    )
    from .random import (
        get_rng_state,
        initial_seed,
        manual_seed,
        rand,
        randint,
        randn,
        seed,
        set_rng_state,
    )

__version__ = "0.1.0"

# Public names defined in submodules, loaded on first attribute access (PEP 562) so that
# ``import accelrt`` stays cheap and side-effect free. Import each one in the TYPE_CHECKING
# block above too (tests/package/test_typing_public_api.py checks that type checkers see them).
_LAZY: dict[str, str] = {
    # streams, events, graphs
    "Stream": "._stream",
    "current_stream": "._stream",
    "set_stream": "._stream",
    "synchronize": "._stream",
    "get_sync_debug_mode": "._sync_debug",
    "set_sync_debug_mode": "._sync_debug",
    "Event": "._event",
    "Graph": "._graph",
    "graph": "._graph",
    "generate_graph_pool_handle": "._graph",
    # arrays
    "Array": "._array",
    "asarray": "._array",
    "empty": "._array",
    "full": "._array",
    "ones": "._array",
    "zeros": "._array",
    "pin_memory": "._pinned",
    "is_pinned": "._pinned",
    "rand": ".random",
    "randn": ".random",
    "randint": ".random",
    "manual_seed": ".random",
    "seed": ".random",
    "initial_seed": ".random",
    "get_rng_state": ".random",
    "set_rng_state": ".random",
    # memory (the common ones, as torch.cuda re-exports them)
    "empty_cache": ".memory",
    "empty_host_cache": ".memory",
    "get_memory_info": ".memory",
    "host_memory_stats": ".memory",
    "max_memory_allocated": ".memory",
    "max_memory_reserved": ".memory",
    "memory_allocated": ".memory",
    "memory_reserved": ".memory",
    "memory_snapshot": ".memory",
    "memory_stats": ".memory",
    "memory_stats_as_nested_dict": ".memory",
    "memory_summary": ".memory",
    "reset_accumulated_memory_stats": ".memory",
    "reset_peak_memory_stats": ".memory",
    "MemPool": ".memory",
    "use_mem_pool": ".memory",
    # collectives
    "can_device_access_peer": ".comm",
}
_SUBMODULES = ("backends", "comm", "cpu", "cuda", "distributed", "graphs", "memory",
               "multiprocessing", "opencl", "random", "interop")

# A literal list (not computed) so type checkers see the re-exports; test_exported_members
# checks that it is sorted and covers _LAZY and _SUBMODULES.
__all__ = [
    "AcceleratorError",
    "Array",
    "BackendUnavailableError",
    "CaptureNotSupportedError",
    "ClosedError",
    "DeviceError",
    "Event",
    "Graph",
    "MemPool",
    "OutOfMemoryError",
    "Stream",
    "asarray",
    "backends",
    "can_device_access_peer",
    "comm",
    "cpu",
    "cuda",
    "current_accelerator",
    "current_device_idx",
    "current_device_index",
    "current_stream",
    "device",
    "device_count",
    "device_index",
    "distributed",
    "empty",
    "empty_cache",
    "empty_host_cache",
    "full",
    "generate_graph_pool_handle",
    "get_default_device",
    "get_device_capability",
    "get_device_properties",
    "get_memory_info",
    "get_rng_state",
    "get_sync_debug_mode",
    "graph",
    "graphs",
    "host_memory_stats",
    "initial_seed",
    "interop",
    "is_available",
    "is_pinned",
    "manual_seed",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "multiprocessing",
    "ones",
    "opencl",
    "pin_memory",
    "rand",
    "randint",
    "randn",
    "random",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "set_current_accelerator",
    "set_default_device",
    "set_device_idx",
    "set_device_index",
    "set_rng_state",
    "set_stream",
    "set_sync_debug_mode",
    "synchronize",
    "use_mem_pool",
    "zeros",
]


if not TYPE_CHECKING:  # hidden from type checkers: a typo must not type-check as ``Any``
    def __getattr__(name: str) -> Any:
        if name in _LAZY:
            value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        elif name in _SUBMODULES:
            value = importlib.import_module("." + name, __name__)
        else:
            raise AttributeError(f"module 'accelrt' has no attribute {name!r}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return public_dir(globals(), __all__, __name__)
