"""The opencl backend: every OpenCL device of every platform, over ``pyopencl``.

Install with ``pip install "accelrt[opencl]"`` plus an OpenCL driver (on CPUs, PoCL:
``pip install pocl-binary-distribution``). ``import accelrt`` never imports pyopencl; this
package imports it only when the backend is first used. See ``docs/opencl.md``.

Example::

    >>> from accelrt.backends import opencl
    >>> opencl.backend_class.name
    'opencl'
"""

from __future__ import annotations

from ._backend import OpenCLBackend

__all__ = ["OpenCLBackend", "backend_class"]

#: The class the backend registry instantiates for ``"opencl"``.
backend_class = OpenCLBackend
