"""Builds device-specific modules (``accelrt.cpu``, ``accelrt.cuda``): the device-agnostic
functions bound to one backend.

A device-specific module calls ``__all__ = export_bound("cpu", globals())`` and gets
``is_available``, ``device_count``, ``unavailable_reason``, ``current_device_index``,
``set_device_index``, ``device_index``, ``current_stream``, ``set_stream``, ``synchronize``,
``get_device_properties``, ``get_device_capability``, ``Stream``, ``Event``, and the functions of
:mod:`accelrt.memory`, all fixed to that backend. An ``int`` device means an index of that
backend, not of the current accelerator. Memory functions with a ``device`` argument default to
the backend's current device; those without one act on the backend as a whole:
``empty_cache`` (every started device), ``caching_allocator_delete`` (only pointers of that
backend), ``memory_snapshot`` and ``dump_snapshot`` (every device), ``empty_host_cache`` and
``host_memory_stats`` and its resets (the backend's pinned host pool); ``record_memory_history``
with ``device=None`` records on every device of the backend. ``MemPool``, ``use_mem_pool``
(bound) and the process-wide ``get_allocator_settings``/``set_allocator_settings`` are
re-exported.

``is_available``, ``device_count`` and ``unavailable_reason`` never raise, and ``empty_cache``
and ``empty_host_cache`` are no-ops where the backend cannot be used (nothing was cached, as in
PyTorch); everything else raises :class:`~accelrt.BackendUnavailableError` (with the reason)
when the backend cannot be used here. The generated examples of a backend other than ``cpu``
run only where it is available, so they are valid on every machine.

Example::

    >>> from accelrt._specific import export_bound
    >>> ns = {"__name__": "mycpu"}
    >>> names = export_bound("cpu", ns)
    >>> ns["device_count"]() >= 1, ns["current_stream"]().device_type
    (True, 'cpu')
"""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
import sys
from collections.abc import Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from . import _backend, _device, _event, _stream
from ._device import _get_device, _tls

if TYPE_CHECKING:
    import os

__all__ = ["export_bound"]


def _fix(fn: Any, module: str, name: str, doc: str) -> Any:
    fn.__module__ = module
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def _bind_device_arg(fn: Callable[..., Any], convert: Callable[[Any], Any]) -> Callable[..., Any] | None:
    """Wrap ``fn`` so that its ``device`` argument is converted (``None`` -> this backend's
    current device); ``None`` if ``fn`` has no ``device`` parameter."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    pos = next((i for i, p in enumerate(params) if p.name == "device"), None)
    if pos is None:
        return None
    kind = params[pos].kind
    positional = kind in (inspect.Parameter.POSITIONAL_ONLY,
                          inspect.Parameter.POSITIONAL_OR_KEYWORD)
    keyword = kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)

    @functools.wraps(fn)
    def bound(*args: Any, **kwargs: Any) -> Any:
        if positional and len(args) > pos:
            args = (*args[:pos], convert(args[pos]), *args[pos + 1:])
        elif keyword and "device" in kwargs:
            kwargs["device"] = convert(kwargs["device"])
        elif keyword:
            kwargs["device"] = convert(None)
        elif len(args) == pos:
            args = (*args, convert(None))
        return fn(*args, **kwargs)

    return bound


def export_bound(backend_name: str, namespace: MutableMapping[str, Any]) -> list[str]:
    """Define in ``namespace`` the device-agnostic API bound to backend ``backend_name``.

    Args:
        backend_name: a registered backend name, e.g. ``"cpu"`` (it need not be usable).
        namespace: a module's ``globals()``; names already defined there are kept.

    Returns:
        the sorted names it defined, for the module's ``__all__``.

    Raises:
        TypeError: ``backend_name`` is not a string.

    Example::

        >>> from accelrt._specific import export_bound
        >>> ns = {"__name__": "mycpu"}
        >>> "current_stream" in export_bound("cpu", ns)
        True
    """
    if not isinstance(backend_name, str):
        raise TypeError(f"backend_name must be a str, got {type(backend_name).__name__}")
    name = backend_name
    module = str(namespace.get("__name__", f"accelrt.{name}"))
    short = module.rpartition(".")[2]
    get = _backend.get_backend

    def _b() -> _backend.Backend:
        return get(name)

    def _convert(device: Any) -> _device.device:
        """A device of this backend for ``device`` (``None`` -> its current device)."""
        _b()
        if device is None:
            return _device._type_device(name)
        if isinstance(device, int) and not isinstance(device, bool):
            if device < 0:
                raise ValueError(f"device index must not be negative, got {device}")
            return _device._device_obj(name, device)
        d = _device.device(device) if isinstance(device, str) else device
        if not isinstance(d, _device.device):
            raise TypeError(f"expected a device, int, str or None, got {type(device).__name__}")
        if d.type != name:
            raise ValueError(f"{d.type} is not a {name} device; {module} only takes {name} "
                             "devices (use accelrt's device-agnostic functions for others)")
        return d

    defs: dict[str, Any] = {}

    def ex(*steps: tuple[str, str | None]) -> str:
        return _example(name, short, steps)

    def is_available() -> bool:
        try:
            return _backend.unavailable_reason(name) is None
        except Exception:  # noqa: BLE001 - availability probes never raise
            return False

    defs["is_available"] = _fix(is_available, module, "is_available", f"""True if the {name}
    backend is usable here (installed, a driver, at least one device). Never raises and never
    creates a device context.

    Example::

        >>> import accelrt as acc
        >>> isinstance(acc.{short}.is_available(), bool)
        True
    """)

    def device_count() -> int:
        try:
            return get(name).device_count()
        except Exception:  # noqa: BLE001 - an unusable backend has no devices
            return 0

    defs["device_count"] = _fix(device_count, module, "device_count", f"""Number of {name}
    devices (0 if the backend cannot be used). Never raises.

    Example::

        >>> import accelrt as acc
        >>> acc.{short}.device_count() >= 0
        True
    """)

    def unavailable_reason() -> str | None:
        return _backend.unavailable_reason(name)

    defs["unavailable_reason"] = _fix(unavailable_reason, module, "unavailable_reason", f"""Why
    the {name} backend cannot be used here, or ``None`` if it can.

    Example::

        >>> import accelrt as acc
        >>> r = acc.{short}.unavailable_reason()
        >>> r is None or isinstance(r, str)
        True
    """)

    def current_device_index() -> int:
        b = _b()
        return _tls.device.get(b.name, 0)

    defs["current_device_index"] = _fix(current_device_index, module, "current_device_index",
                                        f"""Index of the calling thread's current {name} device.

    Raises:
        BackendUnavailableError: the backend cannot be used here.

    Example::

{ex(("{m}.current_device_index() >= 0", "True"))}
    """)

    def set_device_index(device: Any, /) -> None:
        if isinstance(device, int) and not isinstance(device, bool) and device < 0:
            _b()
            return
        b, index = _get_device(_convert(device) if device is not None else device,
                               optional=False, backend=_b())
        _tls.device[b.name] = index

    defs["set_device_index"] = _fix(set_device_index, module, "set_device_index", f"""Set the
    calling thread's current {name} device. A negative index is a no-op.

    Args:
        device: an index, or a {name} device or string.

    Raises:
        ValueError: the device is of another backend, or has no index.
        IndexError: the index is out of range.

    Example::

{ex(("{m}.set_device_index(0)", None), ("{m}.current_device_index()", "0"))}
    """)

    ex_device_index = ex(("with {m}.device_index(0):\n    i = {m}.current_device_index()", None),
                         ("i", "0"))
    defs["device_index"] = type("device_index", (_device.device_index,), {
        "__slots__": (), "_backend_name": name, "__module__": module,
        "__doc__": f"""Context manager that sets the calling thread's current {name} device
    index and restores the previous one (``None`` or a negative index: no-op).

    Example::

{ex_device_index}
    """})

    def current_stream(device: Any = None, /) -> _stream.Stream:
        b, index = _get_device(device if device is None else _convert(device), backend=_b())
        return _stream._current(b, index)

    defs["current_stream"] = _fix(current_stream, module, "current_stream", f"""The calling
    thread's current stream of a {name} device (the current one by default).

    Example::

{ex(("{m}.current_stream().device_type", repr(name)))}
    """)

    def set_stream(stream: _stream.Stream) -> None:
        if isinstance(stream, _stream.Stream) and stream._b is not _b():
            raise ValueError(f"set_stream() of {module} takes a {name} stream, got a "
                             f"{stream.device_type} stream; use accelrt.set_stream()")
        _stream.set_stream(stream)

    defs["set_stream"] = _fix(set_stream, module, "set_stream", f"""Make a {name} stream
    current on its device and make its device the current {name} device.

    Raises:
        TypeError: ``stream`` is not a Stream.
        ValueError: ``stream`` belongs to another backend.

    Example::

{ex(("{m}.set_stream({m}.current_stream())", None))}
    """)

    def synchronize(device: Any = None, /) -> None:
        b, index = _get_device(device if device is None else _convert(device), backend=_b())
        if _device._is_initialized(b, index):
            b.synchronize(index)

    defs["synchronize"] = _fix(synchronize, module, "synchronize", f"""Wait for all streams of
    a {name} device (the current one by default). A no-op before the device is initialised.

    Example::

{ex(("{m}.synchronize()", None))}
    """)

    def get_device_properties(device: Any = None, /) -> dict[str, Any]:
        return _device.get_device_properties(_convert(device))

    defs["get_device_properties"] = _fix(get_device_properties, module, "get_device_properties",
                                         f"""Properties of a {name} device (``name``,
    ``total_memory``, ``multi_processor_count``, extras).

    Example::

{ex(('{m}.get_device_properties()["total_memory"] > 0', "True"))}
    """)

    def get_device_capability(device: Any = None, /) -> dict[str, Any]:
        return _device.get_device_capability(_convert(device))

    defs["get_device_capability"] = _fix(get_device_capability, module, "get_device_capability",
                                         f"""Capabilities of a {name} device (at least
    ``supported_dtypes``).

    Example::

{ex(('"float32" in {m}.get_device_capability()["supported_dtypes"]', "True"))}
    """)

    defs["Stream"] = type("Stream", (_stream.Stream,), {
        "__slots__": (), "_backend_name": name, "__module__": module,
        "__doc__": f"""A stream of a {name} device: :class:`accelrt.Stream` whose ``device``
    defaults to the current {name} device and whose ``int`` device means a {name} index.

    Example::

{ex(("{m}.Stream().device_type", repr(name)))}
    """})
    defs["Event"] = type("Event", (_event.Event,), {
        "__slots__": (), "_backend_name": name, "__module__": module,
        "__doc__": f"""An event of a {name} device: :class:`accelrt.Event` whose ``device``
    defaults to the current {name} device and whose ``int`` device means a {name} index.

    Example::

{ex(("{m}.Event().query()", "True"))}
    """})

    defs.update(_memory_defs(name, module, ex, _b, _convert, device_count))
    for fname, fn in _memory_functions():
        if fname in defs:
            continue
        bound = _bind_device_arg(fn, _convert)
        if bound is not None:
            bound.__module__ = module
            bound.__doc__ = (f"{fn.__doc__ or ''}\n\n    .. note:: Bound to the {name} backend: "
                             f"``device`` defaults to the current {name} device.\n")
            defs[fname] = bound

    exported = []
    for key, value in defs.items():
        if key not in namespace:
            namespace[key] = value
            exported.append(key)
    return sorted(exported)


#: Backends whose generated examples run unguarded (always usable: the reference backend).
_ALWAYS_AVAILABLE = frozenset({"cpu"})


def _example(name: str, short: str, steps: Sequence[tuple[str, str | None]]) -> str:
    """Doctest text (indented for a generated docstring) running ``steps`` on backend ``name``.

    Each step is ``(source, expected output or None)``; ``{m}`` in a source stands for
    ``acc.<short>``. For a backend that may be missing here, the steps run inside
    ``if acc.<short>.is_available():`` with each expected output turned into an ``assert``, so
    the example is valid (and still checks the results) on every machine.
    """
    mod = f"acc.{short}"
    pad = " " * 8
    lines = [f"{pad}>>> import accelrt as acc"]
    if name in _ALWAYS_AVAILABLE:
        for source, expected in steps:
            first, *rest = source.replace("{m}", mod).split("\n")
            lines.append(f"{pad}>>> {first}")
            lines.extend(f"{pad}... {line}" for line in rest)
            if expected is not None:
                lines.append(f"{pad}{expected}")
        return "\n".join(lines)
    lines.append(f"{pad}>>> if {mod}.is_available():")
    for source, expected in steps:
        source = source.replace("{m}", mod)
        if expected is not None:
            if expected != "True":
                source = f"({source}) == {expected}" if " " in source else \
                    f"{source} == {expected}"
            source = f"assert {source}"
        lines.extend(f"{pad}...     {line}" for line in source.split("\n"))
    return "\n".join(lines)


def _memory_defs(name: str, module: str, ex: Callable[..., str],
                 get_b: Callable[[], _backend.Backend], convert: Callable[[Any], Any],
                 device_count: Callable[[], int]) -> dict[str, Any]:
    """The functions of :mod:`accelrt.memory` without a ``device`` argument (and
    ``record_memory_history``, whose ``None`` device means every device), bound to backend
    ``name``; ``{}`` if :mod:`accelrt.memory` cannot be imported yet."""
    try:
        mem = importlib.import_module("accelrt.memory")
        from .memory import _host
        from .memory._allocator import peek_allocator
        from .memory._snapshot import dump_snapshot as _dump
    except ImportError:
        return {}
    defs: dict[str, Any] = {}

    def _type_device() -> _device.device:
        get_b()
        return _device._type_device(name)

    def empty_cache() -> None:
        for i in range(device_count()):
            a = peek_allocator(name, i)
            if a is not None:
                a.empty_cache()

    defs["empty_cache"] = _fix(empty_cache, module, "empty_cache", f"""Release every unused
    cached block of every started {name} device back to the device. Memory held by live
    allocations is not freed. A no-op before any allocation, and where the backend cannot be
    used (nothing was cached), as in PyTorch.

    Example::

        >>> import accelrt as acc
        >>> acc.{module.rpartition(".")[2]}.empty_cache()
    """)

    def caching_allocator_delete(ptr: int) -> None:
        raw_owner: dict[int, Any] = getattr(mem, "_raw_owner", {})  # pointer -> allocator
        owner = raw_owner.get(ptr) if isinstance(ptr, int) else None
        b = getattr(owner, "_b", None)
        if b is not None and b.name != name:
            where = f"{b.name}:{getattr(owner, '_index', '?')}"
            raise ValueError(f"pointer {ptr:#x} was allocated on {where}, not "
                             f"on a {name} device; free it with "
                             "accelrt.memory.caching_allocator_delete()")
        mem.caching_allocator_delete(ptr)

    defs["caching_allocator_delete"] = _fix(caching_allocator_delete, module,
                                            "caching_allocator_delete", f"""Free memory from
    :func:`caching_allocator_alloc` on a {name} device (back to the cache, not the device).

    Raises:
        TypeError: ``ptr`` is not an int.
        ValueError: ``ptr`` was allocated on another backend's device, did not come from
            ``caching_allocator_alloc``, or was already deleted.

    Example::

{ex(("p = {m}.caching_allocator_alloc(512)", None), ("{m}.caching_allocator_delete(p)", None))}
    """)

    def memory_snapshot(mempool_id: tuple[int, int] | None = None) -> list[dict[str, Any]]:
        segments: list[dict[str, Any]] = mem._snapshot(_type_device())["segments"]
        if mempool_id is None:
            return segments
        want = tuple(mempool_id)
        return [s for s in segments if tuple(s.get("segment_pool_id", (0, 0))) == want]

    defs["memory_snapshot"] = _fix(memory_snapshot, module, "memory_snapshot", f"""The
    segments of every started {name} device, sorted by address (PyTorch's format).

    Args:
        mempool_id: only the segments of this private pool (a ``MemPool.id``).

    Raises:
        BackendUnavailableError: the backend cannot be used here.

    Example::

{ex(("isinstance({m}.memory_snapshot(), list)", "True"))}
    """)

    def dump_snapshot(path: str | os.PathLike[str] = "dump_snapshot.pickle") -> None:
        _dump(path, mem._snapshot(_type_device()))

    ex_dump = ex(("import os, tempfile", None),
                 (("with tempfile.TemporaryDirectory() as d:\n"
                   "    {m}.dump_snapshot(os.path.join(d, 'snap.pickle'))"), None))
    defs["dump_snapshot"] = _fix(dump_snapshot, module, "dump_snapshot", f"""Pickle the full
    memory snapshot of the {name} backend (segments and traces of every device) to ``path``,
    for ``accelrt memory viz`` or PyTorch's visualizer.

    Raises:
        BackendUnavailableError: the backend cannot be used here.

    Example::

{ex_dump}
    """)

    def record_memory_history(enabled: str | bool | None = "all", context: str | None = "all",
                              stacks: str = "all", max_entries: int = sys.maxsize,
                              device: Any = None, clear_history: bool = False,
                              skip_actions: list[str] | None = None) -> None:
        if device is not None:
            targets = [convert(device)]
        else:
            targets = [_device._device_obj(name, i) for i in range(get_b().device_count())]
        for d in targets:
            mem.record_memory_history(enabled, context, stacks, max_entries, d, clear_history,
                                      skip_actions)

    defs["record_memory_history"] = _fix(record_memory_history, module, "record_memory_history",
                                         f"""Start or stop recording allocator history on
    {name} devices: :func:`accelrt.memory.record_memory_history` with ``device=None`` meaning
    every {name} device (an ``int`` device is a {name} index).

    Raises:
        TypeError/ValueError: an argument has a wrong type or value.
        BackendUnavailableError: the backend cannot be used here.

    Example::

{ex(("{m}.record_memory_history(max_entries=1000)", None),
    ("{m}.record_memory_history(None)", None))}
    """)

    def empty_host_cache() -> None:
        pool = _host.peek_host_allocator(name)
        if pool is not None:
            pool.empty_cache()

    defs["empty_host_cache"] = _fix(empty_host_cache, module, "empty_host_cache", f"""Return
    the cached pinned host blocks of the {name} backend to the OS (a no-op before the first
    pinned allocation, and where the backend cannot be used).

    Example::

        >>> import accelrt as acc
        >>> acc.{module.rpartition(".")[2]}.empty_host_cache()
    """)

    def _host_pool() -> Any:
        get_b()
        return _host.peek_host_allocator(name)

    def host_memory_stats() -> collections.OrderedDict[str, int]:
        pool = _host_pool()
        if pool is None:
            return collections.OrderedDict()
        return collections.OrderedDict(sorted(pool.stats().items()))

    defs["host_memory_stats"] = _fix(host_memory_stats, module, "host_memory_stats", f"""The
    statistics of the {name} backend's pinned host pool, flat and key-sorted (the keys of
    :func:`accelrt.memory.host_memory_stats`); empty before the first pinned allocation.

    Raises:
        BackendUnavailableError: the backend cannot be used here.

    Example::

{ex(("isinstance({m}.host_memory_stats(), dict)", "True"))}
    """)

    def reset_peak_host_memory_stats() -> None:
        pool = _host_pool()
        if pool is not None:
            pool.reset_peak_stats()

    defs["reset_peak_host_memory_stats"] = _fix(
        reset_peak_host_memory_stats, module, "reset_peak_host_memory_stats", f"""Set every
    ``peak`` of the {name} backend's :func:`host_memory_stats` to its ``current`` value.

    Raises:
        BackendUnavailableError: the backend cannot be used here.

    Example::

{ex(("{m}.reset_peak_host_memory_stats()", None))}
    """)

    def reset_accumulated_host_memory_stats() -> None:
        pool = _host_pool()
        if pool is not None:
            pool.reset_accumulated_stats()

    defs["reset_accumulated_host_memory_stats"] = _fix(
        reset_accumulated_host_memory_stats, module, "reset_accumulated_host_memory_stats",
        f"""Zero the totals, call counts and durations of the {name} backend's
    :func:`host_memory_stats`.

    Raises:
        BackendUnavailableError: the backend cannot be used here.

    Example::

{ex(("{m}.reset_accumulated_host_memory_stats()", None))}
    """)

    # Not bound to a device: the same objects as in accelrt.memory.
    for shared in ("MemPool", "get_allocator_settings", "set_allocator_settings"):
        obj = getattr(mem, shared, None)
        if obj is not None:
            defs[shared] = obj
    return defs


def _memory_functions() -> list[tuple[str, Callable[..., Any]]]:
    """Public functions of :mod:`accelrt.memory` (none if it cannot be imported yet)."""
    try:
        mem = importlib.import_module("accelrt.memory")
    except ImportError:
        return []
    names = getattr(mem, "__all__", None)
    if names is None:
        names = [n for n in dir(mem) if not n.startswith("_")]
    out: list[tuple[str, Callable[..., Any]]] = []
    for n in names:
        fn = getattr(mem, n, None)
        if inspect.isfunction(fn):
            out.append((n, fn))
    return out
