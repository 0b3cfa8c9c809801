"""The memory functions of a device module (``torch.cuda.memory``): the caching allocator's
statistics and control, pluggable allocators, snapshots and history, the pinned host pool, and
the ``memory`` submodule that carries them. Each function asks :mod:`accelrt.memory` for the
device of the module's backend; where the backend cannot be used, the statistics read ``0``/
``{}`` and the cache functions do nothing, as in PyTorch.

Example::

    >>> import accelrt as acc
    >>> acc.cpu.memory.memory_allocated is not None, acc.cpu.memory_reserved() >= 0
    (True, True)
"""

from __future__ import annotations

import collections
import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from .. import _device as _dev
from .._errors import AcceleratorTypeError, OutOfMemoryError, type_shown
from ..memory import _pluggable
from ..memory._history_forms import _torch_record_memory_history
from ..memory._stats import nest_host_stats, nest_stats
from ._args import index_of, typed
from ._base import ModuleBase, TypedMemoryModule

if TYPE_CHECKING:
    import os

    from .._stream import Stream
    from .._typing import DeviceLike
    from ..memory import MemPool as _MemPool
    from ..memory._allocator import DeviceCachingAllocator
    from ..memory._host import HostCachingAllocator

__all__ = ["MemoryFunctions", "MemoryModule"]


def _binding_str(value: object, what: str, hint: str = "") -> str:
    """``value`` as torch 2.15's ``std::string`` binding reads it: a str (a subclass by its
    value) or UTF-8 ``bytes``; anything else raises ``TypeError`` ("{what}, got int{hint}"),
    bytes that are not UTF-8 ``UnicodeDecodeError`` (a ``ValueError``)."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    raise TypeError(f"{what}, got {type_shown(value)}{hint}")


@contextlib.contextmanager
def _caching_disabled(dm: MemoryFunctions) -> Iterator[None]:
    """:meth:`DeviceModule.caching_allocator_disabled`."""
    from ..memory._allocator import caching_enabled
    prev = caching_enabled(dm.name)
    dm.caching_allocator_enable(False)
    try:
        yield
    finally:
        dm.caching_allocator_enable(prev)


class MemoryFunctions(ModuleBase):
    """``torch.cuda.memory``'s functions bound to one backend (a part of
    :class:`~accelrt._runtime.DeviceModule`).

    Example::

        >>> import accelrt as acc
        >>> acc.backends.device_module("cpu").memory_allocated(0) >= 0
        True
    """

    #: ``torch.cuda.OutOfMemoryError`` (the one :class:`accelrt.OutOfMemoryError`).
    OutOfMemoryError = OutOfMemoryError
    #: ``torch.cuda.memory.CUDAPluggableAllocator`` (:class:`accelrt.memory.PluggableAllocator`).
    CUDAPluggableAllocator = _pluggable.PluggableAllocator
    PluggableAllocator = _pluggable.PluggableAllocator

    @property
    def MemPool(self) -> type[_MemPool]:  # noqa: N802 - torch.cuda.MemPool's name
        """:class:`accelrt.memory.MemPool` (pools are per device; pass a device of this
        backend to ``use_mem_pool``).

        Example::

            >>> import accelrt as acc
            >>> acc.backends.device_module("cpu").MemPool is acc.memory.MemPool
            True
        """
        from ..memory import MemPool
        return MemPool

    @staticmethod
    def get_allocator_settings() -> str:
        """The process-wide allocator settings (:func:`accelrt.memory.get_allocator_settings`).

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.backends.device_module("cpu").get_allocator_settings(), str)
            True
        """
        from ..memory import get_allocator_settings
        return get_allocator_settings()

    @staticmethod
    def set_allocator_settings(settings: str) -> None:
        """Change the process-wide allocator settings
        (:func:`accelrt.memory.set_allocator_settings`).

        Example::

            >>> import accelrt as acc
            >>> m = acc.backends.device_module("cpu")
            >>> m.set_allocator_settings(m.get_allocator_settings())
        """
        from ..memory import set_allocator_settings
        set_allocator_settings(settings)

    # ------------------------------------------------------------------ helpers
    def _stat(self, device: DeviceLike, read: Callable[[DeviceCachingAllocator], int]) -> int:
        """``read(allocator)`` of a device, ``0`` before its first allocation and where the
        backend cannot be used (``read`` calls the method on the object: allocators of other
        policies, e.g. ``MallocAsyncAllocator``, override it)."""
        a = self._peek(device)
        return 0 if a is None else read(a)

    def _reset(self, device: DeviceLike,
               reset: Callable[[DeviceCachingAllocator], None]) -> None:
        """``reset(allocator)`` of a device if it was started (the device is checked, and the
        backend must be usable)."""
        self._resolve(device)
        a = self._peek(device)
        if a is not None:
            reset(a)

    def _host_pool(self) -> HostCachingAllocator | None:
        """The backend's pinned host pool if it was started (``None`` where the backend
        cannot be used: torch 2.15's host statistics read ``{}`` there, its resets do
        nothing)."""
        from ..memory import _host
        if self._usable() is None:
            return None
        return _host.peek_host_allocator(self.name)

    def _reset_host_pool(self, reset: Callable[[HostCachingAllocator], None]) -> None:
        """``reset(pool)`` on the backend's pinned host pool if it was started."""
        pool = self._host_pool()
        if pool is not None:
            reset(pool)

    def _indexed(self, device: DeviceLike) -> _dev.device:
        """The device of a ``device`` argument that torch reads with ``_get_device_index(device)``
        (``caching_allocator_alloc``, the memory fraction, ``use_mem_pool``): ``None`` is the
        current device, and a device without an index (``"cuda"``) is torch's ``ValueError``
        where the statistics take it for the current device."""
        d = typed(self.name, device)
        if isinstance(d, _dev.device) and d.index is None:
            raise ValueError(f"Expected a {self.name} device with a specified index or an "
                             f"integer, but got:{device} (pass {self.name}:0, or None for the "
                             "current device)")
        return self._device(d)

    # ------------------------------------------------------------------ memory statistics
    def memory_stats(self, device: DeviceLike = None) -> collections.OrderedDict[str, int]:
        """The allocator statistics of a device (PyTorch's flat keys, sorted); empty before
        the first allocation and where the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.memory_stats(), dict)
            True
        """
        a = self._peek(device)
        return collections.OrderedDict() if a is None else a.sorted_stats()

    def memory_stats_as_nested_dict(self, device: DeviceLike = None) -> dict[str, Any]:
        """:meth:`memory_stats` as nested dicts; ``{}`` before the first allocation and where
        the backend cannot be used.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.memory_stats_as_nested_dict(), dict)
            True
        """
        return nest_stats(self.memory_stats(device))

    def memory_allocated(self, device: DeviceLike = None) -> int:
        """Bytes handed out by the caching allocator on a device (0 where the backend cannot
        be used); :meth:`max_memory_allocated` is its peak.

        Example::

            >>> import accelrt as acc
            >>> 0 <= acc.cpu.memory_allocated() <= acc.cpu.max_memory_allocated()
            True
        """
        return self._stat(device, lambda a: a.memory_allocated())

    def max_memory_allocated(self, device: DeviceLike = None) -> int:
        """Peak of :meth:`memory_allocated` (0 where the backend cannot be used)."""
        return self._stat(device, lambda a: a.max_memory_allocated())

    def memory_reserved(self, device: DeviceLike = None) -> int:
        """Bytes the caching allocator holds from a device (0 where the backend cannot be
        used); :meth:`max_memory_reserved` is its peak.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.memory_allocated() <= acc.cpu.memory_reserved() <= acc.cpu.max_memory_reserved()
            True
        """
        return self._stat(device, lambda a: a.memory_reserved())

    def max_memory_reserved(self, device: DeviceLike = None) -> int:
        """Peak of :meth:`memory_reserved` (0 where the backend cannot be used)."""
        return self._stat(device, lambda a: a.max_memory_reserved())

    def _deprecated(self, old: str, new: str) -> None:
        """The ``FutureWarning`` of a deprecated statistics function ``old``, at its caller:
        ``new`` replaces it (a rename, or ``reset_peak_memory_stats``, which resets every
        peak)."""
        if new.startswith("reset_"):
            message = (f"{self.module}.{old} now calls {self.module}.{new}, which resets /all/ "
                       "peak memory stats.")
        else:
            message = f"`{self.module}.{old}` has been renamed to `{self.module}.{new}`"
        warnings.warn(message, FutureWarning, stacklevel=3)

    def memory_cached(self, device: DeviceLike = None) -> int:
        """Deprecated: :meth:`memory_reserved` (emits ``FutureWarning``)."""
        self._deprecated("memory_cached", "memory_reserved")
        return self.memory_reserved(device)

    def max_memory_cached(self, device: DeviceLike = None) -> int:
        """Deprecated: :meth:`max_memory_reserved` (emits ``FutureWarning``)."""
        self._deprecated("max_memory_cached", "max_memory_reserved")
        return self.max_memory_reserved(device)

    def reset_peak_memory_stats(self, device: DeviceLike = None) -> None:
        """Set every ``peak`` statistic of a device to its ``current`` value.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.reset_peak_memory_stats()
            >>> acc.cpu.max_memory_allocated() == acc.cpu.memory_allocated()
            True
        """
        self._reset(device, lambda a: a.reset_peak_stats())

    def reset_accumulated_memory_stats(self, device: DeviceLike = None) -> None:
        """Zero the totals and ``num_*`` counters of a device.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.reset_accumulated_memory_stats()
            >>> acc.cpu.memory_stats().get("num_alloc_retries", 0)
            0
        """
        self._reset(device, lambda a: a.reset_accumulated_stats())

    def reset_max_memory_allocated(self, device: DeviceLike = None) -> None:
        """Deprecated: :meth:`reset_peak_memory_stats`, which resets *all* peaks (emits
        ``FutureWarning``)."""
        self._deprecated("reset_max_memory_allocated", "reset_peak_memory_stats")
        self.reset_peak_memory_stats(device)

    def reset_max_memory_cached(self, device: DeviceLike = None) -> None:
        """Deprecated: :meth:`reset_peak_memory_stats`, which resets *all* peaks (emits
        ``FutureWarning``)."""
        self._deprecated("reset_max_memory_cached", "reset_peak_memory_stats")
        self.reset_peak_memory_stats(device)

    def memory_summary(self, device: DeviceLike = None, abbreviated: bool = False) -> str:
        """A human-readable table of :meth:`memory_stats` (all zeros where the backend cannot
        be used).

        Example::

            >>> import accelrt as acc
            >>> "memory summary" in acc.cpu.memory_summary()
            True
        """
        from ..memory._summary import format_summary
        d = typed(self.name, device)
        b = self._usable()
        if b is not None:
            index = index_of(b, d)
        elif isinstance(d, _dev.device):
            index = d.index or 0
        else:
            index = max(d or 0, 0)
        return format_summary(self.memory_stats(device), index, self.name, abbreviated)

    def mem_get_info(self, device: DeviceLike = None) -> tuple[int, int]:
        """``(free, total)`` bytes of a device as the device reports them
        (``torch.cuda.mem_get_info``).

        Example::

            >>> import accelrt as acc
            >>> free, total = acc.cpu.mem_get_info()
            >>> 0 <= free <= total
            True
        """
        b, index = self._resolve(device)
        free, total = b.get_memory_info(index)
        return int(free), int(total)

    def get_memory_info(self, device: DeviceLike = None) -> tuple[int, int]:
        """Same as :meth:`mem_get_info` (:func:`accelrt.memory.get_memory_info`'s name).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_memory_info() == acc.cpu.mem_get_info()
            True
        """
        return self.mem_get_info(device)


    # ------------------------------------------------------------------ pluggable allocators
    def change_current_allocator(self, allocator: _pluggable._CUDAAllocator) -> None:
        """Replace this backend's caching allocator by ``allocator`` (a
        :class:`accelrt.memory.PluggableAllocator`; the backend's own, from
        ``memory._get_current_allocator()``, changes nothing) before any allocation:
        ``torch.cuda.memory.change_current_allocator``. See
        :func:`accelrt.memory.change_current_allocator`.

        Raises:
            RuntimeError: an allocator of this backend was already initialised.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_allocator_backend()
            'native'
        """
        from ..memory._pluggable import change_current_allocator
        change_current_allocator(allocator, self.name)

    def get_allocator_backend(self) -> str:
        """``"native"`` (accelrt's caching allocator) or ``"pluggable"`` (replaced by
        :meth:`change_current_allocator`): ``torch.cuda.get_allocator_backend``.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_allocator_backend()
            'native'
        """
        from ..memory._pluggable import _current, get_allocator_backend
        if self._usable() is None:   # (torch 2.15 answers without a device: its default)
            return "pluggable" if self.name in _current else "native"
        return get_allocator_backend(self.name)

    def attach_out_of_memory_observer(
            self, observer: Callable[[int, int, int, int], None]) -> None:
        """Call ``observer(device, alloc, device_allocated, device_free)`` before the caching
        allocator of any device of this backend (started now or later) raises
        :class:`~accelrt.OutOfMemoryError`: PyTorch's public
        ``torch.mtia.attach_out_of_memory_observer``, and what its
        ``torch._C._cuda_attach_out_of_memory_observer`` does for CUDA (which
        ``torch.cuda.memory`` does not wrap). ``alloc`` is the allocation tried,
        ``device_allocated`` the per-process limit or else the device's capacity (PyTorch's
        values), ``device_free`` the device's free memory. See
        :func:`accelrt.memory._oom.attach_out_of_memory_observer`.

        Raises:
            TypeError: ``observer`` is not callable.
            RuntimeError: a pluggable allocator or ``backend:cudaMallocAsync`` replaces the
                caching allocator (PyTorch's "does not yet support
                attachOutOfMemoryObserver").

        Example::

            >>> import accelrt as acc
            >>> from accelrt.backends.cpu import CpuBackend
            >>> acc.backends.register("oomdoc", lambda: CpuBackend(name="oomdoc",
            ...                                                    memory_limit="4MiB"))
            >>> dm = acc.backends.device_module("oomdoc")   # (acc.cpu, acc.cuda alike)
            >>> seen = []
            >>> dm.attach_out_of_memory_observer(lambda *args: seen.append(args))
            >>> try:
            ...     acc.empty((12 << 20,), dtype="uint8", device="oomdoc")
            ... except acc.OutOfMemoryError:
            ...     pass
            >>> seen    # (device, alloc, device_allocated, device_free)
            [(0, 12582912, 4194304, 4194304)]
            >>> acc.backends.unregister("oomdoc")   # (its observers go with it)
        """
        from ..memory._oom import attach_out_of_memory_observer
        attach_out_of_memory_observer(self.name, observer)

    # ------------------------------------------------------------------ memory control
    def empty_cache(self) -> None:
        """Release every unused cached block of every started device of the backend; a no-op
        before any allocation and where the backend cannot be used (as in PyTorch).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.empty_cache()
        """
        from .._stream_callback import refuse
        from ..memory._registry import empty_backend_cache
        refuse("empty_cache")   # (it waits for the streams: not from a host function)
        if self.device_count():     # (0, never an error, where the backend cannot be used)
            empty_backend_cache(self._b())

    def set_per_process_memory_fraction(self, fraction: float,
                                        device: DeviceLike = None) -> None:
        """Cap what the caching allocator may reserve on a device at ``fraction`` of it.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.set_per_process_memory_fraction(1.0)
        """
        from .. import memory
        memory.set_per_process_memory_fraction(fraction, self._indexed(device))

    def get_per_process_memory_fraction(self, device: DeviceLike = None) -> float:
        """The fraction set by :meth:`set_per_process_memory_fraction` (1.0: no cap).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.get_per_process_memory_fraction()
            1.0
        """
        from .. import memory
        return memory.get_per_process_memory_fraction(self._indexed(device))

    def caching_allocator_alloc(self, size: int, device: DeviceLike = None,
                                stream: Stream | int | None = None) -> int:
        """Allocate ``size`` bytes from a device's caching allocator; returns the pointer.

        Example::

            >>> import accelrt as acc
            >>> p = acc.cpu.caching_allocator_alloc(512)
            >>> acc.cpu.caching_allocator_delete(p)
        """
        from .. import memory
        return memory.caching_allocator_alloc(size, self._indexed(device), stream)

    def caching_allocator_delete(self, mem_ptr: int) -> None:
        """Free memory from :meth:`caching_allocator_alloc` (back to the cache).

        Raises:
            TypeError: ``mem_ptr`` is not an int.
            ValueError: ``mem_ptr`` was allocated on another backend's device, did not come
                from ``caching_allocator_alloc``, or was already deleted.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.caching_allocator_delete(acc.cpu.caching_allocator_alloc(64))
        """
        from .. import memory
        owner = memory._raw_owner.get(mem_ptr) if isinstance(mem_ptr, int) else None
        b = getattr(owner, "_b", None)
        if b is not None and b.name != self.name:
            where = f"{b.name}:{getattr(owner, '_index', '?')}"
            raise ValueError(f"pointer {mem_ptr:#x} was allocated on {where}, not on a "
                             f"{self.name} device; free it with "
                             "accelrt.memory.caching_allocator_delete()")
        memory.caching_allocator_delete(mem_ptr)

    def use_mem_pool(self, pool: _MemPool, device: DeviceLike = None
                     ) -> contextlib.AbstractContextManager[None]:
        """Route the calling thread's allocations on a device (the current one by default)
        into ``pool`` (``torch.cuda.use_mem_pool``).

        Example::

            >>> import accelrt as acc
            >>> pool = acc.cpu.MemPool()
            >>> with acc.cpu.use_mem_pool(pool):
            ...     x = acc.zeros(4, device="cpu")
            >>> del x
        """
        from .. import memory
        return memory.use_mem_pool(pool, self._indexed(device))

    # ------------------------------------------------------------------ history, snapshots
    def _snapshot(self, augment_with_fx_traces: bool = False) -> dict[str, Any]:
        from .. import memory
        if self._usable() is None:   # no device: torch 2.15's empty snapshot, no error
            from ..memory._snapshot import build_snapshot
            memory._torch_only("_snapshot", augment_with_fx_traces=augment_with_fx_traces)
            return build_snapshot(None, [], memory._settings_dict(None))
        return memory._snapshot(_dev._type_device(self.name), augment_with_fx_traces)

    def memory_snapshot(self, mempool_id: tuple[int, int] | None = None,
                        include_traces: bool = True) -> list[dict[str, Any]]:
        """The segments of every started device of the backend, sorted by address.

        Args:
            mempool_id: only the segments of this private pool (a ``MemPool.id``);
                ``(0, 0)``, as ``None``: every pool's, as in PyTorch.
            include_traces: torch 2.14's switch for gathering trace entries, which the
                segments never carry (in PyTorch neither): ``False`` returns the same list.

        Raises:
            TypeError: ``mempool_id`` is not a pair of ints or None (its first two items
                are read, as torch 2.15 reads them), or ``include_traces`` is not a bool
                (also a ``RuntimeError`` when an item is no int or the flag no bool,
                as torch's).
            ValueError: an item of ``mempool_id`` is outside the int64 range.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.memory_snapshot(), list)
            True
        """
        from ..memory import _backend_segments
        from ..memory import _check_include_traces, _check_mempool_id
        if self._usable() is None:   # no device: torch 2.15's [] (the arguments checked)
            _check_mempool_id(mempool_id)
            _check_include_traces(include_traces)
            return []
        return cast("list[dict[str, Any]]",
                    _backend_segments(self._b(), mempool_id, include_traces))

    def dump_snapshot(self, filename: str | os.PathLike[str] = "dump_snapshot.pickle",
                      augment_with_fx_traces: bool = False) -> None:
        """Pickle the backend's full memory snapshot (every device) to ``filename``
        (PyTorch's ``_dump_snapshot``; ``augment_with_fx_traces=True`` is a ``ValueError``:
        accelrt runs no torch.fx code).

        Example::

            >>> import accelrt as acc, os, tempfile
            >>> with tempfile.TemporaryDirectory() as d:
            ...     acc.cpu.dump_snapshot(os.path.join(d, "snap.pickle"))
        """
        from ..memory._snapshot import dump_snapshot
        dump_snapshot(filename, self._snapshot(augment_with_fx_traces))

    def record_memory_history(self, enabled: str | bool | None = "all",
                              context: str | None = "all", stacks: str = "all",
                              max_entries: int = sys.maxsize, device: DeviceLike = None,
                              clear_history: bool = False, compile_context: bool = False,
                              global_record_annotations: bool = False,
                              skip_actions: list[str] | None = None,
                              record_pinned_host_memory: bool = False,
                              record_cuda: bool = True) -> None:
        """:func:`accelrt.memory.record_memory_history` on the backend's devices; ``device=None``
        means every device of the backend.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.record_memory_history(max_entries=100)
            >>> acc.cpu.record_memory_history(None)
        """
        from .. import memory
        memory._torch_only(compile_context=compile_context,
                           global_record_annotations=global_record_annotations)
        memory._device_history_only(record_pinned_host_memory, record_cuda)
        if device is not None:
            targets = [self._device(device)]
        else:
            targets = [_dev._device_obj(self.name, i) for i in range(self._b().device_count())]
        for d in targets:
            memory.record_memory_history(enabled, context, stacks, max_entries, d,
                                         clear_history, compile_context,
                                         global_record_annotations, skip_actions)

    # ------------------------------------------------------------------ pinned host pool
    def empty_host_cache(self) -> None:
        """Return the backend's cached pinned host blocks to the OS (a no-op before the first
        pinned allocation and where the backend cannot be used).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.empty_host_cache()
        """
        from ..memory import _host
        pool = _host.peek_host_allocator(self.name)
        if pool is not None:
            pool.empty_cache()

    def host_memory_stats(self) -> collections.OrderedDict[str, int]:
        """Statistics of the backend's pinned host pool (flat, sorted): ``{}`` before the
        backend is initialised (``is_initialized()``), then every key, at 0 until the first
        pinned allocation, as ``torch.cuda.host_memory_stats`` once CUDA is initialised.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.host_memory_stats(), dict)
            True
        """
        pool = self._host_pool()
        if pool is not None:
            return collections.OrderedDict(sorted(pool.stats().items()))
        from ..memory._host import zero_stats
        if any(name == self.name for name, _ in list(_dev._initialized)):
            return collections.OrderedDict(sorted(zero_stats().items()))
        return collections.OrderedDict()

    def reset_peak_host_memory_stats(self) -> None:
        """Set every ``peak`` of :meth:`host_memory_stats` to its ``current`` value.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.reset_peak_host_memory_stats()
            >>> stats = acc.cpu.host_memory_stats()
            >>> stats.get("active_bytes.peak", 0) == stats.get("active_bytes.current", 0)
            True
        """
        self._reset_host_pool(lambda pool: pool.reset_peak_stats())

    def reset_accumulated_host_memory_stats(self) -> None:
        """Zero the totals, call counts and durations of :meth:`host_memory_stats`.

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.reset_accumulated_host_memory_stats()
            >>> acc.cpu.host_memory_stats().get("num_host_alloc", 0)
            0
        """
        self._reset_host_pool(lambda pool: pool.reset_accumulated_stats())

    # ------------------------------------------------------------------ torch 2.14: memory,
    # monitoring and profiling surface (issue 23 §3; kept together to ease merges)
    def caching_allocator_enable(self, value: bool = True) -> None:
        """Turn the caching allocator of every device of the backend on or off
        (``torch.cuda.caching_allocator_enable``). While it is off, each allocation comes
        straight from the backend at its exact size and each free of one gives it back at once
        (after the work of the streams that used it), as PyTorch's uncached path: neither
        shows in the statistics, snapshots or history, which stay PyTorch-exact for what the
        cache served. Blocks cached before stay cached (``empty_cache`` releases them).

        Raises:
            TypeError: ``value`` is not a bool (also a ``RuntimeError``, as torch 2.15's
                "cudaCachingAllocator_enable expects a bool, but got int").

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.caching_allocator_enable(False)
            >>> x = acc.zeros(256, device="cpu")    # not counted in memory_allocated()
            >>> del x
            >>> acc.cpu.caching_allocator_enable(True)
        """
        if not isinstance(value, bool):   # (torch 2.15: a RuntimeError, in these words)
            raise AcceleratorTypeError(f"cudaCachingAllocator_enable expects a bool, but got "
                                       f"{type_shown(value)} (caching_allocator_enable() "
                                       "takes True or False)")
        from ..memory._allocator import set_caching
        set_caching(self.name, value)

    def caching_allocator_disabled(self) -> contextlib.AbstractContextManager[None]:
        """Context manager that turns the caching allocator off and restores its previous
        state on exit (``torch.cuda.caching_allocator_disabled``); see
        :meth:`caching_allocator_enable`.

        Example::

            >>> import accelrt as acc
            >>> before = acc.cpu.memory_allocated()
            >>> with acc.cpu.caching_allocator_disabled():
            ...     x = acc.zeros(256, device="cpu")
            ...     acc.cpu.memory_allocated() == before
            True
            >>> del x
        """
        return _caching_disabled(self)

    def host_memory_stats_as_nested_dict(self) -> dict[str, Any]:
        """:meth:`host_memory_stats` as nested dicts (``torch.cuda``'s name), in torch
        2.14.1's key order (``num_host_alloc``, ``num_host_free``, ``allocations``, ...);
        ``{}`` before the backend is initialised.

        Example::

            >>> import accelrt as acc
            >>> isinstance(acc.cpu.host_memory_stats_as_nested_dict(), dict)
            True
        """
        return nest_host_stats(self.host_memory_stats())


#: ``torch.cuda.memory``'s public names that a :class:`MemoryModule` takes from its device
#: module (those the device module has).
_MEMORY_NAMES = (
    "caching_allocator_alloc", "caching_allocator_delete", "change_current_allocator",
    "empty_cache", "get_allocator_backend", "get_per_process_memory_fraction",
    "host_memory_stats", "list_gpu_processes", "max_memory_allocated", "max_memory_cached",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_cached",
    "memory_reserved", "memory_snapshot", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "reset_accumulated_host_memory_stats", "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "reset_peak_host_memory_stats",
    "reset_peak_memory_stats", "set_per_process_memory_fraction", "use_mem_pool", "MemPool",
    "CUDAPluggableAllocator", "OutOfMemoryError", "caching_allocator_disabled",
    "caching_allocator_enable", "host_memory_stats_as_nested_dict",
)


class MemoryModule(TypedMemoryModule):
    """``torch.cuda.memory`` for one device module: ``accelrt.cuda.memory`` (importable as
    ``import accelrt.cuda.memory``) has the device module's memory functions and PyTorch's
    private-but-used ``_record_memory_history``, ``_snapshot``, ``_dump_snapshot`` and
    ``_set_allocator_settings`` (deprecated in PyTorch 2.14, with its ``FutureWarning``), fixed
    to the module's backend.

    Example::

        >>> import accelrt as acc
        >>> acc.cpu.memory._record_memory_history(max_entries=100)
        >>> sorted(acc.cpu.memory._snapshot())[:2]
        ['allocator_settings', 'device_traces']
        >>> acc.cpu.memory._record_memory_history(None)
    """

    def __init__(self, dm: MemoryFunctions) -> None:
        super().__init__(f"{dm.module}.memory", f"``torch.cuda.memory`` of {dm.module}.")
        self._dm = dm
        for name in _MEMORY_NAMES:
            if hasattr(dm, name):
                setattr(self, name, getattr(dm, name))
        #: ``torch.cuda.memory._record_memory_history``: :meth:`MemoryFunctions.
        #: record_memory_history`, or PyTorch's legacy form when the first argument is a bool.
        self._record_memory_history = _torch_record_memory_history(dm.record_memory_history)

    def _snapshot(self, device: DeviceLike = None,   # type: ignore[override]  # torch's,
                  augment_with_fx_traces: bool = False   # not the device module's helper
                  ) -> dict[str, Any]:
        """``torch.cuda.memory._snapshot``: the backend's full snapshot (every device, as
        PyTorch's; ``device`` is checked to be one of the backend's)."""
        if device is not None:
            self._dm._device(device)
        return self._dm._snapshot(augment_with_fx_traces)

    def _dump_snapshot(self, filename: str | os.PathLike[str] = "dump_snapshot.pickle",
                       augment_with_fx_traces: bool = False) -> None:
        """``torch.cuda.memory._dump_snapshot``: pickle :meth:`_snapshot` to ``filename``."""
        self._dm.dump_snapshot(filename, augment_with_fx_traces)

    #: ``torch.cuda.memory._CUDAAllocator``: the wrapper of an allocator object that
    #: :meth:`_get_current_allocator` returns (:class:`PluggableAllocator` is one).
    _CUDAAllocator = _pluggable._CUDAAllocator

    def _get_current_allocator(self) -> _pluggable._CUDAAllocator:
        """``torch.cuda.memory._get_current_allocator``: the backend's allocator, wrapped
        (:func:`accelrt.memory._pluggable.get_current_allocator`): its ``allocator()`` is the
        :class:`PluggableAllocator` that :meth:`change_current_allocator` swapped in, or the
        backend's own allocator (the same object at every call). It starts no allocator.

        Example::

            >>> import accelrt as acc
            >>> cur = acc.cpu.memory._get_current_allocator()
            >>> cur.allocator() is acc.cpu.memory._get_current_allocator().allocator()
            True
        """
        return _pluggable.get_current_allocator(self._dm.name)

    def _set_allocator_settings(self, env: str) -> None:
        """``torch.cuda.memory._set_allocator_settings``, deprecated in PyTorch (as here: it
        warns ``FutureWarning``): the device module's :meth:`set_allocator_settings`."""
        warnings.warn(f"{self._dm.module}.memory._set_allocator_settings is deprecated. Use "
                      f"{self._dm.module}.set_allocator_settings instead.", FutureWarning,
                      stacklevel=2)
        self._dm.set_allocator_settings(env)

    def _memory_metadata_supported(self) -> bool:
        """``torch.cuda.memory._memory_metadata_supported``: True while the backend's
        allocator is the caching allocator (``get_allocator_backend() == "native"``), the only
        one that records metadata."""
        return bool(self._dm.get_allocator_backend() == "native")

    def _set_memory_metadata(self, metadata: str | dict[str, Any]) -> None:
        """``torch.cuda.memory._set_memory_metadata``: the ``user_metadata`` of the history
        trace entries that the calling thread's allocations and frees on this backend record
        from now on (``""`` clears it); thread-local, for every device of the backend. It shows
        in :meth:`_snapshot`'s ``device_traces`` only, never on segments, blocks or
        statistics; with an allocator other than the caching one it is ignored.

        A dict is stored as its compact JSON (``json.dumps(d, separators=(",", ":"))``), as
        in PyTorch 2.15: trace entries and :meth:`_get_memory_metadata` give that string, and
        passing it back restores the same metadata.

        Raises:
            TypeError: ``metadata`` is neither a str (or UTF-8 ``bytes``, which PyTorch's
                ``std::string`` binding takes too) nor a dict, or the dict holds a value
                JSON cannot encode (raised now, even when the metadata would be ignored).
            ValueError: the dict refers to itself (a circular reference).
        """
        from ..memory._history import set_metadata
        if isinstance(metadata, dict):
            import json
            metadata = json.dumps(metadata, separators=(",", ":"))
        text = _binding_str(metadata, "memory metadata must be a str or a dict",
                            "; pass '' to clear it")
        self._dm._b()   # (no device: BackendUnavailableError, as torch 2.15's CUDA error)
        if self._memory_metadata_supported():
            set_metadata(self._dm.name, text)

    def _get_memory_metadata(self) -> str:
        """``torch.cuda.memory._get_memory_metadata``: the calling thread's metadata of this
        backend (``""`` when none is set, and always with an allocator other than the caching
        one)."""
        from ..memory._history import get_metadata
        self._dm._b()   # (no device: BackendUnavailableError, as torch 2.15's CUDA error)
        if not self._memory_metadata_supported():
            return ""
        return get_metadata(self._dm.name)

    def _native_allocators(self) -> list[Any]:
        """The started caching allocators of the backend's devices (none unless the backend
        uses the caching allocator, the only one that keeps per-allocation stacks)."""
        b = self._dm._usable()
        if b is None or not self._memory_metadata_supported():
            return []
        from ..memory._allocator import peek_allocator
        found = [peek_allocator(b.name, i) for i in range(b.device_count())]
        return [a for a in found if a is not None]

    def _allocation_traceback(self, data_ptr: int) -> list[dict[str, Any]] | None:
        """``torch.cuda.memory._allocation_traceback`` (torch 2.15): the stack (frame dicts
        ``filename``/``line``/``name``, innermost first) recorded when the live allocation that
        starts at ``data_ptr`` (an array's ``data_ptr()``) was made, or ``None`` when no live
        allocation of the backend's caching allocators starts there or none was recorded
        (history off, or ``context=None``; as PyTorch, an address inside an allocation finds
        nothing).

        Raises:
            TypeError: ``data_ptr`` is not an int (PyTorch: "an integer is required").
            OverflowError: ``data_ptr`` is 2**64 or more (PyTorch's pointer conversion).

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.memory._record_memory_history(context="state")
            >>> x = acc.zeros(256, device="cpu")
            >>> acc.cpu.memory._allocation_traceback(x.data_ptr())[0]["name"]
            '<module>'
            >>> acc.cpu.memory._record_memory_history(None)
        """
        from ..memory._history import allocation_frames
        if not isinstance(data_ptr, int):
            raise TypeError(f"an integer is required: _allocation_traceback() takes the int "
                            f"address of an allocation (data_ptr()), got {type_shown(data_ptr)}")
        ptr = int(data_ptr)
        if ptr >= 1 << 64:
            raise OverflowError(f"Python int too large to convert to a pointer: {ptr:#x} is "
                                "2**64 or more; pass an array's data_ptr()")
        for a in self._native_allocators():
            live, frames = allocation_frames(a, ptr)
            if live:
                return frames
        return None

    def _annotate_tensor(self, tensor: Any, metadata: str) -> None:
        """``torch.cuda.memory._annotate_tensor`` (torch 2.15): while history is recorded,
        add an ``annotate`` trace entry for the allocation of ``tensor`` (an
        :class:`accelrt.Array` of this backend): its ``addr`` is the allocation's address,
        its ``user_metadata`` is ``metadata`` and its ``frames`` the caller's stack (from
        ``context="alloc"`` up). Nothing is recorded while history is off, with
        ``skip_actions=["annotate"]``, or with an allocator other than the caching one.

        Raises:
            TypeError: ``tensor`` is not an :class:`accelrt.Array` (also an
                ``AttributeError``, as PyTorch's ``tensor.is_cuda``) or ``metadata`` is not
                a str.
            ValueError: the array is on another backend's device (PyTorch: "expected a CUDA
                tensor, got device cpu").
            RuntimeError: no live allocation of the caching allocator starts at the array's
                memory (an empty array, or memory borrowed from another library), as
                PyTorch's "annotateMemory: no live allocation found at pointer ...".

        Example::

            >>> import accelrt as acc
            >>> acc.cpu.memory._record_memory_history()
            >>> x = acc.zeros(256, device="cpu")
            >>> acc.cpu.memory._annotate_tensor(x, "packed for backward")
            >>> acc.cpu.memory._snapshot()["device_traces"][0][-1]["user_metadata"]
            'packed for backward'
            >>> acc.cpu.memory._record_memory_history(None)
        """
        from .._array import Array
        from .._errors import AcceleratorValueError, _WrongKindError
        from ..memory._allocator import peek_allocator
        from ..memory._history import annotate_allocation
        if not isinstance(tensor, Array):
            raise _WrongKindError(f"_annotate_tensor() takes an accelrt.Array, got "
                                  f"{type_shown(tensor)}")
        if tensor._b.name != self._dm.name:
            raise ValueError(f"expected a {self._dm.name} array, got device "
                             f"{tensor._b.name}:{tensor._index}")
        metadata = _binding_str(metadata, "_annotate_tensor() metadata must be a str")
        ptr = tensor.data_ptr()
        if not self._memory_metadata_supported():
            return   # (PyTorch: ignored by the other allocator backends)
        a = peek_allocator(tensor._b.name, tensor._index)
        if a is None or not annotate_allocation(a, ptr, metadata):
            shown_ptr = f"{ptr:#x}" if ptr else "0"
            raise AcceleratorValueError(
                f"annotateMemory: no live allocation found at pointer {shown_ptr} (the "
                f"array's memory is not an allocation of the {tensor._b.name}:"
                f"{tensor._index} caching allocator: an empty array, or memory borrowed from "
                "another library); annotate an array that accelrt allocated")
