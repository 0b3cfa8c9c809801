"""A pytest plugin that runs the session as if no NVRTC library were installed.

``-p helpers.no_nvrtc`` (with ``tests`` on ``PYTHONPATH``) makes
``accelrt.backends.cuda._kernels.nvrtc_version()`` answer ``None`` before any test module is
imported, so the CUDA backend loads the committed PTX of every kernel module (the driver
JIT-compiles it) instead of compiling CUBINs with NVRTC, and the tests that need NVRTC skip.
``scripts/gpu_check.py``'s ``ptx`` phase reruns the GPU kernel tests this way: the same as
uninstalling ``nvidia-cuda-nvrtc``, without touching the environment.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from accelrt.backends.cuda import _kernels
    # every caller looks the function up on the module at call time (_backend.arch_list too)
    _kernels.nvrtc_version = lambda: None
