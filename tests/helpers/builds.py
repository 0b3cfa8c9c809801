"""Which build of accelrt is under test: the pure-Python one or the compiled one (setup.py)."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def compiled_module_names() -> list[str]:
    """The modules the compiled build compiles: setup.py's ``COMPILED`` list, as names."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets):
            paths = ast.literal_eval(node.value)
            return [p.removeprefix("src/").removesuffix(".py").replace("/", ".") for p in paths]
    raise AssertionError("setup.py has no COMPILED list")


def is_extension(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from a compiled extension (not from Python source)."""
    origin = getattr(module, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def source_path(module: ModuleType) -> str:
    """The Python source of ``module``: its own file, or the one shipped beside a compiled
    extension (``x.cpython-311-x86_64-linux-gnu.so`` -> ``x.py``)."""
    path = module.__file__
    assert path is not None, f"{module.__name__} has no file"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if path.endswith(suffix):
            return path[:-len(suffix)] + ".py"
    return path


def both_builds_params(python: Any, c_module: str, name: str) -> list[Any]:
    """pytest params of a type in both builds: ``python`` (the pure build's, id "python") and
    ``name`` of the C module ``c_module`` (id "c"), skipped with the reason where the C module
    is not built (it comes with the compiled build)."""
    out = [pytest.param(python, id="python")]
    try:
        c = getattr(importlib.import_module(c_module), name)
    except ImportError:
        out.append(pytest.param(None, id="c", marks=pytest.mark.skip(
            reason=f"{c_module} is part of the compiled build, not built here")))
    else:
        out.append(pytest.param(c, id="c"))
    return out
