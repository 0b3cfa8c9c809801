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
from dataclasses import dataclass
from typing import Any

import numpy as np

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


# ---------------------------------------------------------------- the mismatch message
#: the last item of a gathered fingerprint: the arrays' device type
_DEVICE = "device"

#: torch's OpType of accelrt's collectives (c10d's ``OpType``, as ProcessGroupWrapper names
#: them); the object collectives keep their own names, upper-cased
_OPTYPE = {
    "all_reduce": "ALLREDUCE", "broadcast": "BROADCAST", "reduce": "REDUCE",
    "all_gather": "ALLGATHER", "all_gather_into_tensor": "_ALLGATHER_BASE",
    "reduce_scatter": "REDUCE_SCATTER", "reduce_scatter_tensor": "_REDUCE_SCATTER_BASE",
    "gather": "GATHER", "gather_single": "GATHER", "scatter": "SCATTER",
    "all_to_all": "ALLTOALL", "all_to_all_single": "ALLTOALL_BASE", "barrier": "BARRIER",
    "all_reduce_coalesced": "ALLREDUCE_COALESCED",
    "all_gather_coalesced": "ALLGATHER_COALESCED",
}

#: c10d's ScalarType names (torch's error messages print these: Float, Long, ...)
_SCALAR = {
    "bool": "Bool", "int8": "Char", "uint8": "Byte", "int16": "Short", "uint16": "UInt16",
    "int32": "Int", "uint32": "UInt32", "int64": "Long", "uint64": "UInt64",
    "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double",
    "complex64": "ComplexFloat", "complex128": "ComplexDouble",
}


def _listed(x: Any) -> str:
    """A shape (or a coalesced collective's tuple of shapes or sizes) as torch prints one:
    ``[20, 10]``."""
    if isinstance(x, tuple):
        return "[" + ", ".join(_listed(e) for e in x) + "]"
    return str(int(x)) if isinstance(x, (int, np.integer)) else str(x)


def _parts(d: Any) -> dict[str, str]:
    """A gathered fingerprint as torch's CollectiveFingerPrint fields (SequenceNumber,
    OpType, TensorShape, TensorDtypes, TensorDeviceTypes), plus the root and reduce op
    accelrt also compares."""
    if not isinstance(d, tuple) or len(d) < 2:
        return {"Fingerprint": repr(d)}
    op, seq, *rest = d
    out = {"SequenceNumber": str(seq), "OpType": _OPTYPE.get(str(op), str(op).upper())}
    device = None
    for x in rest:
        if isinstance(x, tuple) and len(x) == 2 and x[0] == _DEVICE:
            device = x[1]
        elif isinstance(x, tuple):
            out.setdefault("TensorShape", _listed(x))
        elif isinstance(x, (bool, int, np.integer)):
            out["Root"] = str(int(x))
        elif isinstance(x, str):
            out["ReduceOp"] = x
        elif x is not None:
            try:
                name = np.dtype(x).name
            except TypeError:
                name = str(x)
            out.setdefault("TensorDtypes", _SCALAR.get(name, name))
    if device is not None:
        out["TensorDeviceTypes"] = str(device)
    order = ("SequenceNumber", "OpType", "TensorShape", "TensorDtypes", "TensorDeviceTypes",
             "Root", "ReduceOp")
    return {k: out[k] for k in order if k in out}


def _torch_words(rank: int, mine: Any, other_rank: int, other: Any) -> str:
    """torch's ProcessGroupWrapper message for this rank's fingerprint ``mine`` against
    ``other``, that of the first rank that differs from it."""
    a, b = _parts(mine), _parts(other)

    def fp(p: dict[str, str]) -> str:
        return "CollectiveFingerPrint(" + ", ".join(f"{k}={v}" for k, v in p.items()) + ")"

    names = {"SequenceNumber": "Sequence number", "OpType": "Op type",
             "TensorShape": "Tensor shapes", "TensorDtypes": "Tensor dtypes",
             "TensorDeviceTypes": "Tensor devices", "Root": "Root rank",
             "ReduceOp": "Reduce op"}
    diff = "; ".join(f"{names.get(k, k)}: {a.get(k, '-')} vs {b.get(k, '-')}"
                     for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k))
    return (f"Detected mismatch between collectives on ranks. Rank {rank} is running "
            f"collective: {fp(a)}, but Rank {other_rank} is running collective: {fp(b)}. "
            f"Collectives differ in the following aspects: {diff}")


@dataclass(frozen=True)
class PeerCounts:
    """The last item of an all_to_all's debug fingerprint: the elements this rank sends to
    (``send``) and expects from (``recv``) each group rank (see
    :meth:`ProcessGroup.fingerprint`)."""

    send: tuple[int, ...]
    recv: tuple[int, ...]


def _describe(d: Any) -> str:
    if not isinstance(d, tuple) or len(d) < 2:
        return repr(d)
    op, seq, *rest = d
    return f"{op} #{seq} " + " ".join(str(x) for x in rest
                                      if x is not None and not (isinstance(x, tuple) and
                                                                len(x) == 2 and x[0] == _DEVICE))
