"""accelrt's PEP 517 build backend: setuptools', plus mypy when the build is compiled.

The build is compiled with mypyc by default and pure Python when it cannot be (no C compiler or
Python headers) or when ``ACCELRT_COMPILE=0`` asks (see ``_build/build_choice.py`` and ``setup.py``).
For a compiled build the build requirements list mypy (mypyc ships with it), so pip's build
isolation installs it; a pure build never needs it, nor a C compiler. Editable installs are
pure unless ``ACCELRT_COMPILE=1`` asks.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the other PEP 517 hooks, unchanged)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_choice as choice  # noqa: E402  (the backend's own folder, as pip puts it on sys.path)

ENV = choice.ENV

#: What the compiled build needs besides setuptools: mypyc ships with mypy, and mypyc
#: type-checks the package, which imports numpy (without numpy in the build environment the
#: build worked only where the calling environment happened to have it installed).
COMPILE_REQUIRES = ["mypy>=1.10", "numpy>=1.24"]


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name] = value`` (``None``: unchanged) for the duration."""
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                del os.environ[name]
            else:
                os.environ[name] = old


def _compile_requirements(editable: bool) -> list[str]:
    """mypy and numpy when this build will try to compile, else nothing."""
    with _env(choice.EDITABLE_ENV, "1" if editable else None):
        wanted = choice.requested()   # raises on a bad ACCELRT_COMPILE
    if wanted == choice.PURE:
        return []
    problem = choice.compiler_problem()
    if problem is not None:
        if wanted == choice.COMPILED:   # fail before pip downloads mypy for nothing
            raise SystemExit(choice.required_but(problem))
        return []   # setup.py builds pure Python and says why
    return COMPILE_REQUIRES


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    # asking setuptools for its requirements runs setup.py before mypyc is installed: run it as
    # the pure build there (the requirements do not depend on the build)
    with _env(choice.METADATA_ENV, "1"):
        reqs = _setuptools.get_requires_for_build_wheel(config_settings)
    return [*reqs, *_compile_requirements(editable=False)]


def get_requires_for_build_editable(config_settings: dict[str, object] | None = None
                                    ) -> list[str]:
    with _env(choice.METADATA_ENV, "1"):
        reqs = _setuptools.get_requires_for_build_editable(config_settings)
    return [*reqs, *_compile_requirements(editable=True)]


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: dict[str, object] | None = None) -> str:
    # the metadata is the same for both builds; compiling to prepare it would be thrown away
    # (mypyc would run twice)
    with _env(choice.METADATA_ENV, "1"):
        return str(_setuptools.prepare_metadata_for_build_wheel(metadata_directory,
                                                                config_settings))


def prepare_metadata_for_build_editable(metadata_directory: str,
                                        config_settings: dict[str, object] | None = None) -> str:
    with _env(choice.METADATA_ENV, "1"):
        return str(_setuptools.prepare_metadata_for_build_editable(metadata_directory,
                                                                   config_settings))


def build_editable(wheel_directory: str, config_settings: dict[str, object] | None = None,
                   metadata_directory: str | None = None) -> str:
    with _env(choice.EDITABLE_ENV, "1"):
        return str(_setuptools.build_editable(wheel_directory, config_settings,
                                              metadata_directory))
