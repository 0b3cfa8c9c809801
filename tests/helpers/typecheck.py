"""Run ``mypy --strict`` on a user's snippet against this tree's ``src`` (the typing tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def run_mypy(tmp: Path, source: str, name: str = "user_script.py",
             timeout: float = 170) -> subprocess.CompletedProcess[str]:
    """Write ``source`` to ``tmp/name`` and type-check it strictly, with a cache in ``tmp``
    and no ``MYPY*`` settings from the environment."""
    script = tmp / name
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MYPY")}
    env["MYPYPATH"] = str(SRC)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-color-output", "--no-pretty",
         "--no-error-summary", "--cache-dir", str(tmp / "mypy_cache"), str(script)],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout, check=False)
