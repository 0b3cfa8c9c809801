"""The optional compiled build (``ACCELRT_COMPILE=1``, setup.py): the flag that says which
build is loaded, and the build script's choice between the pure and the compiled build.

The same suite runs on both builds (.ci/run tests the compiled wheel too); these tests check
what tells them apart."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from types import ModuleType

import pytest
from helpers.builds import ROOT, compiled_module_names, is_extension

from accelrt import cli, memory


def _setup_script() -> ModuleType:
    """setup.py as a module (its ``setup()`` call runs only as a script)."""
    spec = importlib.util.spec_from_file_location("accelrt_setup_script", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_flag_says_which_build_is_loaded() -> None:
    assert isinstance(memory.compiled, bool)
    names = compiled_module_names()
    assert "accelrt.memory._allocator" in names
    loaded = {name: is_extension(importlib.import_module(name)) for name in names}
    # all of them compiled, or none: a partial build would make the flag lie
    assert set(loaded.values()) == {memory.compiled}, loaded


def test_info_reports_the_build() -> None:
    info = cli.collect_info(self_check=False, backends=["cpu"])
    assert info["allocator_build"] == ("compiled" if memory.compiled else "pure")
    assert f"caching allocator: {info['allocator_build']} build" in cli.format_info(info)


def test_pure_modules_stay_pure() -> None:
    # frame capture (recorded stacks) and the fork-safe lock stay Python in every build
    for name in ("accelrt.memory._history", "accelrt.memory._lock", "accelrt.memory"):
        assert not is_extension(importlib.import_module(name)), name


@pytest.mark.parametrize("value,compiled", [(None, False), ("", False), ("0", False),
                                            ("1", True), (" 1 ", True)])
def test_build_choice_follows_the_variable(value: str | None, compiled: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    if value is None:
        monkeypatch.delenv("ACCELRT_COMPILE", raising=False)
    else:
        monkeypatch.setenv("ACCELRT_COMPILE", value)
    assert setup.compile_requested() is compiled
    if not compiled:
        assert setup.ext_modules() == []   # the pure build never imports mypyc


def test_bad_variable_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    monkeypatch.setenv("ACCELRT_COMPILE", "yes")
    with pytest.raises(SystemExit, match="ACCELRT_COMPILE='yes': use 1 for the compiled"):
        setup.compile_requested()


def test_compiled_build_without_mypyc_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    monkeypatch.setenv("ACCELRT_COMPILE", "1")
    monkeypatch.setitem(sys.modules, "mypyc", None)   # as if mypy were not installed
    monkeypatch.setitem(sys.modules, "mypyc.build", None)
    with pytest.raises(SystemExit, match="needs mypyc .* install mypy first"):
        setup.ext_modules()


def _build_backend() -> ModuleType:
    """The in-tree PEP 517 build backend (``_build/backend.py``) as a module."""
    spec = importlib.util.spec_from_file_location("accelrt_build_backend",
                                                  ROOT / "_build" / "backend.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("hook", ["prepare_metadata_for_build_wheel",
                                  "prepare_metadata_for_build_editable"])
def test_metadata_is_prepared_without_compiling(hook: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # pip prepares the metadata before it builds the wheel; the metadata is the same for both
    # builds, so compiling there (mypyc runs in setup.py) would only be thrown away
    backend = _build_backend()
    seen: list[str | None] = []

    def setuptools_hook(metadata_directory: str, config_settings: object = None) -> str:
        seen.append(os.environ.get("ACCELRT_COMPILE"))
        return "accelrt-0.1.0.dist-info"

    monkeypatch.setattr(backend._setuptools, hook, setuptools_hook)
    monkeypatch.setenv("ACCELRT_COMPILE", "1")
    assert getattr(backend, hook)("metadata-dir") == "accelrt-0.1.0.dist-info"
    assert seen == ["0"]                               # setup.py ran as the pure build
    assert os.environ["ACCELRT_COMPILE"] == "1"        # and the wheel build still compiles


@pytest.mark.parametrize("hook", ["get_requires_for_build_wheel",
                                  "get_requires_for_build_editable"])
def test_compiled_build_requires_what_mypyc_type_checks(hook: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # mypyc type-checks the package, which imports numpy: without numpy in the isolated build
    # environment the compiled build failed on a machine whose environment lacked numpy
    backend = _build_backend()
    monkeypatch.setattr(backend._setuptools, hook, lambda config_settings=None: ["wheel"])
    monkeypatch.setenv("ACCELRT_COMPILE", "1")
    reqs = getattr(backend, hook)()
    names = {r.split(">")[0].split("=")[0].strip() for r in reqs}
    assert {"wheel", "mypy", "numpy"} <= names
    monkeypatch.setenv("ACCELRT_COMPILE", "0")
    assert getattr(backend, hook)() == ["wheel"]       # the pure build needs neither


def test_subclasses_of_compiled_classes_are_compiled_too() -> None:
    # mypyc refuses an interpreted class that inherits a compiled one ("interpreted classes
    # cannot inherit from compiled"): a subclass left out of COMPILED works in the pure build
    # and breaks the compiled one (it did for the cudaMallocAsync allocator)
    compiled = set(compiled_module_names())
    classes: dict[str, str] = {}   # class name -> compiled module defining it
    for mod in compiled:
        tree = ast.parse((ROOT / "src" / (mod.replace(".", "/") + ".py")).read_text())
        classes.update((n.name, mod) for n in tree.body if isinstance(n, ast.ClassDef))
    offenders = []
    for path in sorted((ROOT / "src" / "accelrt").rglob("*.py")):
        mod = ".".join(path.relative_to(ROOT / "src").with_suffix("").parts)
        if mod in compiled:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    name = base.id if isinstance(base, ast.Name) else (
                        base.attr if isinstance(base, ast.Attribute) else None)
                    if name in classes:
                        offenders.append(f"{mod}.{node.name} subclasses {classes[name]}.{name}")
    assert not offenders, ("add these modules to setup.py's COMPILED (a compiled class's "
                           "subclass must be compiled): " + "; ".join(offenders))


#: Imports the compiled build cannot see: its build environment (pip's isolation) has mypy and
#: numpy only, and mypyc type-checks every module the compiled ones pull in.
_TEST_ONLY = {"pytest", "hypothesis"}


def test_compiled_packages_import_no_test_dependency() -> None:
    # mypyc follows the imports of each compiled module's package (``accelrt.testing`` holds
    # the allocator's test subclass); an ``import pytest`` there, even inside a function,
    # failed the compiled build's type check (backend_conformance.make_tests did)
    packages = {m.rsplit(".", 1)[0] for m in compiled_module_names()}
    offenders = []
    for package in sorted(packages):
        folder = ROOT / "src" / package.replace(".", "/")
        for path in sorted(folder.glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}"
                              for n in names if n.split(".")[0] in _TEST_ONLY]
    assert not offenders, ("import test-only packages by name (importlib) in packages that "
                           "hold compiled modules: " + "; ".join(offenders))
