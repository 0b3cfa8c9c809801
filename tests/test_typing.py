"""The package ships ``py.typed``: ``mypy --strict src/accelrt`` must report no error.

Skipped where mypy is not installed. Errors in the CUDA backend files listed in
``EXCLUDED`` (typed against optional third-party modules, reviewed separately) are not
counted. The check runs mypy in a subprocess with a fresh cache (a few seconds).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "accelrt"

#: Path prefixes (relative to the repository root, ``/``-separated) whose errors are ignored.
EXCLUDED = (
    "src/accelrt/backends/cuda/",
    "src/accelrt/cuda.py",
    "src/accelrt/interop/cupy.py",
    "src/accelrt/interop/numba.py",
)

_ERROR = re.compile(r"(?P<path>[^:]+):\d+(?::\d+)?: error: ")


def counted_errors(output: str) -> list[str]:
    """The ``error:`` lines of mypy's ``output`` outside :data:`EXCLUDED`."""
    lines = []
    for line in output.splitlines():
        m = _ERROR.match(line)
        if m and not m.group("path").replace("\\", "/").startswith(EXCLUDED):
            lines.append(line)
    return lines


def test_counted_errors_filters_only_excluded_files() -> None:
    out = (
        "src/accelrt/backends/cuda/_nvtx.py:32: error: Skipping analyzing \"nvtx\"  [import-untyped]\n"
        "src/accelrt/backends/cuda/_nvtx.py:32: note: See https://mypy.readthedocs.io\n"
        "src/accelrt/cuda.py:5:3: error: Bad  [misc]\n"
        "src/accelrt/memory/_oom.py:80: error: \"OomMixin\" has no attribute \"x\"  [attr-defined]\n"
        "src/accelrt/cudax.py:1: error: Not excluded  [misc]\n"
        "Found 4 errors in 4 files (checked 70 source files)\n"
    )
    assert counted_errors(out) == [
        "src/accelrt/memory/_oom.py:80: error: \"OomMixin\" has no attribute \"x\"  [attr-defined]",
        "src/accelrt/cudax.py:1: error: Not excluded  [misc]",
    ]
    assert counted_errors("Success: no issues found in 70 source files\n") == []


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
    assert proc.returncode in (0, 1), f"mypy failed to run (exit {proc.returncode}):\n{output}"
    errors = counted_errors(output)
    assert not errors, "mypy --strict errors:\n" + "\n".join(errors)
