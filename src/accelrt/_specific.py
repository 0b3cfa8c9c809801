"""Builds device-specific modules (``accelrt.cpu``, ``accelrt.cuda``): the device-agnostic
functions bound to one backend.

A device-specific module calls ``__all__ = export_bound("cpu", globals())`` and gets
``is_available``, ``device_count``, ``unavailable_reason``, ``current_device_index``,
``set_device_index``, ``device_index``, ``current_stream``, ``set_stream``, ``synchronize``,
``get_device_properties``, ``get_device_capability``, ``Stream``, ``Event``, and every function
of :mod:`accelrt.memory` that takes a ``device`` argument, all fixed to that backend. An ``int``
device means an index of that backend, not of the current accelerator.

``is_available``, ``device_count`` and ``unavailable_reason`` never raise; everything else
raises :class:`~accelrt.BackendUnavailableError` (with the reason) when the backend cannot be
used here.

Example::

    >>> from accelrt._specific import export_bound
    >>> ns = {"__name__": "mycpu"}
    >>> names = export_bound("cpu", ns)
    >>> ns["device_count"]() >= 1, ns["current_stream"]().device_type
    (True, 'cpu')
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, MutableMapping
from typing import Any

from . import _backend, _device, _event, _stream
from ._device import _get_device, _tls

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

        >>> import accelrt as acc
        >>> acc.{short}.current_device_index() >= 0
        True
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

        >>> import accelrt as acc
        >>> acc.{short}.set_device_index(0)
        >>> acc.{short}.current_device_index()
        0
    """)

    defs["device_index"] = type("device_index", (_device.device_index,), {
        "__slots__": (), "_backend_name": name, "__module__": module,
        "__doc__": f"""Context manager that sets the calling thread's current {name} device
    index and restores the previous one (``None`` or a negative index: no-op).

    Example::

        >>> import accelrt as acc
        >>> with acc.{short}.device_index(0):
        ...     acc.{short}.current_device_index()
        0
    """})

    def current_stream(device: Any = None, /) -> _stream.Stream:
        b, index = _get_device(device if device is None else _convert(device), backend=_b())
        return _stream._current(b, index)

    defs["current_stream"] = _fix(current_stream, module, "current_stream", f"""The calling
    thread's current stream of a {name} device (the current one by default).

    Example::

        >>> import accelrt as acc
        >>> acc.{short}.current_stream().device_type == {name!r}
        True
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

        >>> import accelrt as acc
        >>> acc.{short}.set_stream(acc.{short}.current_stream())
    """)

    def synchronize(device: Any = None, /) -> None:
        b, index = _get_device(device if device is None else _convert(device), backend=_b())
        if _device._is_initialized(b, index):
            b.synchronize(index)

    defs["synchronize"] = _fix(synchronize, module, "synchronize", f"""Wait for all streams of
    a {name} device (the current one by default). A no-op before the device is initialised.

    Example::

        >>> import accelrt as acc
        >>> acc.{short}.synchronize()
    """)

    def get_device_properties(device: Any = None, /) -> dict[str, Any]:
        return _device.get_device_properties(_convert(device))

    defs["get_device_properties"] = _fix(get_device_properties, module, "get_device_properties",
                                         f"""Properties of a {name} device (``name``,
    ``total_memory``, ``multi_processor_count``, extras).

    Example::

        >>> import accelrt as acc
        >>> acc.{short}.get_device_properties()["total_memory"] > 0
        True
    """)

    def get_device_capability(device: Any = None, /) -> dict[str, Any]:
        return _device.get_device_capability(_convert(device))

    defs["get_device_capability"] = _fix(get_device_capability, module, "get_device_capability",
                                         f"""Capabilities of a {name} device (at least
    ``supported_dtypes``).

    Example::

        >>> import accelrt as acc
        >>> "float32" in acc.{short}.get_device_capability()["supported_dtypes"]
        True
    """)

    defs["Stream"] = type("Stream", (_stream.Stream,), {
        "__slots__": (), "_backend_name": name, "__module__": module,
        "__doc__": f"""A stream of a {name} device: :class:`accelrt.Stream` whose ``device``
    defaults to the current {name} device and whose ``int`` device means a {name} index.

    Example::

        >>> import accelrt as acc
        >>> acc.{short}.Stream().device_type == {name!r}
        True
    """})
    defs["Event"] = type("Event", (_event.Event,), {
        "__slots__": (), "_backend_name": name, "__module__": module,
        "__doc__": f"""An event of a {name} device: :class:`accelrt.Event` whose ``device``
    defaults to the current {name} device and whose ``int`` device means a {name} index.

    Example::

        >>> import accelrt as acc
        >>> acc.{short}.Event().query()
        True
    """})

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


def _memory_functions() -> list[tuple[str, Callable[..., Any]]]:
    """Public functions of :mod:`accelrt.memory` (none if it cannot be imported yet)."""
    try:
        mem = importlib.import_module("accelrt.memory")
    except ImportError:
        return []
    names = getattr(mem, "__all__", None)
    if names is None:
        names = [n for n in dir(mem) if not n.startswith("_")]
    out = []
    for n in names:
        fn = getattr(mem, n, None)
        if inspect.isfunction(fn):
            out.append((n, fn))
    return out
