"""A teardown check for tests: did a block of code leave caching-allocator memory, streams,
events or graphs alive?

:func:`leak_check` wraps a block (a test body); :func:`snapshot` and :func:`find_leaks` are its
two halves, for a test framework's setup and teardown (accelrt's own suite runs them around
every test from an autouse fixture in ``tests/conftest.py``; a test that leaks on purpose opts
out with ``@pytest.mark.leaks_ok("reason")``).

What counts, per backend instance and per caching allocator:

- **memory**: ``memory_allocated()`` of every caching allocator must be back to what it was
  (blocks freed stream-ordered count as freed at once, as in PyTorch);
- **streams, events, graphs**: the backend's live handles (``Backend.live_handles()``, which
  the cpu and OpenCL backends provide; other backends are not checked) less those accelrt keeps
  for itself (the per-device stream pools, the shared side stream of :class:`accelrt.graph`,
  the caching allocator's and the pinned host pool's events for stream-ordered frees) must not
  have grown.

Not counted: device memory allocated outside the caching allocators (a backend's raw
``malloc``, the uncached requests of ``caching_allocator_enable(False)``, which PyTorch keeps
out of the statistics too) and host memory; where a backend's ``get_memory_info`` is its own
bookkeeping (cpu, OpenCL), compare its free memory before and after for those.

The check is cheap when nothing leaked (a few counters are read); only when a count grew does
it collect garbage (objects in reference cycles, frees queued by finalizers) and look again,
so a test that drops its last reference in a cycle is not blamed.

Example::

    >>> import accelrt as acc
    >>> from accelrt.testing import leak_check
    >>> with leak_check():
    ...     with acc.zeros(16, device="cpu:0") as a:
    ...         _ = a.fill_(1.0)
    >>> kept = []
    >>> try:
    ...     with leak_check():
    ...         kept.append(acc.Event("cpu:0"))
    ...         kept[0].record()
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[1])
      cpu: 1 event(s) made inside are still alive (close them with close(), or drop every reference)
    >>> kept[0].close()
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._backend import Backend

__all__ = ["Snapshot", "find_leaks", "leak_check", "snapshot"]

_KINDS = (("streams", "stream(s)"), ("events", "event(s)"), ("graphs", "graph(s)"))


@dataclass(frozen=True)
class Snapshot:
    """What :func:`snapshot` read: bytes allocated per caching allocator, and handles held
    outside accelrt's own caches per backend instance."""

    #: id(allocator) -> (allocator, its name "cpu:0", bytes allocated)
    allocated: dict[int, tuple[Any, str, int]] = field(default_factory=dict)
    #: id(backend) -> (backend, {"streams": n, "events": n, "graphs": n})
    handles: dict[int, tuple[Any, dict[str, int]]] = field(default_factory=dict)


def _backends() -> list[Backend]:
    from .. import _backend
    with _backend._lock:   # a closed instance holds no handles (and answers no count)
        return [b for b in _backend._instances.values() if not b.closed]


def _internal_streams(backends: list[Backend]) -> dict[int, int]:
    """Live stream handles that accelrt holds itself (the per-device stream pools' free
    handles, the shared side streams of :class:`accelrt.graph`), by ``id`` of their backend:
    one pass over the side streams for every backend."""
    from .. import _graph, _stream
    out: dict[int, int] = {}
    for b in backends:
        n = 0
        per = _stream._pools.get(b)
        if per is not None:
            for pool in list(per.values()):
                for free in list(pool.free.values()):
                    n += len(free)
        out[id(b)] = n
    for s in list(_graph.graph._default_streams.values()):
        if s._free is not None and id(s._b) in out:
            out[id(s._b)] += 1
    return out


def _internal_events(allocators: list[Any], backends: list[Backend]) -> dict[int, int]:
    """Live event handles that accelrt holds itself (stream-ordered frees), by ``id`` of their
    backend: one pass over the allocators and one over the host pools for every backend (a
    session of tests makes hundreds of backends and allocators)."""
    from ..memory._host import host_allocators, peek_host_allocator
    out: dict[int, int] = {}
    for a in allocators:
        b = getattr(a, "_b", None)
        frees = getattr(a, "_stream_frees", None)
        if b is not None and frees is not None:
            n = sum(len(pool) for pool in list(frees.event_pools.values()))
            if frees.events:
                n += sum(len(q) for q in list(frees.events.values()))
            out[id(b)] = out.get(id(b), 0) + n
    live = {id(b) for b in backends}
    for pool in host_allocators():
        b = pool._b
        if id(b) in live and pool._pending and peek_host_allocator(b.name) is pool:
            out[id(b)] = out.get(id(b), 0) + sum(len(block.events)
                                                 for block in list(pool._pending))
    return out


def snapshot() -> Snapshot:
    """Read the counters :func:`find_leaks` compares (cheap: no garbage collection).

    Example::

        >>> from accelrt.testing import snapshot
        >>> isinstance(snapshot().allocated, dict)
        True
    """
    from ..memory._allocator import all_allocators
    snap = Snapshot()
    allocators = list(all_allocators())
    for a in allocators:
        try:
            allocated = a.memory_allocated()
        except RuntimeError:   # a pluggable allocator (user callables) keeps no statistics
            continue
        snap.allocated[id(a)] = (a, f"{a._b.name}:{a._index}", allocated)
    live_backends = _backends()
    events = _internal_events(allocators, live_backends)
    streams = _internal_streams(live_backends)
    for b in live_backends:
        live = b.live_handles()
        if live is None:
            continue
        counts = dict(live)
        counts["streams"] -= streams[id(b)]
        counts["events"] -= events.get(id(b), 0)
        snap.handles[id(b)] = (b, counts)
    return snap


def _compare(before: Snapshot, after: Snapshot) -> list[str]:
    problems = []
    for key, (_, name, now) in after.allocated.items():
        was = before.allocated[key][2] if key in before.allocated else 0
        if now > was:
            problems.append(f"  {name}: {now - was} byte(s) allocated inside are still "
                            f"allocated by the caching allocator ({was} before, {now} after): "
                            "close the arrays (close()), or drop every reference")
    for key, (b, counts) in after.handles.items():
        old = before.handles[key][1] if key in before.handles else {}
        for kind, words in _KINDS:
            grown = counts.get(kind, 0) - old.get(kind, 0)
            if grown > 0:
                problems.append(f"  {b.name}: {grown} {words} made inside are still alive "
                                "(close them with close(), or drop every reference)")
    return problems


def find_leaks(before: Snapshot) -> list[str]:
    """What leaked since ``before`` (one line each; empty when nothing did).

    Only if a counter grew, garbage is collected and queued frees are completed before
    another look: first the young generations (a test's own cycles, such as an exception's
    traceback holding its arrays, are young, and a full collection of a large process costs
    a quarter of a second), then all of it, then, if that still shows a leak, after waiting
    for the work queued on the devices, since a host function still queued may hold the last
    reference. So unreachable cycles, finalizers and queued work do not count as leaks.

    Example::

        >>> from accelrt.testing import find_leaks, snapshot
        >>> before = snapshot()
        >>> find_leaks(before)
        []
    """
    problems = _compare(before, snapshot())
    if problems:   # the test's own cycles (an exception's traceback) are young: a cheap look
        _settle(1)
        problems = _compare(before, snapshot())
    if problems:
        _settle(2)
        problems = _compare(before, snapshot())
    if problems:   # work still queued may hold the last references (host functions)
        _synchronize_all()
        _settle(2)
        problems = _compare(before, snapshot())
    return problems


def _settle(generation: int) -> None:
    """Collect garbage up to ``generation`` (2: all of it) and complete the frees finalizers
    queued."""
    from ..memory._allocator import DeviceCachingAllocator, all_allocators
    gc.collect(generation)
    for a in all_allocators():
        if isinstance(a, DeviceCachingAllocator):
            a.drain_pending()


def _synchronize_all() -> None:
    """Wait for the work queued on every initialised device of the checked backends."""
    from .._device import _is_initialized
    for b in _backends():
        if b.live_handles() is None:
            continue
        for i in range(b.device_count()):
            if _is_initialized(b, i):
                try:
                    b.synchronize(i)
                except Exception:  # noqa: BLE001, S110 - an error the work kept is the
                    pass           # test's business; only the counts matter here


@contextmanager
def leak_check() -> Iterator[None]:
    """Fail (``AssertionError``) if the block leaves caching-allocator memory, streams, events
    or graphs alive that it made; see the module docstring for what counts.

    Nothing is checked when the block raises (its error is what matters).

    Example::

        >>> import accelrt as acc
        >>> from accelrt.testing import leak_check
        >>> with leak_check():
        ...     s = acc.Stream("cpu:0")
        ...     s.close()
    """
    before = snapshot()
    yield
    problems = find_leaks(before)
    if problems:
        raise AssertionError("leak check: the block left alive what it made:\n"
                             + "\n".join(problems))
