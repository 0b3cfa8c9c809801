"""Issue 14 §4: a package that looks finished (metadata, license, clean namespaces, paths)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import accelrt as acc

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")


def _pyproject() -> dict:  # type: ignore[type-arg]
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_license_is_spdx_and_the_file_matches() -> None:
    project = _pyproject()["project"]
    assert project["license"] == "BSD-3-Clause"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License")
    assert "Neither the name of the copyright holder nor the names of its" in text
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639
    requires = _pyproject()["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77
               for r in requires)   # the first setuptools that reads license-files (PEP 639)


def test_classifiers_cover_python_versions_os_topic_status() -> None:
    project = _pyproject()["project"]
    cls = project["classifiers"]
    low = int(project["requires-python"].removeprefix(">=3."))
    assert f"Programming Language :: Python :: 3.{low}" in cls
    for prefix in ("Operating System ::", "Topic ::", "Development Status ::"):
        assert any(c.startswith(prefix) for c in cls), prefix


def test_version_has_one_source() -> None:
    project = _pyproject()["project"]
    assert "version" not in project and "version" in project["dynamic"]
    attr = _pyproject()["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "accelrt.__version__"
    tree = ast.parse((ROOT / "src" / "accelrt" / "__init__.py").read_text())
    literals = [n.value.value for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "__version__" for t in n.targets)
                and isinstance(n.value, ast.Constant)]
    assert literals == [acc.__version__]


def test_installed_metadata_matches() -> None:
    from importlib import metadata
    try:
        meta = metadata.metadata("accelrt")
    except metadata.PackageNotFoundError:
        pytest.skip("accelrt is not installed (run from a source tree)")
    assert meta["Version"] == acc.__version__


def test_no_exact_pins_in_dependencies() -> None:
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    pinned = [r for r in reqs if "==" in r.split(";")[0]]
    assert not pinned, f"exact pins: {pinned}"


def _public_view(mod: types.ModuleType) -> set[str]:
    subs = {n for n in dir(mod) if isinstance(getattr(mod, n, None), types.ModuleType)
            and getattr(mod, n).__name__.startswith(mod.__name__ + ".")}
    dunders = {n for n in dir(mod) if n.startswith("__") and n.endswith("__")}
    return set(dir(mod)) - set(mod.__all__) - dunders - subs


@pytest.mark.parametrize("name", ["accelrt", "accelrt.memory"])
def test_dir_holds_only_public_api(name: str) -> None:
    import importlib
    mod = importlib.import_module(name)
    acc.empty(4, device="cpu")            # load the lazy parts too
    stray = _public_view(mod)
    assert not stray, f"dir({name}) shows names outside its API: {sorted(stray)}"
    for gone in ("np", "os", "sys", "annotations", "Any", "TYPE_CHECKING", "importlib"):
        assert gone not in dir(mod)
    assert set(mod.__all__) <= set(dir(mod))


def test_dir_in_a_fresh_interpreter() -> None:
    code = ("import accelrt as acc, accelrt.memory as m\n"
            "print(sorted(n for n in dir(acc) + dir(m) if not n.startswith('_') and "
            "n not in acc.__all__ and n not in m.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: PLW1510
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("[]", "['viz']")


_TEXT = (".py", ".md", ".toml", ".cfg", ".txt", ".sh", ".yml", ".yaml")


def test_no_machine_specific_paths() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,  # noqa: PLW1510
                           timeout=60)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    bad = []
    pattern = re.compile(r"/work/|/home/\w|/root/")
    for rel in files.stdout.split():
        if not rel.endswith(_TEXT) or rel == "tests/package/test_packaging.py":
            continue
        for i, line in enumerate((ROOT / rel).read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                bad.append(f"{rel}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_readme_lists_every_environment_variable_the_code_reads() -> None:
    src = ROOT / "src" / "accelrt"
    names: set[str] = set()
    # the library, and the build scripts (ACCELRT_COMPILE picks the compiled build)
    for path in [*src.rglob("*.py"), ROOT / "setup.py", *(ROOT / "_build").glob("*.py")]:
        text = path.read_text()
        names |= set(re.findall(r"environ\.get\(\s*\"([A-Z_]+)\"", text))
        names |= set(re.findall(r"^(?:ENV\w*) = \"([A-Z_]+)\"", text, re.MULTILINE))
    assert {"ACCELRT_OPENCL_MEMORY", "CUDA_VISIBLE_DEVICES", "ACCELRT_ALLOC_CONF",
            "ACCELRT_COMPILE"} <= names
    readme = (ROOT / "README.md").read_text()
    missing = [n for n in sorted(names) if f"| `{n}` |" not in readme]
    assert not missing, f"README's environment table lacks {missing}"


def test_library_code_does_not_print() -> None:
    """Warnings and errors go through warnings/logging; only the command lines print."""
    # command-line entry points (accelrt, accelrt replay/tune/viz, python -m accelrt.distributed.run)
    allowed = {"cli.py", "_replay.py", "_tune.py", "viz.py", "run.py"}
    offenders = []
    for path in (ROOT / "src" / "accelrt").rglob("*.py"):
        if path.name in allowed:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_changelog_records_the_current_version() -> None:
    """CHANGELOG.md (Keep a Changelog) has an Unreleased section above the released ones, and
    the newest release is accelrt.__version__ (the one place the version lives)."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    heads = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert heads[:1] == ["Unreleased"], heads
    released = heads[1:]
    assert released and released[0] == acc.__version__, (released, acc.__version__)
    assert len(set(heads)) == len(heads), f"a section appears twice: {heads}"
