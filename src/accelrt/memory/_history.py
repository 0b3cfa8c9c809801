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
:class:`HistoryMixin` holds the methods of :class:`~accelrt.memory._allocator.DeviceCachingAllocator`
that do this; the allocator checks its ``_history``/``_ctx`` flags inline on the hot path.

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._lock import FastLock

__all__ = ["CTX_ALL", "CTX_ALLOC", "CTX_LEVELS", "CTX_NEVER", "CTX_STATE", "TRACE_ACTIONS",
           "HistoryMixin", "capture_frames"]

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


class HistoryMixin:
    """History recording methods of the caching allocator (guarded by its ``_lock``).

    Uses the allocator's ``_history`` (trace entries are recorded), ``_ctx`` (stack gathering
    level), ``_trace`` (the ring buffer) and ``_skip_actions``.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> a.trace_entries()
        []
    """

    _lock: FastLock
    _history: bool
    _ctx: int
    _trace: collections.deque[dict[str, Any]]
    _skip_actions: frozenset[str]

    def _update_simple(self) -> None:  # pragma: no cover - provided by the allocator
        raise NotImplementedError

    def _record(self, action: str, addr: int, size: int, stream: int,
                frames: list[dict[str, Any]] | None, device_free: int | None = None) -> None:
        if action in self._skip_actions:
            return
        if self._ctx < CTX_ALLOC:
            frames = None   # PyTorch: trace entries carry stacks from context="alloc" up
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
        self._trace.append(entry)

    def trace_entries(self) -> list[dict[str, Any]]:
        """The recorded history, oldest first (copies)."""
        with self._lock:
            return [dict(e) for e in self._trace]

    def record_history(self, enabled: str | bool | None, context: str | None = "all",
                       stacks: str = "all", max_entries: int = sys.maxsize,
                       clear_history: bool = False,
                       skip_actions: Iterable[str] | None = None) -> None:
        """Start or stop recording allocation history (PyTorch's ``_record_memory_history``).

        Args:
            enabled: ``None``/``False`` stop (and clear the trace), ``"state"`` keeps the
                stacks of live allocations and, as PyTorch, a trace buffer of one entry (the
                latest action); ``"all"``/``True`` keeps a trace of ``max_entries``.
            context: ``None``, ``"state"``, ``"alloc"`` or ``"all"``: which stacks to gather.
            stacks: ``"python"`` or ``"all"`` (only Python frames exist here).
            max_entries: trace ring-buffer length.
            clear_history: drop the entries recorded so far.
            skip_actions: trace actions not to record.

        Raises:
            ValueError: an unknown value.
            TypeError: ``max_entries`` is not an int.

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> a.record_history("all", max_entries=100)
            >>> a.free(a.malloc(100, 0))
            >>> [e["action"] for e in a.trace_entries()][-2:]
            ['free_requested', 'free_completed']
            >>> a.record_history(None)
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
        with self._lock:
            if enabled is None:
                self._history = False
                self._ctx = CTX_NEVER
                self._trace.clear()
                self._update_simple()
                return
            self._ctx = CTX_LEVELS[context]
            # PyTorch records the trace for "state" too, in a buffer of one entry
            self._history = True
            if enabled != "all":
                max_entries = 1
            self._skip_actions = skip
            if clear_history:
                self._trace.clear()
            if self._trace.maxlen != max_entries:
                self._trace = collections.deque(self._trace, maxlen=max_entries)
            self._update_simple()

    def record_annotation(self, metadata: dict[str, Any]) -> None:
        """Append an ``annotate`` trace entry carrying ``metadata`` as user_metadata."""
        with self._lock:
            if self._history and "annotate" not in self._skip_actions:
                self._record("annotate", 0, 0, 0, None)
                self._trace[-1]["user_metadata"] = dict(metadata)
