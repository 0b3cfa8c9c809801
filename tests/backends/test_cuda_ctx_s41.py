"""The thread's current CUDA context follows accelrt's current cuda device, as torch keeps the
CUDA runtime's current device equal to its own (session 41).

``torch.cuda.set_device`` is ``c10::cuda::SetDevice`` (``cudaSetDevice``: the device's primary
context current, created if needed); a device guard (``torch.cuda.device``, the guard of every
operation on another device) exchanges the device on entry and restores it on exit with
``MaybeExchangeDevice``/``MaybeSetDevice``, which create no context on a device that has none.
accelrt's ``set_device`` and device/stream contexts now make the device's context current
(``CudaBackend.set_current_device``, called by the core only when the thread's current device
changes), and a raw operation on another device restores the current device's context before it
returns. Checked over the real ``cuda.bindings`` and the stand-in libcuda of
:mod:`helpers.cuda_stub`, whose model knows the current context of each thread
(:mod:`helpers.cuda_ctx` lists every step and the context expected after it); the GPU
counterpart is tests/backends/test_cuda_ctx_gpu_s41.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import cuda_stub

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return cuda_stub.run_scenario(tmp_path_factory, "cuda_ctx", "cuda_stub_ctx")


def test_every_step_ran(report: dict[str, Any]) -> None:
    assert not report["errors"], "\n".join(report["errors"])
    assert report["checks"] >= 55


def test_the_current_context_follows_the_current_device(report: dict[str, Any]) -> None:
    assert not report["failures"], "\n".join(report["failures"])


def test_no_call_breaks_cudas_context_rules(report: dict[str, Any]) -> None:
    assert not report["problems"], "\n".join(report["problems"])
