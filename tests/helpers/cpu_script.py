"""Running a test's script in a fresh interpreter on the cpu backend (the real-code ports of
tests/runtime/test_real_code_s38.py and test_real_code2_s38.py), and a batch of a test
module's scenarios in one (tests/distributed/test_torch_suite_mp_s35.py and
test_real_code_mp_s38.py)."""

from __future__ import annotations

import ast
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


def run_scenario_batch(paths: list[str], module: str, names: list[str],
                       env: dict[str, str]) -> dict[str, str]:
    """Import ``module`` (found on ``paths``) in a fresh interpreter with shared cpu memory and
    ``env``, and run its ``_batch_main(names)``, which prints ``name<TAB>repr(result)`` per
    scenario; return each name's result ("ok", a traceback, or why it did not run). A hard
    timeout (under pytest-timeout's 120 s) ends a batch whose scenario hung."""
    full = dict(os.environ, ACCELRT_CPU_SHARED_MEMORY="1", **env)
    code = (f"import sys; sys.path[:0] = {paths!r}; import {module} as m; "
            f"m._batch_main({names!r})")
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                              text=True, timeout=100, check=False)
        out, err = proc.stdout, proc.stderr[-3000:]
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else ""
        err = "the batch timed out (a scenario hung)"
    got = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    return {n: ast.literal_eval(got[n]) if n in got else f"did not run: {err}" for n in names}
