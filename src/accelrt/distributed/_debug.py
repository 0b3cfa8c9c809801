"""The debug level (``torch.distributed``'s ``get_debug_level``/``set_debug_level``): at
``DETAIL`` every collective's arguments are compared across the ranks of its group.

Example::

    >>> import accelrt.distributed as dist
    >>> dist.get_debug_level() in list(dist.DebugLevel)
    True
"""

from __future__ import annotations



from ._group import DebugLevel


def get_debug_level() -> DebugLevel:
    """The debug level: :class:`DebugLevel` ``OFF``, ``INFO`` or ``DETAIL`` (from
    :func:`set_debug_level`, or the environment, read at :func:`init_process_group`).

    Example::

        >>> import accelrt.distributed as dist
        >>> dist.get_debug_level() in list(dist.DebugLevel)
        True
    """
    from ._group import LEVEL   # (read at the call: set_level rebinds it)
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
    from ._group import debug_level, set_level
    set_level(DebugLevel[debug_level()], False)
