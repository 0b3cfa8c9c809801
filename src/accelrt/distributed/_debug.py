"""The debug level (``torch.distributed``'s ``get_debug_level``/``set_debug_level``): at
``DETAIL`` every collective's arguments are compared across the ranks of its group.

Example::

    >>> import accelrt.distributed as dist
    >>> dist.get_debug_level() in list(dist.DebugLevel)
    True
"""

from __future__ import annotations

import enum
import os

__all__ = ["DebugLevel", "get_debug_level", "set_debug_level", "set_debug_level_from_env"]


class DebugLevel(enum.IntEnum):
    """``torch.distributed.DebugLevel``: ``OFF``, ``INFO`` (as ``OFF`` here: accelrt logs no
    more at INFO) and ``DETAIL`` (every collective's arguments are compared across the ranks
    of its group before it runs; see :meth:`ProcessGroup.fingerprint`).

    Example::

        >>> from accelrt.distributed import DebugLevel
        >>> DebugLevel.DETAIL, int(DebugLevel.DETAIL)
        (<DebugLevel.DETAIL: 2>, 2)
    """

    OFF = 0
    INFO = 1
    DETAIL = 2

    def __str__(self) -> str:
        return f"DebugLevel.{self.name}"


#: the environment variables of the debug level, accelrt's first, then torch's
DEBUG_ENV = ("ACCELRT_DISTRIBUTED_DEBUG", "TORCH_DISTRIBUTED_DEBUG")


def debug_level() -> str:
    """The debug level the environment names (``ACCELRT_DISTRIBUTED_DEBUG``, else torch's
    ``TORCH_DISTRIBUTED_DEBUG``): ``OFF`` (neither set), ``INFO`` or ``DETAIL``.

    Raises:
        ValueError: another value (torch's message).
    """
    for var in DEBUG_ENV:
        value = os.environ.get(var)
        if value is not None:
            level = value.strip().upper()
            if level not in DebugLevel.__members__:
                raise ValueError(f"The value of {var} must be OFF, INFO, or DETAIL.")
            return level
    return "OFF"


def get_debug_level() -> DebugLevel:
    """The debug level: :class:`DebugLevel` ``OFF``, ``INFO`` or ``DETAIL`` (from
    :func:`set_debug_level`, or the environment, read at :func:`init_process_group`).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.get_debug_level() in list(dist.DebugLevel)
        True
    """
    from ._group import LEVEL  # (read at the call: set_level rebinds it)
    return LEVEL


def set_debug_level(level: DebugLevel) -> None:
    """Make ``level`` (a :class:`DebugLevel`) the debug level, at once and over the
    environment. ``DETAIL`` makes every rank compare each collective's arguments (operation,
    sequence number, dtype, shape, root, reduction) with every other rank of the group before
    running it, raising :class:`DistError` naming the odd ranks on all of them: torch's
    collective fingerprint check. Every rank must use the same level.

    Raises:
        TypeError: ``level`` is not a :class:`DebugLevel`.

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.set_debug_level(dist.DebugLevel.DETAIL); dist.get_debug_level()
        <DebugLevel.DETAIL: 2>
        >>> dist.set_debug_level(dist.DebugLevel.OFF)
    """
    if not isinstance(level, DebugLevel):
        raise TypeError(f"set_debug_level() takes a DebugLevel (DebugLevel.OFF, .INFO or "
                        f".DETAIL), got {level!r}")
    from ._group import set_level
    set_level(level, True)


def set_debug_level_from_env() -> None:
    """Set the debug level from ``ACCELRT_DISTRIBUTED_DEBUG``, else torch's
    ``TORCH_DISTRIBUTED_DEBUG`` (``OFF``, ``INFO`` or ``DETAIL``; neither: ``OFF``).

    Raises:
        ValueError: another value ("The value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO,
            or DETAIL.").

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.set_debug_level_from_env()
    """
    from ._group import set_level
    set_level(DebugLevel[debug_level()], False)
