"""The cpu-only part of ``accelrt.cpu`` (the rest is the runtime every device module has): the
memory budget of a simulated device. ``scripts/gen_device_modules.py`` binds it in the
generated ``accelrt/cpu.py``.

Example::

    >>> import accelrt as acc
    >>> acc.cpu.memory_limit is memory_limit
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._registry import device_module

if TYPE_CHECKING:
    from .._typing import DeviceLike

__all__ = ["memory_limit"]


def memory_limit(device: DeviceLike = None, /) -> int:
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
    return int(device_module("cpu").get_device_properties(device)["total_memory"])
