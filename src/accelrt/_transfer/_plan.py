"""Transfer plans: every move of bytes, decided as data before any byte moves.

A :class:`Plan` is a tuple of steps. Each step is a small typed record naming its source,
destination, stream and, where it has one, its staging buffer and what it keeps alive:

* :class:`Copy` - ``nruns`` runs of ``run`` bytes with the backend's ``memcpy`` (``kind``
  ``"h2d"``, ``"d2h"``, ``"d2d"``, ``"h2h"``) or ``memcpy_peer`` (``"peer"``) on ``stream``.
* :class:`HostCopy` - the same runs copied by numpy between host-readable memory, now
  (``stream`` None) or in stream order on ``stream`` (``launch_host_func``).
* :class:`Upload` - a numpy array copied into device memory: ``snapshot`` first copies it to a
  private buffer (pageable memory is read at call time), and ``keep`` is held until the copy
  has run (``non_blocking``) or the stream is synchronized.
* :class:`Stage` - one copy through a pinned block of the backend's host pool
  (:mod:`accelrt._transfer._staging`); if staging does not apply at run time (out of pinned
  memory) the executor runs ``fallback`` instead, else ``then``.
* :class:`Barrier` - future work on ``waiter`` waits for the work queued so far on ``after``.
* :class:`Sync` - wait on the host for ``stream`` (``report``: tell the sync-debug mode, as
  ``Stream.synchronize`` does).
* :class:`Hold` - keep ``keep`` alive until ``stream`` reaches the work queued so far
  (:func:`accelrt._transfer._lifetime.keep_alive`); :class:`RecordHost` - mark a pinned host
  block as used by ``stream`` (PyTorch's ``CachingHostAllocator_recordEvent``);
  :class:`FreeHost` - give a pinned block taken by the planner back to its pool (reused once
  ``stream`` has run the work queued so far).

The planners (:mod:`accelrt._transfer._planners`) make plans; :func:`accelrt._transfer.execute`
runs one. A plan prints as its steps, so tests can assert what a copy will do.

Example::

    >>> import accelrt as acc
    >>> from accelrt._transfer import HOST, Place, plan_runs, execute
    >>> a = acc.full((4,), 2.0, device="cpu:0")
    >>> out = acc.empty((4,), device="cpu:0")
    >>> here = Place.of(a)
    >>> plan = plan_runs(here, out.data_ptr(), here, a.data_ptr(), a.nbytes)
    >>> [type(s).__name__ for s in plan.steps]
    ['Copy']
    >>> execute(plan); out.numpy().tolist()
    [2.0, 2.0, 2.0, 2.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeAlias

import numpy as np

# imported at run time: the compiled build makes the steps' named tuples from these types
from .._backend import Backend
from .._device import _get_device
from .._stream import Stream
from ..memory._host import HostCachingAllocator

__all__ = ["HOST", "Barrier", "Copy", "CopyKind", "FreeHost", "HostCopy", "Hold", "Place", "Plan",
           "RecordHost", "Stage", "Step", "Sync", "Upload"]

CopyKind = Literal["h2d", "d2h", "d2d", "h2h", "peer"]


@dataclass(frozen=True, slots=True)
class Place:
    """Where memory lives: ``backend`` is ``None`` for plain host memory.

    Example::

        >>> import accelrt as acc
        >>> from accelrt._transfer import HOST, Place
        >>> str(Place.of(acc.empty(1, device="cpu:0"))), str(HOST)
        ('cpu:0', 'host')
    """

    backend: Backend | None
    index: int

    @property
    def is_host(self) -> bool:
        return self.backend is None

    def host_readable(self) -> bool:
        """True if the host can read and write this memory at its address."""
        b = self.backend
        return b is None or b.capabilities(self.index).host_accessible

    @staticmethod
    def of(array: Any) -> Place:
        """The place of an accelrt array (or :data:`HOST` for a numpy array)."""
        if isinstance(array, np.ndarray):
            return HOST
        b, index = _get_device(array.device)
        return Place(b, index)

    def __str__(self) -> str:
        b = self.backend
        return "host" if b is None else f"{b.name}:{self.index}"


#: Plain host memory (numpy arrays).
HOST = Place(None, -1)


class Copy(NamedTuple):
    """``nruns`` runs of ``run`` bytes from ``src + k * src_pitch`` to ``dst + k * dst_pitch``
    with one backend call per run on ``stream`` (``kind="peer"``: ``memcpy_peer`` to device
    ``dst_device``)."""

    stream: Stream
    kind: CopyKind
    dst: int
    src: int
    run: int
    nruns: int = 1
    dst_pitch: int = 0
    src_pitch: int = 0
    dst_device: int = -1


class HostCopy(NamedTuple):
    """Runs copied by numpy between host-readable addresses: at once (``stream`` None), or in
    stream order on ``stream``."""

    dst: int
    src: int
    run: int
    nruns: int
    dst_pitch: int
    src_pitch: int
    stream: Stream | None = None


class Upload(NamedTuple):
    """Copy the C-contiguous numpy array ``host`` to ``dst`` on ``stream`` (``kind`` "h2d",
    or "h2h" into borrowed host memory); ``snapshot``: copy ``host`` to a private buffer first;
    then hold ``keep`` (+ the source) until the copy has run, or synchronize when not
    ``non_blocking``."""

    stream: Stream
    kind: CopyKind
    dst: int
    host: np.ndarray
    snapshot: bool
    non_blocking: bool
    keep: tuple[object, ...]


class Stage(NamedTuple):
    """``nbytes`` from ``src`` to ``dst`` through a pinned block of the stream's backend
    (``kind`` "h2d" from host memory, "d2h" to it); ``fallback`` runs when staging does not
    apply at run time, ``then`` after a staged copy."""

    stream: Stream
    kind: Literal["h2d", "d2h"]
    dst: int
    src: int
    nbytes: int
    non_blocking: bool
    fallback: tuple[Step, ...] = ()
    then: tuple[Step, ...] = ()


class Barrier(NamedTuple):
    """Future work on ``waiter`` waits for the work queued so far on ``after``."""

    after: Stream
    waiter: Stream


class Sync(NamedTuple):
    """The host waits for ``stream``; ``report`` tells the sync-debug mode (as
    ``Stream.synchronize``)."""

    stream: Stream
    report: bool = True


class Hold(NamedTuple):
    """Keep ``keep`` alive until ``stream`` reaches the work queued so far (a host callback),
    or wait for the stream when not ``non_blocking``."""

    stream: Stream
    keep: tuple[object, ...]
    non_blocking: bool = True


class RecordHost(NamedTuple):
    """The pinned host block at ``ptr`` of ``pool`` is used by work queued on ``stream``."""

    pool: HostCachingAllocator
    ptr: int
    stream: Stream


class FreeHost(NamedTuple):
    """Give the pinned host block at ``ptr`` back to ``pool``: reusable once ``stream`` has
    run the work queued so far (its event is recorded first, as :class:`RecordHost`), or at
    once (``stream`` None). The block is freed even when recording fails."""

    pool: HostCachingAllocator
    ptr: int
    stream: Stream | None = None


#: One step of a plan.
Step: TypeAlias = Copy | HostCopy | Upload | Stage | Barrier | Sync | Hold | RecordHost | FreeHost


class Plan(NamedTuple):
    """The steps of one transfer, in order, and the staging buffers they use (alive while
    the plan is)."""

    steps: tuple[Step, ...]
    buffers: tuple[object, ...] = ()
