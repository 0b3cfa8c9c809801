"""Type aliases shared across accelrt."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Union

if TYPE_CHECKING:
    from ._device import device

#: What every ``device`` argument accepts: an index on the current accelerator, a string such
#: as ``"cpu:1"``, an :class:`accelrt.device`, or ``None`` for the current device.
DeviceLike = Union["device", int, str, None]


class CudaStreamProtocol(Protocol):
    """A foreign stream exposing ``__cuda_stream__`` (CuPy, PyTorch, cuda.core)."""

    def __cuda_stream__(self) -> tuple[int, int]: ...
