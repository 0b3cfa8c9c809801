"""The package ships ``py.typed``: ``mypy --strict src/accelrt`` must report no error.

Skipped where mypy is not installed (``accelrt[test]`` installs it). Optional third-party
modules without type information (nvtx, pyopencl, pynvml, CuPy, Numba) are configured in
pyproject.toml's ``[tool.mypy]``. The check runs mypy in a subprocess with a fresh cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "accelrt"


def test_mypy_strict_package(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    assert (PACKAGE / "py.typed").is_file(), "src/accelrt/py.typed is missing"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MYPY")}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-color-output", "--no-pretty",
         "--cache-dir", str(tmp_path / "mypy_cache"), "src/accelrt"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=110, check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mypy --strict (exit {proc.returncode}):\n{output}"
