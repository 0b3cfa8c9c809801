"""``accelrt.interop``: share memory and streams with other CUDA Python libraries.

- :func:`cuda_array_interface` / :func:`consume_cuda_array_interface`: the
  ``__cuda_array_interface__`` (v3) dict of an accelrt array, and reading a producer's dict
  while honouring its ``stream`` field (the current accelrt stream waits for it).
- :mod:`accelrt.interop.cupy`: ``use_accelrt_allocator()`` makes CuPy allocate through
  accelrt's caching allocator.
- :mod:`accelrt.interop.numba`: ``AccelrtEMMPlugin`` and ``use_accelrt_memory_manager()`` make
  Numba allocate through it.
- :mod:`accelrt.interop.torch`: ``use_accelrt_allocator()`` makes PyTorch allocate CUDA memory
  through it (a shim for ``CUDAPluggableAllocator``); ``to_torch`` / ``from_torch`` share
  memory with tensors through DLPack.

DLPack needs no helper: ``np.from_dlpack(array)`` / ``acc.asarray(producer)`` work directly.
CuPy, Numba and PyTorch are imported only when their helpers are used; a missing one raises
:class:`accelrt.BackendUnavailableError` saying what to install. See ``docs/interop.md``.

Example::

    >>> import numpy as np
    >>> import accelrt as acc
    >>> a = acc.full((2,), 4.0, device="cpu:0")
    >>> np.from_dlpack(a).tolist()
    [4.0, 4.0]
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._cai import (
    CudaArrayInterface,
    consume_cuda_array_interface,
    cuda_array_interface,
    parse_cuda_array_interface,
    wait_for_stream,
)

if TYPE_CHECKING:
    # the lazy submodules, for type checkers only (at run time __getattr__ imports them on
    # first use): acc.interop.torch.from_torch is typed, and a typo is an error, not Any
    from . import cupy, numba, torch

__all__ = [
    "CudaArrayInterface",
    "consume_cuda_array_interface",
    "cuda_array_interface",
    "cupy",
    "numba",
    "parse_cuda_array_interface",
    "torch",
    "wait_for_stream",
]


def __dir__() -> list[str]:
    # the lazy names of __all__ (PEP 562 __getattr__) too, as tab completion expects
    return sorted(set(globals()) | set(__all__))


if not TYPE_CHECKING:  # hidden from type checkers: a typo must not type-check as ``Any``
    def __getattr__(name: str) -> Any:
        if name in ("cupy", "numba", "torch"):
            module = importlib.import_module(f".{name}", __name__)
            globals()[name] = module
            return module
        raise AttributeError(f"module 'accelrt.interop' has no attribute {name!r}")
