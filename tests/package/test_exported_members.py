"""Every public name resolves and is documented."""

from __future__ import annotations

import importlib
import inspect

import pytest

import accelrt as acc


@pytest.mark.parametrize("name", acc.__all__)
def test_public_name_resolves_and_has_docstring(name: str) -> None:
    try:
        obj = getattr(acc, name)
    except ImportError as exc:  # a submodule's optional dependency is missing
        if name in ("cuda", "opencl", "interop"):
            pytest.skip(f"accelrt.{name} needs an optional dependency: {exc}")
        raise
    assert inspect.getdoc(obj), f"accelrt.{name} has no docstring"


def test_all_is_sorted_and_unique() -> None:
    assert list(acc.__all__) == sorted(set(acc.__all__))


@pytest.mark.parametrize("module", ["accelrt._stream", "accelrt._event", "accelrt._device",
                                    "accelrt.cpu", "accelrt._runtime", "accelrt.opencl",
                                    "accelrt.cuda"])
def test_runtime_modules_document_their_members(module: str) -> None:
    mod = importlib.import_module(module)
    assert mod.__doc__
    for name in mod.__all__:
        obj = getattr(mod, name)
        assert inspect.getdoc(obj), f"{module}.{name} has no docstring"
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (inspect.isfunction(member)
                                                 or isinstance(member, property)):
                    assert inspect.getdoc(member), f"{module}.{name}.{attr} has no docstring"


def test_dir_lists_public_names() -> None:
    assert set(acc.__all__) <= set(dir(acc))


def test_all_covers_every_lazy_name_and_submodule() -> None:
    # __all__ is a literal list (so type checkers see the re-exports): it must not drift
    from accelrt import _LAZY, _SUBMODULES
    assert set(_LAZY) | set(_SUBMODULES) <= set(acc.__all__)
    eager = set(acc.__all__) - set(_LAZY) - set(_SUBMODULES)
    assert all(name in vars(acc) for name in eager)
