"""Run ``mypy --strict`` on a user's snippet against this tree's ``src`` (the typing tests).

The runs of one test session share one mypy cache: the first analyses accelrt's modules,
and the later ones reuse that analysis (mypy checks each cached module's source hash and
options, so nothing stale is reused); each user script is checked afresh.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

_cache: Path | None = None


def _shared_cache() -> Path:
    global _cache
    if _cache is None:
        _cache = Path(tempfile.mkdtemp(prefix="accelrt-mypy-cache-"))
        atexit.register(shutil.rmtree, _cache, True)
    return _cache


def run_mypy(tmp: Path, source: str, name: str = "user_script.py",
             timeout: float = 170) -> subprocess.CompletedProcess[str]:
    """Write ``source`` to ``tmp/name`` and type-check it strictly against ``src``, with the
    session's shared cache and no ``MYPY*`` settings from the environment."""
    script = tmp / name
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MYPY")}
    env["MYPYPATH"] = str(SRC)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-color-output", "--no-pretty",
         "--no-error-summary", "--cache-dir", str(_shared_cache()), str(script)],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout, check=False)
