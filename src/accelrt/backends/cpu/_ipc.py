"""Interprocess events of the cpu backend: record/complete counters in POSIX shared memory.

An event made with ``interprocess=True`` keeps three ``uint64`` words in a
:class:`~accelrt.backends.cpu._memory.SharedSegment`: the generation of its last record, the
highest generation whose work completed, and the process id of the last recorder. A record
bumps the record generation and queues the completion write on its stream (at once on
synchronous streams); another process that opened the handle is complete once the completed
generation reaches the record generation it read. Waiting polls with a short back-off and
fails, instead of hanging, when the recording process has exited without completing.

Example::

    >>> from accelrt.backends.cpu._ipc import IpcEventState
    >>> ev = IpcEventState.create()
    >>> gen = ev.begin_record(); ev.query()
    False
    >>> ev.complete(gen); ev.query()
    True
    >>> other = IpcEventState.open(ev.handle()); other.query()
    True
    >>> other.close(); ev.close()
"""

from __future__ import annotations

import ctypes
import os
import time
from functools import partial
from typing import TYPE_CHECKING

from ..._errors import DeviceError, type_shown
from ._memory import SharedSegment, open_shared

if TYPE_CHECKING:
    from ._streams import CpuStream

__all__ = ["IpcEventState"]

_MAGIC = b"ACCPUEVT"
_SIZE = 64
_POLL_MIN, _POLL_MAX = 2e-5, 2e-3


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


class IpcEventState:
    """The shared words of one interprocess event (made here or opened from a handle)."""

    __slots__ = ("completed", "pid", "recorded", "seg")

    def __init__(self, seg: SharedSegment) -> None:
        self.seg = seg
        self.recorded = ctypes.c_uint64.from_address(seg.base)
        self.completed = ctypes.c_uint64.from_address(seg.base + 8)
        self.pid = ctypes.c_uint64.from_address(seg.base + 16)

    @classmethod
    def create(cls) -> IpcEventState:
        """A new, never recorded event (complete, as CUDA's)."""
        seg = SharedSegment.create(_SIZE)
        if seg is None:
            raise DeviceError("cpu: out of memory creating the shared memory of an "
                              "interprocess event")
        return cls(seg)

    @classmethod
    def open(cls, handle: bytes) -> IpcEventState:
        """Open another process's event from :meth:`handle`.

        Raises:
            TypeError: ``handle`` is not bytes.
            ValueError: it is not a cpu event handle, or its event no longer exists.
        """
        if not isinstance(handle, (bytes, bytearray)):
            raise TypeError(f"an IPC event handle is the bytes from event_ipc_handle(), got "
                            f"{type_shown(handle)}")
        if bytes(handle[:8]) != _MAGIC:
            raise ValueError(f"not a cpu interprocess event handle ({len(handle)} bytes); pass "
                             "the bytes of Event.ipc_handle() from an event made with "
                             "interprocess=True")
        try:
            seg = open_shared(bytes(handle[8:]))
        except ValueError as exc:
            raise ValueError(f"cannot open the interprocess event: {exc}") from None
        if seg.size != _SIZE:
            seg.close()
            raise ValueError("not a cpu interprocess event handle: it names shared memory of "
                             "another kind")
        return cls(seg)

    def handle(self) -> bytes:
        """Bytes for :meth:`open` in another process (only in the creating process)."""
        return _MAGIC + self.seg.handle()

    def begin_record(self) -> int:
        """Start a record; return its generation (complete it with :meth:`complete`)."""
        gen = int(self.recorded.value) + 1
        self.pid.value = os.getpid()
        self.recorded.value = gen
        return gen

    def complete(self, gen: int) -> None:
        """Mark the work before record ``gen`` done."""
        if self.completed.value < gen:
            self.completed.value = gen

    def record_on(self, s: CpuStream, async_streams: bool) -> None:
        """Record the event at the end of stream ``s``: completed when its work before now
        is (at once with synchronous streams)."""
        gen = self.begin_record()
        if async_streams:
            s.submit(partial(self.complete, gen))
        else:
            self.complete(gen)

    def wait_on(self, s: CpuStream, async_streams: bool) -> None:
        """Make later work of stream ``s`` wait for the last record (with synchronous
        streams: wait now)."""
        gen = self.target()
        if self.completed.value >= gen:
            return
        if async_streams:
            s.submit(partial(self.wait, gen))
        else:
            self.wait(gen)

    def query(self) -> bool:
        """True if the work before the last record completed."""
        return bool(self.completed.value >= self.recorded.value)

    def target(self) -> int:
        """The generation a wait issued now must reach."""
        return int(self.recorded.value)

    def wait(self, gen: int) -> None:
        """Block until record ``gen`` completed.

        Raises:
            DeviceError: the recording process exited before completing it.
        """
        delay = _POLL_MIN
        while self.completed.value < gen:
            pid = int(self.pid.value)
            if pid and pid != os.getpid() and not _alive(pid):
                if self.completed.value >= gen:
                    return
                raise DeviceError(f"cpu: the process {pid} that recorded this interprocess "
                                  "event exited before the recorded work completed; the data "
                                  "it was producing will never be ready")
            time.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)

    def close(self) -> None:
        """Unmap the words (the owner's event is then gone for new openers). Only call it
        when nothing can use this state any more; collection calls it."""
        self.seg.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - never raise from a finaliser
            pass
