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
leaves out its internals. Which files are accelrt's is decided by where the package really is
(its folder), never by a folder's name; :func:`library_roots` lists, the same way, the folders
of this machine's libraries, which a snapshot carries so that ``accelrt memory viz`` can tell
the user's frames from the libraries' on any machine.
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
import functools
import operator
import importlib.util
import os
import re
import site
import sys
import sysconfig
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import AcceleratorValueError, index_failure, shown, type_shown

if TYPE_CHECKING:
    from ._interface import AllocatorCore

__all__ = ["CTX_ALL", "CTX_ALLOC", "CTX_LEVELS", "CTX_NEVER", "CTX_STATE", "TRACE_ACTIONS",
           "History", "allocation_frames", "annotate_allocation", "binding_int", "capture_frames",
           "check_history_args", "is_library_file", "library_roots", "record_annotation",
           "record_history", "trace_entries"]

#: Every trace action (``skip_actions`` must name only these).
TRACE_ACTIONS = frozenset({
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "snapshot", "oom", "annotate"})
#: One past the largest ``max_entries`` (PyTorch's binding takes a size_t).
_SIZE_T_END = 1 << 64
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


@functools.cache
def library_roots() -> tuple[str, ...]:
    """The folders of this machine's libraries, each ending in a path separator: the Python
    standard library, every ``site-packages`` folder (the environment's, the interpreter's, the
    user's), and the real folders of accelrt and of PyTorch (found, not imported, where
    installed; an editable install is where its source is). Files under them are library code;
    anything else is the user's program. Given as written and with symbolic links resolved.

    Example::

        >>> import os, sysconfig, accelrt
        >>> from accelrt.memory._history import library_roots
        >>> roots = library_roots()
        >>> os.path.dirname(accelrt.__file__) + os.sep in roots
        True
        >>> os.path.join(sysconfig.get_paths()["stdlib"], "") in roots
        True
    """
    found: list[str] = [sysconfig.get_paths().get(k, "")
                        for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    found += getattr(site, "getsitepackages", list)()
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    found.append(_PACKAGE)
    try:
        torch = importlib.util.find_spec("torch")
    except (ImportError, ValueError):       # a broken or half-imported install
        torch = None
    if torch is not None and torch.submodule_search_locations:
        found += list(torch.submodule_search_locations)
    out: set[str] = set()
    for folder in found:
        if folder:
            for form in (os.path.abspath(folder), os.path.realpath(folder)):
                out.add(os.path.join(form, ""))
    return tuple(sorted(out))


#: A path part that holds installed packages, or the standard library's ``lib/python3.11``
#: (``Lib`` under ``Python311`` on Windows).
_SITE_PARTS = frozenset({"site-packages", "dist-packages"})
_PY_DIR = re.compile(r"python\d+(\.\d+)*t?", re.IGNORECASE)


def is_library_file(filename: str, roots: Sequence[str] | None = None) -> bool:
    """Whether a recorded frame's file is library code rather than the user's program.

    Args:
        filename: the frame's file (``co_filename``), as recorded.
        roots: the recording machine's :func:`library_roots` (a snapshot's
            ``library_roots``): the file is library code when it lies under one of them.
            ``None`` (a snapshot from PyTorch or an older accelrt): under one of this
            machine's roots, or in a folder that only installed code is in wherever it was
            recorded (a ``site-packages`` or ``dist-packages`` folder, the standard library's
            ``lib/python3.X``).

    Files that are not Python source (``<frozen runpy>``, C++ frames) count as library code.
    Folder names alone never decide: a project in a folder named ``accelrt`` or ``torch`` is
    the user's.

    Example::

        >>> from accelrt.memory._history import is_library_file
        >>> is_library_file("/u/me/accelrt/train.py"), is_library_file("<frozen runpy>")
        (False, True)
        >>> is_library_file("/venv/lib/python3.11/site-packages/numpy/core.py")
        True
        >>> is_library_file("/opt/lib/x/y.py", roots=["/opt/lib/"])
        True
    """
    if not filename.endswith(".py") or filename.startswith("<"):
        return True
    if roots is not None:
        return filename.startswith(tuple(roots))
    if os.path.abspath(filename).startswith(library_roots()):
        return True
    parts = re.split(r"[\\/]", filename)
    if _SITE_PARTS.intersection(parts):
        return True
    for a, b in zip(parts, parts[1:]):
        if a.lower() in ("lib", "lib64") and _PY_DIR.fullmatch(b):       # lib/python3.11
            return True
        if _PY_DIR.fullmatch(a) and b.lower() == "lib":                 # Python311\Lib
            return True
    return False


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


#: torch 2.15's messages for an unknown string (its C++ ``checkOptionIn``, a RuntimeError)
_TORCH_CHOICE_TEXT = {
    "enabled": "expected state to be 'state', 'all', or None",
    "context": "expected context to be 'state', 'alloc', 'all', or None",
    "stacks": "expected stacks to be 'python', or 'all'",
}


def _check_choice(name: str, value: object, choices: tuple[str | None, ...]) -> None:
    """Raise unless ``value`` is one of ``choices`` (PyTorch's ``_record_memory_history``
    takes these arguments as optional strings): a ``TypeError`` for a value that is neither a
    str nor an allowed None (torch's binding: ``TypeError``), an
    :class:`~accelrt.AcceleratorValueError` (a ``ValueError`` and torch's ``RuntimeError``,
    its message in parentheses) for another string."""
    if (value is None and None in choices) or isinstance(value, str):
        if value in choices:
            return
        raise AcceleratorValueError(f"{name} must be {_spell(choices)}, got {shown(value)} "
                                    f"({_TORCH_CHOICE_TEXT[name]})")
    raise TypeError(f"{name} must be {_spell(choices)}, got {type_shown(value)} "
                    f"{shown(value):.60}")


def _spell(choices: tuple[str | None, ...]) -> str:
    """``(None, "state", "all")`` as ``"None, 'state' or 'all'"``."""
    words = [repr(c) for c in choices]
    return ", ".join(words[:-1]) + " or " + words[-1]


def binding_int(value: object, name: str, lo: int, end: int, ctype: str) -> int:
    """``value`` as torch 2.15's pybind11 binding reads an integer parameter of C type
    ``ctype`` (range ``[lo, end)``): an int, a bool or an object with ``__index__`` (a numpy
    integer) is taken as its value, a float or str is not; a value outside the range, or an
    ``__index__`` that raises, is its ``TypeError`` ("incompatible function arguments").

    Example::

        >>> import numpy as np
        >>> from accelrt.memory._history import binding_int
        >>> binding_int(np.int64(5), "max_entries", 0, 2**64, "a size_t")
        5
    """
    why = ""
    try:
        n = operator.index(value)   # type: ignore[arg-type]
    except Exception as exc:   # noqa: BLE001 - pybind11 clears it and refuses the value
        n = None
        why = "" if isinstance(exc, TypeError) else index_failure(exc)
    if n is None:
        raise TypeError(f"{name} must be an int, got {type_shown(value)}{why}")
    if not lo <= n < end:
        span = "[0, 2**64)" if (lo, end) == (0, 1 << 64) else "[-2**63, 2**63)"
        raise TypeError(f"{name} must be an int in {span} (PyTorch takes {ctype}), got "
                        f"{shown(n)}")
    return int(n)


def check_history_args(enabled: str | bool | None, context: str | None, stacks: str,
                       max_entries: int, skip_actions: Iterable[str] | None
                       ) -> tuple[str | None, frozenset[str]]:
    """Validate :meth:`~accelrt.memory._allocator.DeviceCachingAllocator.record_history`'s
    arguments; return ``enabled`` as ``None``, ``"state"`` or ``"all"`` and the actions to skip.

    ``max_entries`` is any size_t, as PyTorch's binding takes it (``0`` is a ring of one
    entry: PyTorch's ``RingBuffer::setMaxEntries`` keeps at least one).

    Raises:
        ValueError: an unknown value (for ``enabled``, ``context`` and ``stacks`` also a
            ``RuntimeError`` ending with torch's message, as torch raises).
        TypeError: ``enabled``, ``context`` or ``stacks`` is neither a str nor None,
            ``max_entries`` is not an int in ``[0, 2**64)`` (PyTorch's binding refuses a
            negative or larger int with a TypeError), or ``skip_actions`` is not a list of
            str.

    Example::

        >>> from accelrt.memory._history import check_history_args
        >>> check_history_args(True, "all", "python", 10, None)
        ('all', frozenset())
    """
    if enabled is True:
        enabled = "all"
    elif enabled is False:
        enabled = None
    _check_choice("enabled", enabled, (None, "state", "all"))
    _check_choice("context", context, (None, "state", "alloc", "all"))
    _check_choice("stacks", stacks, ("python", "all"))
    binding_int(max_entries, "max_entries", 0, _SIZE_T_END, "a size_t")
    if skip_actions is not None and (isinstance(skip_actions, (str, bytes)) or not isinstance(
            skip_actions, Iterable) or not all(isinstance(s, str) for s in skip_actions)):
        raise TypeError("skip_actions must be a list of action names such as "
                        f"['free_completed'], got {shown(skip_actions):.80}")
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

    __slots__ = ("backend", "context", "skip_actions", "trace")

    def __init__(self, context: int, max_entries: int, skip_actions: frozenset[str],
                 backend: str = "") -> None:
        self.backend = backend   # whose metadata (set_metadata) the entries carry
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
               frames: list[dict[str, Any]] | None, device_free: int | None = None,
               pool_id: tuple[int, int] = (0, 0)) -> None:
        """Append a trace entry (frames only from ``context="alloc"`` up, as in PyTorch);
        ``pool_id``: the private pool of the block or segment, ``(0, 0)`` for the default
        pools (PyTorch 2.14's ``pool_id`` key). An entry recorded without a stack
        (``frames`` None: below ``context="alloc"``, or a block allocated before recording
        began) has no ``frames`` key, as PyTorch's snapshot leaves it out for a trace entry
        without a context (``if (te.context_)`` in torch/csrc/cuda/memory_snapshot.cpp and
        Module.cpp); a recorded but empty stack is ``[]``."""
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
        md = getattr(_metadata, "by_backend", None)
        entry["user_metadata"] = md.get(self.backend, "") if md else ""
        entry["pool_id"] = pool_id
        if frames is not None:
            entry["frames"] = list(frames)
        self.trace.append(entry)

    def annotate(self, metadata: dict[str, Any]) -> None:
        """Append an ``annotate`` entry carrying ``metadata`` as its user_metadata."""
        if "annotate" not in self.skip_actions:
            # PyTorch's recordAnnotation gathers a stack with context="all"
            self.record("annotate", 0, 0, 0,
                        capture_frames() if self.context >= CTX_ALL else None)
            self.trace[-1]["user_metadata"] = dict(metadata)


#: The calling thread's memory metadata per backend name (``_set_memory_metadata``).
_metadata = threading.local()


def set_metadata(backend: str, metadata: str) -> None:
    """Attach ``metadata`` (``""``: none) to the trace entries that the calling thread's
    allocations and frees on backend ``backend`` record from now on
    (``torch.cuda.memory._set_memory_metadata``).

    Raises:
        TypeError: ``metadata`` is not a str.

    Example::

        >>> from accelrt.memory._history import get_metadata, set_metadata
        >>> set_metadata("cpu", "step 1"); get_metadata("cpu")
        'step 1'
        >>> set_metadata("cpu", ""); get_metadata("cpu")
        ''
    """
    if not isinstance(metadata, str):
        raise TypeError(f"memory metadata must be a str, got {type_shown(metadata)}; pass "
                        "'' to clear it")
    md = getattr(_metadata, "by_backend", None)
    if md is None:
        md = _metadata.by_backend = {}
    if metadata:
        md[backend] = metadata
    else:
        md.pop(backend, None)


def get_metadata(backend: str) -> str:
    """The calling thread's metadata of backend ``backend`` (``""``: none)."""
    md = getattr(_metadata, "by_backend", None)
    return md.get(backend, "") if md else ""


# ------------------------------------------------- the allocator's history API
# (the DeviceCachingAllocator methods of the same names call these)


def trace_entries(a: AllocatorCore) -> list[dict[str, Any]]:
    """The recorded history, oldest first (copies)."""
    with a._lock:
        h = a._history
        return [] if h is None else [dict(e) for e in h.trace]


def record_history(a: AllocatorCore, enabled: str | bool | None,
                   context: str | None = "all", stacks: str = "all",
                   max_entries: int = sys.maxsize, clear_history: bool = False,
                   skip_actions: Iterable[str] | None = None) -> None:
    """Start or stop recording allocation history (PyTorch's ``_record_memory_history``).

    Args:
        enabled: ``None``/``False`` stop (and clear the trace), ``"state"`` keeps the
            stacks of live allocations and, as PyTorch, a trace buffer of one entry (the
            latest action); ``"all"``/``True`` keeps a trace of ``max_entries``.
        context: ``None``, ``"state"``, ``"alloc"`` or ``"all"``: which stacks to gather.
        stacks: ``"python"`` or ``"all"`` (only Python frames exist here).
        max_entries: trace ring-buffer length (``0``: one entry, as PyTorch's ring keeps at
            least one; more than ``sys.maxsize``: unbounded).
        clear_history: drop the entries recorded so far.
        skip_actions: trace actions not to record.

    Raises:
        TypeError, ValueError: as :func:`check_history_args`.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory import _allocator, _history
        >>> alloc = _allocator.DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> _history.record_history(alloc, "state", skip_actions=["alloc"])
        >>> ptr = alloc.malloc(100, 0)
        >>> [e["action"] for e in _history.trace_entries(alloc)]   # "state": the latest one
        ['segment_alloc']
        >>> _history.record_history(alloc, None); alloc.free(ptr)
    """
    enabled, skip = check_history_args(enabled, context, stacks, max_entries, skip_actions)
    max_entries = operator.index(max_entries)   # (a numpy integer is taken, as by PyTorch)
    with a._lock:
        a._flush_deferred()
        h = a._history
        if enabled is None:
            a._history = None
        else:
            ctx = CTX_LEVELS[context]
            # PyTorch records the trace for "state" too, in a buffer of one entry; its ring
            # holds at least one entry (RingBuffer::setMaxEntries: max(1, n)), and one longer
            # than sys.maxsize entries is unbounded anyway
            entries = min(max(max_entries, 1), sys.maxsize) if enabled == "all" else 1
            if h is None:
                a._history = History(ctx, entries, skip, a._name)
            else:
                h.configure(ctx, entries, skip, clear_history)
        a._update_simple()


def record_annotation(a: AllocatorCore, metadata: dict[str, Any]) -> None:
    """Append an ``annotate`` trace entry carrying ``metadata`` as user_metadata."""
    with a._lock:
        if a._history is not None:
            a._history.annotate(metadata)


def allocation_frames(a: AllocatorCore, ptr: int) -> tuple[bool, list[dict[str, Any]] | None]:
    """``(live, frames)`` of the allocation that starts at ``ptr``: ``live`` is False when no
    allocated block starts there; ``frames`` is the stack recorded when it was allocated
    (copies), or ``None`` when none was (recording off, or ``context=None``): torch 2.15's
    ``_cuda_allocationTraceback``."""
    with a._lock:
        a.settle_locked()
        blk = a._blocks.get(ptr)
        if blk is None or not blk.allocated:
            return False, None
        fr = blk.frames
        return True, None if fr is None else [dict(f) for f in fr]


def annotate_allocation(a: AllocatorCore, ptr: int, metadata: str) -> bool:
    """Record an ``annotate`` trace entry for the live allocation that starts at ``ptr``, with
    ``metadata`` as its ``user_metadata`` and the caller's stack from ``context="alloc"`` up
    (torch 2.15's ``_cuda_annotateMemory``); nothing is recorded while history is off or
    ``"annotate"`` is skipped. Returns False when no allocated block starts at ``ptr``."""
    with a._lock:
        a.settle_locked()
        blk = a._blocks.get(ptr)
        if blk is None or not blk.allocated:
            return False
        h = a._history
        if h is not None and "annotate" not in h.skip_actions:
            h.record("annotate", ptr, blk.requested, blk.stream,
                     capture_frames() if h.context >= CTX_ALLOC else None,
                     pool_id=blk.pool.owner_id())
            h.trace[-1]["user_metadata"] = metadata
        return True
