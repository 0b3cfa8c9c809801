"""The CUDA profiler's collection switch (``accelrt.cuda.profiler``): ``cuProfilerStart`` and
``cuProfilerStop`` on a device's primary context, as ``torch.cuda.profiler`` calls
``cudaProfilerStart``/``cudaProfilerStop`` (the runtime API's wrappers of the same driver
calls). A profiler launched with collection off (``nsys profile --capture-range=cudaProfilerApi``,
``ncu --profile-from-start off``) records only between the two.

Example::

    >>> from accelrt.backends.cuda import _profiler
    >>> callable(_profiler.start)
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._errors import map_backend_errors
from ._cu import check

if TYPE_CHECKING:
    from ._backend import CudaBackend

__all__ = ["start", "stop"]


def start(b: CudaBackend, index: int) -> None:
    """``cuProfilerStart`` on device ``index``'s primary context (made current)."""
    with map_backend_errors(b.name, "profiler.start"):
        b._use(index)
        check(b._drv.cuProfilerStart(), "cuProfilerStart")


def stop(b: CudaBackend, index: int) -> None:
    """``cuProfilerStop`` on device ``index``'s primary context (made current)."""
    with map_backend_errors(b.name, "profiler.stop"):
        b._use(index)
        check(b._drv.cuProfilerStop(), "cuProfilerStop")
