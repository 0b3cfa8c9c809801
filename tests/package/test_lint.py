"""``ruff check`` passes over the whole tree with the rules in pyproject.toml's ``[tool.ruff]``.

Skipped where ruff is not installed (``accelrt[test]`` installs it). CONTRIBUTING.md says which
rule sets are selected and why the others are not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("ruff", reason="ruff is not installed (pip install accelrt[test])")
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
         *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )


def test_ruff_check_is_clean() -> None:
    proc = _ruff(".")
    assert proc.returncode == 0, f"ruff check (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"


def test_ruff_uses_the_project_rules(tmp_path: Path) -> None:
    """The configuration is found and applies: a file breaking selected rules fails."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f(x):\n    if x == None:\n        print(x)\n")
    proc = _ruff("--config", str(ROOT / "pyproject.toml"), str(bad), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for code in ("F401", "E711", "T201"):
        assert code in proc.stdout, f"{code} not reported:\n{proc.stdout}"
