"""A cpu backend the core must treat like GPU memory, recording its pinned host blocks, its
copies and its live events (shared by the array-staging and collectives tests)."""

from __future__ import annotations

import dataclasses

from accelrt.backends import Capabilities, DevicePtr, EventHandle, StreamHandle  # noqa: F401
from accelrt.backends.cpu import CpuBackend

__all__ = ["RecordingNoHostCpu"]


class RecordingNoHostCpu(CpuBackend):
    """cpu devices with ``host_accessible() == False`` that record pinned blocks (``pinned``),
    copies (``copies``: ``(kind, dst, src)``) and the number of live events."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.pinned: set[int] = set()
        self.copies: list[tuple[str, int, int]] = []
        self.live_events = 0

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), host_accessible=False)

    def host_malloc(self, size: int) -> int:
        ptr = super().host_malloc(size)
        if ptr:
            self.pinned.add(ptr)
        return ptr

    def host_free(self, ptr: int) -> None:
        super().host_free(ptr)      # an unknown pointer raises the backend's mapped error
        self.pinned.discard(ptr)

    def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
               stream: StreamHandle) -> None:
        self.copies.append((kind, dst, src))
        super().memcpy(index, dst, src, nbytes, kind, stream)

    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        self.live_events += 1
        return super().event_create(index, enable_timing, blocking, interprocess)

    def event_destroy(self, index: int, event: EventHandle) -> None:
        self.live_events -= 1
        super().event_destroy(index, event)
