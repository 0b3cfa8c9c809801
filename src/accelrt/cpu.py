"""``accelrt.cpu``: the device-agnostic API bound to the cpu backend, plus its settings.

The cpu backend simulates accelerator devices in host memory. Every function here takes an
``int`` device as a *cpu* index, whatever the current accelerator is, so ``acc.cpu`` works next
to ``acc.cuda`` in one process.

Settings (read when the backend is first used):

``ACCELRT_CPU_DEVICES``
    number of simulated devices, an integer >= 1 (default ``1``).
``ACCELRT_CPU_MEMORY``
    memory budget of *each* device: a byte count or a number with a unit, e.g. ``8GiB``,
    ``512MiB``, ``1.5GB`` (default: the physical memory). :func:`memory_limit` reports it; the
    caching allocator raises :class:`accelrt.OutOfMemoryError` beyond it.
``ACCELRT_CPU_STREAMS``
    ``sync`` (work runs at submission) or ``async`` (each stream has a worker thread).

Example::

    >>> import accelrt as acc
    >>> acc.cpu.is_available(), acc.cpu.device_count() >= 1
    (True, True)
    >>> with acc.cpu.Stream() as s:
    ...     acc.cpu.current_stream() == s
    True
    >>> acc.cpu.memory_limit() > 0
    True
"""

from __future__ import annotations

from typing import Any

from ._specific import export_bound

_bound = export_bound("cpu", globals())


def memory_limit(device: Any = None, /) -> int:
    """The memory budget in bytes of a simulated cpu device (``ACCELRT_CPU_MEMORY``).

    Args:
        device: a cpu index, device or string (the current cpu device by default).

    Raises:
        ValueError: ``device`` is not a cpu device.
        IndexError: the index is out of range.

    Example::

        >>> import accelrt as acc
        >>> acc.cpu.memory_limit(0) == acc.cpu.get_device_properties(0)["total_memory"]
        True
    """
    return int(get_device_properties(device)["total_memory"])  # type: ignore[name-defined]  # noqa: F821


__all__ = sorted([*_bound, "memory_limit"])  # noqa: PLE0605 - names made by export_bound
