"""The compiled build (mypyc; the default where a C compiler is found, setup.py): the flag
that says which build is loaded, and the build script's choice between the pure and the
compiled build.

The same suite runs on both builds (.ci/run tests the compiled wheel too); these tests check
what tells them apart."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import pathlib
import sys
import threading
from types import ModuleType
from typing import Any

import pytest
from helpers.builds import ROOT, compiled_module_names, is_extension

from accelrt import cli, memory


def _load(name: str, *path: str) -> ModuleType:
    """The file ``ROOT/path`` as the module ``name`` (a build script, not a package module)."""
    spec = importlib.util.spec_from_file_location(name, ROOT.joinpath(*path))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _setup_script() -> ModuleType:
    """setup.py as a module (its ``setup()`` call runs only as a script)."""
    return _load("accelrt_setup_script", "setup.py")


def test_flag_says_which_build_is_loaded() -> None:
    assert isinstance(memory.compiled, bool)
    names = compiled_module_names()
    assert "accelrt.memory._allocator" in names
    loaded = {name: is_extension(importlib.import_module(name)) for name in names}
    # all of them compiled, or none: a partial build would make the flag lie
    assert set(loaded.values()) == {memory.compiled}, loaded
    # and the C Philox (setup.py's PHILOX), the C free list (FREE_LIST), the C block map
    # (BLOCK_MAP), the C lock (LOCK) and the C memory owner (OWNER) come and go with them
    from accelrt import _memory_owner
    from accelrt.memory import _block_map, _free_list, _lock
    from accelrt.random import _philox
    assert (_memory_owner._Memory is not _memory_owner.PyMemory) == memory.compiled
    assert is_extension(importlib.import_module("accelrt._memory_owner_c")) if (
        memory.compiled) else importlib.util.find_spec("accelrt._memory_owner_c") is None
    assert (_philox._kernel is not None) == memory.compiled
    assert (_free_list.FreeList is not _free_list.PyFreeList) == memory.compiled
    assert (_block_map.BlockMap is not _block_map.PyBlockMap) == memory.compiled
    assert (_lock.FastLock is not _lock.PyFastLock) == memory.compiled


def test_info_reports_the_build() -> None:
    info = cli.collect_info(self_check=False, backends=["cpu"])
    assert info["allocator_build"] == ("compiled" if memory.compiled else "pure")
    assert f"caching allocator: {info['allocator_build']} build" in cli.format_info(info)
    # the C Philox comes with the compiled build
    assert info["random_host"] == ("C" if memory.compiled else "numpy")
    assert f"host random numbers: {info['random_host']} (" in cli.format_info(info)
    # and names the instruction set of its loops
    if memory.compiled:
        from accelrt.random import _philox_host
        assert info["random_host_isa"] == _philox_host.isa()
        assert f"{_philox_host.isa()} loops)" in cli.format_info(info)
    else:
        assert info["random_host_isa"] is None


def test_pure_modules_stay_pure() -> None:
    # frame capture (recorded stacks) and the fork-safe lock stay Python in every build
    for name in ("accelrt.memory._history", "accelrt.memory._lock", "accelrt.memory",
                 "accelrt._memory_owner"):
        assert not is_extension(importlib.import_module(name)), name


def _choice_module() -> ModuleType:
    """``_build/build_choice.py`` (what setup.py and the build backend decide with)."""
    return _load("accelrt_build_choice", "_build", "build_choice.py")


@pytest.fixture
def build_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No build variable set (as on a user's machine)."""
    for name in ("ACCELRT_COMPILE", "_ACCELRT_EDITABLE_BUILD", "_ACCELRT_METADATA_ONLY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("value,wanted", [(None, "auto"), ("", "auto"), ("0", "pure"),
                                          ("1", "compiled"), (" 1 ", "compiled")])
def test_the_variable_asks_for_a_build(value: str | None, wanted: str,
                                       build_env: pytest.MonkeyPatch) -> None:
    choice = _choice_module()
    if value is not None:
        build_env.setenv("ACCELRT_COMPILE", value)
    assert choice.requested() == wanted
    build_env.setenv("_ACCELRT_EDITABLE_BUILD", "1")    # editable installs: pure unless =1
    assert choice.requested() == ("compiled" if wanted == "compiled" else "pure")
    build_env.setenv("_ACCELRT_METADATA_ONLY", "1")     # metadata: never compiles
    assert choice.requested() == "pure"


def test_the_default_build_is_compiled_where_it_can_be(build_env: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    build_env.setattr(setup.choice, "compiler_problem", lambda: None)
    chosen = setup.choose()
    assert chosen.compiled and not chosen.required
    assert "ACCELRT_COMPILE unset and a C compiler found" in chosen.reason


def test_without_a_compiler_the_default_build_is_pure_and_says_why(
        build_env: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    build_env.setenv("CC", "/nonexistent/cc")   # distutils' compiler comes from CC
    chosen = setup.choose()
    assert not chosen.compiled
    assert "no working C compiler was found ('/nonexistent/cc'" in chosen.reason
    assert "install one, e.g. gcc" in chosen.reason
    assert setup.ext_modules(chosen) == ([], chosen)   # and mypyc is never imported
    build_env.setenv("ACCELRT_COMPILE", "1")           # =1: a clear failure instead
    with pytest.raises(SystemExit, match="ACCELRT_COMPILE=1 asks for the compiled build, but "
                                         "no working C compiler .* set ACCELRT_COMPILE=0"):
        setup.choose()


def test_missing_python_headers_are_named(build_env: pytest.MonkeyPatch,
                                          tmp_path: pathlib.Path) -> None:
    choice = _choice_module()
    build_env.setattr(choice.sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    problem = choice.compiler_problem()
    assert problem is not None and "Python.h is missing" in problem and "python3-dev" in problem


def test_the_pure_build_says_why(build_env: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    build_env.setenv("ACCELRT_COMPILE", "0")
    assert setup.choose() == setup.Choice(False, False,
                                          "ACCELRT_COMPILE=0 asks for the pure-Python build")
    assert setup.ext_modules() == ([], setup.choose())   # the pure build never imports mypyc
    build_env.delenv("ACCELRT_COMPILE")
    build_env.setenv("_ACCELRT_EDITABLE_BUILD", "1")
    assert "editable install" in setup.choose().reason


def test_bad_variable_value_is_refused(build_env: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    build_env.setenv("ACCELRT_COMPILE", "yes")
    with pytest.raises(SystemExit, match="ACCELRT_COMPILE='yes': use 1 for the compiled"):
        setup.choose()


def test_compiled_build_without_mypyc_fails_clearly(build_env: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    build_env.setattr(setup.choice, "compiler_problem", lambda: None)
    build_env.setitem(sys.modules, "mypyc", None)   # as if mypy were not installed
    build_env.setitem(sys.modules, "mypyc.build", None)
    chosen = setup.choose()                         # the default: pure, saying why
    assert not chosen.compiled and "mypyc is not installed" in chosen.reason
    build_env.setenv("ACCELRT_COMPILE", "1")
    with pytest.raises(SystemExit, match="needs mypyc .* install mypy first"):
        setup.choose()


def test_a_failed_mypyc_run_falls_back_to_pure_unless_required(
        build_env: pytest.MonkeyPatch) -> None:
    setup = _setup_script()
    import mypyc.build

    def broken(*args: object, **kwargs: object) -> list[object]:
        raise SystemExit(2)   # mypyc exits so on a type error

    build_env.setattr(mypyc.build, "mypycify", broken)
    build_env.chdir(ROOT)
    exts, chosen = setup.ext_modules(setup.Choice(True, False, "compiled"))
    assert exts == [] and not chosen.compiled and "mypyc failed" in chosen.reason
    with pytest.raises(SystemExit):
        setup.ext_modules(setup.Choice(True, True, "compiled (ACCELRT_COMPILE=1)"))


def _build_ext(setup: ModuleType, tmp_path: pathlib.Path, names: list[str]) -> Any:
    from setuptools import Distribution
    from setuptools.extension import Extension
    exts = [setup.SHIM if n == setup.SHIM.name else Extension(n, ["x.c"]) for n in names]
    cmd = setup.BuildExt(Distribution({"name": "accelrt", "ext_modules": exts}))
    cmd.build_lib, cmd.build_temp = str(tmp_path / "lib"), str(tmp_path / "tmp")
    cmd.ensure_finalized()
    return cmd


@pytest.mark.parametrize("required", [False, True])
def test_a_failed_c_compile_installs_the_pure_build_unless_required(
        required: bool, tmp_path: pathlib.Path, build_env: pytest.MonkeyPatch) -> None:
    from setuptools.command.build_ext import build_ext
    setup = _setup_script()
    built: list[list[str]] = []

    def build_extensions(self: Any) -> None:
        names = [e.name for e in self.extensions]
        built.append(names)
        if names != [setup.SHIM.name]:
            raise RuntimeError("error: command 'gcc' failed with exit code 1")

    build_env.setattr(build_ext, "build_extensions", build_extensions)
    build_env.setattr(setup.BuildExt, "chosen", setup.Choice(True, required, "compiled"))
    cmd = _build_ext(setup, tmp_path, [setup.SHIM.name, "accelrt__mypyc",
                                       "accelrt.memory._fit"])
    cmd.compiler = type("Compiler", (), {"compile": lambda *a, **k: []})()
    if required:
        with pytest.raises(RuntimeError, match="gcc"):
            cmd.build_extensions()
        return
    cmd.build_extensions()
    assert built == [[setup.SHIM.name, "accelrt__mypyc", "accelrt.memory._fit"],
                     [setup.SHIM.name]]   # then the shim alone: none of the group ships
    record = json.loads((tmp_path / "lib" / "accelrt" / "_build.json").read_text())
    assert record["build"] == "pure" and record["modules"] == []
    assert "the C compiler failed on the compiled modules (error: command 'gcc'" in (
        record["reason"])


def test_the_build_record_names_the_compiled_modules(tmp_path: pathlib.Path,
                                                     build_env: pytest.MonkeyPatch) -> None:
    from setuptools.command.build_ext import build_ext
    setup = _setup_script()
    build_env.setattr(build_ext, "build_extensions", lambda self: None)
    build_env.setattr(setup.BuildExt, "chosen", setup.Choice(True, False, "compiled because"))
    cmd = _build_ext(setup, tmp_path, [setup.SHIM.name, "accelrt__mypyc"])
    cmd.compiler = type("Compiler", (), {"compile": lambda *a, **k: []})()
    cmd.build_extensions()
    record = json.loads((tmp_path / "lib" / "accelrt" / "_build.json").read_text())
    assert record == {"build": "compiled", "reason": "compiled because",
                      "modules": compiled_module_names()}


def test_the_sources_of_one_extension_compile_in_parallel(tmp_path: pathlib.Path,
                                                          build_env: pytest.MonkeyPatch) -> None:
    # the compiled build's large extension is one C file per module (mypyc's multi_file):
    # compiling them on every core is most of the install time on 2 cores
    from setuptools.command.build_ext import build_ext
    setup = _setup_script()
    build_env.setattr(build_ext, "build_extensions", lambda self: None)
    build_env.setattr(setup.os, "cpu_count", lambda: 2)
    gate = threading.Barrier(2, timeout=30)   # both sources must be compiling at once
    calls: list[list[str]] = []

    class Compiler:
        def compile(self, sources: list[str], *args: object) -> list[str]:
            calls.append(sources)
            if len(sources) == 1 and sources[0] in ("a.c", "b.c"):
                gate.wait()
            return [s.replace(".c", ".o") for s in sources]

    cmd = _build_ext(setup, tmp_path, [setup.SHIM.name])
    cmd.compiler = Compiler()
    cmd.build_extensions()
    assert cmd.compiler.compile(["a.c", "b.c", "c.c"], "out") == ["a.o", "b.o", "c.o"]
    assert sorted(calls) == [["a.c"], ["b.c"], ["c.c"]]
    assert cmd.compiler.compile(["d.c"]) == ["d.o"]


def _build_backend() -> ModuleType:
    """The in-tree PEP 517 build backend (``_build/backend.py``) as a module."""
    return _load("accelrt_build_backend", "_build", "backend.py")


@pytest.mark.parametrize("hook", ["prepare_metadata_for_build_wheel",
                                  "prepare_metadata_for_build_editable"])
def test_metadata_is_prepared_without_compiling(hook: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # pip prepares the metadata before it builds the wheel; the metadata is the same for both
    # builds, so compiling there (mypyc runs in setup.py) would only be thrown away
    backend = _build_backend()
    seen: list[str | None] = []

    def setuptools_hook(metadata_directory: str, config_settings: object = None) -> str:
        seen.append(backend.choice.requested())
        return "accelrt-0.1.0.dist-info"

    monkeypatch.setattr(backend._setuptools, hook, setuptools_hook)
    monkeypatch.setenv("ACCELRT_COMPILE", "1")
    assert getattr(backend, hook)("metadata-dir") == "accelrt-0.1.0.dist-info"
    assert seen == ["pure"]                            # setup.py ran as the pure build
    assert os.environ["ACCELRT_COMPILE"] == "1"        # and the wheel build still compiles
    assert backend.choice.requested() == "compiled"


@pytest.mark.parametrize("hook", ["get_requires_for_build_wheel",
                                  "get_requires_for_build_editable"])
def test_compiled_build_requires_what_mypyc_type_checks(hook: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # mypyc type-checks the package, which imports numpy: without numpy in the isolated build
    # environment the compiled build failed on a machine whose environment lacked numpy
    backend = _build_backend()
    monkeypatch.setattr(backend._setuptools, hook, lambda config_settings=None: ["wheel"])
    monkeypatch.setattr(backend.choice, "compiler_problem", lambda: None)
    monkeypatch.setenv("ACCELRT_COMPILE", "1")
    reqs = getattr(backend, hook)()
    names = {r.split(">")[0].split("=")[0].strip() for r in reqs}
    assert {"wheel", "mypy", "numpy"} <= names
    monkeypatch.setenv("ACCELRT_COMPILE", "0")
    assert getattr(backend, hook)() == ["wheel"]       # the pure build needs neither
    monkeypatch.delenv("ACCELRT_COMPILE")              # the default: a wheel compiles
    assert getattr(backend, hook)() == (["wheel"] if hook.endswith("editable") else reqs)
    monkeypatch.setattr(backend.choice, "compiler_problem", lambda: "no C compiler")
    assert getattr(backend, hook)() == ["wheel"]       # no compiler: no mypy to download
    monkeypatch.setenv("ACCELRT_COMPILE", "1")         # required: fails before downloading
    with pytest.raises(SystemExit, match="ACCELRT_COMPILE=1 asks for the compiled build, "
                                         "but no C compiler; or set ACCELRT_COMPILE=0"):
        getattr(backend, hook)()


def _allows_interpreted_subclasses(node: ast.ClassDef) -> bool:
    """Whether the class is decorated ``@mypyc_attr(allow_interpreted_subclasses=True)``."""
    return any(isinstance(d, ast.Call) and any(
        k.arg == "allow_interpreted_subclasses" and isinstance(k.value, ast.Constant)
        and k.value.value is True for k in d.keywords) for d in node.decorator_list)


def test_subclasses_of_compiled_classes_are_compiled_too() -> None:
    # mypyc refuses an interpreted class that inherits a compiled one ("interpreted classes
    # cannot inherit from compiled"): a subclass left out of COMPILED works in the pure build
    # and breaks the compiled one (it did for the cudaMallocAsync allocator). A class declared
    # @mypyc_attr(allow_interpreted_subclasses=True) may be subclassed by pure modules (the
    # cores of Stream and Event in _stream_core): mypyc builds it for that.
    compiled = set(compiled_module_names())
    classes: dict[str, str] = {}   # class name -> compiled module defining it
    for mod in compiled:
        tree = ast.parse((ROOT / "src" / (mod.replace(".", "/") + ".py")).read_text())
        classes.update((n.name, mod) for n in tree.body if isinstance(n, ast.ClassDef)
                       and not _allows_interpreted_subclasses(n))
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


def test_info_says_which_build_is_loaded_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt import _build_info
    loaded = _build_info.build_info()
    assert loaded.build == ("compiled" if memory.compiled else "pure") and loaded.reason
    info = cli.collect_info(self_check=False, backends=["cpu"])
    assert (info["build"], info["build_reason"]) == (loaded.build, loaded.reason)
    assert f": {loaded.reason}" in cli.format_info(info).splitlines()[1]

    def record(build: str, reason: str, modules: list[str]) -> None:
        monkeypatch.setattr(_build_info, "_record",
                            lambda: {"build": build, "reason": reason, "modules": modules})

    record("pure", "ACCELRT_COMPILE=0 asks for the pure-Python build", [])
    said = "ACCELRT_COMPILE=0 asks for the pure-Python build"
    assert _build_info.build_info() == ("pure", said, ())
    record("compiled", "compiled with mypyc", ["accelrt.memory._history"])   # inspects frames: pure
    said = _build_info.build_info()
    assert said.build == "pure" and said.modules == ()
    assert "compiled 1 modules, but 1 load from Python source (e.g. accelrt.memory._history)" in (
        said.reason)
    names = compiled_module_names()
    record("compiled", "compiled with mypyc", names)
    assert _build_info.build_info() == (
        ("compiled", "compiled with mypyc", tuple(names)) if memory.compiled else
        ("pure", (f"the build compiled {len(names)} modules, but {len(names)} load from "
                  f"Python source (e.g. {names[0]}): reinstall accelrt"), ()))
    monkeypatch.setattr(_build_info, "_record", lambda: None)   # a source tree
    assert _build_info.build_info().build == ("compiled" if memory.compiled else "pure")
    assert "accelrt.memory._history" not in " ".join(_build_info.build_info().modules)
    assert cli._build_line({}) == "build: unknown"   # an older accelrt's dict


@pytest.mark.parametrize("inplace", [False, True])
def test_a_pure_build_removes_compiled_modules_an_earlier_build_left(
        inplace: bool, tmp_path: pathlib.Path, build_env: pytest.MonkeyPatch) -> None:
    # pip builds in the source tree and reuses build/: a pure build after a compiled one
    # shipped the old extension modules (CI's pure install loaded a compiled allocator)
    from setuptools.command.build_ext import build_ext
    setup = _setup_script()
    build_env.setattr(build_ext, "build_extensions", lambda self: None)
    build_env.setattr(setup.BuildExt, "chosen", setup.Choice(False, False, "pure"))
    cmd = _build_ext(setup, tmp_path, [setup.SHIM.name])
    cmd.compiler = type("Compiler", (), {"compile": lambda *a, **k: []})()
    src = tmp_path / "src"
    if inplace:
        cmd.inplace = True
        build_env.setattr(cmd.get_finalized_command("build_py"), "get_package_dir",
                          lambda package: str(src / package.replace(".", "/")))
    roots = [tmp_path / "lib"] + ([src] if inplace else [])
    stale = [root / cmd.get_ext_filename(name) for root in roots
             for name in ("accelrt__mypyc", "accelrt.memory._allocator", "accelrt._size")]
    shim = tmp_path / "lib" / cmd.get_ext_filename(setup.SHIM.name)
    for path in [*stale, shim]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    cmd.build_extensions()
    assert [p for p in stale if p.exists()] == []
    assert shim.exists()   # what this build makes is not touched


def test_a_build_removes_compiled_modules_dropped_from_the_list(
        tmp_path: pathlib.Path, build_env: pytest.MonkeyPatch) -> None:
    # a module taken off COMPILED (compiling it did not pay) left its extension module in the
    # reused build/ folder, which shadowed the .py file and failed to import from the new group
    from setuptools.command.build_ext import build_ext
    setup = _setup_script()
    build_env.setattr(build_ext, "build_extensions", lambda self: None)
    build_env.setattr(setup.BuildExt, "chosen", setup.Choice(True, False, "compiled"))
    cmd = _build_ext(setup, tmp_path, [setup.SHIM.name, "accelrt__mypyc", "accelrt._size"])
    cmd.compiler = type("Compiler", (), {"compile": lambda *a, **k: []})()
    lib = tmp_path / "lib"
    dropped = lib / cmd.get_ext_filename("accelrt._transfer._dropped")
    kept = [lib / cmd.get_ext_filename(n) for n in ("accelrt__mypyc", "accelrt._size",
                                                     setup.SHIM.name)]
    for path in [dropped, *kept]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    cmd.build_extensions()
    assert not dropped.exists()
    assert all(p.exists() for p in kept)   # what this build makes is not touched


def test_the_c_sources_of_the_compiled_build_ship_in_every_sdist() -> None:
    # setuptools puts an extension's sources in the sdist only when setup.py declares the
    # extension, which a pure build (ACCELRT_COMPILE=0, or no mypyc) does not: MANIFEST.in
    # must, or a wheel built from that sdist on a machine with a compiler fails
    setup = _setup_script()
    manifest = (ROOT / "MANIFEST.in").read_text().splitlines()
    exts = [setup.PHILOX, setup.FREE_LIST, setup.BLOCK_MAP, setup.LOCK, setup.OWNER]
    for source in [s for ext in exts for s in [*ext.sources, *ext.depends]]:
        assert f"include {source}" in manifest, source
        assert (ROOT / source).is_file(), source
