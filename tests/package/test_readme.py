"""The README's tour runs as written (on the CPU backend), so the docs cannot drift."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_tour_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks, "README.md has no python example"
    for code in blocks:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, check=False, env={"ACCELRT_ACCELERATOR": "cpu",
                                                           "PATH": "/usr/bin:/bin"})
        assert proc.returncode == 0, proc.stderr
        assert "memory summary" in proc.stdout


def test_readme_quick_start_has_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert 'pip install . && accelrt info' in text
    assert 'pip install ".[test]" && python -m pytest' in text
