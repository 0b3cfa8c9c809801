"""The CUDA backend: NVIDIA GPUs through NVIDIA's own Python packages.

``cuda-bindings`` (driver API and NVRTC), ``nvidia-ml-py`` (NVML, for discovery and device
monitoring) and ``nvtx`` form the ``accelrt[cuda]`` extra. Importing this package does not
import them; discovery (:meth:`CudaBackend.unavailable_reason`) imports them lazily, asks NVML
first and never creates a CUDA context, so ``fork`` stays safe. See ``docs/cuda.md``.

Example::

    >>> from accelrt.backends import cuda
    >>> cuda.backend_class.name
    'cuda'
"""

from __future__ import annotations

from ._backend import CudaBackend
from ._cu import CudaError

__all__ = ["CudaBackend", "CudaError", "backend_class"]

#: The class the backend registry instantiates for ``"cuda"``.
backend_class = CudaBackend
