"""Allocator snapshots in PyTorch's format: what ``_snapshot()`` returns and
``dump_snapshot`` pickles, readable by PyTorch's memory visualizer and ``_memory_viz.py``.

A snapshot is a plain dict (only dicts, lists, tuples, str, int, float, bool and None)::

    {"segments": [Segment, ...],            # every device of the backend, sorted by address
     "device_traces": [[TraceEntry, ...], ...],   # one list per device, oldest first
     "allocator_settings": {...},           # PYTORCH_CUDA_ALLOC_CONF-style settings
     "external_annotations": [],
     "host_segments": [], "host_traces": [],   # torch 2.14's pinned host history: not recorded
     "library_roots": [str, ...]}           # accelrt's addition (see below)

Segment keys: ``device, address, total_size, allocated_size, active_size, requested_size,
stream, segment_type, segment_pool_id, is_expandable, frames, blocks``; block keys: ``address,
size, requested_size, state, frames``; trace entry keys: ``action, addr, size, stream,
time_us, compile_context, user_metadata, pool_id, frames`` (``device_free`` for ``addr`` on
``oom``). :func:`check_snapshot` validates what the visualizers read.
``library_roots`` is the recording machine's
:func:`~accelrt.memory._history.library_roots`: the folders of its libraries, so that
``accelrt memory viz`` tells the user's frames from the libraries' on any machine (PyTorch's
visualizer ignores the key; snapshots without it are read too).

Example::

    >>> from accelrt.memory._snapshot import check_snapshot
    >>> check_snapshot({"segments": [], "device_traces": [[]]})["device_traces"]
    [[]]
"""

from __future__ import annotations

import gc
import os
import pickle
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypedDict, cast
from .._errors import type_shown


__all__ = ["Block", "Frame", "Segment", "TraceEntry", "build_snapshot", "check_snapshot",
           "dump_snapshot", "gc_paused", "history_real_size", "snapshot_segments", "to_plain"]

#: The pickle protocol of dump files; PyTorch's visualizer reads protocols 2 to 4.
PICKLE_PROTOCOL = 4


class Frame(TypedDict):
    """One Python frame of a recorded stack."""

    filename: str
    line: int
    name: str


class Block(TypedDict, total=False):
    """One block of a segment (address order)."""

    address: int
    size: int
    requested_size: int
    state: str          # "active_allocated" | "active_pending_free" | "inactive"
    frames: list[Frame]


class Segment(TypedDict, total=False):
    """One device allocation (or contiguous mapped range of an expandable segment)."""

    device: int
    address: int
    total_size: int
    allocated_size: int
    active_size: int
    requested_size: int
    stream: int
    segment_type: str   # "large" | "small"
    segment_pool_id: tuple[int, int]
    is_expandable: bool
    frames: list[Frame]
    blocks: list[Block]


class TraceEntry(TypedDict, total=False):
    """One recorded allocator event."""

    action: str
    addr: int
    size: int
    stream: int
    time_us: int
    device_free: int
    compile_context: str
    user_metadata: str | dict[str, Any]
    pool_id: tuple[int, int]   # the block's or segment's private pool, (0, 0) by default
    frames: list[Frame]


_PLAIN = (str, int, float, bool, type(None))


def to_plain(obj: Any, path: str = "snapshot") -> Any:
    """Copy ``obj`` keeping only plain builtin types, so any unpickler can read it.

    Dict subclasses become dicts, other sequences lists (tuples stay tuples), numpy scalars
    their Python values.

    Raises:
        TypeError: something else is found (names where).

    Example::

        >>> from collections import OrderedDict
        >>> from accelrt.memory._snapshot import to_plain
        >>> to_plain(OrderedDict(a=[1, (0, 0)]))
        {'a': [1, (0, 0)]}
    """
    if isinstance(obj, _PLAIN):
        return obj if type(obj) in _PLAIN else _builtin_scalar(obj)
    if isinstance(obj, dict):
        return {str(k): to_plain(v, f"{path}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(to_plain(v, f"{path}[{i}]") for i, v in enumerate(obj))
    if isinstance(obj, list):
        return [to_plain(v, f"{path}[{i}]") for i, v in enumerate(obj)]
    item = getattr(obj, "item", None)          # numpy scalars
    if callable(item) and getattr(obj, "shape", None) == ():
        return to_plain(item(), path)
    raise TypeError(f"{path}: {type_shown(obj)} cannot go into a snapshot; only dict, list, "
                    "tuple, str, int, float, bool and None can")


def _builtin_scalar(obj: Any) -> Any:
    for t in (bool, int, float, str):
        if isinstance(obj, t):
            return t(obj)
    return obj


_gc_lock = threading.Lock()
_gc_depth = 0          # guarded by _gc_lock: gc_paused() blocks now running
_gc_was_enabled = False  # guarded by _gc_lock: whether the first of them found gc enabled


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block (nesting and threads allowed).

    A snapshot makes a few dicts and lists per block, all acyclic; each 700 new containers
    trigger a collection that walks the young objects, and every tenth of those the older
    ones, so with the collector on, building a large snapshot costs several times the work
    itself. The collector is restored when the last paused block ends (only if it was on).

    Example::

        >>> import gc
        >>> from accelrt.memory._snapshot import gc_paused
        >>> with gc_paused():
        ...     gc.isenabled()
        False
    """
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


def snapshot_segments(allocators: Sequence[Any | None],
                      pool_id: tuple[int, int] | None = None) -> list[Any]:
    """The segments of every started allocator (of private pool ``pool_id`` only, unless it
    is ``None``), sorted by (device, address). Each caching allocator records its
    ``snapshot`` trace entry with ``pool_id``, as PyTorch's ``snapshot(mempool_id)``.

    The caching allocator's own segment dicts are made fresh for each call (plain values,
    copied stacks), so they are returned as they are; those of any other allocator type go
    through :func:`to_plain`. Runs with the garbage collector paused (see :func:`gc_paused`).

    Example::

        >>> from accelrt.memory._snapshot import snapshot_segments
        >>> snapshot_segments([None])
        []
    """
    from ._allocator import DeviceCachingAllocator   # (it imports this module's users)
    segments: list[Any] = []
    parts = 0
    with gc_paused():
        for a in allocators:
            if a is None:
                continue
            segs = a.snapshot_segments(pool_id)
            segments.extend(segs if isinstance(a, DeviceCachingAllocator) else to_plain(segs))
            parts += 1
    if parts > 1:  # each allocator's list is sorted by address already
        segments.sort(key=lambda s: (s.get("device", 0), s.get("address", 0)))
    return segments


def build_snapshot(backend: Any, allocators: list[Any | None],
                   settings: dict[str, Any]) -> dict[str, Any]:
    """Assemble the full snapshot of one backend.

    Args:
        backend: the backend (only its name is used, for error messages).
        allocators: one entry per device index: its allocator, or ``None`` if not started.
        settings: the ``allocator_settings`` dict.

    Returns:
        A plain dict: ``segments`` (all devices, by address), ``device_traces`` (one list per
        device), ``allocator_settings``, ``external_annotations``, ``host_segments`` and
        ``host_traces`` (empty), ``library_roots``.

    Example::

        >>> from accelrt.memory._snapshot import build_snapshot
        >>> build_snapshot(None, [None, None], {})["device_traces"]
        [[], []]
    """
    from ._allocator import DeviceCachingAllocator
    from ._history import library_roots
    # the traces first, then the segments, as PyTorch's NativeCachingAllocator::snapshot
    # (each device's trace, then its DeviceCachingAllocator::snapshot): the ``snapshot``
    # entry that taking the segments records is in the next snapshot's traces, not this one's
    with gc_paused():
        traces: list[list[Any]] = []
        for i, a in enumerate(allocators):
            where = f"snapshot['device_traces'][{i}]"
            if a is None:
                traces.append([])
            elif isinstance(a, DeviceCachingAllocator):   # fresh shallow copies
                traces.append(_plain_trace(a.trace_entries(), where))
            else:
                traces.append(to_plain(list(a.trace_entries()), where))
        snap: dict[str, Any] = {
            "segments": snapshot_segments(allocators),
            "device_traces": traces,
            "allocator_settings": to_plain(settings, "snapshot['allocator_settings']"),
            "external_annotations": [],
            # torch 2.14's pinned host pool history, which accelrt does not record
            # (record_memory_history refuses record_pinned_host_memory=True)
            "host_segments": [],
            "host_traces": [],
            "library_roots": list(library_roots()),
        }
    return snap


def _plain_trace(entries: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """The caching allocator's trace entries made plain in place, without :func:`to_plain`'s
    walk of every value.

    ``DeviceCachingAllocator.trace_entries`` returns fresh shallow copies of entries its ``_record``
    (``History.record``) built from ints, strs and captured frames (dicts of str and int), so only two keys need
    work: ``frames`` gets fresh frame dicts (the lists are shared with the allocator), and a
    ``user_metadata`` dict (from ``record_annotation``, user data) still goes through
    :func:`to_plain`, which checks it.
    """
    for k, e in enumerate(entries):
        fr = e.get("frames")
        if fr is not None:
            e["frames"] = [dict(f) for f in fr] if fr else []
        meta = e.get("user_metadata")
        if meta is not None and type(meta) is not str:
            e["user_metadata"] = to_plain(meta, f"{where}[{k}]['user_metadata']")
    return entries


def dump_snapshot(path: str | os.PathLike[str], snapshot: dict[str, Any]) -> None:
    """Pickle ``snapshot`` (made plain first) to ``path``.

    Raises:
        TypeError: ``path`` is not a path (``os.fspath``'s error: an int would be a file
            descriptor to ``open``, and ``dump_snapshot(1)`` wrote to stdout and closed it), or
            the snapshot holds a non-plain object.
        OSError: the file cannot be written.

    Example::

        >>> import os, pickle, tempfile
        >>> from accelrt.memory._snapshot import dump_snapshot
        >>> d = tempfile.TemporaryDirectory()
        >>> p = os.path.join(d.name, "snap.pickle")
        >>> dump_snapshot(p, {"segments": [], "device_traces": [[]]})
        >>> with open(p, "rb") as f:
        ...     pickle.load(f)["segments"]
        []
        >>> d.cleanup()
    """
    path = os.fspath(path)
    data = pickle.dumps(to_plain(snapshot), protocol=PICKLE_PROTOCOL)
    with open(path, "wb") as f:
        f.write(data)


_MAX_UINT = 1 << 64    # addresses, sizes and stream handles are 64-bit unsigned


def _need(obj: Any, key: str, typ: type, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise ValueError(f"{where}: missing key {key!r}")
    v = obj[key]
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        raise ValueError(f"{where}[{key!r}]: expected {typ.__name__}, got {type_shown(v)}")
    n = cast("int", v)
    if typ is int and not 0 <= n < _MAX_UINT:
        raise ValueError(f"{where}[{key!r}]: {n if abs(n) < 1 << 128 else 'a huge int'} is "
                         "out of range [0, 2**64)")
    return v


def _opt(obj: dict[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> None:
    """Check an optional key's type when it is present."""
    if key not in obj:
        return
    v = obj[key]
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        name = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise ValueError(f"{where}[{key!r}]: expected {name}, got {type_shown(v)}")
    if typ is int:
        _need(obj, key, int, where)     # the range check


def _check_frames(obj: dict[str, Any], where: str) -> None:
    _opt(obj, "frames", list, where)
    for n, f in enumerate(obj.get("frames", ())):
        if not isinstance(f, dict):
            raise ValueError(f"{where}['frames'][{n}]: expected a dict with filename, line "  # noqa: TRY004
                             f"and name, got {type_shown(f)}")


def _check_history(block: dict[str, Any], where: str) -> None:
    """Check a block's optional ``history`` (PyTorch 1.13/2.0 snapshots: a list of
    ``{"addr", "real_size", "frames"}``, latest first) where present."""
    _opt(block, "history", list, where)
    for n, h in enumerate(block.get("history", ())):
        hw = f"{where}['history'][{n}]"
        if not isinstance(h, dict):
            raise ValueError(f"{hw}: expected a dict with addr, real_size and frames, got "  # noqa: TRY004
                             f"{type_shown(h)}")
        _opt(h, "real_size", int, hw)
        _check_frames(h, hw)


def history_real_size(block: dict[str, Any]) -> int | None:
    """The size asked for that a checked block's ``history`` records (its latest entry's
    ``real_size``: PyTorch 1.13/2.0 snapshots, whose blocks may lack ``requested_size``), or
    ``None``.

    Example::

        >>> from accelrt.memory._snapshot import history_real_size
        >>> history_real_size({"size": 512, "history": [{"addr": 0, "real_size": 500}]})
        500
        >>> history_real_size({"size": 512}) is None
        True
    """
    history = block.get("history")
    return history[0].get("real_size") if history else None


def _check_pool_id(obj: dict[str, Any], key: str, where: str) -> None:
    """Check an optional pool id (a pair of ints) where present."""
    pool = obj.get(key, (0, 0))
    if (not isinstance(pool, (tuple, list)) or len(pool) != 2
            or not all(type(x) is int for x in pool)):
        raise ValueError(f"{where}[{key!r}]: expected a pair of ints, got {pool!r:.80}")


def check_snapshot(snap: Any, what: str = "snapshot") -> dict[str, Any]:
    """Check that ``snap`` has everything the visualizers read; return it.

    Integers the visualizers read (addresses, sizes, streams, devices) must lie in
    ``[0, 2**64)``. Checks ``segments`` (``address``, ``total_size``, ``stream``, ``blocks`` with ``size`` and
    ``state``; ``requested_size`` on ``active_allocated`` blocks, unless PyTorch 1.13/2.0's
    ``history`` list gives its ``real_size``) and ``device_traces`` (lists of
    dicts with a str ``action``; ``addr``/``size`` ints on alloc/free/segment actions), and the
    types of optional keys where present (``device``, ``segment_pool_id``, ``frames``, ...).

    Raises:
        ValueError: a key is missing or has the wrong type (the message says where).

    Example::

        >>> from accelrt.memory._snapshot import check_snapshot
        >>> check_snapshot({"segments": [{}], "device_traces": []})
        Traceback (most recent call last):
        ...
        ValueError: snapshot['segments'][0]: missing key 'address'
    """
    if not isinstance(snap, dict):
        raise ValueError(f"{what}: expected a dict, got {type_shown(snap)}")  # noqa: TRY004
    segs = _need(snap, "segments", list, what)
    for i, seg in enumerate(segs):
        where = f"{what}['segments'][{i}]"
        _need(seg, "address", int, where)
        _need(seg, "total_size", int, where)
        _need(seg, "stream", int, where)
        blocks = _need(seg, "blocks", list, where)
        _opt(seg, "device", int, where)
        _opt(seg, "segment_type", str, where)
        _opt(seg, "is_expandable", bool, where)
        _check_frames(seg, where)
        _check_pool_id(seg, "segment_pool_id", where)
        for j, b in enumerate(blocks):
            bw = f"{where}['blocks'][{j}]"
            _need(b, "size", int, bw)
            state = _need(b, "state", str, bw)
            legacy = "history" in b          # PyTorch 1.13/2.0
            if legacy:
                _check_history(b, bw)
            if state == "active_allocated" and (not legacy or history_real_size(b) is None):
                _need(b, "requested_size", int, bw)
            else:
                _opt(b, "requested_size", int, bw)
            _check_frames(b, bw)
    _opt(snap, "library_roots", list, what)
    if not all(isinstance(r, str) for r in snap.get("library_roots", ())):
        raise ValueError(f"{what}['library_roots']: expected a list of str")
    traces = _need(snap, "device_traces", list, what)
    for d, entries in enumerate(traces):
        if not isinstance(entries, list):
            raise ValueError(f"{what}['device_traces'][{d}]: expected a list")  # noqa: TRY004
        for k, e in enumerate(entries):
            where = f"{what}['device_traces'][{d}][{k}]"
            action = _need(e, "action", str, where)
            _opt(e, "stream", int, where)
            _opt(e, "addr", int, where)
            _opt(e, "size", int, where)
            _check_pool_id(e, "pool_id", where)
            _check_frames(e, where)
            if action in ("alloc", "free_requested", "free_completed", "segment_alloc",
                          "segment_free", "segment_map", "segment_unmap"):
                _need(e, "addr", int, where)
                _need(e, "size", int, where)
            elif action == "oom":
                _need(e, "size", int, where)
                _need(e, "device_free", int, where)
    return snap
