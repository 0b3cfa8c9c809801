"""The cpu backend: simulated devices over host memory (the reference backend).

Settings: ``ACCELRT_CPU_DEVICES`` (number of devices), ``ACCELRT_CPU_MEMORY`` (per-device
budget, e.g. ``8GiB``) and ``ACCELRT_CPU_STREAMS`` (``sync`` or ``async``); see ``docs/cpu.md``.

Example::

    >>> import accelrt as acc
    >>> acc.backends.get_backend("cpu").device_count() >= 1
    True
"""

from __future__ import annotations

from ._backend import CpuBackend

__all__ = ["CpuBackend", "backend_class"]

#: The class the backend registry instantiates for ``"cpu"``.
backend_class = CpuBackend
