"""Memory management: the caching allocator's statistics, snapshots, options and pools.

The functions keep ``torch.cuda.memory``'s names, signatures and semantics. Each normalises
its ``device`` argument (``None``: the current device of the current accelerator; an ``int``:
an index of the current accelerator; ``"cpu:1"`` or an :class:`accelrt.device`: that device of
its own backend) and talks to that device's caching allocator. Getters and resets never start
an allocator: before the first allocation on a device they return ``{}``/``0`` or do nothing.

Allocator options come from ``ACCELRT_ALLOC_CONF`` (PyTorch's ``PYTORCH_CUDA_ALLOC_CONF``
syntax) and :func:`set_allocator_settings`. See ``docs/memory.md`` for a guide.

Example::

    >>> import accelrt as acc
    >>> from accelrt import memory
    >>> p = memory.caching_allocator_alloc(1 << 20, "cpu:0")
    >>> memory.memory_allocated("cpu:0") >= 1 << 20
    True
    >>> memory.caching_allocator_delete(p)
    >>> memory.memory_stats("cpu:0")["allocation.all.current"]
    0
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import operator
import sys
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _device
from .._device import _get_device, _plain_int, _tls
from .._errors import AcceleratorTypeError, AcceleratorValueError, _bool_arg, shown, type_shown
from .._fork import reinit_after_fork
from .._handles import StreamHandle
from .._stream_callback import refuse
from .._namespace import public_dir
from . import _allocator as _allocator_module
from . import _host
from ._allocator import DeviceCachingAllocator, get_allocator, peek_allocator
from ._registry import empty_backend_cache
from ._config import get_allocator_settings, get_config, reported_size, set_allocator_settings
from ._history import check_history_args
from ._pluggable import PluggableAllocator, change_current_allocator, get_allocator_backend
from ._snapshot import build_snapshot, snapshot_segments, to_plain
from ._stats import nest_stats
from ._snapshot import dump_snapshot as _dump
from ._summary import format_summary

#: True when the caching allocator runs from the compiled build (mypyc: the default of
#: ``pip install .`` where a C compiler is found; see docs/memory.md), False for the pure-Python
#: build. Both behave the same; benchmarks and bug reports say which one they ran (``accelrt
#: info`` says which build is loaded, and why).
compiled: bool = not _allocator_module.__file__.endswith(".py")

if TYPE_CHECKING:
    import os

    from .._backend import Backend
    from .._stream import Stream
    from .._typing import DeviceLike, NestedStats
    from ._snapshot import Segment

__all__ = [
    "MemPool",
    "PluggableAllocator",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "change_current_allocator",
    "dump_snapshot",
    "empty_cache",
    "empty_host_cache",
    "get_allocator_backend",
    "get_allocator_settings",
    "get_memory_info",
    "get_per_process_memory_fraction",
    "host_memory_stats",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "record_memory_history",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",  # deprecated
    "reset_max_memory_cached",  # deprecated
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "set_allocator_settings",
    "set_per_process_memory_fraction",
    "use_mem_pool",
]


def _peek(device: DeviceLike) -> DeviceCachingAllocator | None:
    """The allocator of ``device`` if it was started, else None (never starts one)."""
    if device is None:
        b = _device._current_backend
        if b is not None:
            name = b.name
            return peek_allocator(name, _tls.device.get(name, 0))
    b, i = _get_device(device)
    return peek_allocator(b.name, i)


# ---------------------------------------------------------------------- statistics

def empty_cache() -> None:
    """Release every unused cached block of every started device of the current accelerator
    back to the device, so other processes (or other libraries) can use it.

    Memory held by live allocations is not freed. A no-op before any allocation.

    Example::

        >>> from accelrt import memory
        >>> memory.empty_cache()
    """
    refuse("empty_cache")   # (it waits for the streams: not from a host function)
    b = _device._current()
    if b is not None:
        empty_backend_cache(b)


def memory_stats(device: DeviceLike = None, /) -> collections.OrderedDict[str, int]:
    """The allocator statistics of a device as a flat, key-sorted ``OrderedDict``.

    Keys are PyTorch's: ``{allocation,segment,active,inactive_split,allocated_bytes,
    reserved_bytes,active_bytes,inactive_split_bytes,requested_bytes}.{all,small_pool,
    large_pool}.{current,peak,allocated,freed}``, ``oversize_allocations.*``,
    ``oversize_segments.*``, ``num_alloc_retries``, ``num_ooms``, ``num_sync_all_streams``,
    ``num_device_alloc``, ``num_device_free``, ``num_oom_rejections``, ``max_split_size`` (-1
    when unlimited), and for each private pool ``(a, b)`` that held a segment
    ``reserved_bytes_by_private_pools.{a}_{b}.{all,small_pool,large_pool}.{current,peak,
    allocated,freed}`` (torch 2.14: the pool's share of ``reserved_bytes``).

    Args:
        device: the device (default: the current device).

    Returns:
        The statistics; empty before the device's allocator started.

    Example::

        >>> from accelrt import memory
        >>> stats = memory.memory_stats("cpu:0")
        >>> list(stats) == sorted(stats)
        True
    """
    a = _peek(device)
    if a is None:
        return collections.OrderedDict()
    return a.sorted_stats()


_key_order: tuple[Any, list[str]] = (frozenset(), [])   # last key set seen, and its sorted keys


def _sorted_stats(stats: dict[str, int]) -> collections.OrderedDict[str, int]:
    """``stats`` as an OrderedDict sorted by key (the key order is cached: the set of keys
    rarely changes, and sorting 120 keys costs more than the rest of the call)."""
    global _key_order
    known, order = _key_order
    if stats.keys() != known:
        order = sorted(stats)
        _key_order = (frozenset(order), order)
    return collections.OrderedDict(zip(order, map(stats.__getitem__, order)))


def memory_stats_as_nested_dict(device: DeviceLike = None, /) -> NestedStats:
    """:func:`memory_stats` as nested dicts (``stats["allocated_bytes"]["all"]["peak"]``);
    ``reserved_bytes_by_private_pools`` is keyed by pool id tuples and, as in PyTorch, is
    there (maybe ``{}``) once the device's allocator started.

    Example::

        >>> from accelrt import memory
        >>> isinstance(memory.memory_stats_as_nested_dict("cpu:0"), dict)
        True
    """
    return nest_stats(memory_stats(device))


def memory_allocated(device: DeviceLike = None, /) -> int:
    """Bytes currently handed out by the caching allocator on a device
    (``allocated_bytes.all.current``; blocks are rounded up to multiples of 512 bytes).

    Example::

        >>> from accelrt import memory
        >>> memory.memory_allocated("cpu:0") >= 0
        True
    """
    a = _peek(device)
    return 0 if a is None else a.memory_allocated()


def max_memory_allocated(device: DeviceLike = None, /) -> int:
    """Peak of :func:`memory_allocated` since start or :func:`reset_peak_memory_stats`.

    Example::

        >>> from accelrt import memory
        >>> memory.max_memory_allocated("cpu:0") >= memory.memory_allocated("cpu:0")
        True
    """
    a = _peek(device)
    return 0 if a is None else a.max_memory_allocated()


def memory_reserved(device: DeviceLike = None, /) -> int:
    """Bytes the caching allocator holds from the device, in use or cached
    (``reserved_bytes.all.current``).

    Example::

        >>> from accelrt import memory
        >>> memory.memory_reserved("cpu:0") >= memory.memory_allocated("cpu:0")
        True
    """
    a = _peek(device)
    return 0 if a is None else a.memory_reserved()


def max_memory_reserved(device: DeviceLike = None, /) -> int:
    """Peak of :func:`memory_reserved` since start or :func:`reset_peak_memory_stats`.

    Example::

        >>> from accelrt import memory
        >>> memory.max_memory_reserved("cpu:0") >= memory.memory_reserved("cpu:0")
        True
    """
    a = _peek(device)
    return 0 if a is None else a.max_memory_reserved()


def reset_peak_memory_stats(device: DeviceLike = None, /) -> None:
    """Set every ``peak`` statistic of a device to its ``current`` value.

    Example::

        >>> from accelrt import memory
        >>> memory.reset_peak_memory_stats("cpu:0")
        >>> memory.max_memory_allocated("cpu:0") == memory.memory_allocated("cpu:0")
        True
    """
    a = _peek(device)
    if a is not None:
        a.reset_peak_stats()


def reset_accumulated_memory_stats(device: DeviceLike = None, /) -> None:
    """Zero the ``allocated``/``freed`` totals and the ``num_*`` counters of a device
    (``current`` and ``peak`` values are kept).

    Example::

        >>> from accelrt import memory
        >>> memory.reset_accumulated_memory_stats("cpu:0")
        >>> memory.memory_stats("cpu:0").get("num_device_alloc", 0)
        0
    """
    a = _peek(device)
    if a is not None:
        a.reset_accumulated_stats()


def reset_max_memory_allocated(device: DeviceLike = None, /) -> None:
    """Deprecated: calls :func:`reset_peak_memory_stats`, which resets *all* peaks
    (emits ``FutureWarning``)."""
    _reset_all_peaks("reset_max_memory_allocated", device)


def reset_max_memory_cached(device: DeviceLike = None, /) -> None:
    """Deprecated: calls :func:`reset_peak_memory_stats`, which resets *all* peaks
    (emits ``FutureWarning``)."""
    _reset_all_peaks("reset_max_memory_cached", device)


def _reset_all_peaks(old: str, device: DeviceLike) -> None:
    """The deprecated ``old``: warn that it now resets every peak, then do so."""
    warnings.warn(f"accelrt.memory.{old} now calls accelrt.memory.reset_peak_memory_stats, "
                  "which resets /all/ peak memory stats.", FutureWarning, stacklevel=3)
    reset_peak_memory_stats(device)


def get_memory_info(device: DeviceLike = None, /) -> tuple[int, int]:
    """``(free, total)`` bytes of a device as the device itself reports them (memory cached by
    the allocator counts as used); -1 is the current device, as in ``torch.accelerator``.

    Example::

        >>> from accelrt import memory
        >>> free, total = memory.get_memory_info("cpu:0")
        >>> 0 <= free <= total
        True
    """
    b, i = _get_device(device, minus_one=True)
    free, total = b.get_memory_info(i)
    return int(free), int(total)


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    """A human-readable table of :func:`memory_stats` (PyTorch's ``memory_summary`` layout).

    Args:
        device: the device (default: the current device).
        abbreviated: leave out the per-pool (large/small) rows.

    Example::

        >>> from accelrt import memory
        >>> print(memory.memory_summary("cpu:0").splitlines()[1])
        |                  accelrt CPU memory summary, device ID 0                  |
    """
    b, i = _get_device(device)
    return format_summary(memory_stats(device), i, b.name, abbreviated)


# ---------------------------------------------------------------------- history and snapshots

#: What each torch-only option of the history and snapshot functions would need.
_TORCH_ONLY = {
    "compile_context": "records torch.compile's compile context on each trace entry, and "
                       "accelrt runs no torch.compile",
    "global_record_annotations": "records torch.profiler.record_function ranges of every "
                                 "thread, and accelrt has no record_function ranges",
    "augment_with_fx_traces": "maps the frames of torch.fx generated code back to the model "
                              "source, and accelrt runs no torch.fx code",
}


def _torch_only(what: str = "_record_memory_history", **flags: object) -> None:
    """Accept torch 2.14's parameters that cannot apply to accelrt when false (read as
    torch's bool binding reads them: ``None`` and ``0`` are false); raise for a true value (a
    ``ValueError``) or one no bool binding takes, such as a str (a ``TypeError``)."""
    for name, value in flags.items():
        if not _bool_arg(what, value, name):
            continue
        raise ValueError(f"{name}=True is not supported: in PyTorch it {_TORCH_ONLY[name]}; "
                         f"pass {name}=False (the default)")


def _device_history_only(record_pinned_host_memory: object, record_cuda: object) -> None:
    """Accept torch 2.14's ``record_pinned_host_memory=False`` and ``record_cuda=True`` (the
    device allocator's history, the only one accelrt keeps), read as torch's bool binding
    reads them; raise for the other values."""
    pinned = _bool_arg("_record_memory_history", record_pinned_host_memory,
                       "record_pinned_host_memory")
    cuda = _bool_arg("_record_memory_history", record_cuda, "record_cuda")
    if pinned:
        raise ValueError("record_pinned_host_memory=True is not supported: accelrt's pinned "
                         "host pool keeps no allocation history (PyTorch adds host_segments "
                         "and host_traces to the snapshot); pass record_pinned_host_memory="
                         "False (the default) and read host_memory_stats() for the pool")
    if not cuda:
        raise ValueError("record_cuda=False is not supported: in PyTorch it records only the "
                         "pinned host pool, whose history accelrt does not keep; pass "
                         "record_cuda=True (the default)")


def record_memory_history(enabled: str | bool | None = "all", context: str | None = "all",
                          stacks: str = "all", max_entries: int = sys.maxsize,
                          device: DeviceLike = None, clear_history: bool = False,
                          compile_context: bool = False,
                          global_record_annotations: bool = False,
                          skip_actions: list[str] | None = None,
                          record_pinned_host_memory: bool = False,
                          record_cuda: bool = True) -> None:
    """Start or stop recording allocator history (PyTorch's ``_record_memory_history``).

    Args:
        enabled: ``"all"`` records every alloc/free/segment event in a ring buffer of
            ``max_entries`` and the stacks of live allocations; ``"state"`` only the stacks of
            live allocations; ``None`` stops recording and clears the history. ``True``/
            ``False`` mean ``"all"``/``None``.
        context: ``None``, ``"state"`` (stacks of live allocations), ``"alloc"`` (also on
            trace entries) or ``"all"`` (also free stacks).
        stacks: ``"python"`` or ``"all"`` (accelrt records Python frames for both).
        max_entries: size of the trace ring buffer (the oldest entries are dropped); any
            int in ``[0, 2**64)``, as PyTorch's size_t, and ``0`` keeps one entry, as
            PyTorch's ring does.
        device: one device, or ``None`` for every device of the current accelerator.
        clear_history: drop what was recorded so far.
        compile_context: must be ``False`` (torch 2.14's parameter: torch.compile context,
            which accelrt does not have).
        global_record_annotations: must be ``False`` (torch 2.14's parameter: record_function
            annotations of every thread, which accelrt does not have).
        skip_actions: trace actions not to record, e.g. ``["free_completed"]``.
        record_pinned_host_memory: must be ``False`` and ``record_cuda`` ``True`` (torch
            2.14's switches for the pinned host pool's history, which accelrt does not keep).

    Raises:
        TypeError/ValueError: an argument has a wrong type or value (``compile_context=True``,
            ``global_record_annotations=True``, ``record_pinned_host_memory=True`` and
            ``record_cuda=False`` are a ``ValueError``).

    Example::

        >>> from accelrt import memory
        >>> memory.record_memory_history(max_entries=1000, device="cpu:0")
        >>> memory.record_memory_history(None, device="cpu:0")
    """
    _torch_only(compile_context=compile_context,
                global_record_annotations=global_record_annotations)
    _device_history_only(record_pinned_host_memory, record_cuda)
    # checked here, before any allocator (of the compiled build: its own type errors) sees
    # them, and whether or not a device has started
    stop = check_history_args(enabled, context, stacks, max_entries, skip_actions)[0] is None
    clear = _bool_arg("_record_memory_history", clear_history, "clear_history")
    if device is None:
        b = _device._require_current()
        targets = [(b, i) for i in range(b.device_count())]
    else:
        targets = [_get_device(device)]
    for b, i in targets:
        if stop and peek_allocator(b.name, i) is None:
            continue
        get_allocator(b, i).record_history(enabled, context, stacks,
                                           operator.index(max_entries), clear, skip_actions)


#: PyTorch's legacy form takes ``trace_alloc_max_entries`` as an int64.
def _settings_dict(b: Backend | None) -> dict[str, Any]:
    """A snapshot's ``allocator_settings`` for backend ``b``: ``expandable_segments`` is what
    its allocators do (PyTorch's ``expandable_segments()`` answers ``False`` where the platform
    cannot), so ``False`` when none of its devices has virtual memory; the settings string is
    the one given."""
    cfg = get_config()
    expandable = cfg.expandable_segments and b is not None and any(
        b.capabilities(i).virtual_memory for i in range(b.device_count()))
    return {
        "PYTORCH_CUDA_ALLOC_CONF": cfg.settings,
        "max_split_size": reported_size(cfg.max_split_size),
        "garbage_collection_threshold": cfg.garbage_collection_threshold,
        "expandable_segments": expandable,
        "pinned_num_register_threads": cfg.pinned_num_register_threads,
        "release_lock_on_cudamalloc": cfg.release_lock_on_malloc,
        "pinned_use_cuda_host_register": cfg.pinned_use_host_register,
        "graph_capture_record_stream_reuse": cfg.graph_capture_record_stream_reuse,
        # torch 2.14's names for the pinned host pool's pinned_max_round_threshold_mb and
        # pinned_max_cached_size_mb, in bytes (-1: no limit)
        "max_round_threshold": reported_size(cfg.pinned_max_round_threshold),
        "max_cached_size": reported_size(cfg.pinned_max_cached_size),
        "roundup_power2_divisions": {str(1 << k): d for k, d in
                                     enumerate(cfg.roundup_power2_divisions)},
    }


def _snapshot(device: DeviceLike = None, augment_with_fx_traces: bool = False
              ) -> dict[str, Any]:
    """The full snapshot of the device's backend: every device's segments and trace.

    Returns a plain dict ``{"segments", "device_traces", "allocator_settings",
    "external_annotations", "host_segments", "host_traces", "library_roots"}`` in PyTorch
    2.14's format (see ``accelrt.memory._snapshot``; the pinned host pool's history,
    ``host_segments`` and ``host_traces``, is not recorded, so they are empty;
    ``library_roots`` is accelrt's addition).
    ``augment_with_fx_traces`` (torch 2.14's) must be ``False``: accelrt runs no torch.fx
    code (``True`` is a ``ValueError``).

    Example::

        >>> from accelrt import memory
        >>> list(memory._snapshot("cpu"))
        ['segments', 'device_traces', 'allocator_settings', 'external_annotations', 'host_segments', 'host_traces', 'library_roots']
    """
    _torch_only("_snapshot", augment_with_fx_traces=augment_with_fx_traces)
    b, _ = _get_device(device)
    allocators = [peek_allocator(b.name, i) for i in range(b.device_count())]
    return build_snapshot(b, allocators, _settings_dict(b))


def _check_include_traces(include_traces: bool) -> None:
    """torch 2.15's check (a ``RuntimeError`` there: "include_traces must be a boolean"; an
    :class:`AcceleratorTypeError`, also a ``TypeError``, here)."""
    if not isinstance(include_traces, bool):
        raise AcceleratorTypeError(f"include_traces must be a boolean (True or False), got "
                                   f"{type_shown(include_traces)}")


def memory_snapshot(mempool_id: tuple[int, int] | None = None,
                    include_traces: bool = True) -> list[Segment]:
    """The segments of every started device of the current accelerator, sorted by address.

    Args:
        mempool_id: only the segments of this private pool (a :attr:`MemPool.id`); ``(0, 0)``,
            as ``None``: every pool's, as in PyTorch.
        include_traces: torch 2.14's switch for gathering the history's trace entries, which
            this list of segments never carries (in PyTorch neither): ``False`` returns the
            same segments.

    Raises:
        TypeError: ``mempool_id`` is not a pair of ints or None (its first two items
            are read, as torch 2.15 reads them), or ``include_traces`` is not a bool
            (also a ``RuntimeError`` when an item is no int or the flag no bool,
            as torch's).
        ValueError: an item of ``mempool_id`` is outside the int64 range.

    Example::

        >>> from accelrt import memory
        >>> isinstance(memory.memory_snapshot(), list)
        True
    """
    b, _ = _get_device(None)
    return _backend_segments(b, mempool_id, include_traces)


def _backend_segments(b: Backend, mempool_id: tuple[int, int] | None,
                      include_traces: bool) -> list[Segment]:
    """``memory_snapshot(mempool_id, include_traces)`` of backend ``b`` (the arguments are
    checked here), for :func:`memory_snapshot` and the device modules'."""
    want = _check_mempool_id(mempool_id)
    _check_include_traces(include_traces)
    segments: list[Segment] = snapshot_segments(
        [peek_allocator(b.name, i) for i in range(b.device_count())], want)
    return segments


class _PoolIdIndexError(TypeError, IndexError):
    """A ``mempool_id`` of fewer than two items: torch 2.15's ``mempool_id[1]`` raises
    ``IndexError``; a ``TypeError`` naming the argument here too."""


def _check_mempool_id(mempool_id: object) -> tuple[int, int] | None:
    """``memory_snapshot``'s ``mempool_id`` as a tuple (``None`` stays ``None``), read as
    torch 2.15 reads it: its first two items (``memory_snapshot`` passes ``(mempool_id[0],
    mempool_id[1], include_traces)`` to its binding), each an int or a numpy integer (not a
    bool) in the int64 range; a negative one names no pool (PyTorch's pool ids are unsigned),
    and ``(0, 0)`` is every pool's segments, as in PyTorch.

    Raises:
        TypeError: it cannot be indexed (also an ``IndexError`` when it has fewer than two
            items), or an item is not an integer (also a ``RuntimeError``, torch's "mempool_id
            elements must be integers").
        ValueError: an item is outside ``[-2**63, 2**63)`` (torch's "Overflow when unpacking
            long long").
    """
    if mempool_id is None:
        return None
    try:
        pair = (mempool_id[0], mempool_id[1])   # type: ignore[index]
    except IndexError:
        raise _PoolIdIndexError(f"mempool_id must be a pair of ints (a MemPool.id) or None, "
                                f"got {shown(mempool_id):.60}") from None
    except (TypeError, KeyError):
        raise TypeError("mempool_id must be a pair of ints (a MemPool.id) or None, got "
                        f"{type_shown(mempool_id)} {shown(mempool_id):.60}") from None
    values = []
    for v in pair:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise AcceleratorTypeError(f"mempool_id elements must be integers (a MemPool.id is "
                                       f"a pair of ints), got {type_shown(v)} {shown(v):.40}")
        n = _plain_int(v) if isinstance(v, int) else int(v)   # (an int subclass by its value)
        if not -(1 << 63) <= n < 1 << 63:
            raise ValueError(f"mempool_id element {shown(n):.60} is out of range: PyTorch "
                             "reads a pool id as two int64s (Overflow when unpacking long "
                             "long); pass a MemPool.id, or None for every pool")
        values.append(n % (1 << 64))
    # a negative item is the unsigned pool id PyTorch's cast makes of it (no pool has it)
    pid = values[0], values[1]
    return None if pid == (0, 0) else pid


def dump_snapshot(filename: str | os.PathLike[str] = "dump_snapshot.pickle",
                  augment_with_fx_traces: bool = False) -> None:
    """Pickle :func:`_snapshot` to ``filename`` for ``accelrt memory viz`` or PyTorch's
    visualizer (https://pytorch.org/memory_viz accepts the file as is); PyTorch's
    ``_dump_snapshot(filename=..., augment_with_fx_traces=False)`` (``True`` is a
    ``ValueError``: accelrt runs no torch.fx code).

    Example::

        >>> import os, tempfile
        >>> from accelrt import memory
        >>> with tempfile.TemporaryDirectory() as d:
        ...     memory.dump_snapshot(os.path.join(d, "snap.pickle"))
    """
    _dump(filename, _snapshot(augment_with_fx_traces=augment_with_fx_traces))


# ---------------------------------------------------------------------- fraction, raw alloc

def set_per_process_memory_fraction(fraction: float, device: DeviceLike = None) -> None:
    """Cap what the caching allocator may reserve on a device at ``fraction`` of its total
    memory; going over triggers the usual free-cache-and-retry, then ``OutOfMemoryError``.

    Raises:
        TypeError: ``fraction`` is not a float.
        ValueError: ``fraction`` is outside [0, 1].

    Example::

        >>> from accelrt import memory
        >>> memory.set_per_process_memory_fraction(0.5, "cpu:0")
        >>> memory.get_per_process_memory_fraction("cpu:0")
        0.5
        >>> memory.set_per_process_memory_fraction(1.0, "cpu:0")
    """
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`, got "
                        f"{type_shown(fraction)}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    b, i = _get_device(device)
    get_allocator(b, i).set_memory_fraction(fraction)


def get_per_process_memory_fraction(device: DeviceLike = None) -> float:
    """The fraction set by :func:`set_per_process_memory_fraction` (1.0: no cap).

    Example::

        >>> from accelrt import memory
        >>> memory.get_per_process_memory_fraction("cpu:0")
        1.0
    """
    b, i = _get_device(device)
    return float(get_allocator(b, i).get_memory_fraction())


_raw_owner: dict[int, Any] = {}   # pointer from caching_allocator_alloc -> its allocator


def _stream_of(b: Backend, i: int, stream: Any) -> int:
    if stream is None:
        from .._stream import _current
        return int(_current(b, i)._handle)
    if isinstance(stream, int) and not isinstance(stream, bool):
        raw = _plain_int(stream)
        if not b.stream_is_valid(i, StreamHandle(raw)):
            raise ValueError(f"stream={raw:#x} is not a live stream handle of {b.name}:{i}; "
                             "pass an accelrt.Stream or the stream_id of a live one")
        return raw
    from .._stream import Stream
    if not isinstance(stream, Stream):     # an Event has a handle too: torch's TypeError
        raise TypeError("Invalid type for stream argument, must be `accelrt.Stream` or `int` "
                        f"representing a raw stream handle, got {type_shown(stream)}")
    stream._check_open()   # a closed accelrt.Stream
    handle = int(stream._handle)
    if (stream._b.name, stream._index) != (b.name, i):
        raise ValueError(f"the stream belongs to {stream._b.name}:{stream._index}, not to the "
                         f"device {b.name}:{i}; pass the stream's device")
    return handle


def caching_allocator_alloc(size: int, device: DeviceLike = None,
                            stream: Stream | int | None = None) -> int:
    """Allocate ``size`` bytes from the caching allocator and return the device pointer.

    Args:
        size: bytes (0 returns 0).
        device: the device (default: the stream's device, else the current device).
        stream: an :class:`accelrt.Stream` (or raw handle) the memory will be used on
            (default: the current stream). The memory is reused by that stream first.

    Raises:
        TypeError: wrong argument types.
        ValueError: negative size, a stream of another device, or an int that is not a live
            stream handle of the device.
        OutOfMemoryError: the device is full.

    Example::

        >>> from accelrt import memory
        >>> p = memory.caching_allocator_alloc(4096, "cpu:0")
        >>> memory.caching_allocator_delete(p)
    """
    if not isinstance(size, int) or isinstance(size, bool):
        raise TypeError(f"size must be an int, got {type_shown(size)}")
    size = _plain_int(size)
    if size < 0:
        raise ValueError(f"size must not be negative, got {shown(size)}")
    if device is None and getattr(stream, "_b", None) is not None:
        b, i = stream._b, stream._index  # type: ignore[union-attr]  # duck-typed above
    else:
        b, i = _get_device(device)
    handle = _stream_of(b, i, stream)
    a = get_allocator(b, i)
    ptr = a.malloc(size, handle)
    if ptr:
        _raw_owner[ptr] = a
    return ptr


def caching_allocator_delete(ptr: int) -> None:
    """Free memory from :func:`caching_allocator_alloc` (back to the cache, not the device).

    Raises:
        TypeError: ``ptr`` is not an int.
        AcceleratorValueError: ``ptr`` did not come from :func:`caching_allocator_alloc` or was
            already deleted: PyTorch's "invalid device pointer" (a ``RuntimeError`` there; a
            ``RuntimeError`` and a ``ValueError`` here). Memory owned by arrays is freed by the
            arrays, never through here. ``0`` is ignored, as in PyTorch.

    Example::

        >>> from accelrt import memory
        >>> memory.caching_allocator_delete(memory.caching_allocator_alloc(512, "cpu:0"))
    """
    if not isinstance(ptr, int) or isinstance(ptr, bool):
        raise TypeError(f"ptr must be an int, got {type_shown(ptr)}")
    ptr = _plain_int(ptr)
    if ptr == 0:
        return
    a = _raw_owner.pop(ptr, None)
    if a is None:
        raise AcceleratorValueError(f"invalid device pointer {ptr:#x}: it was not returned by "
                                    "caching_allocator_alloc, or was already deleted")
    a.free(ptr)


# ---------------------------------------------------------------------- private pools

_pool_ids = itertools.count(1)
_pool_lock = reinit_after_fork(threading.Lock())


def _user_pool_id() -> tuple[int, int]:
    """A new id ``(0, n)`` of a pool the user makes (``MemPool``, ``graph_pool_handle()``):
    one counter for both, as PyTorch's ``MemPool::graph_pool_handle(is_user_created=True)``."""
    with _pool_lock:
        return (0, next(_pool_ids))


def _release_pool(pool_id: tuple[int, int], users: list[Any]) -> None:
    """A collected :class:`MemPool`'s finalizer: drop its reference on every device, then
    return its cached memory (PyTorch's ``~MemPool``: ``releasePool`` + ``emptyCache(id)``).
    It never blocks: the collector may run it inside an allocator's critical section, on the
    thread holding the lock; that allocator does the work at its next drain point. A pluggable
    allocator's ``free`` that raises is reported (on the ``accelrt.memory`` logger) and the
    other devices are still released."""
    for a in users:
        a.release_pool_from_finalizer(pool_id, empty_cache=True)


class MemPool:
    """A private memory pool: allocations made inside :func:`use_mem_pool` come from, and go
    back to, segments that no other allocation uses. When the pool object is collected, its
    cached memory is returned to the device (blocks still allocated stay valid).

    Args:
        allocator: a :class:`PluggableAllocator` whose library allocates and frees the pool's
            segments (under the caching allocator: its ``NULL`` is an out-of-memory with the
            usual release and retry); ``None``: the backend's own memory.
        use_on_oom: a last resort for other allocations: a request outside private pools
            on the device current when the pool was made that would otherwise run out of
            memory (after the cache is released and the request retried) takes a cached
            block of this pool on its stream, as PyTorch's ``use_on_oom``; the block stays
            in the pool when freed. Only while the pool object is alive.
        no_split: never split a segment of the pool: every allocation gets a whole segment
            of its own (``allocated_bytes`` counts the whole segment), and a cached segment is
            reused by one allocation at a time (PyTorch's ``no_split``).

    Raises:
        TypeError: ``allocator`` is not a :class:`PluggableAllocator` or None, or
            ``use_on_oom`` or ``no_split`` is not what torch's bool binding takes (a str, a
            list; ``None`` and numbers are read by their truth).

    Example::

        >>> from accelrt import memory
        >>> pool = memory.MemPool()
        >>> with memory.use_mem_pool(pool, "cpu:0"):
        ...     p = memory.caching_allocator_alloc(1 << 20, "cpu:0")
        >>> [s["segment_pool_id"] for s in pool.snapshot()] == [pool.id]
        True
        >>> memory.caching_allocator_delete(p)
    """

    def __init__(self, allocator: PluggableAllocator | None = None, use_on_oom: bool = False,
                 no_split: bool = False) -> None:
        if allocator is not None and not isinstance(allocator, PluggableAllocator):
            raise TypeError(f"MemPool(allocator=...) takes an accelrt.memory.PluggableAllocator "
                            f"or None, got {type_shown(allocator)}")
        self._allocator = allocator
        # read as torch 2.15's _MemPool binding reads them (None and numbers by their truth)
        self._use_on_oom = _bool_arg("MemPool", use_on_oom, "use_on_oom")
        self._no_split = _bool_arg("MemPool", no_split, "no_split")
        self._id = _user_pool_id()
        self._users: list[Any] = []          # allocators holding this pool's own reference
        self._home = dict(_tls.device)       # current devices: use_count()'s (torch: device_)
        self._finalizer = weakref.finalize(self, _release_pool, self._id, self._users)

    @property
    def id(self) -> tuple[int, int]:
        """The pool's id, as found in snapshot segments' ``segment_pool_id``."""
        return self._id

    @property
    def allocator(self) -> PluggableAllocator | None:
        """The pluggable allocator of the pool's segments, or ``None`` (the backend's own
        device memory)."""
        return self._allocator

    def _attach(self, a: Any) -> None:
        with _pool_lock:
            if a not in self._users:
                # PyTorch registers use_on_oom on the device current at the pool's creation
                on_oom = self._use_on_oom and a._index == self._home.get(a._b.name, 0)
                a.create_pool(self._id, no_split=self._no_split, allocator=self._allocator,
                              use_on_oom=on_oom)
                self._users.append(a)

    def use_count(self) -> int:
        """References to the pool (1 for itself, one per open :func:`use_mem_pool` or capture)
        on the device current when it was made, as PyTorch's ``MemPool.use_count`` (its
        ``getPoolUseCount(device_, id)``); uses on other devices do not count."""
        home = self._home
        return max([a.pool_use_count(self._id) for a in self._users
                    if a._index == home.get(a._b.name, 0)], default=1)

    def snapshot(self, include_traces: bool = True) -> list[dict[str, Any]]:
        """The segments of this pool on every device it was used on, sorted by address
        (``include_traces`` as in :func:`memory_snapshot`: the segments carry no trace
        entries either way).

        Raises:
            TypeError: ``include_traces`` is not a bool.
        """
        _check_include_traces(include_traces)
        segments = [s for a in self._users for s in a.snapshot_segments(self._id)]
        segments.sort(key=lambda s: (s["device"], s["address"]))
        plain: list[dict[str, Any]] = to_plain(segments)
        return plain

    def __reduce__(self) -> Any:
        raise TypeError(f"cannot copy or pickle {self!r}: a MemPool is one set of segments of "
                        "this process (a copy would share its id, not its lifetime, as a torch "
                        "MemPool cannot be copied either); pass the object itself around")

    def __repr__(self) -> str:
        return f"MemPool(id={self._id})"


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: DeviceLike = None) -> Iterator[None]:
    """Route the calling thread's allocations on ``device`` (on any stream) into ``pool``
    while the context is open, as PyTorch's ``_cuda_beginAllocateCurrentThreadToPool`` does;
    other threads' allocations are not routed. Memory allocated inside stays in the pool's
    segments after the context ends, and returns there when freed.

    Raises:
        TypeError: ``pool`` is not a :class:`MemPool`.
        RuntimeError: the pool is already in use on that device.

    Example::

        >>> from accelrt import memory
        >>> pool = memory.MemPool()
        >>> with memory.use_mem_pool(pool, "cpu:0"):
        ...     pool.use_count()
        2
    """
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool() takes a MemPool, got {type_shown(pool)}")
    b, i = _get_device(device)
    thread = threading.get_ident()
    a = get_allocator(b, i)
    pool._attach(a)

    def _filter(stream: int) -> bool:
        return threading.get_ident() == thread

    a.begin_allocate_to_pool(pool.id, _filter)
    try:
        from .. import _graph, _stream   # (they import this package)
        g = _graph.capturing_graph(b.name, i, int(_stream._current(b, i)._handle))
        if g is not None:   # as PyTorch: the capturing graph keeps the pool until its reset
            g._retain_pool(pool.id)
        yield
    finally:
        a.end_allocate_to_pool(pool.id)
        a.release_pool(pool.id)


# ---------------------------------------------------------------------- pinned host memory

def _host_pool() -> _host.HostCachingAllocator | None:
    """The pinned host pool of the current accelerator's backend, or None before its first
    pinned allocation (or with no accelerator)."""
    b = _device._current()
    return None if b is None else _host.peek_host_allocator(b.name)


def empty_host_cache() -> None:
    """Return the cached pinned host blocks of the current accelerator's backend to the OS.

    Example::

        >>> from accelrt import memory
        >>> memory.empty_host_cache()
    """
    pool = _host_pool()
    if pool is not None:
        pool.empty_cache()


def host_memory_stats() -> collections.OrderedDict[str, int]:
    """Statistics of the pinned host pool of the current accelerator's backend, flat and
    key-sorted (PyTorch's keys): ``allocations``, ``allocated_bytes``, ``active_requests``,
    ``active_bytes`` (each ``.current/.peak/.allocated/.freed``), ``num_host_alloc``,
    ``num_host_free``, ``host_alloc_time`` and ``host_free_time`` (``.total/.max/.min/.count/
    .avg`` in microseconds). Empty before the backend is initialised; from then on every key,
    at 0 until the first pinned allocation (as ``torch.cuda.host_memory_stats``).

    Example::

        >>> from accelrt import memory
        >>> isinstance(memory.host_memory_stats(), dict)
        True
    """
    pool = _host_pool()
    if pool is not None:
        return _sorted_stats(pool.stats())
    b = _device._current()
    if b is not None and any(name == b.name for name, _ in list(_device._initialized)):
        return _sorted_stats(_host.zero_stats())
    return collections.OrderedDict()



def reset_peak_host_memory_stats() -> None:
    """Set every ``peak`` of :func:`host_memory_stats` to its ``current`` value.

    Example::

        >>> from accelrt import memory
        >>> memory.reset_peak_host_memory_stats()
    """
    pool = _host_pool()
    if pool is not None:
        pool.reset_peak_stats()


def reset_accumulated_host_memory_stats() -> None:
    """Zero the ``allocated``/``freed`` totals, the call counts and the durations of
    :func:`host_memory_stats`.

    Example::

        >>> from accelrt import memory
        >>> memory.reset_accumulated_host_memory_stats()
    """
    pool = _host_pool()
    if pool is not None:
        pool.reset_accumulated_stats()


def __dir__() -> list[str]:
    return public_dir(globals(), __all__, __name__)
