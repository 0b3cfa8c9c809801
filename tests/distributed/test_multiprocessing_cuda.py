"""CUDA IPC through accelrt.multiprocessing: two processes on one GPU.

Skipped without a usable CUDA backend. On a GPU machine run:
``.venv/bin/python -m pytest -q -p no:cacheprovider tests/distributed/test_multiprocessing_cuda.py``.
Each case is a script in a subprocess with a hard timeout (tests/helpers/mp_scripts.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from accelrt import _backend

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/
SCRIPTS = os.path.join(HERE, "helpers", "mp_scripts.py")

pytestmark = pytest.mark.skipif(_backend.unavailable_reason("cuda") is not None,
                                reason=f"cuda backend unavailable: "
                                       f"{_backend.unavailable_reason('cuda')}")


def _run(case: str, **env: str) -> str:
    full = dict(os.environ, **env)
    out = subprocess.run([sys.executable, SCRIPTS, case], env=full, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, f"{case} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_cuda_array_shared_between_two_processes() -> None:
    """IPC handle of the segment + offset, readiness event, writes both ways, the producer
    keeps its memory while the consumer holds it, ipc_collect frees it afterwards."""
    assert "ok" in _run("cuda_share").splitlines()


def test_cuda_expandable_segment_refuses() -> None:
    out = _run("cuda_refusals", ACCELRT_ALLOC_CONF="expandable_segments:True")
    assert "ok" in out.splitlines()
