"""A real ``pip wheel`` on a machine without a C compiler: the pure-Python build, saying why.

The build choice itself is unit-tested in tests/memory/test_compiled_build.py; this builds a
wheel end to end through pip's build isolation (setuptools from the package index, as a user's
``pip install .`` does) with ``CC`` naming a compiler that does not exist. About 10 s; skipped
where the package index cannot be reached.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest
from helpers.builds import ROOT, compiled_module_names

_COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                      "*.so", "_build.json", ".pytest_cache", ".hypothesis",
                                      ".mypy_cache", ".ruff_cache", "tests", "bench", "docs")


def _pip_wheel(tree: pathlib.Path, out: pathlib.Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "ACCELRT_COMPILE"}
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(out), str(tree)], capture_output=True, text=True, timeout=300,
                          env=environ, check=False)


def test_without_a_compiler_pip_builds_the_pure_wheel(tmp_path: pathlib.Path) -> None:
    tree = tmp_path / "src"
    shutil.copytree(ROOT, tree, ignore=_COPY_IGNORE)
    (tree / "README.md").write_text("accelrt\n")   # the package's readme, without the docs
    proc = _pip_wheel(tree, tmp_path / "wheels", CC="/nonexistent/cc", CXX="/nonexistent/c++")
    said = proc.stdout + proc.stderr
    if proc.returncode and ("Could not find a version" in said or "connection" in said.lower()):
        pytest.skip(f"the package index cannot be reached: {said.strip()[-300:]}")
    assert proc.returncode == 0, said[-3000:]
    (wheel,) = (tmp_path / "wheels").glob("accelrt-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        record = json.loads(z.read("accelrt/_build.json"))
    assert record["build"] == "pure" and record["modules"] == []
    assert "no working C compiler was found ('/nonexistent/cc'" in record["reason"]
    assert not [n for n in names if n.endswith(".so")]       # no mypyc module, no shim
    for module in compiled_module_names():                   # the sources are all there
        assert module.replace(".", "/") + ".py" in names

    # ACCELRT_COMPILE=1 on the same machine: a clear failure, not a pure wheel
    proc = _pip_wheel(tree, tmp_path / "wheels1", CC="/nonexistent/cc", ACCELRT_COMPILE="1")
    assert proc.returncode != 0
    assert "ACCELRT_COMPILE=1 asks for the compiled build, but no working C compiler" in (
        proc.stdout + proc.stderr)
