"""Every docstring example of the *installed* accelrt package runs and gives its output.

One test per module: it imports the module (skipped, with the reason, only when the import
fails because an optional library is missing) and runs its examples with the stdlib
:mod:`doctest`. pytest's ``--doctest-modules`` is not used on purpose: CI tests the installed
package from a virtual environment, and collecting the ``src`` tree would import it twice.

Each module's examples must also leave the process as they found it (current accelerator,
current devices and streams, environment, allocator settings, default RNG seeds, live
allocations), so that running them cannot change the outcome of other tests. They run
against the backend registry of a fresh process: backends registered by earlier tests are
hidden meanwhile, and backends the examples register are forgotten after them.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import importlib
import io
import os
import pkgutil
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.builds import compiled_module_names, is_extension, source_path

import accelrt
from accelrt import _backend, _device

#: Top-level names of the optional libraries whose absence skips a module.
OPTIONAL = frozenset({"cuda", "pyopencl", "cupy", "numba"})

OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_names() -> list[str]:
    names = [accelrt.__name__]
    # A subpackage that cannot be imported is still listed (its test reports why); its own
    # submodules cannot be listed without importing it.
    for info in pkgutil.walk_packages(accelrt.__path__, prefix="accelrt.", onerror=lambda n: None):
        names.append(info.name)
    return sorted(names)


def _missing_optional(exc: BaseException) -> str | None:
    """The optional library whose absence caused ``exc`` (following ``__cause__`` and
    ``__context__``), or None if ``exc`` has another cause."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ModuleNotFoundError) and e.name:
            top = e.name.partition(".")[0]
            return top if top in OPTIONAL else None
        e = e.__cause__ or e.__context__
    return None


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        lib = _missing_optional(exc)
        if lib is None:
            raise
        pytest.skip(f"{name} needs the optional library {lib!r}: {exc}")


def _global_state() -> dict[str, Any]:
    """What an example must not change for the tests that run after it, normalised so that
    equivalent states compare equal (a device index 0 or a default stream set explicitly
    equals the unset one; the lazily chosen accelerator is chosen before the first call)."""
    from accelrt import memory, random
    b = _device._current()
    count = 0 if b is None else b.device_count()
    streams = {key: s for key, s in _device._tls.stream.items()
               if s._handle != s._b.default_stream(s._index)}
    return {
        "accelerator": (_device._current_name, _device._current_backend),
        "devices": {name: i for name, i in _device._tls.device.items() if i != 0},
        "streams": streams,
        "environ": dict(os.environ),
        "allocator_settings": memory.get_allocator_settings(),
        # seeds only: drawing numbers advances the offset, as any use of the RNG does
        "rng_seeds": [state[:8].tobytes() for state in random.get_rng_state_all()],
        "allocated_bytes": [memory.memory_allocated(i) for i in range(count)],
    }


#: Backends a fresh process knows (built-in and entry points), seen before any test ran.
BASELINE_BACKENDS = frozenset(_backend.registered())


@contextlib.contextmanager
def _fresh_registry() -> Iterator[None]:
    """Run examples against the registry of a fresh process: hide the backends that earlier
    tests registered, and forget those the examples register (there is no public unregister;
    ``backends.register()`` examples register for real). Everything is put back after."""
    registry = (_backend._factories, _backend._instances, _backend._failures)
    with _backend._lock:
        hidden = [{n: d.pop(n) for n in list(d) if n not in BASELINE_BACKENDS} for d in registry]
    try:
        yield
    finally:
        with _backend._lock:
            for d, saved in zip(registry, hidden):
                for n in [n for n in d if n not in BASELINE_BACKENDS]:
                    del d[n]
                d.update(saved)


def _source_examples(module: Any, source: str, path: str) -> list[doctest.DocTest]:
    """The examples in the docstrings of ``source`` (the module, its classes, their methods;
    what :class:`doctest.DocTestFinder` finds in Python modules), to run in ``module``'s
    namespace. The compiled build (mypyc, setup.py) keeps no docstrings in its extension
    modules; their source ships beside them, so the same examples run against compiled code."""
    parser = doctest.DocTestParser()
    tests = []

    def visit(node: ast.AST, name: str) -> None:
        doc = ast.get_docstring(node, clean=False)  # type: ignore[arg-type]
        if doc and ">>>" in doc:
            line = node.body[0].lineno - 1 if not isinstance(node, ast.Module) else 0  # type: ignore[attr-defined]
            tests.append(parser.get_doctest(doc, dict(vars(module)), name, path, line))
        for child in getattr(node, "body", []):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue   # nested functions: doctest does not look there either
                visit(child, f"{name}.{child.name}")

    visit(ast.parse(source), module.__name__)
    return tests


def _compiled_source(module: Any) -> str | None:
    """The Python source shipped beside a module that mypyc compiled, or None for a Python
    module or a C extension, whose docstrings are its own (``accelrt.random._philox_host``)."""
    if not is_extension(module) or module.__name__ not in compiled_module_names():
        return None
    path = source_path(module)
    assert os.path.exists(path), f"{module.__name__} is compiled and its source is missing"
    return path


def _run_examples(module: Any) -> tuple[int, int, str]:
    """Run ``module``'s examples; return (attempted, failed, report)."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    out = io.StringIO()
    path = _compiled_source(module)
    if path is None:
        tests = finder.find(module, module.__name__)
    else:
        with open(path) as f:
            tests = _source_examples(module, f.read(), path)
    for test in sorted(tests, key=lambda t: t.name):
        runner.run(test, out=out.write, clear_globs=True)
    return runner.tries, runner.failures, out.getvalue()


def _check(module: Any) -> list[str]:
    """Problems with ``module``'s examples: failures, and global state they changed."""
    with _fresh_registry():
        before = _global_state()
        attempted, failed, report = _run_examples(module)
        after = _global_state()
    problems = []
    if failed:
        problems.append(f"{failed} of {attempted} examples failed in {module.__name__}:\n"
                        f"{report}")
    for key in sorted(k for k in before if before[k] != after[k]):
        problems.append(f"the examples of {module.__name__} changed global state {key!r}: "
                        f"{before[key]!r} -> {after[key]!r}")
    return problems


MODULES = _module_names()


def test_walk_finds_the_runtime_modules() -> None:
    for name in ("accelrt._stream", "accelrt._event", "accelrt._runtime", "accelrt.cpu",
                 "accelrt.cuda", "accelrt.memory", "accelrt.memory._summary", "accelrt.random"):
        assert name in MODULES


def test_missing_optional_library_is_recognised() -> None:
    other = ModuleNotFoundError("No module named 'scipy'", name="scipy")
    assert _missing_optional(other) is None
    assert _missing_optional(ImportError("cannot import name 'x'")) is None
    wrapped = ImportError("accelrt.interop.cupy needs cupy")
    wrapped.__cause__ = ModuleNotFoundError("No module named 'cupy'", name="cupy")
    assert _missing_optional(wrapped) == "cupy"
    nested = ModuleNotFoundError("No module named 'cuda.bindings'", name="cuda.bindings")
    assert _missing_optional(nested) == "cuda"


def test_import_skips_only_for_missing_optional_libraries(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_numba_xyz.py").write_text("import numba\n")
    (tmp_path / "needs_other_xyz.py").write_text("import not_an_optional_library_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "numba", None)  # as if numba were not installed
    with pytest.raises(pytest.skip.Exception, match="optional library 'numba'"):
        _import("needs_numba_xyz")
    with pytest.raises(ModuleNotFoundError, match="not_an_optional_library_xyz"):
        _import("needs_other_xyz")


def test_check_reports_failures_and_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELRT_DOCTEST_LEAK", raising=False)
    good = types.ModuleType("good_examples", ">>> 1 + 1\n2\n")
    assert _check(good) == []
    bad = types.ModuleType("bad_examples", ">>> 1 + 1\n3\n")
    assert "1 of 1 examples failed" in _check(bad)[0]
    leaky = types.ModuleType("leaky_examples", ">>> import os\n"
                             ">>> os.environ['ACCELRT_DOCTEST_LEAK'] = '1'\n")
    problems = _check(leaky)
    assert len(problems) == 1 and "changed global state 'environ'" in problems[0]
    registering = types.ModuleType("registering_examples", (
        ">>> from accelrt import backends\n"
        ">>> from accelrt.backends.cpu import CpuBackend\n"
        ">>> backends.register('doctestdev', lambda: CpuBackend(name='doctestdev'))\n"))
    assert _check(registering) == []
    assert "doctestdev" not in _backend.registered()  # forgotten after the examples


@pytest.mark.parametrize("name", compiled_module_names())
def test_source_examples_are_the_ones_doctest_finds(name: str) -> None:
    # the compiled build runs its modules' examples from their source (_source_examples):
    # on the pure build, that finds exactly what doctest finds in the module
    module = importlib.import_module(name)
    path = source_path(module)
    with open(path) as f:
        from_source = _source_examples(module, f.read(), path)
    found = doctest.DocTestFinder(exclude_empty=True).find(module, name)

    def examples(tests: list[doctest.DocTest]) -> dict[str, list[str]]:
        return {t.name: [e.source for e in t.examples] for t in tests if t.examples}

    if is_extension(module):   # mypyc keeps no docstrings: the source is where they live
        assert not examples(found)
    else:
        assert examples(from_source) == examples(found)


#: Modules whose examples leave backend handles alive on purpose (teardown leak check).
LEAKY_EXAMPLES = {
    # examples build standalone DeviceCachingAllocators on the shared cpu backend: their
    # pooled events for stream-ordered frees stay alive (an allocator has no close()), and
    # record_stream's example makes a raw backend stream it does not destroy
    "accelrt.memory._allocator": "standalone allocators keep their event pools",
    "accelrt.memory._events": "standalone allocators keep their event pools",
}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.leaks_ok(LEAKY_EXAMPLES[n])) if n in LEAKY_EXAMPLES else n
    for n in MODULES])
def test_docstring_examples(name: str) -> None:
    problems = _check(_import(name))
    assert not problems, "\n".join(problems)
