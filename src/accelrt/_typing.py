"""Type aliases shared across accelrt."""

from __future__ import annotations

from collections.abc import Sequence

from typing import TYPE_CHECKING, Protocol, SupportsIndex, Union

if TYPE_CHECKING:
    from typing import TypeAlias

    import numpy as np

    from ._array import Array
    from ._device import device
    from .memory import MemPool

#: What every ``device`` argument accepts: an index on the current accelerator, a string such
#: as ``"cpu:1"``, an :class:`accelrt.device`, or ``None`` for the current device.
DeviceLike = Union["device", int, str, None]

#: One named device (no ``None``): an index on the relevant backend, ``"cpu:1"``, a device.
DeviceSpec = Union["device", int, str]

#: A dtype argument: a name (``"float32"``), a numpy dtype or scalar type, or a Python type.
#: (``np.generic[object]``: any numpy scalar type, without ``Any``; numpy >= 2.2 stubs.)
DTypeLike = Union[str, "np.dtype[np.generic[object]]", "type[np.generic[object]]", type[int],
                  type[float], type[complex]]

#: A numpy array of any shape and dtype (host memory).
HostArray: TypeAlias = "np.ndarray[tuple[int, ...], np.dtype[np.generic[object]]]"

#: An RNG state: a 1-D ``numpy.uint8`` array of 16 bytes.
RngState: TypeAlias = "np.ndarray[tuple[int], np.dtype[np.uint8]]"

#: What ``set_rng_state`` accepts: a state array, or an ``Array`` holding it (not ``bytes``,
#: as PyTorch's takes only a ByteTensor).
RngStateLike = Union["np.ndarray[tuple[int, ...], np.dtype[np.uint8]]", "Array"]

#: One word of ``Generator.philox_state``: a 1-element ``int64`` array holding uint64 bits.
PhiloxWord: TypeAlias = "np.ndarray[tuple[int], np.dtype[np.int64]]"

#: A private memory pool argument: ``Graph.pool()`` / ``graph_pool_handle()`` or a MemPool.
PoolLike = Union[tuple[int, int], "MemPool", None]

#: A size argument: ``2`` or ``(2, 3)``.
SizeLike = Union[SupportsIndex, "Sequence[SupportsIndex]"]

#: ``memory_stats_as_nested_dict()``: ints, nested by the dotted parts of the stat names
#: (``reserved_bytes_by_private_pools`` is keyed by pool id tuples, as PyTorch's).
NestedStats: TypeAlias = "dict[str | tuple[int, int], int | NestedStats]"

#: A scalar fill value: a number, a numpy scalar, or a 0-d :class:`accelrt.Array`.
ScalarLike = Union[complex, "np.generic[object]", "Array"]


class CudaStreamProtocol(Protocol):
    """A foreign stream exposing ``__cuda_stream__`` (CuPy, PyTorch, cuda.core)."""

    def __cuda_stream__(self) -> tuple[int, int]: ...
