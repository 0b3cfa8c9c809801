"""Running a test's script in a fresh interpreter on the cpu backend (the real-code ports of
tests/runtime/test_real_code_s38.py and test_real_code2_s38.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def run_cpu_script(script: str, **env: str) -> list[str]:
    """Run ``script`` (dedented) in a fresh interpreter on the cpu backend with ``env`` added;
    return its output lines (it asserts what it checks and fails with its traceback)."""
    full = dict(os.environ, ACCELRT_ACCELERATOR="cpu", **env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()
