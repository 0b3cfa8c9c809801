"""The ``torch.cuda`` runtime, written once for every backend: :class:`DeviceModule` and the
classes that device modules (``accelrt.cuda``, ``accelrt.cpu``, ``accelrt.opencl``, and
:func:`device_module` for any registered backend) subclass.

The parts, by concept: :mod:`._args` (the one normaliser of device arguments),
:mod:`._classes` (``Stream``, ``Event``, ``device``, ...), :mod:`._base` (the bound backend and
its availability), :mod:`._memory` and :mod:`._random` (``torch.cuda.memory``/``.random``),
:mod:`._module` (:class:`DeviceModule`: devices, streams, properties, monitoring),
:mod:`._submodules` (``streams``, ``profiler``, ``graphs``), :mod:`._registry`
(:func:`device_module`), and the backend extras :mod:`._cpu` and :mod:`._cuda`. The modules
``accelrt/cpu.py``, ``cuda.py`` and ``opencl.py`` are generated from these by
``scripts/gen_device_modules.py`` (``tests/package/test_generated_device_modules.py`` fails
when one is stale).

A device module is a :class:`DeviceModule` bound to one backend whose methods are its
module-level names (bound by :func:`._registry._register`, typed for type checkers in the
generated stub ``_functions.pyi``), plus that module's own
:class:`Stream`, :class:`Event`, :class:`device`, :class:`device_of`, :class:`StreamContext`,
``Graph`` and ``graph`` subclasses fixed to the backend. Every name keeps ``torch.cuda``'s
signature and semantics; an ``int`` device means an index of *that* backend whatever the
current accelerator is, and a device of another type raises PyTorch's ``ValueError``
(``Expected a cuda device, but got: cpu``).

Where the backend cannot be used here (no driver, no device), PyTorch's rules hold:
``is_available``, ``device_count``, ``is_initialized``, ``is_current_stream_capturing`` and
``get_arch_list`` answer without raising; the statistics getters (``memory_stats``,
``memory_allocated``, ``max_memory_reserved``, ``memory_summary``, ...) report ``{}``/``0``;
``empty_cache``, ``empty_host_cache`` and the seeding functions (``manual_seed``, ``seed``,
...) are no-ops; everything else raises :class:`~accelrt.BackendUnavailableError` with the
reason.

Example::

    >>> import accelrt as acc
    >>> from accelrt._runtime import device_module
    >>> m = device_module("cpu")
    >>> m.device_count() >= 1, type(m.current_stream()).__name__
    (True, 'Stream')
    >>> with m.device(0):
    ...     m.current_device()
    0
"""

from __future__ import annotations

from ._classes import Event, Stream, StreamContext, device, device_of
from ._module import DeviceModule
from ._registry import device_module

__all__ = [
    "DeviceModule",
    "Event",
    "Stream",
    "StreamContext",
    "device",
    "device_module",
    "device_of",
]
