"""Allocation history of the caching allocator: the trace ring buffer and stack frames.

PyTorch's ``_record_memory_history``: while enabled, every allocator action appends a trace
entry (``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``, ...) to a ring
buffer of ``max_entries`` (of one entry with ``enabled="state"``, as in PyTorch), and
allocations keep the Python stack that made them.

Stacks follow PyTorch's record-context levels: ``context="state"`` keeps stacks on live blocks
only (trace entries carry none); ``"alloc"`` also puts the allocating stack on trace entries
(a free entry carries its block's allocation stack); ``"all"`` records the stack of the call
that frees (``free_requested``, a direct ``free_completed``, and the ``segment_free`` /
``segment_unmap`` of the call that released the segment, such as ``empty_cache()``).
Recorded stacks start at the user's frames: accelrt's own frames are left out, as PyTorch
leaves out its internals.
:class:`History` is the recorder a :class:`~accelrt.memory._allocator.DeviceCachingAllocator`
holds while recording is on; its hot paths test that attribute against ``None``.

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._allocator import DeviceCachingAllocator
    >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
    >>> a.record_history("all", max_entries=10)
    >>> a.free(a.malloc(512, 0))
    >>> [e["action"] for e in a.trace_entries()][-2:]
    ['free_requested', 'free_completed']
    >>> a.record_history(None); a.empty_cache()
"""

from __future__ import annotations

import collections
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["CTX_ALL", "CTX_ALLOC", "CTX_LEVELS", "CTX_NEVER", "CTX_STATE", "TRACE_ACTIONS",
           "History", "capture_frames", "check_history_args"]

#: Every trace action (``skip_actions`` must name only these).
TRACE_ACTIONS = frozenset({
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "snapshot", "oom", "annotate"})
# record-context levels (PyTorch's RecordContext)
CTX_NEVER, CTX_STATE, CTX_ALLOC, CTX_ALL = 0, 1, 2, 3
CTX_LEVELS = {None: CTX_NEVER, "state": CTX_STATE, "alloc": CTX_ALLOC, "all": CTX_ALL}

#: accelrt's package directory: frames of files under it are left out of recorded stacks.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: co_filename -> True for accelrt's own files (a cache of the prefix test).
_internal: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    hit = _internal.get(filename)
    if hit is None:
        hit = _internal[filename] = os.path.abspath(filename).startswith(_PACKAGE)
    return hit


def capture_frames() -> list[dict[str, Any]]:
    """Python frames of the caller (innermost first), leaving out accelrt's own frames, so a
    stack starts at the user's code that called into accelrt.

    Example::

        >>> from accelrt.memory._history import capture_frames
        >>> capture_frames()[0]["name"]
        '<module>'
    """
    out = []
    internal = _internal
    f: Any = sys._getframe(1)
    while f is not None:
        code = f.f_code
        fn = code.co_filename
        hit = internal.get(fn)
        if hit is None:
            hit = _is_internal(fn)
        if not hit:
            out.append({"filename": fn, "line": f.f_lineno, "name": code.co_name})
        f = f.f_back
    return out


def check_history_args(enabled: str | bool | None, context: str | None, stacks: str,
                       max_entries: int, skip_actions: Iterable[str] | None
                       ) -> tuple[str | None, frozenset[str]]:
    """Validate :meth:`~accelrt.memory._allocator.DeviceCachingAllocator.record_history`'s
    arguments; return ``enabled`` as ``None``, ``"state"`` or ``"all"`` and the actions to skip.

    Raises:
        ValueError: an unknown value.
        TypeError: ``max_entries`` is not an int.

    Example::

        >>> from accelrt.memory._history import check_history_args
        >>> check_history_args(True, "all", "python", 10, None)
        ('all', frozenset())
    """
    if enabled is True:
        enabled = "all"
    elif enabled is False:
        enabled = None
    if enabled not in (None, "state", "all"):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    if context not in CTX_LEVELS:
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    if not isinstance(max_entries, int) or isinstance(max_entries, bool):
        raise TypeError(f"max_entries must be an int, got {type(max_entries).__name__}")
    if max_entries < 1:
        raise ValueError(f"max_entries must be >= 1, got {max_entries}")
    skip = frozenset(skip_actions or ())
    unknown = skip - TRACE_ACTIONS
    if unknown:
        raise ValueError(f"unknown trace actions in skip_actions: {sorted(unknown)}; "
                         f"known: {sorted(TRACE_ACTIONS)}")
    return enabled, skip


class History:
    """The history recorder of one allocator: the trace ring buffer and the stack level.

    The allocator holds one while recording is on (``None`` otherwise, so that its hot paths
    test one attribute against ``None``); guarded by the allocator's lock.

    Attributes:
        context: the stack gathering level (:data:`CTX_NEVER` .. :data:`CTX_ALL`).
        trace: the ring buffer of trace entries (a ``deque`` with ``maxlen``).
        skip_actions: trace actions not recorded.

    Example::

        >>> from accelrt.memory._history import CTX_ALL, History
        >>> h = History(CTX_ALL, 2, frozenset())
        >>> for n in (1, 2, 3):
        ...     h.record("alloc", 0x1000, n, 0, None)
        >>> [e["size"] for e in h.trace]
        [2, 3]
    """

    __slots__ = ("context", "skip_actions", "trace")

    def __init__(self, context: int, max_entries: int, skip_actions: frozenset[str]) -> None:
        self.context = context
        self.trace: collections.deque[dict[str, Any]] = collections.deque(maxlen=max_entries)
        self.skip_actions = skip_actions

    def configure(self, context: int, max_entries: int, skip_actions: frozenset[str],
                  clear: bool) -> None:
        """Apply new settings, keeping the entries (unless ``clear``) that fit."""
        self.context = context
        self.skip_actions = skip_actions
        if clear:
            self.trace.clear()
        if self.trace.maxlen != max_entries:
            self.trace = collections.deque(self.trace, maxlen=max_entries)

    def record(self, action: str, addr: int, size: int, stream: int,
               frames: list[dict[str, Any]] | None, device_free: int | None = None) -> None:
        """Append a trace entry (frames only from ``context="alloc"`` up, as in PyTorch)."""
        if action in self.skip_actions:
            return
        if self.context < CTX_ALLOC:
            frames = None
        entry: dict[str, Any] = {"action": action}
        if device_free is not None:
            entry["device_free"] = device_free
        else:
            entry["addr"] = addr
        entry["size"] = size
        entry["stream"] = stream
        entry["time_us"] = time.time_ns() // 1000
        entry["compile_context"] = "N/A"
        entry["user_metadata"] = ""
        entry["frames"] = list(frames) if frames else []
        self.trace.append(entry)

    def annotate(self, metadata: dict[str, Any]) -> None:
        """Append an ``annotate`` entry carrying ``metadata`` as its user_metadata."""
        if "annotate" not in self.skip_actions:
            self.record("annotate", 0, 0, 0, None)
            self.trace[-1]["user_metadata"] = dict(metadata)
