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

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import cuda_stub

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings is not installed")
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    pytest.importorskip("nvtx", reason="nvtx is not installed")
    if cuda_stub.compiler() is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    names = sorted(n for n in dir(nvrtc) if n.startswith("nvrtc")
                   and callable(getattr(nvrtc, n)) and not isinstance(getattr(nvrtc, n), type))
    folder = tmp_path_factory.mktemp("cuda_stub_ctx")
    cuda_stub.build(folder, names)
    import accelrt
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(accelrt.__file__).resolve().parents[1]), str(ROOT / "tests"),
         os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "helpers.cuda_ctx", str(folder)],
                          cwd=ROOT / "tests", env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    data: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    if "skip" in data:
        pytest.skip(data["skip"])
    return data


def test_every_step_ran(report: dict[str, Any]) -> None:
    assert not report["errors"], "\n".join(report["errors"])
    assert report["checks"] >= 55


def test_the_current_context_follows_the_current_device(report: dict[str, Any]) -> None:
    assert not report["failures"], "\n".join(report["failures"])


def test_no_call_breaks_cudas_context_rules(report: dict[str, Any]) -> None:
    assert not report["problems"], "\n".join(report["problems"])
