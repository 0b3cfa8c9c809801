"""Skip markers of the GPU-only test files (tests/backends/test_cuda_*gpu*.py): ``gpu`` needs a
usable CUDA backend, ``two_gpus`` two visible devices; each skip names why."""

from __future__ import annotations

import pytest

import accelrt as acc
from accelrt import _backend as registry

CUDA_REASON = registry.unavailable_reason("cuda")
gpu = pytest.mark.skipif(CUDA_REASON is not None, reason=f"needs a CUDA GPU: {CUDA_REASON}")


def two_gpus_reason() -> str | None:
    """Why two CUDA GPUs are not available here, or None."""
    if CUDA_REASON is not None:
        return f"needs two CUDA GPUs: {CUDA_REASON}"
    n = acc.cuda.device_count()
    return None if n >= 2 else f"needs two CUDA GPUs, {n} visible"


two_gpus = pytest.mark.skipif(two_gpus_reason() is not None, reason=str(two_gpus_reason()))
