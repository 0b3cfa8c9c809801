"""The device modules by backend name: the built-in ones register at import
(:func:`_register`, which also binds the module's names), :func:`device_module` makes one for a
third-party backend from the same classes the generated modules subclass.

Example::

    >>> import accelrt as acc
    >>> from accelrt._runtime import device_module
    >>> device_module("cpu") is acc.cpu._m
    True
"""

from __future__ import annotations

import inspect
import sys
import threading
import types
from typing import Any

from .. import _backend, _graph
from .. import _device as _dev
from .._fork import reinit_after_fork
from ._classes import Event, ExternalStream, Stream, StreamContext, device, device_of
from ._module import DeviceModule
from .._errors import type_shown

__all__ = ["device_module"]

_modules: dict[str, DeviceModule[Any, Any]] = {}
_modules_lock = reinit_after_fork(threading.Lock())
_BUILTIN = {"cpu": "accelrt.cpu", "cuda": "accelrt.cuda", "opencl": "accelrt.opencl"}


#: The classes of a device module (attributes of its :class:`DeviceModule`).
CLASSES = ("CUDAGraph", "Event", "ExternalStream", "Graph", "Stream", "StreamContext", "device",
           "device_index", "device_of", "graph")
#: Its submodules (``graphs`` is importable but, as in torch.cuda, not in ``__all__``).
SUBMODULES = ("graphs", "memory", "nvtx", "profiler", "random", "streams")
#: What every device module re-exports from :mod:`accelrt.memory` and :mod:`accelrt._errors`
#: (``torch.cuda.AcceleratorError`` and ``OutOfMemoryError`` are accelrt's one error tree's).
SHARED = ("AcceleratorError", "CUDAPluggableAllocator", "MemPool", "OutOfMemoryError",
          "PluggableAllocator", "get_allocator_settings", "set_allocator_settings")
#: ``torch.cuda``'s private names that libraries import (``from torch.cuda import _lazy_call,
#: _lazy_init`` in Megatron-LM), that TorchInductor's generated code enters
#: (``torch.cuda._DeviceGuard``) or PyTorch's own tests call (``_get_rng_state_offset``,
#: ``_set_rng_state_offset``): bound like the public functions, left out of ``__all__`` as in
#: torch.cuda.
PRIVATE = ("_DeviceGuard", "_get_rng_state_offset", "_lazy_call", "_lazy_init",
           "_set_rng_state_offset")
#: Its attributes read on each access (properties of :class:`DeviceModule`; in a built-in
#: device module, of :class:`LiveModule`).
LIVE = ("default_generators",)


class LiveModule(types.ModuleType):
    """The type of a built-in device module (``accelrt.cpu``, ...), set by :func:`_register`:
    a module whose :data:`LIVE` attributes are read from its :class:`DeviceModule` on each
    access, as ``torch.cuda.default_generators`` changes once CUDA is initialised.

    Example::

        >>> import accelrt as acc
        >>> type(acc.cpu).__name__, len(acc.cpu.default_generators) == acc.cpu.device_count()
        ('LiveModule', True)
    """

    @property
    def default_generators(self) -> tuple[Any, ...]:
        """:attr:`DeviceModule.default_generators` of this module."""
        m: DeviceModule[Any, Any] = self.__dict__["_m"]
        return m.default_generators

    @property
    def _initialized(self) -> bool:
        """:attr:`DeviceModule._initialized` of this module (``torch.cuda._initialized``, which
        ``torch.utils.checkpoint`` reads with ``getattr(device_module, "_initialized", False)``)."""
        m: DeviceModule[Any, Any] = self.__dict__["_m"]
        return m._initialized

    @_initialized.setter
    def _initialized(self, value: object) -> None:
        m: DeviceModule[Any, Any] = self.__dict__["_m"]
        m._initialized = value

    @_initialized.deleter
    def _initialized(self) -> None:
        m: DeviceModule[Any, Any] = self.__dict__["_m"]
        del m._initialized

    def __dir__(self) -> list[str]:
        return sorted({*self.__dict__, *LIVE})


#: The documentation of a device module's classes ({n}: the backend), set by :func:`_register`
#: where the generated module gives none; their examples are their bases'.
CLASS_DOCS = {
    "Event": "An event of a {n} device (``torch.cuda.Event``): an :class:`accelrt.Event` whose "
             "``int`` device is a {n} index.",
    "Stream": "A stream of a {n} device (``torch.cuda.Stream``): an :class:`accelrt.Stream` "
              "whose ``int`` device is a {n} index (``None`` or a negative index: the current "
              "{n} device), with :meth:`is_capturing` and :meth:`priority_range`.",
    "ExternalStream": "A non-owning stream object for a {n} stream from its handle "
                      "(``torch.cuda.ExternalStream``; see "
                      ":class:`accelrt._runtime.ExternalStream`).",
    "StreamContext": "``with StreamContext(stream):`` makes a {n} stream and its device "
                     "current, restoring both on exit; ``None`` is a no-op.",
    "device": "Context manager that makes a {n} device current and restores the previous "
              "one (``torch.cuda.device``); ``None`` or a negative index is a no-op.",
    "device_of": "Context manager that makes the device of an array, stream or event current "
                 "if it is a {n} device (a no-op otherwise), as ``torch.cuda.device_of``.",
    "device_index": "Context manager that sets the calling thread's current {n} device index "
                    "and restores the previous one (``None`` or a negative index: no-op).",
    "Graph": "A graph of {n} stream work (``torch.cuda.CUDAGraph``): :class:`accelrt.Graph` "
             "fixed to the {n} backend.",
    "graph": "``with graph(g):`` captures the body's {n} work into ``g`` on a side stream "
             "(``torch.cuda.graph``).",
}


def function_names(cls: type) -> list[str]:
    """The public methods of a module class, sorted: the functions its device module binds.

    Static methods, properties and class attributes are left out.

    Example::

        >>> from accelrt._runtime import DeviceModule
        >>> from accelrt._runtime._registry import function_names
        >>> "current_stream" in function_names(DeviceModule)
        True
    """
    names = {name for klass in cls.__mro__ for name, value in vars(klass).items()
             if not name.startswith("_") and inspect.isfunction(value)}
    return sorted(names)


def bindings(m: DeviceModule[Any, Any]) -> dict[str, Any]:
    """The module-level names of the device module of ``m``: its bound functions, classes,
    submodules, ``export_dot`` and the names shared with :mod:`accelrt.memory`.

    Example::

        >>> import accelrt as acc
        >>> from accelrt._runtime._registry import bindings
        >>> bindings(acc.cpu._m)["memory_allocated"] == acc.cpu.memory_allocated
        True
    """
    from .. import memory
    from .._errors import AcceleratorError, OutOfMemoryError
    from ..memory._pluggable import PluggableAllocator
    names: dict[str, Any] = {n: getattr(m, n) for n in (*function_names(type(m)), *PRIVATE,
                                                         *CLASSES, *SUBMODULES)}
    names.update(export_dot=_graph.export_dot, AcceleratorError=AcceleratorError,
                 OutOfMemoryError=OutOfMemoryError,
                 MemPool=memory.MemPool, PluggableAllocator=PluggableAllocator,
                 CUDAPluggableAllocator=PluggableAllocator,
                 get_allocator_settings=memory.get_allocator_settings,
                 set_allocator_settings=memory.set_allocator_settings)
    return names


def _register(m: DeviceModule[Any, Any], namespace: dict[str, Any],
              *extra: str) -> tuple[str, ...]:
    """Record the :class:`DeviceModule` of a built-in device module (called at its import),
    make its submodules importable (``import accelrt.cuda.memory``, ``.graphs``, ``.random``,
    ``.streams``, ``.profiler``, ``.nvtx``, and ``.comm``: :mod:`accelrt.comm` itself, as
    ``torch.cuda.comm`` is ``torch.nn.parallel.comm``'s functions), document its classes
    (:data:`CLASS_DOCS`) and bind its :func:`bindings` and ``comm`` in the module's
    ``namespace`` (a name the module defines itself stays its own); the module becomes a
    :class:`LiveModule`. Returns the module's ``__all__``: every bound name but ``graphs`` and
    the :data:`PRIVATE` ones, ``comm``, the :data:`LIVE` names, plus ``extra``."""
    from .. import comm
    with _modules_lock:
        _modules[m.name] = m
    for sub in (m.memory, m.graphs, m.random, m.streams, m.profiler):
        sys.modules[sub.__name__] = sub
    sys.modules[f"{m.module}.nvtx"] = m.nvtx
    sys.modules[f"{m.module}.comm"] = comm
    names = bindings(m)
    names["comm"] = comm
    for name, doc in CLASS_DOCS.items():
        cls = names[name]
        if cls.__doc__ is None:
            cls.__doc__ = doc.format(n=m.name)
    for name, value in names.items():
        namespace.setdefault(name, value)
    module = sys.modules.get(m.module)
    if module is not None and module.__dict__ is namespace:
        module.__class__ = LiveModule
    return tuple(sorted({*names, *LIVE, *extra} - {"graphs", *PRIVATE}))


def device_module(name: str) -> DeviceModule[Stream[Event], Event]:
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
        raise TypeError(f"device_module() takes a backend name, got {type_shown(name)}")
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
