"""The device modules by backend name: the built-in ones register at import
(:func:`_register`), :func:`device_module` makes one for a third-party backend from the same
classes the generated modules subclass (:data:`CLASSES`).

Example::

    >>> import accelrt as acc
    >>> from accelrt._runtime import device_module
    >>> device_module("cpu") is acc.cpu._m
    True
"""

from __future__ import annotations

import sys
import threading
from typing import Any, TypeVar

from .. import _backend, _graph
from .. import _device as _dev
from .._fork import reinit_after_fork
from ._classes import Event, ExternalStream, Stream, StreamContext, device, device_of
from ._module import DeviceModule

__all__ = ["device_module"]

_modules: dict[str, DeviceModule[Any, Any]] = {}
_modules_lock = reinit_after_fork(threading.Lock())
_BUILTIN = {"cpu": "accelrt.cpu", "cuda": "accelrt.cuda", "opencl": "accelrt.opencl"}


_M = TypeVar("_M", bound="DeviceModule[Any, Any]")


def _register(m: _M) -> _M:
    """Record the :class:`DeviceModule` of a built-in device module (called at its import)
    and make its submodules importable (``import accelrt.cuda.memory``, ``.graphs``,
    ``.random``, ``.streams``, ``.profiler``, ``.nvtx``)."""
    with _modules_lock:
        _modules[m.name] = m
    for sub in (m.memory, m.graphs, m.random, m.streams, m.profiler):
        sys.modules[sub.__name__] = sub
    sys.modules[f"{m.module}.nvtx"] = m.nvtx
    return m


def device_module(name: str) -> DeviceModule[Stream, Event]:
    """The ``torch.cuda``-style runtime of a registered backend: for ``"cpu"``, ``"cuda"`` and
    ``"opencl"`` the object behind ``accelrt.cpu`` etc.; for a third-party backend, one made
    on first use with its own ``Stream``/``Event``/``Graph`` classes (printed as
    ``accelrt.<name>.Stream``). Re-exported as :func:`accelrt.backends.device_module`.

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: no backend of that name is registered.

    Example::

        >>> import accelrt as acc
        >>> m = acc.backends.device_module("cpu")
        >>> m.current_stream() == acc.cpu.current_stream()
        True
    """
    if not isinstance(name, str):
        raise TypeError(f"device_module() takes a backend name, got {type(name).__name__}")
    m = _modules.get(name)
    if m is not None:
        return m
    builtin = _BUILTIN.get(name)
    if builtin is not None:
        import importlib
        importlib.import_module(builtin)
        return _modules[name]
    if name not in _backend.registered():
        raise ValueError(f"no backend named {name!r} is registered (registered: "
                         f"{sorted(_backend.registered())}); register it with "
                         "accelrt.backends.register() first")
    module = f"accelrt.{name}"

    def make(base: type, cls_name: str, **extra: Any) -> Any:
        return type(cls_name, (base,), {"__slots__": (), "__module__": module,
                                        "__qualname__": cls_name, "_backend_name": name,
                                        **extra})

    ev = make(Event, "Event")
    stream_cls = make(Stream, "Stream", _event_class=ev)
    ext = type("ExternalStream", (ExternalStream, stream_cls),
               {"__slots__": (), "__module__": module, "__qualname__": "ExternalStream"})
    dev_cls = make(device, "device")
    graph_cls = make(_graph.DeviceGraph, "Graph")
    with _modules_lock:
        m = _modules.get(name)
        if m is None:
            m = _modules[name] = DeviceModule(
                name, module, stream=stream_cls, external_stream=ext, event=ev,
                stream_context=make(StreamContext, "StreamContext"), device=dev_cls,
                device_of=make(device_of, "device_of"),
                device_index=make(_dev.device_index, "device_index"), graph_class=graph_cls,
                graph=type("graph", (_graph.graph,), {"__module__": module,
                                                      "_graph_class": graph_cls}))
    return m
