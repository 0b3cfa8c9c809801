"""``accelrt replay``: drive a recorded allocation trace through the caching allocator.

A trace is either the shared gzipped (or plain) JSON format
``{"info": {...}, "trace": [[action, addr, size, stream], ...]}`` or a PyTorch / accelrt
snapshot pickle (``torch.cuda.memory._dump_snapshot``, :func:`accelrt.memory.dump_snapshot`),
whose ``device_traces`` supply the entries. Each ``alloc`` and the first ``free_requested``
or ``free_completed`` of a live address are replayed in order through a fresh
``DeviceCachingAllocator`` on a :class:`SimulatedBackend` (no memory is touched, so an 8 GB
trace replays anywhere); other actions are ignored, and so are frees of addresses allocated
before recording began. A snapshot's allocations made in private pools (``MemPool``, graph
capture: a ``pool_id`` other than ``(0, 0)``) are replayed in private pools of the same ids
(:class:`PoolPlan`).

Pickles are read with :func:`load_pickle`, an unpickler that refuses every global: only plain
data (dict, list, tuple, str, bytes, int, float, bool, None; no cycles, at most 64 levels
deep) loads, so a malicious file raises ``ValueError`` instead of running code.

Example::

    >>> from accelrt.memory.tools._replay import replay_ops
    >>> r = replay_ops([(True, 1, 3 << 20, 0), (True, 2, 1000, 0), (False, 1, 0, 0)])
    >>> r["ops"], r["peak_live_bytes"], r["peak_reserved_bytes"]
    (3, 3146728, 23068672)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from ._files import file_name, parse_args, read_input, short_repr, terminal_safe
from ._pools import PoolId, PoolPlan, PoolRouter, pool_plan, snapshot_pools
from ..._errors import type_shown

__all__ = ["H100_US", "NO_HISTORY_HINT", "NoHistoryError", "Op", "PoolPlan", "WrongFileKindError",
           "device_trace", "driver_cost_us", "human_bytes", "is_pickle", "is_segment_list",
           "load_pickle", "load_replay", "load_trace", "no_history_message", "pool_plan",
           "replay_main", "replay_ops",
           "settings_text", "snapshot_entries", "snapshot_pools", "snapshot_traces",
           "steady_start", "trace_ops"]

#: One replayed operation: (is_alloc, trace address, size in bytes, stream handle).
Op = tuple[bool, int, int, int]

_MAX_INT = 1 << 64                 # addresses, sizes and stream handles are 64-bit
_CHUNK = 8192                      # ops timed per chunk (progress updates between chunks)
_PROGRESS_MIN_OPS = 100_000        # show a progress bar from this many ops on


#: How to record the allocation history that ``accelrt replay`` and ``accelrt memory tune`` need.
NO_HISTORY_HINT = ("record it before taking the snapshot: "
                   "torch.cuda.memory._record_memory_history() in PyTorch, "
                   "accelrt.memory.record_memory_history() in accelrt")


class NoHistoryError(ValueError):
    """The file holds no allocation history to replay."""


class WrongFileKindError(ValueError):
    """The file is the other kind (an allocation trace where a snapshot is needed); the message
    names the command that takes it."""


def no_history_message(path: str, what: str) -> str:
    """Why a snapshot without history cannot be replayed, which command reads it as it is, and
    how to record history (``what`` says what lacks it, e.g. ``"the snapshot"``).

    Example::

        >>> from accelrt.memory.tools._replay import no_history_message
        >>> print(no_history_message("s.pickle", "the snapshot"))  # doctest: +ELLIPSIS
        s.pickle: the snapshot has no allocation history to replay ('accelrt memory viz s.pickle' draws its segments as they are); record it ...
    """
    shown = terminal_safe(path, one_line=True)
    return (f"{shown}: {what} has no allocation history to replay ('accelrt memory viz "
            f"{shown}' draws its segments as they are); {NO_HISTORY_HINT}")


class _Forbidden(pickle.UnpicklingError):
    """A pickle asked for a global (class or function)."""


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise _Forbidden(f"global '{module}.{name}' is forbidden")


def load_pickle(data: bytes, what: str = "pickle") -> Any:
    """Unpickle plain data only (no classes, no functions, no code).

    Args:
        data: the pickled bytes.
        what: how to name the source in error messages (e.g. the file name).

    Raises:
        ValueError: the pickle is corrupt, asks for any global (a class or function),
            which a snapshot never needs and a malicious file would use to run code, or holds
            anything but plain data (sets, bytearrays, cycles, nesting over 64 levels).

    Example::

        >>> import pickle
        >>> from accelrt.memory.tools._replay import load_pickle
        >>> load_pickle(pickle.dumps({"segments": [], "device_traces": [[]]}))
        {'segments': [], 'device_traces': [[]]}
    """
    try:
        obj = _DataOnlyUnpickler(io.BytesIO(data)).load()
    except _Forbidden as exc:
        raise ValueError(f"{what}: refusing to load: {terminal_safe(str(exc), one_line=True)}; "
                         "only plain data (dicts, lists, "
                         "str, int, float, bool, None) is accepted in a snapshot") from exc
    except (pickle.UnpicklingError, EOFError, IndexError, KeyError, TypeError, AttributeError, ValueError,
            UnicodeDecodeError, OverflowError, MemoryError) as exc:
        raise ValueError(f"{what}: not a valid pickle ({type(exc).__name__}: "
                         f"{terminal_safe(str(exc)[:200], one_line=True)})") from exc
    _check_plain(obj, what)
    return obj


def is_pickle(data: bytes) -> bool:
    """Whether ``data`` is a pickle rather than JSON, by its first byte: ``PROTO`` (protocols 2
    to 5), or the ``(``, ``}`` or ``]`` that protocols 0 and 1 open a dict or list with (no
    JSON text starts with these).

    Example::

        >>> import pickle
        >>> from accelrt.memory.tools._replay import is_pickle
        >>> [is_pickle(pickle.dumps({}, protocol=p)) for p in (0, 1, 4)], is_pickle(b'{"a": 1}')
        ([True, True, True], False)
    """
    return data[:1] in (b"\x80", b"(", b"}", b"]")


_PLAIN_LEAVES = (str, bytes, int, float, bool, type(None))
_MAX_DEPTH = 64                    # a snapshot nests about 8 deep
_MAX_ELEMENTS = 100_000_000        # elements of the data walked as a tree (no sharing)


def _check_plain(obj: Any, what: str) -> None:
    """Refuse what the data-only unpickler can still build but a snapshot never holds: sets,
    frozensets, bytearrays, cycles, absurd nesting (which would crash later readers), and
    shared references that multiply the data (a few KB whose readers would walk 2**40
    elements: a list referring twice to a list referring twice to ...)."""
    done: dict[int, int] = {}     # container id -> elements under it, counted as a tree
    path: set[int] = set()        # containers on the current path (a repeat is a cycle)

    def walk(o: Any, depth: int) -> int:
        t = type(o)
        if t in _PLAIN_LEAVES:
            return 1
        if t not in (dict, list, tuple):
            raise ValueError(f"{what}: refusing to load: a {t.__name__} is not plain data; only "
                             "dicts, lists, tuples, str, bytes, int, float, bool and None are")
        key = id(o)
        size = done.get(key)
        if size is not None:
            return size
        if key in path:
            raise ValueError(f"{what}: refusing to load: the data refers to itself (a cycle)")
        if depth >= _MAX_DEPTH:
            raise ValueError(f"{what}: refusing to load: data nested more than {_MAX_DEPTH} deep")
        path.add(key)
        size = 1
        if t is dict:                 # keys and values apart: no temporary (k, v) tuples
            for k, v in o.items():
                size += walk(k, depth + 1) + walk(v, depth + 1)
        else:
            for v in o:
                size += walk(v, depth + 1)
        if size > _MAX_ELEMENTS:
            raise ValueError(f"{what}: refusing to load: the data expands to more than "
                             f"{_MAX_ELEMENTS:,} elements through shared references")
        path.discard(key)
        done[key] = size     # o stays alive inside obj, so its id stays unique
        return size

    walk(obj, 0)


def _read_bytes(path: str) -> bytes:
    """The file's bytes, gzip inflated within :func:`~accelrt.memory.tools._files.read_input`'s
    bound (a gzip bomb raises ``ValueError``)."""
    return read_input(path)


def _entries_from_json(obj: Any, path: str) -> list[Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get("trace"), list):
        raise ValueError(f"{path}: expected a JSON object with a 'trace' list of "  # noqa: TRY004
                         "[action, addr, size, stream] entries")
    entries: list[Any] = obj["trace"]
    return entries


def is_segment_list(obj: Any) -> bool:
    """Whether an unpickled ``obj`` is a non-empty list of segment dicts: what
    ``torch.cuda.memory_snapshot()`` and :func:`accelrt.memory.memory_snapshot` return, a
    snapshot's segments without its history (an empty list is no snapshot).

    Example::

        >>> from accelrt.memory.tools._replay import is_segment_list
        >>> is_segment_list([{"address": 0, "total_size": 512}]), is_segment_list([1, 2])
        (True, False)
    """
    return isinstance(obj, list) and bool(obj) and all(isinstance(s, dict) for s in obj)


def snapshot_traces(obj: Any, path: str) -> list[list[Any]]:
    """A snapshot's ``device_traces``, one list of entries per device, checked.

    Raises:
        NoHistoryError: the snapshot has no ``device_traces`` (how to record them), or ``obj``
            is a list of segments (:func:`is_segment_list`).
        ValueError: ``obj`` is not a dict, or ``device_traces`` not a list of lists.

    Example::

        >>> from accelrt.memory.tools._replay import snapshot_traces
        >>> snapshot_traces({"segments": [], "device_traces": [[], []]}, "s.pickle")
        [[], []]
    """
    if is_segment_list(obj):
        raise NoHistoryError(no_history_message(
            path, "the file (a list of segments, as memory_snapshot() returns)"))
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: a snapshot pickle must be a dict with a 'device_traces' "  # noqa: TRY004
                         f"list, got {type_shown(obj)}")
    if "device_traces" not in obj:
        raise NoHistoryError(no_history_message(path, "the snapshot (no 'device_traces' list)"))
    traces = obj["device_traces"]
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise ValueError(f"{path}: 'device_traces' must be a list of lists of trace entries, "
                         f"got {type_shown(traces)}")
    return traces


def snapshot_entries(trace: list[Any], path: str, device: int) -> list[Any]:
    """One device's snapshot trace entries (dicts) as raw ``(action, addr, size, stream)``
    entries for :func:`trace_ops` (an ``oom`` entry has no ``addr``: 0).

    Raises:
        ValueError: an entry is not a dict, lacks ``action`` or ``size``, or has an action
            that is not a str (the message names the device and the entry).

    Example::

        >>> from accelrt.memory.tools._replay import snapshot_entries
        >>> snapshot_entries([{"action": "alloc", "addr": 16, "size": 512, "stream": 0}],
        ...                  "s.pickle", 0)
        [('alloc', 16, 512, 0)]
    """
    out: list[Any] = []
    for i, e in enumerate(trace):
        if not isinstance(e, dict):
            raise ValueError(f"{path}: device {device} trace entry {i} is not a dict")  # noqa: TRY004
        try:
            action, size = e["action"], e["size"]
        except KeyError as exc:
            raise ValueError(f"{path}: device {device} trace entry {i} has no {exc} key") \
                from exc
        if not isinstance(action, str):
            raise ValueError(f"{path}: device {device} trace entry {i}: 'action' must be a "  # noqa: TRY004
                             f"str, got {short_repr(action)}")
        out.append((action, e.get("addr", 0), size, e.get("stream", 0)))
    return out


def _check_device(device: Any) -> None:
    if device is not None and (not isinstance(device, int) or isinstance(device, bool)):
        raise TypeError(f"device must be an int or None, got {type_shown(device)}")


def device_trace(traces: list[list[Any]], path: str, device: int | None = None
                 ) -> tuple[int, list[Any]]:
    """``(device, its trace)`` of a snapshot's ``device_traces`` (:func:`snapshot_traces`):
    ``device``, or with ``None`` the only device that has history (device 0 if none has).

    Raises:
        TypeError: ``device`` is not an int or ``None``.
        ValueError: ``device`` is out of range, or several devices have history and ``device``
            is ``None`` (the message says to choose one with ``--device N``).

    Example::

        >>> from accelrt.memory.tools._replay import device_trace
        >>> device_trace([[], [{"action": "alloc"}]], "s.pickle")
        (1, [{'action': 'alloc'}])
    """
    _check_device(device)
    with_history = [d for d, t in enumerate(traces) if t]
    if device is None:
        if len(with_history) > 1:
            raise ValueError(f"{path}: the snapshot holds traces of {len(with_history)} "
                             f"devices: devices {', '.join(map(str, with_history))} have "
                             "allocation history; choose one with --device N")
        device = with_history[0] if with_history else 0
    if not 0 <= device < max(len(traces), 1):
        raise ValueError(f"{path}: --device {device} is out of range: the snapshot has "
                         f"{len(traces)} device(s) (0..{len(traces) - 1})")
    return device, traces[device] if traces else []


def _entries_from_snapshot(obj: Any, path: str, device: int | None
                           ) -> tuple[list[Any], list[PoolId | None] | None]:
    traces = snapshot_traces(obj, path)
    device, trace = device_trace(traces, path, device)
    out = snapshot_entries(trace, path, device)
    if not any(action == "alloc" for action, _, _, _ in out):
        others = [d for d, t in enumerate(traces) if t and d != device]
        raise NoHistoryError(no_history_message(
            path, f"device {device} of the snapshot" if others else "the snapshot")
            + (f"; devices with history: {', '.join(map(str, others))}" if others else ""))
    return out, snapshot_pools(trace, path, device)


def load_trace(path: str, device: int | None = None) -> list[Any]:
    """Read a trace file's raw entries ``[action, addr, size, stream]``.

    Accepts gzipped or plain JSON in the shared trace format, and snapshot pickles (gzipped or
    not) holding ``device_traces``: those of ``device``, which may be ``None`` where only one
    device has history (a JSON trace ignores it).

    Raises:
        OSError: the file cannot be read.
        NoHistoryError: a snapshot without allocation history (the message says which command
            reads it and how to record history).
        TypeError: ``device`` is not an int or ``None``.
        ValueError: the file is in none of these formats, or a pickle asks for a global;
            ``device`` is out of range, or ``None`` where several devices have history.

    Example::

        >>> from accelrt.memory.tools._files import example_file
        >>> from accelrt.memory.tools._replay import load_trace
        >>> load_trace(example_file("t.json", b'{"trace": [["alloc", 16, 512, 0]]}'))
        [['alloc', 16, 512, 0]]
    """
    return _load_entries(path, device)[0]


def load_replay(path: str, device: int | None = None) -> tuple[list[Op], PoolPlan | None]:
    """Read a trace file's replayed operations (:func:`load_trace`, :func:`trace_ops`) and,
    for a snapshot whose history made allocations in private pools, their :class:`PoolPlan`
    (``None`` otherwise: a JSON trace records no pools).

    Raises:
        As :func:`load_trace` and :func:`trace_ops`; ``ValueError`` also for a malformed
        ``pool_id`` (:func:`snapshot_pools`).

    Example::

        >>> import pickle
        >>> from accelrt.memory.tools._files import example_file
        >>> from accelrt.memory.tools._replay import load_replay
        >>> snap = {"device_traces": [[
        ...     {"action": "alloc", "addr": 16, "size": 512, "stream": 0, "pool_id": (0, 1)}]]}
        >>> ops, plan = load_replay(example_file("s.pickle", pickle.dumps(snap)))
        >>> ops, plan.route
        ([(True, 16, 512, 0)], ((0, 0, (0, 1)),))
    """
    path = file_name(path)
    entries, pools = _load_entries(path, device)
    ops = trace_ops(entries, path)
    return ops, None if pools is None else pool_plan(entries, pools)


def _load_entries(path: str, device: int | None
                  ) -> tuple[list[Any], list[PoolId | None] | None]:
    """:func:`load_trace`'s entries, with their pools (:func:`snapshot_pools`)."""
    path = file_name(path)
    _check_device(device)
    data = _read_bytes(path)
    if is_pickle(data):
        return _entries_from_snapshot(load_pickle(data, path), path, device)
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ValueError(f"{path}: refusing to load: the JSON is nested too deeply for a "
                         "trace") from None
    except ValueError as exc:   # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise ValueError(f"{path}: neither JSON nor a snapshot pickle "
                         f"({terminal_safe(str(exc)[:200], one_line=True)})") from None
    return _entries_from_json(obj, path), None


def _as_int(v: Any, what: str, i: int, path: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"{path}: entry {i}: {what} must be an int, got "  # noqa: TRY004
                         f"{short_repr(v)}")
    if not 0 <= v < _MAX_INT:
        shown = v if abs(v) < 1 << 128 else "(a huge int)"
        raise ValueError(f"{path}: entry {i}: {what} {shown} is out of range [0, 2**64)")
    return v


def trace_ops(entries: Iterable[Any], path: str = "trace",
              ooms: list[tuple[int, int, int]] | None = None) -> list[Op]:
    """Turn raw entries into the replayed operations.

    Keeps each ``alloc`` (size > 0) and the first ``free_requested`` or ``free_completed``
    (traces recorded with ``skip_actions=["free_requested"]`` have only the latter) of an address
    that is live; frees of addresses allocated before recording began are skipped.

    Args:
        entries: the raw ``[action, addr, size, stream]`` entries.
        path: how to name the source in error messages.
        ooms: where given, each ``oom`` entry (a request that ran out of memory, ``size`` the
            bytes asked for) is appended to it as ``(ops before it, size, stream)``.

    Raises:
        ValueError: an entry is malformed, or allocates an address that is still live (names
            the entry and the problem).

    Example::

        >>> from accelrt.memory.tools._replay import trace_ops
        >>> trace_ops([["free_requested", 8, 512, 0], ["alloc", 16, 512, 0],
        ...            ["free_completed", 16, 512, 0], ["free_requested", 16, 512, 0]])
        [(True, 16, 512, 0), (False, 16, 0, 0)]
    """
    ops: list[Op] = []
    live: set[int] = set()
    for i, e in enumerate(entries):
        if not isinstance(e, (list, tuple)) or len(e) != 4 or not isinstance(e[0], str):
            raise ValueError(f"{path}: entry {i} must be [action, addr, size, stream], got "
                             f"{short_repr(e)}")
        action = e[0]
        if action == "alloc":
            addr = _as_int(e[1], "addr", i, path)
            size = _as_int(e[2], "size", i, path)
            stream = _as_int(e[3], "stream", i, path)
            if size:
                if addr in live:
                    raise ValueError(f"{path}: entry {i}: address {addr} is allocated again "
                                     "before it was freed; the trace is inconsistent")
                ops.append((True, addr, size, stream))
                live.add(addr)
        elif action in ("free_requested", "free_completed"):
            # free_requested frees; free_completed only when the trace skipped free_requested
            addr = _as_int(e[1], "addr", i, path)
            if addr in live:
                live.discard(addr)
                ops.append((False, addr, 0, _as_int(e[3], "stream", i, path)))
        elif action == "oom" and ooms is not None:
            size = _as_int(e[2], "size", i, path)
            if size:
                ooms.append((len(ops), size, _as_int(e[3], "stream", i, path)))
    return ops


def _peak_live(ops: Sequence[Op]) -> int:
    sizes: dict[int, int] = {}
    cur = peak = 0
    for is_alloc, addr, size, _ in ops:
        if is_alloc:
            sizes[addr] = size
            cur += size
            peak = max(peak, cur)
        else:
            cur -= sizes.pop(addr)
    return peak


class _Progress:
    """A plain-text progress bar on a tty stream (``\\r`` updates, no escape codes)."""

    def __init__(self, stream: TextIO | None, label: str, total: int) -> None:
        self._s = stream
        self._label = label
        self._total = max(total, 1)

    def update(self, done: int) -> None:
        if self._s is None:
            return
        frac = done / self._total
        bar = "#" * int(frac * 30)
        self._s.write(f"\rreplaying {self._label} [{bar:<30}] {frac * 100:5.1f}%")
        self._s.flush()

    def close(self) -> None:
        if self._s is not None:
            self._s.write("\r" + " " * (len(self._label) + 50) + "\r")
            self._s.flush()


def _make_allocator(config: Any, capacity: int | None = None) -> Any:
    from .._allocator import DeviceCachingAllocator
    from ...testing._simulated import SimulatedBackend
    backend = SimulatedBackend() if capacity is None else SimulatedBackend(capacity=capacity)
    return DeviceCachingAllocator(backend, 0, config)


def _parse_conf(alloc_conf: str | None) -> Any:
    from .. import _config
    if alloc_conf is None:
        return _config.get_config()
    return _config.parse_config(alloc_conf)


def replay_ops(ops: Sequence[Op], config: Any = None, *, name: str = "trace",
               progress: TextIO | None = None,
               on_chunk: Callable[[int], None] | None = None,
               capacity: int | None = None, plan: PoolPlan | None = None) -> dict[str, Any]:
    """Replay operations through a fresh allocator on a :class:`SimulatedBackend`.

    Args:
        ops: from :func:`trace_ops`.
        config: an ``AllocatorConfig`` (``None``: the allocator's defaults).
        name: the trace's name in the result and the progress bar.
        progress: a text stream for a progress bar, or ``None``.
        on_chunk: called with the number of operations replayed after each chunk of them
            (``accelrt memory tune``'s progress bar).
        capacity: the simulated device's memory in bytes (``None``: 80 GiB); under it the
            allocator frees its cache and retries, or runs out of memory, as on a real device.
        plan: where the history used private pools (:func:`pool_plan`; ``None``: every
            allocation in the default pool): each allocation it routes is made in a private
            pool of the same id, and the pools are released where it says.

    Returns:
        ``{"trace", "ops", "peak_live_bytes", "peak_reserved_bytes", "reserved_over_live",
        "device_mallocs", "device_frees", "vm_maps", "vm_unmaps", "driver_us_h100",
        "us_per_op", "steady_driver_calls", "steady_driver_calls_per_1k_ops"}``; the device
        calls are counted at the simulated device's boundary (``vm_unmaps``: mappings
        removed), ``driver_us_h100`` prices them at their H100 cost (:func:`driver_cost_us`),
        ``us_per_op`` is the wall time of the malloc/free loop alone divided by the number of
        operations; ``steady_driver_calls`` counts the driver calls (mallocs, frees, mappings
        made and removed) of the steady state, the last third of the operations
        (:func:`steady_start`), and ``steady_driver_calls_per_1k_ops`` per 1,000 of them.

    Raises:
        OutOfMemoryError: the trace needs more than the simulated device's memory.

    Example::

        >>> from accelrt.memory.tools._replay import replay_ops
        >>> replay_ops([(True, 1, 512, 0), (False, 1, 0, 0)])["device_mallocs"]
        1
    """
    routing = None if plan is None else plan.routing()
    return _replay(ops, config, name, progress, on_chunk, capacity, routing)[0]


def _replay(ops: Sequence[Op], config: Any, name: str, progress: TextIO | None,
            on_chunk: Callable[[int], None] | None, capacity: int | None,
            routing: tuple[dict[int, PoolId], dict[int, tuple[PoolId, ...]]] | None = None
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`replay_ops`'s result and the allocator's statistics (``routing``: from
    :meth:`PoolPlan.routing`, ``None`` where no allocation is made in a private pool)."""
    alloc = _make_allocator(config, capacity)
    malloc, free = alloc.malloc, alloc.free
    router = None if routing is None else PoolRouter(alloc, routing)
    handles: dict[int, int] = {}
    bar = _Progress(progress, name, len(ops))
    clock = time.perf_counter
    elapsed = 0.0
    steady = steady_start(len(ops))
    # chunks end at ``steady`` too: the driver calls made so far are read there
    bounds = sorted({*range(0, len(ops), _CHUNK), steady} - {len(ops)})
    before_steady = 0
    try:
        for k, start in enumerate(bounds):
            if start == steady:
                before_steady = _driver_calls(alloc.backend.calls(0))
            chunk = ops[start:bounds[k + 1] if k + 1 < len(bounds) else len(ops)]
            t0 = clock()
            if router is None:
                for is_alloc, addr, size, stream in chunk:
                    if is_alloc:
                        handles[addr] = malloc(size, stream)
                    else:
                        free(handles.pop(addr))
            else:
                router.run(chunk, start, handles)
            elapsed += clock() - t0
            bar.update(start + len(chunk))
            if on_chunk is not None:
                on_chunk(len(chunk))
        if router is not None:
            router.finish(len(ops))
    finally:
        bar.close()
    st = alloc.stats()
    calls = alloc.backend.calls(0)
    live = _peak_live(ops)
    reserved = int(st["reserved_bytes.all.peak"])
    steady_ops = len(ops) - steady
    # fewer than 3 operations have no steady state: none of their driver calls are in it
    steady_calls = _driver_calls(calls) - before_steady if steady_ops else 0
    return {
        "trace": name,
        "ops": len(ops),
        "peak_live_bytes": live,
        "peak_reserved_bytes": reserved,
        "reserved_over_live": round(reserved / live, 4) if live else None,
        "device_mallocs": calls["malloc"],
        "device_frees": calls["free"],
        "vm_maps": calls["vm_map"],
        "vm_unmaps": calls["vm_unmapped_mappings"],
        "driver_us_h100": driver_cost_us(calls),
        "us_per_op": round(elapsed / len(ops) * 1e6, 3) if ops else 0.0,
        "steady_driver_calls": steady_calls,
        "steady_driver_calls_per_1k_ops": (round(steady_calls * 1000 / steady_ops, 2)
                                           if steady_ops else 0.0),
    }, st


def steady_start(n: int) -> int:
    """The index of the first operation of the steady state of ``n`` operations: the last
    third of them (``n // 3`` operations), when a caching allocator should no longer need the
    driver.

    Example::

        >>> from accelrt.memory.tools._replay import steady_start
        >>> steady_start(9), steady_start(10), steady_start(2)
        (6, 7, 2)
    """
    return n - n // 3


def _driver_calls(calls: dict[str, int]) -> int:
    """The driver calls among the simulated device's counts: each ``malloc`` and ``free``,
    each mapping made and each mapping removed (a GPU unmaps and releases mappings one by
    one)."""
    return (calls.get("malloc", 0) + calls.get("free", 0) + calls.get("vm_map", 0)
            + calls.get("vm_unmapped_mappings", 0))


#: Measured cost on an H100 of the driver calls behind the simulated device's calls, in us:
#: cuMemAlloc + cuMemFree, the pair; cuMemMap + cuMemSetAccess + cuMemUnmap, the cycle;
#: cuMemCreate (+ its cuMemRelease).
H100_US = {"malloc_free": 62.0, "map_cycle": 60.0, "create": 13.5}


def driver_cost_us(calls: dict[str, int]) -> float:
    """The H100 time of the driver calls a replay made (:data:`H100_US`), counting a malloc
    without its free and a mapping without its unmap at the price of the whole pair / cycle
    (every mapping is one cuMemCreate + one cycle).

    Example::

        >>> from accelrt.memory.tools._replay import driver_cost_us
        >>> driver_cost_us({"malloc": 2, "free": 1, "vm_map": 1})
        197.5
    """
    return round(calls.get("malloc", 0) * H100_US["malloc_free"]
                 + calls.get("vm_map", 0) * (H100_US["map_cycle"] + H100_US["create"]), 1)


def _trace_name(path: str) -> str:
    base = terminal_safe(os.path.basename(path), one_line=True)
    for suffix in (".gz", ".json", ".pickle", ".pkl"):
        base = base.removesuffix(suffix)
    return base


def human_bytes(n: int) -> str:
    """``n`` bytes in binary units with three significant figures, e.g. ``"5.41 GiB"``.

    Example::

        >>> from accelrt.memory.tools._replay import human_bytes
        >>> human_bytes(5807013888), human_bytes(3 << 20), human_bytes(512)
        ('5.41 GiB', '3.00 MiB', '512 B')
    """
    sign, n = ("-", -n) if n < 0 else ("", n)
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{sign}{v:.{2 if v < 10 else 1 if v < 100 else 0}f} {unit}"
    return f"{sign}{n} B"


def settings_text(config: Any) -> str:
    """How a replay's allocator settings are shown: the string, or ``default``."""
    text = getattr(config, "settings", "") or ""
    return text or "default"


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("trace", "ops", "peak live", "peak reserved", "reserved/live", "device mallocs",
            "vm maps", "vm unmaps", "driver ms (H100)", "us/op")
    body = [(r["trace"], f"{r['ops']:,}", human_bytes(r["peak_live_bytes"]),
             human_bytes(r["peak_reserved_bytes"]),
             "-" if r["reserved_over_live"] is None else f"{r['reserved_over_live']:.3f}",
             f"{r['device_mallocs']:,}", f"{r['vm_maps']:,}", f"{r['vm_unmaps']:,}",
             f"{r['driver_us_h100'] / 1000:.1f}", f"{r['us_per_op']:.2f}") for r in rows]
    widths = [max(len(c) for c in col) for col in zip(head, *body)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(row, widths))) for row in (head, *body)]
    return "\n".join(lines)


def replay_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``accelrt replay TRACE... [--alloc-conf STR] [--device N] [--json]``.

    Prints a table (or one JSON object per trace with ``--json``) and returns the exit status:
    0 on success, 1 when a trace cannot be read or replayed, 2 on bad arguments.

    Example::

        >>> from accelrt.memory.tools._files import example_file
        >>> from accelrt.memory.tools._replay import replay_main
        >>> trace = b'{"trace": [["alloc", 16, 512, 0], ["free_requested", 16, 512, 0]]}'
        >>> replay_main([example_file("t.json", trace), "--json"])  # doctest: +ELLIPSIS
        {"trace": "t", "ops": 2, ...}
        0
    """
    parser = argparse.ArgumentParser(
        prog="accelrt replay",
        description="Replay recorded allocation traces through accelrt's caching allocator on "
                    "a simulated device and report fragmentation (peak reserved / peak live) "
                    "and speed (us per malloc/free).")
    parser.add_argument("traces", nargs="+", metavar="TRACE",
                        help="trace file: shared JSON format (.json or .json.gz) or a snapshot "
                             "pickle from dump_snapshot / torch.cuda.memory._dump_snapshot")
    parser.add_argument("--alloc-conf", metavar="STR", default=None,
                        help="allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax, e.g. "
                             "'expandable_segments:True' (default: ACCELRT_ALLOC_CONF)")
    parser.add_argument("--device", metavar="N", type=int, default=None,
                        help="which device's history to replay from a snapshot (needed when "
                             "several devices have history)")
    args = parse_args(parser, argv,
                      json_help="print one JSON object per trace instead of a table")
    if isinstance(args, int):
        return args
    try:
        config = _parse_conf(args.alloc_conf)
    except (TypeError, ValueError) as exc:
        print(f"accelrt replay: error: --alloc-conf: {exc}", file=sys.stderr)
        return 2
    from ..._errors import OutOfMemoryError
    progress = sys.stderr if sys.stderr.isatty() else None
    rows = []
    status = 0
    for path in args.traces:
        try:
            ops, plan = load_replay(path, args.device)
            if len(ops) < _PROGRESS_MIN_OPS:
                row = replay_ops(ops, config, name=_trace_name(path), plan=plan)
            else:
                row = replay_ops(ops, config, name=_trace_name(path), progress=progress,
                                 plan=plan)
        except OutOfMemoryError as exc:     # the allocator's message does not name the file
            print(f"accelrt replay: error: {terminal_safe(path, one_line=True)}: out of memory "
                  f"on the simulated device: {terminal_safe(str(exc), one_line=True)}",
                  file=sys.stderr)
            status = 1
            continue
        except (OSError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
            print(f"accelrt replay: error: {terminal_safe(str(exc), one_line=True)}",
                  file=sys.stderr)
            status = 1
            continue
        if args.json:
            print(json.dumps(row), flush=True)
        rows.append(row)
    if rows and not args.json:
        source = "from --alloc-conf" if args.alloc_conf is not None else (
            "from ACCELRT_ALLOC_CONF" if os.environ.get("ACCELRT_ALLOC_CONF")
            else "ACCELRT_ALLOC_CONF is not set")
        print(f"alloc conf: {settings_text(config)} ({source})")
        print(_table(rows))
    return status
