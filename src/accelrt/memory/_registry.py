"""The registry of caching allocators: one per (backend name, device index), made on first use.

:func:`get_allocator` picks the kind (the pluggable allocator of
:func:`~accelrt.memory.change_current_allocator`, the stream-ordered pool of
``backend:cudaMallocAsync``, or the :class:`~._allocator.DeviceCachingAllocator`), and the
process-wide switches act on every allocator of a backend: caching on/off
(:func:`set_caching`), settings (:func:`_check_config_for_all`, :func:`_apply_config_to_all`),
and the fork handler (:func:`_retire_after_fork`). ``_lock`` guards ``_allocators`` and
``_cache_disabled``; :mod:`._allocator` re-exports every name here (the old import path). The
allocators of a backend instance that its name no longer refers to (unregistered, or registered
again) leave the registry when the backend registry says so (:func:`_forget_backend`): the
instance keeps them (they live and go with it), the arrays made from them hold their allocator
themselves and free into it, and an instance registered again (a factory that returns the same
object) takes them back.

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._registry import all_allocators, get_allocator
    >>> a = get_allocator(get_backend("cpu"), 0)
    >>> a in all_allocators()
    True
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

from .. import _backend_registry
from .._device_core import _key_of
from .._fork import after_fork_locked, reinit_after_fork
from ._config import AllocatorConfig, get_config
from ._pools import retire_segments

if TYPE_CHECKING:
    from .._backend import Backend
    from ._allocator import DeviceCachingAllocator

__all__ = ["all_allocators", "caching_enabled", "empty_backend_cache", "get_allocator",
           "peek_allocator", "set_caching"]

_lock = reinit_after_fork(threading.Lock())
_allocators: dict[tuple[str, int], DeviceCachingAllocator] = {}   # guarded by _lock
#: Backends whose caching is turned off (caching_allocator_enable(False)); guarded by _lock
_cache_disabled: set[str] = set()


def set_caching(name: str, enabled: bool) -> None:
    """Turn caching on or off for every device of backend ``name``, now and for devices
    started later (``torch.cuda.caching_allocator_enable``)."""
    with _lock:
        if enabled:
            _cache_disabled.discard(name)
        else:
            _cache_disabled.add(name)
        targets = [a for (n, _), a in _allocators.items() if n == name]
    for a in targets:
        a.set_caching(enabled)


def caching_enabled(name: str) -> bool:
    """False while :func:`set_caching` has caching of backend ``name`` off."""
    return name not in _cache_disabled


def get_allocator(backend: Backend, index: int) -> DeviceCachingAllocator:
    """The caching allocator of device ``index`` of ``backend`` (created on first use).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._registry import get_allocator
        >>> a = get_allocator(get_backend("cpu"), 0)
        >>> a is get_allocator(get_backend("cpu"), 0)
        True
    """
    key = (backend.name, index)
    a = _allocators.get(key)
    # a backend registered again under the same name (backends.register(..., replace=True))
    # gets a new allocator (or its own back, if it was registered before): the old one's
    # blocks are the old instance's memory (its live arrays keep it and free into it)
    if a is None or a._b is not backend:
        from ._allocator import DeviceCachingAllocator   # (it imports this module)
        cfg = get_config()  # outside _lock: set_allocator_settings takes the locks the other way
        with _lock:
            a = _allocators.get(key)
            if a is None or a._b is not backend:
                if a is not None:   # another instance's, which its name no longer refers to
                    old = _retired(a._b)
                    if old is not None:
                        old[index] = a
                kept = _retired(backend, create=False)   # an instance registered again
                a = kept.pop(index, None) if kept else None   # takes its own back
                plug = sys.modules.get("accelrt.memory._pluggable")   # change_current_allocator
                if a is None and plug is not None:
                    a = plug._make_allocator(backend, index)
                if a is None and _wants_pool(cfg, backend, index):
                    from ._malloc_async import MallocAsyncAllocator   # (it imports this module)
                    a = MallocAsyncAllocator(backend, index, cfg)
                if a is None:   # (it warns below, without the lock: warn=False)
                    a = DeviceCachingAllocator(backend, index, cfg, warn=False)
                # keyed by the device's one _Key object (a dict keeps its first key): a
                # factory's lookup with its Site's key then finds it by identity
                _allocators[_key_of(backend.name, index)] = a
        latest = get_config()
        if latest is not cfg:  # settings changed while it was being created
            a.set_config(latest)
        else:
            a.warn_if_fallback()
    return a


def peek_allocator(name: str, index: int) -> DeviceCachingAllocator | None:
    """The allocator of ``name:index`` if it was created, else ``None``.

    Example::

        >>> from accelrt.memory._registry import peek_allocator
        >>> peek_allocator("nosuchbackend", 0) is None
        True
    """
    return _allocators.get((name, index))


def empty_backend_cache(backend: Backend) -> None:
    """Release the unused cached memory of every started device of ``backend``, as PyTorch's
    ``emptyCache`` empties the allocator of every device (``empty_cache()``, the device
    modules' ``empty_cache()``, a graph's capture entry).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._registry import empty_backend_cache
        >>> empty_backend_cache(get_backend("cpu"))
    """
    for i in range(backend.device_count()):
        a = peek_allocator(backend.name, i)
        if a is not None:
            a.empty_cache()


def all_allocators() -> list[DeviceCachingAllocator]:
    """Every allocator created so far."""
    with _lock:
        return list(_allocators.values())


def _forget_backend(name: str) -> None:
    """Called by the backend registry after ``name`` was unregistered or registered again
    (:func:`accelrt.backends.on_change`): the allocators of every instance of ``name`` but the
    one registered now leave the registry, kept by their instance (:func:`_retired`) until it
    is collected or registered again. An array of the old instance holds the allocator it came
    from and frees into it."""
    with _lock:
        current = _backend_registry._instances.get(name)
        stale = [key for key, a in _allocators.items()
                 if key[0] == name and a._b is not current]
        for key in stale:
            a = _allocators.pop(key)
            kept = _retired(a._b)
            if kept is not None:
                kept[key[1]] = a


_backend_registry.on_change(_forget_backend)


def _retired(backend: Backend, create: bool = True) -> dict[int, DeviceCachingAllocator] | None:
    """The allocators of ``backend`` that left the registry (device index to allocator),
    kept in the instance's own attributes so that they live exactly as long as it does (a
    table of the registry's would keep every old instance alive); ``None`` for an instance
    without a ``__dict__`` (its allocators then go when their arrays do), or that has none
    and ``create`` is false."""
    try:
        attrs = vars(backend)
    except TypeError:
        return None
    kept: dict[int, DeviceCachingAllocator] | None = (
        attrs.setdefault(_RETIRED, {}) if create else attrs.get(_RETIRED))
    return kept


_RETIRED = "_accelrt_retired_allocators"


def _retire_after_fork(in_child: bool) -> None:
    """After a ``fork`` (every allocator's lock held by the forking thread): where the
    backend's memory stays shared with the child, each process stops handing out the segments
    of the fork's moment (``_pools.retire_segments``), as CUDA's allocator is per process; the
    arrays in them keep working in both."""
    for a in list(_allocators.values()):
        if a._blocks and a._b.capabilities(a._index).fork_shares_memory:
            retire_segments(a)


after_fork_locked(_retire_after_fork)


def _wants_pool(cfg: AllocatorConfig, backend: Backend, index: int) -> bool:
    """True when ``cfg`` selects the stream-ordered pool for ``backend``'s device ``index``
    (``backend:cudaMallocAsync`` on a device that has one)."""
    return (cfg.backend != "native"
            and backend.capabilities(index).stream_ordered_memory)


def _open_allocators() -> list[DeviceCachingAllocator]:
    """The allocators whose backend instance is not closed (one that is serves nothing, so a
    new setting neither concerns nor reaches it)."""
    return [a for a in all_allocators() if not a._b.closed]


def _check_config_for_all(cfg: AllocatorConfig) -> None:
    from .. import _backend
    for a in all_allocators():
        # (the allocators of an unregistered or replaced backend instance serve nothing new)
        if (a.allocator_backend in ("native", "cudaMallocAsync")
                and _backend._instances.get(a._name) is a._b):
            want = "cudaMallocAsync" if _wants_pool(cfg, a._b, a._index) else "native"
            if want != a.allocator_backend:
                raise ValueError(
                    f"Allocator backend parsed at runtime != allocator backend parsed at load "
                    f"time: the allocator of {a._name}:{a._index} already runs backend:"
                    f"{a.allocator_backend}, which cannot change in a process; set "
                    f"backend:{cfg.backend} in ACCELRT_ALLOC_CONF before the first allocation")


def _apply_config_to_all(cfg: AllocatorConfig) -> None:
    """``cfg`` to every open allocator, without the fallback warnings: the caller holds
    ``_config._set_lock``, and a ``showwarning`` hook may change the settings again (it would
    wait for that lock forever); :func:`_warn_fallbacks` warns once the lock is released."""
    for a in _open_allocators():
        a.configure(cfg)


def _warn_fallbacks() -> None:
    """The fallback warning of each open allocator that asks for expandable segments on a
    device without virtual memory (once per backend); call it with no lock held, after every
    allocator took the settings.

    A warnings filter (``-W error``) or a ``showwarning`` hook may raise: every backend's
    warning is still issued (each is marked as warned when issued), and the first exception
    is raised once all were, with the later ones' messages as its notes (Python 3.11+). So
    one call raises for all of them, as PyTorch's once-per-process warning raises once,
    and a later, unrelated call does not raise for a backend this one skipped."""
    first: BaseException | None = None
    for a in _open_allocators():
        try:
            a.warn_if_fallback()
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the other backends
            if first is None:
                first = exc
            elif hasattr(first, "add_note"):
                first.add_note(f"also: {exc}")
    if first is not None:
        raise first

